//! The fleet repository model of capstan: read a tree into typed clusters, validate, scaffold.
//!
//! ```text
//!   working copy / git commit ──Tree──▶ fleet::load ──▶ Fleet { clusters: [ClusterEntry] }
//!                     fleet.yaml ──config──▶ release data (embedded, repository or fetched)
//!                                         │  per cluster: parse, validate, resolve release, render
//!                                         │  across clusters: names, CIDRs, tenancy, collisions
//!   capstan new cluster ──scaffold──▶ files added to a Tree, validated, then written
//! ```
//!
//! Pure: no network, no async. The only disk access is [`tree::Tree::from_dir`] and the final
//! write of the scaffolder; validation itself works on an in-memory tree, so the agent can validate
//! a Git revision without checking it out.

pub mod config;
pub mod fields;
pub mod fleet;
pub mod gotemplate;
pub mod hardware;
pub mod intent;
pub mod objects;
pub mod rehearsal;
pub mod releases;
pub mod scaffold;
pub mod sops;
pub mod step;
pub mod tenancy;
pub mod tree;

pub use config::FleetConfig;
pub use fleet::addons;
pub use fleet::{ClusterEntry, Fleet, RenderCache, Role, load, load_cached, load_fetched};
pub use objects::{Objects, Rendered};
pub use releases::Fetched;
pub use tree::Tree;
