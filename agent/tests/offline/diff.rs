//! `capstan diff` end to end: the real binary on a real Git repository (the example fleet
//! committed on `main`, changes on a branch), as a CI job runs it: exit codes 0 (no change),
//! 2 (changes), 1 (errors: a file that does not validate, a blocked field, an unknown revision),
//! and the three output formats.

use std::path::Path;
use std::process::Output;

use crate::source_support::{example_fleet_repo as repo, git};

const DEV: &str = "clusters/mgmt/workload-clusters/dev/cluster.yaml";
const PROD: &str = "clusters/mgmt/workload-clusters/prod/cluster.yaml";

fn edit(dir: &Path, file: &str, from: &str, to: &str) {
    let p = dir.join(file);
    let t = std::fs::read_to_string(&p).unwrap();
    assert!(t.contains(from), "{file}: {from}");
    std::fs::write(p, t.replacen(from, to, 1)).unwrap();
}

/// `capstan diff <dir> <args>`, uncoloured: its exit code, stdout and stderr.
fn capstan_diff(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = capstan_harness::run::capstan(&["diff"])
        .arg(dir)
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    (
        status.code().unwrap(),
        String::from_utf8(stdout).unwrap(),
        String::from_utf8(stderr).unwrap(),
    )
}

#[test]
fn no_change_exits_0() {
    let r = repo();
    let (code, out, _) = capstan_diff(r.path(), &["--base", "main"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("no cluster changes"), "{out}");
    let (code, out, _) = capstan_diff(
        r.path(),
        &["--base", "main", "--head", "HEAD", "-o", "json"],
    );
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["changes"], false);
    assert_eq!(v["valid"], true);
}

/// The base branch moving on after the change branched off (another pull request merged) is
/// not part of the change: the diff is taken from the merge base, as a pull request's is.
#[test]
fn what_the_base_gained_since_the_branch_is_not_part_of_the_change() {
    let r = repo();
    git(r.path(), &["checkout", "-q", "-b", "scale"]);
    edit(r.path(), DEV, "count: 2", "count: 4");
    git(r.path(), &["commit", "-qam", "scale dev"]);
    git(r.path(), &["checkout", "-q", "main"]);
    edit(
        r.path(),
        PROD,
        "count: 3\n    endpoint",
        "count: 5\n    endpoint",
    );
    git(r.path(), &["commit", "-qam", "prod merged meanwhile"]);
    let (code, out, err) = capstan_diff(r.path(), &["--base", "main", "--head", "scale"]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(out.contains("worker group md-0 scales 2 → 4"), "{out}");
    assert!(
        !out.contains("cluster prod"),
        "main's own later change is not shown as reverted: {out}"
    );
    let fork = git(r.path(), &["merge-base", "main", "scale"]);
    assert!(out.contains(&fork[..12]), "the merge base is named: {out}");
}

#[test]
fn a_committed_change_exits_2_with_diffs_and_the_machine_summary() {
    let r = repo();
    git(r.path(), &["checkout", "-q", "-b", "bump"]);
    edit(
        r.path(),
        DEV,
        "kubernetesVersion: \"1.33\"",
        "kubernetesVersion: \"1.34\"",
    );
    edit(r.path(), DEV, "count: 2", "count: 4");
    git(r.path(), &["commit", "-qam", "bump dev"]);
    // The working copy is back on main: --head names the branch.
    git(r.path(), &["checkout", "-q", "main"]);
    let (code, out, err) = capstan_diff(r.path(), &["--base", "main", "--head", "bump"]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(out.contains("cluster dev:"), "{out}");
    assert!(out.contains("control plane rolls: version v1.33"), "{out}");
    assert!(out.contains("worker group md-0 rolls: version"), "{out}");
    assert!(out.contains("worker group md-0 scales 2 → 4"), "{out}");
    assert!(out.contains("-  version: v1.33"), "{out}");
    assert!(!out.contains("cluster prod"), "only dev changed: {out}");
    // JSON: data, the same facts.
    let (code, out, _) = capstan_diff(
        r.path(),
        &["--base", "main", "--head", "bump", "-o", "json"],
    );
    assert_eq!(code, 2);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["changes"], true);
    let dev = &v["clusters"][0];
    assert_eq!(dev["name"], "dev");
    assert_eq!(
        dev["impact"]["controlPlane"]["roll"]["reasons"][0]["what"],
        "version"
    );
    // Markdown for a PR.
    let (code, md, _) = capstan_diff(
        r.path(),
        &["--base", "main", "--head", "bump", "-o", "markdown"],
    );
    assert_eq!(code, 2);
    assert!(md.starts_with("### capstan diff main ("), "{md}");
    assert!(md.contains("#### Cluster `dev`"));
    assert!(
        md.contains("```diff\n--- base/KubeadmControlPlane/team-dev/dev"),
        "{md}"
    );
}

#[test]
fn the_working_copy_is_the_default_head() {
    let r = repo();
    edit(r.path(), DEV, "count: 2", "count: 3");
    let (code, out, _) = capstan_diff(r.path(), &["--base", "main"]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("→ working tree"), "{out}");
    assert!(
        out.contains("worker group md-0 scales 2 → 3 (no rollout)"),
        "{out}"
    );
    let (_, out, _) = capstan_diff(r.path(), &["--base", "main", "--cluster", "prod"]);
    assert!(!out.contains("cluster dev"), "{out}");
}

#[test]
fn errors_exit_1_with_file_and_line() {
    let r = repo();
    edit(
        r.path(),
        PROD,
        "count: 3\n    endpoint",
        "count: three\n    endpoint",
    );
    let (code, out, _) = capstan_diff(r.path(), &["--base", "main"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("clusters/mgmt/workload-clusters/prod/cluster.yaml:16:"),
        "{out}"
    );
    // A blocked field is an error too, with its spec path.
    let r = repo();
    edit(r.path(), PROD, "[172.20.0.0/16]", "[172.30.0.0/16]");
    let (code, out, _) = capstan_diff(r.path(), &["--base", "main"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("BLOCKED Cluster/prod spec.clusterNetwork.pods"),
        "{out}"
    );
    // An unknown revision.
    let (code, _, err) = capstan_diff(r.path(), &["--base", "no-such-branch"]);
    assert_eq!(code, 1);
    assert!(err.contains("no-such-branch"), "{err}");
}

/// Add-ons are part of the change: a new one, a changed one with its diff, in the text and the
/// markdown of a pull request's comment, marked as applied inside the workload cluster.
#[test]
fn add_on_changes_are_shown_per_cluster_as_inside_the_workload_cluster() {
    let r = repo();
    let addon = |level: &str| {
        format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: team\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: team\ndata:\n  level: {level}\n"
        )
    };
    let file = r
        .path()
        .join("clusters/mgmt/workload-clusters/dev/addons/team.yaml");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, addon("info")).unwrap();
    git(r.path(), &["checkout", "-qb", "addons"]);
    git(r.path(), &["add", "-A"]);
    git(r.path(), &["commit", "-qm", "dev add-ons"]);
    let (code, out, _) = capstan_diff(r.path(), &["--base", "main", "--head", "HEAD"]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("cluster dev: 2 create"), "{out}");
    for line in [
        "create    Namespace/team (add-on, inside the workload cluster)",
        "create    ConfigMap/team/settings (add-on, inside the workload cluster)",
    ] {
        assert!(out.contains(line), "{line:?} not in\n{out}");
    }
    assert!(!out.contains("cluster prod"), "{out}");
    // Changed since: an update with its diff, against the commit before.
    std::fs::write(&file, addon("debug")).unwrap();
    let (code, out, _) = capstan_diff(r.path(), &["--base", "HEAD"]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("update    ConfigMap/team/settings (add-on, inside the workload cluster)"),
        "{out}"
    );
    assert!(
        out.contains("+  level: debug") && out.contains("-  level: info"),
        "{out}"
    );
    let (_, md, _) = capstan_diff(r.path(), &["--base", "HEAD", "-o", "markdown"]);
    assert!(
        md.contains("| update | `ConfigMap/team/settings` (add-on, inside the workload cluster) |"),
        "{md}"
    );
}
