//! The quick start and cluster connection, through the real binary: `capstan dev up` starts a
//! local management cluster with the Cluster API controllers that kubectl (an independent
//! client) can use, `validate --server-dry-run` finds it through --kubeconfig / $KUBECONFIG and
//! --context as kubectl would, the README's main command brings every cluster of the quick-start
//! fleet up (Machines running, every ManagedCluster Ready), and `capstan dev down` stops it and
//! leaves no process or file behind.

use capstan_harness::run;
use capstan_harness::run::example_fleet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The capstan binary with `args`, `env` set and no $KUBECONFIG of the user's.
fn capstan_with_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = run::capstan(args);
    c.env_remove("KUBECONFIG");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run capstan")
}

fn quickstart() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/quickstart")
}

/// Pids of etcd, kube-apiserver and the controllers recorded in state.json.
fn pids(dir: &Path) -> Vec<u32> {
    let state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("state.json")).unwrap()).unwrap();
    let mut out = Vec::new();
    for k in ["etcd", "kube_apiserver"] {
        if let Some(p) = state["pids"][k]["pid"]
            .as_u64()
            .or_else(|| state["pids"][k].as_u64())
        {
            out.push(p as u32);
        }
    }
    for p in state["controllers"].as_object().into_iter().flatten() {
        out.push(p.1["pid"].as_u64().unwrap() as u32);
    }
    out
}

/// The quick-start fleet committed on `main`, and a branch `pr` that adds a workload cluster:
/// what `capstan rehearse` is given.
fn pull_request_repo(root: &Path) -> PathBuf {
    let repo = root.join("pr-repo");
    assert!(
        Command::new("cp")
            .arg("-r")
            .arg(quickstart())
            .arg(&repo)
            .status()
            .unwrap()
            .success()
    );
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .arg("-C")
            .arg(&repo)
            .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    git(&["init", "-q", "-b", "main"]);
    git(&["add", "-A"]);
    git(&["commit", "-q", "-m", "fleet"]);
    git(&["checkout", "-q", "-b", "pr"]);
    let dir = repo.join("clusters/mgmt/workload-clusters/pr-new");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("cluster.yaml"),
        "apiVersion: anywhere.eks.amazonaws.com/v1alpha1\nkind: Cluster\nmetadata:\n  name: pr-new\n  namespace: team-pr\nspec:\n  kubernetesVersion: \"1.33\"\n  managementCluster:\n    name: mgmt\n  datacenterRef:\n    kind: DockerDatacenterConfig\n    name: pr-new\n  controlPlaneConfiguration:\n    count: 1\n  workerNodeGroupConfigurations:\n    - name: md-0\n      count: 1\n  clusterNetwork:\n    pods:\n      cidrBlocks: [172.40.0.0/16]\n    services:\n      cidrBlocks: [10.140.0.0/16]\n---\napiVersion: anywhere.eks.amazonaws.com/v1alpha1\nkind: DockerDatacenterConfig\nmetadata:\n  name: pr-new\n  namespace: team-pr\n  annotations:\n    capstan.dev/docker-backend: in-memory\nspec: {}\n",
    )
    .unwrap();
    git(&["add", "-A"]);
    git(&["commit", "-q", "-m", "a new cluster"]);
    repo
}

/// `capstan rehearse` of the pull request on the local control plane of `dev_dir`: exit 0, the
/// new cluster created and passed; its stderr.
fn rehearse_passes(repo: &Path, dev_dir: &str) -> String {
    let out = capstan_with_env(
        &[
            "rehearse",
            repo.to_str().unwrap(),
            "--base",
            "main",
            "--head",
            "pr",
            "--dev-dir",
            dev_dir,
            "--output",
            "json",
        ],
        &[],
    );
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    );
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["passed"], true, "{report}");
    let c = &report["clusters"][0];
    assert_eq!(
        (
            c["name"].as_str(),
            c["change"].as_str(),
            c["result"].as_str()
        ),
        (Some("pr-new"), Some("create"), Some("passed")),
        "{report}"
    );
    assert_eq!(c["machinesCreated"], 2, "{report}");
    stderr
}

/// Stops the local control plane of `dir` if the test fails while it runs: a failed assertion
/// must not leave its processes (and CAPD's fixed port) to the test binaries that follow.
struct DownOnPanic(PathBuf);

impl Drop for DownOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() && self.0.exists() {
            let _ = capstan_with_env(&["dev", "down", "--dir", &self.0.to_string_lossy()], &[]);
        }
    }
}

#[test]
fn dev_up_validate_against_it_and_down() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("dev");
    let d = dir.to_str().unwrap();

    // `capstan rehearse` with no local control plane running starts one for the rehearsal and
    // stops it after (nothing left running, its directory gone).
    let pr = pull_request_repo(tmp.path());
    let stderr = rehearse_passes(&pr, d);
    assert!(
        stderr.contains("starting a local management cluster"),
        "{stderr}"
    );
    assert!(
        !dir.exists(),
        "the rehearsal's own control plane is stopped: {stderr}"
    );
    let _down_on_panic = DownOnPanic(dir.clone());
    let up = capstan_with_env(&["dev", "up", "--dir", d], &[]);
    assert!(
        up.status.success(),
        "dev up failed: {}",
        String::from_utf8_lossy(&up.stderr)
    );
    let kubeconfig = String::from_utf8(up.stdout).unwrap().trim().to_string();
    assert!(
        Path::new(&kubeconfig).exists(),
        "dev up prints the kubeconfig path, got {kubeconfig:?}"
    );
    let running = pids(&dir);
    assert_eq!(
        running.len(),
        7,
        "state.json records etcd, kube-apiserver, kube-controller-manager and four Cluster API managers"
    );

    // kubectl, an independent client, sees the upstream CRDs.
    let crds = Command::new("kubectl")
        .args(["--kubeconfig", &kubeconfig, "get", "crd", "-o", "name"])
        .output()
        .unwrap();
    let crds = String::from_utf8_lossy(&crds.stdout);
    for crd in [
        "clusters.cluster.x-k8s.io",
        "kubeadmcontrolplanes.controlplane.cluster.x-k8s.io",
        "vspheremachinetemplates.infrastructure.cluster.x-k8s.io",
        "etcdadmclusters.etcdcluster.cluster.x-k8s.io",
        "helmchartproxies.addons.cluster.x-k8s.io",
        "clusters.anywhere.eks.amazonaws.com",
    ] {
        assert!(crds.contains(crd), "missing CRD {crd} in:\n{crds}");
    }
    for ns in ["eksa-system", "team-dev"] {
        let out = Command::new("kubectl")
            .args(["--kubeconfig", &kubeconfig, "create", "namespace", ns])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    let fleet = example_fleet();
    let f = fleet.to_str().unwrap();
    // --kubeconfig with the named context.
    let out = capstan_with_env(
        &[
            "validate",
            f,
            "--server-dry-run",
            "--kubeconfig",
            &kubeconfig,
            "--context",
            "capstan-dev",
        ],
        &[],
    );
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("context capstan-dev"));
    // $KUBECONFIG, current context.
    let out = capstan_with_env(
        &["validate", f, "--server-dry-run", "--output", "json"],
        &[("KUBECONFIG", &kubeconfig)],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["valid"], true);
    assert_eq!(report["serverRejected"].as_array().unwrap().len(), 0);
    // A context that does not exist is an error, not a silent fallback.
    let out = capstan_with_env(
        &[
            "validate",
            f,
            "--server-dry-run",
            "--kubeconfig",
            &kubeconfig,
            "--context",
            "nope",
        ],
        &[],
    );
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("nope"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Dry-run persists nothing.
    let out = Command::new("kubectl")
        .args([
            "--kubeconfig",
            &kubeconfig,
            "get",
            "clusters.cluster.x-k8s.io",
            "-A",
            "-o",
            "name",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).trim().is_empty());

    // The README's main command: every cluster of the quick-start fleet comes up.
    let qs = quickstart();
    let env = [("KUBECONFIG", kubeconfig.as_str())];
    let out = capstan_with_env(
        &[
            "reconcile",
            "--once",
            "--repo",
            qs.to_str().unwrap(),
            "--wait",
            "10m",
        ],
        &env,
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("settled in"), "{stdout}");
    let out = capstan_with_env(&["status", "--output", "json"], &env);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let phases: Vec<(String, String)> = status
        .as_array()
        .expect("a list of clusters")
        .iter()
        .map(|c| {
            (
                c["metadata"]["name"].as_str().unwrap().to_string(),
                c["status"]["phase"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        phases,
        ["dev", "legacy", "mgmt"].map(|c| (c.to_string(), "Ready".to_string())),
        "{status}"
    );
    // What the controllers did, seen by kubectl: every Machine of the three clusters runs.
    let out = Command::new("kubectl")
        .args([
            "--kubeconfig",
            &kubeconfig,
            "get",
            "machines.cluster.x-k8s.io",
            "-A",
            "-o",
            "jsonpath={range .items[*]}{.status.phase}{\"\\n\"}{end}",
        ])
        .output()
        .unwrap();
    let phases = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        phases.lines().count(),
        1 + 1 + 3 + 2 + 1 + 1 + 1,
        "{phases}"
    );
    assert!(phases.lines().all(|p| p == "Running"), "{phases}");

    let dev = status
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["metadata"]["name"] == "dev")
        .unwrap();
    let addons_ready = dev["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "AddonsReady")
        .unwrap_or_else(|| panic!("no AddonsReady condition: {dev}"));
    assert_eq!(addons_ready["status"], "True", "{addons_ready}");
    // Inside `dev`: its add-ons (examples/quickstart/.../dev/addons/), read by kubectl from the
    // workload API server (CAPD's in-memory one) through the kubeconfig `capstan kubeconfig`
    // prints from the Secret Cluster API wrote.
    let out = capstan_with_env(&["kubeconfig", "dev"], &env);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dev_kubeconfig = tmp.path().join("dev.kubeconfig");
    std::fs::write(&dev_kubeconfig, &out.stdout).unwrap();
    let out = capstan_harness::run::kubectl_output(
        &dev_kubeconfig,
        &[
            "-n",
            "team-apps",
            "get",
            "configmap",
            "team-settings",
            "-o",
            "jsonpath={.data.owner} {.metadata.labels.capstan\\.dev/addon-of}",
        ],
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "team-dev dev",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The add-on kept encrypted in Git (team-token.sops.yaml), decrypted with the identity `dev
    // up` gave the local cluster: its value inside `dev`, and nowhere in the repository.
    let out = capstan_harness::run::kubectl_output(
        &dev_kubeconfig,
        &[
            "-n",
            "team-apps",
            "get",
            "secret",
            "team-token",
            "-o",
            "jsonpath={.data.token}",
        ],
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "cXVpY2tzdGFydC1kZW1vLXRva2VuLTVmMWQ=",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for f in capstan_harness::run::files_under(&qs, &[]) {
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        for value in [
            "quickstart-demo-token",
            "cXVpY2tzdGFydC1kZW1vLXRva2VuLTVmMWQ=",
        ] {
            assert!(
                !text.contains(value),
                "{} holds the add-on's value",
                f.display()
            );
        }
    }
    let out = Command::new("kubectl")
        .args(["--kubeconfig", &kubeconfig, "get", "namespace", "team-apps"])
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "an add-on reached the management cluster"
    );

    // `capstan rehearse` reuses the running one, beside the quick start's clusters, which it
    // leaves alone; the control plane runs on after.
    let stderr = rehearse_passes(&pr, d);
    assert!(
        stderr.contains("reusing the local control plane"),
        "{stderr}"
    );
    assert_eq!(pids(&dir), running, "the same processes");
    let out = capstan_with_env(&["status", "--output", "json"], &env);
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = status
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["dev", "legacy", "mgmt"],
        "the rehearsed cluster is gone"
    );

    // A second `dev up` reuses the running one (the quick start can be re-run).
    let again = capstan_with_env(&["dev", "up", "--dir", d], &[]);
    assert!(again.status.success());
    assert_eq!(String::from_utf8(again.stdout).unwrap().trim(), kubeconfig);
    assert_eq!(pids(&dir), running);

    // `capstan pivot` without --kubeconfig takes the running local control plane as its
    // bootstrap cluster (its default directory is `$CAPSTAN_CACHE_DIR/dev`); given the same
    // API server as the new cluster, it stops there, before writing anything.
    let q = quickstart();
    let q = q.to_str().unwrap();
    let cache = tmp.path().to_str().unwrap();
    let pivot = capstan_with_env(
        &[
            "pivot",
            "--checkout",
            q,
            "--repo",
            q,
            "--management",
            "mgmt",
            "--to",
            &kubeconfig,
        ],
        &[("CAPSTAN_CACHE_DIR", cache)],
    );
    let said = String::from_utf8_lossy(&pivot.stderr);
    assert!(!pivot.status.success(), "{said}");
    assert!(
        said.contains("(the local control plane `capstan dev up` runs)")
            && said.contains("the new cluster and the bootstrap cluster are the same API server"),
        "{said}"
    );

    let down = capstan_with_env(&["dev", "down", "--dir", d], &[]);
    assert!(
        down.status.success(),
        "{}",
        String::from_utf8_lossy(&down.stderr)
    );
    assert!(!dir.exists(), "dev down removes its directory");
    for pid in running {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists()
                || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .is_ok_and(|s| s.contains(") Z ")),
            "process {pid} still running"
        );
    }
}
