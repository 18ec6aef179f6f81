//! Files encrypted with SOPS, read as the `sops` tool writes them, decrypted only in memory.
//!
//! ```text
//!   file text ──tree::read──▶ documents in written order ──Envelope::read──▶ metadata (`sops:`)
//!        check (no key): the shape `validate` checks at PR time — every value the file's rules
//!                        encrypt is an ENC[…] value, the version is 3.x, age recipients only
//!        decrypt (age identities): data key ◀─age─ `sops.age[].enc`; each ENC[…] value opened with
//!                        AES-256-GCM, its key path as additional data; the MAC over every value
//!                        (SHA-512, itself encrypted with `lastmodified` as additional data) must match
//! ```
//!
//! Why the MAC matters here: it covers the unencrypted values too (capstan refuses
//! `mac_only_encrypted`), so a file's `metadata.name` or `namespace` cannot be changed after
//! encryption, and the tenancy policy then judges the decrypted object exactly as a plain one:
//! a ciphertext copied from another cluster's directory still names that cluster's objects.
//! Identities come from the caller (the agent reads them from a Secret the admin names, never
//! from Git); PGP, cloud KMS and Vault keys, Shamir key groups and comment-driven rules are
//! refused with a reason.

mod decrypt;
mod encrypt;
mod tree;

use std::fmt;

use regex::Regex;
use serde_json::Value;
use thiserror::Error;

pub use decrypt::{Opened, decrypt, decrypt_keyed};
pub use encrypt::{DATA_ONLY, FORMAT_VERSION, encrypt, rfc3339};
use tree::Node;

/// The annotation that binds an encrypted Secret to where it may be decrypted: for an add-on the
/// workload cluster's name (`<management>/<set>` for a shared set), for a Secret applied on the
/// management cluster [`management_scope`]. Written before encryption, it is covered by the MAC,
/// so a file copied into another directory (to have the agent decrypt another cluster's Secret
/// into the copier's cluster, or a management-side Secret inside a workload cluster) is refused
/// there, and changing the annotation breaks the MAC.
pub const ENCRYPTED_FOR: &str = "capstan.dev/encrypted-for";

/// What [`ENCRYPTED_FOR`] says for a Secret of `cluster`'s own directory (the management
/// directory's: `cluster` is `mgmt`), applied on management cluster `mgmt`: `<mgmt>:<cluster>`.
pub fn management_scope(mgmt: &str, cluster: &str) -> String {
    format!("{mgmt}:{cluster}")
}

/// Why a SOPS file cannot be read, checked or decrypted. Never carries a decrypted value.
#[derive(Debug, Error, PartialEq)]
pub enum SopsError {
    /// The text is not YAML (or JSON) of the shape `sops` writes.
    #[error("line {line}: {message}")]
    Yaml { line: usize, message: String },
    /// The first document has no `sops` metadata.
    #[error("not a SOPS file: the first document has no `sops` metadata")]
    NotSops,
    /// The metadata is missing a field or has one of the wrong shape.
    #[error("SOPS metadata: {0}")]
    Metadata(String),
    /// Written by a SOPS version capstan does not read.
    #[error(
        "SOPS version `{0}` is not supported: capstan reads files written by sops 3.x (re-encrypt with `sops updatekeys` or a current sops)"
    )]
    Version(String),
    /// A feature of SOPS capstan does not support.
    #[error("{0}")]
    Unsupported(String),
    /// A value the file's rules encrypt is in plain text (or not a well-formed ENC[…] value).
    #[error("`{path}`: {reason}")]
    Value { path: String, reason: String },
    /// None of the identities given opens the data key.
    #[error(
        "no key capstan holds decrypts this file: it is encrypted for {recipients} (a file encrypted for another fleet, or the fleet's key was rotated without `sops updatekeys`)"
    )]
    NoKey { recipients: String },
    /// A value does not decrypt: changed, moved to another key, or encrypted with another data key.
    #[error("`{0}`: the value does not decrypt (changed or moved after encryption)")]
    Tampered(String),
    /// The MAC does not match the values: something was changed after encryption.
    #[error(
        "the MAC does not match: the file was changed after it was encrypted (edit it with `sops`, never by hand)"
    )]
    Mac,
}

/// Which values a file encrypts (`sops --encrypted-regex` and friends), as its metadata says.
#[derive(Debug, Clone, Default)]
pub struct Rules {
    unencrypted_suffix: Option<String>,
    encrypted_suffix: Option<String>,
    unencrypted_regex: Option<Regex>,
    encrypted_regex: Option<Regex>,
}

impl Rules {
    /// Whether the value at `path` is encrypted, as sops decides it: any key of the path may
    /// match; the encrypting rules win over the unencrypting ones when both are set.
    fn encrypts(&self, path: &[String]) -> bool {
        let mut encrypted = true;
        if let Some(s) = &self.unencrypted_suffix
            && path.iter().any(|k| k.ends_with(s.as_str()))
        {
            encrypted = false;
        }
        if let Some(s) = &self.encrypted_suffix {
            encrypted = path.iter().any(|k| k.ends_with(s.as_str()));
        }
        if let Some(r) = &self.unencrypted_regex
            && path.iter().any(|k| r.is_match(k))
        {
            encrypted = false;
        }
        if let Some(r) = &self.encrypted_regex {
            encrypted = path.iter().any(|k| r.is_match(k));
        }
        encrypted
    }
}

/// One age recipient of the data key.
#[derive(Debug, Clone, PartialEq)]
pub struct AgeStanza {
    /// The recipient (`age1…`).
    pub recipient: String,
    /// The data key encrypted to it (an armored age file).
    enc: String,
}

/// The `sops` metadata of a file: what can be known without a key.
#[derive(Debug, Clone)]
pub struct Envelope {
    /// The sops version that wrote the file.
    pub version: String,
    /// The age recipients the data key is encrypted to.
    pub age: Vec<AgeStanza>,
    /// Other key types present (`pgp`, `kms`, …), which capstan does not use.
    pub other_keys: Vec<&'static str>,
    lastmodified: String,
    mac: String,
    rules: Rules,
}

impl Envelope {
    /// The age recipients, comma-separated (for messages).
    pub fn recipients(&self) -> String {
        if self.age.is_empty() {
            return "no age recipient".into();
        }
        self.age
            .iter()
            .map(|a| a.recipient.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Key types sops writes besides age, which capstan refuses to use.
const OTHER_KEYS: &[&str] = &["pgp", "kms", "gcp_kms", "azure_kv", "hc_vault", "hckms"];

/// Whether a text is a SOPS file: its first document has a `sops` mapping with a `mac`.
/// Cheap enough to ask of every file of a tree (the text is only parsed if it says `sops:`).
pub fn is_sops(text: &str) -> bool {
    if !text.contains("sops") || !text.contains("mac") {
        return false;
    }
    tree::read(text).is_ok_and(|docs| {
        docs.first()
            .and_then(|d| d.get("sops"))
            .is_some_and(|s| s.get("mac").is_some())
    })
}

/// The file's documents without their `sops` key, and its metadata.
fn open(text: &str) -> Result<(Vec<Node>, Envelope), SopsError> {
    let mut docs = tree::read(text)?;
    let first = docs.first().ok_or(SopsError::NotSops)?;
    let meta = first.get("sops").ok_or(SopsError::NotSops)?.clone();
    for d in &mut docs {
        if let Node::Map(items) = d {
            items.retain(|(k, _)| k != "sops");
        }
    }
    Ok((docs, Envelope::read(&meta)?))
}

impl Envelope {
    fn read(meta: &Node) -> Result<Envelope, SopsError> {
        let Node::Map(items) = meta else {
            return Err(SopsError::Metadata("`sops` is not a mapping".into()));
        };
        let text = |key: &str| -> Result<Option<String>, SopsError> {
            match meta.get(key) {
                None => Ok(None),
                Some(n) => n
                    .text()
                    .map(Some)
                    .ok_or_else(|| SopsError::Metadata(format!("`sops.{key}` is not a scalar"))),
            }
        };
        let required = |key: &str| {
            text(key)?.ok_or_else(|| SopsError::Metadata(format!("`sops.{key}` is missing")))
        };
        let version = required("version")?;
        if version.split('.').next() != Some("3") {
            return Err(SopsError::Version(version));
        }
        for (key, _) in items {
            if key.ends_with("comment_regex") {
                return Err(SopsError::Unsupported(format!(
                    "`sops.{key}`: rules that follow comments are not supported (capstan reads no comments); use encrypted_regex or unencrypted_suffix"
                )));
            }
        }
        if meta.get("key_groups").is_some() || meta.get("shamir_threshold").is_some() {
            return Err(SopsError::Unsupported(
                "Shamir key groups (`sops.key_groups`) are not supported: encrypt to age recipients in one group".into(),
            ));
        }
        if meta
            .get("mac_only_encrypted")
            .is_some_and(|n| n == &Node::Scalar(Value::Bool(true)))
        {
            return Err(SopsError::Unsupported(
                "`mac_only_encrypted: true` is refused: the MAC must cover the plain values too (an object's name and namespace), or they could be changed after encryption".into(),
            ));
        }
        let regex = |key: &str| -> Result<Option<Regex>, SopsError> {
            text(key)?
                .map(|r| {
                    Regex::new(&r).map_err(|e| SopsError::Metadata(format!("`sops.{key}`: {e}")))
                })
                .transpose()
        };
        let rules = Rules {
            unencrypted_suffix: text("unencrypted_suffix")?,
            encrypted_suffix: text("encrypted_suffix")?,
            unencrypted_regex: regex("unencrypted_regex")?,
            encrypted_regex: regex("encrypted_regex")?,
        };
        let mut age = Vec::new();
        match meta.get("age") {
            None | Some(Node::Scalar(Value::Null)) => {}
            Some(Node::Seq(stanzas)) => {
                for (i, s) in stanzas.iter().enumerate() {
                    let field = |k: &str| {
                        s.get(k).and_then(Node::text).ok_or_else(|| {
                            SopsError::Metadata(format!("`sops.age[{i}].{k}` is missing"))
                        })
                    };
                    age.push(AgeStanza {
                        recipient: field("recipient")?,
                        enc: field("enc")?,
                    });
                }
            }
            Some(_) => return Err(SopsError::Metadata("`sops.age` is not a list".into())),
        }
        let other_keys = OTHER_KEYS
            .iter()
            .copied()
            .filter(|k| matches!(meta.get(k), Some(Node::Seq(s)) if !s.is_empty()))
            .collect::<Vec<_>>();
        if age.is_empty() {
            return Err(SopsError::Unsupported(if other_keys.is_empty() {
                "the file names no key to decrypt it with (`sops.age` is empty)".into()
            } else {
                format!(
                    "the file is encrypted only for {} keys: capstan decrypts with age (add an age recipient: `sops updatekeys` after listing it in .sops.yaml)",
                    other_keys.join(", ")
                )
            }));
        }
        Ok(Envelope {
            version,
            age,
            other_keys,
            lastmodified: required("lastmodified")?,
            mac: required("mac")?,
            rules,
        })
    }
}

/// A value's key path as sops joins it for the additional data (`data:password:`).
fn joined(path: &[String]) -> String {
    let mut s = path.join(":");
    s.push(':');
    s
}

/// Calls `leaf` on every scalar in document order with its key path (list items share their
/// list's path, as in sops).
fn walk<E>(
    node: &mut Node,
    path: &mut Vec<String>,
    leaf: &mut impl FnMut(&mut Value, &[String]) -> Result<(), E>,
) -> Result<(), E> {
    match node {
        Node::Map(items) => {
            for (k, v) in items {
                path.push(k.clone());
                walk(v, path, leaf)?;
                path.pop();
            }
        }
        Node::Seq(items) => {
            for v in items {
                walk(v, path, leaf)?;
            }
        }
        Node::Scalar(v) => leaf(v, path)?,
    }
    Ok(())
}

/// Checks what can be checked without a key: the metadata, and that every value the file's
/// rules encrypt is a well-formed ENC[…] value (a value added in plain text after encryption is
/// named). Returns the metadata, for the caller to compare the recipients with the fleet's.
pub fn check(text: &str) -> Result<Envelope, SopsError> {
    let (mut docs, env) = open(text)?;
    decrypt::parse_enc(&env.mac).map_err(|reason| SopsError::Value {
        path: "sops.mac".into(),
        reason,
    })?;
    decrypt::normalized_time(&env.lastmodified)?;
    for d in &mut docs {
        walk(d, &mut Vec::new(), &mut |v, path| {
            if !env.rules.encrypts(path) {
                return Ok(());
            }
            match v {
                Value::String(s) if s.is_empty() => Ok(()),
                Value::String(s) => decrypt::parse_enc(s).map(|_| ()).map_err(|reason| {
                    SopsError::Value {
                        path: path.join("."),
                        reason,
                    }
                }),
                _ => Err(SopsError::Value {
                    path: path.join("."),
                    reason: "in plain text where the file's rules encrypt it (encrypt the file again with `sops`)".into(),
                }),
            }
        })?;
    }
    Ok(env)
}

impl fmt::Display for AgeStanza {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.recipient)
    }
}

#[cfg(test)]
mod tests;
