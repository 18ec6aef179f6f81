//! Failpoints: named places where a test stops the agent, so that it can kill the process at
//! exactly that step instead of racing it (`agent/tests/self_upgrade_kills.rs` SIGKILLs replicas
//! at each step of a management cluster upgrading itself and lets the other replica take over).
//!
//! `CAPSTAN_FAILPOINTS=<name>[,<name>…]` arms them: a task that reaches an armed point logs
//! `failpoint reached` with its name and then waits forever. Only that task stops; the rest of
//! the process (the Lease renewal, probes, other clusters' passes) goes on, as a leader stuck
//! in the middle of a step would, until the test kills it.
//!
//! Compiled into debug builds only (what `cargo test` builds); in a release build [`stop_here`]
//! is empty and the variable means nothing. Not a cargo feature: one the tests enabled would be
//! unified into every `--workspace` build and would rebuild this crate and everything above it
//! whenever a command without it ran in between.

/// The environment variable naming the armed failpoints, comma-separated.
pub const ENV: &str = "CAPSTAN_FAILPOINTS";

/// Stops the calling task here for good when the failpoint `name` is armed.
pub async fn stop_here(name: &str) {
    #[cfg(debug_assertions)]
    if armed(std::env::var(ENV).ok().as_deref(), name) {
        tracing::warn!(failpoint = name, "failpoint reached: waiting to be killed");
        std::future::pending::<()>().await;
    }
    #[cfg(not(debug_assertions))]
    let _ = name;
}

/// Whether `list` (the variable's value) names `name`.
#[cfg(debug_assertions)]
fn armed(list: Option<&str>, name: &str) -> bool {
    list.is_some_and(|l| l.split(',').any(|n| n.trim() == name))
}

#[cfg(all(test, debug_assertions))]
mod tests {
    use super::*;

    #[test]
    fn only_a_named_point_is_armed() {
        assert!(armed(
            Some("a,self-upgrade-backed-up"),
            "self-upgrade-backed-up"
        ));
        assert!(armed(Some(" b "), "b"));
        assert!(!armed(
            Some("self-upgrade-backed-up-2"),
            "self-upgrade-backed-up"
        ));
        assert!(!armed(Some(""), "a"));
        assert!(!armed(None, "a"));
    }
}
