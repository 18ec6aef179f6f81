//! One module per command family; each returns the process exit code.

mod offline;

use std::process::ExitCode;

use crate::cli::{Cli, Command, NewCommand};

/// Runs a parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Validate { repo, output } => offline::validate(&repo, output),
        Command::Render { repo, cluster, output_dir } => offline::render(&repo, cluster.as_deref(), output_dir.as_deref()),
        Command::Init(args) => offline::init(args),
        Command::New { what: NewCommand::Cluster(args) } => offline::new_cluster(args),
    }
}
