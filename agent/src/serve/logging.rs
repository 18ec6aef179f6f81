//! Logging setup for the long-running agent.
//!
//! Logs go to stderr, never stdout: stdout carries command output (`capstan dev up` prints a
//! kubeconfig path that scripts capture with `$(...)`). JSON is for log pipelines in the cluster,
//! text for a terminal. The filter is, first match wins: the explicit `filter` argument (a CLI
//! flag), `RUST_LOG`, then `info`.
//!
//! Installing is idempotent-safe: tests and embedding programs may have installed a subscriber
//! already, in which case the existing one is kept and `Ok(false)` returned rather than panicking.

use tracing_subscriber::EnvFilter;

/// Why logging could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum LoggingError {
    /// The filter directive does not parse.
    #[error("invalid log filter {filter:?}: {message}")]
    Filter {
        /// The directive given.
        filter: String,
        /// What was wrong with it.
        message: String,
    },
}

/// The filter used when neither the argument nor `RUST_LOG` says otherwise.
pub const DEFAULT_FILTER: &str = "info";

/// Installs the global tracing subscriber: JSON lines when `json`, else human-readable text.
/// `Ok(true)` if installed, `Ok(false)` if a subscriber was already installed (left in place).
pub fn init_tracing(json: bool, filter: Option<&str>) -> Result<bool, LoggingError> {
    let filter = build_filter(filter, std::env::var("RUST_LOG").ok().as_deref())?;
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter);
    let installed = if json {
        builder.json().with_current_span(true).try_init().is_ok()
    } else {
        builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .try_init()
            .is_ok()
    };
    Ok(installed)
}

/// The filter from the explicit directive, else the environment's, else [`DEFAULT_FILTER`].
/// An invalid explicit directive is an error; an invalid `RUST_LOG` too (silently ignoring it would
/// leave someone wondering why their debug logs never appear).
fn build_filter(explicit: Option<&str>, env: Option<&str>) -> Result<EnvFilter, LoggingError> {
    let directive = explicit
        .or(env.filter(|s| !s.trim().is_empty()))
        .unwrap_or(DEFAULT_FILTER);
    EnvFilter::try_new(directive).map_err(|e| LoggingError::Filter {
        filter: directive.to_owned(),
        message: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_precedence_and_errors() {
        assert_eq!(
            build_filter(Some("debug"), Some("warn"))
                .expect("ok")
                .to_string(),
            "debug"
        );
        assert_eq!(
            build_filter(None, Some("warn")).expect("ok").to_string(),
            "warn"
        );
        assert_eq!(
            build_filter(None, Some("  ")).expect("ok").to_string(),
            "info"
        );
        assert_eq!(build_filter(None, None).expect("ok").to_string(), "info");
        assert!(matches!(
            build_filter(Some("capstan=notalevel"), None),
            Err(LoggingError::Filter { .. })
        ));
    }
}
