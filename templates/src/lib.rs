//! capstan's pure core: the EKS Anywhere spec model, release data and the Cluster API renderer.
//!
//! ```text
//!   YAML text ──yaml──▶ Document (value + positions)
//!                          │ spec::parse_cluster
//!                          ▼
//!                      spec::Cluster ──release::resolve──▶ Release
//!                          │                                 │
//!                          └──────────render::render─────────┘
//!                                          ▼
//!                               ordered Kubernetes objects
//! ```
//!
//! No I/O, no network, no async: everything here is a function of its inputs, so it can be
//! tested, fuzzed and benchmarked on its own, and the agent can trust that rendering the same
//! revision twice gives the same bytes. Templates and release data are files under this crate's
//! directory, embedded at build time.

mod block_yaml;
pub mod diag;
pub mod identity;
pub mod json_text;
pub mod provider;
pub mod rehearsal;
pub mod release;
pub mod render;
pub mod scaffold;
pub mod scalar;
pub mod spec;
pub mod yaml;

pub use diag::{Code, Diagnostic, Severity};
pub use json_text::JsonText;
pub use release::{Release, ReleaseManifest, SemVer};
pub use render::{RenderError, render};
pub use spec::{Cluster, KubeVersion, Provider};
