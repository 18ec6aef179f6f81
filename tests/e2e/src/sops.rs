//! Files encrypted by the real `sops` (built from Go modules at the version of versions.env),
//! for the tests of capstan's SOPS reader and of encrypted add-ons.

use std::path::Path;
use std::process::Command;

/// `sops encrypt` of `plain`, written as `name` in `dir` (its extension tells sops the format),
/// with `args` (recipients, rules); sops's output. `key_file`: the identities sops may use.
pub fn encrypt(dir: &Path, key_file: &Path, name: &str, plain: &str, args: &[&str]) -> String {
    let mut all = vec!["encrypt"];
    all.extend_from_slice(args);
    sops(dir, key_file, name, plain, &all)
}

/// `sops ARGS FILE` in `dir`, `text` written as `name` there first; its output, once it succeeded.
fn sops(dir: &Path, key_file: &Path, name: &str, text: &str, args: &[&str]) -> String {
    let sops = capstan_harness::binaries::ensure_sops().expect("building sops");
    let file = dir.join(name);
    std::fs::write(&file, text).unwrap();
    let out = Command::new(sops)
        .args(args)
        .arg(&file)
        .env("SOPS_AGE_KEY_FILE", key_file)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "sops {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A Secret's data only, as capstan wants encrypted files written.
pub fn data_only(recipient: &str) -> [&str; 4] {
    [
        "--age",
        recipient,
        "--encrypted-regex",
        "^(data|stringData)$",
    ]
}

/// `sops updatekeys` of `text` (written as `name` in `dir`) to the age `recipients`
/// (comma-separated) through a `.sops.yaml` creation rule, as an admin rotates keys: the data key
/// stays, re-encrypted for the new recipients. `key_file` holds an identity that opens it.
pub fn updatekeys(dir: &Path, key_file: &Path, name: &str, text: &str, recipients: &str) -> String {
    std::fs::write(
        dir.join(".sops.yaml"),
        format!(
            "creation_rules:\n  - age: \"{recipients}\"\n    encrypted_regex: ^(data|stringData)$\n"
        ),
    )
    .unwrap();
    sops(dir, key_file, name, text, &["updatekeys", "-y"]);
    std::fs::read_to_string(dir.join(name)).unwrap()
}
