//! Child processes: spawning with log files, graceful termination, liveness by pid, and a
//! watchdog that cleans up when the test process dies without running destructors.
//!
//! # Why a watchdog process and not `PR_SET_PDEATHSIG`
//!
//! `Drop` handles the normal case and panics (destructors run while unwinding). It does
//! not run for `static`s (the per-binary [`crate::shared`] control plane), on
//! `std::process::exit` (which libtest calls), on `SIGKILL`, or on an abort. Two options:
//!
//! * `prctl(PR_SET_PDEATHSIG)` in a `pre_exec` hook: needs `unsafe`, fires when the
//!   *thread* that spawned the child exits (with one tokio runtime per `#[tokio::test]`
//!   that thread is often gone long before the process), and cannot remove the temp dir.
//! * A tiny `/bin/sh` watchdog (used here): it is started *before* etcd and learns each pid
//!   through a pipe on its stdin. The write end of the pipe is only held by this process
//!   (std opens pipes `O_CLOEXEC`), so the watchdog sees end-of-file exactly when this
//!   process is gone, however it died. It then stops kube-apiserver and etcd (in that
//!   order; SIGTERM, SIGKILL after 5 s each) and removes the temp dir. The watchdog
//!   ignores SIGINT/SIGHUP/SIGTERM and runs in its own process group, so Ctrl-C or a
//!   group kill of the test run does not stop it before it has cleaned up (etcd and
//!   kube-apiserver stay in the test's process group and get the Ctrl-C directly).
//!   On an orderly stop the harness kills the watchdog with SIGKILL *after* it has
//!   cleaned up itself, so the watchdog never signals reused pids.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, WaitOptions, kill_process, waitpid};
use serde::{Deserialize, Serialize};

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// The program could not be started.
    #[error("start {program}: {source}")]
    Spawn {
        program: PathBuf,
        source: std::io::Error,
    },
    /// A log file could not be created.
    #[error("create log {path}: {source}")]
    Log {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The watchdog could not be told about a pid.
    #[error("watchdog: {0}")]
    Watchdog(std::io::Error),
}

/// A process identified robustly: pid plus its start time (so a reused pid is not
/// mistaken for the original process).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessId {
    /// The pid.
    pub pid: i32,
    /// Field 22 of `/proc/<pid>/stat` (clock ticks since boot), 0 if unknown.
    pub start_time: u64,
}

impl ProcessId {
    /// Identifies a running pid now.
    pub fn of(pid: u32) -> Self {
        let pid = pid as i32;
        ProcessId {
            pid,
            start_time: proc_stat(pid).map(|s| s.1).unwrap_or(0),
        }
    }

    /// True while the process exists, is not a zombie, and is the same process.
    pub fn is_alive(&self) -> bool {
        match proc_stat(self.pid) {
            Some((state, start)) => {
                state != 'Z' && state != 'X' && (self.start_time == 0 || start == self.start_time)
            }
            None => false,
        }
    }
}

/// `(state, start_time)` from `/proc/<pid>/stat`.
fn proc_stat(pid: i32) -> Option<(char, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may contain spaces: parse after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first()?.chars().next()?;
    // Field 3 is the state (index 0 here); field 22 is starttime (index 19).
    let start = fields.get(19)?.parse().ok()?;
    Some((state, start))
}

/// Spawns `program args...` with stdin closed and stdout+stderr appended to `log`.
/// `detach` puts it in its own process group (for processes that must outlive us and
/// ignore the terminal's Ctrl-C).
pub fn spawn_logged(
    program: &Path,
    args: &[String],
    log: &Path,
    detach: bool,
) -> Result<Child, ProcessError> {
    spawn_logged_env(program, args, log, detach, &[])
}

/// [`spawn_logged`] with extra environment variables.
pub fn spawn_logged_env(
    program: &Path,
    args: &[String],
    log: &Path,
    detach: bool,
    env: &[(&str, &str)],
) -> Result<Child, ProcessError> {
    let out = File::options()
        .create(true)
        .append(true)
        .open(log)
        .map_err(|source| ProcessError::Log {
            path: log.to_owned(),
            source,
        })?;
    let err = out.try_clone().map_err(|source| ProcessError::Log {
        path: log.to_owned(),
        source,
    })?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err);
    if detach {
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    }
    cmd.spawn().map_err(|source| ProcessError::Spawn {
        program: program.to_owned(),
        source,
    })
}

/// Sends `sig` to `pid`, ignoring "no such process".
pub fn signal(pid: i32, sig: Signal) {
    if let Some(p) = Pid::from_raw(pid) {
        let _ = kill_process(p, sig);
    }
}

/// SIGTERM, wait up to `grace`, then SIGKILL; always reaps the child.
pub fn terminate_child(child: &mut Child, grace: Duration) {
    if matches!(child.try_wait(), Ok(Some(_))) {
        return;
    }
    signal(child.id() as i32, Signal::TERM);
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if matches!(child.try_wait(), Ok(Some(_))) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Like [`terminate_child`] for a process that may not be our child (persistent mode).
/// Returns whether it was running.
pub fn terminate_pid(id: ProcessId, grace: Duration) -> bool {
    if !id.is_alive() {
        reap(id.pid);
        return false;
    }
    signal(id.pid, Signal::TERM);
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        reap(id.pid);
        if !id.is_alive() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    if id.is_alive() {
        signal(id.pid, Signal::KILL);
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while id.is_alive() && Instant::now() < deadline {
        reap(id.pid);
        std::thread::sleep(Duration::from_millis(20));
    }
    reap(id.pid);
    true
}

/// Reaps `pid` if it is our exited child (no-op otherwise).
fn reap(pid: i32) {
    if let Some(p) = Pid::from_raw(pid) {
        let _ = waitpid(Some(p), WaitOptions::NOHANG);
    }
}

/// Last `lines` lines of a log file, for error messages.
pub fn log_tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

const WATCHDOG_SCRIPT: &str = r#"
trap '' INT HUP TERM QUIT PIPE
dir=$1
pids=
# Newest first: kube-apiserver shuts down faster while etcd is still there.
while read -r p; do pids="$p $pids"; done
gone() {
  ! kill -0 "$1" 2>/dev/null || grep -q '^[^)]*) [ZX]' "/proc/$1/stat" 2>/dev/null
}
for p in $pids; do
  kill -TERM "$p" 2>/dev/null
  i=0
  while [ "$i" -lt 50 ] && ! gone "$p"; do sleep 0.1; i=$((i+1)); done
  kill -KILL "$p" 2>/dev/null
done
[ -n "$dir" ] && rm -rf -- "$dir"
"#;

/// See the module docs.
#[derive(Debug)]
pub struct Watchdog {
    child: Child,
    stdin: Option<ChildStdin>,
}

impl Watchdog {
    /// Starts a watchdog that will remove `dir` (recursively) when this process dies.
    pub fn spawn(dir: &Path) -> Result<Self, ProcessError> {
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c")
            .arg(WATCHDOG_SCRIPT)
            .arg("capstan-harness-watchdog")
            .arg(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let mut child = cmd.spawn().map_err(|source| ProcessError::Spawn {
            program: "/bin/sh".into(),
            source,
        })?;
        let stdin = child.stdin.take();
        Ok(Watchdog { child, stdin })
    }

    /// Adds a pid to kill when this process dies.
    pub fn watch(&mut self, pid: u32) -> Result<(), ProcessError> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| ProcessError::Watchdog(std::io::ErrorKind::BrokenPipe.into()))?;
        writeln!(stdin, "{pid}")
            .and_then(|()| stdin.flush())
            .map_err(ProcessError::Watchdog)
    }

    /// The watchdog's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stops the watchdog without letting it act (the caller has cleaned up).
    pub fn disarm(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.stdin.take();
    }
}
