//! `capstan move`: Cluster API clusters moved, whole, from one management cluster to another,
//! as `clusterctl move` does, but resumable after a crash at any step and without its known
//! losses (objects outside the owner chain left behind, an operator's pause undone, clusters
//! left paused after a failure).
//!
//! The steps, each recorded in the journal ([`journal`], in the target) before it acts:
//!
//! 1. **Check.** Every cluster exists at the source, is not being deleted, is Ready and not
//!    rolling out (`capstan_plan::moving::readiness`); the target serves every kind moved and
//!    holds no object of the same name that is not this move's copy; capstan's agent does not
//!    run at the source (it would apply the deleted clusters again from Git; checked again
//!    before the deletes). Any refusal: nothing is written anywhere.
//! 2. **Pause** at the source every cluster an operator has not paused: `spec.paused` and the
//!    `capstan.dev/paused-for-move` mark in one write (the EKS Anywhere Cluster of the same name
//!    gets EKS-A's pause annotation the same way). The clusters an operator had paused are in
//!    the journal and keep their pause.
//! 3. **Copy** into the target, owners first, owner references rewritten to the new UIDs, each
//!    copy marked with its source's UID (`capstan.dev/moved-from`), statuses written through
//!    the status subresource. A copy already there is known by its mark and not made again.
//! 4. **Delete** at the source what was copied (never the shared objects a cluster that stays
//!    still uses), leaves first and each Cluster last: finalizers removed (the source's
//!    controllers are paused and must not tear anything down), then deleted by UID. An object
//!    without its copy in the target is not deleted.
//! 5. **Unpause** in the target exactly the clusters marked by this move.
//!
//! The decisions (what belongs to a cluster, the order, the refusals) are
//! `capstan_plan::moving`'s; this module reads and writes.

use std::collections::{BTreeMap, BTreeSet};

use capstan_plan::moving::{self, ClusterKey, MovePlan, Refusal};
use capstan_templates::identity::PAUSED_FOR_MOVE_ANNOTATION;
use kube::Client;
use kube::api::{Api, DynamicObject, ObjectMeta};
use serde_json::{Value, json};

pub mod graph;
pub mod journal;

pub use graph::Found;
pub use journal::{Journal, Phase, Record};

/// EKS Anywhere's pause annotation on its Cluster.
pub const EKSA_PAUSED_ANNOTATION: &str = "anywhere.eks.amazonaws.com/paused";

/// The failpoints of a move, in the order they are reached (`crate::failpoint`): the SIGKILL
/// tests stop a move at each.
pub const FAILPOINTS: [&str; 5] = [
    "move-paused",
    "move-mid-create",
    "move-created",
    "move-mid-delete",
    "move-deleted",
];

/// Why a move stopped.
#[derive(Debug, thiserror::Error)]
pub enum MoveError {
    /// The move was refused before anything was written.
    #[error("the move is refused:\n{}", .0.iter().map(|r| format!("  - {r}")).collect::<Vec<_>>().join("\n"))]
    Refused(Vec<Refusal>),
    /// A read or write failed.
    #[error("{action}: {source}")]
    Kube {
        /// What was being done.
        action: String,
        /// Cause.
        #[source]
        source: kube::Error,
    },
    /// The journal is not what a move writes.
    #[error("the move's journal: {0}")]
    Journal(String),
    /// Another move holds the target.
    #[error("{0}")]
    Busy(String),
    /// An object at the source has no copy in the target where one must be: it is not deleted.
    #[error("{0} has no copy in the target: it is left at the source; run the move again")]
    Uncopied(String),
}

impl MoveError {
    fn kube(action: &str, source: kube::Error) -> MoveError {
        MoveError::Kube {
            action: action.to_string(),
            source,
        }
    }
}

/// A move to make.
#[derive(Clone)]
pub struct Move {
    /// The management cluster the clusters are on.
    pub source: Client,
    /// Its API server (recorded in the journal).
    pub source_server: String,
    /// The one they go to.
    pub target: Client,
    /// The clusters.
    pub clusters: Vec<ClusterKey>,
}

/// What a move did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Moved {
    /// Copies created in the target (not counting those a resumed move found made).
    pub created: usize,
    /// Copies found already made (a resumed move).
    pub found: usize,
    /// Objects deleted at the source.
    pub deleted: usize,
    /// Shared objects copied and kept at the source.
    pub shared: Vec<String>,
    /// Clusters an operator had paused: still paused.
    pub operator_paused: Vec<String>,
    /// The move had finished before: nothing done.
    pub already_done: bool,
}

/// The move's plan as read now: the objects, what goes, or why not. Writes nothing.
pub async fn plan(m: &Move) -> Result<(Vec<Found>, MovePlan), MoveError> {
    plan_with(m, true).await
}

/// [`plan`]; without `agent`, capstan's agent running at the source is not a refusal (a
/// back-out's dry run: the back-out stops it first).
pub async fn plan_with(m: &Move, agent: bool) -> Result<(Vec<Found>, MovePlan), MoveError> {
    let found = graph::source_objects(&m.source, &m.clusters).await?;
    let objects: Vec<Value> = found.iter().map(|f| f.object.clone()).collect();
    let plan = moving::plan(&objects, &m.clusters).map_err(MoveError::Refused)?;
    let mut refusals: Vec<Refusal> = m
        .clusters
        .iter()
        .filter_map(|c| moving::readiness(&objects, c))
        .collect();
    if agent {
        refusals.extend(graph::source_agent(&m.source).await?);
    }
    let members: Vec<&Found> = plan.objects.iter().map(|o| &found[o.index]).collect();
    let facts = graph::target_facts(&m.target, &members).await?;
    refusals.extend(moving::target_refusals(&objects, &plan, &facts));
    if refusals.is_empty() {
        Ok((found, plan))
    } else {
        Err(MoveError::Refused(refusals))
    }
}

fn cluster_of<'a>(found: &'a [Found], key: &ClusterKey, group: &str) -> Option<&'a Found> {
    found.iter().find(|f| {
        f.resource.group == group
            && f.resource.kind == "Cluster"
            && f.object
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                == Some(key.namespace.as_str())
            && f.name() == key.name
    })
}

fn annotation<'a>(o: &'a Value, key: &str) -> Option<&'a str> {
    o.pointer("/metadata/annotations")
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
}

/// Runs the move, or resumes the one the target's journal records; `say` hears each step.
pub async fn run(m: &Move, say: &mut dyn FnMut(String)) -> Result<Moved, MoveError> {
    let wanted: Vec<String> = m.clusters.iter().map(ToString::to_string).collect();
    let mut out = Moved::default();
    let mut journal = match journal::read(&m.target).await? {
        Some(j) if j.record.phase == Phase::Done && j.record.clusters == wanted => {
            say(format!("move {} had finished: nothing to do", j.record.id));
            out.already_done = true;
            out.operator_paused = j.record.operator_paused;
            return Ok(out);
        }
        Some(j) if j.record.phase != Phase::Done => {
            if j.record.clusters != wanted {
                return Err(MoveError::Busy(format!(
                    "the target's journal records an unfinished move {} of {}: finish it first (run the move of those clusters again)",
                    j.record.id,
                    j.record.clusters.join(", ")
                )));
            }
            say(format!(
                "resuming move {} at {:?} (journal {}/{})",
                j.record.id,
                j.record.phase,
                moving::RECORDS_NAMESPACE,
                journal::NAME
            ));
            j
        }
        earlier => {
            let (found, plan) = plan(m).await?;
            let operator_paused: Vec<String> = m
                .clusters
                .iter()
                .filter(|c| {
                    cluster_of(&found, c, "cluster.x-k8s.io").is_some_and(|f| {
                        moving::is_paused(&f.object)
                            && annotation(&f.object, PAUSED_FOR_MOVE_ANNOTATION).is_none()
                    })
                })
                .map(ToString::to_string)
                .collect();
            say(format!(
                "{} objects of {} cluster(s) to move ({} shared, kept at the source too)",
                plan.objects.len(),
                plan.clusters.len(),
                plan.objects.iter().filter(|o| o.shared).count()
            ));
            let record = Record {
                id: format!("{:016x}", fastrand::u64(..)),
                source: m.source_server.clone(),
                clusters: wanted.clone(),
                operator_paused,
                phase: Phase::Pausing,
            };
            match earlier {
                None => journal::start(&m.target, record).await?,
                Some(mut done) => {
                    done.replace(&m.target, record).await?;
                    done
                }
            }
        }
    };
    out.operator_paused = journal.record.operator_paused.clone();
    if journal.record.phase == Phase::Pausing {
        pause(m, &journal.record, say).await?;
        journal.enter(&m.target, Phase::Copying).await?;
        crate::failpoint::stop_here("move-paused").await;
    }
    if journal.record.phase == Phase::Copying {
        copy(m, &mut out, say).await?;
        crate::failpoint::stop_here("move-created").await;
        journal.enter(&m.target, Phase::Deleting).await?;
    }
    if journal.record.phase == Phase::Deleting {
        // Checked again: an agent started since the move began would re-create what goes.
        if let Some(r) = graph::source_agent(&m.source).await? {
            return Err(MoveError::Refused(vec![r]));
        }
        delete(m, &mut out, say).await?;
        crate::failpoint::stop_here("move-deleted").await;
        journal.enter(&m.target, Phase::Unpausing).await?;
    }
    if journal.record.phase == Phase::Unpausing {
        unpause(m, &journal.record, say).await?;
        journal.enter(&m.target, Phase::Done).await?;
    }
    say(format!("move {} done", journal.record.id));
    Ok(out)
}

/// Step 2: pause what an operator has not.
async fn pause(m: &Move, record: &Record, say: &mut dyn FnMut(String)) -> Result<(), MoveError> {
    let found = graph::source_objects(&m.source, &m.clusters).await?;
    for key in &m.clusters {
        if record.operator_paused.contains(&key.to_string()) {
            say(format!(
                "Cluster {key}: paused by an operator, left as it is"
            ));
            continue;
        }
        let Some(c) = cluster_of(&found, key, "cluster.x-k8s.io") else {
            return Err(MoveError::Refused(vec![Refusal::NoSuchCluster(
                key.clone(),
            )]));
        };
        let patch = json!({"metadata": {"annotations": {PAUSED_FOR_MOVE_ANNOTATION: record.id}},
            "spec": {"paused": true}});
        let how = crate::write::Merge::blind().by(journal::MANAGER);
        crate::write::merge(&c.api(&m.source), key.name.as_str(), &how, &patch)
            .await
            .map_err(|e| MoveError::kube(&format!("pausing Cluster {key}"), e))?;
        if let Some(e) = cluster_of(&found, key, "anywhere.eks.amazonaws.com")
            && (annotation(&e.object, EKSA_PAUSED_ANNOTATION).is_none()
                || annotation(&e.object, PAUSED_FOR_MOVE_ANNOTATION).is_some())
        {
            let patch = json!({"metadata": {"annotations": {
                PAUSED_FOR_MOVE_ANNOTATION: record.id, EKSA_PAUSED_ANNOTATION: "true"}}});
            crate::write::merge(&e.api(&m.source), key.name.as_str(), &how, &patch)
                .await
                .map_err(|e| MoveError::kube(&format!("pausing EKS-A Cluster {key}"), e))?;
        }
        say(format!("Cluster {key}: paused"));
    }
    Ok(())
}

/// The UIDs of this move's copies in the target, by their source's UID.
fn copies(facts_existing: &BTreeMap<String, Option<String>>) -> BTreeSet<String> {
    facts_existing.values().flatten().cloned().collect()
}

/// Step 3: copy into the target.
async fn copy(m: &Move, out: &mut Moved, say: &mut dyn FnMut(String)) -> Result<(), MoveError> {
    let found = graph::source_objects(&m.source, &m.clusters).await?;
    let objects: Vec<Value> = found.iter().map(|f| f.object.clone()).collect();
    let plan = moving::plan(&objects, &m.clusters).map_err(MoveError::Refused)?;
    let members: Vec<&Found> = plan.objects.iter().map(|o| &found[o.index]).collect();
    let facts = graph::target_facts(&m.target, &members).await?;
    let refusals = moving::target_refusals(&objects, &plan, &facts);
    if !refusals.is_empty() {
        return Err(MoveError::Refused(refusals));
    }
    let made = copies(&facts.existing);
    let mut new_uids: BTreeMap<String, String> = BTreeMap::new();
    let mut namespaces: BTreeSet<String> = BTreeSet::new();
    let half = plan.objects.len() / 2;
    for (n, member) in plan.objects.iter().enumerate() {
        if n == half {
            crate::failpoint::stop_here("move-mid-create").await;
        }
        let f = &found[member.index];
        let source_uid = f
            .object
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if made.contains(&source_uid) {
            // A copy made by an earlier run: its new UID is read from the target.
            if let Some(u) = target_uid(&m.target, f).await? {
                new_uids.insert(source_uid, u);
            }
            out.found += 1;
            continue;
        }
        if let Some(ns) = f
            .object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            && f.namespaced
            && namespaces.insert(ns.to_string())
        {
            ensure_namespace(&m.target, ns).await?;
        }
        let body: DynamicObject = serde_json::from_value(moving::copy_of(&f.object, &new_uids))
            .map_err(|e| MoveError::Journal(format!("{}: {e}", member.subject)))?;
        let api = f.api(&m.target);
        let created = crate::write::create(&api, Some(journal::MANAGER), &body)
            .await
            .map_err(|e| {
                MoveError::kube(&format!("creating {} in the target", member.subject), e)
            })?;
        if let Some(u) = created.metadata.uid {
            new_uids.insert(source_uid, u);
        }
        if f.status
            && let Some(status) = f.object.get("status").filter(|s| !s.is_null())
        {
            let patch = json!({"apiVersion": f.object["apiVersion"], "kind": f.object["kind"],
                "metadata": {"name": f.name()}, "status": status});
            crate::write::apply_status(
                &api,
                f.name(),
                &crate::write::Apply::by(journal::MANAGER),
                &patch,
            )
            .await
            .map_err(|e| {
                MoveError::kube(&format!("writing the status of {}", member.subject), e)
            })?;
        }
        out.created += 1;
        if member.shared {
            out.shared.push(member.subject.clone());
        }
    }
    say(format!(
        "copied into the target: {} created, {} found made by an earlier run",
        out.created, out.found
    ));
    Ok(())
}

async fn target_uid(target: &Client, f: &Found) -> Result<Option<String>, MoveError> {
    f.api(target)
        .get_opt(f.name())
        .await
        .map_err(|e| MoveError::kube(&format!("reading {}", moving::object_key(&f.object)), e))
        .map(|o| o.and_then(|o| o.metadata.uid))
}

async fn ensure_namespace(target: &Client, ns: &str) -> Result<(), MoveError> {
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(target.clone());
    let body = k8s_openapi::api::core::v1::Namespace {
        metadata: ObjectMeta {
            name: Some(ns.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    match crate::write::create(&api, Some(journal::MANAGER), &body).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(MoveError::kube(
            &format!("creating namespace {ns} in the target"),
            e,
        )),
    }
}

/// Step 4: delete at the source what has its copy.
async fn delete(m: &Move, out: &mut Moved, say: &mut dyn FnMut(String)) -> Result<(), MoveError> {
    let found = graph::source_objects(&m.source, &m.clusters).await?;
    let objects: Vec<Value> = found.iter().map(|f| f.object.clone()).collect();
    // A cluster whose Cluster is gone was deleted whole by an earlier run (its Cluster goes last).
    let left: Vec<ClusterKey> = m
        .clusters
        .iter()
        .filter(|c| cluster_of(&found, c, "cluster.x-k8s.io").is_some())
        .cloned()
        .collect();
    if left.is_empty() {
        say("nothing left at the source".into());
        return Ok(());
    }
    let plan = moving::plan(&objects, &left).map_err(MoveError::Refused)?;
    let members: Vec<&Found> = plan.objects.iter().map(|o| &found[o.index]).collect();
    let facts = graph::target_facts(&m.target, &members).await?;
    let made = copies(&facts.existing);
    // What stays at the source keeps no owner reference to what is deleted there, before
    // anything is: the garbage collector would take it from the cluster that stays.
    let deleted: BTreeSet<String> = plan
        .objects
        .iter()
        .filter(|o| !o.shared)
        .filter_map(|o| found[o.index].object.pointer("/metadata/uid"))
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect();
    for member in plan.objects.iter().filter(|o| o.shared) {
        let f = &found[member.index];
        let Some(kept) = moving::kept_owners(&f.object, &deleted) else {
            continue;
        };
        let read = f
            .object
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .map(str::to_string);
        let how = crate::write::Merge::read(read).by(journal::MANAGER);
        let patch = json!({"metadata": {"ownerReferences": kept}});
        crate::write::merge(&f.api(&m.source), f.name(), &how, &patch)
            .await
            .map_err(|e| {
                MoveError::kube(
                    &format!(
                        "dropping the owner references of {} to what leaves the source",
                        member.subject
                    ),
                    e,
                )
            })?;
        say(format!(
            "{}: kept at the source, its owner references to moved objects dropped",
            member.subject
        ));
    }
    let (clusters, rest): (Vec<_>, Vec<_>) = plan
        .objects
        .iter()
        .filter(|o| !o.shared)
        .partition(|o| moving::is_capi_cluster(&found[o.index].object));
    let order: Vec<_> = rest.into_iter().rev().chain(clusters).collect();
    let half = order.len() / 2;
    for (n, member) in order.into_iter().enumerate() {
        if n == half {
            crate::failpoint::stop_here("move-mid-delete").await;
        }
        let f = &found[member.index];
        let uid = f
            .object
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .map(str::to_string);
        if !uid.as_ref().is_some_and(|u| made.contains(u)) {
            return Err(MoveError::Uncopied(member.subject.clone()));
        }
        let api = f.api(&m.source);
        if f.object
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty())
        {
            let patch = json!({"metadata": {"finalizers": null}});
            let how = crate::write::Merge::blind().by(journal::MANAGER);
            match crate::write::merge(&api, f.name(), &how, &patch).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => continue,
                Err(e) => {
                    return Err(MoveError::kube(
                        &format!(
                            "removing the finalizers of {} at the source",
                            member.subject
                        ),
                        e,
                    ));
                }
            }
        }
        crate::write::delete(&api, f.name(), &crate::write::Delete::of_uid(uid))
            .await
            .map_err(|e| {
                MoveError::kube(&format!("deleting {} at the source", member.subject), e)
            })?;
        out.deleted += 1;
    }
    say(format!("deleted at the source: {}", out.deleted));
    Ok(())
}

/// Step 5: unpause in the target what this move paused.
async fn unpause(m: &Move, record: &Record, say: &mut dyn FnMut(String)) -> Result<(), MoveError> {
    let discovery = kube::Discovery::new(m.target.clone())
        .run_aggregated()
        .await
        .map_err(|e| MoveError::kube("API discovery at the target", e))?;
    for (group, kind) in [
        ("cluster.x-k8s.io", "Cluster"),
        ("anywhere.eks.amazonaws.com", "Cluster"),
    ] {
        let Some(ar) = discovery
            .groups()
            .find(|g| g.name() == group)
            .and_then(|g| g.recommended_kind(kind))
            .map(|(ar, _)| ar)
        else {
            continue;
        };
        for key in &m.clusters {
            let api: Api<DynamicObject> =
                Api::namespaced_with(m.target.clone(), &key.namespace, &ar);
            let Some(c) = api.get_opt(&key.name).await.map_err(|e| {
                MoveError::kube(&format!("reading {kind}.{group} {key} in the target"), e)
            })?
            else {
                continue;
            };
            let value = serde_json::to_value(&c).expect("objects serialise");
            if annotation(&value, PAUSED_FOR_MOVE_ANNOTATION) != Some(record.id.as_str()) {
                continue;
            }
            let patch = if group == "cluster.x-k8s.io" {
                json!({"metadata": {"annotations": {PAUSED_FOR_MOVE_ANNOTATION: null}}, "spec": {"paused": null}})
            } else {
                json!({"metadata": {"annotations": {PAUSED_FOR_MOVE_ANNOTATION: null, EKSA_PAUSED_ANNOTATION: null}}})
            };
            let how = crate::write::Merge::blind().by(journal::MANAGER);
            crate::write::merge(&api, &key.name, &how, &patch)
                .await
                .map_err(|e| {
                    MoveError::kube(&format!("unpausing {kind}.{group} {key} in the target"), e)
                })?;
            if group == "cluster.x-k8s.io" {
                say(format!("Cluster {key}: unpaused in the target"));
            }
        }
    }
    Ok(())
}
