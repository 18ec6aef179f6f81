//! Commands that talk to the management cluster: plan, reconcile, status.

use std::path::Path;
use std::process::{Command as Process, ExitCode};

use anyhow::Context;
use kube::api::ListParams;
use serde_json::{Value, json};

use crate::cli::{DriftArg, KubeArgs, Output, ReconcileArgs, RunArgs};
use crate::plan::Action;
use crate::reconcile::{self, Drift, Options, Outcome};
use crate::status;

/// The revision of a working copy: its HEAD commit, with `-dirty` when it has changes.
fn local_revision(repo: &Path) -> String {
    let git = |args: &[&str]| {
        Process::new("git")
            .arg("-C")
            .arg(repo)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    match git(&["rev-parse", "--short=12", "HEAD"]) {
        Some(head) => {
            let dirty = git(&["status", "--porcelain"]).is_some_and(|s| !s.is_empty());
            if dirty { format!("{head}-dirty") } else { head }
        }
        None => "local".to_string(),
    }
}

fn print_outcome(out: &Outcome, plan_only: bool) {
    let diffs = plan_only;
    for c in &out.clusters {
        let counts: Vec<String> = c
            .plan
            .counts()
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(a, n)| format!("{n} {a}"))
            .collect();
        let phase = if plan_only {
            String::new()
        } else {
            format!(" ({})", c.phase.as_str())
        };
        println!(
            "cluster {}{phase}: {}{}",
            c.name,
            if counts.is_empty() {
                "nothing to do".into()
            } else {
                counts.join(", ")
            },
            if c.message.is_empty() {
                String::new()
            } else {
                format!(" — {}", c.message)
            }
        );
        for e in &c.plan.entries {
            if e.action == Action::Unchanged {
                continue;
            }
            let reason = e
                .reason
                .as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default();
            println!(
                "  {:9} {}{reason}",
                e.action.to_string(),
                e.object.subject()
            );
            if diffs && let Some(d) = &e.diff {
                for line in d.lines() {
                    println!("    {line}");
                }
            }
        }
    }
}

/// `capstan plan`.
pub fn plan(
    repo: &Path,
    cluster: Option<String>,
    management: Option<String>,
    output: Output,
    kube: &KubeArgs,
) -> anyhow::Result<ExitCode> {
    let fleet = super::load_fleet(repo)?;
    let opts = Options {
        plan_only: true,
        only: cluster,
        management,
        revision: local_revision(repo),
        ..Default::default()
    };
    let out = super::runtime()?.block_on(async {
        let conn = crate::k8s::connect(kube.kubeconfig.as_deref(), kube.context.as_deref()).await?;
        anyhow::Ok(reconcile::reconcile(&conn.client, &fleet, &opts).await?)
    })?;
    match output {
        Output::Json => {
            let plans: Vec<_> = out.clusters.iter().map(|c| json!({"cluster": c.name, "phase": c.phase.as_str(), "message": c.message, "entries": c.plan.entries})).collect();
            println!(
                "{}",
                serde_json::to_string_pretty(
                    &json!({"changes": out.has_changes(), "clusters": plans, "diagnostics": fleet.all_diagnostics()})
                )?
            );
        }
        Output::Text => {
            for d in fleet.all_diagnostics() {
                println!("{d}");
            }
            print_outcome(&out, true);
        }
    }
    Ok(if fleet.has_errors() || out.has_failures() {
        ExitCode::from(1)
    } else if out.has_changes() {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    })
}

/// `capstan reconcile --once [--wait D]`.
pub fn reconcile(args: ReconcileArgs) -> anyhow::Result<ExitCode> {
    let ReconcileArgs {
        once,
        wait,
        repo,
        cluster,
        drift,
        revision,
        management,
        concurrency,
        kube,
    } = args;
    if !once {
        anyhow::bail!("only `capstan reconcile --once` is available; the daemon is `capstan run`");
    }
    let fleet = super::load_fleet(&repo)?;
    let opts = Options {
        plan_only: false,
        only: cluster,
        drift: drift.into(),
        management,
        concurrency,
        revision: revision.unwrap_or_else(|| local_revision(&repo)),
    };
    let started = std::time::Instant::now();
    let passes = super::runtime()?.block_on(async {
        let conn = crate::k8s::connect(kube.kubeconfig.as_deref(), kube.context.as_deref()).await?;
        eprintln!(
            "reconciling {} at revision {} against {}",
            repo.display(),
            opts.revision,
            conn.server
        );
        anyhow::Ok(match wait {
            None => vec![reconcile::reconcile(&conn.client, &fleet, &opts).await?],
            Some(timeout) => {
                // While waiting, say what each cluster waits for, whenever that changes.
                let seen =
                    std::sync::Mutex::new(std::collections::BTreeMap::<String, String>::new());
                let progress = |out: &Outcome| {
                    let mut seen = seen.lock().unwrap_or_else(|p| p.into_inner());
                    for c in &out.clusters {
                        let now = format!("{}: {}", c.phase.as_str(), c.message);
                        if seen.get(&c.name) != Some(&now) {
                            eprintln!(
                                "[{:>5.1}s] {} {now}",
                                started.elapsed().as_secs_f64(),
                                c.name
                            );
                            seen.insert(c.name.clone(), now);
                        }
                    }
                };
                reconcile::converge_with(&conn.client, &fleet, &opts, timeout, progress)
                    .await?
                    .passes
            }
        })
    })?;
    for d in fleet.all_diagnostics() {
        eprintln!("{d}");
    }
    // What the revision applied, then (when waiting) where each cluster got to.
    print_outcome(&passes[0], false);
    let out = passes.last().expect("at least one pass");
    let (writes, reads) = passes
        .iter()
        .fold((0, 0), |(w, r), p| (w + p.writes, r + p.reads));
    println!(
        "{writes} write requests, {reads} read requests ({} passes)",
        passes.len()
    );
    if wait.is_some() {
        for c in &out.clusters {
            println!("cluster {}: {} — {}", c.name, c.phase.as_str(), c.message);
        }
    }
    if let Some(timeout) = wait {
        if out.settled() {
            println!("settled in {:.1}s", started.elapsed().as_secs_f64());
        } else {
            let waiting: Vec<&str> = out
                .clusters
                .iter()
                .filter(|c| !c.settled())
                .map(|c| c.name.as_str())
                .collect();
            eprintln!(
                "not settled after {}s: {}",
                timeout.as_secs(),
                waiting.join(", ")
            );
            return Ok(ExitCode::from(1));
        }
    }
    Ok(if out.has_failures() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn age(created: &str) -> String {
    let Ok(t) = created.parse::<k8s_openapi::jiff::Timestamp>() else {
        return "-".into();
    };
    let secs = k8s_openapi::jiff::Timestamp::now().as_second() - t.as_second();
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

/// `capstan status`.
pub fn status(output: Output, kube: &KubeArgs) -> anyhow::Result<ExitCode> {
    let items = super::runtime()?.block_on(async {
        let conn = crate::k8s::connect(kube.kubeconfig.as_deref(), kube.context.as_deref()).await?;
        let api = status::api(&conn.client);
        anyhow::Ok(
            api.list(&ListParams::default())
                .await
                .context("listing ManagedClusters (has the agent run?)")?
                .items,
        )
    })?;
    let rows: Vec<Value> = items
        .iter()
        .map(|o| serde_json::to_value(o).expect("objects serialise"))
        .collect();
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&rows)?),
        Output::Text => {
            let s = |r: &Value, p: &str| {
                r.pointer(p)
                    .and_then(Value::as_str)
                    .unwrap_or("-")
                    .to_string()
            };
            let table: Vec<[String; 6]> = rows
                .iter()
                .map(|r| {
                    [
                        s(r, "/metadata/name"),
                        s(r, "/spec/management"),
                        s(r, "/status/lastAppliedRevision"),
                        s(r, "/status/phase"),
                        age(&s(r, "/metadata/creationTimestamp")),
                        s(r, "/status/message"),
                    ]
                })
                .collect();
            let header = [
                "CLUSTER",
                "MANAGEMENT",
                "REVISION",
                "PHASE",
                "AGE",
                "MESSAGE",
            ]
            .map(String::from);
            // Columns as wide as their widest cell, as kubectl prints them.
            let widths: Vec<usize> = (0..5)
                .map(|i| {
                    table
                        .iter()
                        .chain([&header])
                        .map(|row| row[i].len())
                        .max()
                        .unwrap_or(0)
                })
                .collect();
            for row in [&header].into_iter().chain(&table) {
                let cells: Vec<String> = (0..5)
                    .map(|i| format!("{:<w$}", row[i], w = widths[i]))
                    .collect();
                println!("{}   {}", cells.join("   "), row[5]);
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `capstan run`.
pub fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    crate::serve::init_tracing(args.log_json, None)?;
    let secret = match (
        &args.webhook_secret_file,
        std::env::var("CAPSTAN_WEBHOOK_SECRET").ok(),
    ) {
        (Some(f), _) => Some(
            std::fs::read(f)
                .with_context(|| format!("reading {}", f.display()))?
                .trim_ascii()
                .to_vec(),
        ),
        (None, Some(s)) if !s.is_empty() => Some(s.into_bytes()),
        _ => None,
    };
    if args.webhook_addr.is_some() && secret.is_none() {
        anyhow::bail!(
            "--webhook-addr needs a secret (--webhook-secret-file or $CAPSTAN_WEBHOOK_SECRET): unsigned pushes are never accepted"
        );
    }
    let local = Path::new(&args.repo);
    let repo = if !args.git && local.is_dir() && !args.repo.contains("://") {
        crate::daemon::Repo::WorkingCopy(local.to_path_buf())
    } else {
        let cache = match args.cache_dir.clone() {
            Some(c) => c,
            None => {
                let home = std::env::var_os("HOME").context("HOME is not set")?;
                let key = hex::encode(sha2::Digest::finalize(sha2::Digest::chain_update(
                    sha2::Sha256::default(),
                    args.repo.as_bytes(),
                )));
                std::path::PathBuf::from(home)
                    .join(".cache/capstan/source")
                    .join(&key[..16])
            }
        };
        crate::daemon::Repo::Git(crate::daemon::git_config(
            args.repo.clone(),
            Some(args.branch.clone()),
            args.tag.clone(),
            args.commit.clone(),
            cache,
            args.ssh_key.clone(),
            args.known_hosts.clone(),
            args.ca_file.clone(),
        ))
    };
    let cfg = crate::daemon::RunConfig {
        repo,
        interval: args.interval,
        webhook_addr: args.webhook_addr,
        metrics_addr: args.metrics_addr,
        webhook_secret: secret,
        branch: args.branch.clone(),
        watch: args.watch,
        management: args.management.clone(),
        drift: args.drift.into(),
        concurrency: args.concurrency,
        ca_file: args.ca_file.clone(),
    };
    super::runtime()?.block_on(async {
        let metrics = std::sync::Arc::new(crate::serve::Metrics::new());
        let count = metrics.clone();
        let conn = crate::k8s::connect_with(args.kube.kubeconfig.as_deref(), args.kube.context.as_deref(), Some(std::sync::Arc::new(move |verb| count.inc_api_request(verb)))).await?;
        tracing::info!(server = %conn.server, source = %conn.source, repo = %args.repo, "capstan agent starting");
        let shutdown = async {
            let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("signal handler");
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        };
        crate::daemon::run_with(conn.client, cfg, metrics, shutdown).await
    })?;
    Ok(ExitCode::SUCCESS)
}

impl From<DriftArg> for Drift {
    fn from(d: DriftArg) -> Drift {
        match d {
            DriftArg::Correct => Drift::Correct,
            DriftArg::Report => Drift::Report,
        }
    }
}
