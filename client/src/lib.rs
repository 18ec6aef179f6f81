//! `capstan-client`: talking to a management cluster — the connection (kubeconfig and
//! context as kubectl does it), discovery, server-side apply, the fleet identities writes are
//! made as ([`k8s::identity`]), the live state read by lists and watches ([`live`]) and the
//! status records read and written ([`status`]). The decisions it feeds are `capstan-plan`'s;
//! the agent (`capstan`) drives both.
//!
//! ```text
//! capstan-templates ◀── capstan-layout ◀── capstan-plan ◀── capstan-client ◀── capstan
//! ```

pub mod k8s;
pub mod live;
pub mod status;
pub mod write;

pub use capstan_plan as plan;
pub use capstan_plan::health;

/// Selects rustls' ring crypto provider for the process, once: several crates of the
/// workspace enable different rustls providers (kube uses ring, gix's HTTP transport brings
/// aws-lc-rs), and with both compiled in rustls cannot pick one by itself and panics on the
/// first TLS connection. Every client built here calls it first.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
