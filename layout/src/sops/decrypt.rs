//! The cryptography of a SOPS file: the data key from an age stanza, each ENC[…] value opened
//! with AES-256-GCM (sops uses 32-byte nonces and the value's key path as additional data), and
//! the MAC: SHA-512 over every value's plain bytes in document order, as sops spells them
//! (booleans `True`/`False`, numbers in decimal), stored encrypted with `lastmodified` as
//! additional data. Nothing here logs or formats a decrypted value into an error.

use std::io::Read;

use aes_gcm::aead::consts::U32;
use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{AesGcm, aes::Aes256};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Number, Value};
use sha2::{Digest, Sha256, Sha512};
use zeroize::Zeroizing;

use super::{Envelope, SopsError, joined, open, walk};

/// AES-256-GCM with the 32-byte nonces sops uses.
pub(super) type Cipher = AesGcm<Aes256, U32>;

/// The parts of an ENC[…] value.
pub(super) struct Enc {
    data: Vec<u8>,
    iv: Vec<u8>,
    tag: Vec<u8>,
    kind: String,
}

const KINDS: &[&str] = &["str", "int", "float", "bool", "bytes", "time", "comment"];

/// Parses `ENC[AES256_GCM,data:…,iv:…,tag:…,type:…]`; the reason when it is not one.
pub(super) fn parse_enc(s: &str) -> Result<Enc, String> {
    let not = || {
        "not an encrypted value (ENC[AES256_GCM,…]) where the file's rules encrypt one: in plain text, or edited by hand".to_string()
    };
    let body = s
        .strip_prefix("ENC[AES256_GCM,data:")
        .and_then(|b| b.strip_suffix(']'))
        .ok_or_else(not)?;
    let (data, rest) = body.split_once(",iv:").ok_or_else(not)?;
    let (iv, rest) = rest.split_once(",tag:").ok_or_else(not)?;
    let (tag, kind) = rest.split_once(",type:").ok_or_else(not)?;
    let b64 = |part: &str, what: &str| {
        STANDARD
            .decode(part)
            .map_err(|e| format!("the encrypted value's {what} is not base64: {e}"))
    };
    let enc = Enc {
        data: b64(data, "data")?,
        iv: b64(iv, "iv")?,
        tag: b64(tag, "tag")?,
        kind: kind.to_string(),
    };
    if enc.iv.len() != 32 || enc.tag.len() != 16 {
        return Err(
            "the encrypted value's iv or tag has the wrong length (sops writes 32 and 16 bytes)"
                .into(),
        );
    }
    if !KINDS.contains(&enc.kind.as_str()) {
        return Err(format!("unknown value type `{}`", enc.kind));
    }
    Ok(enc)
}

/// `lastmodified` as sops formats it for the MAC's additional data: RFC 3339, whole seconds,
/// `Z` for UTC (Go's time.RFC3339 layout applied to the parsed time).
pub(super) fn normalized_time(s: &str) -> Result<String, SopsError> {
    let bad = || SopsError::Metadata(format!("`sops.lastmodified` `{s}` is not an RFC 3339 time"));
    let b = s.as_bytes();
    let shape = |i: usize, c: u8| b.get(i) == Some(&c);
    if b.len() < 20
        || !(shape(4, b'-')
            && shape(7, b'-')
            && shape(10, b'T')
            && shape(13, b':')
            && shape(16, b':'))
        || !b[..19]
            .iter()
            .enumerate()
            .all(|(i, c)| [4, 7, 10, 13, 16].contains(&i) || c.is_ascii_digit())
    {
        return Err(bad());
    }
    let mut rest = &s[19..];
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(bad());
        }
        rest = &frac[digits..];
    }
    let zone = match rest {
        "Z" | "+00:00" | "-00:00" => "Z",
        z if z.len() == 6
            && (z.starts_with('+') || z.starts_with('-'))
            && z.as_bytes()[3] == b':'
            && z.bytes()
                .enumerate()
                .all(|(i, c)| i == 0 || i == 3 || c.is_ascii_digit()) =>
        {
            z
        }
        _ => return Err(bad()),
    };
    Ok(format!("{}{zone}", &s[..19]))
}

/// Opens one value with the data key.
fn open_value(key: &[u8], enc: &Enc, aad: &str) -> Option<Zeroizing<Vec<u8>>> {
    let cipher = Cipher::new_from_slice(key).ok()?;
    let mut msg = enc.data.clone();
    msg.extend_from_slice(&enc.tag);
    cipher
        .decrypt(
            aes_gcm::Nonce::<U32>::from_slice(&enc.iv),
            Payload {
                msg: &msg,
                aad: aad.as_bytes(),
            },
        )
        .ok()
        .map(Zeroizing::new)
}

/// The typed value of decrypted bytes (sops's `type:`); `None` when they do not parse as it.
fn typed(bytes: &[u8], kind: &str) -> Option<Value> {
    let s = std::str::from_utf8(bytes).ok()?;
    Some(match kind {
        "str" | "bytes" | "time" => Value::String(s.to_string()),
        "int" => Value::Number(s.parse::<i64>().ok()?.into()),
        "float" => Value::Number(Number::from_f64(s.parse::<f64>().ok()?)?),
        "bool" => Value::Bool(match s {
            "1" | "t" | "T" | "TRUE" | "true" | "True" => true,
            "0" | "f" | "F" | "FALSE" | "false" | "False" => false,
            _ => return None,
        }),
        _ => return None,
    })
}

/// A value's bytes in the MAC, as sops's ToBytes spells them.
pub(super) fn mac_bytes(v: &Value) -> Result<Vec<u8>, ()> {
    Ok(match v {
        Value::String(s) => s.as_bytes().to_vec(),
        Value::Bool(true) => b"True".to_vec(),
        Value::Bool(false) => b"False".to_vec(),
        Value::Number(n) => match n.as_i64() {
            Some(i) => i.to_string().into_bytes(),
            None => n.as_f64().ok_or(())?.to_string().into_bytes(),
        },
        Value::Null | Value::Array(_) | Value::Object(_) => return Err(()),
    })
}

/// The data key, from the first age stanza one of the identities opens.
fn data_key(
    env: &Envelope,
    identities: &[age::x25519::Identity],
) -> Result<Zeroizing<Vec<u8>>, SopsError> {
    for stanza in &env.age {
        let Ok(decryptor) =
            age::Decryptor::new_buffered(age::armor::ArmoredReader::new(stanza.enc.as_bytes()))
        else {
            continue;
        };
        let Ok(mut reader) = decryptor.decrypt(identities.iter().map(|i| i as &dyn age::Identity))
        else {
            continue;
        };
        let mut key = Zeroizing::new(Vec::new());
        if reader.read_to_end(&mut key).is_ok() && key.len() == 32 {
            return Ok(key);
        }
    }
    Err(SopsError::NoKey {
        recipients: env.recipients(),
    })
}

/// Decrypts a SOPS file with the given age identities: its documents, without `sops`, every
/// value in plain text — only once every value opened and the MAC matched.
pub fn decrypt(text: &str, identities: &[age::x25519::Identity]) -> Result<Vec<Value>, SopsError> {
    Ok(decrypt_keyed(text, identities)?.documents)
}

/// A decrypted file, and a hash keyed by its data key for what is made of it.
pub struct Opened {
    /// Its documents, without `sops`, in plain text.
    pub documents: Vec<Value>,
    /// Derived from the data key (never the key itself).
    salt: Zeroizing<[u8; 32]>,
}

impl Opened {
    /// The first 16 hex digits of SHA-256 over the salt and `text`: the content hash of an
    /// object made of decrypted values. Keyed, so that the hash (recorded on the object and in
    /// the status inventory) cannot be used to guess a value offline; stable while the data key
    /// is (`sops updatekeys` re-encrypts the data key for new recipients and keeps it).
    pub fn hash(&self, text: &str) -> String {
        let mut h = Sha256::new();
        h.update(self.salt.as_slice());
        h.update(text.as_bytes());
        hex::encode(h.finalize())[..16].to_string()
    }
}

impl std::fmt::Debug for Opened {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Opened({} documents)", self.documents.len())
    }
}

/// [`decrypt`], keeping a salt derived from the data key ([`Opened::hash`]).
pub fn decrypt_keyed(
    text: &str,
    identities: &[age::x25519::Identity],
) -> Result<Opened, SopsError> {
    let (mut docs, env) = open(text)?;
    let key = data_key(&env, identities)?;
    let mut hash = Sha512::new();
    for d in &mut docs {
        walk(d, &mut Vec::new(), &mut |v, path| {
            let dotted = || path.join(".");
            if env.rules.encrypts(path) {
                match v {
                    Value::String(s) if s.is_empty() => {}
                    Value::String(s) => {
                        let enc = parse_enc(s).map_err(|reason| SopsError::Value {
                            path: dotted(),
                            reason,
                        })?;
                        let plain = open_value(&key, &enc, &joined(path))
                            .ok_or_else(|| SopsError::Tampered(dotted()))?;
                        *v = typed(&plain, &enc.kind).ok_or_else(|| SopsError::Value {
                            path: dotted(),
                            reason: format!(
                                "the decrypted value is not of its type `{}`",
                                enc.kind
                            ),
                        })?;
                    }
                    _ => {
                        return Err(SopsError::Value {
                            path: dotted(),
                            reason: "in plain text where the file's rules encrypt it".into(),
                        });
                    }
                }
            }
            let bytes = mac_bytes(v).map_err(|()| SopsError::Value {
                path: dotted(),
                reason: "a null value, which sops cannot have written".into(),
            })?;
            hash.update(&bytes);
            Ok(())
        })?;
    }
    let computed = hex::encode_upper(hash.finalize());
    let mac = parse_enc(&env.mac).map_err(|reason| SopsError::Value {
        path: "sops.mac".into(),
        reason,
    })?;
    let stored =
        open_value(&key, &mac, &normalized_time(&env.lastmodified)?).ok_or(SopsError::Mac)?;
    if stored.as_slice() != computed.as_bytes() {
        return Err(SopsError::Mac);
    }
    let mut salt = Zeroizing::new([0u8; 32]);
    let mut h = Sha256::new();
    h.update(b"capstan sealed content hash v1\0");
    h.update(key.as_slice());
    salt.copy_from_slice(&h.finalize());
    Ok(Opened {
        documents: docs.iter().map(|d| d.to_value()).collect(),
        salt,
    })
}
