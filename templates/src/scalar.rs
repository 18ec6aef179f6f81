//! Plain YAML scalars as the YAML 1.2 core schema reads them (`null`, booleans, integers in
//! decimal, octal and hexadecimal, floats, else a string): shared by the full parser
//! ([`crate::yaml`]) and its fast path for block documents ([`crate::block_yaml`]), which must
//! agree on every scalar.

use serde_json::{Number, Value};

/// Resolves a plain scalar with the YAML 1.2 core schema.
pub fn resolve_plain(s: &str) -> Value {
    resolve_non_string(s).unwrap_or_else(|| Value::String(s.to_string()))
}

/// What [`resolve_plain`] gives for `s` unless that is a string (asked without copying it).
pub(crate) fn resolve_non_string(s: &str) -> Option<Value> {
    match s {
        "" | "~" | "null" | "Null" | "NULL" => return Some(Value::Null),
        "true" | "True" | "TRUE" => return Some(Value::Bool(true)),
        "false" | "False" | "FALSE" => return Some(Value::Bool(false)),
        _ => {}
    }
    let bytes = s.as_bytes();
    let digits = |b: &[u8]| !b.is_empty() && b.iter().all(u8::is_ascii_digit);
    let unsigned = s.strip_prefix(['-', '+']).unwrap_or(s);
    if digits(unsigned.as_bytes()) {
        if let Ok(i) = s.parse::<i64>() {
            return Some(Value::Number(i.into()));
        }
        if let Ok(u) = s.parse::<u64>() {
            return Some(Value::Number(u.into()));
        }
    }
    if let Some(oct) = s.strip_prefix("0o")
        && let Ok(i) = i64::from_str_radix(oct, 8)
    {
        return Some(Value::Number(i.into()));
    }
    if let Some(hex) = s.strip_prefix("0x")
        && let Ok(i) = i64::from_str_radix(hex, 16)
    {
        return Some(Value::Number(i.into()));
    }
    if is_float(bytes)
        && let Some(n) = s.parse::<f64>().ok().and_then(Number::from_f64)
    {
        return Some(Value::Number(n));
    }
    None
}

fn is_float(b: &[u8]) -> bool {
    // [-+]? ( \. [0-9]+ | [0-9]+ ( \. [0-9]* )? ) ( [eE] [-+]? [0-9]+ )?
    let mut i = 0;
    if i < b.len() && (b[i] == b'-' || b[i] == b'+') {
        i += 1;
    }
    let int_start = i;
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
    }
    let int_digits = i - int_start;
    let mut frac_digits = 0;
    if i < b.len() && b[i] == b'.' {
        i += 1;
        let s = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        frac_digits = i - s;
    }
    if int_digits == 0 && frac_digits == 0 {
        return false;
    }
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        i += 1;
        if i < b.len() && (b[i] == b'-' || b[i] == b'+') {
            i += 1;
        }
        let s = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == s {
            return false;
        }
    }
    i == b.len()
}
