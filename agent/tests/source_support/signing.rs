//! Signing keys made with the real tools (`gpg` in batch mode with its own `GNUPGHOME`,
//! `ssh-keygen`) and commits signed with them by `git` itself, for the commit verification
//! tests. Everything lives in one temporary directory.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::git_command;

/// A key that signs commits.
#[derive(Debug, Clone)]
pub enum Signer {
    /// An SSH private key file (`gpg.format=ssh`).
    Ssh(PathBuf),
    /// An OpenPGP key by fingerprint, signed with `gpg` (optionally at a faked time).
    Gpg {
        /// The key's fingerprint (`user.signingkey`).
        fingerprint: String,
        /// `--faked-system-time` for signing with a key that has expired since.
        at: Option<String>,
    },
    /// An OpenPGP key, signed with `gpg` given these arguments too (`--digest-algo SHA1`).
    GpgWith {
        /// The key's fingerprint (`user.signingkey`).
        fingerprint: String,
        /// gpg's extra arguments.
        args: Vec<String>,
    },
}

/// A GnuPG home and SSH keys in a temporary directory.
pub struct Keyring {
    pub dir: tempfile::TempDir,
}

impl Default for Keyring {
    fn default() -> Self {
        Self::new()
    }
}

impl Keyring {
    pub fn new() -> Keyring {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("gnupg");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::set_permissions(&home, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .unwrap();
        Keyring { dir }
    }

    pub fn gnupghome(&self) -> PathBuf {
        self.dir.path().join("gnupg")
    }

    /// Runs gpg in batch mode on this keyring; panics on failure; returns stdout.
    pub fn gpg(&self, args: &[&str]) -> Vec<u8> {
        let out = Command::new("gpg")
            .env("GNUPGHOME", self.gnupghome())
            .args([
                "--batch",
                "--yes",
                "--no-tty",
                "--pinentry-mode",
                "loopback",
                "--passphrase",
                "",
            ])
            .args(args)
            .output()
            .expect("run gpg (Debian's gnupg)");
        assert!(
            out.status.success(),
            "gpg {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }

    /// A new ed25519 signing key for `uid`; with `faked`, made at that time (gpg's
    /// `--faked-system-time`, e.g. `20200101T000000`) and expiring after `expire` (`1d`, or
    /// `never`). Returns its fingerprint.
    pub fn gpg_key(&self, uid: &str, faked: Option<&str>, expire: &str) -> String {
        let mut args: Vec<&str> = Vec::new();
        let faked_arg;
        if let Some(t) = faked {
            faked_arg = format!("--faked-system-time={t}");
            args.push(&faked_arg);
        }
        args.extend(["--quick-gen-key", uid, "ed25519", "sign", expire]);
        self.gpg(&args);
        self.fingerprint(uid)
    }

    /// Adds a signing subkey (ed25519) to a key.
    pub fn gpg_subkey(&self, fingerprint: &str) {
        self.gpg(&["--quick-add-key", fingerprint, "ed25519", "sign", "never"]);
    }

    /// Flips what a key may do, as `gpg --edit-key`'s `change-usage` does (expert mode):
    /// `key` 0 is the primary key, n its n-th subkey; each letter of `toggles` (`S`, `E`, `A`)
    /// flips one capability. The new self-signature (or binding) is made now.
    pub fn change_usage(&self, fingerprint: &str, key: usize, toggles: &str) {
        use std::io::Write;
        let mut script = String::new();
        if key > 0 {
            script.push_str(&format!("key {key}\n"));
        }
        script.push_str("change-usage\n");
        for t in toggles.chars() {
            script.push_str(&format!("{t}\n"));
        }
        script.push_str("Q\nsave\n");
        let mut child = Command::new("gpg")
            .env("GNUPGHOME", self.gnupghome())
            .args([
                "--batch",
                "--yes",
                "--no-tty",
                "--pinentry-mode",
                "loopback",
                "--passphrase",
                "",
                "--expert",
                "--command-fd",
                "0",
                "--edit-key",
                fingerprint,
            ])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run gpg (Debian's gnupg)");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(script.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "gpg change-usage failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The fingerprint of the key of `uid`.
    pub fn fingerprint(&self, uid: &str) -> String {
        let out = String::from_utf8(self.gpg(&["--with-colons", "--list-keys", uid])).unwrap();
        out.lines()
            .find(|l| l.starts_with("fpr:"))
            .and_then(|l| l.split(':').nth(9))
            .expect("a fingerprint")
            .to_string()
    }

    /// Revokes a key with the revocation certificate gpg made when it made the key.
    pub fn revoke(&self, fingerprint: &str) {
        let cert = self
            .gnupghome()
            .join("openpgp-revocs.d")
            .join(format!("{fingerprint}.rev"));
        let text = std::fs::read_to_string(&cert).unwrap();
        // gpg guards the certificate against an accidental import with a leading colon.
        let armored: String = text
            .lines()
            .map(|l| l.strip_prefix(':').unwrap_or(l))
            .collect::<Vec<_>>()
            .join("\n");
        let path = self.dir.path().join("revocation.asc");
        std::fs::write(&path, armored).unwrap();
        self.gpg(&["--import", path.to_str().unwrap()]);
    }

    /// The armored public keys of `fingerprints` (what `--trusted-keys` reads).
    pub fn export(&self, fingerprints: &[&str]) -> Vec<u8> {
        let mut args = vec!["--armor", "--export"];
        args.extend(fingerprints);
        self.gpg(&args)
    }

    /// A new SSH key of `kind` (`ed25519`, `ecdsa`, `rsa`); returns the private key's path
    /// (the public key is beside it, `.pub`).
    pub fn ssh_key(&self, name: &str, kind: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        let out = Command::new("ssh-keygen")
            .args(["-q", "-t", kind, "-N", "", "-C", name, "-f"])
            .arg(&path)
            .output()
            .expect("run ssh-keygen (Debian's openssh-client)");
        assert!(
            out.status.success(),
            "ssh-keygen: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        path
    }

    /// The `keytype base64` of an SSH key, for an allowed_signers line.
    pub fn ssh_public(&self, key: &Path) -> String {
        let text = std::fs::read_to_string(key.with_extension("pub")).unwrap();
        text.split_whitespace()
            .take(2)
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// A `gpg` wrapper that adds `args` (a faked time, for keys that have expired since; a
    /// digest algorithm).
    fn gpg_program(&self, args: &[String]) -> PathBuf {
        let name: String = args
            .join("-")
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        let path = self.dir.path().join(format!("gpg{name}"));
        std::fs::write(
            &path,
            format!("#!/bin/sh\nexec gpg {} \"$@\"\n", args.join(" ")),
        )
        .unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        path
    }

    /// `git commit` in `work` (everything added), signed by `signer`; returns the commit id.
    pub fn commit(&self, work: &Path, signer: &Signer, msg: &str) -> String {
        let mut cmd = git_command(work);
        cmd.env("GNUPGHOME", self.gnupghome())
            .args(["-c", "commit.gpgsign=true"]);
        let program;
        match signer {
            Signer::Ssh(key) => {
                cmd.args(["-c", "gpg.format=ssh", "-c"])
                    .arg(format!("user.signingkey={}", key.display()));
            }
            Signer::Gpg { fingerprint, at } => {
                cmd.args(["-c", "gpg.format=openpgp", "-c"])
                    .arg(format!("user.signingkey={fingerprint}"));
                if let Some(at) = at {
                    program = self.gpg_program(&[format!("--faked-system-time={at}")]);
                    cmd.arg("-c")
                        .arg(format!("gpg.program={}", program.display()));
                }
            }
            Signer::GpgWith { fingerprint, args } => {
                cmd.args(["-c", "gpg.format=openpgp", "-c"])
                    .arg(format!("user.signingkey={fingerprint}"));
                program = self.gpg_program(args);
                cmd.arg("-c")
                    .arg(format!("gpg.program={}", program.display()));
            }
        }
        super::git(work, &["add", "-A"]);
        let out = cmd
            .args(["commit", "-q", "--allow-empty", "-m", msg])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "signed commit failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        super::git(work, &["rev-parse", "HEAD"])
    }
}

/// The raw object of a commit, as `git cat-file commit` prints it.
pub fn raw_commit(repo: &Path, id: &str) -> Vec<u8> {
    let out = git_command(repo)
        .args(["cat-file", "commit", id])
        .output()
        .unwrap();
    assert!(out.status.success());
    out.stdout
}

/// Writes a copy of commit `id` with its message replaced, signature header kept (a tampered
/// commit); returns the new commit's id.
pub fn tamper(repo: &Path, id: &str, message: &str) -> String {
    let raw = String::from_utf8(raw_commit(repo, id)).unwrap();
    let (headers, _) = raw.split_once("\n\n").expect("headers and message");
    let forged = format!("{headers}\n\n{message}\n");
    let path = repo.join(".git").join("forged");
    std::fs::write(&path, forged).unwrap();
    super::git(
        repo,
        &["hash-object", "-t", "commit", "-w", path.to_str().unwrap()],
    )
}
