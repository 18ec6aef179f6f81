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

/// Verifies commit `id` of `repo` with `keys` now: what it proves, or why it is refused.
fn check_commit(
    repo: &std::path::Path,
    id: &str,
    keys: &TrustedKeys,
) -> Result<Verified, (Why, String)> {
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
    let v = check_commit(w, &good, &keys).expect("alice's signature verifies");
    assert_eq!(
        (v.kind, v.signer.as_str(), v.fingerprint.clone()),
        (Kind::Ssh, "alice@example.com", ssh_fingerprint(&alice))
    );
    let by_bob = k.commit(w, &Signer::Ssh(bob.clone()), "by bob (ecdsa)");
    assert_eq!(
        check_commit(w, &by_bob, &keys).unwrap().signer,
        "bob@example.com"
    );

    let unsigned = git(w, &["rev-parse", "HEAD~2"]);
    assert_eq!(
        check_commit(w, &unsigned, &keys).unwrap_err().0,
        Why::Unsigned
    );

    let by_mallory = k.commit(w, &Signer::Ssh(mallory.clone()), "by mallory");
    let (why, detail) = check_commit(w, &by_mallory, &keys).unwrap_err();
    assert_eq!(why, Why::UntrustedKey, "{detail}");
    assert!(detail.contains(&ssh_fingerprint(&mallory)), "{detail}");

    let forged = tamper(w, &good, "by alice, but rewritten");
    let (why, detail) = check_commit(w, &forged, &keys).unwrap_err();
    assert_eq!(why, Why::BadSignature, "{detail}");
    assert!(detail.contains("changed after it was signed"), "{detail}");

    let by_retired = k.commit(w, &Signer::Ssh(retired), "by a retired key");
    let (why, detail) = check_commit(w, &by_retired, &keys).unwrap_err();
    assert_eq!(why, Why::ExpiredKey, "{detail}");
    assert!(
        detail.contains("valid before 2020-01-01T00:00:00Z (allowed_signers:4)"),
        "{detail}"
    );

    let by_future = k.commit(w, &Signer::Ssh(future), "by a key not valid yet");
    let (why, detail) = check_commit(w, &by_future, &keys).unwrap_err();
    assert_eq!(why, Why::ExpiredKey, "{detail}");
    assert!(detail.contains("not valid yet"), "{detail}");

    let by_files = k.commit(w, &Signer::Ssh(files), "by a key for files");
    let (why, detail) = check_commit(w, &by_files, &keys).unwrap_err();
    assert_eq!(why, Why::UntrustedKey, "{detail}");
    assert!(detail.contains("only for namespaces file"), "{detail}");

    // Only OpenPGP keys trusted: an SSH signature is untrusted.
    let k2 = Keyring::new();
    let fp = k2.gpg_key("Other <other@example.com>", None, "never");
    let pgp_only = TrustedKeys::parse(None, Some(("trusted.asc", &k2.export(&[&fp])))).unwrap();
    assert_eq!(
        check_commit(w, &good, &pgp_only).unwrap_err().0,
        Why::UntrustedKey
    );
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

    let v = check_commit(w, &good, &keys).expect("alice's signature verifies");
    assert_eq!(
        (v.kind, v.signer.as_str(), v.fingerprint.as_str()),
        (Kind::OpenPgp, "Alice <alice@example.com>", alice.as_str())
    );
    let v = check_commit(w, &by_sub, &keys).expect("carol's subkey signature verifies");
    assert_eq!(v.signer, "Carol <carol@example.com>");
    assert_ne!(
        v.fingerprint, carol,
        "signed by the subkey, not the primary key"
    );

    let (why, detail) = check_commit(w, &by_mallory, &keys).unwrap_err();
    assert_eq!(why, Why::UntrustedKey, "{detail}");
    assert!(detail.contains(&mallory), "names the key: {detail}");

    let forged = tamper(w, &good, "by alice, but rewritten");
    let (why, detail) = check_commit(w, &forged, &keys).unwrap_err();
    assert_eq!(why, Why::BadSignature, "{detail}");

    let (why, detail) = check_commit(w, &by_old, &keys).unwrap_err();
    assert_eq!(why, Why::ExpiredKey, "{detail}");
    assert!(detail.contains("expired on 2020-01-02"), "{detail}");

    let (why, detail) = check_commit(w, &by_gone, &keys).unwrap_err();
    assert_eq!(why, Why::RevokedKey, "{detail}");
    assert!(
        detail.contains(&gone) && detail.contains("revoked"),
        "{detail}"
    );

    let unsigned = git(w, &["rev-list", "--max-parents=0", "HEAD"]);
    assert_eq!(
        check_commit(w, &unsigned, &keys).unwrap_err().0,
        Why::Unsigned
    );

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
    assert_eq!(
        check_commit(w, &good, &ssh_only).unwrap_err().0,
        Why::UntrustedKey
    );
}

#[test]
fn an_openpgp_key_present_twice_is_merged_so_its_revocation_holds() {
    let k = Keyring::new();
    let r = repo();
    let w = r.path();
    let gone = k.gpg_key("Gone <gone@example.com>", None, "never");
    let by_gone = k.commit(
        w,
        &Signer::Gpg {
            fingerprint: gone.clone(),
            at: None,
        },
        "by a key revoked since",
    );
    // The copy in the Secret since before the revocation, and the revoked copy added beside it.
    let before = k.export(&[&gone]);
    k.revoke(&gone);
    let after = k.export(&[&gone]);
    let mut both = before.clone();
    both.extend_from_slice(&after);
    let mut reversed = after.clone();
    reversed.extend_from_slice(&before);
    for (what, bytes) in [("unrevoked first", &both), ("revoked first", &reversed)] {
        let keys = TrustedKeys::parse(None, Some(("trusted.asc", bytes))).unwrap();
        assert_eq!(keys.counts(), (0, 1), "{what}: one key, merged");
        let (why, detail) = check_commit(w, &by_gone, &keys).unwrap_err();
        assert_eq!(why, Why::RevokedKey, "{what}: {detail}");
    }
    // The two copies from two sources (the key file and the Secret) merge as well.
    let file = TrustedKeys::parse(None, Some(("trusted.asc", &before))).unwrap();
    assert!(
        check_commit(w, &by_gone, &file).is_ok(),
        "the copy alone is not revoked"
    );
    let secret = TrustedKeys::parse(None, Some(("Secret trusted.asc", &after))).unwrap();
    let keys = file.merge(secret);
    assert_eq!(keys.counts(), (0, 1));
    assert_eq!(
        check_commit(w, &by_gone, &keys).unwrap_err().0,
        Why::RevokedKey
    );
}

#[test]
fn openpgp_signatures_made_with_md5_sha1_or_ripemd160_are_refused() {
    let k = Keyring::new();
    let r = repo();
    let w = r.path();
    // rPGP refuses a short hash with Ed25519 by itself (as a bad signature); with RSA it
    // verifies whatever the hash.
    let ed = k.gpg_key("Team <team@example.com>", None, "never");
    k.gpg(&[
        "--quick-gen-key",
        "RSA <rsa@example.com>",
        "rsa2048",
        "sign",
        "never",
    ]);
    let rsa = k.fingerprint("RSA <rsa@example.com>");
    let keys = TrustedKeys::parse(None, Some(("trusted.asc", &k.export(&[&ed, &rsa])))).unwrap();
    let signed_with = |fp: &str, digest: &str| {
        k.commit(
            w,
            &Signer::GpgWith {
                fingerprint: fp.to_string(),
                args: vec!["--digest-algo".into(), digest.into()],
            },
            &format!("signed with {digest}"),
        )
    };
    for fp in [&rsa, &ed] {
        // gpg's name of the hash, and rPGP's in the refusal.
        for (digest, named) in [("SHA1", "SHA1"), ("MD5", "MD5"), ("RIPEMD160", "RIPEMD160")] {
            let c = signed_with(fp, digest);
            let (why, detail) = check_commit(w, &c, &keys).unwrap_err();
            assert_eq!(why, Why::Unsupported, "{digest}: {detail}");
            assert!(
                detail.contains(&format!("made with {named}")) && detail.contains(fp.as_str()),
                "{digest}: {detail}"
            );
        }
        for digest in ["SHA256", "SHA512"] {
            let c = signed_with(fp, digest);
            assert!(check_commit(w, &c, &keys).is_ok(), "{digest}");
        }
    }
}

#[test]
fn openpgp_keys_without_the_sign_flag_do_not_sign_commits() {
    let k = Keyring::new();
    let r = repo();
    let w = r.path();
    // Made a day ago, so the self-signatures changed below are newer (whole seconds).
    let yesterday = k_time(-86_400);
    let primary = k.gpg_key("Primary <primary@example.com>", Some(&yesterday), "never");
    let sub = k.gpg_key("Sub <sub@example.com>", Some(&yesterday), "never");
    k.gpg(&[
        &format!("--faked-system-time={yesterday}"),
        "--quick-add-key",
        &sub,
        "ed25519",
        "sign",
        "never",
    ]);
    let by_primary = k.commit(
        w,
        &Signer::Gpg {
            fingerprint: format!("{primary}!"),
            at: None,
        },
        "by the primary key",
    );
    let by_sub = k.commit(
        w,
        &Signer::Gpg {
            fingerprint: sub.clone(),
            at: None,
        },
        "by the signing subkey",
    );
    let keys =
        |fps: &[&str]| TrustedKeys::parse(None, Some(("trusted.asc", &k.export(fps)))).unwrap();
    let before = keys(&[&primary, &sub]);
    assert!(check_commit(w, &by_primary, &before).is_ok());
    let v = check_commit(w, &by_sub, &before).expect("the subkey signs");
    assert_ne!(v.fingerprint, sub, "signed by the subkey");

    // The primary key now certifies only; the subkey authenticates only.
    k.change_usage(&primary, 0, "S");
    k.change_usage(&sub, 1, "SA");
    let after = keys(&[&primary, &sub]);
    let (why, detail) = check_commit(w, &by_primary, &after).unwrap_err();
    assert_eq!(why, Why::UntrustedKey, "{detail}");
    assert!(
        detail.contains(&primary) && detail.contains("not a signing key"),
        "{detail}"
    );
    let (why, detail) = check_commit(w, &by_sub, &after).unwrap_err();
    assert_eq!(why, Why::UntrustedKey, "{detail}");
    assert!(detail.contains("not bound as a signing key"), "{detail}");
}

/// gpg's `--faked-system-time` for now plus `secs`.
fn k_time(secs: i64) -> String {
    let t = k8s_openapi::jiff::Timestamp::now()
        .checked_add(k8s_openapi::jiff::SignedDuration::from_secs(secs))
        .unwrap();
    t.strftime("%Y%m%dT%H%M%S").to_string()
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

mod source {
    //! The Git source with verification, on a local bare repository: what it accepts, what it
    //! refuses while keeping the last verified revision, across a restart, and `all` mode.

    use std::sync::Arc;

    use capstan::source::verify::{KeysError, Mode, TrustedKeys, Why};
    use capstan::source::{
        GitRef, GitSource, SourceConfig, SourceError, SyncOutcome, Verification,
    };

    use crate::source_support::Upstream;
    use crate::source_support::signing::{Keyring, Signer};

    fn open(up: &Upstream, cache: &std::path::Path, v: Verification) -> GitSource {
        let mut s = GitSource::open(SourceConfig {
            url: up.bare.display().to_string(),
            reference: GitRef::Branch("main".into()),
            cache_dir: cache.to_path_buf(),
            ssh_key: None,
            known_hosts: None,
            shallow: false,
            ca_file: None,
        })
        .unwrap();
        s.set_verification(Some(v));
        s
    }

    fn refused(r: Result<SyncOutcome, SourceError>) -> (String, String, Why) {
        match r {
            Err(SourceError::Unverified(u)) => {
                (u.head.clone(), u.refused.commit.clone(), u.refused.why)
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn refused_heads_keep_the_last_verified_revision_across_restarts_and_all_checks_each_commit() {
        let k = Keyring::new();
        let key = k.ssh_key("team", "ed25519");
        let keys = Arc::new(
            TrustedKeys::parse(
                Some((
                    "allowed_signers",
                    &format!("team@example.com {}", k.ssh_public(&key)),
                )),
                None,
            )
            .unwrap(),
        );
        let head_only = Verification {
            mode: Mode::Head,
            keys: Ok(keys.clone()),
            floor: Ok(None),
            allow_rollback: false,
        };
        let all = Verification {
            mode: Mode::All,
            keys: Ok(keys.clone()),
            floor: Ok(None),
            allow_rollback: false,
        };
        let up = Upstream::new(&[("README.md", "# fleet\n")]);
        let signer = Signer::Ssh(key);
        up.write(&[("a.yaml", "a: 1\n")]);
        let s1 = k.commit(&up.work, &signer, "signed 1");
        up.push();
        let cache = tempfile::tempdir().unwrap();
        let mut src = open(&up, cache.path(), head_only.clone());
        match src.sync().unwrap() {
            SyncOutcome::Updated { revision, .. } => assert_eq!(revision.commit, s1),
            other => panic!("{other:?}"),
        }
        assert_eq!(src.verified().unwrap().signer, "team@example.com");

        // An unsigned head: refused, s1 stays.
        let u2 = up.commit_and_push(&[("a.yaml", "a: 2\n")], &[], "unsigned 2");
        assert_eq!(refused(src.sync()), (u2.clone(), u2.clone(), Why::Unsigned));
        assert_eq!(src.last_good().unwrap().commit, s1);

        // A new process on the same mirror goes on with s1, the last verified commit.
        drop(src);
        let mut src = open(&up, cache.path(), head_only.clone());
        assert_eq!(refused(src.sync()).2, Why::Unsigned);
        assert_eq!(src.last_good().map(|r| r.commit.clone()), Some(s1.clone()));
        assert_eq!(src.verified().unwrap().commit, s1);

        // Another unsigned commit, then a signed one on top: the head verifies, but `all`
        // refuses the first unsigned commit since s1.
        let _u3 = up.commit_and_push(&[("a.yaml", "a: 3\n")], &[], "unsigned 3");
        up.write(&[("a.yaml", "a: 4\n")]);
        let s4 = k.commit(&up.work, &signer, "signed 4");
        up.push();
        let mut strict = open(&up, cache.path(), all);
        assert_eq!(
            refused(strict.sync()),
            (s4.clone(), u2.clone(), Why::Unsigned)
        );
        assert_eq!(strict.last_good().unwrap().commit, s1);
        // Head mode accepts s4, and it becomes the last verified commit.
        src.set_verification(Some(head_only));
        match src.sync().unwrap() {
            SyncOutcome::Updated { revision, .. } => assert_eq!(revision.commit, s4),
            other => panic!("{other:?}"),
        }

        // Keys that cannot be read refuse every new revision.
        let s5 = {
            up.write(&[("a.yaml", "a: 5\n")]);
            let c = k.commit(&up.work, &signer, "signed 5");
            up.push();
            c
        };
        src.set_verification(Some(Verification {
            mode: Mode::Head,
            keys: Err(KeysError::Empty("allowed_signers".into())),
            floor: Ok(None),
            allow_rollback: false,
        }));
        assert_eq!(refused(src.sync()), (s5.clone(), s5, Why::NoTrustedKeys));
        assert_eq!(src.last_good().unwrap().commit, s4);
    }
    /// Every shape of history a push can give the followed branch, with every mode: each is a
    /// step forward or a refusal with its reason — never a panic (a head that is an ancestor of
    /// the last verified commit once emptied the walk and stopped the agent for good) and never
    /// a rollback without leave.
    #[test]
    fn every_history_shape_is_a_step_forward_or_a_refusal_never_a_panic_or_a_rollback() {
        let k = Keyring::new();
        let key = k.ssh_key("team", "ed25519");
        let keys = Arc::new(
            TrustedKeys::parse(
                Some((
                    "allowed_signers",
                    &format!("team@example.com {}", k.ssh_public(&key)),
                )),
                None,
            )
            .unwrap(),
        );
        let v = |mode: Mode, floor: Result<Option<String>, String>, allow_rollback: bool| {
            Verification {
                mode,
                keys: Ok(keys.clone()),
                floor,
                allow_rollback,
            }
        };
        let updated = |r: Result<SyncOutcome, SourceError>| match r {
            Ok(SyncOutcome::Updated { revision, .. }) => revision,
            other => panic!("expected an update, got {other:?}"),
        };
        let signer = Signer::Ssh(key);
        let up = Upstream::new(&[("README.md", "# fleet\n")]);
        up.write(&[("a.yaml", "a: 1\n")]);
        let s1 = k.commit(&up.work, &signer, "signed 1");
        up.push();
        let cache = tempfile::tempdir().unwrap();
        let mut src = open(&up, cache.path(), v(Mode::All, Ok(None), false));
        assert_eq!(updated(src.sync()).commit, s1, "first use: the head alone");
        up.write(&[("a.yaml", "a: 2\n")]);
        let s2 = k.commit(&up.work, &signer, "signed 2");
        up.push();
        assert_eq!(updated(src.sync()).commit, s2);

        // The branch moved back to an ancestor (force-push): a rollback in both modes.
        crate::source_support::git(&up.work, &["reset", "-q", "--hard", &s1]);
        up.push();
        for mode in [Mode::All, Mode::Head] {
            src.set_verification(Some(v(mode, Ok(None), false)));
            assert_eq!(refused(src.sync()), (s1.clone(), s1.clone(), Why::Rollback));
            assert_eq!(src.last_good().unwrap().commit, s2, "{mode:?}");
        }
        // With an admin's leave it is applied, and forward from there again.
        src.set_verification(Some(v(Mode::All, Ok(None), true)));
        assert_eq!(updated(src.sync()).commit, s1);
        src.set_verification(Some(v(Mode::All, Ok(None), false)));
        crate::source_support::git(&up.work, &["reset", "-q", "--hard", &s2]);
        up.push();
        assert_eq!(updated(src.sync()).commit, s2);

        // The same commit again, in a new process on the same mirror (whose verified ref is the
        // head): accepted. This shape once panicked on every restart.
        drop(src);
        let mut src = open(&up, cache.path(), v(Mode::All, Ok(None), false));
        assert_eq!(updated(src.sync()).commit, s2);

        // A signed commit with an empty tree, on top: a step forward like any other.
        let emptied = {
            crate::source_support::git(&up.work, &["rm", "-rqf", "."]);
            let c = k.commit(&up.work, &signer, "signed, empty tree");
            up.push();
            c
        };
        let rev = updated(src.sync());
        assert_eq!(rev.commit, emptied);
        assert!(rev.tree.entries.is_empty(), "{:?}", rev.tree.entries.keys());

        // A merge whose second parent is unsigned: `all` refuses that parent, `head` checks
        // the signed merge alone.
        up.write(&[("a.yaml", "a: 3\n")]);
        let s3 = k.commit(&up.work, &signer, "signed 3");
        crate::source_support::git(&up.work, &["checkout", "-q", "-b", "side", &emptied]);
        up.write(&[("b.yaml", "b: 1\n")]);
        let unsigned = up.commit("unsigned, on a side branch");
        crate::source_support::git(&up.work, &["checkout", "-q", "main"]);
        crate::source_support::git(&up.work, &["merge", "-q", "--no-ff", "--no-commit", "side"]);
        let merge = k.commit(&up.work, &signer, "signed merge of side");
        up.push();
        assert_eq!(
            refused(src.sync()),
            (merge.clone(), unsigned.clone(), Why::Unsigned)
        );
        assert_eq!(src.last_good().unwrap().commit, emptied);
        src.set_verification(Some(v(Mode::Head, Ok(None), false)));
        assert_eq!(updated(src.sync()).commit, merge);
        let _ = s3;

        // An unrelated history, signed: a rollback of another kind.
        up.write(&[("a.yaml", "a: 1\n")]);
        let orphan = {
            crate::source_support::git(&up.work, &["checkout", "-q", "--orphan", "rewrite"]);
            let c = k.commit(&up.work, &signer, "signed, unrelated");
            crate::source_support::git(&up.work, &["branch", "-M", "rewrite", "main"]);
            up.push();
            c
        };
        src.set_verification(Some(v(Mode::All, Ok(None), false)));
        assert_eq!(
            refused(src.sync()),
            (orphan.clone(), orphan.clone(), Why::Rollback)
        );

        // A replaced pod: an empty mirror, and the position kept outside it. The kept merge
        // commit is not in the unrelated head's history: refused, though this process never
        // saw the merge.
        let fresh = tempfile::tempdir().unwrap();
        let mut pod = open(
            &up,
            fresh.path(),
            v(Mode::Head, Ok(Some(merge.clone())), false),
        );
        assert_eq!(
            refused(pod.sync()),
            (orphan.clone(), orphan.clone(), Why::Rollback)
        );
        assert!(pod.last_good().is_none(), "nothing verified to go on with");
        // A position that cannot be read, or is no commit id, refuses every head.
        pod.set_verification(Some(v(
            Mode::Head,
            Err("the API server is down".into()),
            false,
        )));
        assert_eq!(refused(pod.sync()).2, Why::Unreadable);
        pod.set_verification(Some(v(Mode::Head, Ok(Some("not a commit".into())), false)));
        assert_eq!(refused(pod.sync()).2, Why::Unreadable);
        // An admin who sets the position to the orphan allows exactly that head.
        pod.set_verification(Some(v(Mode::All, Ok(Some(orphan.clone())), false)));
        assert_eq!(updated(pod.sync()).commit, orphan);
    }
}

mod commands {
    //! `capstan diff`, `plan` and `run` with `--verify-commits`, as the binary.

    use crate::source_support::git;
    use crate::source_support::signing::{Keyring, Signer};

    /// The capstan binary with `args` and no usable kubeconfig: its exit code and stderr.
    fn capstan_stderr(args: &[&str]) -> (i32, String) {
        let out = capstan_harness::run::capstan(args)
            .env("KUBECONFIG", "/nonexistent/kubeconfig")
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    #[test]
    fn diff_and_plan_refuse_unverified_commits_and_run_needs_keys() {
        let k = Keyring::new();
        let key = k.ssh_key("team", "ed25519");
        let allowed = k.dir.path().join("allowed_signers");
        std::fs::write(
            &allowed,
            format!("team@example.com {}\n", k.ssh_public(&key)),
        )
        .unwrap();
        let allowed = allowed.to_str().unwrap();
        let repo = tempfile::tempdir().unwrap();
        let r = repo.path();
        let dir = r.to_str().unwrap();
        git(r, &["init", "-q", "-b", "main"]);
        std::fs::write(r.join("README.md"), "# fleet\n").unwrap();
        let base = k.commit(r, &Signer::Ssh(key.clone()), "signed base");
        std::fs::write(r.join("README.md"), "# fleet, unsigned\n").unwrap();
        git(r, &["commit", "-qam", "unsigned"]);
        std::fs::write(r.join("README.md"), "# fleet, signed again\n").unwrap();
        let head = k.commit(r, &Signer::Ssh(key), "signed head");

        // The head is signed: diff goes on to compare (this repository is no fleet, which it
        // reports; verification itself passed).
        let (_, err) = capstan_stderr(&[
            "diff",
            dir,
            "--base",
            &base,
            "--head",
            "HEAD",
            "--verify-commits",
            "--allowed-signers",
            allowed,
        ]);
        assert!(!err.contains("refused"), "{err}");
        assert!(
            err.contains(&format!(
                "commit {}: good SSH signature by team@example.com",
                &head[..12]
            )),
            "{err}"
        );
        // Every commit from base to head: the unsigned one in between is refused.
        let (code, err) = capstan_stderr(&[
            "diff",
            dir,
            "--base",
            &base,
            "--head",
            "HEAD",
            "--verify-commits=all",
            "--allowed-signers",
            allowed,
        ]);
        assert_eq!(code, 1, "{err}");
        assert!(
            err.contains("refused by --verify-commits") && err.contains("the commit is not signed"),
            "{err}"
        );
        // The working copy's edits are not signed.
        let (code, err) = capstan_stderr(&[
            "diff",
            dir,
            "--base",
            &base,
            "--verify-commits",
            "--allowed-signers",
            allowed,
        ]);
        assert_eq!(code, 1, "{err}");
        assert!(err.contains("--head"), "{err}");

        // plan refuses an unsigned HEAD before it talks to any cluster.
        git(r, &["commit", "-q", "--allow-empty", "-m", "unsigned head"]);
        let (code, err) = capstan_stderr(&[
            "plan",
            dir,
            "--verify-commits",
            "--allowed-signers",
            allowed,
        ]);
        assert_eq!(code, 1, "{err}");
        assert!(
            err.contains("refused by --verify-commits") && err.contains("not signed"),
            "{err}"
        );

        // run: keys are required, and a working copy has no commits to verify.
        let (code, err) = capstan_stderr(&[
            "run",
            "--repo",
            "https://example.com/fleet.git",
            "--verify-commits",
        ]);
        assert_eq!(code, 1, "{err}");
        assert!(err.contains("--verify-commits needs trusted keys"), "{err}");
        let (code, err) = capstan_stderr(&[
            "run",
            "--repo",
            dir,
            "--verify-commits",
            "--allowed-signers",
            allowed,
        ]);
        assert_eq!(code, 1, "{err}");
        assert!(err.contains("read as a working copy"), "{err}");
        let (code, err) = capstan_stderr(&[
            "run",
            "--repo",
            "https://example.com/fleet.git",
            "--verify-commits",
            "--allowed-signers",
            "/nonexistent/allowed",
        ]);
        assert_eq!(code, 1, "{err}");
        assert!(err.contains("cannot read /nonexistent/allowed"), "{err}");
    }
}
