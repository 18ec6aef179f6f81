//! `capstan rehearse`: the command around [`crate::rehearse`]: both revisions read, the control
//! plane found or started, the rehearsal run, its timeline printed, the exit code given.
//!
//! Exit codes: 0 every rehearsed cluster passed, 1 one did not (or the control plane could not
//! be had), 2 bad input (the head revision's problems, as `validate` and `diff` report them).

use std::io::IsTerminal as _;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;

use crate::cli::{RehearseArgs, ReportOutput};
use crate::rehearse::{self, timeline};

/// Runs `capstan rehearse`.
pub fn run(args: RehearseArgs) -> anyhow::Result<ExitCode> {
    let read = |rev: Option<&str>| -> anyhow::Result<(capstan_layout::Tree, String)> {
        match rev {
            None => Ok((
                capstan_layout::Tree::from_dir(&args.repo)
                    .with_context(|| format!("reading {}", args.repo.display()))?,
                "working tree".into(),
            )),
            Some(rev) => {
                let r = crate::source::read_local(&args.repo, rev)?;
                let short = r.commit[..12].to_string();
                Ok((
                    std::sync::Arc::unwrap_or_clone(r.tree),
                    format!("{rev} ({short})"),
                ))
            }
        }
    };
    // The commit the change branched from, as `capstan diff` takes it.
    let fork = crate::source::merge_base(&args.repo, &args.base, args.head.as_deref())?;
    let (base_tree, _) = read(Some(&fork))?;
    let base_name = format!("{} ({})", args.base, &fork[..12]);
    let (head_tree, head_name) = read(args.head.as_deref())?;
    let title = format!("capstan rehearse {base_name} → {head_name}");
    let load = |t: &capstan_layout::Tree| {
        super::load_tree(t).unwrap_or_else(|e| {
            // Release documents that cannot be fetched: the fleet's own diagnostics say which.
            tracing::warn!(error = %e, "release documents");
            capstan_layout::load(t)
        })
    };
    let prepared = match rehearse::prepare(
        &title,
        &base_tree,
        &head_tree,
        args.cluster.as_deref(),
        &load,
    ) {
        Ok(p) => p,
        Err(bad) => {
            eprintln!("{bad}");
            eprintln!("nothing rehearsed: the head revision does not validate");
            return Ok(ExitCode::from(2));
        }
    };
    let print = |clusters: &[timeline::ClusterRehearsal]| -> anyhow::Result<()> {
        if let Some(f) = &args.json_file {
            std::fs::write(
                f,
                serde_json::to_string_pretty(&timeline::json(&title, clusters))?,
            )
            .with_context(|| format!("writing {}", f.display()))?;
        }
        match args.output {
            ReportOutput::Json => println!(
                "{}",
                serde_json::to_string_pretty(&timeline::json(&title, clusters))?
            ),
            ReportOutput::Markdown => print!("{}", timeline::markdown(&title, clusters)),
            ReportOutput::Text => print!("{}", timeline::text(&title, clusters)),
        }
        Ok(())
    };
    if prepared.targets.is_empty() {
        print(&[])?;
        return Ok(ExitCode::SUCCESS);
    }

    // The control plane: the one named, or the local one (started, then stopped, when it was
    // not running).
    let dev_dir = args
        .dev_dir
        .clone()
        .map(Ok)
        .unwrap_or_else(super::dev::default_dir)?;
    let (kubeconfig, started) = match &args.control_plane {
        Some(k) => (k.clone(), false),
        None => {
            let (state, started) = super::dev::up(&dev_dir, true)?;
            if !started {
                eprintln!("reusing the local control plane of {}", dev_dir.display());
            }
            (state.endpoints.kubeconfig.clone(), started)
        }
    };
    let backup = tempfile::tempdir()?;
    let opts = rehearse::Options {
        concurrency: args.concurrency,
        timeout: args.timeout,
        base_timeout: args.timeout,
        // A control plane started for this rehearsal goes whole afterwards (a CI runner's):
        // deleting its clusters one by one first would only cost time.
        keep: args.keep || started,
        backup_dir: backup.path().to_path_buf(),
    };
    let verbose = std::io::stderr().is_terminal() || std::env::var_os("CI").is_some();
    let outcome = super::runtime()?.block_on(async {
        let conn = crate::k8s::connect(Some(&kubeconfig), None).await?;
        rehearse::check_control_plane(&conn.client).await?;
        if args.control_plane.is_some() {
            // A control plane of the caller's: capstan's CRD and tenancy ensured (idempotent).
            crate::install::install_crd(&conn.client).await?;
            crate::install::install_tenancy(
                &conn.client,
                &crate::install::rbac::rules(),
                Duration::from_secs(60),
            )
            .await?;
        }
        let say = |line: String| {
            if verbose {
                eprintln!("{line}");
            }
        };
        anyhow::Ok(rehearse::rehearse(&conn.client, &prepared, &opts, &say).await)
    });
    if started && !args.keep {
        super::dev::down(&dev_dir)?;
    }
    let clusters = outcome?;
    print(&clusters)?;
    Ok(ExitCode::from(timeline::exit_code(&clusters)))
}
