//! The refusals that need no real signature. Signatures made by real `gpg` and `ssh-keygen`
//! (good, untrusted, tampered, expired, revoked, outside valid-before) are in the offline
//! integration tests (`agent/tests/offline/verify.rs`), which make them on the spot.

use super::*;

const KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGnL0cm9luuSeuyEiv8BEKqEN0nfW9gtVDY+cA/VaA9+";

fn keys() -> TrustedKeys {
    TrustedKeys::parse(Some(("allowed", &format!("a@b {KEY}"))), None).unwrap()
}

fn commit(extra: &str) -> Vec<u8> {
    format!(
        "tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\nauthor a <a@b> 1 +0000\ncommitter a <a@b> 1 +0000\n{extra}\nmessage\n"
    )
    .into_bytes()
}

fn refused(data: &[u8]) -> Refused {
    verify_commit("0123456789abcdef", data, &keys(), SystemTime::now()).unwrap_err()
}

#[test]
fn an_unsigned_commit_is_refused() {
    let r = refused(&commit(""));
    assert_eq!(r.why, Why::Unsigned);
    assert_eq!(
        r.to_string(),
        "commit 0123456789ab: the commit is not signed"
    );
}

#[test]
fn an_x509_signature_is_refused_as_unsupported() {
    let r = refused(&commit(
        "gpgsig -----BEGIN SIGNED MESSAGE-----\n MIAGCSqGSIb3DQEHAqCAMIACAQEx\n -----END SIGNED MESSAGE-----",
    ));
    assert_eq!(r.why, Why::Unsupported);
    assert!(r.detail.contains("X.509"), "{r}");
    let r = refused(&commit("gpgsig something else"));
    assert_eq!(r.why, Why::Unsupported);
}

#[test]
fn garbage_in_the_signature_headers_is_a_bad_signature() {
    let r = refused(&commit(
        "gpgsig -----BEGIN SSH SIGNATURE-----\n bm90IGFuIHNzaHNpZw==\n -----END SSH SIGNATURE-----",
    ));
    assert_eq!(r.why, Why::BadSignature);
    assert!(r.detail.starts_with("unreadable SSH signature"), "{r}");
    let r = refused(&commit(
        "gpgsig -----BEGIN PGP SIGNATURE-----\n \n bm90IGEgc2lnbmF0dXJl\n -----END PGP SIGNATURE-----",
    ));
    assert_eq!(r.why, Why::BadSignature);
    assert!(r.detail.starts_with("unreadable OpenPGP signature"), "{r}");
}

#[test]
fn something_that_is_not_a_commit_is_unreadable_or_unsigned() {
    let r = refused(b"\x00\x01 not a commit");
    assert!(matches!(r.why, Why::Unreadable | Why::Unsigned), "{r:?}");
}

#[test]
fn no_key_at_all_is_an_error_naming_the_sources() {
    let e = TrustedKeys::parse(Some(("allowed_signers", "# nobody\n")), None).unwrap_err();
    assert_eq!(
        e.to_string(),
        "no trusted keys: allowed_signers holds no key"
    );
    let e = TrustedKeys::parse(None, Some(("trusted.asc", b"" as &[u8]))).unwrap_err();
    assert_eq!(e.to_string(), "no trusted keys: trusted.asc holds no key");
    let e =
        TrustedKeys::parse(None, Some(("trusted.asc", b"\x99\x00garbage" as &[u8]))).unwrap_err();
    assert!(e.to_string().starts_with("trusted.asc: "), "{e}");
    let e = TrustedKeys::from_files(Some(Path::new("/nonexistent/allowed")), None).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("cannot read /nonexistent/allowed: "),
        "{e}"
    );
}

#[test]
fn every_reason_has_its_own_label() {
    let labels: std::collections::BTreeSet<&str> = Why::ALL.iter().map(|w| w.as_str()).collect();
    assert_eq!(labels.len(), Why::ALL.len());
}
