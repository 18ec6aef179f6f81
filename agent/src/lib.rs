//! The `capstan` agent: CLI, Kubernetes client, and (as they land) the Git source, plan, apply,
//! prune and status stages. The binary (`main.rs`) only parses the command line and calls in here.

pub mod backup;
pub mod cli;
pub mod cmd;
pub mod daemon;
pub mod github;
pub mod install;
pub mod leader;
pub use capstan_client::{k8s, live, status};
pub use capstan_plan as plan;
pub use capstan_plan::health;
pub mod reconcile;
pub mod schedule;
pub mod serve;
pub mod source;
