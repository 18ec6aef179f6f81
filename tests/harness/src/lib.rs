//! `capstan-harness`: a real Kubernetes management-cluster API for capstan's tests.
//!
//! It runs an actual `kube-apiserver` + `etcd` (as controller-runtime's envtest does, no
//! nodes) with the upstream Cluster API, CAPD, CAPV, CAAPH, etcdadm and EKS Anywhere CRDs
//! installed, so tests exercise real server-side apply, strict field validation, CRD schemas
//! and discovery instead of mocks. On request ([`StartOptions::controllers`],
//! [`shared_with_controllers`]) the real controllers run too: kube-controller-manager's garbage
//! collector and namespace controllers, and the Cluster API managers with their admission and
//! conversion webhooks, CAPD's in-memory backend standing in for machines
//! ([`controllers`]).
//!
//! Everything comes from Go modules pinned in `tests/control-plane/` (go.mod + go.sum,
//! versions summarised in `tests/control-plane/versions.env`):
//! * [`ensure_eksa_oracle`] builds EKS Anywhere's own renderer (`tests/eksa-oracle`), the oracle
//!   of the differential render test, the same way;
//! * [`ensure_binaries`] builds the binaries once into
//!   `${CAPSTAN_CACHE_DIR:-~/.cache/capstan}/control-plane/<key>/bin` (minutes, cold);
//! * [`crd_files`] locates the CRD YAMLs in the Go module cache (never copied here);
//! * [`ControlPlane::start`] starts a private control plane (stopped on drop), and
//!   [`shared`] one per test binary; [`TestNamespace`] isolates tests;
//! * [`ControlPlane::start_persistent`] / [`ControlPlane::stop_persistent`] back
//!   `capstan dev up` / `capstan dev down`;
//! * [`AuditLog`] lets tests count the write requests the API server received.
//!
//! Requirements: `go` (>= the `go` lines of the wrapper modules; `CAPSTAN_GO` overrides
//! the binary) and a reachable Go module proxy on first use; Linux (`/proc` is used to
//! identify processes).
//!
//! ```no_run
//! # async fn t() {
//! let cp = capstan_harness::shared().await;
//! let ns = cp.test_namespace("my-test").await.unwrap();
//! let client = cp.client();
//! let mark = cp.audit().mark();
//! // ... run the code under test against `client` / `cp.kubeconfig_path()` ...
//! cp.audit().sync(&cp.client(), std::time::Duration::from_secs(5)).await.unwrap();
//! let writes = cp.audit().count_writes_since(mark, |e| e.namespace() == Some(ns.name())).unwrap();
//! # let _ = (client, writes);
//! # }
//! ```

pub mod audit;
pub mod binaries;
pub mod browser;
mod capstan_bin;
pub mod certs;
pub mod components;
pub mod control_plane;
pub mod crds;
pub mod flux;
pub mod metrics;
pub mod objects;
pub mod persistent;
pub mod ports;
pub mod process;
pub mod run;
pub mod service_account;
pub mod shared;
pub mod token_controller;
pub mod versions;
pub mod workload;

pub use audit::{AuditEvent, AuditLog, AuditMark};
pub use binaries::{
    Binaries, BinariesError, ControllerBinaries, ensure_actionlint, ensure_binaries,
    ensure_controllers, ensure_eksa_oracle, ensure_gotemplate_oracle,
};
pub use capstan_bin::capstan_bin;
pub use control_plane::controllers::{self, Controllers, LogsOnFailure};
pub use control_plane::{
    CONTEXT_NAME, ControlPlane, Endpoints, Error, Pids, StartOptions, StartTimings,
};
pub use crds::{CrdFile, FIELD_MANAGER, crd_files, install_crds};
pub use flux::{FluxBinaries, ensure_flux};
pub use persistent::{PersistentError, PersistentState};
pub use process::ProcessId;
pub use shared::{
    TestNamespace, shared, shared_if_started, shared_if_started_with_controllers,
    shared_with_controllers,
};
pub use token_controller::TokenController;
pub use versions::{Versions, versions};

/// Selects rustls' ring crypto provider for the process, once.
///
/// Several crates of the workspace enable different rustls providers (kube uses ring, gix's
/// HTTP transport brings aws-lc-rs); with both compiled in, rustls cannot pick one by itself and
/// panics on the first TLS connection. Every client built here calls this first.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
