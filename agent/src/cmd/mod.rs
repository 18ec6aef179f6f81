//! One module per command family; each returns the process exit code.

mod dev;
mod intent;
mod offline;
mod online;

use std::process::ExitCode;

use crate::cli::{Cli, Command, NewCommand};

/// Runs a parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Validate {
            repo,
            output,
            server_dry_run,
            kube,
        } => offline::validate(&repo, output, server_dry_run.then_some(&kube)),
        Command::Render {
            repo,
            cluster,
            output_dir,
        } => offline::render(&repo, cluster.as_deref(), output_dir.as_deref()),
        Command::Init(args) => offline::init(args),
        Command::New {
            what: NewCommand::Cluster(args),
        } => offline::new_cluster(args),
        Command::Dev { what } => dev::run(what),
        Command::Plan {
            repo,
            cluster,
            management,
            output,
            kube,
        } => online::plan(&repo, cluster, management, output, &kube),
        Command::Reconcile(args) => online::reconcile(args),
        Command::Status { output, kube } => online::status(output, &kube),
        Command::Run(args) => online::run(args),
        Command::Delete { what } => intent::delete(what),
        Command::Suspend { what } => intent::suspend(what, true),
        Command::Resume { what } => intent::suspend(what, false),
    }
}

/// A tokio runtime for the commands that talk to a cluster.
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?)
}
