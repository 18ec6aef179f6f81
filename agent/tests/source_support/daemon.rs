//! `git daemon` serving git:// on a loopback port.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::{Process, free_port, wait_for_port};

/// A running `git daemon`; killed on drop.
pub struct GitDaemon {
    pub port: u16,
    root: PathBuf,
    process: Option<Process>,
}

impl GitDaemon {
    /// Starts a daemon exporting every repository below `root` on a free port.
    pub fn start(root: &Path) -> GitDaemon {
        for _ in 0..5 {
            let port = free_port();
            if let Some(process) = spawn_git_daemon(root, port) {
                return GitDaemon {
                    port,
                    root: root.to_path_buf(),
                    process: Some(process),
                };
            }
        }
        panic!("git daemon did not start");
    }

    /// The URL of `<root>/<name>`.
    pub fn url(&self, name: &str) -> String {
        format!("git://127.0.0.1:{}/{name}", self.port)
    }

    /// Kills the daemon (the port stops accepting connections).
    pub fn stop(&mut self) {
        if let Some(mut p) = self.process.take() {
            p.kill();
        }
    }

    /// Starts it again on the same port (`--reuseaddr`), with bounded retries.
    pub fn restart(&mut self) {
        self.stop();
        for _ in 0..20 {
            if let Some(p) = spawn_git_daemon(&self.root, self.port) {
                self.process = Some(p);
                return;
            }
        }
        panic!("git daemon did not restart on port {}", self.port);
    }
}

/// Starts `git daemon` serving `root` on `port`; None when it does not come up.
fn spawn_git_daemon(root: &Path, port: u16) -> Option<Process> {
    let mut cmd = Command::new("git");
    cmd.args([
        "daemon",
        "--export-all",
        "--reuseaddr",
        "--informative-errors",
        "--listen=127.0.0.1",
        &format!("--port={port}"),
        &format!("--base-path={}", root.display()),
    ])
    .env("GIT_CONFIG_GLOBAL", "/dev/null")
    .env("GIT_CONFIG_NOSYSTEM", "1")
    .stdout(Stdio::null())
    .stderr(Stdio::null());
    let mut p = Process::spawn(cmd, "git daemon");
    if wait_for_port(port, p.child()) {
        Some(p)
    } else {
        None
    }
}
