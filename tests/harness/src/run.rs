//! The tools tests drive, run once for every test and bench: `kubectl` against a kubeconfig,
//! the capstan binary of this build, and what they printed, read as text or JSON.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

/// `kubectl --kubeconfig <kubeconfig> <args>`, run to the end; panics only if kubectl cannot start.
pub fn kubectl_output(kubeconfig: &Path, args: &[&str]) -> Output {
    Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .expect("kubectl runs")
}

/// kubectl's answer: whether it succeeded, and its stdout when it did, else its stderr.
pub fn kubectl(kubeconfig: &Path, args: &[&str]) -> (bool, String) {
    let out = kubectl_output(kubeconfig, args);
    let text = if out.status.success() {
        String::from_utf8_lossy(&out.stdout).to_string()
    } else {
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    (out.status.success(), text)
}

/// kubectl's stdout; panics with its stderr when it fails.
pub fn kubectl_ok(kubeconfig: &Path, args: &[&str]) -> String {
    let out = kubectl_output(kubeconfig, args);
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `kubectl <args> -o json`, parsed; panics when it fails.
pub fn kubectl_json(kubeconfig: &Path, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    let (ok, text) = kubectl(kubeconfig, &all);
    assert!(ok, "kubectl {args:?}: {text}");
    serde_json::from_str(&text).unwrap()
}

/// kubectl with `stdin` fed to it: whether it succeeded, and its stdout followed by its stderr.
pub fn kubectl_with_stdin(kubeconfig: &Path, args: &[&str], stdin: &str) -> (bool, String) {
    let mut child = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl runs");
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), stdin.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    (out.status.success(), output_text(&out))
}

/// A `Command` for the capstan binary of this build ([`crate::capstan_bin`]) with `args`.
pub fn capstan(args: &[&str]) -> Command {
    let mut c = Command::new(crate::capstan_bin());
    c.args(args);
    c
}

/// The capstan binary run with `args` and nothing else set: what it did.
pub fn capstan_output(args: &[&str]) -> Output {
    capstan(args).output().expect("running capstan")
}

/// A process's stdout followed by its stderr, as text.
pub fn output_text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A process's exit status, stdout and stderr, labelled, for a failed assertion's message.
pub fn output_report(o: &Output) -> String {
    format!(
        "{}\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Every file under `dir`, recursively, in the order the directories list them, leaving out
/// entries named one of `skip` (and all below them).
pub fn files_under(dir: &Path, skip: &[&str]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.file_name().is_some_and(|n| skip.iter().any(|s| n == *s)) {
            continue;
        }
        if p.is_dir() {
            out.extend(files_under(&p, skip));
        } else {
            out.push(p);
        }
    }
    out
}

/// The workspace's `examples/fleet`, the fleet tests run capstan on.
pub fn example_fleet() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root")
        .join("examples/fleet")
}

/// Runs git with the user's and the system's configuration ignored; panics on failure.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = git_command(dir).args(args).output().expect("run git");
    assert!(
        out.status.success(),
        "git {args:?} in {} failed: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// A git command with isolated configuration and a fixed identity.
pub fn git_command(dir: &Path) -> Command {
    let mut cmd = Command::new("git");
    cmd.current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "Test")
        .env("GIT_AUTHOR_EMAIL", "test@example.com")
        .env("GIT_COMMITTER_NAME", "Test")
        .env("GIT_COMMITTER_EMAIL", "test@example.com")
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE");
    cmd
}
