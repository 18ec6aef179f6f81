//! Scaffolder round trips through the real binary: init -> new cluster -> validate -> render,
//! for each provider and etcd topology, and the refusals (missing values, overwrite, a cluster
//! that would not validate) leave the repository untouched.

use capstan_harness::run::{capstan_output, files_under};
use std::fs;
use std::path::Path;
use std::process::Command;

fn ok(args: &[&str]) -> String {
    let out = capstan_output(args);
    assert!(
        out.status.success(),
        "capstan {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for e in files_under(dir, &[".git"]) {
        out.push((
            e.strip_prefix(dir).unwrap().display().to_string(),
            fs::read(&e).unwrap(),
        ));
    }
    out.sort();
    out
}

#[test]
fn init_new_validate_render_round_trip() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("fleet");
    let r = repo.to_str().unwrap();
    let out = ok(&[
        "init",
        r,
        "--management",
        "mgmt",
        "--provider",
        "docker",
        "--pod-cidr",
        "192.168.0.0/16",
        "--service-cidr",
        "10.96.0.0/12",
        "--git",
    ]);
    assert!(out.contains("clusters/mgmt/cluster.yaml"), "{out}");
    let log = Command::new("git")
        .args(["-C", r, "log", "--oneline"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&log.stdout).lines().count(), 1);

    // docker, stacked etcd
    ok(&[
        "new",
        "cluster",
        "dev",
        "--management",
        "mgmt",
        "--repo",
        r,
        "--provider",
        "docker",
        "--kubernetes-version",
        "1.33",
        "--control-plane-count",
        "3",
        "--worker-count",
        "2",
        "--pod-cidr",
        "172.16.0.0/16",
        "--service-cidr",
        "10.112.0.0/16",
    ]);
    // docker, external etcd
    ok(&[
        "new",
        "cluster",
        "etcd",
        "--management",
        "mgmt",
        "--repo",
        r,
        "--provider",
        "docker",
        "--kubernetes-version",
        "1.32",
        "--control-plane-count",
        "2",
        "--worker-count",
        "1",
        "--pod-cidr",
        "172.17.0.0/16",
        "--service-cidr",
        "10.113.0.0/16",
        "--external-etcd",
        "3",
    ]);
    // vsphere, external etcd, two groups one autoscaled, placement from a values file
    let values = tmp.path().join("values.yaml");
    fs::write(&values, "vsphere:\n  server: vc.example\n  datacenter: dc1\n  network: VM Network\n  datastore: ds1\n  resourcePool: /dc1/host/c/Resources\n  template: /dc1/vm/ubuntu\n  sshAuthorizedKey: ssh-ed25519 AAAA test\nworkerGroups:\n  - name: general\n    count: 2\n  - name: burst\n    autoscaling: {minCount: 1, maxCount: 5}\n    labels: {pool: burst}\n").unwrap();
    let out = ok(&[
        "new",
        "cluster",
        "vs",
        "--management",
        "mgmt",
        "--repo",
        r,
        "--provider",
        "vsphere",
        "--kubernetes-version",
        "1.33",
        "--control-plane-count",
        "3",
        "--pod-cidr",
        "172.18.0.0/16",
        "--service-cidr",
        "10.114.0.0/16",
        "--endpoint-host",
        "10.0.0.5",
        "--external-etcd",
        "3",
        "--values",
        values.to_str().unwrap(),
    ]);
    assert!(
        out.contains("clusters/mgmt/workload-clusters/vs/cluster.yaml"),
        "{out}"
    );
    assert!(out.contains("validates"), "{out}");

    // nutanix, stacked etcd, Prism Central's names from a values file, the rest defaulted
    let values = tmp.path().join("nutanix.yaml");
    fs::write(&values, "nutanix:\n  endpoint: prism.example\n  image: ubuntu-2204-kube-v1.33\n  cluster: pe-1\n  subnet: vm-net\n  sshAuthorizedKey: ssh-ed25519 AAAA test\n").unwrap();
    let out = ok(&[
        "new",
        "cluster",
        "nx",
        "--management",
        "mgmt",
        "--repo",
        r,
        "--provider",
        "nutanix",
        "--kubernetes-version",
        "1.33",
        "--control-plane-count",
        "3",
        "--worker-count",
        "2",
        "--pod-cidr",
        "172.19.0.0/16",
        "--service-cidr",
        "10.115.0.0/16",
        "--endpoint-host",
        "10.0.0.6",
        "--values",
        values.to_str().unwrap(),
    ]);
    assert!(out.contains("validates"), "{out}");
    let spec =
        fs::read_to_string(repo.join("clusters/mgmt/workload-clusters/nx/cluster.yaml")).unwrap();
    for want in [
        "kind: NutanixDatacenterConfig",
        "kind: NutanixMachineConfig",
        "endpoint: \"prism.example\"",
        "memorySize: \"8Gi\"",
    ] {
        assert!(spec.contains(want), "{want} missing from\n{spec}");
    }
    let rendered = ok(&["render", r, "--cluster", "nx"]);
    for want in [
        "kind: NutanixCluster",
        "kind: NutanixMachineTemplate",
        "name: nx-nutanix-credentials",
    ] {
        assert!(rendered.contains(want), "{want} missing from the render");
    }
    // Prism Central's names are never guessed.
    let empty = tmp.path().join("nutanix-empty.yaml");
    fs::write(&empty, "nutanix:\n  endpoint: prism.example\n").unwrap();
    let before = snapshot(&repo);
    let out = capstan_output(&[
        "new",
        "cluster",
        "nx2",
        "--management",
        "mgmt",
        "--repo",
        r,
        "--provider",
        "nutanix",
        "--pod-cidr",
        "172.20.0.0/16",
        "--service-cidr",
        "10.116.0.0/16",
        "--endpoint-host",
        "10.0.0.7",
        "--values",
        empty.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    for key in ["nutanix.image", "nutanix.cluster", "nutanix.subnet"] {
        assert!(err.contains(key), "{key} not named in:\n{err}");
    }
    assert_eq!(
        snapshot(&repo),
        before,
        "a refused scaffold wrote something"
    );

    // bare metal: the Tinkerbell stack and the OS image from a values file; the machines take
    // only Hardware labelled for the cluster, by role.
    let values = tmp.path().join("tinkerbell.yaml");
    fs::write(&values, "tinkerbell:\n  tinkerbellIP: 10.0.1.20\n  osImageURL: https://images.example/ubuntu-2204-kube-1-33.gz\n  sshAuthorizedKey: ssh-ed25519 AAAA test\n").unwrap();
    let out = ok(&[
        "new",
        "cluster",
        "bm",
        "--management",
        "mgmt",
        "--repo",
        r,
        "--provider",
        "tinkerbell",
        "--pod-cidr",
        "172.21.0.0/16",
        "--service-cidr",
        "10.117.0.0/16",
        "--endpoint-host",
        "10.0.0.8",
        "--values",
        values.to_str().unwrap(),
    ]);
    assert!(out.contains("validates"), "{out}");
    let spec =
        fs::read_to_string(repo.join("clusters/mgmt/workload-clusters/bm/cluster.yaml")).unwrap();
    for want in [
        "kind: TinkerbellDatacenterConfig",
        "tinkerbellIP: \"10.0.1.20\"",
        "cluster.x-k8s.io/cluster-name: \"bm\"",
        "type: \"cp\"",
        "type: \"worker\"",
    ] {
        assert!(spec.contains(want), "{want} missing from\n{spec}");
    }
    let rendered = ok(&["render", r, "--cluster", "bm"]);
    for want in [
        "kind: TinkerbellCluster",
        "kind: TinkerbellMachineTemplate",
        "templateOverride:",
    ] {
        assert!(rendered.contains(want), "{want} missing from the render");
    }
    // The stack's address, the image and the key are never guessed.
    let before = snapshot(&repo);
    let out = capstan_output(&[
        "new",
        "cluster",
        "bm2",
        "--management",
        "mgmt",
        "--repo",
        r,
        "--provider",
        "tinkerbell",
        "--pod-cidr",
        "172.22.0.0/16",
        "--service-cidr",
        "10.118.0.0/16",
        "--endpoint-host",
        "10.0.0.9",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    for key in [
        "tinkerbell.tinkerbellIP",
        "tinkerbell.osImageURL",
        "tinkerbell.sshAuthorizedKey",
    ] {
        assert!(err.contains(key), "{key} not named in:\n{err}");
    }
    assert_eq!(
        snapshot(&repo),
        before,
        "a refused scaffold wrote something"
    );

    let v = ok(&["validate", r, "--output", "json"]);
    let report: serde_json::Value = serde_json::from_str(&v).unwrap();
    assert_eq!(report["valid"], true, "{v}");
    assert_eq!(report["clusters"].as_array().unwrap().len(), 6);

    let rendered = ok(&["render", r, "--cluster", "vs"]);
    assert!(rendered.contains("kind: EtcdadmCluster"));
    assert!(rendered.contains("cluster-api-autoscaler-node-group-max-size: \"5\""));
    let outdir = tmp.path().join("out");
    let out = capstan_output(&["render", r, "--output-dir", outdir.to_str().unwrap()]);
    assert!(out.status.success());
    for c in ["mgmt", "dev", "etcd", "vs", "nx", "bm"] {
        assert!(outdir.join(format!("{c}.yaml")).exists());
    }
}

#[test]
fn refusals_write_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("fleet");
    let r = repo.to_str().unwrap();
    ok(&[
        "init",
        r,
        "--management",
        "mgmt",
        "--provider",
        "docker",
        "--pod-cidr",
        "192.168.0.0/16",
        "--service-cidr",
        "10.96.0.0/12",
    ]);
    ok(&[
        "new",
        "cluster",
        "dev",
        "--management",
        "mgmt",
        "--repo",
        r,
        "--provider",
        "docker",
        "--pod-cidr",
        "172.16.0.0/16",
        "--service-cidr",
        "10.112.0.0/16",
    ]);
    let before = snapshot(&repo);

    let cases: Vec<(Vec<&str>, &str)> = vec![
        // CIDRs are never guessed.
        (
            vec![
                "new",
                "cluster",
                "a",
                "--management",
                "mgmt",
                "--repo",
                r,
                "--provider",
                "docker",
                "--service-cidr",
                "10.113.0.0/16",
            ],
            "--pod-cidr",
        ),
        // The endpoint and placement of a vSphere cluster are never guessed.
        (
            vec![
                "new",
                "cluster",
                "b",
                "--management",
                "mgmt",
                "--repo",
                r,
                "--provider",
                "vsphere",
                "--pod-cidr",
                "172.19.0.0/16",
                "--service-cidr",
                "10.115.0.0/16",
            ],
            "--endpoint-host",
        ),
        // Never overwrite.
        (
            vec![
                "new",
                "cluster",
                "dev",
                "--management",
                "mgmt",
                "--repo",
                r,
                "--provider",
                "docker",
                "--pod-cidr",
                "172.20.0.0/16",
                "--service-cidr",
                "10.116.0.0/16",
            ],
            "already exists",
        ),
        // A cluster that would not validate is not written: its CIDR overlaps dev's.
        (
            vec![
                "new",
                "cluster",
                "c",
                "--management",
                "mgmt",
                "--repo",
                r,
                "--provider",
                "docker",
                "--pod-cidr",
                "172.16.0.0/16",
                "--service-cidr",
                "10.117.0.0/16",
            ],
            "cidr-overlap",
        ),
        // Unknown management cluster.
        (
            vec![
                "new",
                "cluster",
                "d",
                "--management",
                "nope",
                "--repo",
                r,
                "--provider",
                "docker",
                "--pod-cidr",
                "172.21.0.0/16",
                "--service-cidr",
                "10.118.0.0/16",
            ],
            "nope",
        ),
        // Even control plane with stacked etcd.
        (
            vec![
                "new",
                "cluster",
                "e",
                "--management",
                "mgmt",
                "--repo",
                r,
                "--provider",
                "docker",
                "--control-plane-count",
                "2",
                "--pod-cidr",
                "172.22.0.0/16",
                "--service-cidr",
                "10.119.0.0/16",
            ],
            "invalid-value",
        ),
    ];
    for (args, expect) in cases {
        let out = capstan_output(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} should fail");
        assert!(
            stderr.contains(expect),
            "{args:?}: expected `{expect}` in:\n{stderr}"
        );
        assert_eq!(snapshot(&repo), before, "{args:?} changed the repository");
    }
}

/// `--docker-backend in-memory` writes the datacenter annotation; a workload inherits its
/// management cluster's backend unless told otherwise; the rendered objects move to CAPD's
/// Dev* kinds; a vSphere cluster refuses the flag and writes nothing.
#[test]
fn docker_backend_is_written_inherited_and_rendered() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("fleet");
    let r = repo.to_str().unwrap();
    ok(&[
        "init",
        r,
        "--management",
        "mgmt",
        "--provider",
        "docker",
        "--docker-backend",
        "in-memory",
        "--pod-cidr",
        "192.168.0.0/16",
        "--service-cidr",
        "10.96.0.0/12",
    ]);
    ok(&[
        "new",
        "cluster",
        "inherits",
        "--management",
        "mgmt",
        "--repo",
        r,
        "--provider",
        "docker",
        "--pod-cidr",
        "172.16.0.0/16",
        "--service-cidr",
        "10.112.0.0/16",
    ]);
    ok(&[
        "new",
        "cluster",
        "containers",
        "--management",
        "mgmt",
        "--repo",
        r,
        "--provider",
        "docker",
        "--docker-backend",
        "docker",
        "--pod-cidr",
        "172.17.0.0/16",
        "--service-cidr",
        "10.113.0.0/16",
    ]);
    let spec = |dir: &str| fs::read_to_string(repo.join(dir).join("cluster.yaml")).unwrap();
    assert!(spec("clusters/mgmt").contains("capstan.dev/docker-backend: \"in-memory\""));
    assert!(
        spec("clusters/mgmt/workload-clusters/inherits")
            .contains("capstan.dev/docker-backend: \"in-memory\"")
    );
    assert!(!spec("clusters/mgmt/workload-clusters/containers").contains("docker-backend"));
    ok(&["validate", r]);
    let kinds = |cluster: &str| -> Vec<String> {
        ok(&["render", r, "--cluster", cluster])
            .lines()
            .filter_map(|l| l.strip_prefix("kind: "))
            .map(str::to_string)
            .collect()
    };
    let inherits = kinds("inherits");
    assert!(
        inherits.contains(&"DevCluster".to_string())
            && inherits.contains(&"DevMachineTemplate".to_string()),
        "{inherits:?}"
    );
    assert!(
        !inherits
            .iter()
            .any(|k| k.starts_with("Docker") && k != "DockerDatacenterConfig"),
        "{inherits:?}"
    );
    let containers = kinds("containers");
    assert!(
        containers.contains(&"DockerCluster".to_string())
            && !containers.contains(&"DevCluster".to_string()),
        "{containers:?}"
    );

    let before = snapshot(&repo);
    let out = capstan_output(&[
        "new",
        "cluster",
        "vs",
        "--management",
        "mgmt",
        "--repo",
        r,
        "--provider",
        "vsphere",
        "--docker-backend",
        "in-memory",
        "--pod-cidr",
        "172.18.0.0/16",
        "--service-cidr",
        "10.114.0.0/16",
        "--endpoint-host",
        "10.0.0.10",
    ]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("docker-backend"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(snapshot(&repo), before, "nothing written");
}

fn init_args<'a>(repo: &'a str, more: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "init",
        repo,
        "--management",
        "mgmt",
        "--provider",
        "docker",
        "--pod-cidr",
        "192.168.0.0/16",
        "--service-cidr",
        "10.96.0.0/12",
    ];
    args.extend_from_slice(more);
    args
}

fn new_cluster_args<'a>(repo: &'a str, name: &'a str, i: usize, more: &[&'a str]) -> Vec<String> {
    let mut args: Vec<String> = [
        "new",
        "cluster",
        name,
        "--management",
        "mgmt",
        "--repo",
        repo,
        "--provider",
        "docker",
    ]
    .map(str::to_string)
    .to_vec();
    args.extend([
        "--pod-cidr".to_string(),
        format!("172.{}.0.0/16", 16 + i),
        "--service-cidr".to_string(),
        format!("10.{}.0.0/16", 112 + i),
    ]);
    args.extend(more.iter().map(|s| s.to_string()));
    args
}

/// `init --admins` writes `.github/CODEOWNERS` and lists it; `new cluster --owners` gives the
/// new directory, and nothing else, to its team; without `--owners` the admins keep it; a
/// malformed owner is refused before anything is written.
#[test]
fn codeowners_from_init_and_new_cluster() {
    use capstan_layout::scaffold::codeowners::owners_of;

    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("fleet");
    let r = repo.to_str().unwrap();
    let out = capstan_output(&init_args(r, &["--admins", "@acme/platform,@bob", "--git"]));
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains(".github/CODEOWNERS"), "{stdout}");
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("placeholder"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let path = repo.join(".github/CODEOWNERS");
    let init = fs::read_to_string(&path).unwrap();
    assert!(
        init.starts_with("# Code owners of this capstan fleet"),
        "{init}"
    );
    assert!(init.contains("\n* @acme/platform @bob\n"), "{init}");
    let tracked = Command::new("git")
        .args(["-C", r, "ls-files", ".github/CODEOWNERS"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&tracked.stdout).trim(),
        ".github/CODEOWNERS"
    );

    let a: Vec<String> = new_cluster_args(r, "dev", 0, &["--owners", "@acme/dev"]);
    let out = ok(&a.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(
        out.contains("updated") && out.contains(".github/CODEOWNERS"),
        "{out}"
    );
    let a = new_cluster_args(r, "ops", 1, &[]);
    let out = ok(&a.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(!out.contains("CODEOWNERS"), "{out}");

    let text = fs::read_to_string(&path).unwrap();
    let line = "/clusters/mgmt/workload-clusters/dev/ @acme/dev\n";
    let at = text.find(line).expect(&text);
    assert!(
        at < text.find("# capstan: platform admins").unwrap(),
        "{text}"
    );
    assert_eq!(text.replace(line, ""), init);
    let admins = ["@acme/platform", "@bob"];
    for p in [
        "clusters/mgmt/cluster.yaml",
        "clusters/mgmt/fleet.yaml",
        "clusters/suspend.yaml",
        ".github/CODEOWNERS",
        "clusters/mgmt/workload-clusters/ops/cluster.yaml",
        "README.md",
    ] {
        assert_eq!(owners_of(&text, p), admins, "{p}");
    }
    assert_eq!(
        owners_of(&text, "clusters/mgmt/workload-clusters/dev/cluster.yaml"),
        ["@acme/dev"]
    );
    let v = ok(&["validate", r, "--output", "json"]);
    let report: serde_json::Value = serde_json::from_str(&v).unwrap();
    assert_eq!(report["valid"], true, "{v}");

    // A malformed owner: refused by the flag's parser, nothing written.
    let before = snapshot(&repo);
    for bad in ["acme/qa", "@acme/qa,qa@example.com", "@acme/"] {
        let a = new_cluster_args(r, "qa", 2, &["--owners", bad]);
        let out = capstan_output(&a.iter().map(String::as_str).collect::<Vec<_>>());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{bad}");
        assert!(
            stderr.contains("use `@user` or `@org/team`"),
            "{bad}: {stderr}"
        );
        assert_eq!(snapshot(&repo), before, "{bad} changed the repository");
    }
    let other = tmp.path().join("other");
    let out = capstan_output(&init_args(
        other.to_str().unwrap(),
        &["--admins", "platform"],
    ));
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is not a GitHub owner"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!other.exists());
}

/// Without `--admins` the file names a placeholder, and both the file and `init` say that it
/// protects nothing until replaced.
#[test]
fn codeowners_placeholder_is_announced() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("fleet");
    let out = capstan_output(&init_args(repo.to_str().unwrap(), &[]));
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains(".github/CODEOWNERS"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("placeholder @OWNER/platform-admins")
            && stderr.contains("protects nothing"),
        "{stderr}"
    );
    let text = fs::read_to_string(repo.join(".github/CODEOWNERS")).unwrap();
    assert!(
        text.starts_with("# REPLACE @OWNER/platform-admins"),
        "{text}"
    );
    assert!(text.contains("\n* @OWNER/platform-admins\n"), "{text}");
}
