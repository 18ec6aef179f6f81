//! Building `kube-apiserver` and `etcd` (and, for tests that run controllers,
//! `kube-controller-manager` and the Cluster API managers) from the pinned Go modules, once per
//! version.
//!
//! Why build instead of downloading: the machines only reach a Go module proxy and
//! crates.io, and a build from `go.sum`-pinned modules is reproducible and reviewable in a
//! diff. The first build takes many minutes (kube-apiserver is ~2000 packages), so the
//! result is cached in
//!
//! ```text
//! ${CAPSTAN_CACHE_DIR:-~/.cache/capstan}/<set>/<key>/
//!     bin/...                       the binaries: set control-plane {kube-apiserver,etcd},
//!                                   set controllers {kube-controller-manager,capi-*,capd-*}
//!     src/<module>/go.mod, go.sum   the embedded wrapper modules, written out to build in
//!     build-<binary>.log            `go build -v` output of the last build
//!     stamp                         written last; its presence means "complete"
//! ${CAPSTAN_CACHE_DIR:-~/.cache/capstan}/<set>/<key>.lock
//! ```
//!
//! `<key>` is a SHA-256 over the embedded go.mod/go.sum files, the target `GOOS/GOARCH` and
//! the build recipe (packages, flags), so a version bump builds into a new directory and old
//! test binaries keep working. Several test binaries start at the same time under `cargo test`:
//! they serialise on an exclusive lock of `<key>.lock` (`std::fs::File::lock`, released by
//! the OS when a process dies) and re-check the stamp after getting the lock, so only the
//! first one builds. Binaries are built to a temporary name and renamed into place.
//!
//! Go's own build cache (`go env GOCACHE`) and module cache are used as usual, so a
//! rebuild after a version bump only recompiles what changed.
//!
//! Progress goes straight to the process' stderr (not through `eprintln!`, which libtest
//! captures), with a heartbeat every 30 s naming the step, elapsed time and the last
//! package `go build -v` reported.

use std::fs::{self, File};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::versions::{self, EmbeddedModule, Versions, VersionsError};

/// Bump when the build recipe changes in a way that must invalidate cached binaries.
const RECIPE: &str =
    "capstan-harness build recipe 1: CGO_ENABLED=0 -trimpath -ldflags=-s -w +version";

/// How often a still-running build reports progress.
const HEARTBEAT: Duration = Duration::from_secs(30);

/// Paths of the built binaries.
#[derive(Debug, Clone)]
pub struct Binaries {
    /// `.../bin/kube-apiserver`.
    pub kube_apiserver: PathBuf,
    /// `.../bin/etcd`.
    pub etcd: PathBuf,
    /// The versions these binaries were built from.
    pub versions: Versions,
    /// `.../control-plane/<key>`.
    pub dir: PathBuf,
    /// Whether this call had to build anything.
    pub built: bool,
}

/// Errors of [`ensure_binaries`].
#[derive(Debug, thiserror::Error)]
pub enum BinariesError {
    /// Neither `CAPSTAN_CACHE_DIR` nor `HOME` is set.
    #[error("cannot find a cache directory: set CAPSTAN_CACHE_DIR or HOME")]
    NoCacheDir,
    /// Filesystem error on a path.
    #[error("{action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    /// The `go` command could not be started.
    #[error("cannot run `{go}` (set CAPSTAN_GO to the go binary): {source}")]
    GoMissing { go: String, source: std::io::Error },
    /// `go build` failed.
    #[error("go build of {what} failed ({status}); last output:\n{tail}\nfull log: {log}")]
    BuildFailed {
        what: String,
        status: std::process::ExitStatus,
        tail: String,
        log: PathBuf,
    },
    /// The built binary does not report the pinned version.
    #[error("{binary} --version printed {output:?}, expected it to contain {expected}")]
    WrongVersion {
        binary: PathBuf,
        output: String,
        expected: String,
    },
    /// The embedded version pins are unusable.
    #[error(transparent)]
    Versions(#[from] VersionsError),
}

/// Makes an I/O error into a [`BinariesError::Io`] naming `action` and `path`.
fn binaries_io_err<'a>(
    action: &'static str,
    path: &'a Path,
) -> impl FnOnce(std::io::Error) -> BinariesError + 'a {
    move |source| BinariesError::Io {
        action,
        path: path.to_owned(),
        source,
    }
}

/// `$CAPSTAN_CACHE_DIR`, or `~/.cache/capstan`.
pub fn cache_root() -> Result<PathBuf, BinariesError> {
    if let Some(d) = std::env::var_os("CAPSTAN_CACHE_DIR").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(d));
    }
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .ok_or(BinariesError::NoCacheDir)?;
    Ok(PathBuf::from(home).join(".cache").join("capstan"))
}

/// The Go toolchain to use: `$CAPSTAN_GO` or `go` from `PATH`.
pub fn go_binary() -> String {
    std::env::var("CAPSTAN_GO")
        .ok()
        .filter(|g| !g.is_empty())
        .unwrap_or_else(|| "go".to_owned())
}

/// A `go` command in `dir` with a controlled environment: no toolchain downloads, no
/// workspace file, no cross-compilation variables inherited from the caller.
pub(crate) fn go_command(dir: &Path, goflags: &str) -> Command {
    let mut cmd = Command::new(go_binary());
    cmd.current_dir(dir)
        .env("GOTOOLCHAIN", "local")
        .env("GOWORK", "off")
        .env("GOFLAGS", goflags)
        .env_remove("GOOS")
        .env_remove("GOARCH")
        .stdin(Stdio::null());
    cmd
}

/// `GOOS/GOARCH` of the running process (what the binaries must run on).
pub fn go_platform() -> String {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64",
        "loongarch64" => "loong64",
        other => other,
    };
    format!("{}/{}", std::env::consts::OS, arch)
}

/// The `-ldflags` for kube-apiserver so that `/version` reports the pinned version
/// (k/k `hack/lib/version.sh` sets the same variables).
fn kube_ldflags(v: &Versions) -> Result<String, BinariesError> {
    let (major, minor) = versions::major_minor(&v.kubernetes)?;
    let mut flags = String::from("-s -w");
    for pkg in [
        "k8s.io/component-base/version",
        "k8s.io/client-go/pkg/version",
    ] {
        flags.push_str(&format!(
            " -X {pkg}.gitVersion={} -X {pkg}.gitMajor={major} -X {pkg}.gitMinor={minor} \
             -X {pkg}.gitTreeState=clean -X {pkg}.buildDate=1970-01-01T00:00:00Z",
            v.kubernetes
        ));
    }
    Ok(flags)
}

/// One binary of a build set: which package of which wrapper module, how to link it, and what
/// `--version` must print (`None`: the binary has no such flag).
pub(crate) struct Target {
    pub(crate) name: &'static str,
    pub(crate) module: &'static EmbeddedModule,
    pub(crate) package: &'static str,
    pub(crate) ldflags: String,
    pub(crate) version: Option<String>,
}

/// The control plane's binaries.
fn control_plane_targets(v: &Versions) -> Result<Vec<Target>, BinariesError> {
    Ok(vec![
        Target {
            name: "etcd",
            module: &versions::ETCD_MODULE,
            package: "go.etcd.io/etcd/server/v3",
            ldflags: "-s -w".into(),
            version: Some(v.etcd.trim_start_matches('v').to_owned()),
        },
        Target {
            name: "kube-apiserver",
            module: &versions::KUBE_APISERVER_MODULE,
            package: "k8s.io/kubernetes/cmd/kube-apiserver",
            ldflags: kube_ldflags(v)?,
            version: Some(v.kubernetes.clone()),
        },
    ])
}

/// The controllers' binaries: kube-controller-manager (same module as kube-apiserver) and the
/// Cluster API managers.
fn controller_targets(v: &Versions) -> Result<Vec<Target>, BinariesError> {
    let capi = versions::module_version(&versions::CAPI_MODULE, "sigs.k8s.io/cluster-api")?;
    // The managers log this version at start; they have no --version flag.
    let capi_ldflags = format!("-s -w -X sigs.k8s.io/cluster-api/version.gitVersion={capi}");
    let manager = |name, package| Target {
        name,
        module: &versions::CAPI_MODULE,
        package,
        ldflags: capi_ldflags.clone(),
        version: None,
    };
    Ok(vec![
        Target {
            name: "kube-controller-manager",
            module: &versions::KUBE_APISERVER_MODULE,
            package: "k8s.io/kubernetes/cmd/kube-controller-manager",
            ldflags: kube_ldflags(v)?,
            version: Some(v.kubernetes.clone()),
        },
        manager("capi-controller-manager", "sigs.k8s.io/cluster-api/core"),
        manager(
            "capi-kubeadm-bootstrap-controller-manager",
            "sigs.k8s.io/cluster-api/bootstrap/kubeadm",
        ),
        manager(
            "capi-kubeadm-control-plane-controller-manager",
            "sigs.k8s.io/cluster-api/controlplane/kubeadm",
        ),
        manager(
            "capd-controller-manager",
            "sigs.k8s.io/cluster-api/test/infrastructure/docker",
        ),
    ])
}

/// EKS Anywhere's renderer (`tests/eksa-oracle`).
fn eksa_oracle_targets() -> Vec<Target> {
    vec![Target {
        name: "eksa-oracle",
        module: &versions::EKSA_ORACLE_MODULE,
        package: "capstan.dev/tests/eksa-oracle",
        ldflags: "-s -w".into(),
        version: None,
    }]
}

/// Hex SHA-256 (first 16 bytes) over the recipe, the platform and every target's module files
/// and link flags.
fn set_key(targets: &[Target]) -> String {
    let mut h = Sha256::new();
    h.update(RECIPE.as_bytes());
    h.update(go_platform().as_bytes());
    let mut modules: Vec<&EmbeddedModule> = Vec::new();
    for t in targets {
        h.update(format!("\0{}\0{}\0{}\0", t.name, t.package, t.ldflags).as_bytes());
        if !modules.iter().any(|m| m.dir == t.module.dir) {
            modules.push(t.module);
        }
    }
    for m in modules {
        for f in m.files {
            h.update(format!("\0{}/{}\0{}\0", m.dir, f.name, f.contents.len()).as_bytes());
            h.update(f.contents.as_bytes());
        }
    }
    hex::encode(&h.finalize()[..16])
}

/// Hex SHA-256 (first 16 bytes) naming the cache directory of the control plane's pins.
pub fn cache_key() -> Result<String, BinariesError> {
    Ok(set_key(&control_plane_targets(&versions::versions()?)?))
}

/// Writes an embedded module into `<root>/src/<dir>/` and returns that directory.
pub(crate) fn write_module(root: &Path, m: &EmbeddedModule) -> Result<PathBuf, BinariesError> {
    let dir = root.join("src").join(m.dir);
    fs::create_dir_all(&dir).map_err(binaries_io_err("create", &dir))?;
    for f in m.files {
        let p = dir.join(f.name);
        if let Some(parent) = p.parent() {
            fs::create_dir_all(parent).map_err(binaries_io_err("create", parent))?;
        }
        if fs::read_to_string(&p).ok().as_deref() != Some(f.contents) {
            fs::write(&p, f.contents).map_err(binaries_io_err("write", &p))?;
        }
    }
    Ok(dir)
}

/// Writes a line to the real stderr, bypassing libtest's output capture.
pub(crate) fn progress(msg: &str) {
    let _ = writeln!(std::io::stderr(), "[capstan-harness] {msg}");
}

/// Formats a duration as `1m05s` / `4.2s`.
pub fn fmt_duration(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

static MEMO: Mutex<Option<Binaries>> = Mutex::new(None);

/// Makes sure `kube-apiserver` and `etcd` of the pinned versions exist in the cache,
/// building whatever is missing (blocking; minutes on a cold cache). Safe to call
/// concurrently from several processes and threads.
pub fn ensure_binaries() -> Result<Binaries, BinariesError> {
    let mut memo = MEMO.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(b) = memo.as_ref() {
        return Ok(Binaries {
            built: false,
            ..b.clone()
        });
    }
    let versions = versions::versions()?;
    let (dir, built) = ensure_set("control-plane", &control_plane_targets(&versions)?)?;
    let bin = dir.join("bin");
    let b = Binaries {
        kube_apiserver: bin.join("kube-apiserver"),
        etcd: bin.join("etcd"),
        versions,
        dir,
        built,
    };
    *memo = Some(b.clone());
    Ok(b)
}

/// Paths of the controllers' binaries.
#[derive(Debug, Clone)]
pub struct ControllerBinaries {
    /// kube-controller-manager (its garbage collector and namespace controllers run).
    pub kube_controller_manager: PathBuf,
    /// The Cluster API core manager.
    pub capi: PathBuf,
    /// The kubeadm bootstrap provider (CABPK).
    pub kubeadm_bootstrap: PathBuf,
    /// The kubeadm control-plane provider (KCP).
    pub kubeadm_control_plane: PathBuf,
    /// The docker infrastructure provider (CAPD), with its in-memory backend.
    pub capd: PathBuf,
    /// The Cluster API version they were built from.
    pub cluster_api_version: String,
    /// `.../controllers/<key>`.
    pub dir: PathBuf,
    /// Whether this call had to build anything.
    pub built: bool,
}

static CONTROLLERS_MEMO: Mutex<Option<ControllerBinaries>> = Mutex::new(None);

/// Makes sure kube-controller-manager and the Cluster API managers of the pinned versions exist
/// in the cache (`<cache>/controllers/<key>/bin`), building whatever is missing (blocking;
/// minutes on a cold cache). Only tests that run controllers call this.
pub fn ensure_controllers() -> Result<ControllerBinaries, BinariesError> {
    let mut memo = CONTROLLERS_MEMO.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(b) = memo.as_ref() {
        return Ok(ControllerBinaries {
            built: false,
            ..b.clone()
        });
    }
    let versions = versions::versions()?;
    let (dir, built) = ensure_set("controllers", &controller_targets(&versions)?)?;
    let bin = dir.join("bin");
    let b = ControllerBinaries {
        kube_controller_manager: bin.join("kube-controller-manager"),
        capi: bin.join("capi-controller-manager"),
        kubeadm_bootstrap: bin.join("capi-kubeadm-bootstrap-controller-manager"),
        kubeadm_control_plane: bin.join("capi-kubeadm-control-plane-controller-manager"),
        capd: bin.join("capd-controller-manager"),
        cluster_api_version: versions::module_version(
            &versions::CAPI_MODULE,
            "sigs.k8s.io/cluster-api",
        )?,
        dir,
        built,
    };
    *memo = Some(b.clone());
    Ok(b)
}

static ACTIONLINT_MEMO: Mutex<Option<PathBuf>> = Mutex::new(None);

/// Makes sure actionlint of the pinned version exists in the cache
/// (`<cache>/tools/<key>/bin/actionlint`), building it from `tests/control-plane/actionlint`
/// when missing (about a minute cold); returns its path. Only the test of the GitHub Actions
/// example calls this.
pub fn ensure_actionlint() -> Result<PathBuf, BinariesError> {
    let mut memo = ACTIONLINT_MEMO.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = memo.as_ref() {
        return Ok(p.clone());
    }
    let version =
        versions::module_version(&versions::ACTIONLINT_MODULE, "github.com/rhysd/actionlint")?;
    let target = Target {
        name: "actionlint",
        module: &versions::ACTIONLINT_MODULE,
        package: "github.com/rhysd/actionlint/cmd/actionlint",
        ldflags: format!("-s -w -X github.com/rhysd/actionlint.version={version}"),
        version: Some(version),
    };
    let (dir, _) = ensure_set("tools", std::slice::from_ref(&target))?;
    let path = dir.join("bin").join("actionlint");
    *memo = Some(path.clone());
    Ok(path)
}

static SOPS_MEMO: Mutex<Option<PathBuf>> = Mutex::new(None);

/// Makes sure sops of the pinned version exists in the cache (`<cache>/tools/<key>/bin/sops`),
/// building it from `tests/control-plane/sops` when missing (about two minutes cold); returns
/// its path. The SOPS tests encrypt with it: the real tool is the oracle of capstan's reader.
pub fn ensure_sops() -> Result<PathBuf, BinariesError> {
    let mut memo = SOPS_MEMO.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = memo.as_ref() {
        return Ok(p.clone());
    }
    let version = versions::module_version(&versions::SOPS_MODULE, "github.com/getsops/sops/v3")?;
    let target = Target {
        name: "sops",
        module: &versions::SOPS_MODULE,
        package: "github.com/getsops/sops/v3/cmd/sops",
        ldflags: "-s -w".into(),
        // `sops --version` prints `sops 3.13.3`, without the module's `v`.
        version: Some(version.trim_start_matches('v').to_string()),
    };
    let (dir, _) = ensure_set("tools", std::slice::from_ref(&target))?;
    let path = dir.join("bin").join("sops");
    *memo = Some(path.clone());
    Ok(path)
}

static ORACLE_MEMO: Mutex<Option<PathBuf>> = Mutex::new(None);

/// Makes sure the EKS Anywhere oracle (`tests/eksa-oracle`, EKS Anywhere's own renderer) of the
/// pinned version exists in the cache (`<cache>/eksa-oracle/<key>/bin/eksa-oracle`), building it
/// when missing (blocking; about 3 to 7 minutes on a cold cache, most of it module downloads).
/// Only the differential render test calls this.
pub fn ensure_eksa_oracle() -> Result<PathBuf, BinariesError> {
    let mut memo = ORACLE_MEMO.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = memo.as_ref() {
        return Ok(p.clone());
    }
    let (dir, _) = ensure_set("eksa-oracle", &eksa_oracle_targets())?;
    let path = dir.join("bin").join("eksa-oracle");
    *memo = Some(path.clone());
    Ok(path)
}

static GOTEMPLATE_ORACLE_MEMO: Mutex<Option<PathBuf>> = Mutex::new(None);

/// Makes sure the Go template oracle (`tests/gotemplate-oracle`: Go's text/template with Sprig's
/// function map, as the Cluster API add-on provider for Helm parses values templates) exists in
/// the cache (`<cache>/tools/<key>/bin/gotemplate-oracle`), building it when missing (seconds;
/// Sprig and its dependencies come from the Go module proxy the first time). Only the
/// differential test of capstan's Go template parser calls this.
pub fn ensure_gotemplate_oracle() -> Result<PathBuf, BinariesError> {
    let mut memo = GOTEMPLATE_ORACLE_MEMO
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(p) = memo.as_ref() {
        return Ok(p.clone());
    }
    let target = Target {
        name: "gotemplate-oracle",
        module: &versions::GOTEMPLATE_ORACLE_MODULE,
        package: "capstan.dev/tests/gotemplate-oracle",
        ldflags: "-s -w".into(),
        version: None,
    };
    let (dir, _) = ensure_set("tools", std::slice::from_ref(&target))?;
    let path = dir.join("bin").join("gotemplate-oracle");
    *memo = Some(path.clone());
    Ok(path)
}

/// Builds every target of a set that is not in `<cache>/<set>/<key>/bin` yet; returns the
/// set's directory and whether anything was built.
pub(crate) fn ensure_set(set: &str, targets: &[Target]) -> Result<(PathBuf, bool), BinariesError> {
    let key = set_key(targets);
    let base = cache_root()?.join(set);
    let dir = base.join(&key);
    let bin = dir.join("bin");
    let stamp = dir.join("stamp");
    let complete = || {
        fs::read_to_string(&stamp).is_ok_and(|s| s.contains(&key))
            && targets.iter().all(|t| bin.join(t.name).is_file())
    };
    if complete() {
        return Ok((dir, false));
    }

    fs::create_dir_all(&bin).map_err(binaries_io_err("create", &bin))?;
    let lock_path = base.join(format!("{key}.lock"));
    let lock = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(binaries_io_err("open", &lock_path))?;
    if lock.try_lock().is_err() {
        progress(&format!(
            "waiting for another process building the {set} binaries ({})",
            lock_path.display()
        ));
        lock.lock().map_err(binaries_io_err("lock", &lock_path))?;
    }
    // Whoever held the lock may have finished the job.
    if complete() {
        return Ok((dir, false));
    }
    let _ = fs::remove_file(&stamp);
    // Half-written outputs of builders that died while holding the lock.
    for entry in fs::read_dir(&bin)
        .map_err(binaries_io_err("read", &bin))?
        .flatten()
    {
        if entry.file_name().to_string_lossy().contains(".tmp-") {
            let _ = fs::remove_file(entry.path());
        }
    }

    let started = Instant::now();
    let mut timings = Vec::new();
    for t in targets {
        let out = bin.join(t.name);
        if !out.is_file() {
            let src = write_module(&dir, t.module)?;
            let clock = Instant::now();
            go_build(&src, t.package, &t.ldflags, &out, t.name)?;
            timings.push(format!("{}={:.1}s", t.name, clock.elapsed().as_secs_f64()));
        }
        if let Some(v) = &t.version {
            check_version(&out, v)?;
        }
    }

    let names: Vec<&str> = targets.iter().map(|t| t.name).collect();
    let stamp_text = format!(
        "key={key}\nplatform={}\nbinaries={}\nbuild_seconds={}\n",
        go_platform(),
        names.join(","),
        timings.join(",")
    );
    fs::write(&stamp, stamp_text).map_err(binaries_io_err("write", &stamp))?;
    let built = !timings.is_empty();
    if built {
        progress(&format!(
            "{set} binaries ready in {} ({})",
            fmt_duration(started.elapsed()),
            bin.display()
        ));
    }
    drop(lock);
    Ok((dir, built))
}

/// Runs `go build -v` of `package` in `src`, writing `out` atomically, with heartbeats.
fn go_build(
    src: &Path,
    package: &str,
    ldflags: &str,
    out: &Path,
    what: &str,
) -> Result<(), BinariesError> {
    let tmp = out.with_extension(format!("tmp-{}", std::process::id()));
    let log_path = out
        .parent()
        .and_then(Path::parent)
        .unwrap_or(src)
        .join(format!(
            "build-{}.log",
            out.file_name().and_then(|n| n.to_str()).unwrap_or("binary")
        ));
    let mut log = File::create(&log_path).map_err(binaries_io_err("create", &log_path))?;
    progress(&format!(
        "building {what} from Go modules (first time: module downloads and a few minutes of compiling on 2 cores); log: {}",
        log_path.display()
    ));
    let mut cmd = go_command(src, "-mod=readonly -buildvcs=false");
    cmd.env("CGO_ENABLED", "0")
        .args(["build", "-v", "-trimpath", "-ldflags", ldflags, "-o"])
        .arg(&tmp)
        .arg(package)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|source| BinariesError::GoMissing {
        go: go_binary(),
        source,
    })?;

    // go build -v prints package names on stderr; errors also go to stderr.
    let state = Arc::new(Mutex::new((0usize, Vec::<String>::new())));
    let mut readers = Vec::new();
    for stream in [
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
    ]
    .into_iter()
    .flatten()
    {
        let state = Arc::clone(&state);
        let mut log = log.try_clone().map_err(binaries_io_err("dup", &log_path))?;
        readers.push(std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                let _ = writeln!(log, "{line}");
                let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
                // `go build -v` prints one import path per compiled package; downloads
                // ("go: downloading ...") and errors ("# pkg", "file.go:1:2: ...") also land here.
                if !line.starts_with("go: ") && !line.starts_with('#') && !line.contains(' ') {
                    s.0 += 1;
                }
                s.1.push(line);
                if s.1.len() > 30 {
                    s.1.remove(0);
                }
            }
        }));
    }
    let started = Instant::now();
    let mut next_beat = started + HEARTBEAT;
    let status = loop {
        if let Some(status) = child
            .try_wait()
            .map_err(binaries_io_err("wait for go build", src))?
        {
            break status;
        }
        if Instant::now() >= next_beat {
            let s = state.lock().unwrap_or_else(|e| e.into_inner());
            progress(&format!(
                "still building {what}: {} elapsed, {} packages done, last: {}",
                fmt_duration(started.elapsed()),
                s.0,
                s.1.last().map(String::as_str).unwrap_or("-")
            ));
            next_beat += HEARTBEAT;
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    for r in readers {
        let _ = r.join();
    }
    let _ = writeln!(
        log,
        "# exit: {status}, {:.1}s",
        started.elapsed().as_secs_f64()
    );
    if !status.success() {
        let _ = fs::remove_file(&tmp);
        let tail = state.lock().unwrap_or_else(|e| e.into_inner()).1.join("\n");
        return Err(BinariesError::BuildFailed {
            what: what.to_owned(),
            status,
            tail,
            log: log_path,
        });
    }
    fs::rename(&tmp, out).map_err(binaries_io_err("rename into place", out))?;
    progress(&format!(
        "built {what} in {}",
        fmt_duration(started.elapsed())
    ));
    Ok(())
}

/// Runs `binary --version` and checks the output mentions `expected`.
fn check_version(binary: &Path, expected: &str) -> Result<(), BinariesError> {
    let out = Command::new(binary)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .map_err(binaries_io_err("run", binary))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !text.contains(expected) {
        return Err(BinariesError::WrongVersion {
            binary: binary.to_owned(),
            output: text,
            expected: expected.to_owned(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_key_is_stable_hex() {
        let a = cache_key().unwrap();
        assert_eq!(a, cache_key().unwrap());
        assert_eq!(a.len(), 32);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
    }

    #[test]
    fn ldflags_name_the_version() {
        let v = versions::versions().unwrap();
        let f = kube_ldflags(&v).unwrap();
        assert!(f.contains(&format!(
            "k8s.io/component-base/version.gitVersion={}",
            v.kubernetes
        )));
        assert!(f.contains("k8s.io/client-go/pkg/version.gitMinor="));
    }
}
