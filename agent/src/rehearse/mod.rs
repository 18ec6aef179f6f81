//! `capstan rehearse`: a pull request's clusters brought up and changed on the real Cluster API
//! controllers, before the merge.
//!
//! The controllers run on a local control plane (`capstan dev up`'s, reused when it runs) where
//! CAPD's in-memory backend simulates machines. For each cluster the change touches:
//!
//! ```text
//! prepare     both revisions read and validated (the head's problems: exit 2, as validate);
//!             the changed clusters, each moved onto the in-memory backend
//!             (capstan_layout::rehearsal::stand_in; what cannot carry over is listed)
//! base        the base revision applied through the agent's own pass until Ready
//!             (a new cluster: nothing)
//! head        the head revision applied the same way, followed to Ready or to the bound,
//!             while a watch counts the Machines and the passes record the holds
//! verdict     the status's recorded stages in order, Ready at the new revision (a tombstone:
//!             gone): timeline::verdict; otherwise the stage and the controllers' conditions
//! clean up    the rehearsed cluster deleted through a tombstone, as the agent deletes
//! ```
//!
//! Clusters are rehearsed `concurrency` at a time; a management cluster that changes is
//! rehearsed first, alone (it pauses its workloads while it upgrades itself). Nothing here
//! writes to a cluster other than the local one: the command only ever connects to the
//! control plane it starts, the one `capstan dev up` keeps, or `--control-plane`'s, and refuses
//! one without the in-memory backend.

pub mod timeline;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use capstan_layout::{Fleet, Tree};
use futures::{StreamExt, TryStreamExt};
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams};
use kube::discovery::ApiResource;
use kube::runtime::watcher;
use serde_json::Value;

use crate::reconcile::{Options as PassOptions, converge, converge_with};
use timeline::{ClusterRehearsal, HoldSeen, MachineSeen, MachineTally, Verdict};

pub use timeline::Change;

/// How a rehearsal runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Clusters rehearsed at once.
    pub concurrency: usize,
    /// How long the head revision of a cluster may take to settle.
    pub timeout: Duration,
    /// How long the base revision may take to come up.
    pub base_timeout: Duration,
    /// Leave the rehearsed clusters on the control plane.
    pub keep: bool,
    /// Where a management cluster's backup goes when it upgrades itself.
    pub backup_dir: std::path::PathBuf,
}

/// One cluster to rehearse.
#[derive(Debug, Clone)]
pub struct Target {
    /// The cluster.
    pub name: String,
    /// Its namespace.
    pub namespace: String,
    /// Its management cluster.
    pub management: String,
    /// What the change does.
    pub change: Change,
    /// Machines the head revision runs (0 for a deletion).
    pub wanted: usize,
    /// What the rehearsal does not have, `file:line: what`.
    pub not_carried: Vec<String>,
}

/// Both revisions, ready to rehearse.
pub struct Prepared {
    /// `capstan rehearse <base> → <head>`.
    pub title: String,
    /// The clusters, a management cluster first.
    pub targets: Vec<Target>,
    /// The base revision's stand-in.
    pub base: Fleet,
    /// The head revision's stand-in.
    pub head: Fleet,
    /// The head revision's stand-in tree (deletions after the rehearsal are written on it).
    pub head_tree: Tree,
}

/// The field whose change the agent applies as a chain (`crate::plan::chain`) rather than
/// refusing.
const CHAINED: &str = "spec.kubernetesVersion";

/// Bad input: what `validate` and `diff` would refuse, each `file:line: …`.
#[derive(Debug, thiserror::Error)]
#[error("{}", .0.join("\n"))]
pub struct BadInput(pub Vec<String>);

/// The head revision's problems, or the clusters the change touches on their stand-ins.
/// `load` reads a tree into a fleet (release documents fetched as the agent does).
pub fn prepare(
    title: &str,
    base_tree: &Tree,
    head_tree: &Tree,
    only: Option<&str>,
    load: &dyn Fn(&Tree) -> Fleet,
) -> Result<Prepared, BadInput> {
    let (base, head) = (load(base_tree), load(head_tree));
    let report = capstan_plan::compare::compare(
        title,
        &base,
        &head,
        capstan_plan::compare::changed_outside(base_tree, head_tree),
    );
    let mut problems: Vec<String> = head
        .diagnostics
        .iter()
        .filter(|d| d.is_error())
        .map(|d| d.to_string())
        .collect();
    let mut names = BTreeSet::new();
    for c in &report.clusters {
        if only.is_some_and(|o| o != c.name) {
            continue;
        }
        // What the agent refuses too. A Kubernetes version jump is not: the agent applies it
        // as a chain of one-minor steps (and refuses a downgrade itself, which the rehearsal
        // then shows), as its own pass filters it.
        let blocked = c
            .impact
            .iter()
            .flat_map(|i| &i.blocked)
            .filter(|b| b.field != CHAINED);
        let own: Vec<String> = c
            .errors
            .iter()
            .cloned()
            .chain(blocked.map(|b| format!("blocked: {b}")))
            .collect();
        if !own.is_empty() {
            problems.extend(own.into_iter().map(|p| format!("{}: {p}", c.name)));
        } else if c.has_changes() {
            names.insert(c.name.clone());
        }
    }
    if let Some(o) = only
        && head.cluster(o).is_none()
        && base.cluster(o).is_none()
    {
        problems.push(format!("no cluster `{o}` in either revision"));
    }
    if !problems.is_empty() {
        return Err(BadInput(problems));
    }
    if names.is_empty() {
        return Ok(Prepared {
            title: title.to_string(),
            targets: Vec::new(),
            base: Fleet::default(),
            head: Fleet::default(),
            head_tree: Tree::new(),
        });
    }
    let base_stand_in = capstan_layout::rehearsal::stand_in(base_tree, &base, &names);
    let head_stand_in = capstan_layout::rehearsal::stand_in(head_tree, &head, &names);
    let (base_fleet, head_fleet) = (load(&base_stand_in.tree), load(&head_stand_in.tree));
    let mut targets = Vec::new();
    for name in &names {
        let Some(entry) = head.cluster(name) else {
            continue;
        };
        let deleted = entry.intent.delete.is_some();
        let spec = head_fleet
            .cluster(name)
            .and_then(|c| c.cluster.clone())
            .or_else(|| base_fleet.cluster(name).and_then(|c| c.cluster.clone()));
        let Some(spec) = spec else {
            // A tombstone for a cluster the base never had: nothing to rehearse.
            continue;
        };
        let change = if deleted {
            Change::Delete
        } else if base.cluster(name).is_none_or(|b| b.cluster.is_none()) {
            Change::Create
        } else {
            Change::Update
        };
        let wanted = if deleted {
            0
        } else {
            spec.control_plane.count as usize
                + spec
                    .workers
                    .iter()
                    .map(|w| {
                        w.replicas
                            .or(w.autoscaling.map(|(min, _)| min))
                            .unwrap_or(0) as usize
                    })
                    .sum::<usize>()
        };
        let mut not_carried: Vec<String> = head_stand_in
            .not_carried
            .get(name)
            .or_else(|| base_stand_in.not_carried.get(name))
            .into_iter()
            .flatten()
            .map(|n| n.to_string())
            .collect();
        if spec.etcd.is_some() {
            not_carried.push(
                "external etcd: etcdadm's controllers have no in-memory backend, so the Etcd stage waits for machines nobody provisions".into(),
            );
        }
        targets.push(Target {
            name: name.clone(),
            namespace: spec.namespace.clone(),
            management: entry.management().to_string(),
            change,
            wanted,
            not_carried,
        });
    }
    // A management cluster first: it pauses its workloads while it upgrades itself.
    targets.sort_by_key(|t| t.name != t.management);
    let problems: Vec<String> = head_fleet
        .all_diagnostics()
        .into_iter()
        .filter(|d| d.is_error())
        .map(|d| d.to_string())
        .collect();
    if !problems.is_empty() {
        // The stand-in of a valid cluster is valid (templates' rehearsal tests); say so if not.
        return Err(BadInput(
            problems
                .into_iter()
                .map(|p| format!("the rehearsal's stand-in: {p}"))
                .collect(),
        ));
    }
    Ok(Prepared {
        title: title.to_string(),
        targets,
        base: base_fleet,
        head: head_fleet,
        head_tree: head_stand_in.tree,
    })
}

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: format!("{group}/{version}"),
        kind: kind.into(),
        plural: plural.into(),
    }
}

fn machines() -> ApiResource {
    resource("cluster.x-k8s.io", "v1beta2", "Machine", "machines")
}

/// The label Cluster API puts on every object of a cluster.
const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";

fn seen(m: &DynamicObject) -> MachineSeen {
    let labels = m.metadata.labels.clone().unwrap_or_default();
    let group = if let Some(d) = labels.get("cluster.x-k8s.io/deployment-name") {
        d.clone()
    } else if labels.contains_key("cluster.x-k8s.io/control-plane") {
        "control-plane".into()
    } else if labels.keys().any(|k| k.contains("etcd")) {
        "etcd".into()
    } else {
        "other".into()
    };
    let text = |p: &str| {
        m.data
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    MachineSeen {
        name: m.metadata.name.clone().unwrap_or_default(),
        group,
        version: text("/spec/version"),
        available: text("/status/phase") == "Running" && m.metadata.deletion_timestamp.is_none(),
    }
}

/// What the controllers say of a cluster's objects: every condition that is not true, with
/// its message (`Kind/name: Type=False: message`), at most `limit`.
pub async fn conditions(client: &Client, ns: &str, name: &str, limit: usize) -> Vec<String> {
    let mut out = Vec::new();
    let kinds = [
        resource("cluster.x-k8s.io", "v1beta2", "Cluster", "clusters"),
        resource(
            "controlplane.cluster.x-k8s.io",
            "v1beta2",
            "KubeadmControlPlane",
            "kubeadmcontrolplanes",
        ),
        resource(
            "cluster.x-k8s.io",
            "v1beta2",
            "MachineDeployment",
            "machinedeployments",
        ),
        machines(),
    ];
    for ar in kinds {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
        let list = if ar.kind == "Cluster" {
            api.get_opt(name).await.map(|o| o.into_iter().collect())
        } else {
            api.list(&ListParams::default().labels(&format!("{CLUSTER_NAME_LABEL}={name}")))
                .await
                .map(|l| l.items)
        };
        for o in list.unwrap_or_default() {
            let conds = o
                .data
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            for c in conds {
                let s = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or_default();
                // Paused and Deleting are not problems; an empty message says nothing.
                if s("status") == "True"
                    || s("message").is_empty()
                    || matches!(s("type"), "Paused" | "Deleting")
                {
                    continue;
                }
                out.push(format!(
                    "{}/{}: {}={}: {}",
                    ar.kind,
                    o.metadata.name.clone().unwrap_or_default(),
                    s("type"),
                    s("status"),
                    s("message").replace('\n', " ")
                ));
                if out.len() >= limit {
                    return out;
                }
            }
        }
    }
    out
}

/// The ManagedCluster of `name`, as the API server has it.
async fn managed_cluster(client: &Client, name: &str) -> Option<Value> {
    crate::status::api(client)
        .get_opt(name)
        .await
        .ok()
        .flatten()
        .and_then(|o| serde_json::to_value(o).ok())
}

fn pass_options(fleet_of: &Target, revision: &str, opts: &Options) -> PassOptions {
    PassOptions {
        revision: revision.into(),
        management: Some(fleet_of.management.clone()),
        only: Some(fleet_of.name.clone()),
        concurrency: 1,
        backup_dir: Some(opts.backup_dir.clone()),
        // A management cluster rehearsing its own upgrade backs up as the agent does, into the
        // rehearsal's temporary directory, encrypted to a key made for this pass and dropped
        // with it: nothing of the rehearsal's clusters is written in the clear, and the backup
        // is never restored.
        backup_encryption: crate::backup::Encryption::To(vec![
            age::x25519::Identity::generate().to_public(),
        ]),
        ..Default::default()
    }
}

/// Refuses a control plane without CAPD's in-memory backend: the rehearsal would otherwise
/// create machines for real infrastructure.
pub async fn check_control_plane(client: &Client) -> anyhow::Result<()> {
    let crds: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource {
            group: "apiextensions.k8s.io".into(),
            version: "v1".into(),
            api_version: "apiextensions.k8s.io/v1".into(),
            kind: "CustomResourceDefinition".into(),
            plural: "customresourcedefinitions".into(),
        },
    );
    match crds
        .get_opt("devclusters.infrastructure.cluster.x-k8s.io")
        .await?
    {
        Some(_) => Ok(()),
        None => anyhow::bail!(
            "the control plane has no DevCluster CRD (CAPD's in-memory backend): rehearsals run only where machines are simulated (`capstan dev up`)"
        ),
    }
}

/// Rehearses every target, `opts.concurrency` at a time (a management cluster first, alone);
/// `say` hears what is going on.
pub async fn rehearse(
    client: &Client,
    prepared: &Prepared,
    opts: &Options,
    say: &(dyn Fn(String) + Sync),
) -> Vec<ClusterRehearsal> {
    let mut out = Vec::new();
    let (first, rest): (Vec<&Target>, Vec<&Target>) = prepared
        .targets
        .iter()
        .partition(|t| t.name == t.management);
    let mut applied = Vec::new();
    for t in first {
        let (r, a) = one(client, prepared, t, opts, say).await;
        out.push(r);
        applied.extend(a.then_some(t));
    }
    let mut rest: Vec<(ClusterRehearsal, bool, &Target)> = futures::stream::iter(rest)
        .map(|t| async move {
            let (r, a) = one(client, prepared, t, opts, say).await;
            (r, a, t)
        })
        .buffer_unordered(opts.concurrency.max(1))
        .collect()
        .await;
    rest.sort_by(|a, b| a.0.name.cmp(&b.0.name));
    for (r, a, t) in rest {
        out.push(r);
        applied.extend(a.then_some(t));
    }
    // Only once every cluster is done: a cluster of a later wave waits for the earlier waves'
    // clusters to be Ready at the new revision, and a deleted one would hold it.
    if !opts.keep {
        futures::stream::iter(applied.into_iter().filter(|t| t.change != Change::Delete))
            .for_each_concurrent(opts.concurrency.max(1), |t| {
                clean_up(client, prepared, t, opts, say)
            })
            .await;
    }
    out
}

/// A cluster's outcome in a pass, `(phase, message)`.
fn outcome_of<'a>(
    out: &'a crate::reconcile::Outcome,
    name: &str,
) -> Option<&'a crate::reconcile::ClusterOutcome> {
    out.clusters.iter().find(|c| c.name == name)
}

/// One cluster's rehearsal, and whether anything of it was applied (what the clean-up deletes:
/// never a cluster that was there before).
async fn one(
    client: &Client,
    prepared: &Prepared,
    t: &Target,
    opts: &Options,
    say: &(dyn Fn(String) + Sync),
) -> (ClusterRehearsal, bool) {
    let mut r = ClusterRehearsal {
        name: t.name.clone(),
        change: t.change,
        not_carried: t.not_carried.clone(),
        base_seconds: None,
        seconds: 0.0,
        stages: Vec::new(),
        holds: Vec::new(),
        machines_created: 0,
        machines_deleted: 0,
        max_unavailable: 0,
        versions: Default::default(),
        steps: Default::default(),
        verdict: Verdict::Passed,
    };
    let clusters = resource("cluster.x-k8s.io", "v1beta2", "Cluster", "clusters");
    let live: Api<DynamicObject> = Api::namespaced_with(client.clone(), &t.namespace, &clusters);
    if let Err(message) = nothing_there(&live, t).await {
        r.verdict = failed(message, Vec::new());
        return (r, false);
    }
    if t.change != Change::Create
        && let Err(verdict) = base_up(client, prepared, t, opts, say, &mut r).await
    {
        r.verdict = verdict;
        return (r, true);
    }
    let (head, t0) = head_followed(client, prepared, t, opts, say, &mut r).await;
    r.verdict = judged(client, &live, t, &head, t0, &mut r).await;
    say(format!(
        "{}: {}",
        t.name,
        match &r.verdict {
            Verdict::Passed => "passed".to_string(),
            Verdict::Failed { message, .. } => format!("failed: {message}"),
        }
    ));
    (r, true)
}

/// A failure outside any stage.
fn failed(message: String, conditions: Vec<String>) -> Verdict {
    Verdict::Failed {
        stage: None,
        message,
        conditions,
    }
}

/// Refuses a cluster the rehearsal's control plane already has (`Err`: why).
async fn nothing_there(live: &Api<DynamicObject>, t: &Target) -> Result<(), String> {
    match live.get_opt(&t.name).await {
        Ok(None) => Ok(()),
        Ok(Some(_)) => Err(format!(
            "a Cluster {}/{} already exists on the rehearsal's control plane (left by an interrupted rehearsal, or the quick start's): delete it, or `capstan dev down`",
            t.namespace, t.name
        )),
        Err(e) => Err(format!("reading the control plane: {e}")),
    }
}

/// The base revision, until Ready (`Err`: the verdict when it does not come up).
async fn base_up(
    client: &Client,
    prepared: &Prepared,
    t: &Target,
    opts: &Options,
    say: &(dyn Fn(String) + Sync),
    r: &mut ClusterRehearsal,
) -> Result<(), Verdict> {
    say(format!("{}: bringing up the base revision", t.name));
    let started = Instant::now();
    let base = converge(
        client,
        &prepared.base,
        &pass_options(t, "base", opts),
        opts.base_timeout,
    )
    .await;
    r.base_seconds = Some(started.elapsed().as_secs_f64());
    let ready = match &base {
        Ok(c) => {
            outcome_of(c.last(), &t.name).map(|o| (o.phase.as_str().to_string(), o.message.clone()))
        }
        Err(e) => Some(("Failed".into(), e.to_string())),
    };
    if matches!(&ready, Some((p, _)) if p == "Ready") {
        return Ok(());
    }
    let conditions = conditions(client, &t.namespace, &t.name, 12).await;
    let why = ready
        .map(|(p, m)| format!("{p}: {m}"))
        .unwrap_or_else(|| "not reconciled".into());
    Err(failed(
        format!("the base revision did not come up, so the change could not be rehearsed ({why})"),
        conditions,
    ))
}

/// The passes' outcome on the head revision.
type Head = Result<crate::reconcile::Convergence, crate::reconcile::ReconcileError>;

/// The head revision applied through the agent's passes and followed until it settles: the
/// machines created and deleted (a watch), the holds the passes reported, how long it took; and
/// the second it was applied in (stage records are whole seconds: their origin).
async fn head_followed(
    client: &Client,
    prepared: &Prepared,
    t: &Target,
    opts: &Options,
    say: &(dyn Fn(String) + Sync),
    r: &mut ClusterRehearsal,
) -> (Head, k8s_openapi::jiff::Timestamp) {
    say(format!("{}: applying the head revision", t.name));
    let machine_api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &t.namespace, &machines());
    let selector = format!("{CLUSTER_NAME_LABEL}={}", t.name);
    let before = machine_api
        .list(&ListParams::default().labels(&selector))
        .await
        .map(|l| l.items.iter().map(seen).collect::<Vec<_>>())
        .unwrap_or_default();
    let tally = Arc::new(Mutex::new(MachineTally::new(before, t.wanted)));
    let watch = {
        let tally = tally.clone();
        let stream = watcher::watcher(machine_api, watcher::Config::default().labels(&selector));
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Ok(Some(e)) = stream.try_next().await {
                let mut t = tally.lock().unwrap_or_else(|p| p.into_inner());
                match e {
                    watcher::Event::Apply(m) | watcher::Event::InitApply(m) => t.applied(seen(&m)),
                    watcher::Event::Delete(m) => {
                        t.deleted(m.metadata.name.as_deref().unwrap_or_default())
                    }
                    _ => {}
                }
            }
        })
    };
    let now = k8s_openapi::jiff::Timestamp::now();
    let t0 = k8s_openapi::jiff::Timestamp::from_second(now.as_second()).unwrap_or(now);
    let started = Instant::now();
    let holds: Arc<Mutex<Vec<HoldSeen>>> = Arc::default();
    let head = {
        let holds = holds.clone();
        let name = t.name.clone();
        converge_with(
            client,
            &prepared.head,
            &pass_options(t, "head", opts),
            opts.timeout,
            move |out| {
                let Some(h) = outcome_of(out, &name).and_then(|c| c.paced.as_ref()) else {
                    return;
                };
                let mut holds = holds.lock().unwrap_or_else(|p| p.into_inner());
                let reason = h.reason.as_str().to_string();
                if holds
                    .last()
                    .is_none_or(|l| l.reason != reason || l.message != h.message)
                {
                    holds.push(HoldSeen {
                        at: started.elapsed().as_secs_f64(),
                        reason,
                        message: h.message.clone(),
                    });
                }
            },
        )
        .await
    };
    r.seconds = started.elapsed().as_secs_f64();
    watch.abort();
    r.holds = std::mem::take(&mut *holds.lock().unwrap_or_else(|p| p.into_inner()));
    let tally = tally.lock().unwrap_or_else(|p| p.into_inner());
    (r.machines_created, r.machines_deleted, r.max_unavailable) = tally.totals();
    r.versions = tally.versions();
    r.steps = tally.steps();
    (head, t0)
}

/// The verdict on the head revision, from its last pass and the stages its status recorded
/// (filled into `r.stages`), with the Cluster's conditions when it failed.
async fn judged(
    client: &Client,
    live: &Api<DynamicObject>,
    t: &Target,
    head: &Head,
    t0: k8s_openapi::jiff::Timestamp,
    r: &mut ClusterRehearsal,
) -> Verdict {
    let mc = managed_cluster(client, &t.name).await;
    let status = mc.as_ref().map(|m| &m["status"]);
    let records: Vec<(String, String, Option<String>)> = status
        .and_then(|s| s["stages"].as_array())
        .into_iter()
        .flatten()
        .map(|s| {
            let f = |k: &str| s[k].as_str().map(str::to_string);
            (
                f("name").unwrap_or_default(),
                f("started").unwrap_or_default(),
                f("finished"),
            )
        })
        .collect();
    r.stages = timeline::stage_spans(
        t0,
        records
            .iter()
            .map(|(n, s, f)| (n.as_str(), s.as_str(), f.as_deref())),
    );
    let (settled, last) = match head {
        Ok(c) => (
            c.settled(),
            outcome_of(c.last(), &t.name)
                .map(|o| (o.phase.as_str().to_string(), o.message.clone())),
        ),
        Err(e) => (false, Some(("Failed".to_string(), e.to_string()))),
    };
    // A completed deletion leaves no status behind.
    let last = if mc.is_none() && t.change == Change::Delete {
        None
    } else {
        last
    };
    let waiting = status
        .and_then(|s| s["stage"].as_str())
        .map(str::to_string)
        .or_else(|| {
            r.stages
                .iter()
                .rev()
                .find(|s| s.end.is_none())
                .map(|s| s.name.clone())
        });
    let failing = !matches!(&last, Some((p, _)) if p == "Ready") && t.change != Change::Delete;
    let conditions = if failing {
        conditions(client, &t.namespace, &t.name, 12).await
    } else {
        Vec::new()
    };
    let verdict = timeline::verdict(
        t.change,
        last.as_ref().map(|(p, m)| (p.as_str(), m.as_str())),
        settled,
        waiting.as_deref(),
        &r.stages,
        conditions,
    );
    // Gone, and only its objects: its Cluster is gone too.
    if t.change == Change::Delete
        && verdict == Verdict::Passed
        && let Ok(Some(_)) = live.get_opt(&t.name).await
    {
        return failed(
            format!("the Cluster {}/{} is still there", t.namespace, t.name),
            Vec::new(),
        );
    }
    verdict
}

/// The rehearsed cluster deleted as the agent deletes one: a tombstone in its directory. A
/// cluster that already existed is never cleaned up: it was refused before anything applied.
async fn clean_up(
    client: &Client,
    prepared: &Prepared,
    t: &Target,
    opts: &Options,
    say: &(dyn Fn(String) + Sync),
) {
    if t.name == t.management {
        // The agent never deletes the management cluster it runs on, tombstone or not; this
        // one is a rehearsal's stand-in, deleted here from outside, as an operator would.
        say(format!(
            "{}: deleting the rehearsed management cluster",
            t.name
        ));
        if let Err(e) = delete_from_outside(client, t, opts.base_timeout).await {
            say(format!(
                "{}: the rehearsed cluster was not deleted: {e}",
                t.name
            ));
        }
        return;
    }
    let Some(dir) = prepared
        .head
        .cluster(&t.name)
        .or_else(|| prepared.base.cluster(&t.name))
        .map(|c| c.dir.clone())
    else {
        return;
    };
    let mut tree = prepared.head_tree.clone();
    tree.entries
        .retain(|p, _| p.parent() != Some(dir.as_path()));
    tree.insert(
        dir.join(capstan_layout::intent::TOMBSTONE_FILE),
        capstan_layout::intent::document("Tombstone", "the rehearsal is over"),
    );
    let fleet = capstan_layout::load(&tree);
    say(format!("{}: deleting the rehearsed cluster", t.name));
    if let Err(e) = converge(
        client,
        &fleet,
        &pass_options(t, "clean-up", opts),
        opts.base_timeout,
    )
    .await
    {
        say(format!(
            "{}: the rehearsed cluster was not deleted: {e}",
            t.name
        ));
    }
}

/// A rehearsed management cluster deleted: its Cluster API Cluster first (Cluster API removes
/// its machines and what it owns), then every other object of its inventory, then its status.
async fn delete_from_outside(client: &Client, t: &Target, bound: Duration) -> anyhow::Result<()> {
    use crate::write::{Delete, delete};
    let inventory = crate::status::api(client)
        .get_opt(&t.name)
        .await?
        .and_then(|m| m.status)
        .map(|s| s.inventory)
        .unwrap_or_default();
    let clusters: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &t.namespace,
        &resource("cluster.x-k8s.io", "v1beta2", "Cluster", "clusters"),
    );
    if let Some(live) = clusters.get_opt(&t.name).await? {
        let uid = live.metadata.uid.clone().unwrap_or_default();
        delete(&clusters, &t.name, &Delete::any()).await?;
        let gone = kube::runtime::wait::await_condition(
            clusters.clone(),
            &t.name,
            kube::runtime::wait::conditions::is_deleted(&uid),
        );
        tokio::time::timeout(bound, gone).await.map_err(|_| {
            anyhow::anyhow!(
                "Cluster {}/{} still there after {bound:?}",
                t.namespace,
                t.name
            )
        })??;
    }
    let resolver = crate::k8s::Resolver::new(client.clone()).await?;
    for r in inventory.iter().rev() {
        let (ar, namespaced) = resolver.resolve(&r.api_version, &r.kind).await?;
        let api: Api<DynamicObject> = if namespaced {
            Api::namespaced_with(client.clone(), &r.namespace, &ar)
        } else {
            Api::all_with(client.clone(), &ar)
        };
        delete(&api, &r.name, &Delete::any()).await?;
    }
    delete(&crate::status::api(client), &t.name, &Delete::any()).await?;
    Ok(())
}
