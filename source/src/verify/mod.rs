//! Commit signature verification (`--verify-commits`): is a commit signed, by a key the
//! operator trusts, over exactly these bytes?
//!
//! ```text
//!   commit object ──gix: gpgsig header──▶ signature + signed bytes (the object without it)
//!                                           │
//!             -----BEGIN SSH SIGNATURE----- ├──▶ ssh.rs      allowed_signers, namespace "git"
//!             -----BEGIN PGP SIGNATURE----- └──▶ openpgp.rs  trusted public keys
//!                                           ▼
//!                    Ok(Verified { signer, fingerprint })  |  Err(Refused { why, detail })
//! ```
//!
//! Why it looks like this:
//!
//! - **Pure.** [`verify_commit`] takes the raw commit, the trusted keys and the time, and does no
//!   I/O: the agent, `capstan plan` and `capstan diff` share it, and every refusal is a test
//!   case. Signatures are checked with Rust crates (`ssh-key` for SSH signatures, `pgp` for
//!   OpenPGP), never by running `gpg` or `ssh-keygen`: their answer would depend on a keyring
//!   and a configuration the agent does not own.
//! - **Keys are judged as they are now.** An expired or revoked key refuses every commit it
//!   signed, whatever date the commit carries: the signer writes that date. (`gpg` judges key
//!   expiry alike; `git` hands ssh-keygen the commit's own date, which a holder of an expired key
//!   could backdate.)
//! - **A closed set of reasons** ([`Why`]): they label the refusal counter, so a hostile
//!   repository cannot grow its cardinality; the detail text names the key and the commit.

mod openpgp;
mod ssh;

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Why a commit was refused (the `reason` label of `capstan_commits_refused_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Why {
    /// The commit has no signature.
    Unsigned,
    /// The signature does not verify over the commit (tampered, or made for other data), or
    /// cannot be read.
    BadSignature,
    /// Signed by a key that is not trusted (or trusted for another namespace).
    UntrustedKey,
    /// The key has expired, or is outside its `valid-after`/`valid-before` window.
    ExpiredKey,
    /// The key has been revoked.
    RevokedKey,
    /// A signature format capstan does not verify (X.509), or a hash it refuses (MD5, SHA-1,
    /// RIPEMD-160).
    Unsupported,
    /// The trusted keys could not be read: nothing can be verified.
    NoTrustedKeys,
    /// The commit, or the history that must be verified, cannot be read from the repository.
    Unreadable,
    /// The head does not descend from the last verified commit: the branch was moved back to an
    /// older or unrelated commit (`--allow-rollback` admits it).
    Rollback,
}

impl Why {
    /// Every reason, for pre-creating the counter's series.
    pub const ALL: &'static [Why] = &[
        Why::Unsigned,
        Why::BadSignature,
        Why::UntrustedKey,
        Why::ExpiredKey,
        Why::RevokedKey,
        Why::Unsupported,
        Why::NoTrustedKeys,
        Why::Unreadable,
        Why::Rollback,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Why::Unsigned => "unsigned",
            Why::BadSignature => "bad_signature",
            Why::UntrustedKey => "untrusted_key",
            Why::ExpiredKey => "expired_key",
            Why::RevokedKey => "revoked_key",
            Why::Unsupported => "unsupported",
            Why::NoTrustedKeys => "no_trusted_keys",
            Why::Unreadable => "unreadable",
            Why::Rollback => "rollback",
        }
    }
}

/// Which kind of signature verified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An SSH signature (`gpg.format=ssh`), checked against the allowed signers.
    Ssh,
    /// An OpenPGP signature, checked against the trusted public keys.
    OpenPgp,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Ssh => "SSH",
            Kind::OpenPgp => "OpenPGP",
        })
    }
}

/// A commit whose signature verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The commit id.
    pub commit: String,
    /// The kind of signature.
    pub kind: Kind,
    /// Who signed: the allowed signer's principals, or the OpenPGP key's primary user ID.
    pub signer: String,
    /// The key's fingerprint (`SHA256:…` for SSH, hexadecimal for OpenPGP).
    pub fingerprint: String,
}

impl fmt::Display for Verified {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "commit {}: good {} signature by {} ({})",
            short(&self.commit),
            self.kind,
            self.signer,
            self.fingerprint
        )
    }
}

/// A commit refused, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("commit {}: {detail}", short(.commit))]
pub struct Refused {
    /// The commit id.
    pub commit: String,
    /// The reason, as counted.
    pub why: Why,
    /// What exactly: the key, its dates, what failed.
    pub detail: String,
}

impl Refused {
    /// A refusal of `commit`.
    pub fn new(commit: &str, why: Why, detail: impl Into<String>) -> Refused {
        Refused {
            commit: commit.to_string(),
            why,
            detail: detail.into(),
        }
    }
}

/// Which commits must verify before a revision is accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// The head commit, the one applied.
    #[default]
    Head,
    /// Every commit since the last verified one (on the first sync, the head alone).
    All,
}

/// A revision refused: its head, and the commit that did not verify (the head itself, or one
/// of the commits since the last verified one).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct Unverified {
    /// The head commit that is not applied.
    pub head: String,
    /// The commit that did not verify, and why.
    pub refused: Refused,
}

impl fmt::Display for Unverified {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.head == self.refused.commit {
            write!(f, "{}", self.refused)
        } else {
            write!(
                f,
                "commit {} (since the last verified commit, before {}): {}",
                short(&self.refused.commit),
                short(&self.head),
                self.refused.detail
            )
        }
    }
}

fn short(commit: &str) -> &str {
    &commit[..commit.len().min(12)]
}

/// Why the trusted keys could not be loaded. Each names the file (or Secret key) and, for
/// allowed signers, the line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeysError {
    /// A key file could not be read.
    #[error("cannot read {}: {cause}", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// What failed.
        cause: String,
    },
    /// A line of an allowed_signers file.
    #[error("{origin}:{line}: {reason}")]
    AllowedSigners {
        /// The file or Secret key.
        origin: String,
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// The OpenPGP key file.
    #[error("{origin}: {reason}")]
    OpenPgp {
        /// The file or Secret key.
        origin: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The Secret holding the keys could not be read.
    #[error("cannot read the Secret {name} with the trusted keys: {cause}")]
    Secret {
        /// `namespace/name`.
        name: String,
        /// What failed.
        cause: String,
    },
    /// Neither source holds a key.
    #[error("no trusted keys: {0} holds no key")]
    Empty(String),
}

/// The keys commits may be signed with: SSH allowed signers and OpenPGP public keys.
#[derive(Debug, Clone, Default)]
pub struct TrustedKeys {
    ssh: Vec<ssh::AllowedSigner>,
    openpgp: Vec<openpgp::TrustedKey>,
}

impl TrustedKeys {
    /// Parses an allowed_signers text and an OpenPGP key file (armored or binary, one key or
    /// several), each with where it came from, for messages. At least one key is required.
    pub fn parse(
        allowed_signers: Option<(&str, &str)>,
        openpgp: Option<(&str, &[u8])>,
    ) -> Result<TrustedKeys, KeysError> {
        let keys = TrustedKeys {
            ssh: match allowed_signers {
                Some((origin, text)) => ssh::parse(origin, text)?,
                None => Vec::new(),
            },
            openpgp: match openpgp {
                Some((origin, bytes)) => openpgp::parse(origin, bytes)?,
                None => Vec::new(),
            },
        };
        if keys.is_empty() {
            let origins: Vec<&str> = allowed_signers
                .map(|(o, _)| o)
                .into_iter()
                .chain(openpgp.map(|(o, _)| o))
                .collect();
            return Err(KeysError::Empty(if origins.is_empty() {
                "the configuration".into()
            } else {
                origins.join(" and ")
            }));
        }
        Ok(keys)
    }

    /// Reads and parses the files (see [`TrustedKeys::parse`]).
    pub fn from_files(
        allowed_signers: Option<&Path>,
        openpgp: Option<&Path>,
    ) -> Result<TrustedKeys, KeysError> {
        let read = |p: &Path| {
            std::fs::read(p).map_err(|e| KeysError::Read {
                path: p.to_path_buf(),
                cause: e.to_string(),
            })
        };
        let ssh_text = match allowed_signers {
            Some(p) => Some((
                p.display().to_string(),
                String::from_utf8_lossy(&read(p)?).into_owned(),
            )),
            None => None,
        };
        let pgp_bytes = match openpgp {
            Some(p) => Some((p.display().to_string(), read(p)?)),
            None => None,
        };
        TrustedKeys::parse(
            ssh_text.as_ref().map(|(o, t)| (o.as_str(), t.as_str())),
            pgp_bytes.as_ref().map(|(o, b)| (o.as_str(), b.as_slice())),
        )
    }

    /// These keys and `other`'s (an OpenPGP key in both is one key, its copies merged).
    pub fn merge(mut self, other: TrustedKeys) -> TrustedKeys {
        self.ssh.extend(other.ssh);
        self.openpgp.extend(other.openpgp);
        self.openpgp = openpgp::merged(self.openpgp);
        self
    }

    /// Whether no key is trusted.
    pub fn is_empty(&self) -> bool {
        self.ssh.is_empty() && self.openpgp.is_empty()
    }

    /// How many SSH allowed signers and OpenPGP keys are trusted.
    pub fn counts(&self) -> (usize, usize) {
        (self.ssh.len(), self.openpgp.len())
    }
}

/// Verifies the signature of the commit `commit` whose raw object (without Git's
/// `commit <size>\0` header) is `data`, against `keys`, as of `now`.
pub fn verify_commit(
    commit: &str,
    data: &[u8],
    keys: &TrustedKeys,
    now: SystemTime,
) -> Result<Verified, Refused> {
    let refuse = |why: Why, detail: String| Refused::new(commit, why, detail);
    let found = gix::objs::CommitRefIter::signature(data, gix::hash::Kind::Sha1)
        .map_err(|e| refuse(Why::Unreadable, format!("not a readable commit: {e}")))?;
    let Some((signature, signed)) = found else {
        return Err(refuse(Why::Unsigned, "the commit is not signed".into()));
    };
    let signed = signed.to_bstring();
    let now = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let sig: &[u8] = signature.as_ref();
    let armor = sig.trim_ascii_start();
    let (kind, outcome) = if armor.starts_with(b"-----BEGIN SSH SIGNATURE-----") {
        (Kind::Ssh, ssh::verify(armor, &signed, &keys.ssh, now))
    } else if armor.starts_with(b"-----BEGIN PGP SIGNATURE-----") {
        (
            Kind::OpenPgp,
            openpgp::verify(armor, &signed, &keys.openpgp, now),
        )
    } else if armor.starts_with(b"-----BEGIN SIGNED MESSAGE-----") {
        return Err(refuse(
            Why::Unsupported,
            "signed with X.509 (gpgsm), which capstan does not verify; sign with SSH or OpenPGP"
                .into(),
        ));
    } else {
        return Err(refuse(
            Why::Unsupported,
            "the commit's signature is in no format capstan knows (SSH, OpenPGP)".into(),
        ));
    };
    match outcome {
        Ok((signer, fingerprint)) => Ok(Verified {
            commit: commit.to_string(),
            kind,
            signer,
            fingerprint,
        }),
        Err((why, detail)) => Err(refuse(why, detail)),
    }
}

/// A Unix time as RFC 3339, for messages.
fn when(secs: u64) -> String {
    jiff::Timestamp::from_second(secs as i64)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| secs.to_string())
}

#[cfg(test)]
mod tests;
