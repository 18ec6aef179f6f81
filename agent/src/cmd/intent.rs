//! `capstan delete|suspend|resume`: intent written into the repository as files (see
//! `capstan_layout::intent`), to be committed and merged like any other change.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use capstan_layout::intent::{self, SUSPEND_FILE, TOMBSTONE_FILE};
use capstan_layout::{Tree, load};

use crate::cli::TargetCommand;

fn cluster_dir(repo: &Path, name: &str) -> anyhow::Result<PathBuf> {
    let fleet = load(&Tree::from_dir(repo).with_context(|| format!("reading {}", repo.display()))?);
    match fleet.cluster(name) {
        Some(c) => Ok(repo.join(&c.dir)),
        None => bail!("no cluster `{name}` in {}", repo.display()),
    }
}

/// `capstan delete cluster NAME`: the spec files go, a tombstone takes their place.
pub fn delete(what: TargetCommand) -> anyhow::Result<ExitCode> {
    let TargetCommand::Cluster {
        name,
        repo,
        reason,
        pr,
    } = what
    else {
        bail!("only a cluster can be deleted")
    };
    if pr.open_pr {
        let title = format!("Delete cluster {name}");
        let branch = format!("capstan/delete-cluster-{name}");
        return super::open_pr::open_pr(&repo, &pr, branch, &title, |dir| {
            tombstone(dir, &name, &reason)
        });
    }
    tombstone(&repo, &name, &reason)?;
    Ok(ExitCode::SUCCESS)
}

fn tombstone(repo: &Path, name: &str, reason: &str) -> anyhow::Result<()> {
    let dir = cluster_dir(repo, name)?;
    let workloads = dir.join("workload-clusters");
    let management = workloads.exists();
    if management {
        // Workloads with tombstones of their own go first, in the back-out; any other keeps
        // the management cluster.
        let mut live = Vec::new();
        for e in fs::read_dir(&workloads)? {
            let p = e?.path();
            if p.is_dir() && !p.join(TOMBSTONE_FILE).exists() {
                live.push(
                    p.file_name()
                        .unwrap_or_default()
                        .to_string_lossy()
                        .into_owned(),
                );
            }
        }
        live.sort();
        if !live.is_empty() {
            bail!(
                "{name} still manages workload clusters ({}); delete those first (`capstan delete cluster NAME` for each)",
                live.join(", ")
            );
        }
    }
    for e in fs::read_dir(&dir)? {
        let p = e?.path();
        if p.is_file() && p.extension().is_some_and(|x| x == "yaml" || x == "yml") {
            fs::remove_file(&p)?;
            println!("removed {}", p.display());
        }
    }
    let path = dir.join(TOMBSTONE_FILE);
    fs::write(&path, intent::document("Tombstone", reason))?;
    if management {
        println!(
            "wrote {}: commit and merge it, then `capstan back-out --to <a temporary cluster's kubeconfig>` moves {name} and its workload clusters there and deletes them (workload clusters first); the agent in {name} does not delete the cluster it runs on",
            path.display()
        );
    } else {
        println!(
            "wrote {}: commit and merge it, and the agent deletes cluster {name} (its Cluster first)",
            path.display()
        );
    }
    Ok(())
}

/// `capstan suspend|resume cluster NAME` and `... fleet`.
pub fn suspend(what: TargetCommand, on: bool) -> anyhow::Result<ExitCode> {
    let (name, repo, reason, pr) = match what {
        TargetCommand::Cluster {
            name,
            repo,
            reason,
            pr,
        } => (Some(name), repo, reason, pr),
        TargetCommand::Fleet { repo, reason, pr } => (None, repo, reason, pr),
    };
    if pr.open_pr {
        let verb = if on { "suspend" } else { "resume" };
        let (title, branch) = match &name {
            Some(n) => (
                format!("{} cluster {n}", if on { "Suspend" } else { "Resume" }),
                format!("capstan/{verb}-cluster-{n}"),
            ),
            None => (
                format!("{} the fleet", if on { "Suspend" } else { "Resume" }),
                format!("capstan/{verb}-fleet"),
            ),
        };
        return super::open_pr::open_pr(&repo, &pr, branch, &title, |dir| {
            set_suspended(dir, name.as_deref(), &reason, on)
        });
    }
    set_suspended(&repo, name.as_deref(), &reason, on)?;
    Ok(ExitCode::SUCCESS)
}

fn set_suspended(repo: &Path, name: Option<&str>, reason: &str, on: bool) -> anyhow::Result<()> {
    let (path, who) = match name {
        Some(name) => (
            cluster_dir(repo, name)?.join(SUSPEND_FILE),
            format!("cluster {name}"),
        ),
        None => (
            repo.join(capstan_layout::fleet::CLUSTERS_DIR)
                .join(SUSPEND_FILE),
            "the fleet".to_string(),
        ),
    };
    if on {
        fs::write(&path, intent::document("Suspend", reason))?;
        println!(
            "wrote {}: {who} is suspended once this is committed",
            path.display()
        );
    } else if path.exists() {
        fs::remove_file(&path)?;
        println!(
            "removed {}: {who} resumes once this is committed",
            path.display()
        );
    } else {
        println!("{who} is not suspended");
    }
    Ok(())
}
