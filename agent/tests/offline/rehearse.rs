//! `capstan rehearse` before any control plane: the real binary on a real Git repository (the
//! example fleet committed on `main`). Bad input exits 2 with the file and line, as `validate`
//! reports it, and a change with nothing to rehearse exits 0; neither starts a control plane
//! (the rehearsals themselves run on the Cluster API controllers: tests/e2e cluster_api
//! `rehearse.rs`, and agent/tests/dev.rs for starting and reusing the local control plane).

use std::path::Path;
use std::process::Output;

use crate::source_support::example_fleet_repo as repo;

const PROD: &str = "clusters/mgmt/workload-clusters/prod/cluster.yaml";

fn rehearse(dir: &Path, dev_dir: &Path, args: &[&str]) -> (i32, String, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = capstan_harness::run::capstan(&["rehearse"])
        .arg(dir)
        .args(["--dev-dir", dev_dir.to_str().unwrap()])
        .args(args)
        .env_remove("KUBECONFIG")
        .output()
        .unwrap();
    (
        status.code().unwrap(),
        String::from_utf8(stdout).unwrap(),
        String::from_utf8(stderr).unwrap(),
    )
}

#[test]
fn bad_input_exits_2_naming_the_file_and_line_and_starts_nothing() {
    let r = repo();
    let dev = tempfile::tempdir().unwrap();
    let p = r.path().join(PROD);
    let t = std::fs::read_to_string(&p).unwrap();
    std::fs::write(
        &p,
        t.replacen("count: 3\n    endpoint", "count: three\n    endpoint", 1),
    )
    .unwrap();
    let (code, out, err) = rehearse(r.path(), dev.path(), &["--base", "main"]);
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(
        err.contains("clusters/mgmt/workload-clusters/prod/cluster.yaml:16:"),
        "{err}"
    );
    assert!(err.contains("nothing rehearsed"), "{err}");
    // A field capstan refuses to change on a live cluster is bad input too.
    let r = repo();
    let p = r.path().join(PROD);
    let t = std::fs::read_to_string(&p).unwrap();
    std::fs::write(&p, t.replacen("[172.20.0.0/16]", "[172.30.0.0/16]", 1)).unwrap();
    let (code, _, err) = rehearse(r.path(), dev.path(), &["--base", "main"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("spec.clusterNetwork.pods"), "{err}");
    assert_eq!(
        std::fs::read_dir(dev.path()).unwrap().count(),
        0,
        "no control plane was started"
    );
}

#[test]
fn nothing_to_rehearse_exits_0_without_a_control_plane() {
    let r = repo();
    let dev = tempfile::tempdir().unwrap();
    std::fs::write(r.path().join("README.md"), "not a cluster\n").unwrap();
    let (code, out, err) = rehearse(r.path(), dev.path(), &["--base", "main", "-o", "json"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let j: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(j["clusters"], serde_json::json!([]));
    assert_eq!(j["passed"], true);
    assert_eq!(std::fs::read_dir(dev.path()).unwrap().count(), 0);
}
