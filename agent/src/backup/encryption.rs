//! Backups encrypted at rest with [age](https://age-encryption.org/v1), because a backup holds
//! every cluster's CA, etcd and service-account keys and its admin kubeconfig: whoever reads
//! the volume (or a snapshot of it, or a node's disk it was attached to) would hold the fleet.
//!
//! The writer encrypts to age recipients (X25519 public keys, `age1…`) and never holds an
//! identity: the agent reads the recipients afresh before each backup from a Secret the admin
//! keeps ([`RECIPIENTS_SECRET`], key [`RECIPIENTS_KEY`], one public key per line), so it can
//! write backups it cannot read back. `capstan restore --identity FILE` decrypts with the
//! identity kept off the cluster. The file is a standard age file: `age -d -i FILE
//! objects.json.age` reads it too.
//!
//! Encryption is the default, and there is no silent fallback: no recipients (the Secret
//! missing, unreadable, empty) is an error, so a self-upgrade is held with that reason rather
//! than written in plaintext. Plaintext is an explicit choice ([`Encryption::Plaintext`],
//! `--backup-plaintext`).
//!
//! What age does not give: proof of who wrote a backup. Anyone may encrypt to a public key, so
//! whoever can write the volume can put a backup there; restore from backups you trust.

use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use age::x25519;
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};

use super::BackupError;

/// The key of the recipients' Secret.
pub const RECIPIENTS_KEY: &str = "recipients";
/// The recipients' Secret when none is named (in `capstan-system`).
pub const RECIPIENTS_SECRET: &str = "capstan-backup-recipients";
/// How an age identity line starts (a secret key, never a recipient).
const IDENTITY_PREFIX: &str = "AGE-SECRET-KEY-";

/// How a backup's objects are written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Encryption {
    /// Encrypted to the recipients a Secret holds (key [`RECIPIENTS_KEY`]), read at each
    /// backup: a rotated key is used from the next backup on.
    Secret {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// Encrypted to these recipients.
    To(Vec<x25519::Recipient>),
    /// Unencrypted, as the admin chose (`--backup-plaintext`).
    Plaintext,
}

impl Default for Encryption {
    fn default() -> Self {
        Encryption::Secret {
            namespace: crate::status::NAMESPACE.into(),
            name: RECIPIENTS_SECRET.into(),
        }
    }
}

impl Encryption {
    /// The recipients of a backup about to be written (None: plaintext). Errors when there are
    /// none to encrypt to: the backup is then not written at all.
    pub async fn recipients(
        &self,
        client: &Client,
    ) -> Result<Option<Vec<x25519::Recipient>>, BackupError> {
        let (namespace, name) = match self {
            Encryption::Plaintext => return Ok(None),
            Encryption::To(r) if r.is_empty() => {
                return Err(BackupError::NoRecipients {
                    secret: "(none given)".into(),
                    why: "no recipient given".into(),
                });
            }
            Encryption::To(r) => return Ok(Some(r.clone())),
            Encryption::Secret { namespace, name } => (namespace, name),
        };
        let full = format!("{namespace}/{name}");
        let none = |why: String| BackupError::NoRecipients {
            secret: full.clone(),
            why,
        };
        let secret = Api::<Secret>::namespaced(client.clone(), namespace)
            .get_opt(name)
            .await
            .map_err(|e| none(format!("the Secret {full} cannot be read: {e}")))?
            .ok_or_else(|| none(format!("the Secret {full} does not exist")))?;
        let data = secret.data.unwrap_or_default();
        let text = data
            .get(RECIPIENTS_KEY)
            .ok_or_else(|| none(format!("the Secret {full} has no key `{RECIPIENTS_KEY}`")))?;
        let text = std::str::from_utf8(&text.0).map_err(|_| {
            none(format!(
                "the Secret {full} key `{RECIPIENTS_KEY}` is not text"
            ))
        })?;
        let origin = format!("Secret {full} key `{RECIPIENTS_KEY}`");
        let recipients = parse_recipients(&origin, text)?;
        if recipients.is_empty() {
            return Err(none(format!(
                "the Secret {full} key `{RECIPIENTS_KEY}` holds no age public key"
            )));
        }
        Ok(Some(recipients))
    }
}

/// One recipient (`age1…`), with a message that says what is wrong when it is not one (never
/// repeating the text: a secret key pasted by mistake stays out of logs).
pub fn parse_recipient(text: &str) -> Result<x25519::Recipient, String> {
    let text = text.trim();
    if text.starts_with(IDENTITY_PREFIX) {
        return Err(
            "this is an age identity (a secret key), not a recipient: give its public key \
             (`age-keygen -y FILE`), and keep the identity off the cluster"
                .to_string(),
        );
    }
    text.parse::<x25519::Recipient>().map_err(|_| {
        "not an age X25519 public key (`age1…`, as `age-keygen -y` prints it)".to_string()
    })
}

/// The recipients of an age recipients file's text: one per line, `#` comments and blank lines
/// ignored, duplicates once.
pub fn parse_recipients(origin: &str, text: &str) -> Result<Vec<x25519::Recipient>, BackupError> {
    let mut out: Vec<x25519::Recipient> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let r = parse_recipient(line).map_err(|message| BackupError::Recipient {
            origin: origin.to_string(),
            line: i + 1,
            message,
        })?;
        if !out.contains(&r) {
            out.push(r);
        }
    }
    Ok(out)
}

/// The age identities a restore decrypts with (`--identity FILE`); none for a plaintext backup.
#[derive(Default)]
pub struct Identities {
    keys: Vec<Box<dyn age::Identity + Send + Sync>>,
    file: Option<PathBuf>,
}

impl std::fmt::Debug for Identities {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the keys.
        f.debug_struct("Identities")
            .field("count", &self.keys.len())
            .field("file", &self.file)
            .finish()
    }
}

impl From<x25519::Identity> for Identities {
    fn from(key: x25519::Identity) -> Identities {
        Identities {
            keys: vec![Box::new(key)],
            file: None,
        }
    }
}

impl Identities {
    /// No identity: only a plaintext backup can be read.
    pub fn none() -> Identities {
        Identities::default()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The identities of an age identity file (`AGE-SECRET-KEY-1…` lines, as `age-keygen`
    /// writes them; `#` comments allowed).
    pub fn from_file(path: &Path) -> Result<Identities, BackupError> {
        let bad = |message: String| BackupError::Identity {
            path: path.to_path_buf(),
            message,
        };
        let bytes = std::fs::read(path).map_err(|source| BackupError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        if bytes.starts_with(b"age-encryption.org/")
            || bytes.starts_with(b"-----BEGIN AGE ENCRYPTED FILE-----")
        {
            return Err(bad(
                "an encrypted (passphrase-protected) identity file: decrypt it first (`age -d`)"
                    .into(),
            ));
        }
        // age's parser names the line, never its text.
        let keys = age::IdentityFile::from_buffer(bytes.as_slice())
            .map_err(|e| bad(e.to_string()))?
            .into_identities()
            .map_err(|e| bad(e.to_string()))?;
        if keys.is_empty() {
            return Err(bad(
                "holds no age identity (`AGE-SECRET-KEY-1…` lines, as age-keygen writes them)"
                    .into(),
            ));
        }
        Ok(Identities {
            keys,
            file: Some(path.to_path_buf()),
        })
    }

    /// Decrypts an age file whole: a wrong identity, a truncated or altered file is an error
    /// before anything of it is used.
    pub(super) fn decrypt(
        &self,
        path: &Path,
        recipients: &[String],
    ) -> Result<Vec<u8>, BackupError> {
        if self.keys.is_empty() {
            return Err(needs_identity(path, recipients));
        }
        let to = recipients_text(recipients);
        let file = std::fs::File::open(path).map_err(|source| BackupError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let failed = |message: String| BackupError::Decrypt {
            path: path.to_path_buf(),
            message,
        };
        let decryptor = age::Decryptor::new_buffered(io::BufReader::new(file))
            .map_err(|e| failed(format!("not an age file ({e})")))?;
        let mut reader = decryptor
            .decrypt(self.keys.iter().map(|k| k.as_ref() as &dyn age::Identity))
            .map_err(|e| match e {
                age::DecryptError::NoMatchingKeys => failed(format!(
                    "no identity of {} is one the backup was encrypted to ({to})",
                    self.file
                        .as_deref()
                        .map(|f| f.display().to_string())
                        .unwrap_or_else(|| "those given".into())
                )),
                e => failed(e.to_string()),
            })?;
        let mut plain = Vec::new();
        reader
            .read_to_end(&mut plain)
            .map_err(|e| failed(format!("the file is damaged or truncated ({e})")))?;
        Ok(plain)
    }
}

fn recipients_text(recipients: &[String]) -> String {
    if recipients.is_empty() {
        "recipients the manifest does not name".to_string()
    } else {
        recipients.join(", ")
    }
}

/// The refusal of an encrypted objects file at `path`, to `recipients`, without an identity.
pub fn needs_identity(path: &Path, recipients: &[String]) -> BackupError {
    BackupError::NeedsIdentity {
        path: path.to_path_buf(),
        recipients: recipients_text(recipients),
    }
}

/// Where a backup's objects go: the file, through age's streaming encryption when there are
/// recipients (64 KiB chunks, each written out when full).
pub(super) enum Sink {
    Plain(BufWriter<std::fs::File>),
    Age(age::stream::StreamWriter<BufWriter<std::fs::File>>),
}

impl Sink {
    pub(super) fn new(
        file: std::fs::File,
        recipients: Option<&[x25519::Recipient]>,
    ) -> io::Result<Sink> {
        let out = BufWriter::new(file);
        let Some(recipients) = recipients else {
            return Ok(Sink::Plain(out));
        };
        let encryptor =
            age::Encryptor::with_recipients(recipients.iter().map(|r| r as &dyn age::Recipient))
                .map_err(|e| io::Error::other(e.to_string()))?;
        Ok(Sink::Age(encryptor.wrap_output(out)?))
    }

    /// Writes what is left (age's last chunk) and returns the file, not yet synced.
    pub(super) fn finish(self) -> io::Result<std::fs::File> {
        let out = match self {
            Sink::Plain(out) => out,
            Sink::Age(w) => w.finish()?,
        };
        out.into_inner().map_err(|e| e.into_error())
    }
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Sink::Plain(w) => w.write(buf),
            Sink::Age(w) => w.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Sink::Plain(w) => w.flush(),
            Sink::Age(w) => w.flush(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use age::secrecy::ExposeSecret;

    #[test]
    fn recipients_files_parse_and_identities_are_refused_without_being_repeated() {
        let a = x25519::Identity::generate();
        let b = x25519::Identity::generate();
        let text = format!(
            "# the platform team\n{}\n\n  {}  \n{}\n",
            a.to_public(),
            b.to_public(),
            a.to_public()
        );
        let got = parse_recipients("Secret s key `recipients`", &text).unwrap();
        assert_eq!(got, vec![a.to_public(), b.to_public()]);
        assert!(parse_recipients("x", "# nothing\n\n").unwrap().is_empty());
        // A secret key pasted where the public key goes: refused, and not echoed.
        let secret = a.to_string().expose_secret().to_string();
        let e = parse_recipients(
            "Secret s key `recipients`",
            &format!("{}\n{secret}\n", b.to_public()),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("line 2") && e.contains("identity (a secret key)"),
            "{e}"
        );
        assert!(!e.contains(&secret[15..]), "{e}");
        for bad in [
            "age1notakey",
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI",
            "hello",
        ] {
            let e = parse_recipients("f", bad).unwrap_err().to_string();
            assert!(
                e.contains("line 1") && e.contains("not an age X25519 public key"),
                "{e}"
            );
            assert!(!e.contains(bad), "{e}");
        }
    }

    #[test]
    fn identity_files_are_read_as_age_writes_them_and_refused_otherwise() {
        let dir = tempfile::tempdir().unwrap();
        let key = x25519::Identity::generate();
        let path = dir.path().join("key.txt");
        std::fs::write(
            &path,
            format!(
                "# created: 2026-11-02T00:00:00Z\n# public key: {}\n{}\n",
                key.to_public(),
                key.to_string().expose_secret()
            ),
        )
        .unwrap();
        assert!(!Identities::from_file(&path).unwrap().is_empty());
        let cases: [(&str, &[u8], &str); 4] = [
            ("empty", b"# only a comment\n", "holds no age identity"),
            (
                "public",
                b"age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p\n",
                "line 1",
            ),
            (
                "encrypted",
                b"age-encryption.org/v1\n-> scrypt x 18\n",
                "decrypt it first",
            ),
            (
                "armored",
                b"-----BEGIN AGE ENCRYPTED FILE-----\n",
                "decrypt it first",
            ),
        ];
        for (name, text, want) in cases {
            let p = dir.path().join(name);
            std::fs::write(&p, text).unwrap();
            let e = Identities::from_file(&p).unwrap_err().to_string();
            assert!(e.contains(want) && e.contains(name), "{name}: {e}");
        }
        let e = Identities::from_file(&dir.path().join("missing")).unwrap_err();
        assert!(e.to_string().contains("missing"), "{e}");
        // The Debug form never shows a key.
        let shown = format!("{:?}", Identities::from(key.clone()));
        assert!(!shown.contains("AGE-SECRET-KEY"), "{shown}");
    }
}
