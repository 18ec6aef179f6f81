//! `capstan pivot`: a management cluster from its directory in Git, made on a bootstrap cluster
//! and moved onto itself, as "bootstrap & pivot" does by hand with kind, `clusterctl init`,
//! `clusterctl move` and a GitOps install.
//!
//! 1. **Create.** The management directory's cluster is applied to the bootstrap cluster (the
//!    one `--kubeconfig` names, by default `capstan dev up`'s when it runs; or kind with
//!    `clusterctl init`) by capstan's own pass, the agent's, until Ready.
//! 2. **Install.** capstan goes into the new cluster (`--to`, or the kubeconfig Cluster API
//!    wrote for it on the bootstrap cluster) as `capstan install` installs it, its agent scaled
//!    to zero: started now it would apply the management cluster's objects before the move
//!    brings them, and the move would rightly refuse names it did not copy. A new cluster
//!    without Cluster API first gets it, the provider and EKS-A from the components manifests
//!    of the release ([`crate::components`], as `clusterctl init` would), and the step waits
//!    until their Deployments are Available; what cannot be installed stops the step with the
//!    reason, and a second run goes on from here.
//! 3. **Move** ([`crate::mover`]): the management cluster and every cluster of the fleet already
//!    on the bootstrap cluster, with the move's journal and resume.
//! 4. **Hand over.** The management cluster's record in the new cluster marked as waiting for the
//!    agent there (Pending), the agent scaled up; done when the agent has written the record
//!    again and reports the cluster Ready.
//!
//! Each step is idempotent; where a run starts is decided from both clusters' state
//! (`capstan_plan::pivot::start`), so running the same command again resumes any failure and
//! never creates the management cluster twice.

use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use capstan_layout::Role;
use capstan_plan::moving::ClusterKey;
use capstan_plan::pivot::{self, Facts, Journaled, Step};
use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::discovery::ApiResource;

use crate::cli::PivotArgs;
use crate::components;
use crate::install;
use crate::mover::{self, Move};
use crate::reconcile::{self, Outcome};
use crate::status::Phase;

/// How long the installs may take to be enforced.
const INSTALL_WAIT: Duration = Duration::from_secs(120);

/// The revision label of the pivot's own passes (`pivot-<commit>`): the record says the objects
/// came from the pivot until the agent applies a commit that changes them.
fn pivot_revision(checkout: &Path) -> String {
    format!("pivot-{}", super::online::local_revision(checkout))
}

pub(super) fn capi_clusters() -> ApiResource {
    ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
        "cluster.x-k8s.io",
        "v1beta2",
        "Cluster",
    ))
}

pub(super) async fn has_cluster(client: &Client, key: &ClusterKey) -> anyhow::Result<bool> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &key.namespace, &capi_clusters());
    match api.get_opt(&key.name).await {
        Ok(found) => Ok(found.is_some()),
        // No Cluster API here (yet): no Cluster either.
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(false),
        Err(e) => Err(e).with_context(|| format!("reading Cluster {key}")),
    }
}

/// The new cluster: `--to`, else the kubeconfig Cluster API keeps for the management cluster
/// on the bootstrap cluster (`<name>-kubeconfig`, key `value`).
async fn new_cluster(
    args: &PivotArgs,
    boot: &Client,
    key: &ClusterKey,
) -> anyhow::Result<Option<(Client, String)>> {
    if let Some(to) = &args.to {
        let c = crate::k8s::connect(Some(to), args.to_context.as_deref()).await?;
        return Ok(Some((c.client, c.server.to_string())));
    }
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(boot.clone(), &key.namespace);
    let name = format!("{}-kubeconfig", key.name);
    let Some(secret) = secrets.get_opt(&name).await? else {
        return Ok(None);
    };
    let value = secret
        .data
        .as_ref()
        .and_then(|d| d.get("value"))
        .with_context(|| format!("Secret {}/{name} has no key value", key.namespace))?;
    let text = String::from_utf8(value.0.clone())
        .with_context(|| format!("Secret {}/{name}: not a kubeconfig", key.namespace))?;
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&text)
        .with_context(|| format!("Secret {}/{name}: not a kubeconfig", key.namespace))?;
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .with_context(|| format!("Secret {}/{name}", key.namespace))?;
    let server = config.cluster_url.to_string();
    Ok(Some((Client::try_from(config)?, server)))
}

/// capstan's record of a cluster on `client`, if there is one (none either without the CRD).
pub(super) async fn record_of(
    client: &Client,
    name: &str,
) -> anyhow::Result<Option<crate::status::ManagedCluster>> {
    match crate::status::api(client).get_opt(name).await {
        Ok(r) => Ok(r),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading ManagedCluster {name}")),
    }
}

/// What both ends hold now.
async fn facts(boot: &Client, target: Option<&Client>, key: &ClusterKey) -> anyhow::Result<Facts> {
    let mut f = Facts {
        at_bootstrap: has_cluster(boot, key).await?,
        ..Default::default()
    };
    if let Some(t) = target {
        f.at_target = has_cluster(t, key).await?;
        f.journal = mover::journal::read(t).await?.map(|j| Journaled {
            names_management: j.record.clusters.contains(&key.to_string()),
            done: j.record.phase == mover::Phase::Done,
        });
    }
    Ok(f)
}

/// `capstan pivot`.
pub fn run(args: PivotArgs) -> anyhow::Result<ExitCode> {
    crate::serve::logging::init_tracing(false, Some("warn"))?;
    let o = super::install::options(&args.agent)?;
    let fleet = super::load_fleet(&args.checkout)?;
    let entry = fleet
        .clusters
        .iter()
        .find(|c| c.name == o.management && c.role == Role::Management)
        .with_context(|| {
            format!(
                "{} has no management cluster {} (clusters/{}/)",
                args.checkout.display(),
                o.management,
                o.management
            )
        })?;
    let Some(cluster) = entry.cluster.as_ref().filter(|_| entry.is_valid()) else {
        for d in &entry.diagnostics {
            eprintln!("{d}");
        }
        bail!(
            "management cluster {} has errors: nothing done",
            o.management
        );
    };
    let key = ClusterKey {
        namespace: cluster.namespace.clone(),
        name: cluster.name.clone(),
    };
    // The fleet's clusters of this management cluster: those already on the bootstrap cluster
    // move with it.
    let fleet_keys: Vec<ClusterKey> = fleet
        .clusters
        .iter()
        .filter(|c| {
            c.cluster
                .as_ref()
                .is_some_and(|s| s.management == o.management)
        })
        .filter_map(|c| c.cluster.as_ref())
        .map(|s| ClusterKey {
            namespace: s.namespace.clone(),
            name: s.name.clone(),
        })
        .collect();
    let revision = pivot_revision(&args.checkout);
    let started = Instant::now();
    super::runtime()?.block_on(async {
        let (kubeconfig, whose) = bootstrap_kubeconfig(&args);
        let boot = crate::k8s::connect(kubeconfig.as_deref(), args.kube.context.as_deref()).await?;
        eprintln!("bootstrap cluster: {}{whose}", boot.server);
        let missing = install::missing_crds(&boot.client).await?;
        if !missing.is_empty() {
            bail!(
                "the bootstrap cluster lacks Cluster API and EKS Anywhere's CRDs ({}): start one with `capstan dev up`, or run `clusterctl init --infrastructure <provider>` in it",
                missing.join(", ")
            );
        }
        let mut target = new_cluster(&args, &boot.client, &key).await?;
        if let Some((_, server)) = &target
            && *server == boot.server
        {
            bail!("the new cluster and the bootstrap cluster are the same API server ({server})");
        }
        let f = facts(&boot.client, target.as_ref().map(|(c, _)| c), &key).await?;
        let first = pivot::start(&f);
        if args.dry_run {
            return dry_run(&args, &boot.client, target.as_ref().map(|(c, _)| c), &fleet_keys, first, entry).await;
        }
        if first > Step::Create {
            eprintln!("resuming: {key} is past step 1 ({})", first);
        }
        if first == Step::Create {
            say(1, Step::Create, &format!("{key}, revision {revision}"));
            create(&boot.client, &fleet, &o.management, &revision, args.timeout, started).await?;
            crate::failpoint::stop_here("pivot-created").await;
            if target.is_none() {
                target = new_cluster(&args, &boot.client, &key).await?;
            }
        }
        let Some((new, server)) = target else {
            bail!(
                "no kubeconfig for the new cluster: Cluster API has not written Secret {}/{}-kubeconfig on the bootstrap cluster; give it with --to",
                key.namespace,
                key.name
            );
        };
        if first <= Step::Install {
            say(2, Step::Install, &server);
            if let Some(code) = install_components(&args, &new, &o.management, cluster).await? {
                return Ok(code);
            }
            let mut parked = o.clone();
            parked.replicas = 0;
            match install::install(&new, &parked, INSTALL_WAIT).await {
                Err(e @ install::InstallError::MissingCrds(_)) => {
                    eprintln!("error: the new cluster: {e}");
                    eprintln!(
                        "install Cluster API and the {} provider into the new cluster (clusterctl init, or EKS Anywhere's bundle of {}), then run this command again: it goes on from here",
                        cluster.provider.name(),
                        cluster.eksa_version.as_deref().unwrap_or("the release")
                    );
                    return Ok(ExitCode::from(2));
                }
                r => {
                    let report = r?;
                    eprintln!("  installed ({} objects), the agent at 0 replicas until the move is done", report.applied.len());
                }
            }
        }
        if first <= Step::Move {
            let mut clusters = vec![key.clone()];
            for k in fleet_keys.iter().filter(|k| **k != key) {
                if has_cluster(&boot.client, k).await?
                    && pivot::goes_along(record_of(&boot.client, &k.name).await?.as_ref(), k, &o.management)
                {
                    clusters.push(k.clone());
                }
            }
            // A resumed move names the clusters its journal names.
            if let Some(j) = mover::journal::read(&new).await?
                && j.record.phase != mover::Phase::Done
                && j.record.clusters.contains(&key.to_string())
            {
                clusters = j.record.keys();
            }
            say(3, Step::Move, &clusters.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "));
            let m = Move {
                source: boot.client.clone(),
                source_server: boot.server.clone(),
                target: new.clone(),
                clusters,
            };
            if let Some(refused) = super::moving::run_step(&m, "the bootstrap cluster").await? {
                return Ok(refused);
            }
        }
        say(4, Step::HandOver, &format!("the agent at {} replica(s)", o.replicas));
        mark_handing_over(&new, &o.management).await?;
        install::install(&new, &o, INSTALL_WAIT).await?;
        hand_over(&new, &o.management, args.timeout).await?;
        println!(
            "pivoted: management cluster {} runs from {server} and manages itself ({:.1}s)",
            o.management,
            started.elapsed().as_secs_f64()
        );
        Ok(ExitCode::SUCCESS)
    })
}

/// Step 2's first half: a new cluster without Cluster API gets what runs a management cluster
/// from the components manifests of the management cluster's release ([`crate::components`]),
/// as `clusterctl init` would install it; one that has it (an operator ran `clusterctl init`)
/// is left as it is. Either way the components capstan installed (by an earlier run too) must be
/// Available before anything moves: their webhooks admit what the move creates. `Some(exit
/// code)` when the run stops here.
async fn install_components(
    args: &PivotArgs,
    new: &Client,
    management: &str,
    cluster: &capstan_templates::spec::Cluster,
) -> anyhow::Result<Option<ExitCode>> {
    let missing = install::missing_crds(new).await?;
    if !missing.is_empty() {
        let (checkout, mgmt, addon) = (
            args.checkout.clone(),
            management.to_string(),
            args.addon_provider.clone(),
        );
        let read = tokio::task::spawn_blocking(move || {
            super::install::components_objects(&checkout, &mgmt, addon.as_deref())
        })
        .await?;
        match read {
            Ok(objects) => {
                eprintln!(
                    "  the new cluster lacks {}: installing the components of EKS Anywhere {} ({} objects)",
                    missing.join(", "),
                    cluster.eksa_version.as_deref().unwrap_or("the release"),
                    objects.len()
                );
                crate::install::apply_by(new, &objects, components::FIELD_MANAGER, INSTALL_WAIT)
                    .await?;
            }
            Err(e) => {
                eprintln!("error: the new cluster lacks {}", missing.join(", "));
                eprintln!("and the release's components cannot be installed: {e:#}");
                eprintln!(
                    "install Cluster API and the {} provider into the new cluster (clusterctl init, or EKS Anywhere's bundle of {}), then run this command again: it goes on from here",
                    cluster.provider.name(),
                    cluster.eksa_version.as_deref().unwrap_or("the release")
                );
                return Ok(Some(ExitCode::from(2)));
            }
        }
    }
    match components::wait_available(new, args.components_wait).await {
        Ok(()) => Ok(None),
        Err(e @ components::ComponentsError::NotAvailable { .. }) => {
            eprintln!("error: the components in the new cluster are {e}");
            eprintln!("nothing was moved; run this command again to keep waiting");
            Ok(Some(ExitCode::from(2)))
        }
        Err(e) => Err(e.into()),
    }
}

/// The bootstrap cluster's kubeconfig: `--kubeconfig`; else the local control plane `capstan
/// dev up` runs, if one runs (a throwaway cluster: never a cluster `$KUBECONFIG` happens to
/// name); else kube's defaults. With what to say of it.
fn bootstrap_kubeconfig(args: &PivotArgs) -> (Option<std::path::PathBuf>, &'static str) {
    if args.kube.kubeconfig.is_some() {
        return (args.kube.kubeconfig.clone(), "");
    }
    #[cfg(feature = "dev")]
    if args.kube.context.is_none()
        && let Some(k) = super::dev::running_kubeconfig()
    {
        return (Some(k), " (the local control plane `capstan dev up` runs)");
    }
    (None, "")
}

fn say(n: usize, step: Step, what: &str) {
    eprintln!("[{n}/4] {step}: {what}");
}

/// Step 1: capstan's pass of the management cluster alone, on the bootstrap cluster, until it
/// settles; Ready or an error.
async fn create(
    boot: &Client,
    fleet: &capstan_layout::Fleet,
    management: &str,
    revision: &str,
    timeout: Duration,
    started: Instant,
) -> anyhow::Result<()> {
    install::install_crd(boot).await?;
    install::install_tenancy(boot, &install::rbac::rules(), INSTALL_WAIT).await?;
    let opts = reconcile::Options {
        only: Some(management.to_string()),
        management: Some(management.to_string()),
        revision: revision.to_string(),
        ..Default::default()
    };
    let passes = reconcile::converge_with(
        boot,
        fleet,
        &opts,
        timeout,
        super::online::progress_printer(started),
    )
    .await?;
    let out: &Outcome = passes.last();
    match out.clusters.iter().find(|c| c.name == management) {
        Some(c) if c.phase == Phase::Ready => {
            eprintln!("  {management} Ready: {}", c.message);
            Ok(())
        }
        Some(c) => bail!(
            "{management} is not Ready on the bootstrap cluster after {}s: {} — {}; nothing was moved, run this command again to go on",
            timeout.as_secs(),
            c.phase.as_str(),
            c.message
        ),
        None => bail!("{management}: the pass did not reach it"),
    }
}

/// The field manager of the pivot's mark on the management cluster's record.
const MANAGER: &str = "capstan-pivot";

/// What the record says from the move until the agent in the new cluster writes it.
const HANDING_OVER: &str =
    "moved by capstan pivot: waiting for capstan in this cluster to take over";

/// Marks the management cluster's record in the new cluster as waiting for the agent there
/// (Pending). Its first pass writes the record again, whatever revision it applies (a revision
/// that changes nothing keeps the record's revisions): the record leaving the mark is how the
/// hand-over is seen.
async fn mark_handing_over(new: &Client, management: &str) -> anyhow::Result<()> {
    let body = serde_json::json!({
        "apiVersion": crate::status::API_VERSION, "kind": "ManagedCluster",
        "status": {"phase": Phase::Pending.as_str(), "message": HANDING_OVER},
    });
    crate::write::apply_status(
        &crate::status::api(new),
        management,
        &crate::write::Apply::by(MANAGER),
        &body,
    )
    .await
    .with_context(|| format!("marking ManagedCluster {management} as handed over"))?;
    Ok(())
}

/// Step 4: waits until the agent in the new cluster has written the management cluster's record
/// since [`mark_handing_over`], and found it Ready.
async fn hand_over(new: &Client, management: &str, timeout: Duration) -> anyhow::Result<()> {
    let api = crate::status::api(new);
    let taken = kube::runtime::wait::await_condition(
        api,
        management,
        |mc: Option<&crate::status::ManagedCluster>| {
            mc.and_then(|m| m.status.as_ref())
                .is_some_and(|s| s.phase == Some(Phase::Ready) && s.message != HANDING_OVER)
        },
    );
    match tokio::time::timeout(timeout, taken).await {
        Ok(Ok(mc)) => {
            let message = mc
                .and_then(|m| m.status)
                .map(|s| s.message)
                .unwrap_or_default();
            eprintln!("  the agent in the new cluster reports {management} Ready: {message}");
            Ok(())
        }
        Ok(Err(e)) => Err(anyhow::anyhow!(
            "waiting for ManagedCluster {management}: {e}"
        )),
        Err(_) => {
            let health = install::health(new).await.unwrap_or_default();
            bail!(
                "the agent in the new cluster did not report {management} applied and Ready within {}s{}; the move is done, run this command again to keep waiting",
                timeout.as_secs(),
                if health.is_empty() {
                    String::new()
                } else {
                    format!(":\n  {}", health.join("\n  "))
                }
            )
        }
    }
}

/// `--dry-run`: the steps this run would take and, for the move, its plan (when the clusters are
/// on the bootstrap cluster) or the objects the pass would create and then move.
async fn dry_run(
    args: &PivotArgs,
    boot: &Client,
    target: Option<&Client>,
    fleet_keys: &[ClusterKey],
    first: Step,
    entry: &capstan_layout::ClusterEntry,
) -> anyhow::Result<ExitCode> {
    let management = entry.name.as_str();
    for (n, step) in [Step::Create, Step::Install, Step::Move, Step::HandOver]
        .into_iter()
        .enumerate()
    {
        let done = if step < first { "  (done)" } else { "" };
        println!("[{}/4] {step}{done}", n + 1);
    }
    let mut on_boot = Vec::new();
    for k in fleet_keys {
        if has_cluster(boot, k).await?
            && (k.name == management
                || pivot::goes_along(record_of(boot, &k.name).await?.as_ref(), k, management))
        {
            on_boot.push(k.clone());
        }
    }
    match target {
        Some(t) if !on_boot.is_empty() && first <= Step::Move => {
            let m = Move {
                source: boot.clone(),
                source_server: String::new(),
                target: t.clone(),
                clusters: on_boot,
            };
            super::moving::print_plan(&m, true).await
        }
        _ => {
            let objects: &[capstan_layout::objects::Rendered] =
                entry.objects.as_deref().unwrap_or_default();
            println!(
                "would create {} objects of {} on the bootstrap cluster, then move them (kinds in apply order):",
                objects.len(),
                entry.name
            );
            let mut kinds: Vec<(&str, usize)> = Vec::new();
            for o in objects {
                match kinds.iter_mut().find(|(k, _)| *k == o.kind()) {
                    Some((_, n)) => *n += 1,
                    None => kinds.push((o.kind(), 1)),
                }
            }
            for (kind, n) in kinds {
                println!("  {n:>5}  {kind}");
            }
            if args.to.is_none() {
                println!(
                    "the new cluster: the kubeconfig Cluster API writes on the bootstrap cluster once it is up"
                );
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
