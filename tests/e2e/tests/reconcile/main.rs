//! Reconciles against a real API server with the upstream CRDs (no controllers): the agent's
//! scenarios, the hostile-tenant corpus, strict server-side dry runs of everything capstan
//! renders, and the agent's RBAC shown sufficient and minimal.
//!
//! One test binary. The tests share one control plane (`capstan_harness::shared()`), each in
//! namespaces and under cluster names of its own, counting its own agent's writes (credential
//! ids, field managers, its namespaces); the RBAC tests change what is one per API server (the
//! fleet identities' roles, the tenancy policy) and use a control plane of their own. Each
//! former test file is a module and its tests keep their names under it (`agent::...`).

mod addons;
mod agent;
mod aws_iam;
mod backup;
mod hostile_tenant;
mod known_fields;
mod packages;
mod rbac;
mod reference_table;
mod sealed;
mod server_dry_run;
