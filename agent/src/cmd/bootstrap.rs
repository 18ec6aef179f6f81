//! `capstan bootstrap`: what `flux bootstrap git` is for Flux.
//!
//! 1. Clone the repository's branch (an empty repository, or a missing branch, starts empty),
//!    with the deploy key when it is an ssh:// remote; an unknown host key is accepted once and
//!    kept, as `flux bootstrap` scans it.
//! 2. A repository without `clusters/` gets the fleet skeleton, as `capstan init` writes it.
//! 3. The agent's install manifests go to `<path>/<management>.yaml`, so the agent's own
//!    version is kept in Git (re-running bootstrap after editing the flags, or a new capstan,
//!    updates both). They live outside `clusters/` on purpose: the agent does not apply them
//!    itself, since writing its own RBAC would let it grant itself anything.
//! 4. Commit and push when anything changed; apply the manifests (`capstan install`); create the
//!    Secret `capstan-git` from the deploy key and known_hosts, and `capstan-webhook` with a
//!    random secret when there is none.
//! 5. Wait until the agent reports the pushed commit applied to the management cluster's
//!    ManagedCluster; on timeout, say what the agent's Deployment reports.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta};

use crate::cli::{BootstrapArgs, ClusterValues};
use crate::install::{self, manifests};
use crate::status::NAMESPACE;

/// `git` in a directory, with the deploy key when there is one.
struct Git {
    dir: PathBuf,
    ssh: Option<String>,
}

impl Git {
    fn run(&self, args: &[&str]) -> anyhow::Result<String> {
        let mut cmd = Command::new("git");
        cmd.arg("-C").arg(&self.dir).args(args);
        cmd.env("GIT_TERMINAL_PROMPT", "0");
        if let Some(ssh) = &self.ssh {
            cmd.env("GIT_SSH_COMMAND", ssh);
        }
        let out = cmd.output().context("running git")?;
        if !out.status.success() {
            bail!(
                "git {} failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }
}

/// `capstan bootstrap`.
pub fn bootstrap(args: BootstrapArgs) -> anyhow::Result<ExitCode> {
    let o = super::install::options(&args.agent)?;
    let tmp = tempfile::tempdir()?;
    let work = tmp.path().join("repo");
    std::fs::create_dir_all(&work)?;
    // The deploy key and known_hosts: what bootstrap pushes with and the agent reads with.
    let known_hosts = tmp.path().join("known_hosts");
    if let Some(k) = &args.known_hosts {
        std::fs::copy(k, &known_hosts).with_context(|| format!("reading {}", k.display()))?;
    }
    let key = match &args.ssh_key {
        Some(k) => Some(std::fs::read(k).with_context(|| format!("reading {}", k.display()))?),
        None if o.ssh() => bail!(
            "{} is an ssh:// repository: --ssh-key (the deploy key) is required",
            o.repo
        ),
        None => None,
    };
    let ssh = args.ssh_key.as_ref().map(|k| {
        format!(
            "ssh -i {} -o IdentitiesOnly=yes -o BatchMode=yes -o UserKnownHostsFile={} -o StrictHostKeyChecking={}",
            k.display(),
            known_hosts.display(),
            if args.known_hosts.is_some() { "yes" } else { "accept-new" }
        )
    });
    let git = Git {
        dir: work.clone(),
        ssh,
    };
    git.run(&["init", "--quiet"])?;
    git.run(&["remote", "add", "origin", &o.repo])?;
    let branch = &o.branch;
    let existing = git.run(&["fetch", "--quiet", "origin", branch]).is_ok();
    if existing {
        git.run(&["checkout", "--quiet", "-B", branch, "FETCH_HEAD"])?;
        eprintln!("cloned {} ({branch})", o.repo);
    } else {
        git.run(&["checkout", "--quiet", "--orphan", branch])?;
        eprintln!("{} has no branch {branch}: starting it", o.repo);
    }

    let mut wrote = Vec::new();
    if !work.join(capstan_layout::fleet::CLUSTERS_DIR).exists() {
        let v = &args.values;
        let provider = v.provider.clone().context(
            "the repository has no fleet yet: --provider, --pod-cidr and --service-cidr (as for `capstan init`) describe its management cluster",
        )?;
        let values = ClusterValues {
            provider,
            kubernetes_version: None,
            eksa_version: None,
            namespace: v.namespace.clone(),
            control_plane_count: None,
            worker_count: None,
            pod_cidr: v.pod_cidr.clone(),
            service_cidr: v.service_cidr.clone(),
            endpoint_host: v.endpoint_host.clone(),
            external_etcd: None,
            docker_backend: v.docker_backend.clone(),
            values: None,
        };
        let req = super::offline::request(o.management.clone(), None, values)?;
        let plan = capstan_layout::scaffold::plan(&capstan_layout::Tree::new(), &req)?;
        super::offline::write_files(&work, &plan.files)?;
        wrote.push(format!(
            "the fleet skeleton of management cluster {}",
            o.management
        ));
    }
    let manifest = Path::new(&args.path).join(format!("{}.yaml", o.management));
    let text = manifests::to_yaml(&o);
    let path = work.join(&manifest);
    if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
        std::fs::create_dir_all(path.parent().expect("a file in a directory"))?;
        std::fs::write(&path, &text)?;
        wrote.push(format!("the agent's manifests ({})", manifest.display()));
    }
    if !wrote.is_empty() {
        git.run(&["add", "--all"])?;
        git.run(&[
            "-c",
            "user.name=capstan",
            "-c",
            "user.email=capstan@localhost",
            "commit",
            "--quiet",
            "-m",
            &format!("capstan bootstrap: {}", wrote.join(", ")),
        ])?;
        git.run(&[
            "push",
            "--quiet",
            "origin",
            &format!("HEAD:refs/heads/{branch}"),
        ])?;
        eprintln!("pushed {}", wrote.join(" and "));
    }
    let head = git.run(&["rev-parse", "HEAD"])?;

    let started = Instant::now();
    super::runtime()?.block_on(async {
        let conn = crate::k8s::connect(args.kube.kubeconfig.as_deref(), args.kube.context.as_deref()).await?;
        let report = install::install(&conn.client, &o, Duration::from_secs(120)).await?;
        eprintln!("installed capstan ({} objects) into {}", report.applied.len(), conn.server);
        let secrets: Api<Secret> = Api::namespaced(conn.client.clone(), NAMESPACE);
        let pp = crate::write::Apply::by(install::FIELD_MANAGER);
        let secret = |name: &str, data: Vec<(&str, Vec<u8>)>| Secret {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(NAMESPACE.into()),
                ..Default::default()
            },
            data: Some(data.into_iter().map(|(k, v)| (k.to_string(), ByteString(v))).collect()),
            type_: Some("Opaque".into()),
            ..Default::default()
        };
        if let Some(key) = key {
            let hosts = std::fs::read(&known_hosts).unwrap_or_default();
            let s = secret(manifests::GIT_SECRET, vec![("identity", key), ("known_hosts", hosts)]);
            crate::write::apply(&secrets, manifests::GIT_SECRET, &pp, &s).await.context("creating the Git credentials Secret")?;
            eprintln!("Secret {NAMESPACE}/{} holds the deploy key", manifests::GIT_SECRET);
        }
        if secrets.get_opt(manifests::WEBHOOK_SECRET).await?.is_none() {
            let value: String = (0..32).map(|_| format!("{:02x}", fastrand::u8(..))).collect();
            let s = secret(manifests::WEBHOOK_SECRET, vec![("secret", value.into_bytes())]);
            crate::write::apply(&secrets, manifests::WEBHOOK_SECRET, &pp, &s).await.context("creating the webhook Secret")?;
            eprintln!(
                "Secret {NAMESPACE}/{} holds a new webhook secret: give it to GitHub (kubectl -n {NAMESPACE} get secret {} -o jsonpath='{{.data.secret}}' | base64 -d)",
                manifests::WEBHOOK_SECRET,
                manifests::WEBHOOK_SECRET
            );
        }
        eprintln!("waiting for the agent to apply {head} to {}", o.management);
        let api = crate::status::api(&conn.client);
        let applied = kube::runtime::wait::await_condition(api, &o.management, |mc: Option<&crate::status::ManagedCluster>| {
            mc.and_then(|m| m.status.as_ref()).is_some_and(|s| s.last_applied_revision == head)
        });
        match tokio::time::timeout(args.timeout, applied).await {
            Ok(Ok(_)) => anyhow::Ok(()),
            Ok(Err(e)) => Err(anyhow::anyhow!("waiting for ManagedCluster {}: {e}", o.management)),
            Err(_) => {
                let health = install::health(&conn.client).await.unwrap_or_default();
                bail!(
                    "the agent did not report {head} applied within {:?}{}",
                    args.timeout,
                    if health.is_empty() { String::new() } else { format!(":\n  {}", health.join("\n  ")) }
                )
            }
        }
    })?;
    println!(
        "bootstrapped: the agent applied {head} to management cluster {} in {:.1}s",
        o.management,
        started.elapsed().as_secs_f64()
    );
    Ok(ExitCode::SUCCESS)
}
