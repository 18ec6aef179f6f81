//! Writing a SOPS file (`capstan secret encrypt`): the format [`super::decrypt`] reads and the
//! `sops` tool decrypts — a fresh 32-byte data key encrypted to each age recipient (armored),
//! every value the rule selects encrypted with AES-256-GCM under a fresh 32-byte nonce and its
//! key path as additional data, the MAC over every value. Keys are written sorted (capstan's YAML
//! emitter sorts them), and the MAC is taken in that same order, which is the order `sops` then
//! reads the file in.

use std::io::Write;

use aes_gcm::aead::rand_core::RngCore;
use aes_gcm::aead::{Aead, KeyInit, OsRng, Payload};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use regex::Regex;
use serde_json::Value;
use sha2::{Digest, Sha512};
use zeroize::Zeroizing;

use super::decrypt::{Cipher, mac_bytes};
use super::tree::{self, Node};
use super::{Rules, SopsError, joined, walk};

/// The sops release whose format this writes (and the reader is checked against).
pub const FORMAT_VERSION: &str = "3.13.3";

/// What capstan encrypts: a Secret's values, nothing of its identity.
pub const DATA_ONLY: &str = "^(data|stringData)$";

/// Encrypts one value as sops does (`ENC[AES256_GCM,…,type:…]`).
fn seal(key: &[u8], v: &Value, aad: &str) -> Result<Value, SopsError> {
    let (bytes, kind) = match v {
        Value::String(s) => (s.as_bytes().to_vec(), "str"),
        Value::Bool(_) => (mac_bytes(v).unwrap_or_default(), "bool"),
        Value::Number(n) if n.is_i64() => (mac_bytes(v).unwrap_or_default(), "int"),
        Value::Number(_) => (mac_bytes(v).unwrap_or_default(), "float"),
        _ => {
            return Err(SopsError::Value {
                path: aad.trim_end_matches(':').replace(':', "."),
                reason: "a null value cannot be encrypted".into(),
            });
        }
    };
    let mut iv = [0u8; 32];
    OsRng.fill_bytes(&mut iv);
    let cipher = Cipher::new_from_slice(key).expect("a 32-byte key");
    let sealed = cipher
        .encrypt(
            aes_gcm::Nonce::<aes_gcm::aead::consts::U32>::from_slice(&iv),
            Payload {
                msg: &bytes,
                aad: aad.as_bytes(),
            },
        )
        .expect("AES-GCM encrypts any message");
    let (data, tag) = sealed.split_at(sealed.len() - 16);
    Ok(Value::String(format!(
        "ENC[AES256_GCM,data:{},iv:{},tag:{},type:{kind}]",
        STANDARD.encode(data),
        STANDARD.encode(iv),
        STANDARD.encode(tag)
    )))
}

fn sort(node: &mut Node) {
    match node {
        Node::Map(items) => {
            items.sort_by(|a, b| a.0.cmp(&b.0));
            items.iter_mut().for_each(|(_, v)| sort(v));
        }
        Node::Seq(items) => items.iter_mut().for_each(sort),
        Node::Scalar(_) => {}
    }
}

/// Encrypts `plain` (YAML, one or more documents) for `recipients`: the values under keys the
/// `encrypted_regex` matches are encrypted, every value is in the MAC. `lastmodified` is the
/// RFC 3339 time written (UTC, whole seconds).
pub fn encrypt(
    plain: &str,
    recipients: &[age::x25519::Recipient],
    encrypted_regex: &str,
    lastmodified: &str,
) -> Result<String, SopsError> {
    if recipients.is_empty() {
        return Err(SopsError::Unsupported(
            "no age recipient to encrypt for".into(),
        ));
    }
    let mut docs = tree::read(plain)?;
    if docs.is_empty() {
        return Err(SopsError::Yaml {
            line: 1,
            message: "nothing to encrypt".into(),
        });
    }
    if docs.iter().any(|d| d.get("sops").is_some()) {
        return Err(SopsError::Unsupported(
            "the file is encrypted already (it has `sops` metadata)".into(),
        ));
    }
    let rules = Rules {
        encrypted_regex: Some(
            Regex::new(encrypted_regex)
                .map_err(|e| SopsError::Metadata(format!("encrypted_regex: {e}")))?,
        ),
        ..Rules::default()
    };
    let mut key = Zeroizing::new([0u8; 32]);
    OsRng.fill_bytes(key.as_mut());
    let mut hash = Sha512::new();
    for d in &mut docs {
        sort(d);
        walk(d, &mut Vec::new(), &mut |v, path| {
            let bytes = mac_bytes(v).map_err(|()| SopsError::Value {
                path: path.join("."),
                reason: "a null value, which sops cannot encrypt (write \"\" or remove it)".into(),
            })?;
            hash.update(&bytes);
            if rules.encrypts(path) && v.as_str() != Some("") {
                *v = seal(key.as_ref(), v, &joined(path))?;
            }
            Ok(())
        })?;
    }
    let mac = seal(
        key.as_ref(),
        &Value::String(hex::encode_upper(hash.finalize())),
        lastmodified,
    )?;
    let mut armored = Vec::new();
    {
        let encryptor =
            age::Encryptor::with_recipients(recipients.iter().map(|r| r as &dyn age::Recipient))
                .map_err(|e| SopsError::Unsupported(format!("age: {e}")))?;
        let out =
            age::armor::ArmoredWriter::wrap_output(&mut armored, age::armor::Format::AsciiArmor)
                .map_err(|e| SopsError::Unsupported(format!("age: {e}")))?;
        let mut w = encryptor
            .wrap_output(out)
            .map_err(|e| SopsError::Unsupported(format!("age: {e}")))?;
        w.write_all(key.as_ref())
            .and_then(|()| w.finish())
            .and_then(|out| out.finish())
            .map_err(|e| SopsError::Unsupported(format!("age: {e}")))?;
    }
    let enc = String::from_utf8(armored).expect("armor is ASCII");
    let mut values: Vec<Value> = docs.iter().map(Node::to_value).collect();
    values[0]["sops"] = serde_json::json!({
        "age": recipients.iter().map(|r| serde_json::json!({"recipient": r.to_string(), "enc": enc})).collect::<Vec<_>>(),
        "encrypted_regex": encrypted_regex,
        "lastmodified": lastmodified,
        "mac": mac,
        "version": FORMAT_VERSION,
    });
    let text = if values.len() == 1 {
        capstan_templates::yaml::to_string(&values[0])
    } else {
        capstan_templates::yaml::to_string_multi(&values)
    };
    // YAML 1.1 readers (sops's) take an unquoted RFC 3339 time for a timestamp, and sops wants
    // the string: quoted, as sops writes it. The 1.2 emitter has no reason to quote it.
    let plain_time = format!("\n  lastmodified: {lastmodified}\n");
    Ok(text.replacen(
        &plain_time,
        &format!("\n  lastmodified: \"{lastmodified}\"\n"),
        1,
    ))
}

/// A time as RFC 3339 in UTC with whole seconds (`2026-12-03T07:44:00Z`), as sops writes
/// `lastmodified`.
pub fn rfc3339(t: std::time::SystemTime) -> String {
    let secs = t
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Days since 1970-01-01 to a civil date (proleptic Gregorian calendar).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3_600,
        rem % 3_600 / 60,
        rem % 60
    )
}
