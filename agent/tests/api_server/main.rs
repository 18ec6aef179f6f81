//! The agent's integration tests against a real API server: the real binary run as
//! `capstan run` (daemon, leader election, pull-request plans), `bootstrap`, `install`,
//! `kubeconfig`, `backup` and `restore`, and the commands that must refuse what is not a fleet.
//!
//! One test binary: the tests share one control plane (`capstan_harness::shared()`), each in
//! its own namespace, under names of its own, counting its own agent's requests by credential
//! or ServiceAccount; the tests that remove what the others rely on (`capstan uninstall`, CRDs
//! taken away) start private control planes. Each former test file is a module and its tests
//! keep their names under it (`daemon::...`).

#[path = "../source_support/mod.rs"]
mod source_support;

mod backup;
mod bootstrap;
mod components;
mod crd_races;
mod daemon;
mod dashboard;
mod dashboard_access;
mod dashboard_local;
mod fence;
mod kubeconfig;
mod leader;
mod moving;
mod not_a_fleet;
mod notifications;
mod pr_plans;
mod profiles;
mod sealed;
mod signed;
