//! `sshd` on a loopback port with a generated host key and a generated read-only deploy key.
//!
//! The deploy key's `authorized_keys` line is `restrict,command="…/upload-pack-only"`: whatever
//! the client asks for, sshd runs that script, which only `exec`s `git-upload-pack` for a
//! repository below the served root (so the key can fetch but never push or get a shell).

use std::io::Read;
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use super::{Process, free_port};

/// A running sshd; killed on drop.
pub struct Sshd {
    // Killed before the directory with its keys and config is removed.
    process: Process,
    pub port: u16,
    pub dir: tempfile::TempDir,
    /// The deploy key (private, mode 0600).
    pub key: PathBuf,
    /// A known_hosts file holding the server's host key for `[127.0.0.1]:port`.
    pub known_hosts: PathBuf,
}

fn keygen(path: &Path, comment: &str) {
    let st = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", comment, "-f"])
        .arg(path)
        .stdout(Stdio::null())
        .status()
        .expect("run ssh-keygen");
    assert!(st.success(), "ssh-keygen failed");
}

impl Sshd {
    /// Starts sshd serving the repositories below `root` to the deploy key.
    pub fn start(root: &Path) -> Sshd {
        Self::start_with(root, true, false)
    }

    /// Like [`start`](Self::start), but the key may also push (`git-receive-pack`), as the
    /// key of a developer or a bot that opens pull requests, or the key `capstan bootstrap` is
    /// given.
    pub fn start_push(root: &Path) -> Sshd {
        Self::start_with(root, true, true)
    }

    /// Like [`start`](Self::start), but sshd does not accept the client's `GIT_PROTOCOL`
    /// variable, so `git-upload-pack` speaks protocol v0 (as on hosts that don't `AcceptEnv` it).
    pub fn start_v0(root: &Path) -> Sshd {
        Self::start_with(root, false, false)
    }

    fn start_with(root: &Path, v2: bool, push: bool) -> Sshd {
        // sshd refuses to start without its privilege separation directory, which the package
        // only creates when the service is started through systemd/init.
        std::fs::create_dir_all("/run/sshd").expect("create /run/sshd");
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let host_key = d.join("host_ed25519");
        let key = d.join("deploy_ed25519");
        keygen(&host_key, "capstan-test-host");
        keygen(&key, "capstan-test-deploy");

        let script = d.join("upload-pack-only");
        std::fs::write(
            &script,
            format!(
                r#"#!/bin/sh
# Deploy key: git-upload-pack (and, for a push key, git-receive-pack) of a repository below
# the served root.
root='{root}'
push='{push}'
case "$SSH_ORIGINAL_COMMAND" in
  "git-upload-pack '"*"'") cmd=git-upload-pack; path=${{SSH_ORIGINAL_COMMAND#git-upload-pack \'}}; path=${{path%\'}} ;;
  "git-receive-pack '"*"'") [ "$push" = yes ] || {{ echo "this deploy key is read-only" >&2; exit 1; }}; cmd=git-receive-pack; path=${{SSH_ORIGINAL_COMMAND#git-receive-pack \'}}; path=${{path%\'}} ;;
  *) echo "this deploy key is read-only: '$SSH_ORIGINAL_COMMAND' refused" >&2; exit 1 ;;
esac
case "$path" in
  *..*|*\'*) echo "refused path" >&2; exit 1 ;;
  "$root"/*) ;;
  *) echo "not exported: $path" >&2; exit 1 ;;
esac
exec $cmd "$path"
"#,
                root = root.display(),
                push = if push { "yes" } else { "no" },
            ),
        )
        .unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();

        let public = std::fs::read_to_string(key.with_extension("pub")).unwrap();
        let authorized = d.join("authorized_keys");
        std::fs::write(
            &authorized,
            format!(
                "restrict,command=\"{}\" {}",
                script.display(),
                public.trim()
            ),
        )
        .unwrap();

        let host_public = std::fs::read_to_string(host_key.with_extension("pub")).unwrap();
        let known_hosts = d.join("known_hosts");
        let config = d.join("sshd_config");
        let log = d.join("sshd.log");

        for _ in 0..5 {
            let port = free_port();
            std::fs::write(
                &known_hosts,
                format!("[127.0.0.1]:{port} {}\n", host_public.trim()),
            )
            .unwrap();
            std::fs::write(
                &config,
                format!(
                    "Port {port}\nListenAddress 127.0.0.1\nHostKey {hk}\nPidFile none\nAuthorizedKeysFile {ak}\n\
                     StrictModes no\nUsePAM no\nPermitRootLogin prohibit-password\nAllowUsers root\n\
                     PubkeyAuthentication yes\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n\
                     {accept}LogLevel VERBOSE\n",
                    hk = host_key.display(),
                    ak = authorized.display(),
                    accept = if v2 { "AcceptEnv GIT_PROTOCOL\n" } else { "" },
                ),
            )
            .unwrap();
            let mut cmd = Command::new("/usr/sbin/sshd");
            cmd.args(["-D", "-e", "-f"])
                .arg(&config)
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).unwrap());
            let mut process = Process::spawn(cmd, "sshd");
            if wait_for_banner(port, &mut process) {
                return Sshd {
                    process,
                    port,
                    dir,
                    key,
                    known_hosts,
                };
            }
        }
        panic!(
            "sshd did not start: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }

    /// The ssh:// URL of a repository at an absolute path.
    pub fn url(&self, repo: &Path) -> String {
        format!("ssh://root@127.0.0.1:{}{}", self.port, repo.display())
    }

    /// Runs `remote_command` over ssh with the deploy key, as a client would.
    pub fn run_as_deploy_key(&self, remote_command: &str) -> Output {
        Command::new("ssh")
            .args([
                "-o",
                "BatchMode=yes",
                "-o",
                "IdentitiesOnly=yes",
                "-o",
                "StrictHostKeyChecking=yes",
            ])
            .arg("-o")
            .arg(format!("UserKnownHostsFile={}", self.known_hosts.display()))
            .arg("-i")
            .arg(&self.key)
            .arg(format!("-p{}", self.port))
            .arg("root@127.0.0.1")
            .arg(remote_command)
            .stdin(Stdio::null())
            .output()
            .expect("run ssh")
    }

    /// What sshd logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("sshd.log")).unwrap_or_default()
    }
}

/// Waits (bounded) for the SSH banner on `port`, failing early if sshd exited.
fn wait_for_banner(port: u16, process: &mut Process) -> bool {
    for _ in 0..200 {
        if let Ok(Some(_)) = process.child().try_wait() {
            return false;
        }
        if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            let mut buf = [0u8; 4];
            if s.read_exact(&mut buf).is_ok() && &buf == b"SSH-" {
                return true;
            }
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    false
}
