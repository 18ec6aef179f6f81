//! `capstan install` and `capstan uninstall`.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, bail};

use crate::cli::{AgentArgs, InstallArgs, KubeArgs};
use crate::components;
use crate::install::{self, Options, manifests, rbac};

/// The install options from the command line.
pub fn options(a: &AgentArgs) -> anyhow::Result<Options> {
    let repo = a
        .repo
        .as_deref()
        .context("--repo is required: the repository the agent follows")?;
    let management = a
        .management
        .as_deref()
        .context("--management is required: the management cluster this is")?;
    let mut o = Options::new(repo, &a.branch, management);
    o.image = a.image.clone();
    o.interval = a.interval.clone();
    o.replicas = a.replicas;
    o.backup_access_mode = a.backup_access_mode.clone();
    o.backup_size = a.backup_size.clone();
    o.backup_storage_class = a.backup_storage_class.clone();
    o.dashboard = a.dashboard;
    o.cluster_profiles = a.cluster_profiles.clone();
    o.verify_commits = a.verify_commits.map(|v| match v {
        crate::cli::VerifyCommits::Head => "head".to_string(),
        crate::cli::VerifyCommits::All => "all".to_string(),
    });
    o.trusted_keys_secret = a
        .trusted_keys_secret
        .as_deref()
        .map(|s| match s.split_once('/') {
            Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
                Ok((ns.to_string(), name.to_string()))
            }
            _ => Err(anyhow::anyhow!(
                "--trusted-keys-secret {s}: expected NAMESPACE/NAME"
            )),
        })
        .transpose()?;
    o.backup_recipients_secret = a.backup_recipients_secret.clone();
    o.backup_plaintext = a.backup_plaintext;
    o.allow = a
        .allow
        .iter()
        .map(|r| rbac::allow(r).map_err(anyhow::Error::msg))
        .collect::<anyhow::Result<_>>()?;
    Ok(o)
}

/// `capstan install`.
pub fn install(args: InstallArgs) -> anyhow::Result<ExitCode> {
    if args.export {
        if args.cluster_api {
            // What --cluster-api would apply first, for review.
            let o = options(&args.agent)?;
            let objects = components_objects(
                &args.checkout,
                &o.management,
                args.addon_provider.as_deref(),
            )?;
            print!("{}", capstan_templates::yaml::to_string_multi(&objects));
        }
        if args.crd_only {
            print!("{}", crate::status::api::crd_yaml());
        } else {
            print!("{}", manifests::to_yaml(&options(&args.agent)?));
        }
        return Ok(ExitCode::SUCCESS);
    }
    let objects = if args.crd_only {
        None
    } else {
        Some(options(&args.agent)?)
    };
    // Everything the components need is read and checked before anything is written.
    let components = match (&objects, args.cluster_api) {
        (Some(o), true) => Some(components_objects(
            &args.checkout,
            &o.management,
            args.addon_provider.as_deref(),
        )?),
        (None, true) => {
            bail!("--cluster-api installs the management cluster's release: not with --crd-only")
        }
        _ => None,
    };
    let report = super::runtime()?.block_on(async {
        let conn = crate::k8s::connect(
            args.kube.kubeconfig.as_deref(),
            args.kube.context.as_deref(),
        )
        .await?;
        if let Some(c) = &components {
            eprintln!(
                "installing Cluster API, the provider and EKS Anywhere into {} ({} objects)",
                conn.server,
                c.len()
            );
            crate::install::apply_by(&conn.client, c, components::FIELD_MANAGER, args.wait).await?;
            components::wait_available(&conn.client, args.components_wait).await?;
            let n = c.len();
            eprintln!("  {n} objects applied, their Deployments Available");
        }
        eprintln!("installing capstan into {} ({})", conn.server, conn.source);
        anyhow::Ok(match &objects {
            Some(o) => install::install(&conn.client, o, args.wait).await?,
            None => install::install_crd(&conn.client).await?,
        })
    })?;
    for a in &report.applied {
        println!("applied {a}");
    }
    if objects.is_some() {
        println!(
            "capstan installed; it reads the Secrets {} (deploy key), {} (webhook) and {} (GitHub token) in {} when they exist",
            manifests::GIT_SECRET,
            manifests::WEBHOOK_SECRET,
            manifests::GITHUB_SECRET,
            crate::status::NAMESPACE
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `capstan uninstall`.
pub fn uninstall(purge: bool, kube: &KubeArgs) -> anyhow::Result<ExitCode> {
    let deleted = super::runtime()?.block_on(async {
        let conn = crate::k8s::connect(kube.kubeconfig.as_deref(), kube.context.as_deref()).await?;
        anyhow::Ok(install::uninstall(&conn.client, purge).await?)
    })?;
    for d in &deleted {
        println!("deleted {d}");
    }
    if !purge {
        println!(
            "managed clusters and their ManagedCluster records are left as they are (--purge removes the records)"
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The objects of what runs the management cluster `management` ([`components`]): its release's
/// components manifests for its provider and Kubernetes minor, and the add-on provider's at
/// `addon` (a path from the repository root, or https), read from `checkout` and filled from the
/// environment. Blocking.
pub(super) fn components_objects(
    checkout: &Path,
    management: &str,
    addon: Option<&str>,
) -> anyhow::Result<Vec<serde_json::Value>> {
    let tree = capstan_layout::Tree::from_dir(checkout)
        .with_context(|| format!("reading {}", checkout.display()))?;
    let fleet = super::load_tree(&tree)?;
    let entry = fleet
        .clusters
        .iter()
        .find(|c| c.name == management && c.role == capstan_layout::Role::Management)
        .with_context(|| {
            format!(
                "{} has no management cluster {management}",
                checkout.display()
            )
        })?;
    let (Some(cluster), Some(release)) = (
        entry.cluster.as_ref().filter(|_| entry.is_valid()),
        entry.release.as_ref(),
    ) else {
        for d in &entry.diagnostics {
            eprintln!("{d}");
        }
        bail!("management cluster {management} has errors: nothing installed");
    };
    let bundle = release
        .versions_bundle(cluster.kubernetes_version)
        .with_context(|| {
            format!(
                "release {} has no Kubernetes {}",
                release.version, cluster.kubernetes_version
            )
        })?;
    let addon = addon
        .map(|a| {
            capstan_templates::release::Location::parse(a)
                .filter(|l| l.is_remote())
                .or_else(|| capstan_templates::release::Location::repo_file(a))
                .with_context(|| {
                    format!("--addon-provider {a}: an https URL or a path from the repository root")
                })
        })
        .transpose()?;
    let wanted = components::wanted(release, bundle, cluster.provider.name(), addon.as_ref())?;
    let pins = fleet
        .configs
        .get(management)
        .and_then(|c| c.release.as_ref())
        .map(|r| r.pins.clone())
        .unwrap_or_default();
    let manifests = components::read(checkout, &tree, &wanted, &pins)?;
    Ok(components::objects(&manifests, |n| std::env::var(n).ok())?)
}
