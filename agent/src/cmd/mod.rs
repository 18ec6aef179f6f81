//! One module per command family; each returns the process exit code.

mod back_out;
mod bootstrap;
mod dashboard;
#[cfg(feature = "dev")]
mod dev;
mod diff;
mod hardware;
mod install;
mod intent;
mod kubeconfig;
mod moving;
mod offline;
mod online;
mod open_pr;
mod pivot;
#[cfg(feature = "dev")]
mod rehearse;
mod secret;
mod verify;

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
        Command::Secret {
            what: crate::cli::SecretCommand::Encrypt(args),
        } => secret::encrypt(&args),
        Command::Hardware {
            what: crate::cli::HardwareCommand::Import(args),
        } => hardware::import(&args),
        #[cfg(feature = "dev")]
        Command::Dev { what } => dev::run(what),
        Command::Diff(args) => diff::run(args),
        #[cfg(feature = "dev")]
        Command::Rehearse(args) => rehearse::run(args),
        Command::Plan {
            repo,
            cluster,
            management,
            output,
            upgrade,
            verify,
            kube,
        } => online::plan(&repo, cluster, management, output, &upgrade, &verify, &kube),
        Command::Backup {
            dir,
            encryption,
            kube,
        } => online::backup(&dir, &encryption, &kube),
        Command::Restore {
            from,
            identity,
            kube,
        } => online::restore(&from, identity.as_deref(), &kube),
        Command::Move {
            clusters,
            to,
            to_context,
            dry_run,
            kube,
        } => moving::run(clusters, &to, to_context.as_deref(), dry_run, &kube),
        Command::Pivot(args) => pivot::run(*args),
        Command::BackOut(args) => back_out::run(*args),
        Command::Reconcile(args) => online::reconcile(args),
        Command::Install(args) => install::install(args),
        Command::Uninstall { purge, kube } => install::uninstall(purge, &kube),
        Command::Bootstrap(args) => bootstrap::bootstrap(args),
        Command::Kubeconfig(args) => kubeconfig::run(args),
        Command::Status { output, kube } => online::status(output, &kube),
        Command::Dashboard {
            addr,
            repo,
            no_browser,
            kube,
        } => dashboard::run(addr, repo, !no_browser, &kube),
        Command::Run(args) => online::run(*args),
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

/// Reads a working copy and loads its fleet, fetching the release documents its fleet configs
/// name (cached in `$CAPSTAN_CACHE_DIR/release-documents`; extra CAs from `$CAPSTAN_CA_FILE`).
/// Not for a tokio runtime thread.
pub fn load_fleet(repo: &std::path::Path) -> anyhow::Result<capstan_layout::Fleet> {
    use anyhow::Context;
    let tree = capstan_layout::Tree::from_dir(repo)
        .with_context(|| format!("reading {}", repo.display()))?;
    load_tree(&tree)
}

/// Loads a tree's fleet, as [`load_fleet`] does.
pub(crate) fn load_tree(tree: &capstan_layout::Tree) -> anyhow::Result<capstan_layout::Fleet> {
    let mut fetcher = crate::source::release::ReleaseFetcher::new(
        &crate::source::release::ReleaseFetcher::default_cache_dir(),
        None,
    )?;
    Ok(fetcher.load(tree, &mut capstan_layout::RenderCache::default()))
}

pub use crate::errors::error_chain;

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("failed to read kubeconfig from /x: {0}")]
    struct Read(#[source] std::io::Error);

    #[test]
    fn each_cause_is_printed_once() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file or directory");
        let e = anyhow::Error::new(Read(io)).context("kubeconfig /x");
        assert_eq!(
            error_chain(&e),
            "kubeconfig /x: failed to read kubeconfig from /x: No such file or directory"
        );
        // Causes that add something are all kept.
        let e = anyhow::anyhow!("inner").context("middle").context("outer");
        assert_eq!(error_chain(&e), "outer: middle: inner");
    }
}
