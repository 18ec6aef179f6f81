//! Commands that need no cluster: validate, render, init, new cluster.
//!
//! Exit codes: 0 success, 1 errors found (validation) or the command failed.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command as Process, ExitCode};

use anyhow::{Context, bail};
use capstan_layout::scaffold::codeowners::Owner;
use capstan_layout::scaffold::{self, ClusterRequest};
use capstan_layout::{Fleet, Tree};
use capstan_templates::yaml;
use serde_json::json;

use crate::cli::{ClusterValues, InitArgs, KubeArgs, NewClusterArgs, Output};

fn load(repo: &Path) -> anyhow::Result<Fleet> {
    super::load_fleet(repo)
}

/// Server-side dry-run of every rendered object; messages per cluster.
fn server_dry_run(fleet: &Fleet, kube: &KubeArgs) -> anyhow::Result<Vec<(String, String)>> {
    super::runtime()?.block_on(async {
        let conn = crate::k8s::connect(kube.kubeconfig.as_deref(), kube.context.as_deref()).await?;
        eprintln!(
            "dry-running every rendered object against {} ({})",
            conn.server, conn.source
        );
        let mut out = Vec::new();
        for c in &fleet.clusters {
            let Some(objects) = &c.objects else { continue };
            for e in crate::k8s::dry_run_all(&conn.client, &objects.values()).await? {
                out.push((c.name.clone(), e.to_string()));
            }
        }
        Ok(out)
    })
}

/// `capstan validate`.
pub fn validate(
    repo: &Path,
    output: Output,
    server: Option<&KubeArgs>,
) -> anyhow::Result<ExitCode> {
    let fleet = load(repo)?;
    let diags = fleet.all_diagnostics();
    let rejected = match server {
        Some(kube) => server_dry_run(&fleet, kube)?,
        None => Vec::new(),
    };
    let errors = diags.iter().filter(|d| d.is_error()).count() + rejected.len();
    match output {
        Output::Json => {
            let clusters: Vec<_> = fleet
                .clusters
                .iter()
                .map(|c| {
                    json!({
                        "name": c.name,
                        "directory": c.dir,
                        "management": c.management(),
                        "valid": c.is_valid(),
                        "eksaVersion": c.release.as_ref().map(|r| r.version.to_string()),
                        "objects": c.objects.as_ref().map(|o| o.len()),
                    })
                })
                .collect();
            let rejected: Vec<_> = rejected
                .iter()
                .map(|(c, m)| json!({"cluster": c, "message": m}))
                .collect();
            let report = json!({"valid": errors == 0, "errors": errors, "clusters": clusters, "diagnostics": diags, "serverRejected": rejected});
            println!("{}", serde_json::to_string_pretty(&report)?);
        }
        Output::Text => {
            for d in &diags {
                println!("{d}");
            }
            for (c, m) in &rejected {
                println!("error[server-rejected]: {m} (cluster {c})");
            }
            for c in &fleet.clusters {
                let state = if c.is_valid() { "ok" } else { "INVALID" };
                let version = c
                    .release
                    .as_ref()
                    .map(|r| r.version.to_string())
                    .unwrap_or_else(|| "-".into());
                let objects = c
                    .objects
                    .as_ref()
                    .map(|o| o.len().to_string())
                    .unwrap_or_else(|| "-".into());
                println!(
                    "{state:8} {:<24} management={:<16} eksa={version:<8} objects={objects}",
                    c.name,
                    c.management()
                );
            }
            let warnings = diags.iter().filter(|d| !d.is_error()).count();
            println!(
                "{} clusters, {errors} errors, {warnings} warnings",
                fleet.clusters.len()
            );
        }
    }
    Ok(if errors == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// `capstan render`.
pub fn render(repo: &Path, only: Option<&str>, out_dir: Option<&Path>) -> anyhow::Result<ExitCode> {
    let fleet = load(repo)?;
    if let Some(d) = fleet.unreadable() {
        bail!("{d}");
    }
    if let Some(name) = only
        && fleet.cluster(name).is_none()
    {
        let known: Vec<_> = fleet.clusters.iter().map(|c| c.name.as_str()).collect();
        bail!(
            "no cluster `{name}` in {}; clusters: {}",
            repo.display(),
            known.join(", ")
        );
    }
    let mut failed = false;
    for c in fleet
        .clusters
        .iter()
        .filter(|c| only.is_none_or(|n| n == c.name))
    {
        let Some(objects) = &c.objects else {
            failed = true;
            for d in c.diagnostics.iter().filter(|d| d.is_error()) {
                eprintln!("{d}");
            }
            eprintln!("cluster {} not rendered: it has errors", c.name);
            continue;
        };
        let text = yaml::to_string_multi(&objects.values());
        match out_dir {
            Some(dir) => {
                fs::create_dir_all(dir)?;
                let path = dir.join(format!("{}.yaml", c.name));
                fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
                eprintln!("wrote {} ({} objects)", path.display(), objects.len());
            }
            None => print!("{text}"),
        }
    }
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

pub(super) fn request(
    name: String,
    management: Option<String>,
    v: ClusterValues,
) -> anyhow::Result<ClusterRequest> {
    let values = match &v.values {
        None => None,
        Some(path) => {
            let text =
                fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            let docs = yaml::parse(&text).map_err(|e| {
                anyhow::anyhow!(
                    "{}:{}:{}: {}",
                    path.display(),
                    e.pos.line,
                    e.pos.column,
                    e.message
                )
            })?;
            Some(
                docs.into_iter()
                    .next()
                    .map(|d| d.value)
                    .unwrap_or_else(|| json!({})),
            )
        }
    };
    Ok(ClusterRequest {
        name,
        management,
        provider: v.provider.clone(),
        kubernetes_version: v.kubernetes_version,
        eksa_version: v.eksa_version,
        namespace: v.namespace,
        control_plane_count: v.control_plane_count,
        worker_count: v.worker_count,
        pod_cidr: v.pod_cidr,
        service_cidr: v.service_cidr,
        endpoint_host: v.endpoint_host,
        external_etcd: v.external_etcd,
        docker_backend: v.docker_backend,
        values,
        admins: Vec::new(),
        owners: Vec::new(),
    })
}

pub(super) fn write_files(root: &Path, files: &[(PathBuf, String)]) -> anyhow::Result<()> {
    for (rel, _) in files {
        let path = root.join(rel);
        if path.exists() {
            bail!("{} already exists; not overwriting", path.display());
        }
    }
    for (rel, text) in files {
        let path = root.join(rel);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent)?;
        }
        fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// Writes the scaffolder's changes to existing files (`.github/CODEOWNERS`) and its notes.
fn write_updates(root: &Path, plan: &scaffold::Scaffold) -> anyhow::Result<()> {
    for (rel, text) in &plan.updated {
        let path = root.join(rel);
        fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        println!("updated {}", path.display());
    }
    for note in &plan.notes {
        eprintln!("note: {note}");
    }
    Ok(())
}

/// `capstan init`.
pub fn init(args: InitArgs) -> anyhow::Result<ExitCode> {
    let dir = &args.dir;
    if dir.exists()
        && fs::read_dir(dir)?.next().is_some()
        && dir
            .join(capstan_layout::fleet::CLUSTERS_DIR)
            .join(&args.management)
            .exists()
    {
        bail!(
            "{} already holds clusters/{}; not overwriting",
            dir.display(),
            args.management
        );
    }
    let tree = if dir.exists() {
        Tree::from_dir(dir)?
    } else {
        Tree::new()
    };
    let mut req = request(args.management.clone(), None, args.values)?;
    req.admins = if args.admins.is_empty() {
        vec![Owner::placeholder()]
    } else {
        args.admins
    };
    let plan = scaffold::plan(&tree, &req)?;
    fs::create_dir_all(dir)?;
    write_files(dir, &plan.files)?;
    write_updates(dir, &plan)?;
    if args.git {
        git(dir, &["init", "--quiet", "--initial-branch=main"])?;
        git(dir, &["add", "--all"])?;
        git(
            dir,
            &[
                "-c",
                "user.name=capstan",
                "-c",
                "user.email=capstan@localhost",
                "commit",
                "--quiet",
                "-m",
                &format!("Add management cluster {}", args.management),
            ],
        )?;
        println!(
            "initialised git repository in {} with a first commit",
            dir.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn git(dir: &Path, args: &[&str]) -> anyhow::Result<()> {
    let status = Process::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .status()
        .context("running git")?;
    if !status.success() {
        bail!("git {} failed with {status}", args.join(" "));
    }
    Ok(())
}

/// `capstan new cluster` (with `--open-pr`: on a branch, pushed, as a pull request).
pub fn new_cluster(args: NewClusterArgs) -> anyhow::Result<ExitCode> {
    let mut req = request(args.name, Some(args.management), args.values)?;
    req.owners = args.owners;
    if args.pr.open_pr {
        let title = format!(
            "Add cluster {} (managed by {})",
            req.name,
            req.management.as_deref().unwrap_or_default()
        );
        let branch = format!("capstan/new-cluster-{}", req.name);
        return super::open_pr::open_pr(&args.repo, &args.pr, branch, &title, |dir| {
            scaffold_into(dir, &req)
        });
    }
    scaffold_into(&args.repo, &req)?;
    Ok(ExitCode::SUCCESS)
}

/// Validates the fleet of `repo` with the new cluster, then writes its files.
fn scaffold_into(repo: &Path, req: &ClusterRequest) -> anyhow::Result<()> {
    let tree = Tree::from_dir(repo).with_context(|| format!("reading {}", repo.display()))?;
    let plan = scaffold::plan(&tree, req)?;
    write_files(repo, &plan.files)?;
    write_updates(repo, &plan)?;
    if let Some(c) = plan.fleet.cluster(&req.name) {
        println!(
            "cluster {} validates: {} objects to apply on {}",
            c.name,
            c.objects.as_ref().map_or(0, |o| o.len()),
            c.management()
        );
    }
    Ok(())
}
