//! Real Git servers on loopback for the source tests, and an upstream repository to push to.
//!
//! Every server runs in its own process group and is killed (group and all, by its process id) when
//! its guard drops, so a failing test does not leave daemons behind. Start-up waits with bounded
//! retries, never with a fixed sleep.

#![allow(dead_code)]

pub mod agent;
pub mod blackhole;
pub mod daemon;
pub mod github;
pub mod http;
pub mod kubelet;
pub mod signing;
pub mod sshd;

use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub use capstan_harness::ports::free_port;

/// Waits (bounded) until something accepts TCP connections on `port`, or the child died.
pub fn wait_for_port(port: u16, child: &mut Child) -> bool {
    for _ in 0..200 {
        if let Ok(Some(_)) = child.try_wait() {
            return false;
        }
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    false
}

/// A spawned server in its own process group; the whole group is killed on drop.
pub struct Process {
    child: Option<Child>,
    what: String,
}

impl Process {
    /// Spawns `cmd` in a new process group.
    pub fn spawn(mut cmd: Command, what: &str) -> Process {
        cmd.process_group(0).stdin(Stdio::null());
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
        Process {
            child: Some(child),
            what: what.to_string(),
        }
    }

    pub fn child(&mut self) -> &mut Child {
        self.child.as_mut().expect("running")
    }

    /// Kills the process group and reaps the leader.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let pgid = child.id();
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{pgid}")])
                .stderr(Stdio::null())
                .status();
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

impl std::fmt::Debug for Process {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Process({})", self.what)
    }
}

pub use capstan_harness::run::{git, git_command};

/// A working copy of `examples/fleet` with one commit on `main` (what the diff and rehearse
/// command tests change on top).
pub fn example_fleet_repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/fleet");
    let copied = Command::new("cp")
        .arg("-r")
        .arg(src.join("clusters"))
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(copied.success());
    git(dir.path(), &["init", "-q", "-b", "main"]);
    git(dir.path(), &["add", "-A"]);
    git(dir.path(), &["commit", "-q", "-m", "fleet"]);
    dir
}

/// The repository being served (`<root>/repo.git`, bare) and a working clone that pushes to it.
pub struct Upstream {
    pub tmp: tempfile::TempDir,
    /// The directory servers export (base path).
    pub root: PathBuf,
    /// The bare repository.
    pub bare: PathBuf,
    /// The working clone.
    pub work: PathBuf,
}

impl Upstream {
    /// An upstream with one commit on `main` holding `files`.
    pub fn new(files: &[(&str, &str)]) -> Upstream {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("srv");
        let bare = root.join("repo.git");
        let work = tmp.path().join("work");
        std::fs::create_dir_all(&bare).unwrap();
        std::fs::create_dir_all(&work).unwrap();
        git(&bare, &["init", "--bare", "-q", "-b", "main"]);
        git(&work, &["init", "-q", "-b", "main"]);
        git(&work, &["remote", "add", "origin", bare.to_str().unwrap()]);
        let up = Upstream {
            tmp,
            root,
            bare,
            work,
        };
        up.write(files);
        up.commit("initial");
        up.push();
        up
    }

    /// Writes files into the working clone (creating directories).
    pub fn write(&self, files: &[(&str, &str)]) {
        for (path, content) in files {
            let p = self.work.join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, content).unwrap();
        }
    }

    /// Removes files from the working clone.
    pub fn remove(&self, paths: &[&str]) {
        for p in paths {
            std::fs::remove_file(self.work.join(p)).unwrap();
        }
    }

    /// Commits everything and returns the commit id.
    pub fn commit(&self, msg: &str) -> String {
        git(&self.work, &["add", "-A"]);
        git(&self.work, &["commit", "-q", "--allow-empty", "-m", msg]);
        self.head()
    }

    pub fn head(&self) -> String {
        git(&self.work, &["rev-parse", "HEAD"])
    }

    /// Pushes `main` and all tags (forced).
    pub fn push(&self) {
        git(&self.work, &["push", "-q", "-f", "origin", "main"]);
        git(&self.work, &["push", "-q", "-f", "--tags", "origin"]);
    }

    /// Writes, commits and pushes; returns the commit.
    pub fn commit_and_push(&self, files: &[(&str, &str)], remove: &[&str], msg: &str) -> String {
        self.write(files);
        self.remove(remove);
        let c = self.commit(msg);
        self.push();
        c
    }

    /// Replaces `main` by an orphan commit holding exactly `files`, force-pushed.
    pub fn force_push_unrelated(&self, files: &[(&str, &str)]) -> String {
        git(&self.work, &["checkout", "-q", "--orphan", "rewrite"]);
        git(&self.work, &["rm", "-rq", "--cached", "."]);
        git(&self.work, &["clean", "-fdxq"]);
        self.write(files);
        let c = self.commit("unrelated history");
        git(&self.work, &["branch", "-M", "rewrite", "main"]);
        self.push();
        c
    }

    /// The URL of the repository as a local path.
    pub fn path_url(&self) -> String {
        self.bare.to_str().unwrap().to_string()
    }
}

/// The pack files of a mirror, to see whether anything was downloaded.
pub fn packs(cache: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(cache.join("objects/pack"))
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "pack"))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Whether the mirror at `cache` has object `id` (asked through the git CLI, independent of gix).
pub fn has_object(cache: &Path, id: &str) -> bool {
    git_command(cache)
        .args(["cat-file", "-e", id])
        .status()
        .unwrap()
        .success()
}
