//! Whether a literal is one Go's template parser accepts: its strings go through
//! `strconv.Unquote`, its character constants through `strconv.UnquoteChar`, its numbers through
//! `strconv.ParseUint`/`ParseInt`/`ParseFloat` (base 0: `0x`, `0o`, `0b`, a leading `0` for
//! octal, `_` between digits) and its complex constants through `fmt.Sscan`. Only acceptance
//! matters here (a template Go refuses is refused), not the values.

/// `strconv.UnquoteChar(s, quote)`: the bytes of one character (an `\x` escape is one byte,
/// which need not be UTF-8) and the rest, or None.
fn unquote_char(s: &str, quote: char) -> Option<(Vec<u8>, &str)> {
    let mut chars = s.chars();
    let c = chars.next()?;
    let utf8 = |c: char| c.to_string().into_bytes();
    if c == quote && (quote == '\'' || quote == '"') {
        return None;
    }
    if c != '\\' {
        return Some((utf8(c), chars.as_str()));
    }
    let e = chars.next()?;
    let rest = chars.as_str();
    let hex = |n: usize| -> Option<(u32, &str)> {
        let digits = rest.get(..n)?;
        if !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        Some((u32::from_str_radix(digits, 16).ok()?, &rest[n..]))
    };
    let simple = |v: char| Some((utf8(v), rest));
    match e {
        'a' => simple('\u{7}'),
        'b' => simple('\u{8}'),
        'f' => simple('\u{c}'),
        'n' => simple('\n'),
        'r' => simple('\r'),
        't' => simple('\t'),
        'v' => simple('\u{b}'),
        '\\' => simple('\\'),
        'x' => hex(2).map(|(v, r)| (vec![v as u8], r)),
        'u' | 'U' => {
            let (v, r) = hex(if e == 'u' { 4 } else { 8 })?;
            // utf8.ValidRune: not a surrogate, at most U+10FFFF.
            char::from_u32(v).map(|c| (utf8(c), r))
        }
        '0'..='7' => {
            let digits = rest.get(..2)?;
            let mut v = e as u32 - '0' as u32;
            for b in digits.bytes() {
                if !(b'0'..=b'7').contains(&b) {
                    return None;
                }
                v = (v << 3) | (b - b'0') as u32;
            }
            // An octal escape is one byte.
            (v <= 255).then(|| (vec![v as u8], &rest[2..]))
        }
        '\'' | '"' if e == quote => simple(e),
        _ => None,
    }
}

/// `strconv.Unquote` of a string token (quotes included): its value's bytes, or None where Go
/// refuses it.
pub(crate) fn unquote(token: &str) -> Option<Vec<u8>> {
    if let Some(raw) = token.strip_prefix('`') {
        let inner = raw.strip_suffix('`')?;
        return (!inner.contains('`')).then(|| inner.replace('\r', "").into_bytes());
    }
    let mut s = token.strip_prefix('"')?;
    let mut out = Vec::new();
    while !s.starts_with('"') {
        if s.starts_with('\n') {
            return None;
        }
        let (bytes, rest) = unquote_char(s, '"')?;
        out.extend(bytes);
        s = rest;
    }
    (s == "\"").then_some(out)
}

/// A character constant (`'a'`, `'\n'`): exactly one character between the quotes.
pub(crate) fn char_ok(token: &str) -> bool {
    token
        .strip_prefix('\'')
        .and_then(|s| unquote_char(s, '\''))
        .is_some_and(|(_, tail)| tail == "'")
}

/// `underscoreOK`: underscores only between digits (or after a base prefix).
fn underscore_ok(s: &str) -> bool {
    let s = s.strip_prefix(['+', '-']).unwrap_or(s);
    let b = s.as_bytes();
    let mut saw = b'^';
    let mut i = 0;
    let mut hex = false;
    if b.len() >= 2 && b[0] == b'0' && matches!(b[1].to_ascii_lowercase(), b'b' | b'o' | b'x') {
        i = 2;
        saw = b'0';
        hex = b[1].eq_ignore_ascii_case(&b'x');
    }
    for &c in &b[i..] {
        if c.is_ascii_digit() || (hex && c.is_ascii_hexdigit()) {
            saw = b'0';
        } else if c == b'_' {
            if saw != b'0' {
                return false;
            }
            saw = b'_';
        } else {
            if saw == b'_' {
                return false;
            }
            saw = b'!';
        }
    }
    saw != b'_'
}

/// `strconv.ParseUint(s, 0, 64)`; Err(true) for a value out of range, Err(false) for bad syntax.
fn parse_uint(s: &str) -> Result<u64, bool> {
    if s.is_empty() {
        return Err(false);
    }
    let b = s.as_bytes();
    let (base, digits) = if b[0] == b'0' {
        match b.get(1).map(u8::to_ascii_lowercase) {
            Some(b'b') if b.len() >= 3 => (2, &s[2..]),
            Some(b'o') if b.len() >= 3 => (8, &s[2..]),
            Some(b'x') if b.len() >= 3 => (16, &s[2..]),
            _ => (8, &s[1..]),
        }
    } else {
        (10, s)
    };
    let mut n: u64 = 0;
    let mut overflow = false;
    let mut underscores = false;
    for c in digits.bytes() {
        let d = match c {
            b'_' => {
                underscores = true;
                continue;
            }
            b'0'..=b'9' => c - b'0',
            _ if c.is_ascii_alphabetic() => c.to_ascii_lowercase() - b'a' + 10,
            _ => return Err(false),
        };
        if d as u32 >= base {
            return Err(false);
        }
        match n
            .checked_mul(base as u64)
            .and_then(|m| m.checked_add(d as u64))
        {
            Some(m) => n = m,
            None => overflow = true,
        }
    }
    if underscores && !underscore_ok(s) {
        return Err(false);
    }
    if overflow { Err(true) } else { Ok(n) }
}

/// `strconv.ParseInt(s, 0, 64)` succeeds.
fn parse_int_ok(s: &str) -> bool {
    let (neg, rest) = match s.as_bytes().first() {
        Some(b'+') => (false, &s[1..]),
        Some(b'-') => (true, &s[1..]),
        _ => (false, s),
    };
    match parse_uint(rest) {
        Ok(u) => u < (1 << 63) || (neg && u == 1 << 63),
        Err(_) => false,
    }
}

/// `strconv.ParseFloat(s, 64)` succeeds: Go's syntax (decimal, or hex with a `p` exponent;
/// underscores as in integers) and a finite result.
pub(crate) fn parse_float_ok(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    if matches!(b.first(), Some(b'+' | b'-')) {
        i = 1;
    }
    let hex = i + 2 < b.len() && b[i] == b'0' && b[i + 1].eq_ignore_ascii_case(&b'x');
    if hex {
        i += 2;
    }
    let mantissa_start = i;
    let (mut underscores, mut saw_dot, mut saw_digits) = (false, false, false);
    while i < b.len() {
        let c = b[i];
        if c == b'_' {
            underscores = true;
        } else if c == b'.' {
            if saw_dot {
                break;
            }
            saw_dot = true;
        } else if c.is_ascii_digit() || (hex && c.is_ascii_hexdigit()) {
            saw_digits = true;
        } else {
            break;
        }
        i += 1;
    }
    if !saw_digits {
        return false;
    }
    let mantissa_end = i;
    let exp_char = if hex { b'p' } else { b'e' };
    let mut exponent: i64 = 0;
    if i < b.len() && b[i].to_ascii_lowercase() == exp_char {
        i += 1;
        let mut sign = 1;
        match b.get(i) {
            Some(b'+') => i += 1,
            Some(b'-') => {
                i += 1;
                sign = -1;
            }
            _ => {}
        }
        if !b.get(i).is_some_and(u8::is_ascii_digit) {
            return false;
        }
        while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'_') {
            if b[i] == b'_' {
                underscores = true;
            } else if exponent < 10_000 {
                exponent = exponent * 10 + (b[i] - b'0') as i64;
            }
            i += 1;
        }
        exponent *= sign;
    } else if hex {
        return false;
    }
    if i != b.len() || (underscores && !underscore_ok(&s[..i])) {
        return false;
    }
    if hex {
        return hex_float_finite(&s[mantissa_start..mantissa_end], exponent);
    }
    let clean: String = s.chars().filter(|c| *c != '_').collect();
    clean.parse::<f64>().is_ok_and(f64::is_finite)
}

/// Whether a hex mantissa (`1.8`, underscores allowed) times 2^exponent rounds to a finite f64
/// (Go's `ParseFloat` refuses an overflow; an underflow is 0).
fn hex_float_finite(mantissa: &str, exponent: i64) -> bool {
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digit = |c: char| c.to_digit(16);
    let int_len = int.chars().filter_map(digit).count() as i64;
    let digits: Vec<u32> = int.chars().chain(frac.chars()).filter_map(digit).collect();
    let Some(first) = digits.iter().position(|d| *d != 0) else {
        return true;
    };
    // The value lies in [2^(top-1), 2^top).
    let lead = 32 - digits[first].leading_zeros();
    let top = (int_len - first as i64 - 1) * 4 + lead as i64 + exponent;
    if top != 1024 {
        return top < 1024;
    }
    // In [2^1023, 2^1024): infinite only when rounding to 53 bits carries out, that is when
    // the 53 leading bits are all ones and the next one is set.
    let mut bits: Vec<u32> = Vec::with_capacity(54);
    for (i, d) in digits[first..].iter().enumerate() {
        let width = if i == 0 { lead } else { 4 };
        for k in (0..width).rev() {
            bits.push((d >> k) & 1);
        }
        if bits.len() >= 54 {
            break;
        }
    }
    bits.resize(54, 0);
    !(bits[..53].iter().all(|b| *b == 1) && bits[53] == 1)
}

/// `fmt.Sscan`'s float token: the longest prefix its scanner takes as a number.
fn float_token(s: &str) -> &str {
    let b = s.as_bytes();
    let mut i = 0;
    let accept = |i: &mut usize, set: &[u8]| -> bool {
        if b.get(*i).is_some_and(|c| set.contains(c)) {
            *i += 1;
            true
        } else {
            false
        }
    };
    // NaN
    let mut j = 0;
    if accept(&mut j, b"nN") && accept(&mut j, b"aA") && accept(&mut j, b"nN") {
        return &s[..j];
    }
    accept(&mut i, b"+-");
    let mut j = i;
    if accept(&mut j, b"iI") && accept(&mut j, b"nN") && accept(&mut j, b"fF") {
        return &s[..j];
    }
    let mut digits: &[u8] = b"0123456789_";
    let mut exp: &[u8] = b"eEpP";
    if accept(&mut i, b"0") && accept(&mut i, b"xX") {
        digits = b"0123456789aAbBcCdDeEfF_";
        exp = b"pP";
    }
    while accept(&mut i, digits) {}
    if accept(&mut i, b".") {
        while accept(&mut i, digits) {}
    }
    if accept(&mut i, exp) {
        accept(&mut i, b"+-");
        while accept(&mut i, b"0123456789_") {}
    }
    &s[..i]
}

/// fmt's `convertFloat`: a decimal mantissa may carry a binary exponent (`1.5p3`).
fn convert_float_ok(s: &str) -> bool {
    if let Some(p) = s.find('p')
        && !s.contains(['x', 'X'])
    {
        return parse_float_ok(&s[..p]) && s[p + 1..].parse::<i64>().is_ok();
    }
    parse_float_ok(s)
}

/// `fmt.Sscan(text, &complex128)` succeeds: a real part, a sign, an imaginary part and `i`.
fn complex_ok(text: &str) -> bool {
    let real = float_token(text);
    let rest = &text[real.len()..];
    let Some(imag_body) = rest.strip_prefix(['+', '-']) else {
        return false;
    };
    let imag = float_token(imag_body);
    if !imag_body[imag.len()..].starts_with('i') {
        return false;
    }
    convert_float_ok(real) && convert_float_ok(&rest[..1 + imag.len()])
}

/// Why Go's `newNumber` refuses a number token, if it does (`complex`: a complex constant token).
pub(crate) fn number_error(text: &str, complex: bool) -> Option<String> {
    if complex {
        return (!complex_ok(text)).then(|| format!("expected complex number: {text:?}"));
    }
    if let Some(imaginary) = text.strip_suffix('i')
        && parse_float_ok(imaginary)
    {
        return None;
    }
    if parse_uint(text).is_ok() || parse_int_ok(text) {
        return None;
    }
    if parse_float_ok(text) {
        if !text.contains(['.', 'e', 'E', 'p', 'P']) {
            return Some(format!("integer overflow: {text:?}"));
        }
        return None;
    }
    Some(format!("illegal number syntax: {text:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_as_strconv_unquote() {
        for ok in [
            r#""""#,
            r#""a""#,
            r#""\"\\\n\t\x41\u00e9\U0001F600\101""#,
            "\"é\"",
            "`a\\\"b`",
            "``",
        ] {
            assert!(unquote(ok).is_some(), "{ok}");
        }
        for bad in [
            r#""\'""#,
            r#""\q""#,
            r#""\x4""#,
            r#""\400""#,
            r#""\uD800""#,
            r#""\U00110000""#,
            r#""\8""#,
        ] {
            assert!(unquote(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn a_string_has_the_value_go_gives_it() {
        assert_eq!(
            unquote(r#""\x41\101\u00e9""#),
            Some("AAé".as_bytes().to_vec())
        );
        assert_eq!(unquote(r#""\xff""#), Some(vec![0xff]));
        assert_eq!(unquote("`a\r\nb`"), Some(b"a\nb".to_vec()));
    }

    #[test]
    fn character_constants_hold_one_character() {
        for ok in ["'a'", r"'\''", r"'\n'", r"'\x7f'", "'é'", r"'\u00e9'"] {
            assert!(char_ok(ok), "{ok}");
        }
        for bad in ["''", "'ab'", r#"'\"'"#, r"'\z'"] {
            assert!(!char_ok(bad), "{bad}");
        }
    }

    #[test]
    fn numbers_as_go_parses_them() {
        for ok in [
            "0",
            "-0",
            "+7",
            "0777",
            "0x1F",
            "0X1f",
            "0o17",
            "0b101",
            "1_000",
            "0x_1",
            "1.5",
            ".5",
            "1.",
            "1e3",
            "1E+3",
            "1_0.5",
            "0x1p-2",
            "0x1.8P3",
            "2i",
            "1.5e3i",
            "01i",
            "18446744073709551615",
            "-9223372036854775808",
            "1e-400",
        ] {
            assert_eq!(number_error(ok, false), None, "{ok}");
        }
        for (bad, why) in [
            ("08", "integer overflow"),
            ("18446744073709551616", "integer overflow"),
            ("-9223372036854775809", "integer overflow"),
            ("1__0", "illegal"),
            ("1_", "illegal"),
            ("0x", "illegal"),
            ("0b", "illegal"),
            ("0x1.8", "illegal"),
            ("1e400", "illegal"),
            ("0x1p2000", "illegal"),
            (".", "illegal"),
            ("0b1i", "illegal"),
            ("0x1i", "illegal"),
            ("1._5", "illegal"),
            ("1e_5", "illegal"),
        ] {
            let e = number_error(bad, false).unwrap_or_default();
            assert!(e.starts_with(why), "{bad}: {e}");
        }
        for ok in ["1+2i", "-1.5e3-2i", "0x1p3+1i", "1_0+2i"] {
            assert_eq!(number_error(ok, true), None, "{ok}");
        }
        for bad in ["0b1+2i", "0x1+2i", "1+0b1i"] {
            assert!(number_error(bad, true).is_some(), "{bad}");
        }
    }
}
