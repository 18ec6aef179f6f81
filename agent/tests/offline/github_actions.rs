//! `examples/github-actions/` is checked by actionlint (built from the pinned Go module, cached
//! under ~/.cache/capstan/tools/), not just written; and a broken workflow is refused, so the
//! check can fail.

use std::path::Path;
use std::process::Command;

fn workflow() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/github-actions/capstan-diff.yml")
}

fn actionlint(file: &Path) -> (bool, String) {
    assert!(
        Command::new("shellcheck").arg("--version").output().is_ok(),
        "shellcheck is needed (apt-get install shellcheck; .ci/test installs it)"
    );
    let bin = capstan_harness::ensure_actionlint().expect("build actionlint");
    let out = Command::new(bin)
        // shellcheck (a Debian package .ci/test installs) checks the run: scripts.
        .args(["-no-color", "-pyflakes=", "-shellcheck", "shellcheck"])
        .arg(file)
        .output()
        .unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn the_example_workflow_passes_actionlint() {
    let (ok, out) = actionlint(&workflow());
    assert!(ok, "{out}");
    let text = std::fs::read_to_string(workflow()).unwrap();
    assert!(text.contains("capstan validate ."));
    assert!(
        text.contains("capstan diff . --base \"origin/$BASE_REF\" --head HEAD --output markdown")
    );
}

#[test]
fn a_broken_workflow_is_refused() {
    let text = std::fs::read_to_string(workflow()).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let broken = tmp.path().join("broken.yml");
    // An undefined step output and an unknown key, as typos make them.
    std::fs::write(
        &broken,
        text.replace(
            "steps.diff.outputs.code == '1'",
            "steps.dif.outputs.code == '1'",
        )
        .replace("timeout-minutes: 60", "timeout-minute: 60"),
    )
    .unwrap();
    let (ok, out) = actionlint(&broken);
    assert!(!ok, "{out}");
    assert!(out.contains("dif"), "{out}");
    assert!(out.contains("timeout-minute"), "{out}");
}
