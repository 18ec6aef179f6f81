//! `capstan diff`: two revisions of the repository compared without a cluster, for any CI.
//!
//! Exit codes, as `capstan plan` and `terraform plan -detailed-exitcode`: 0 nothing changes,
//! 2 something does, 1 errors (the head revision does not validate, a field is blocked, or a
//! revision cannot be read).

use std::io::IsTerminal;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use capstan_layout::{Tree, load};

use crate::cli::{DiffArgs, ReportOutput};
use crate::plan::compare::{changed_outside, compare};
use crate::plan::report::{COMMENT_LIMIT, Report};

/// The tree of a revision, or of the working copy when `rev` is `None`.
fn tree(repo: &Path, rev: Option<&str>) -> anyhow::Result<(Tree, String)> {
    match rev {
        None => Ok((
            Tree::from_dir(repo).with_context(|| format!("reading {}", repo.display()))?,
            "working tree".to_string(),
        )),
        Some(rev) => {
            let r = crate::source::read_local(repo, rev)?;
            let short = r.commit[..12].to_string();
            Ok((
                std::sync::Arc::unwrap_or_clone(r.tree),
                format!("{rev} ({short})"),
            ))
        }
    }
}

/// The report of `base` → `head` in `repo`, for one cluster or all.
pub fn report(
    repo: &Path,
    base: &str,
    head: Option<&str>,
    only: Option<&str>,
) -> anyhow::Result<Report> {
    // What the base gained since the change branched off is not part of the change: the
    // merge base, as a pull request's diff is taken.
    let fork = crate::source::merge_base(repo, base, head)?;
    let (base_tree, _) = tree(repo, Some(&fork))?;
    let base_name = format!("{base} ({})", &fork[..12]);
    let (head_tree, head_name) = tree(repo, head)?;
    let (base_fleet, head_fleet) = (load(&base_tree), load(&head_tree));
    if let Some(name) = only
        && head_fleet.cluster(name).is_none()
        && base_fleet.cluster(name).is_none()
    {
        anyhow::bail!("no cluster `{name}` in either revision");
    }
    let mut r = compare(
        &format!("capstan diff {base_name} → {head_name}"),
        &base_fleet,
        &head_fleet,
        changed_outside(&base_tree, &head_tree),
    );
    if let Some(name) = only {
        r.clusters.retain(|c| c.name == name);
    }
    Ok(r)
}

/// `capstan diff`.
pub fn run(args: DiffArgs) -> anyhow::Result<ExitCode> {
    if args.verify.mode().is_some() {
        let Some(head) = args.head.as_deref() else {
            anyhow::bail!(
                "--verify-commits verifies commits: name the revision with --head (the working copy's edits are not signed)"
            );
        };
        super::verify::verify_local(&args.repo, Some(&args.base), head, &args.verify)?;
    }
    let r = report(
        &args.repo,
        &args.base,
        args.head.as_deref(),
        args.cluster.as_deref(),
    )?;
    match args.output {
        ReportOutput::Json => println!("{}", serde_json::to_string_pretty(&r.json())?),
        ReportOutput::Markdown => print!("{}", r.markdown(COMMENT_LIMIT)),
        ReportOutput::Text => {
            let color = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
            print!("{}", r.text(color));
        }
    }
    Ok(if r.has_errors() {
        ExitCode::from(1)
    } else if r.has_changes() {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    })
}
