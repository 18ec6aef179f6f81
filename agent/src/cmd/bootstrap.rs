//! `capstan bootstrap`.

use std::process::ExitCode;

use crate::cli::BootstrapArgs;

/// `capstan bootstrap`.
pub fn bootstrap(_args: BootstrapArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("not yet")
}
