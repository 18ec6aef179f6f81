//! `capstan install` and `capstan uninstall`.

use std::process::ExitCode;

use anyhow::Context;

use crate::cli::{AgentArgs, InstallArgs, KubeArgs};
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
    let report = super::runtime()?.block_on(async {
        let conn = crate::k8s::connect(
            args.kube.kubeconfig.as_deref(),
            args.kube.context.as_deref(),
        )
        .await?;
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
