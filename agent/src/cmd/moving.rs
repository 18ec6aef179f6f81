//! `capstan move` ([`crate::mover`]): the command line around the mover.

use std::path::Path;
use std::process::ExitCode;

use capstan_plan::moving::ClusterKey;

use crate::cli::KubeArgs;
use crate::mover::{self, Move, MoveError};

/// `capstan move`.
pub fn run(
    clusters: Vec<ClusterKey>,
    to: &Path,
    to_context: Option<&str>,
    dry_run: bool,
    kube: &KubeArgs,
) -> anyhow::Result<ExitCode> {
    // Warnings to stderr: a failpoint reached (the crash tests), kube's retries.
    crate::serve::logging::init_tracing(false, Some("warn"))?;
    super::runtime()?.block_on(async {
        let source = crate::k8s::connect(kube.kubeconfig.as_deref(), kube.context.as_deref()).await?;
        let target = crate::k8s::connect(Some(to), to_context).await?;
        if source.server == target.server {
            anyhow::bail!(
                "the source and the target are the same API server ({}): a move needs two",
                source.server
            );
        }
        eprintln!("moving from {} to {}", source.server, target.server);
        let m = Move {
            source: source.client,
            source_server: source.server.to_string(),
            target: target.client,
            clusters,
        };
        if dry_run {
            return print_plan(&m, true).await;
        }
        let mut say = |line: String| eprintln!("{line}");
        match mover::run(&m, &mut say).await {
            Ok(done) => {
                println!(
                    "moved: {} created in the target ({} found made by an earlier run), {} deleted at the source, {} shared kept at the source",
                    done.created,
                    done.found,
                    done.deleted,
                    done.shared.len()
                );
                for c in &done.operator_paused {
                    println!("  Cluster {c}: paused by an operator before the move, still paused");
                }
                Ok(ExitCode::SUCCESS)
            }
            Err(e @ MoveError::Refused(_)) => {
                eprintln!("error: {e}");
                Ok(ExitCode::from(2))
            }
            Err(e) => Err(e.into()),
        }
    })
}

/// `--dry-run`: the plan, by kind in order and object by object; nothing written. Without
/// `agent`, capstan's agent at the source is not reported (the caller stops it first).
pub(super) async fn print_plan(m: &Move, agent: bool) -> anyhow::Result<ExitCode> {
    match mover::plan_with(m, agent).await {
        Ok((found, plan)) => {
            let objects: Vec<serde_json::Value> = found.iter().map(|f| f.object.clone()).collect();
            println!(
                "would move {} objects of {} cluster(s), in this order (kinds by first place):",
                plan.objects.len(),
                plan.clusters.len()
            );
            for (kind, n) in plan.kinds(&objects) {
                println!("  {n:>5}  {kind}");
            }
            println!("objects (owners first; shared: copied and kept at the source):");
            for o in &plan.objects {
                println!(
                    "  {}{}",
                    o.subject,
                    if o.shared { "  (shared)" } else { "" }
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e @ MoveError::Refused(_)) => {
            eprintln!("error: {e}");
            Ok(ExitCode::from(2))
        }
        Err(e) => Err(e.into()),
    }
}

/// A move as a step of `pivot` or `back-out`: its lines indented, its tally in the words of
/// `source` (what the source is to the user). `Some(exit code 2)`: refused, said why.
pub(super) async fn run_step(m: &Move, source: &str) -> anyhow::Result<Option<ExitCode>> {
    let mut said = |line: String| eprintln!("  {line}");
    match mover::run(m, &mut said).await {
        Ok(done) => {
            eprintln!(
                "  moved: {} created, {} found made, {} deleted at {source}",
                done.created, done.found, done.deleted
            );
            Ok(None)
        }
        Err(e @ MoveError::Refused(_)) => {
            eprintln!("error: {e}");
            Ok(Some(ExitCode::from(2)))
        }
        Err(e) => Err(e.into()),
    }
}
