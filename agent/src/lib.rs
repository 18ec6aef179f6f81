//! `capstan`: the agent and its command line. It gathers what the decisions need and performs
//! them; the decisions are `capstan-plan`'s (pure), talking to the management cluster is
//! `capstan-client`'s, the repository model is `capstan-layout`'s, the specs and rendering
//! `capstan-templates`'. Cargo keeps those from reaching up; inside this crate the modules are
//! layered too: each line names a module and the modules of this crate it uses, and a module
//! uses only modules on lines below its own (the test `tests/structure` reads this drawing and
//! fails when the code and it differ):
//!
//! ```text
//! main       → cli, cmd
//! cmd        → backup, cli, components, daemon, dashboard, errors, failpoint, install, leader, mover, notify, reconcile, rehearse, serve
//! daemon     → backup, cli, dashboard, github, leader, notify, reconcile, schedule, serve, trigger
//! cli        → backup, github, reconcile
//! serve      → github, metrics, trigger
//! github     → dashboard, errors, leader, metrics, reconcile, schedule
//! mover      → backup, failpoint, install
//! components → install
//! install    → backup, reconcile
//! rehearse   → backup, reconcile
//! notify     → metrics
//! leader     → trigger
//! metrics    →
//! reconcile  → backup, failpoint, schedule
//! dashboard  →
//! backup     →
//! schedule   →
//! trigger    →
//! errors     →
//! failpoint  →
//! ```
//!
//! Below them all: capstan-client (`k8s`, `live`, `status`, `write`) ─ capstan-plan ─
//! capstan-layout ─ capstan-templates, and beside the client capstan-source (the Git source:
//! gix, signature verification; it uses nothing of the agent's, only the layout's model).
//!
//! `k8s`, `live`, `status`, `write`, `source`, `plan` and `health` are re-exported from the
//! crates below under their old names. The binary (`main.rs`) only parses the command line and calls in here.

pub mod backup;
pub mod cli;
pub mod cmd;
pub mod components;
pub mod daemon;
pub mod dashboard;
pub mod errors;
pub mod failpoint;
pub mod github;
pub mod install;
pub mod leader;
pub mod metrics;
pub mod mover;
pub mod notify;
pub use capstan_client::{k8s, live, status, write};
pub use capstan_plan as plan;
pub use capstan_plan::health;
pub mod reconcile;
pub mod rehearse;
pub mod schedule;
pub mod serve;
pub use capstan_source as source;
pub mod trigger;
