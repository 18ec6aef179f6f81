//! Commit signature verification against commits signed by real `git` with keys made by real
//! `gpg` and `ssh-keygen` (Debian's gnupg and openssh-client): good signatures of each kind, and
//! every refusal — unsigned, untrusted key, tampered commit, expired, revoked and not-yet-valid
//! keys, a key trusted for another namespace.

use std::time::SystemTime;

use capstan::source::verify::{Kind, TrustedKeys, Verified, Why, verify_commit};

use crate::source_support::signing::{Keyring, Signer, raw_commit, tamper};
use crate::source_support::{git, git_command};

/// A working repository with one unsigned commit.
fn repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    git(dir.path(), &["init", "-q", "-b", "main"]);
    std::fs::write(dir.path().join("README.md"), "# fleet\n").unwrap();
    git(dir.path(), &["add", "-A"]);
    git(dir.path(), &["commit", "-q", "-m", "unsigned"]);
    dir
}

fn check(repo: &std::path::Path, id: &str, keys: &TrustedKeys) -> Result<Verified, (Why, String)> {
    verify_commit(id, &raw_commit(repo, id), keys, SystemTime::now()).map_err(|r| {
        assert_eq!(r.commit, id);
        (r.why, r.detail)
    })
}

/// `ssh-keygen -l`'s SHA256 fingerprint of a key.
fn ssh_fingerprint(key: &std::path::Path) -> String {
    let out = std::process::Command::new("ssh-keygen")
        .arg("-lf")
        .arg(key.with_extension("pub"))
        .output()
        .unwrap();
    String::from_utf8(out.stdout)
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .to_string()
}

#[test]
fn ssh_signatures_are_checked_against_the_allowed_signers() {
    let k = Keyring::new();
    let r = repo();
    let w = r.path();
    let alice = k.ssh_key("alice", "ed25519");
    let bob = k.ssh_key("bob", "ecdsa");
    let mallory = k.ssh_key("mallory", "ed25519");
    let retired = k.ssh_key("retired", "ed25519");
    let future = k.ssh_key("future", "ed25519");
    let files = k.ssh_key("files", "ed25519");
    let allowed = format!(
        "# who may sign the fleet\n\
         alice@example.com namespaces=\"git\" {}\n\
         bob@example.com {}\n\
         retired@example.com valid-before=20200101 {}\n\
         future@example.com valid-after=29990101Z {}\n\
         files@example.com namespaces=\"file\" {}\n",
        k.ssh_public(&alice),
        k.ssh_public(&bob),
        k.ssh_public(&retired),
        k.ssh_public(&future),
        k.ssh_public(&files),
    );
    let keys = TrustedKeys::parse(Some(("allowed_signers", &allowed)), None).unwrap();

    let good = k.commit(w, &Signer::Ssh(alice.clone()), "by alice");
    let v = check(w, &good, &keys).expect("alice's signature verifies");
    assert_eq!(
        (v.kind, v.signer.as_str(), v.fingerprint.clone()),
        (Kind::Ssh, "alice@example.com", ssh_fingerprint(&alice))
    );
    let by_bob = k.commit(w, &Signer::Ssh(bob.clone()), "by bob (ecdsa)");
    assert_eq!(check(w, &by_bob, &keys).unwrap().signer, "bob@example.com");

    let unsigned = git(w, &["rev-parse", "HEAD~2"]);
    assert_eq!(check(w, &unsigned, &keys).unwrap_err().0, Why::Unsigned);

    let by_mallory = k.commit(w, &Signer::Ssh(mallory.clone()), "by mallory");
    let (why, detail) = check(w, &by_mallory, &keys).unwrap_err();
    assert_eq!(why, Why::UntrustedKey, "{detail}");
    assert!(detail.contains(&ssh_fingerprint(&mallory)), "{detail}");

    let forged = tamper(w, &good, "by alice, but rewritten");
    let (why, detail) = check(w, &forged, &keys).unwrap_err();
    assert_eq!(why, Why::BadSignature, "{detail}");
    assert!(detail.contains("changed after it was signed"), "{detail}");

    let by_retired = k.commit(w, &Signer::Ssh(retired), "by a retired key");
    let (why, detail) = check(w, &by_retired, &keys).unwrap_err();
    assert_eq!(why, Why::ExpiredKey, "{detail}");
    assert!(
        detail.contains("valid before 2020-01-01T00:00:00Z (allowed_signers:4)"),
        "{detail}"
    );

    let by_future = k.commit(w, &Signer::Ssh(future), "by a key not valid yet");
    let (why, detail) = check(w, &by_future, &keys).unwrap_err();
    assert_eq!(why, Why::ExpiredKey, "{detail}");
    assert!(detail.contains("not valid yet"), "{detail}");

    let by_files = k.commit(w, &Signer::Ssh(files), "by a key for files");
    let (why, detail) = check(w, &by_files, &keys).unwrap_err();
    assert_eq!(why, Why::UntrustedKey, "{detail}");
    assert!(detail.contains("only for namespaces file"), "{detail}");

    // Only OpenPGP keys trusted: an SSH signature is untrusted.
    let k2 = Keyring::new();
    let fp = k2.gpg_key("Other <other@example.com>", None, "never");
    let pgp_only = TrustedKeys::parse(None, Some(("trusted.asc", &k2.export(&[&fp])))).unwrap();
    assert_eq!(check(w, &good, &pgp_only).unwrap_err().0, Why::UntrustedKey);
}

#[test]
fn openpgp_signatures_are_checked_against_the_trusted_keys_with_expiry_and_revocation() {
    let k = Keyring::new();
    let r = repo();
    let w = r.path();
    let alice = k.gpg_key("Alice <alice@example.com>", None, "never");
    let carol = k.gpg_key("Carol <carol@example.com>", None, "never");
    k.gpg_subkey(&carol);
    let mallory = k.gpg_key("Mallory <mallory@example.com>", None, "never");
    // Made in 2020, expired a day later; it signs at a time it was valid.
    let old = k.gpg_key("Old <old@example.com>", Some("20200101T000000"), "1d");
    let gone = k.gpg_key("Gone <gone@example.com>", None, "never");

    let good = k.commit(
        w,
        &Signer::Gpg {
            fingerprint: alice.clone(),
            at: None,
        },
        "by alice",
    );
    let by_sub = k.commit(
        w,
        &Signer::Gpg {
            fingerprint: carol.clone(),
            at: None,
        },
        "by carol's subkey",
    );
    let by_mallory = k.commit(
        w,
        &Signer::Gpg {
            fingerprint: mallory.clone(),
            at: None,
        },
        "by mallory",
    );
    let by_old = k.commit(
        w,
        &Signer::Gpg {
            fingerprint: old.clone(),
            at: Some("20200101T120000".into()),
        },
        "by a key that has expired since",
    );
    let by_gone = k.commit(
        w,
        &Signer::Gpg {
            fingerprint: gone.clone(),
            at: None,
        },
        "by a key revoked since",
    );
    k.revoke(&gone);
    let keys = TrustedKeys::parse(
        None,
        Some(("trusted.asc", &k.export(&[&alice, &carol, &old, &gone]))),
    )
    .unwrap();
    assert_eq!(keys.counts(), (0, 4));

    let v = check(w, &good, &keys).expect("alice's signature verifies");
    assert_eq!(
        (v.kind, v.signer.as_str(), v.fingerprint.as_str()),
        (Kind::OpenPgp, "Alice <alice@example.com>", alice.as_str())
    );
    let v = check(w, &by_sub, &keys).expect("carol's subkey signature verifies");
    assert_eq!(v.signer, "Carol <carol@example.com>");
    assert_ne!(
        v.fingerprint, carol,
        "signed by the subkey, not the primary key"
    );

    let (why, detail) = check(w, &by_mallory, &keys).unwrap_err();
    assert_eq!(why, Why::UntrustedKey, "{detail}");
    assert!(detail.contains(&mallory), "names the key: {detail}");

    let forged = tamper(w, &good, "by alice, but rewritten");
    let (why, detail) = check(w, &forged, &keys).unwrap_err();
    assert_eq!(why, Why::BadSignature, "{detail}");

    let (why, detail) = check(w, &by_old, &keys).unwrap_err();
    assert_eq!(why, Why::ExpiredKey, "{detail}");
    assert!(detail.contains("expired on 2020-01-02"), "{detail}");

    let (why, detail) = check(w, &by_gone, &keys).unwrap_err();
    assert_eq!(why, Why::RevokedKey, "{detail}");
    assert!(
        detail.contains(&gone) && detail.contains("revoked"),
        "{detail}"
    );

    let unsigned = git(w, &["rev-list", "--max-parents=0", "HEAD"]);
    assert_eq!(check(w, &unsigned, &keys).unwrap_err().0, Why::Unsigned);

    // An SSH-only trust list does not trust OpenPGP signatures.
    let ssh = k.ssh_key("someone", "ed25519");
    let ssh_only = TrustedKeys::parse(
        Some((
            "allowed_signers",
            &format!("someone@example.com {}", k.ssh_public(&ssh)),
        )),
        None,
    )
    .unwrap();
    assert_eq!(check(w, &good, &ssh_only).unwrap_err().0, Why::UntrustedKey);
}

#[test]
fn key_files_that_are_not_keys_are_refused_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trusted.asc");
    std::fs::write(
        &path,
        "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nbm9wZQ==\n-----END PGP PUBLIC KEY BLOCK-----\n",
    )
    .unwrap();
    let e = TrustedKeys::from_files(None, Some(&path))
        .unwrap_err()
        .to_string();
    assert!(e.starts_with(&format!("{}: ", path.display())), "{e}");
    // git itself agrees the commit made here is unsigned (a sanity check of the fixture).
    let r = repo();
    let out = git_command(r.path())
        .args(["verify-commit", "HEAD"])
        .output()
        .unwrap();
    assert!(!out.status.success());
}
