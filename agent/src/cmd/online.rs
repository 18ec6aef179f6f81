//! Commands that talk to the management cluster: plan, reconcile, status.

use std::path::Path;
use std::process::{Command as Process, ExitCode};

use anyhow::Context;
use kube::api::ListParams;
use serde_json::{Value, json};

use crate::cli::{DriftArg, KubeArgs, Output, ReconcileArgs, RunArgs, UpgradeArgs, VerifyArgs};
use crate::plan::Action;
use crate::reconcile::{self, Drift, Options, Outcome};
use crate::status;

/// The revision of a working copy: its HEAD commit, with `-dirty` when it has changes.
pub(super) fn local_revision(repo: &Path) -> String {
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

fn print_outcome(out: &Outcome, planned: bool) {
    let diffs = planned;
    for c in &out.clusters {
        let counts: Vec<String> = c
            .plan
            .counts()
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(a, n)| format!("{n} {a}"))
            .collect();
        let phase = if planned {
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
        let stages: Vec<String> = c
            .staged
            .stages
            .iter()
            .filter(|s| s.state != crate::plan::stages::State::Done)
            .map(|s| format!("{} ({})", s.stage, stage_state(&s.state)))
            .collect();
        // What `capstan diff` says too; then where each stage stands on the live cluster.
        if let Some(outline) = &c.staged.outline {
            println!("  {outline}");
        }
        if !stages.is_empty() {
            println!("  now: {}", stages.join(" → "));
        }
        if let Some(hold) = &c.paced {
            println!("  held: {hold}");
        }
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

fn stage_state(s: &crate::plan::stages::State) -> &'static str {
    use crate::plan::stages::State;
    match s {
        State::Done => "done",
        State::Apply => "applied now",
        State::Held => "held until the stages before it roll out",
        State::RollingOut => "rolling out",
    }
}

/// `capstan plan`.
pub fn plan(
    repo: &Path,
    cluster: Option<String>,
    management: Option<String>,
    output: Output,
    upgrade: &UpgradeArgs,
    verify: &VerifyArgs,
    kube: &KubeArgs,
) -> anyhow::Result<ExitCode> {
    // Verifying: the HEAD commit's tree is planned, not the working copy's edits.
    let (fleet, revision) = match verify.mode() {
        Some(_) => {
            let v = super::verify::verify_local(repo, None, "HEAD", verify)?;
            let rev = crate::source::read_local(repo, &v.commit)?;
            (super::load_tree(&rev.tree)?, v.commit)
        }
        None => (super::load_fleet(repo)?, local_revision(repo)),
    };
    let mut opts = Options {
        only: cluster,
        management,
        revision,
        ..Default::default()
    };
    upgrade.apply(&mut opts);
    let out = super::runtime()?.block_on(async {
        let conn = crate::k8s::connect(kube.kubeconfig.as_deref(), kube.context.as_deref()).await?;
        anyhow::Ok(reconcile::plan(&conn.client, &fleet, &opts).await?)
    })?;
    match output {
        Output::Json => {
            let plans: Vec<_> = out.clusters.iter().map(|c| json!({"cluster": c.name, "phase": c.phase.as_str(), "message": c.message, "stages": c.staged.stages, "outline": c.staged.outline, "held": c.paced.as_ref().map(|h| h.message.clone()), "entries": c.plan.entries})).collect();
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

/// `capstan backup`.
pub fn backup(
    dir: &Path,
    encryption: &crate::cli::BackupEncryptionArgs,
    kube: &KubeArgs,
) -> anyhow::Result<ExitCode> {
    let encryption = encryption.encryption();
    let b = super::runtime()?.block_on(async {
        let conn = crate::k8s::connect(kube.kubeconfig.as_deref(), kube.context.as_deref()).await?;
        anyhow::Ok(crate::backup::write(&conn.client, dir, "manual", &encryption).await?)
    })?;
    println!("{} objects backed up in {}", b.objects, b.dir.display());
    if b.encrypted_to.is_empty() {
        eprintln!(
            "warning: the backup is NOT encrypted (--backup-plaintext): it holds every cluster's keys in the clear"
        );
    } else {
        println!("encrypted with age to {}", b.encrypted_to.join(", "));
    }
    if !b.skipped.is_empty() {
        eprintln!(
            "warning: not allowed to list {} (left out of the backup)",
            b.skipped.join(", ")
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `capstan restore`. An encrypted backup without `--identity` is refused before the cluster
/// is contacted.
pub fn restore(from: &Path, identity: Option<&Path>, kube: &KubeArgs) -> anyhow::Result<ExitCode> {
    use crate::backup::{self, Identities};
    let identities = match identity {
        Some(path) => Identities::from_file(path)?,
        None => Identities::none(),
    };
    let encrypted = backup::encrypted_to(from)?;
    match (&encrypted, identity) {
        (Some(recipients), None) => {
            return Err(backup::encryption::needs_identity(
                &from.join(backup::OBJECTS_ENCRYPTED),
                recipients,
            )
            .into());
        }
        (None, Some(_)) => eprintln!(
            "warning: {} is not encrypted (written with --backup-plaintext): --identity is not used",
            from.display()
        ),
        _ => {}
    }
    let r = super::runtime()?.block_on(async {
        let conn = crate::k8s::connect(kube.kubeconfig.as_deref(), kube.context.as_deref()).await?;
        eprintln!("restoring {} onto {}", from.display(), conn.server);
        anyhow::Ok(backup::restore(&conn.client, from, &identities).await?)
    })?;
    println!(
        "{} objects restored, {} already there, {} of kinds the server does not serve",
        r.created,
        r.existing.len(),
        r.unknown.len()
    );
    for s in &r.existing {
        println!("  exists, left as it is: {s}");
    }
    for s in &r.unknown {
        println!("  not restored (is its CRD installed?): {s}");
    }
    Ok(if r.unknown.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// `capstan reconcile --once [--wait D]`.
/// While a convergence waits: what each cluster waits for, on stderr, whenever that changes.
pub(super) fn progress_printer(started: std::time::Instant) -> impl Fn(&Outcome) {
    let seen = std::sync::Mutex::new(std::collections::BTreeMap::<String, String>::new());
    move |out: &Outcome| {
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
    }
}

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
        upgrade,
        kube,
    } = args;
    if !once {
        anyhow::bail!("only `capstan reconcile --once` is available; the daemon is `capstan run`");
    }
    let fleet = super::load_fleet(&repo)?;
    let mut opts = Options {
        only: cluster,
        drift: drift.into(),
        management,
        concurrency,
        revision: revision.unwrap_or_else(|| local_revision(&repo)),
        ..Default::default()
    };
    upgrade.apply(&mut opts);
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
                let progress = progress_printer(started);
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
    let (items, agent) = super::runtime()?.block_on(async {
        let conn = crate::k8s::connect(kube.kubeconfig.as_deref(), kube.context.as_deref()).await?;
        let api = status::api(&conn.client);
        let items = api
            .list(&ListParams::default())
            .await
            .context("listing ManagedClusters (has `capstan install` run?)")?
            .items;
        // The agent itself, when installed (and readable with these credentials).
        let agent = crate::install::health(&conn.client)
            .await
            .unwrap_or_default();
        anyhow::Ok((items, agent))
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
            let stage = |r: &Value| match s(r, "/status/stage").as_str() {
                "" | "-" => "-".to_string(),
                st => st.to_string(),
            };
            let table: Vec<[String; 8]> = rows
                .iter()
                .map(|r| {
                    [
                        s(r, "/metadata/name"),
                        s(r, "/spec/management"),
                        s(r, "/status/lastAppliedRevision"),
                        s(r, "/status/phase"),
                        stage(r),
                        s(r, "/status/wave"),
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
                "STAGE",
                "WAVE",
                "AGE",
                "MESSAGE",
            ]
            .map(String::from);
            // Columns as wide as their widest cell, as kubectl prints them.
            let last = header.len() - 1;
            let widths: Vec<usize> = (0..last)
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
                let cells: Vec<String> = (0..last)
                    .map(|i| format!("{:<w$}", row[i], w = widths[i]))
                    .collect();
                println!("{}   {}", cells.join("   "), row[last]);
            }
            if !agent.is_empty() {
                println!("\nagent:");
                for line in &agent {
                    println!("  {}", line.trim_start());
                }
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
    let webhook_addr = match (args.webhook_addr, &secret) {
        (Some(addr), None) => {
            // Installed agents listen by default; without the Secret there is nothing to check
            // signatures with, and unsigned pushes are never accepted: no listener.
            tracing::warn!(%addr, "no webhook secret (--webhook-secret-file, $CAPSTAN_WEBHOOK_SECRET, the Secret capstan-webhook): webhooks are off, the agent polls");
            None
        }
        (addr, _) => addr,
    };
    let local = Path::new(&args.repo);
    let verify = verify_config(&args)?;
    let repo = if !args.git && local.is_dir() && !args.repo.contains("://") {
        if verify.is_some() {
            anyhow::bail!(
                "--verify-commits verifies commits, and {} is read as a working copy: follow it as a Git repository with --git",
                args.repo
            );
        }
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
    // Verifying needs the history: whether the head descends from the last verified commit
    // (both modes), and every commit since it (`all`). No shallow fetches.
    let repo = match repo {
        crate::daemon::Repo::Git(mut sc) if verify.is_some() => {
            sc.shallow = false;
            crate::daemon::Repo::Git(sc)
        }
        other => other,
    };
    let mut cfg = crate::daemon::RunConfig {
        repo,
        interval: args.interval,
        webhook_addr,
        metrics_addr: args.metrics_addr,
        dashboard_addr: args.dashboard_addr,
        dashboard_behind_tls: args.dashboard_behind_tls,
        webhook_secret: secret,
        branch: args.branch.clone(),
        watch: args.watch,
        management: args.management.clone(),
        drift: args.drift.into(),
        concurrency: args.concurrency,
        upgrade: args.upgrade.clone(),
        leader: args.leader_elect.then(|| crate::leader::LeaderConfig {
            lease: args.lease_name.clone(),
            namespace: args
                .lease_namespace
                .clone()
                .or_else(|| {
                    std::env::var("POD_NAMESPACE")
                        .ok()
                        .filter(|n| !n.is_empty())
                })
                .unwrap_or_else(|| status::NAMESPACE.to_string()),
            identity: std::env::var("POD_NAME")
                .ok()
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| {
                    let host =
                        std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
                    format!("{}-{}", host.trim(), std::process::id())
                }),
            duration: args.lease_duration,
            renew_deadline: args.renew_deadline,
        }),
        github: None,
        ca_file: args.ca_file.clone(),
        verify,
        notify: crate::notify::SenderConfig {
            backoff: args.notify_retry_backoff,
            ..Default::default()
        },
        cluster_profiles: args.cluster_profiles.clone(),
    };
    super::runtime()?.block_on(async {
        // The GitHub client lives on the runtime (its HTTP stack spawns tasks).
        cfg.github = args
            .github
            .client(&args.repo)?
            .map(|github| crate::daemon::GitHubRun {
                github,
                pr_forks: args.pr_plans_from_forks,
            });
        if cfg.github.is_none() && args.pr_plans_from_forks {
            anyhow::bail!("--pr-plans-from-forks needs GitHub credentials (--github-token-file or a GitHub App)");
        }
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

/// `--verify-commits` and its keys, checked: at least one source of keys; the files readable
/// now (the Secret is read by the agent).
fn verify_config(args: &RunArgs) -> anyhow::Result<Option<crate::daemon::verify::VerifyConfig>> {
    let Some(mode) = args.verify.mode() else {
        return Ok(None);
    };
    let secret = match &args.trusted_keys_secret {
        None => None,
        Some(s) => match s.split_once('/') {
            Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
                Some((ns.to_string(), name.to_string()))
            }
            _ => anyhow::bail!("--trusted-keys-secret {s}: expected NAMESPACE/NAME"),
        },
    };
    let files = args.verify.allowed_signers.is_some() || args.verify.trusted_keys.is_some();
    if !files && secret.is_none() {
        anyhow::bail!(
            "--verify-commits needs trusted keys: --allowed-signers FILE, --trusted-keys FILE or --trusted-keys-secret NAMESPACE/NAME"
        );
    }
    if files {
        // A typo is better found now than as every revision refused.
        args.verify.keys()?;
    }
    Ok(Some(crate::daemon::verify::VerifyConfig {
        mode,
        allowed_signers: args.verify.allowed_signers.clone(),
        trusted_keys: args.verify.trusted_keys.clone(),
        secret,
        allow_rollback: args.allow_rollback,
    }))
}

impl From<DriftArg> for Drift {
    fn from(d: DriftArg) -> Drift {
        match d {
            DriftArg::Correct => Drift::Correct,
            DriftArg::Report => Drift::Report,
        }
    }
}
