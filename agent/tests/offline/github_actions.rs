//! `examples/github-actions/` is checked by actionlint (built from the pinned Go module, cached
//! under ~/.cache/capstan/tools/), not just written; and a broken workflow is refused, so the
//! check can fail. The comment step's script is run with a stand-in for the `gh` CLI: it edits
//! only a comment its own identity wrote, never a commenter's that carries the same marker.

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

/// The `run:` script of the workflow's step named `name` (its block scalar, dedented).
fn step_script(text: &str, name: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.trim() == format!("- name: {name}"))
        .unwrap_or_else(|| panic!("no step {name:?}"));
    let run = at
        + lines[at..]
            .iter()
            .position(|l| l.trim() == "run: |")
            .expect("a run: | block");
    let key_indent = lines[run].len() - lines[run].trim_start().len();
    let body: Vec<&str> = lines[run + 1..]
        .iter()
        .take_while(|l| l.trim().is_empty() || l.len() - l.trim_start().len() > key_indent)
        .copied()
        .collect();
    let indent = body
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start().len())
        .min()
        .unwrap_or(0);
    body.iter()
        .map(|l| l.get(indent..).unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A stand-in for the `gh` CLI, on PATH: `gh api user` answers `$GH_USER` (or fails, as for
/// the workflow token), the comments list answers `$COMMENTS`, and every call is written to
/// `$CALLS`.
const FAKE_GH: &str = r#"#!/bin/bash
echo "$*" >> "$CALLS"
case "$1 $2" in
  "api user")
    if [ -n "$GH_USER" ]; then echo "$GH_USER"; exit 0; fi
    echo "gh: Resource not accessible by integration (HTTP 403)" >&2
    exit 1 ;;
esac
case "$*" in
  *"/comments --paginate"*) cat "$COMMENTS" ;;
esac
"#;

/// Runs the comment step with `comments` (GitHub's JSON) on the pull request, as `gh_user` (a
/// personal token's login; `None`: the workflow token); the `gh` calls that write.
fn run_comment_step(comments: &serde_json::Value, gh_user: Option<&str>) -> Vec<String> {
    let text = std::fs::read_to_string(workflow()).unwrap();
    let script = step_script(&text, "Post or update the diff comment");
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let gh = bin.join("gh");
    std::fs::write(&gh, FAKE_GH).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&gh, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(dir.path().join("diff.md"), "### capstan diff\n").unwrap();
    std::fs::write(dir.path().join("comments.json"), comments.to_string()).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // As GitHub Actions runs a `run:` (bash -eo pipefail), with the step's env.
    let out = Command::new("bash")
        .args(["--noprofile", "--norc", "-eo", "pipefail", "-c", &script])
        .current_dir(dir.path())
        .env("PATH", path)
        .env("CALLS", dir.path().join("calls"))
        .env("COMMENTS", dir.path().join("comments.json"))
        .env("GH_USER", gh_user.unwrap_or(""))
        .env("PR", "7")
        .env("REPO", "acme/fleet")
        .env("COMMENTER", "github-actions[bot]")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read_to_string(dir.path().join("calls"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("--method"))
        .map(str::to_string)
        .collect()
}

#[test]
fn the_workflow_edits_only_its_own_comment() {
    let comment = |id: u64, login: &str, kind: &str, body: &str| serde_json::json!({"id": id, "body": body, "user": {"login": login, "id": id + 1000, "type": kind}});
    let fake = "<!-- capstan:diff -->\nNo cluster changes.";
    let mine = "<!-- capstan:diff -->\nold diff";
    // A commenter posted the marker first; the workflow's own comment comes after.
    let calls = run_comment_step(
        &serde_json::json!([
            comment(1, "mallory", "User", fake),
            comment(2, "github-actions[bot]", "Bot", "no marker here"),
            comment(3, "github-actions[bot]", "Bot", mine),
        ]),
        None,
    );
    assert_eq!(
        calls,
        ["api --method PATCH repos/acme/fleet/issues/comments/3 -F body=@body.md"]
    );
    // Only someone else's (a user named like the bot without its suffix too): a new comment.
    let calls = run_comment_step(
        &serde_json::json!([
            comment(1, "mallory", "User", fake),
            comment(4, "github-actions", "User", fake),
        ]),
        None,
    );
    assert_eq!(
        calls,
        ["api --method POST repos/acme/fleet/issues/7/comments -F body=@body.md"]
    );
    // With a personal token, its user's comment; the workflow token's bot is someone else then.
    let calls = run_comment_step(
        &serde_json::json!([
            comment(3, "github-actions[bot]", "Bot", mine),
            comment(5, "capstan-ci", "User", mine),
        ]),
        Some("capstan-ci"),
    );
    assert_eq!(
        calls,
        ["api --method PATCH repos/acme/fleet/issues/comments/5 -F body=@body.md"]
    );
}
