//! `capstan back-out`: a management cluster that manages itself, and its workload clusters,
//! taken down in Cluster API's order from a temporary cluster — the pivot backwards, driven by
//! the management directory's tombstone (the rules and the resume table are
//! [`capstan_plan::back_out`]'s).
//!
//! 1. **Stop.** capstan's agent in the management cluster is scaled to zero, and the back-out
//!    waits for its leader lease to be let go: running, it would re-create from Git what leaves.
//! 2. **Move** ([`crate::mover`]): the management cluster and the workload clusters its records
//!    there say are its own, onto the temporary cluster (`--to`), with the move's journal.
//! 3. **Delete the workload clusters** there, by capstan's own pass carrying out their
//!    tombstones (the CAPI Cluster first, the rest once the machines are gone), until gone.
//! 4. **Delete the management cluster** there the same way, until gone.
//!
//! Every step is idempotent, and where a run starts is read from both clusters
//! ([`back_out::start`]): the same command again resumes any failure.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use capstan_layout::{Fleet, Role};
use capstan_plan::back_out::{self, Facts, Step};
use capstan_plan::moving::{ClusterKey, RECORDS_NAMESPACE};
use capstan_plan::pivot::{self, Journaled};
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams};

use super::pivot::{capi_clusters, has_cluster, record_of};
use crate::cli::BackOutArgs;
use crate::mover::{self, Move};
use crate::reconcile;

/// How long the installs into the temporary cluster may take to be enforced.
const INSTALL_WAIT: Duration = Duration::from_secs(120);

/// The field manager of the back-out's own writes (the agent's replicas).
const MANAGER: &str = "capstan-back-out";

/// The clusters of a back-out: the management cluster and the workload clusters its records
/// say are its own, found where they are.
struct Clusters {
    management: ClusterKey,
    workloads: Vec<ClusterKey>,
}

impl Clusters {
    fn all(&self) -> Vec<ClusterKey> {
        std::iter::once(self.management.clone())
            .chain(self.workloads.iter().cloned())
            .collect()
    }
}

/// Finds the clusters from capstan's records: on the management cluster, else (moved already)
/// on the temporary cluster. `None`: no record of the management cluster at either end.
async fn clusters(
    fleet: &Fleet,
    management: &str,
    ends: [&Client; 2],
) -> anyhow::Result<Option<Clusters>> {
    for end in ends {
        let Some(record) = record_of(end, management).await? else {
            continue;
        };
        let Some(key) = pivot::recorded_cluster(&record) else {
            continue;
        };
        let mut workloads = Vec::new();
        for e in fleet
            .clusters
            .iter()
            .filter(|e| e.role != Role::Management && e.management() == management)
        {
            let record = record_of(end, &e.name).await?;
            if let Some(k) = record.as_ref().and_then(pivot::recorded_cluster)
                && pivot::goes_along(record.as_ref(), &k, management)
            {
                workloads.push(k);
            }
        }
        return Ok(Some(Clusters {
            management: key,
            workloads,
        }));
    }
    Ok(None)
}

/// Every Cluster API Cluster on `client` (namespace/name) and whether it is being deleted.
async fn all_clusters(client: &Client) -> anyhow::Result<Vec<(ClusterKey, bool)>> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &capi_clusters());
    let list = api
        .list(&ListParams::default())
        .await
        .context("listing Cluster API Clusters")?;
    Ok(list
        .items
        .into_iter()
        .map(|c| {
            (
                ClusterKey {
                    namespace: c.metadata.namespace.clone().unwrap_or_default(),
                    name: c.metadata.name.clone().unwrap_or_default(),
                },
                c.metadata.deletion_timestamp.is_some(),
            )
        })
        .collect())
}

/// What both ends hold now.
async fn facts(
    fleet: &Fleet,
    management: &str,
    found: &Clusters,
    source: &Client,
    temporary: &Client,
) -> anyhow::Result<Facts> {
    let tombstone = fleet
        .clusters
        .iter()
        .any(|e| e.name == management && e.intent.delete.is_some());
    let moving = found.all();
    let mut f = Facts {
        tombstone,
        at_management: has_cluster(source, &found.management).await?,
        at_temporary: has_cluster(temporary, &found.management).await?,
        ..Default::default()
    };
    for k in &found.workloads {
        if has_cluster(temporary, k).await? {
            f.workloads_at_temporary += 1;
        }
    }
    if f.at_management {
        for (k, deleting) in all_clusters(source).await? {
            if !moving.contains(&k) {
                f.others.push(k.to_string());
            } else if deleting {
                f.being_deleted.push(k.to_string());
            }
        }
    }
    f.journal = mover::journal::read(temporary).await?.map(|j| Journaled {
        names_management: j.record.clusters.contains(&found.management.to_string()),
        done: j.record.phase == mover::Phase::Done,
    });
    Ok(f)
}

/// `capstan back-out`.
pub fn run(args: BackOutArgs) -> anyhow::Result<ExitCode> {
    crate::serve::logging::init_tracing(false, Some("warn"))?;
    let fleet = super::load_fleet(&args.checkout)?;
    let management = match &args.management {
        Some(m) => m.clone(),
        None => {
            let all: Vec<&str> = fleet
                .clusters
                .iter()
                .filter(|e| e.role == Role::Management)
                .map(|e| e.name.as_str())
                .collect();
            match all[..] {
                [one] => one.to_string(),
                _ => bail!(
                    "name the management cluster with --management (the checkout has {})",
                    if all.is_empty() {
                        "none".to_string()
                    } else {
                        all.join(", ")
                    }
                ),
            }
        }
    };
    let Some(entry) = fleet
        .clusters
        .iter()
        .find(|e| e.name == management && e.role == Role::Management)
    else {
        bail!(
            "{} has no management cluster {management} (clusters/{management}/)",
            args.checkout.display()
        );
    };
    // The layout's refusals hold here as in the agent: a management tombstone while a workload
    // directory has none is an error of the checkout.
    let errors: Vec<String> = fleet
        .clusters
        .iter()
        .filter(|e| e.name == management || e.management() == management)
        .flat_map(|e| e.diagnostics.iter().filter(|d| d.is_error()))
        .map(ToString::to_string)
        .collect();
    if entry.intent.delete.is_some() && !errors.is_empty() {
        for e in &errors {
            eprintln!("{e}");
        }
        eprintln!("error: the checkout does not back out {management}: nothing done");
        return Ok(ExitCode::from(2));
    }
    let revision = format!("back-out-{}", super::online::local_revision(&args.checkout));
    let started = Instant::now();
    super::runtime()?.block_on(async {
        let source = crate::k8s::connect(args.kube.kubeconfig.as_deref(), args.kube.context.as_deref()).await?;
        let temporary = crate::k8s::connect(Some(&args.to), args.to_context.as_deref()).await?;
        if source.server == temporary.server {
            bail!("the management cluster and the temporary cluster are the same API server ({})", source.server);
        }
        eprintln!("management cluster {management}: {}; temporary cluster: {}", source.server, temporary.server);
        let Some(found) = clusters(&fleet, &management, [&source.client, &temporary.client]).await? else {
            if entry.intent.delete.is_none() {
                eprintln!("error: {}", back_out::refusal(&management, &Facts::default()).unwrap_or_default());
                return Ok(ExitCode::from(2));
            }
            println!("backed out: neither cluster holds a record of {management}; nothing to do");
            return Ok(ExitCode::SUCCESS);
        };
        let f = facts(&fleet, &management, &found, &source.client, &temporary.client).await?;
        if let Some(why) = back_out::refusal(&management, &f) {
            eprintln!("error: {why}");
            return Ok(ExitCode::from(2));
        }
        let first = back_out::start(&f);
        if args.dry_run {
            return dry_run(&source.client, &temporary.client, &found, first).await;
        }
        if first > Step::Stop && first < Step::Done {
            let n = first as usize + 1;
            eprintln!("resuming at step {n} ({first}): what comes before it is done");
        }
        if first <= Step::Stop {
            say(1, Step::Stop, &format!("{RECORDS_NAMESPACE}/{}", crate::install::manifests::NAME));
            stop_agent(&source.client, args.timeout).await?;
        }
        if first <= Step::Move {
            let mut keys = found.all();
            let mut present = Vec::new();
            for k in keys.drain(..) {
                if has_cluster(&source.client, &k).await? || has_cluster(&temporary.client, &k).await? {
                    present.push(k);
                }
            }
            if let Some(j) = mover::journal::read(&temporary.client).await?
                && j.record.phase != mover::Phase::Done
                && j.record.clusters.contains(&found.management.to_string())
            {
                present = j.record.keys();
            }
            say(2, Step::Move, &present.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "));
            // What the pass there needs: capstan's record type and its tenancy policy.
            crate::install::install_crd(&temporary.client).await?;
            crate::install::install_tenancy(&temporary.client, &crate::install::rbac::rules(), INSTALL_WAIT).await?;
            let m = Move {
                source: source.client.clone(),
                source_server: source.server.to_string(),
                target: temporary.client.clone(),
                clusters: present,
            };
            if let Some(refused) = super::moving::run_step(&m, "the management cluster").await? {
                return Ok(refused);
            }
            crate::failpoint::stop_here("back-out-moved").await;
        }
        let opts = reconcile::Options {
            management: Some(management.clone()),
            revision: revision.clone(),
            ..Default::default()
        };
        if first <= Step::DeleteWorkloads {
            say(3, Step::DeleteWorkloads, &found.workloads.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "));
            // The management cluster's tombstone is refused in this pass (it is not backing
            // out yet): its workload clusters go first.
            delete(&temporary.client, &fleet, &opts, &found.workloads, args.timeout, started).await?;
        }
        say(4, Step::DeleteManagement, &found.management.to_string());
        let last = reconcile::Options {
            only: Some(management.clone()),
            backing_out: true,
            ..opts
        };
        delete(&temporary.client, &fleet, &last, std::slice::from_ref(&found.management), args.timeout, started).await?;
        println!(
            "backed out: {} cluster(s) deleted from {}, {management} last ({:.1}s); the temporary cluster can go",
            found.workloads.len() + 1,
            temporary.server,
            started.elapsed().as_secs_f64()
        );
        Ok(ExitCode::SUCCESS)
    })
}

fn say(n: usize, step: Step, what: &str) {
    eprintln!("[{n}/4] {step}: {what}");
}

/// Step 1: the agent's Deployment at zero replicas, and its leader lease let go (or expired).
async fn stop_agent(source: &Client, timeout: Duration) -> anyhow::Result<()> {
    use k8s_openapi::api::apps::v1::Deployment;
    let deployments: Api<Deployment> = Api::namespaced(source.clone(), RECORDS_NAMESPACE);
    let name = crate::install::manifests::NAME;
    if deployments.get_opt(name).await?.is_some() {
        crate::write::merge(
            &deployments,
            name,
            &crate::write::Merge::blind().by(MANAGER),
            &serde_json::json!({"spec": {"replicas": 0}}),
        )
        .await
        .with_context(|| format!("scaling Deployment {RECORDS_NAMESPACE}/{name} to 0"))?;
    }
    let deadline = Instant::now() + timeout;
    let mut said = String::new();
    while let Some(running) = mover::graph::source_agent(source).await? {
        let why = running.to_string();
        if why != said {
            eprintln!("  waiting: {why}");
            said = why;
        }
        if Instant::now() >= deadline {
            bail!(
                "capstan's agent in the management cluster did not stop within {}s: {said}; run this command again to keep waiting",
                timeout.as_secs()
            );
        }
        // The lease expires on the clock, with no event to wait for.
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    eprintln!("  stopped");
    Ok(())
}

/// Steps 3 and 4: capstan's pass on the temporary cluster until it settles, then every one of
/// `keys` gone, or an error saying which is not.
async fn delete(
    temporary: &Client,
    fleet: &Fleet,
    opts: &reconcile::Options,
    keys: &[ClusterKey],
    timeout: Duration,
    started: Instant,
) -> anyhow::Result<()> {
    // Only the clusters of this step are shown: in step 3 the pass also refuses the management
    // cluster's tombstone, which is step 4's.
    let print = super::online::progress_printer(started);
    let shown = |out: &reconcile::Outcome| {
        let mut out = out.clone();
        out.clusters
            .retain(|c| keys.iter().any(|k| k.name == c.name));
        print(&out);
    };
    let passes = reconcile::converge_with(temporary, fleet, opts, timeout, shown).await?;
    let mut left = Vec::new();
    for k in keys {
        if has_cluster(temporary, k).await? {
            left.push(k.to_string());
        }
    }
    if !left.is_empty() {
        let said: Vec<String> = passes
            .last()
            .clusters
            .iter()
            .map(|c| format!("{}: {} {}", c.name, c.phase.as_str(), c.message))
            .collect();
        bail!(
            "not deleted within {}s: {}\n  {}\nrun this command again to go on",
            timeout.as_secs(),
            left.join(", "),
            said.join("\n  ")
        );
    }
    Ok(())
}

/// `--dry-run`: the steps, those done marked, and the move's plan while there is one.
async fn dry_run(
    source: &Client,
    temporary: &Client,
    found: &Clusters,
    first: Step,
) -> anyhow::Result<ExitCode> {
    for (n, step) in [
        Step::Stop,
        Step::Move,
        Step::DeleteWorkloads,
        Step::DeleteManagement,
    ]
    .into_iter()
    .enumerate()
    {
        let done = if step < first { "  (done)" } else { "" };
        println!("[{}/4] {step}{done}", n + 1);
    }
    if first <= Step::Move {
        let m = Move {
            source: source.clone(),
            source_server: String::new(),
            target: temporary.clone(),
            clusters: found.all(),
        };
        return super::moving::print_plan(&m, false).await;
    }
    Ok(ExitCode::SUCCESS)
}
