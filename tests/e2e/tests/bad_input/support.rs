//! The machinery of the bad-input corpus: a valid base fleet, a case builder that overrides files
//! of it, and the checks every case goes through.
//!
//! ```text
//!   clusters/mgmt/cluster.yaml                              docker, self-managed, eksaVersion v0.26.1
//!   clusters/mgmt/datacenter.yaml
//!   clusters/mgmt/workload-clusters/ok/cluster.yaml         the healthy sibling (explicit eksaVersion)
//!   clusters/mgmt/workload-clusters/w/cluster.yaml          the workload under test (inherits eksaVersion)
//!   clusters/mgmt/workload-clusters/w/datacenter.yaml       (or w/vsphere.yaml for vSphere cases)
//! ```
//!
//! Each case then overrides, adds or removes files and lists every diagnostic the fleet must
//! produce: code, severity, file, line and (mostly) column, and which cluster (or the fleet itself)
//! owns it. The checks:
//!
//! 1. the diagnostics are exactly the expected ones (nothing missing, nothing extra), so a case
//!    with several problems proves they are all reported in one run;
//! 2. every cluster the case breaks is not rendered;
//! 3. every other cluster validates and renders, and the healthy sibling `ok` (and `mgmt`, when
//!    untouched) renders exactly what it renders in the clean base fleet.
//!
//! YAML is written inline and dedented (like `indoc!`): line 1 is the first line after the opening
//! quote, columns count from the dedented text.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use capstan_layout::{Fleet, Tree, load};
use capstan_templates::diag::{Code, Diagnostic, Severity};

pub const MGMT_DIR: &str = "clusters/mgmt";
pub const OK_DIR: &str = "clusters/mgmt/workload-clusters/ok";
pub const W_DIR: &str = "clusters/mgmt/workload-clusters/w";
/// The management cluster's Cluster.
pub const M: &str = "clusters/mgmt/cluster.yaml";
/// The management cluster's DockerDatacenterConfig.
pub const M_DC: &str = "clusters/mgmt/datacenter.yaml";
/// The healthy sibling.
pub const OK: &str = "clusters/mgmt/workload-clusters/ok/cluster.yaml";
/// The workload under test: its Cluster.
pub const W: &str = "clusters/mgmt/workload-clusters/w/cluster.yaml";
/// Its DockerDatacenterConfig (docker cases).
pub const W_DC: &str = "clusters/mgmt/workload-clusters/w/datacenter.yaml";
/// Its VSphereDatacenterConfig and machine configs (vSphere cases).
pub const W_VS: &str = "clusters/mgmt/workload-clusters/w/vsphere.yaml";

pub const MGMT_CLUSTER: &str = r#"
    apiVersion: anywhere.eks.amazonaws.com/v1alpha1
    kind: Cluster
    metadata:
      name: mgmt
    spec:
      kubernetesVersion: "1.33"
      eksaVersion: v0.26.1
      managementCluster:
        name: mgmt
      datacenterRef:
        kind: DockerDatacenterConfig
        name: mgmt
      controlPlaneConfiguration:
        count: 1
      workerNodeGroupConfigurations:
        - name: md-0
          count: 1
      clusterNetwork:
        pods:
          cidrBlocks: [192.168.0.0/16]
        services:
          cidrBlocks: [10.96.0.0/12]
"#;

pub const MGMT_DATACENTER: &str = r#"
    apiVersion: anywhere.eks.amazonaws.com/v1alpha1
    kind: DockerDatacenterConfig
    metadata:
      name: mgmt
    spec: {}
"#;

pub const OK_CLUSTER: &str = r#"
    apiVersion: anywhere.eks.amazonaws.com/v1alpha1
    kind: Cluster
    metadata:
      name: ok
    spec:
      kubernetesVersion: "1.33"
      eksaVersion: v0.26.1
      managementCluster: {name: mgmt}
      datacenterRef: {kind: DockerDatacenterConfig, name: ok}
      controlPlaneConfiguration: {count: 1}
      workerNodeGroupConfigurations: [{name: md-0, count: 2}]
      clusterNetwork:
        pods: {cidrBlocks: [172.16.0.0/16]}
        services: {cidrBlocks: [10.112.0.0/16]}
    ---
    apiVersion: anywhere.eks.amazonaws.com/v1alpha1
    kind: DockerDatacenterConfig
    metadata: {name: ok}
"#;

/// The docker workload under test, valid. Cases override it with a broken variant; the line
/// numbers of this shape are the ones the cases use (5 `spec:`, 6 kubernetesVersion, ...).
pub const W_CLUSTER: &str = r#"
    apiVersion: anywhere.eks.amazonaws.com/v1alpha1
    kind: Cluster
    metadata:
      name: w
    spec:
      kubernetesVersion: "1.33"
      managementCluster: {name: mgmt}
      datacenterRef: {kind: DockerDatacenterConfig, name: w}
      controlPlaneConfiguration: {count: 1}
      workerNodeGroupConfigurations: [{name: md-0, count: 1}]
      clusterNetwork:
        pods: {cidrBlocks: [172.17.0.0/16]}
        services: {cidrBlocks: [10.113.0.0/16]}
"#;

pub const W_DATACENTER: &str = r#"
    apiVersion: anywhere.eks.amazonaws.com/v1alpha1
    kind: DockerDatacenterConfig
    metadata: {name: w}
"#;

/// The vSphere workload under test, valid (with `W_VSPHERE`).
pub const W_VSPHERE_CLUSTER: &str = r#"
    apiVersion: anywhere.eks.amazonaws.com/v1alpha1
    kind: Cluster
    metadata:
      name: w
    spec:
      kubernetesVersion: "1.33"
      managementCluster: {name: mgmt}
      datacenterRef: {kind: VSphereDatacenterConfig, name: w}
      controlPlaneConfiguration:
        count: 1
        endpoint: {host: 10.20.0.10}
        machineGroupRef: {kind: VSphereMachineConfig, name: w-cp}
      workerNodeGroupConfigurations:
        - name: md-0
          count: 1
          machineGroupRef: {kind: VSphereMachineConfig, name: w-workers}
      clusterNetwork:
        pods: {cidrBlocks: [172.17.0.0/16]}
        services: {cidrBlocks: [10.113.0.0/16]}
"#;

pub const W_VSPHERE: &str = r#"
    apiVersion: anywhere.eks.amazonaws.com/v1alpha1
    kind: VSphereDatacenterConfig
    metadata: {name: w}
    spec: {datacenter: dc1, network: VM Network, server: vcenter.example.internal, insecure: true}
    ---
    apiVersion: anywhere.eks.amazonaws.com/v1alpha1
    kind: VSphereMachineConfig
    metadata: {name: w-cp}
    spec:
      datastore: ds1
      resourcePool: /dc1/host/c1/Resources
      template: ubuntu-2204-kube-v1.33
      osFamily: ubuntu
    ---
    apiVersion: anywhere.eks.amazonaws.com/v1alpha1
    kind: VSphereMachineConfig
    metadata: {name: w-workers}
    spec:
      datastore: ds1
      resourcePool: /dc1/host/c1/Resources
      template: ubuntu-2204-kube-v1.33
      osFamily: ubuntu
"#;

/// Removes the first line when it is empty, the last when it is only spaces, and the common
/// indentation of the rest (tabs count as content, so a case can put a tab where it wants one).
pub fn dedent(text: &str) -> String {
    let mut lines: Vec<&str> = text.split('\n').collect();
    if lines.first().is_some_and(|l| l.trim().is_empty()) {
        lines.remove(0);
    }
    if lines.last().is_some_and(|l| l.chars().all(|c| c == ' ')) {
        lines.pop();
    }
    let indent = lines
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start_matches(' ').len())
        .min()
        .unwrap_or(0);
    let mut out = String::new();
    for l in lines {
        out.push_str(l.get(indent..).unwrap_or(""));
        out.push('\n');
    }
    out
}

/// Who a diagnostic belongs to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Owner {
    /// `Fleet::diagnostics` (no cluster).
    Fleet,
    /// The `ClusterEntry` of this directory.
    Cluster(String),
}

/// One expected diagnostic.
#[derive(Debug, Clone)]
pub struct Expect {
    pub code: Code,
    pub severity: Severity,
    pub file: Option<String>,
    pub line: usize,
    /// None: not checked.
    pub column: Option<usize>,
    pub owner: Owner,
}

impl Expect {
    fn matches(&self, owner: &Owner, d: &Diagnostic) -> bool {
        self.owner == *owner
            && self.code == d.code
            && self.severity == d.severity
            && self.file.as_deref().map(PathBuf::from) == d.file
            && self.line == d.line
            && self.column.is_none_or(|c| c == d.column)
    }
}

impl std::fmt::Display for Expect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sev = if self.severity == Severity::Error {
            "error"
        } else {
            "warning"
        };
        let col = self
            .column
            .map(|c| c.to_string())
            .unwrap_or_else(|| "*".into());
        write!(
            f,
            "{}:{}:{}: {sev}[{}] owner {:?}",
            self.file.as_deref().unwrap_or("<no file>"),
            self.line,
            col,
            self.code,
            self.owner
        )
    }
}

/// A file of the case: bytes, or removed from the base.
#[derive(Debug, Clone)]
enum FileEdit {
    Put(Vec<u8>),
    Remove,
}

/// One bad-input case.
#[derive(Debug, Clone)]
pub struct Case {
    /// The base fleet the case started from.
    base: BTreeMap<String, FileEdit>,
    edits: BTreeMap<String, FileEdit>,
    /// (link path in the repository, target as written).
    symlinks: Vec<(String, String)>,
    /// Files next to (outside) the repository, relative to the temp dir holding it.
    outside: Vec<(String, Vec<u8>)>,
    /// Files written only to disk, with this size (file-too-large).
    big_files: Vec<(String, u64)>,
    on_disk: bool,
    /// Run in a child process with a memory limit and a timeout (inputs that may exhaust memory).
    isolated: bool,
    expected: Vec<Expect>,
    /// Directories whose cluster must not render.
    broken: Vec<String>,
    /// Owner of the expectations added next.
    owner: Owner,
}

fn base_files(vsphere: bool, with_workload: bool) -> BTreeMap<String, FileEdit> {
    let mut files = BTreeMap::new();
    let mut put = |p: &str, t: &str| {
        files.insert(p.to_string(), FileEdit::Put(dedent(t).into_bytes()));
    };
    put(M, MGMT_CLUSTER);
    put(M_DC, MGMT_DATACENTER);
    put(OK, OK_CLUSTER);
    if with_workload {
        if vsphere {
            put(W, W_VSPHERE_CLUSTER);
            put(W_VS, W_VSPHERE);
        } else {
            put(W, W_CLUSTER);
            put(W_DC, W_DATACENTER);
        }
    }
    files
}

impl Case {
    fn new(edits: BTreeMap<String, FileEdit>, target: &str) -> Case {
        Case {
            base: edits.clone(),
            edits,
            symlinks: Vec::new(),
            outside: Vec::new(),
            big_files: Vec::new(),
            on_disk: false,
            isolated: false,
            expected: Vec::new(),
            broken: vec![target.to_string()],
            owner: Owner::Cluster(target.to_string()),
        }
    }

    /// mgmt + ok + a valid docker workload `w`, which the case breaks.
    pub fn workload() -> Case {
        Case::new(base_files(false, true), W_DIR)
    }

    /// mgmt + ok + a valid vSphere workload `w`, which the case breaks.
    pub fn vsphere() -> Case {
        Case::new(base_files(true, true), W_DIR)
    }

    /// mgmt + ok; the case breaks mgmt.
    pub fn management() -> Case {
        Case::new(base_files(false, false), MGMT_DIR)
    }

    /// Sets a file (dedented).
    pub fn file(mut self, path: &str, yaml: &str) -> Case {
        self.edits
            .insert(path.to_string(), FileEdit::Put(dedent(yaml).into_bytes()));
        self
    }

    /// Sets a file to exact bytes.
    pub fn bytes(mut self, path: &str, bytes: impl Into<Vec<u8>>) -> Case {
        self.edits
            .insert(path.to_string(), FileEdit::Put(bytes.into()));
        self
    }

    /// Removes a file of the base fleet.
    pub fn remove(mut self, path: &str) -> Case {
        self.edits.insert(path.to_string(), FileEdit::Remove);
        self
    }

    /// Reads the fleet from a temporary working copy with `Tree::from_dir` instead of in memory.
    pub fn on_disk(mut self) -> Case {
        self.on_disk = true;
        self
    }

    /// Runs the case in a child process (this test binary, filtered to the case) under a memory
    /// limit and a timeout, so input that makes capstan exhaust memory fails this case instead of
    /// killing the whole test run.
    pub fn isolated(mut self) -> Case {
        self.isolated = true;
        self
    }

    /// A symlink in the repository (implies `on_disk`).
    pub fn symlink(mut self, link: &str, target: &str) -> Case {
        self.symlinks.push((link.to_string(), target.to_string()));
        self.on_disk()
    }

    /// A file next to the repository, outside it (implies `on_disk`).
    pub fn outside(mut self, path: &str, yaml: &str) -> Case {
        self.outside
            .push((path.to_string(), dedent(yaml).into_bytes()));
        self.on_disk()
    }

    /// A file of this many bytes (valid YAML comments), written to disk (implies `on_disk`).
    pub fn big_file(mut self, path: &str, size: u64) -> Case {
        self.big_files.push((path.to_string(), size));
        self.on_disk()
    }

    /// The clusters (directories) that must not render; replaces the default (the target).
    pub fn broken(mut self, dirs: &[&str]) -> Case {
        self.broken = dirs.iter().map(|d| d.to_string()).collect();
        self
    }

    /// Every cluster still renders (warnings, fleet-level problems).
    pub fn renders(self) -> Case {
        self.broken(&[])
    }

    /// The expectations added next belong to this cluster directory.
    pub fn in_cluster(mut self, dir: &str) -> Case {
        self.owner = Owner::Cluster(dir.to_string());
        self
    }

    /// The expectations added next belong to the fleet (no cluster).
    pub fn in_fleet(mut self) -> Case {
        self.owner = Owner::Fleet;
        self
    }

    fn expect(
        mut self,
        code: Code,
        severity: Severity,
        file: Option<&str>,
        line: usize,
        column: Option<usize>,
    ) -> Case {
        let owner = self.owner.clone();
        self.expected.push(Expect {
            code,
            severity,
            file: file.map(str::to_string),
            line,
            column,
            owner,
        });
        self
    }

    /// An error at file:line:column.
    pub fn err(self, code: Code, file: &str, line: usize, column: usize) -> Case {
        self.expect(code, Severity::Error, Some(file), line, Some(column))
    }

    /// An error about a whole file (line 0).
    pub fn err_file(self, code: Code, file: &str) -> Case {
        self.expect(code, Severity::Error, Some(file), 0, Some(0))
    }

    /// An error at file:line, column not checked (YAML parser errors, byte offsets).
    pub fn err_line(self, code: Code, file: &str, line: usize) -> Case {
        self.expect(code, Severity::Error, Some(file), line, None)
    }

    /// A warning at file:line:column.
    pub fn warn(self, code: Code, file: &str, line: usize, column: usize) -> Case {
        self.expect(code, Severity::Warning, Some(file), line, Some(column))
    }

    /// Every code this case expects.
    pub fn codes(&self) -> Vec<Code> {
        self.expected.iter().map(|e| e.code).collect()
    }

    /// The expectations.
    pub fn expectations(&self) -> &[Expect] {
        &self.expected
    }

    /// The in-memory tree of the case (disk-only features excluded).
    fn memory_tree(&self) -> Tree {
        let mut tree = Tree::new();
        for (p, e) in &self.edits {
            if let FileEdit::Put(b) = e {
                tree.insert(p, b.clone());
            }
        }
        tree
    }

    /// Builds the fleet's tree (and keeps the temp dir alive while it is read).
    pub fn tree(&self) -> Tree {
        if !self.on_disk {
            return self.memory_tree();
        }
        let tmp = tempfile::tempdir().expect("temp dir");
        let repo = tmp.path().join("repo");
        fs::create_dir_all(&repo).unwrap();
        for (p, e) in &self.edits {
            if let FileEdit::Put(b) = e {
                let path = repo.join(p);
                fs::create_dir_all(path.parent().unwrap()).unwrap();
                fs::write(&path, b).unwrap();
            }
        }
        for (p, b) in &self.outside {
            let path = tmp.path().join(p);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(&path, b).unwrap();
        }
        for (p, size) in &self.big_files {
            let path = repo.join(p);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            let line = "# padding padding padding padding padding padding padding padding\n";
            let mut text = String::with_capacity(*size as usize);
            while (text.len() as u64) + (line.len() as u64) <= *size {
                text.push_str(line);
            }
            while (text.len() as u64) < *size {
                text.push('#');
            }
            fs::write(&path, text).unwrap();
        }
        for (link, target) in &self.symlinks {
            let path = repo.join(link);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::os::unix::fs::symlink(target, &path).unwrap();
        }
        Tree::from_dir(&repo).expect("Tree::from_dir reads the temp repository")
    }

    /// The files this case adds, changes or removes relative to its base fleet.
    fn changed_files(&self) -> Vec<&str> {
        let changed = self
            .edits
            .iter()
            .filter(|(p, e)| match (self.base.get(*p), e) {
                (Some(FileEdit::Put(a)), FileEdit::Put(b)) => a != b,
                _ => true,
            });
        changed
            .map(|(p, _)| p.as_str())
            .chain(self.symlinks.iter().map(|(l, _)| l.as_str()))
            .chain(self.big_files.iter().map(|(l, _)| l.as_str()))
            .collect()
    }

    /// The cluster directories this case changes (their output may legitimately change).
    fn touched_dirs(&self) -> Vec<String> {
        self.changed_files()
            .into_iter()
            .map(cluster_dir_of)
            .collect()
    }

    fn file_text(&self, path: &str) -> Option<String> {
        match self.edits.get(path) {
            Some(FileEdit::Put(b)) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        }
    }
}

/// The clean base fleet, loaded once: the reference output of the untouched clusters.
pub fn base_fleet() -> &'static Fleet {
    static BASE: OnceLock<Fleet> = OnceLock::new();
    BASE.get_or_init(|| load(&Case::workload().memory_tree()))
}

/// The clean vSphere base fleet.
pub fn base_vsphere_fleet() -> &'static Fleet {
    static BASE: OnceLock<Fleet> = OnceLock::new();
    BASE.get_or_init(|| load(&Case::vsphere().memory_tree()))
}

fn objects_of<'a>(fleet: &'a Fleet, dir: &str) -> Option<&'a capstan_layout::Objects> {
    fleet
        .clusters
        .iter()
        .find(|c| c.dir == Path::new(dir))
        .and_then(|c| c.objects.as_ref())
}

/// The cluster directory a repository path belongs to.
pub fn cluster_dir_of(path: &str) -> String {
    let parts: Vec<&str> = path.split('/').collect();
    match parts.as_slice() {
        ["clusters", m, "workload-clusters", w, _, ..] => {
            format!("clusters/{m}/workload-clusters/{w}")
        }
        ["clusters", m, _, ..] => format!("clusters/{m}"),
        _ => path.to_string(),
    }
}

fn numbered(text: &str) -> String {
    text.lines()
        .enumerate()
        .map(|(i, l)| format!("{:>4} | {l}\n", i + 1))
        .collect()
}

/// Set in the child process of an isolated case.
const CHILD_ENV: &str = "CAPSTAN_BAD_INPUT_CHILD";
/// Address-space limit of an isolated case, KiB.
const CHILD_MEMORY_KIB: u64 = 2 * 1024 * 1024;
/// Time limit of an isolated case.
const CHILD_TIMEOUT: Duration = Duration::from_secs(120);

fn run_isolated(name: &str) {
    let exe = std::env::current_exe().expect("test binary path");
    let tmp = tempfile::tempdir().unwrap();
    let out_path = tmp.path().join("out");
    let out = fs::File::create(&out_path).unwrap();
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -v {CHILD_MEMORY_KIB}; exec \"$0\" \"$@\""))
        .arg(&exe)
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, "1")
        .env("RUST_BACKTRACE", "0")
        .stdout(Stdio::from(out.try_clone().unwrap()))
        .stderr(Stdio::from(out))
        .spawn()
        .expect("spawning the isolated case");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > CHILD_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let output = fs::read_to_string(&out_path).unwrap_or_default();
    let tail: String = output
        .lines()
        .rev()
        .take(40)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect::<Vec<_>>()
        .join("\n");
    match status {
        Some(s) if s.success() && output.contains("1 passed") => {}
        Some(s) => panic!(
            "case `{name}` failed in its child process ({s}; {} MiB address space, {:?}):\n{tail}",
            CHILD_MEMORY_KIB / 1024,
            started.elapsed()
        ),
        None => panic!(
            "case `{name}` did not finish within {CHILD_TIMEOUT:?} (capstan hangs on this input):\n{tail}"
        ),
    }
}

/// Runs a case and panics with a full report when any check fails.
pub fn run(name: &str, case: &Case) {
    if case.isolated && std::env::var_os(CHILD_ENV).is_none() {
        return run_isolated(name);
    }
    let tree = case.tree();
    let fleet = load(&tree);
    let mut problems: Vec<String> = Vec::new();

    // 1. Exactly the expected diagnostics, each with its owner.
    let mut actual: Vec<(Owner, &Diagnostic)> = fleet
        .diagnostics
        .iter()
        .map(|d| (Owner::Fleet, d))
        .collect();
    for c in &fleet.clusters {
        let owner = Owner::Cluster(c.dir.to_string_lossy().into_owned());
        actual.extend(c.diagnostics.iter().map(|d| (owner.clone(), d)));
    }
    let mut unmatched: Vec<Option<(Owner, &Diagnostic)>> =
        actual.iter().cloned().map(Some).collect();
    for e in &case.expected {
        match unmatched
            .iter_mut()
            .find(|a| a.as_ref().is_some_and(|(o, d)| e.matches(o, d)))
        {
            Some(slot) => *slot = None,
            None => problems.push(format!("missing diagnostic: {e}")),
        }
    }
    for (o, d) in unmatched.into_iter().flatten() {
        problems.push(format!(
            "unexpected diagnostic (owner {o:?}): {d} [line {} column {}]",
            d.line, d.column
        ));
    }
    // A diagnostic of a cluster names that cluster.
    for c in &fleet.clusters {
        for d in &c.diagnostics {
            if d.cluster.as_deref() != Some(c.name.as_str()) {
                problems.push(format!(
                    "diagnostic of cluster `{}` names cluster {:?}: {d}",
                    c.name, d.cluster
                ));
            }
        }
    }

    // The corpus's own hygiene: the lines marked `# <-` in the case's files are exactly the
    // lines the expectations point at.
    let changed = case.changed_files();
    let mut marked: BTreeSet<(String, usize)> = BTreeSet::new();
    for (p, e) in case
        .edits
        .iter()
        .filter(|(p, _)| changed.contains(&p.as_str()))
    {
        if let FileEdit::Put(b) = e {
            for (i, l) in String::from_utf8_lossy(b).lines().enumerate() {
                if l.contains("# <-") {
                    marked.insert((p.clone(), i + 1));
                }
            }
        }
    }
    let pointed: BTreeSet<(String, usize)> = case
        .expected
        .iter()
        .filter(|e| e.line > 0)
        .filter_map(|e| e.file.clone().map(|f| (f, e.line)))
        .filter(|(f, _)| changed.contains(&f.as_str()))
        .collect();
    for m in marked.symmetric_difference(&pointed) {
        problems.push(format!(
            "corpus hygiene: {}:{} is marked `# <-` xor expected",
            m.0, m.1
        ));
    }

    // 2. Broken clusters are not rendered.
    for dir in &case.broken {
        match fleet.clusters.iter().find(|c| c.dir == Path::new(dir)) {
            None => problems.push(format!("cluster directory {dir} is missing from the fleet")),
            Some(c) => {
                if c.objects.is_some() || c.is_valid() {
                    problems.push(format!(
                        "broken cluster {dir} was rendered (valid: {})",
                        c.is_valid()
                    ));
                }
                if !c.diagnostics.iter().any(Diagnostic::is_error) {
                    problems.push(format!("broken cluster {dir} has no error of its own"));
                }
            }
        }
    }

    // 3. Everything else validates and renders; untouched clusters render as in the base fleet.
    let touched = case.touched_dirs();
    let base = base_fleet();
    for c in &fleet.clusters {
        let dir = c.dir.to_string_lossy().into_owned();
        if case.broken.contains(&dir) {
            continue;
        }
        if !c.is_valid() || c.objects.is_none() {
            problems.push(format!("healthy cluster {dir} does not validate/render"));
            continue;
        }
        let untouched = !touched.contains(&dir);
        if untouched
            && (dir == OK_DIR || dir == MGMT_DIR)
            && objects_of(base, &dir) != c.objects.as_ref()
        {
            problems.push(format!(
                "untouched cluster {dir} renders differently than in the clean base fleet"
            ));
        }
    }
    if !case.broken.iter().any(|d| d == OK_DIR) {
        match fleet.clusters.iter().find(|c| c.dir == Path::new(OK_DIR)) {
            Some(c) if c.is_valid() => {}
            _ => problems.push("the healthy sibling `ok` is missing or invalid".into()),
        }
    }

    if !problems.is_empty() {
        let mut report = format!("case `{name}` failed:\n");
        for p in &problems {
            let _ = writeln!(report, "  - {p}");
        }
        let _ = writeln!(report, "all diagnostics:");
        for (o, d) in &actual {
            let _ = writeln!(
                report,
                "  {d}   [line {} column {}; owner {o:?}]",
                d.line, d.column
            );
        }
        let mut files: Vec<&str> = case
            .expected
            .iter()
            .filter_map(|e| e.file.as_deref())
            .collect();
        files.extend(
            actual
                .iter()
                .filter_map(|(_, d)| d.file.as_deref().and_then(Path::to_str)),
        );
        files.sort();
        files.dedup();
        for f in files {
            if let Some(text) = case.file_text(f) {
                let _ = writeln!(report, "--- {f}\n{}", numbered(&text));
            }
        }
        panic!("{report}");
    }
}
