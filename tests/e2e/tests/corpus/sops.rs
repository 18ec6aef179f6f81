//! capstan's SOPS reader against the real `sops` (built from Go modules at the version of
//! versions.env): every file the tool writes — whole-file and `--encrypted-regex` Secrets,
//! several documents, JSON, every value type, several recipients — decrypts to what `sops
//! decrypt` itself prints; and every change after encryption that the tool refuses, capstan
//! refuses too, naming why without ever printing a decrypted value.

use std::path::{Path, PathBuf};
use std::process::Command;

use age::secrecy::ExposeSecret;
use capstan_layout::sops::{self, SopsError};
use serde_json::Value;

struct Keys {
    dir: tempfile::TempDir,
    fleet: age::x25519::Identity,
    other: age::x25519::Identity,
}

impl Keys {
    fn new() -> Keys {
        let k = Keys {
            dir: tempfile::tempdir().unwrap(),
            fleet: age::x25519::Identity::generate(),
            other: age::x25519::Identity::generate(),
        };
        std::fs::write(k.key_file(), k.fleet.to_string().expose_secret()).unwrap();
        k
    }

    fn key_file(&self) -> PathBuf {
        self.dir.path().join("keys.txt")
    }

    fn recipient(&self) -> String {
        self.fleet.to_public().to_string()
    }
}

fn sops_bin() -> PathBuf {
    capstan_harness::binaries::ensure_sops().expect("building sops")
}

/// `sops encrypt` of `plain` (written as `name`, whose extension tells sops the format).
fn sops_encrypt(keys: &Keys, name: &str, plain: &str, args: &[&str]) -> String {
    capstan_e2e::sops::encrypt(keys.dir.path(), &keys.key_file(), name, plain, args)
}

/// What `sops decrypt` makes of `text` (as `name`), read as capstan reads YAML; `None` when it
/// refuses.
fn sops_decrypt(keys: &Keys, name: &str, text: &str) -> Option<Vec<Value>> {
    let file = keys.dir.path().join(format!("dec-{name}"));
    std::fs::write(&file, text).unwrap();
    let ext = Path::new(name).extension().unwrap().to_str().unwrap();
    let out = Command::new(sops_bin())
        .args(["decrypt", "--input-type", ext, "--output-type", "yaml"])
        .arg(&file)
        .env("SOPS_AGE_KEY_FILE", keys.key_file())
        .output()
        .unwrap();
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).unwrap();
    Some(capstan_templates::yaml::parse_values(&text).unwrap())
}

const SECRET: &str = "\
apiVersion: v1
kind: Secret
metadata:
  name: team-a-db
  namespace: team-a
  labels:
    tier: data
type: Opaque
stringData:
  password: hunter2
  port: 5432
  flag: true
  ratio: 1.5
  big: -9007199254740993
  empty: \"\"
  quoted: \"0042\"
  list: [a, b]
  nested:
    deeper: {x: y}
";

#[test]
fn what_sops_writes_capstan_decrypts_to_what_sops_reads() {
    let keys = Keys::new();
    let second = age::x25519::Identity::generate();
    let both = format!("{},{}", keys.other.to_public(), keys.recipient());
    let multi = format!(
        "{SECRET}---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  k: v\n"
    );
    let json = serde_json::to_string_pretty(&serde_json::json!({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "j"},
        "stringData": {"token": "abc", "n": 3, "on": false}
    }))
    .unwrap();
    let r = keys.recipient();
    let cases: Vec<(&str, String, Vec<&str>)> = vec![
        ("whole.yaml", SECRET.into(), vec!["--age", &r]),
        (
            "regex.yaml",
            SECRET.into(),
            vec!["--age", &r, "--encrypted-regex", "^(data|stringData)$"],
        ),
        (
            "unencrypted-regex.yaml",
            SECRET.into(),
            vec![
                "--age",
                &r,
                "--unencrypted-regex",
                "^(apiVersion|kind|metadata|type)$",
            ],
        ),
        (
            "suffix.yaml",
            SECRET.replace("password:", "password_unencrypted:"),
            vec!["--age", &r],
        ),
        (
            "multi.yaml",
            multi,
            vec!["--age", &r, "--encrypted-regex", "^data|stringData$"],
        ),
        ("secret.json", json, vec!["--age", &r]),
        ("two-recipients.yaml", SECRET.into(), vec!["--age", &both]),
    ];
    for (name, plain, args) in &cases {
        let text = sops_encrypt(&keys, name, plain, args);
        assert!(sops::is_sops(&text), "{name}");
        let env = sops::check(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(env.recipients().contains(&keys.recipient()), "{name}");
        let ours = sops::decrypt(&text, std::slice::from_ref(&keys.fleet))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let theirs = sops_decrypt(&keys, name, &text).expect("sops decrypts its own file");
        assert_eq!(ours, theirs, "{name}");
        assert!(
            ours.iter().any(|d| d.pointer("/stringData/port").is_some()
                || d.pointer("/stringData/token").is_some()),
            "{name}: nothing decrypted"
        );
        // A key that is not a recipient opens nothing.
        let e = sops::decrypt(&text, std::slice::from_ref(&second)).unwrap_err();
        assert!(matches!(e, SopsError::NoKey { .. }), "{name}: {e}");
        assert!(e.to_string().contains(&keys.recipient()), "{e}");
    }
    println!(
        "{} files written by sops decrypted as sops decrypts them",
        cases.len()
    );
}

/// What a refusal must be.
type Expected = fn(&SopsError) -> bool;

/// Each change after encryption: what `sops decrypt` says (refused, or not), and capstan's
/// refusal with its reason.
#[test]
fn a_change_after_encryption_is_refused_as_sops_refuses_it() {
    let keys = Keys::new();
    let r = keys.recipient();
    let regex = sops_encrypt(
        &keys,
        "a.yaml",
        SECRET,
        &["--age", &r, "--encrypted-regex", "^(data|stringData)$"],
    );
    let whole = sops_encrypt(&keys, "w.yaml", SECRET, &["--age", &r]);
    let other_file = sops_encrypt(
        &keys,
        "b.yaml",
        &SECRET
            .replace("team-a", "team-b")
            .replace("hunter2", "letmein"),
        &["--age", &r, "--encrypted-regex", "^(data|stringData)$"],
    );
    let line = |text: &str, key: &str| -> String {
        text.lines()
            .find(|l| l.trim_start().starts_with(&format!("{key}:")))
            .unwrap_or_else(|| panic!("{key} in\n{text}"))
            .split_once(": ")
            .unwrap()
            .1
            .to_string()
    };
    let password = line(&regex, "password");
    let port = line(&regex, "port");
    let cases: Vec<(&str, String, Expected)> = vec![
        // The plain metadata is covered by the MAC: another cluster's name or namespace cannot
        // be put on a ciphertext.
        (
            "renamed",
            regex.replace("name: team-a-db", "name: team-b-db"),
            |e| *e == SopsError::Mac,
        ),
        (
            "namespace moved",
            regex.replace("namespace: team-a", "namespace: team-b"),
            |e| *e == SopsError::Mac,
        ),
        (
            "label added",
            regex.replace("tier: data", "tier: data\n        extra: x"),
            |e| *e == SopsError::Mac,
        ),
        // A value moved to another key does not open (its key path is its additional data).
        (
            "values swapped",
            regex
                .replace(&format!("password: {password}"), "password: SWAP")
                .replace(&format!("port: {port}"), &format!("port: {password}"))
                .replace("password: SWAP", &format!("password: {port}")),
            |e| matches!(e, SopsError::Tampered(p) if p == "stringData.password"),
        ),
        // A value from another file (another data key) does not open either.
        (
            "value from another file",
            regex.replace(&password, &line(&other_file, "password")),
            |e| matches!(e, SopsError::Tampered(_)),
        ),
        // Removing a value changes the MAC.
        (
            "value removed",
            regex.replace(&format!("    port: {port}\n"), ""),
            |e| *e == SopsError::Mac,
        ),
        // A value put in plain text where the rules encrypt.
        (
            "plain value added",
            regex.replace("    flag:", "    injected: plain\n    flag:"),
            |e| matches!(e, SopsError::Value { path, .. } if path == "stringData.injected"),
        ),
        // The MAC of another file.
        (
            "mac from another file",
            regex.replace(&line(&regex, "mac"), &line(&other_file, "mac")),
            |e| *e == SopsError::Mac,
        ),
        (
            "lastmodified changed",
            {
                let lm = line(&regex, "lastmodified");
                regex.replace(&lm, "\"2020-01-01T00:00:00Z\"")
            },
            |e| *e == SopsError::Mac,
        ),
        // mac_only_encrypted would leave the plain metadata uncovered.
        (
            "mac only encrypted",
            regex.replace("    version:", "    mac_only_encrypted: true\n    version:"),
            |e| matches!(e, SopsError::Unsupported(m) if m.contains("mac_only_encrypted")),
        ),
        (
            "unknown version",
            regex.replace(&line(&regex, "version"), "4.0.0"),
            |e| matches!(e, SopsError::Version(v) if v == "4.0.0"),
        ),
        // A whole-file encryption's metadata is encrypted: a changed name does not even open.
        (
            "whole file renamed",
            whole.replace(&line(&whole, "name"), &line(&other_file, "password")),
            |e| matches!(e, SopsError::Tampered(p) if p == "metadata.name"),
        ),
    ];
    for (what, text, expected) in &cases {
        let e = sops::decrypt(text, std::slice::from_ref(&keys.fleet))
            .map(|_| ())
            .expect_err(what);
        assert!(expected(&e), "{what}: {e:?}");
        for secret in ["hunter2", "letmein"] {
            assert!(!e.to_string().contains(secret), "{what}: {e}");
        }
        // sops refuses every one of these too (the unknown version it reads: 4.0.0 is a
        // version capstan refuses on purpose, as one it was not checked against).
        if *what != "unknown version" {
            assert!(
                sops_decrypt(&keys, "t.yaml", text).is_none(),
                "{what}: sops decrypts it"
            );
        }
    }
    // Unchanged, both decrypt it.
    assert!(sops::decrypt(&regex, std::slice::from_ref(&keys.fleet)).is_ok());
    assert!(sops_decrypt(&keys, "t.yaml", &regex).is_some());
    println!("{} changes after encryption refused", cases.len());
}

/// A copy of the example fleet whose `dev` cluster carries `file` (a path under the fleet) and
/// whose fleet.yaml lists `recipients`.
fn example_fleet_with(files: &[(&str, &str)], recipients: &[String]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let src = capstan_harness::run::example_fleet();
    for f in capstan_harness::run::files_under(&src, &[".git"]) {
        let to = dir.path().join(f.strip_prefix(&src).unwrap());
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(&f, &to).unwrap();
    }
    if !recipients.is_empty() {
        let cfg = dir.path().join("clusters/mgmt/fleet.yaml");
        let text = std::fs::read_to_string(&cfg).unwrap().replace(
            "spec:\n",
            &format!(
                "spec:\n  sops:\n    ageRecipients: [{}]\n",
                recipients.join(", ")
            ),
        );
        std::fs::write(cfg, text).unwrap();
    }
    for (path, text) in files {
        let to = dir.path().join(path);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::write(to, text).unwrap();
    }
    dir
}

/// `capstan validate` of a fleet: exit status, and stdout with stderr.
fn validate(dir: &Path) -> (bool, String) {
    let out = capstan_harness::run::capstan_output(&["validate", dir.to_str().unwrap()]);
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

const ADDON: &str = "clusters/mgmt/workload-clusters/dev/addons/db.sops.yaml";

/// At PR time, without any key: an encrypted add-on Secret for the fleet's recipients validates;
/// each way of getting it wrong is refused naming the file, and never shows a value.
#[test]
fn validate_checks_encrypted_add_ons_without_a_key() {
    let keys = Keys::new();
    let r = keys.recipient();
    let foreign = keys.other.to_public().to_string();
    let data_only = [
        "--age",
        r.as_str(),
        "--encrypted-regex",
        "^(data|stringData)$",
    ];
    // A Secret as the API server takes it: string values only.
    let secret = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\n  annotations:\n    capstan.dev/encrypted-for: dev\n  labels:\n    tier: data\ntype: Opaque\nstringData:\n  password: hunter2\n  port: \"5432\"\n  flag: \"true\"\n".to_string();
    let good = sops_encrypt(&keys, "g.yaml", &secret, &data_only);
    let (ok, out) =
        validate(example_fleet_with(&[(ADDON, &good)], std::slice::from_ref(&r)).path());
    assert!(ok, "{out}");

    let whole = sops_encrypt(&keys, "w.yaml", &secret, &["--age", &r]);
    let other_fleet = sops_encrypt(
        &keys,
        "o.yaml",
        &secret,
        &[
            "--age",
            &foreign,
            "--encrypted-regex",
            "^(data|stringData)$",
        ],
    );
    let config_map = sops_encrypt(
        &keys,
        "c.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  k: v\n",
        &data_only,
    );
    let plain_added = good.replace("    flag:", "    injected: plain\n    flag:");
    let cases: Vec<(&str, String, Vec<String>, &str)> = vec![
        ("plain Secret", secret.clone(), vec![], "sops encrypt --age"),
        (
            "whole file encrypted",
            whole,
            vec![],
            "encrypt only a Secret's data",
        ),
        (
            "another fleet's recipient",
            other_fleet,
            vec![r.clone()],
            "not encrypted for the fleet's recipient",
        ),
        (
            "a ConfigMap encrypted",
            config_map,
            vec![],
            "only Secrets are kept encrypted",
        ),
        (
            "a value added in plain text",
            plain_added,
            vec![],
            "stringData.injected",
        ),
        (
            "mac_only_encrypted",
            good.replace("    version:", "    mac_only_encrypted: true\n    version:"),
            vec![],
            "mac_only_encrypted",
        ),
    ];
    for (what, text, recipients, needle) in &cases {
        let (ok, out) = validate(example_fleet_with(&[(ADDON, text)], recipients).path());
        assert!(!ok, "{what}: validates\n{out}");
        assert!(
            out.contains("db.sops.yaml"),
            "{what}: file not named\n{out}"
        );
        assert!(out.contains(needle), "{what}: `{needle}` not said\n{out}");
        assert!(!out.contains("hunter2"), "{what}: a value shown\n{out}");
    }
    println!("{} encrypted add-on files refused at validate", cases.len());
}

const OWN: &str = "clusters/mgmt/workload-clusters/dev/registry.sops.yaml";
const MGMT_OWN: &str = "clusters/mgmt/credentials.sops.yaml";

/// A cluster directory's own encrypted Secrets (applied on the management cluster): bound to
/// `<management>:<cluster>` by `capstan secret encrypt` from where the file is, validated without a
/// key; copied into the cluster's add-ons (to have management-side credentials applied inside
/// the workload cluster, where its users read them), into another cluster's directory, or
/// renamed for another cluster, each is refused naming the file.
#[test]
fn a_cluster_directorys_encrypted_secrets_are_bound_to_the_management_side() {
    let keys = Keys::new();
    let r = keys.recipient();
    let own = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: dev-registry-credentials\ntype: Opaque\nstringData:\n  username: robot\n  password: hunter2\n";
    let mgmt_plain = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: prod-vsphere-credentials\n  namespace: eksa-system\n  annotations:\n    capstan.dev/encrypted-for: mgmt:mgmt\ntype: Opaque\nstringData:\n  username: admin@vsphere.local\n  password: hunter2\n";
    let mgmt_sealed = sops_encrypt(
        &keys,
        "m.yaml",
        mgmt_plain,
        &["--age", &r, "--encrypted-regex", "^(data|stringData)$"],
    );
    let fleet = example_fleet_with(
        &[(OWN, own), (MGMT_OWN, &mgmt_sealed)],
        std::slice::from_ref(&r),
    );
    let out = capstan_harness::run::capstan_output(&[
        "secret",
        "encrypt",
        "--in-place",
        fleet.path().join(OWN).to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("capstan.dev/encrypted-for: mgmt:dev"), "{err}");
    let sealed = std::fs::read_to_string(fleet.path().join(OWN)).unwrap();
    assert!(!sealed.contains("hunter2"), "{sealed}");
    let (ok, text) = validate(fleet.path());
    assert!(ok, "{text}");
    // The real sops opens what capstan wrote, bound where it is.
    let theirs = sops_decrypt(&keys, "x.yaml", &sealed).expect("sops decrypts it");
    assert_eq!(
        theirs[0]["metadata"]["annotations"]["capstan.dev/encrypted-for"],
        "mgmt:dev"
    );
    assert_eq!(theirs[0]["stringData"]["password"], "hunter2");

    // With an authenticated registry mirror, a cluster's machines read this Secret: dev, whose
    // directory keeps it, validates clean; legacy, whose does not, is warned where the mirror is
    // written (and still validates: an admin may create it by hand).
    let mirror = "  registryMirrorConfiguration:\n    endpoint: mirror.corp.example\n    authenticate: true\n  clusterNetwork:\n";
    for c in ["dev", "legacy"] {
        let path = fleet
            .path()
            .join(format!("clusters/mgmt/workload-clusters/{c}/cluster.yaml"));
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("  clusterNetwork:\n"), "{c}");
        std::fs::write(&path, text.replacen("  clusterNetwork:\n", mirror, 1)).unwrap();
    }
    let (ok, text) = validate(fleet.path());
    assert!(ok, "{text}");
    let warned: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("missing-secret"))
        .collect();
    assert_eq!(warned.len(), 1, "{text}");
    assert!(
        warned[0].contains("legacy/cluster.yaml")
            && warned[0].contains("legacy-registry-credentials"),
        "{text}"
    );

    let renamed = sops_encrypt(
        &keys,
        "n.yaml",
        &own.replace("dev-registry", "prod-registry").replace(
            "type:",
            "  annotations:\n    capstan.dev/encrypted-for: mgmt:dev\ntype:",
        ),
        &["--age", &r, "--encrypted-regex", "^(data|stringData)$"],
    );
    // (what, where the file goes, its text, the file named, what is said)
    let cases: Vec<(&str, &str, &str, &str, &str)> = vec![
        (
            "the cluster's own Secret copied into its add-ons",
            ADDON,
            &sealed,
            "db.sops.yaml",
            "it says `mgmt:dev`",
        ),
        (
            "the management directory's Secret copied into a workload directory",
            OWN,
            &mgmt_sealed,
            "registry.sops.yaml",
            "it says `mgmt:mgmt`",
        ),
        (
            "dev's Secret copied into legacy's directory",
            "clusters/mgmt/workload-clusters/legacy/registry.sops.yaml",
            &sealed,
            "legacy/registry.sops.yaml",
            "it says `mgmt:dev`",
        ),
        (
            "a Secret named for another cluster",
            OWN,
            &renamed,
            "registry.sops.yaml",
            "the name belongs to cluster `prod`",
        ),
    ];
    for (what, path, text, file, needle) in &cases {
        let all = [(MGMT_OWN, mgmt_sealed.as_str()), (*path, *text)];
        let (ok, out) = validate(example_fleet_with(&all, std::slice::from_ref(&r)).path());
        assert!(!ok, "{what}: validates\n{out}");
        assert!(out.contains(file), "{what}: file not named\n{out}");
        assert!(out.contains(needle), "{what}: `{needle}` not said\n{out}");
        assert!(!out.contains("hunter2"), "{what}: a value shown\n{out}");
    }
    println!(
        "{} misplaced cluster-directory Secrets refused at validate",
        cases.len()
    );
}

/// `capstan secret encrypt` writes what `sops` decrypts (the real tool is the oracle of the
/// writer too), bound to the file's place, for fleet.yaml's recipients; validate takes it; and it
/// refuses what it must, writing nothing.
#[test]
fn capstan_encrypts_what_sops_decrypts() {
    let keys = Keys::new();
    let r = keys.recipient();
    let plain = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\ntype: Opaque\nstringData:\n  password: hunter2\n  port: 5432\n  on: true\n  ratio: 0.25\n  empty: \"\"\n---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: second\ndata:\n  token: aHVudGVyMg==\n";
    let fleet = example_fleet_with(&[(ADDON, plain)], std::slice::from_ref(&r));
    let file = fleet.path().join(ADDON);
    let out = capstan_harness::run::capstan_output(&[
        "secret",
        "encrypt",
        "--in-place",
        file.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sealed = std::fs::read_to_string(&file).unwrap();
    assert!(
        !sealed.contains("hunter2") && !sealed.contains("aHVudGVyMg=="),
        "{sealed}"
    );
    let (ok, text) = validate(fleet.path());
    assert!(ok, "{text}");
    let theirs = sops_decrypt(&keys, "x.yaml", &sealed).expect("sops decrypts capstan's file");
    let ours = sops::decrypt(&sealed, std::slice::from_ref(&keys.fleet)).unwrap();
    assert_eq!(ours, theirs);
    let mut want = capstan_templates::yaml::parse_values(plain).unwrap();
    for d in &mut want {
        d["metadata"]["annotations"] = serde_json::json!({"capstan.dev/encrypted-for": "dev"});
    }
    assert_eq!(theirs, want);

    // Refusals: nothing written.
    let refused = |path: &Path, args: &[&str], needle: &str| {
        let before = std::fs::read(path).ok();
        let mut all = vec!["secret", "encrypt", "--in-place"];
        all.extend_from_slice(args);
        all.push(path.to_str().unwrap());
        let out = capstan_harness::run::capstan_output(&all);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} {}", path.display());
        assert!(err.contains(needle), "`{needle}` not in: {err}");
        assert_eq!(
            std::fs::read(path).ok(),
            before,
            "{} changed",
            path.display()
        );
    };
    refused(&file, &[], "encrypted already");
    let outside = fleet.path().join("docs/secret.yaml");
    std::fs::create_dir_all(outside.parent().unwrap()).unwrap();
    std::fs::write(&outside, plain).unwrap();
    refused(&outside, &[], "not in a cluster's directory");
    let config_map = fleet
        .path()
        .join("clusters/mgmt/workload-clusters/dev/addons/cm.yaml");
    std::fs::write(
        &config_map,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  k: v\n",
    )
    .unwrap();
    refused(&config_map, &[], "only Secrets are kept encrypted");
    let elsewhere = fleet
        .path()
        .join("clusters/mgmt/workload-clusters/dev/addons/other.yaml");
    std::fs::write(&elsewhere, "apiVersion: v1\nkind: Secret\nmetadata:\n  name: o\n  annotations: {capstan.dev/encrypted-for: legacy}\nstringData:\n  k: v\n").unwrap();
    refused(&elsewhere, &[], "capstan.dev/encrypted-for: legacy");
    let no_recipients = example_fleet_with(&[(ADDON, plain)], &[]);
    refused(
        &no_recipients.path().join(ADDON),
        &[],
        "spec.sops.ageRecipients",
    );
    // --age instead of fleet.yaml's.
    let out = capstan_harness::run::capstan_output(&[
        "secret",
        "encrypt",
        "--age",
        &keys.other.to_public().to_string(),
        no_recipients.path().join(ADDON).to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8(out.stdout).unwrap();
    assert!(sops::decrypt(&printed, std::slice::from_ref(&keys.other)).is_ok());
    assert!(sops::decrypt(&printed, std::slice::from_ref(&keys.fleet)).is_err());
}

/// `capstan hardware import`: EKS Anywhere's hardware CSV into the management directory, the BMC
/// passwords encrypted before anything is written. The plain file holds the Hardware (labelled
/// for the cluster) and the Rufio Machines; the sealed one opens with the real `sops` to the
/// credentials; the fleet validates without a key. A CSV with problems is refused with each
/// line named, and so is a second import of the same machines; neither writes anything.
#[test]
fn hardware_import_keeps_bmc_passwords_encrypted() {
    let keys = Keys::new();
    let r = keys.recipient();
    let fleet = example_fleet_with(&[], std::slice::from_ref(&r));
    // The example fleet's bare-metal cluster `rack` needs 3 control-plane machines, 2 workers and
    // a GPU worker, each group with a spare for rolling upgrades.
    let csv = keys.dir.path().join("rack-1.csv");
    let mut rows = String::from(
        "hostname,bmc_ip,bmc_username,bmc_password,mac,ip_address,netmask,gateway,nameservers,labels,disk\n",
    );
    for (i, (host, kind)) in [
        ("cp-1", "cp"),
        ("cp-2", "cp"),
        ("cp-3", "cp"),
        ("cp-4", "cp"),
        ("worker-1", "worker"),
        ("worker-2", "worker"),
        ("worker-3", "worker"),
        ("gpu-1", "gpu"),
        ("gpu-2", "gpu"),
    ]
    .into_iter()
    .enumerate()
    {
        let bmc = if i < 2 {
            format!("192.168.0.{},Admin,hunter2-bmc-{}", 10 + i, i + 1)
        } else {
            ",,".to_string()
        };
        rows.push_str(&format!(
            "{host},{bmc},00:00:00:00:00:{:02x},10.10.10.{},255.255.255.0,10.10.10.1,1.1.1.1|8.8.8.8,type={kind},/dev/sda\n",
            i + 1,
            10 + i
        ));
    }
    std::fs::write(&csv, rows).unwrap();
    // Before the import, the inventory is empty: nothing is checked.
    let (ok, text) = validate(fleet.path());
    assert!(ok, "{text}");
    let root = fleet.path().to_str().unwrap();
    let import = |file: &Path, more: &[&str]| {
        let mut args = vec![
            "hardware",
            "import",
            file.to_str().unwrap(),
            "--repo",
            root,
            "--management",
            "mgmt",
        ];
        args.extend(more);
        capstan_harness::run::capstan_output(&args)
    };
    let out = import(&csv, &["--cluster", "rack"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("9 Hardware, 2 BMC machine(s)"), "{err}");
    let plain =
        std::fs::read_to_string(fleet.path().join("clusters/mgmt/hardware-rack-1.yaml")).unwrap();
    let docs = capstan_templates::yaml::parse_values(&plain).unwrap();
    let kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds.len(), 11);
    assert_eq!(kinds[..4], ["Hardware", "Machine", "Hardware", "Machine"]);
    assert_eq!(
        docs[0]["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"],
        "rack"
    );
    assert_eq!(
        docs[1]["spec"]["connection"]["authSecretRef"]["name"],
        "bmc-cp-1-auth"
    );
    let sealed_path = fleet
        .path()
        .join("clusters/mgmt/hardware-rack-1-bmc.sops.yaml");
    let sealed = std::fs::read_to_string(&sealed_path).unwrap();
    // No password anywhere in the repository.
    for f in capstan_harness::run::files_under(fleet.path(), &[".git"]) {
        let text = std::fs::read(&f).unwrap();
        assert!(
            !String::from_utf8_lossy(&text).contains("hunter2"),
            "{} holds a password",
            f.display()
        );
    }
    // The inventory holds what `rack` needs, with the spares: no error, no warning.
    let (ok, text) = validate(fleet.path());
    assert!(ok, "{text}");
    assert!(!text.contains("not-enough-hardware"), "{text}");
    let theirs = sops_decrypt(&keys, "bmc.yaml", &sealed).expect("sops decrypts it");
    assert_eq!(theirs.len(), 2);
    assert_eq!(theirs[0]["metadata"]["name"], "bmc-cp-1-auth");
    assert_eq!(theirs[0]["type"], "kubernetes.io/basic-auth");
    assert_eq!(theirs[0]["stringData"]["password"], "hunter2-bmc-1");
    assert_eq!(
        theirs[1]["metadata"]["annotations"]["capstan.dev/encrypted-for"],
        "mgmt:mgmt"
    );

    let snapshot = || {
        capstan_harness::run::files_under(fleet.path(), &[".git"])
            .into_iter()
            .map(|f| (f.clone(), std::fs::read(&f).unwrap()))
            .collect::<Vec<_>>()
    };
    let before = snapshot();
    // The same machines again, under another name.
    let out = import(&csv, &["--name", "again"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("already hold Hardware cp-1, cp-2, cp-3, cp-4, gpu-1"),
        "{err}"
    );
    // A CSV with problems: each named with its line, no password repeated.
    let bad = keys.dir.path().join("bad.csv");
    std::fs::write(
        &bad,
        "hostname,bmc_ip,bmc_username,bmc_password,mac,ip_address,netmask,gateway,nameservers,labels,disk
cp-9,192.168.0.19,Admin,,00:00:00:00:00:09,10.10.10.19,255.255.255.0,10.10.10.1,1.1.1.1,type=cp,/dev/sda
cp-8,192.168.0.18,Admin,hunter2-bmc-8,00:00:00:00:00:09,10.10.10.18,255.255.255.0,10.10.10.1,1.1.1.1,type=cp,sda
",
    )
    .unwrap();
    let out = import(&bad, &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    for want in [
        "bad.csv:2: bmc_password is empty",
        "bad.csv:3: disk `sda`",
        "bad.csv:3: mac `00:00:00:00:00:09` is also on line 2",
        "nothing written",
    ] {
        assert!(err.contains(want), "{want}: {err}");
    }
    assert!(!err.contains("hunter2"), "{err}");
    assert_eq!(snapshot(), before, "a refused import wrote something");
}
