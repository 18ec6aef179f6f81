//! Nothing is left behind: no process, no temp dir — after a normal drop, after a panic in
//! the test body, after the test process is SIGKILLed, and for the shared instance when
//! the test binary exits (statics are never dropped; the watchdog handles it).
//!
//! The last two re-run this test binary as a child process (`child_helper`, ignored
//! unless `CAPSTAN_HARNESS_CLEANUP_CHILD` is set), which reports its pids into a file.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use capstan_harness::{ControlPlane, Pids, ProcessId, StartOptions};

const CHILD_ENV: &str = "CAPSTAN_HARNESS_CLEANUP_CHILD";

fn quick() -> StartOptions {
    StartOptions {
        install_crds: false,
        ..StartOptions::default()
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Report {
    pids: Pids,
    watchdog: Option<u32>,
    dir: PathBuf,
}

fn report(cp: &ControlPlane) -> Report {
    Report {
        pids: cp.pids(),
        watchdog: cp.watchdog_pid(),
        dir: cp.dir().to_owned(),
    }
}

fn all_pids(r: &Report) -> Vec<ProcessId> {
    let mut v = vec![r.pids.etcd, r.pids.kube_apiserver];
    v.extend(r.watchdog.map(ProcessId::of));
    v
}

/// Waits until none of the processes lives and `dir` is gone; panics after `within`.
fn assert_gone(pids: &[ProcessId], dir: &Path, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let alive: Vec<_> = pids.iter().filter(|p| p.is_alive()).collect();
        if alive.is_empty() && !dir.exists() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "left behind after {within:?}: alive {alive:?}, dir exists: {}",
            dir.exists()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn assert_running(r: &Report) {
    assert!(
        r.pids.etcd.is_alive() && r.pids.kube_apiserver.is_alive(),
        "not running: {:?}",
        r.pids
    );
    assert!(r.dir.join("kubeconfig").is_file());
}

#[tokio::test]
async fn drop_stops_processes_and_removes_the_dir() {
    let cp = ControlPlane::start_with(quick()).await.unwrap();
    let r = report(&cp);
    assert_running(&r);
    cp.client().apiserver_version().await.unwrap();
    let t = Instant::now();
    drop(cp);
    println!("drop took {:.2}s", t.elapsed().as_secs_f64());
    // Drop is synchronous: everything is gone when it returns.
    assert_gone(&all_pids(&r), &r.dir, Duration::ZERO);
}

#[test]
fn panic_in_a_test_body_stops_processes_and_removes_the_dir() {
    let (tx, rx) = std::sync::mpsc::channel();
    let body = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let cp = ControlPlane::start_with(quick()).await.unwrap();
            tx.send(report(&cp)).unwrap();
            panic!("the test body fails while holding a running control plane");
        })
    });
    assert!(body.join().is_err(), "the body should have panicked");
    let r = rx.recv().unwrap();
    assert_gone(&all_pids(&r), &r.dir, Duration::ZERO);
}

/// Runs `child_helper` in a child process in `mode`, returns the child and its report.
fn spawn_child(mode: &str) -> (std::process::Child, Report) {
    let tmp = tempfile::tempdir().unwrap();
    let report_path = tmp.path().join("report.json");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_helper",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, format!("{mode}:{}", report_path.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        if let Some(r) = std::fs::read_to_string(&report_path)
            .ok()
            .and_then(|text| serde_json::from_str::<Report>(&text).ok())
        {
            return (child, r);
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("child exited ({status}) before reporting");
        }
        assert!(Instant::now() < deadline, "child did not report");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn sigkilled_test_process_leaves_nothing_behind() {
    let (mut child, r) = spawn_child("private");
    assert_running(&r);
    child.kill().unwrap(); // SIGKILL: no destructor, no atexit, nothing runs in the child
    child.wait().unwrap();
    let t = Instant::now();
    assert_gone(&all_pids(&r), &r.dir, Duration::from_secs(20));
    println!(
        "watchdog cleaned up {:.2}s after SIGKILL",
        t.elapsed().as_secs_f64()
    );
}

#[test]
fn shared_control_plane_is_removed_when_the_test_binary_exits() {
    let (mut child, r) = spawn_child("shared");
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
    assert_gone(&all_pids(&r), &r.dir, Duration::from_secs(20));
}

/// Not a test: the body of the child process of the two tests above.
#[tokio::test]
#[ignore = "helper run as a child process by the cleanup tests"]
async fn child_helper() {
    let Ok(arg) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (mode, path) = arg.split_once(':').unwrap();
    let write = |r: Report| {
        let tmp = format!("{path}.tmp");
        std::fs::write(&tmp, serde_json::to_string(&r).unwrap()).unwrap();
        std::fs::rename(tmp, path).unwrap();
    };
    match mode {
        "private" => {
            let cp = ControlPlane::start_with(quick()).await.unwrap();
            write(report(&cp));
            tokio::time::sleep(Duration::from_secs(600)).await; // killed before this ends
            drop(cp);
        }
        "shared" => {
            let cp = capstan_harness::shared().await;
            cp.client().apiserver_version().await.unwrap();
            write(report(cp));
            // Return: libtest exits the process without dropping the static.
        }
        other => panic!("unknown mode {other}"),
    }
}
