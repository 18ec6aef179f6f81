//! Shared helpers of capstan's end-to-end tests.

pub mod oracle;
pub mod sops;

pub use capstan_harness::objects::resource;
pub use capstan_harness::run::example_fleet;
use std::path::PathBuf;

pub mod capi;

/// The repository root.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

/// Prints the log of an agent a test runs in its own process (`capstan::daemon::run`) through
/// the test harness's capture: shown with a failing test's output, hidden otherwise. Filtered by
/// `CAPSTAN_TEST_LOG` (an `EnvFilter`; `capstan=info` unless set). Once per test binary; later
/// calls do nothing.
pub fn agent_logs() {
    let filter = std::env::var("CAPSTAN_TEST_LOG").unwrap_or_else(|_| "capstan=info".into());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_test_writer()
        .try_init();
}

/// A fleet repository in a temp dir, written by capstan's own scaffolder (as `capstan init` and
/// `capstan new cluster` would), that a test edits revision by revision.
pub struct FleetDir {
    _tmp: tempfile::TempDir,
    /// The repository root.
    pub root: PathBuf,
    /// The management cluster's name.
    pub mgmt: String,
    tree: capstan_layout::Tree,
}

impl FleetDir {
    /// A repository holding the management cluster `req` asks for (`req.management` unset).
    pub fn new(req: capstan_layout::scaffold::ClusterRequest) -> FleetDir {
        let tmp = tempfile::tempdir().expect("temp dir");
        let mut dir = FleetDir {
            root: tmp.path().to_path_buf(),
            mgmt: req.name.clone(),
            _tmp: tmp,
            tree: capstan_layout::Tree::new(),
        };
        dir.add(req);
        dir
    }

    /// Scaffolds one more cluster and writes its files.
    pub fn add(&mut self, req: capstan_layout::scaffold::ClusterRequest) {
        for (p, t) in capstan_layout::scaffold::plan(&self.tree, &req)
            .unwrap_or_else(|e| panic!("scaffolding {}: {e}", req.name))
            .files
        {
            let path = self.root.join(&p);
            std::fs::create_dir_all(path.parent().expect("files are in directories")).unwrap();
            std::fs::write(&path, &t).unwrap();
            self.tree.insert(p, t);
        }
    }

    /// A cluster's directory (the management cluster's, or a workload cluster's).
    pub fn dir(&self, cluster: &str) -> PathBuf {
        let mgmt = self.root.join("clusters").join(&self.mgmt);
        if cluster == self.mgmt {
            mgmt
        } else {
            mgmt.join("workload-clusters").join(cluster)
        }
    }

    /// Replaces the first `from` with `to` in a cluster's `cluster.yaml`.
    pub fn edit(&self, cluster: &str, from: &str, to: &str) {
        let path = self.dir(cluster).join("cluster.yaml");
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.contains(from),
            "{from:?} not in {}:\n{text}",
            path.display()
        );
        std::fs::write(&path, text.replacen(from, to, 1)).unwrap();
    }

    /// The fleet as it is on disk now.
    pub fn fleet(&self) -> capstan_layout::Fleet {
        capstan_layout::load(&capstan_layout::Tree::from_dir(&self.root).unwrap())
    }
}

/// The outcome of `cluster` in a reconcile pass's outcome; panics naming the clusters it has
/// when it has none for `cluster`.
pub fn cluster_outcome<'a>(
    o: &'a capstan::reconcile::Outcome,
    cluster: &str,
) -> &'a capstan::reconcile::ClusterOutcome {
    o.clusters
        .iter()
        .find(|c| c.name == cluster)
        .unwrap_or_else(|| {
            panic!(
                "no outcome for {cluster}: {:?}",
                o.clusters.iter().map(|c| &c.name).collect::<Vec<_>>()
            )
        })
}
