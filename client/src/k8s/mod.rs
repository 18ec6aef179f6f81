//! Talking to a management cluster: connection (kubeconfig and context as kubectl does it),
//! discovery (any group/version/kind to its resource and scope, from the server, no built-in
//! table), and server-side apply.

pub mod apply;
pub mod client;
pub mod discovery;
pub mod fence;
pub mod identity;
pub mod paged;
pub mod refusal;
pub mod tenancy;

pub use apply::{ApplyError, FIELD_MANAGER, dry_run_all};
pub use client::{ClientError, Connection, RequestHook, Verb, connect, connect_with, verb_of};
pub use discovery::{DiscoveryError, Resolver, SERVED_WAIT, gvk_of, wait_served};
pub use fence::{Fence, Fenced};
pub use refusal::{Refusal, Refused};
