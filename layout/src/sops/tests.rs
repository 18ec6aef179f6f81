//! The rules, the time and value formats, and the refusals, without a key. Decryption itself is
//! checked against files the real `sops` writes (tests/e2e/tests/sops.rs).

use super::*;

fn rules(text: &str) -> Rules {
    let (_, env) = open(text).unwrap();
    env.rules
}

const META: &str = "sops:\n  age:\n    - recipient: age1xyz\n      enc: x\n  lastmodified: \"2026-12-03T07:44:00Z\"\n  mac: m\n  version: 3.13.3\n";

fn path(p: &str) -> Vec<String> {
    p.split('.').map(String::from).collect()
}

#[test]
fn the_rules_decide_as_sops_does() {
    let all = rules(&format!("a: 1\n{META}"));
    assert!(all.encrypts(&path("metadata.name")));
    let suffix = rules(&format!("a: 1\n{META}  unencrypted_suffix: _unencrypted\n"));
    assert!(!suffix.encrypts(&path("x_unencrypted.y")));
    assert!(suffix.encrypts(&path("x.y")));
    let regex = rules(&format!(
        "a: 1\n{META}  encrypted_regex: ^(data|stringData)$\n"
    ));
    assert!(regex.encrypts(&path("stringData.password")));
    assert!(!regex.encrypts(&path("metadata.name")));
    // The encrypting rule wins over the unencrypting one, as in sops.
    let both = rules(&format!(
        "a: 1\n{META}  unencrypted_regex: ^data$\n  encrypted_regex: ^data$\n"
    ));
    assert!(both.encrypts(&path("data.x")));
}

#[test]
fn lastmodified_as_go_formats_it() {
    for (given, want) in [
        ("2026-12-03T07:44:00Z", "2026-12-03T07:44:00Z"),
        ("2026-12-03T07:44:00.123456Z", "2026-12-03T07:44:00Z"),
        ("2026-12-03T07:44:00+00:00", "2026-12-03T07:44:00Z"),
        ("2026-12-03T09:44:00+02:00", "2026-12-03T09:44:00+02:00"),
    ] {
        assert_eq!(decrypt::normalized_time(given).unwrap(), want);
    }
    for bad in [
        "yesterday",
        "2026-12-03 07:44:00Z",
        "2026-12-03T07:44:00",
        "2026-12-03T07:44:00.Z",
    ] {
        assert!(decrypt::normalized_time(bad).is_err(), "{bad}");
    }
}

#[test]
fn refusals_name_their_reason() {
    let refused = |extra: &str| {
        open(&format!("a: 1\n{META}{extra}"))
            .unwrap_err()
            .to_string()
    };
    assert!(refused("  mac_only_encrypted: true\n").contains("mac_only_encrypted"));
    assert!(refused("  encrypted_comment_regex: x\n").contains("comment"));
    assert!(refused("  shamir_threshold: 2\n").contains("Shamir"));
    let pgp_only = "a: 1\nsops:\n  pgp:\n    - fp: ABC\n  lastmodified: \"2026-12-03T07:44:00Z\"\n  mac: m\n  version: 3.13.3\n";
    assert!(
        open(pgp_only)
            .unwrap_err()
            .to_string()
            .contains("only for pgp keys")
    );
    let old = META.replace("3.13.3", "2.0.0");
    assert_eq!(
        open(&format!("a: 1\n{old}")).unwrap_err(),
        SopsError::Version("2.0.0".into())
    );
    assert_eq!(open("a: 1\n").unwrap_err(), SopsError::NotSops);
    assert!(!is_sops("a: 1\nmac: sops\n"));
    assert!(is_sops(&format!("a: 1\n{META}")));
}

#[test]
fn the_check_names_a_value_left_in_plain_text() {
    let mac = "ENC[AES256_GCM,data:AA==,iv:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=,tag:AAAAAAAAAAAAAAAAAAAAAA==,type:str]";
    let meta = META.replace("mac: m", &format!("mac: {mac}"));
    let enc = mac.replace("type:str", "type:int");
    let ok = format!(
        "kind: Secret\nstringData:\n  a: {enc}\n  b: \"\"\n{meta}  encrypted_regex: ^stringData$\n"
    );
    let env = check(&ok).unwrap();
    assert_eq!(env.recipients(), "age1xyz");
    let plain = ok.replace(&format!("a: {enc}"), "a: hunter2");
    let e = check(&plain).unwrap_err();
    assert!(
        matches!(&e, SopsError::Value { path, .. } if path == "stringData.a"),
        "{e}"
    );
    // The error never carries the plain value.
    assert!(!e.to_string().contains("hunter2"));
    let short_iv = ok.replace("iv:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", "iv:AAAA");
    assert!(check(&short_iv).is_err());
    let unknown = ok.replace("type:int", "type:blob");
    assert!(check(&unknown).unwrap_err().to_string().contains("blob"));
}

#[test]
fn times_are_written_as_sops_writes_them() {
    use std::time::{Duration, UNIX_EPOCH};
    for (secs, want) in [
        (0, "1970-01-01T00:00:00Z"),
        (951_782_400, "2000-02-29T00:00:00Z"),
        (1_796_283_840, "2026-12-03T07:44:00Z"),
        (4_107_542_399, "2100-02-28T23:59:59Z"),
    ] {
        assert_eq!(rfc3339(UNIX_EPOCH + Duration::from_secs(secs)), want);
    }
}

#[test]
fn what_capstan_encrypts_it_decrypts_and_checks() {
    let id = age::x25519::Identity::generate();
    let plain = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\nstringData:\n  password: hunter2\n  port: 5432\n  on: true\n  empty: \"\"\n";
    let text = encrypt(plain, &[id.to_public()], DATA_ONLY, "2026-12-03T07:44:00Z").unwrap();
    assert!(!text.contains("hunter2"), "{text}");
    assert!(text.contains("name: db"), "{text}");
    let env = check(&text).unwrap();
    assert_eq!(env.recipients(), id.to_public().to_string());
    let docs = decrypt(&text, std::slice::from_ref(&id)).unwrap();
    assert_eq!(
        docs[0],
        capstan_templates::yaml::parse_values(plain).unwrap()[0]
    );
    assert!(encrypt(&text, &[id.to_public()], DATA_ONLY, "2026-12-03T07:44:00Z").is_err());
}
