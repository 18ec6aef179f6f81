//! Everything that makes the agent a long-running service rather than a one-shot command.
//!
//! Reasons to reconcile (a poll timer, a GitHub push, a local edit, a manual request) all feed one
//! coalescing [`trigger`] channel, so bursts become single reconciles. The [`server`] exposes the
//! GitHub [`webhook`], probes and [`metrics`]; [`watch`] turns working-copy edits into triggers;
//! [`logging`] sets up tracing.

mod deliveries;
mod intake;
pub mod logging;
pub use crate::metrics;
pub mod server;
pub mod state;
pub use crate::trigger;
pub mod watch;
pub mod webhook;

pub use logging::{LoggingError, init_tracing};
pub use metrics::{
    Cause, GitHubResult, Metrics, MetricsError, ObjectAction, PipelineStep, ReconcileResult, Verb,
    WebhookOutcome,
};
pub use server::{ServerError, bind, ops_router, router, serve, webhook_router};
pub use state::{ReadyFlag, ServerConfig, ServerState};
pub use trigger::{
    Trigger, TriggerError, TriggerReceiver, TriggerSender, channel, newest_revision,
};
pub use watch::{LocalWatcher, WatchError, watch_local, watch_local_with};
pub use webhook::WebhookError;
