//! A management cluster upgrading its own etcd or control plane, from within: no bootstrap
//! cluster, so nothing to fall back on but what capstan writes down first.
//!
//! ```text
//! its etcd or control plane about to change (a live object, not a scale)
//!   (i)   back up every Cluster API / EKS-A / capstan object and the clusters' Secrets
//!         (crate::backup) into --backup-dir
//!   (ii)  pause every workload cluster it manages (spec.paused on their Cluster API Clusters,
//!         field manager capstan-pause), recording the pause on each Cluster (PAUSED_FOR);
//!         one already paused by someone else is left as it is; then the backup's directory
//!         goes into its status (`backup`), before anything of the upgrade is applied
//!         (`decide::backed_up`, written by `pass.rs`); their own passes hold while `backup`
//!         is set
//!   (iii) etcd, then the control plane, stage by stage (crate::plan::stages); the machine
//!         holding kube-vip's address is rolled last: the other outdated control-plane machines
//!         are marked for deletion first (Cluster API deletes marked machines first)
//!   (iv)  every step is read back from the API server, so its own API server going away and
//!         coming back loses nothing: watches reconnect, the next pass picks up where it was
//!   (v)   etcd and control plane rolled out: exactly the Clusters that record capstan's
//!         pause are unpaused, `backup` cleared (the backup itself stays on disk)
//! ```
//!
//! The pause lives on the paused objects, not in the agent or the status alone: a pass on a
//! restarted or new leader, or one reading a status that lost `backup`, finds what capstan
//! paused and unpauses it once its management cluster is not upgrading; every status path that
//! applies nothing carries `backup` forward (`capstan_plan::decide`).
//!
//! A stage that fails (the stage timeout) stops there: the workload clusters stay paused, the
//! backup stays, the status says which stage and why.
//!
//! Failpoints ([`crate::failpoint`], debug builds) at each step, where the kill test stops a
//! replica to SIGKILL it: `self-upgrade-backed-up` (i) done, nothing paused;
//! `self-upgrade-paused-one` the first workload cluster of (ii) paused; `self-upgrade-applied`
//! a pass's changes applied, its status not written yet (`pass.rs`); `self-upgrade-rolling-out` a
//! pass while the control plane rolls out; `self-upgrade-rolled-out` (v) about to unpause.

use std::collections::BTreeSet;

use capstan_layout::{ClusterEntry, Fleet, Role};
use kube::api::{Api, DynamicObject, ListParams};
use serde_json::{Value, json};

use super::pass::Pass;
use crate::plan::stages::{self, Stage, Staged, State};
use crate::plan::{Action, ObjectRef, Plan};
use crate::status::Recorded;

/// The field manager that pauses and unpauses workload clusters (capstan's own applies never
/// render `spec.paused`, so the two never contend).
pub const PAUSE_MANAGER: &str = "capstan-pause";

/// The Lease kube-vip holds for a control plane's address (its default name, EKS Anywhere's
/// too), in `kube-system` of the cluster itself.
pub const KUBE_VIP_LEASE: (&str, &str) = ("kube-system", "plndr-cp-lock");

/// Cluster API deletes control-plane machines carrying this annotation first.
pub const DELETE_MACHINE: &str = "cluster.x-k8s.io/delete-machine";

/// Where capstan records on a Cluster that it paused it ([`capstan_templates::identity`]).
pub const PAUSED_FOR: &str = capstan_templates::identity::PAUSED_FOR_ANNOTATION;

/// A workload cluster's Cluster API Cluster as pausing reads it from its live facts: whether
/// it is paused now (by anyone), and whether it records capstan's pause for `management`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pause {
    /// `spec.paused`.
    pub paused: bool,
    /// [`PAUSED_FOR`] names `management`.
    pub ours: bool,
}

impl Pause {
    /// From the Cluster's live facts (absent: neither).
    pub fn of(live: Option<&crate::live::LiveObject>, management: &str) -> Pause {
        let r = live.and_then(|l| l.rollout.as_deref());
        Pause {
            paused: r.is_some_and(|r| r.paused),
            ours: r.and_then(|r| r.paused_for.as_deref()) == Some(management),
        }
    }

    /// What a pass that pauses (`pause`) or unpauses its management cluster's workload
    /// clusters does to this one: pause it only when nobody has (an operator's pause is not
    /// taken over, so never removed later either); unpause exactly what records capstan's pause.
    pub fn change(self, pause: bool) -> Option<bool> {
        match (pause, self) {
            (true, Pause { paused: false, .. }) => Some(true),
            (false, Pause { ours: true, .. }) => Some(false),
            _ => None,
        }
    }
}

/// Where a management cluster's self-upgrade is after this pass's preparations.
pub(super) use capstan_plan::decide::Upgrade as SelfUpgrade;

/// The Cluster API Cluster of a rendered cluster or a recorded inventory.
fn capi_cluster(refs: impl IntoIterator<Item = ObjectRef>) -> Option<ObjectRef> {
    refs.into_iter()
        .find(|r| r.kind == "Cluster" && r.group() == "cluster.x-k8s.io")
}

impl Pass<'_> {
    /// The management cluster whose record says it is upgrading itself, if `entry`'s is.
    pub(super) fn management_upgrading(&self, entry: &ClusterEntry) -> Option<String> {
        if entry.role == Role::Management {
            return None;
        }
        let rec = self.live.record(entry.management())?;
        let backup = rec.status.backup.as_deref().filter(|b| !b.is_empty())?;
        Some({
            format!(
                "management cluster {} is upgrading its own {} (backup {backup}): this cluster is paused until it is done",
                entry.management(),
                match rec.status.stage.as_deref() {
                    Some("Etcd") => "etcd",
                    _ => "control plane",
                }
            )
        })
    }

    /// Steps (i)–(iii) and (v) of the [module docs](self), for a management cluster's pass.
    pub(super) async fn self_upgrade(
        &self,
        fleet: &Fleet,
        entry: &ClusterEntry,
        plan: &mut Plan,
        staged: &Staged,
        prev: Option<&Recorded>,
    ) -> SelfUpgrade {
        let mut out = SelfUpgrade {
            backup: prev
                .and_then(|p| p.status.backup.clone())
                .unwrap_or_default(),
            failure: None,
        };
        if entry.role != Role::Management {
            return out;
        }
        let core = |s: &Stage| matches!(s, Stage::Etcd | Stage::ControlPlane);
        let changes_core = plan.entries.iter().any(|e| {
            matches!(e.action, Action::Create | Action::Update)
                && !e.scale_only
                && !e.is_drift_correction()
                && core(&stages::stage(&e.object, Default::default()))
                && self.live.get(&e.object).is_some()
        });
        if out.backup.is_empty() && changes_core {
            match self.start_self_upgrade(fleet, entry).await {
                Ok(dir) => out.backup = dir,
                Err(why) => {
                    // Not one step without a backup and paused workloads.
                    for e in &mut plan.entries {
                        if matches!(e.action, Action::Create | Action::Update | Action::Prune) {
                            e.action = Action::Held;
                            e.reason = Some(format!("waits for the backup: {why}"));
                        }
                    }
                    out.failure = Some(why);
                    return out;
                }
            }
        }
        let core_done = !plan.entries.iter().any(|e| {
            e.action == Action::Held && core(&stages::stage(&e.object, Default::default()))
        }) && staged
            .stages
            .iter()
            .filter(|s| core(&s.stage))
            .all(|s| s.state == State::Done);
        if core_done {
            // Rolled out, or no upgrade going out at all: whatever capstan paused for this
            // cluster is unpaused — also when the record lost its backup, or a pass that paused
            // some clusters stopped before it recorded one (the pauses are recorded on the
            // paused Clusters themselves).
            if !out.backup.is_empty() || self.paused_any(fleet, entry) {
                crate::failpoint::stop_here("self-upgrade-rolled-out").await;
                match self.pause_workloads(fleet, entry, false).await {
                    Ok(()) => out.backup.clear(),
                    Err(e) => out.failure = Some(format!("unpausing the workload clusters: {e}")),
                }
            }
            return out;
        }
        // Upgrading itself — its record says so, or what it paused does (a record that lost
        // its backup) — and rolling its control plane: kube-vip's holder goes last.
        let upgrading = !out.backup.is_empty() || self.paused_any(fleet, entry);
        let rolling_cp = staged.stages.iter().any(|s| {
            s.stage == Stage::ControlPlane && matches!(s.state, State::Apply | State::RollingOut)
        });
        if upgrading
            && rolling_cp
            && let Some(kcp) = plan
                .entries
                .iter()
                .find(|e| e.object.kind == "KubeadmControlPlane")
                .map(|e| e.object.clone())
            && let Err(e) = self.kube_vip_last(&kcp).await
        {
            tracing::warn!(cluster = %entry.name, error = %e, "could not order the control-plane rollout around kube-vip's holder");
        }
        if upgrading
            && staged
                .stages
                .iter()
                .any(|s| s.stage == Stage::ControlPlane && s.state == State::RollingOut)
        {
            crate::failpoint::stop_here("self-upgrade-rolling-out").await;
        }
        out
    }

    /// (i) and (ii): the backup, then the workloads paused. Returns the backup's directory.
    async fn start_self_upgrade(
        &self,
        fleet: &Fleet,
        entry: &ClusterEntry,
    ) -> Result<String, String> {
        let root = self
            .opts
            .backup_dir
            .clone()
            .unwrap_or_else(crate::backup::default_backup_dir);
        let backup = crate::backup::write(
            self.client(),
            &root,
            &entry.name,
            &self.opts.backup_encryption,
        )
        .await
        .map_err(|e| format!("backing up before upgrading {}: {e}", entry.name))?;
        self.read();
        if backup.encrypted_to.is_empty() {
            tracing::warn!(cluster = %entry.name, backup = %backup.dir.display(), objects = backup.objects, "backed up before the management cluster upgrades itself, NOT encrypted (--backup-plaintext)");
        } else {
            tracing::info!(cluster = %entry.name, backup = %backup.dir.display(), objects = backup.objects, encrypted_to = ?backup.encrypted_to, "backed up before the management cluster upgrades itself");
        }
        if !backup.skipped.is_empty() {
            tracing::warn!(cluster = %entry.name, skipped = ?backup.skipped, "kinds the agent may not list are not in the backup");
        }
        crate::failpoint::stop_here("self-upgrade-backed-up").await;
        self.pause_workloads(fleet, entry, true)
            .await
            .map_err(|e| format!("pausing the workload clusters: {e}"))?;
        Ok(backup.dir.display().to_string())
    }

    /// The Cluster API Cluster of every workload cluster of this management cluster: those of
    /// the repository and those recorded, with the workload cluster's name.
    fn workload_clusters(&self, fleet: &Fleet, entry: &ClusterEntry) -> Vec<(String, ObjectRef)> {
        let mut clusters: Vec<(String, ObjectRef)> = fleet
            .clusters
            .iter()
            .filter(
                |c| matches!(&c.role, Role::Workload { management } if *management == entry.name),
            )
            .filter_map(|c| {
                capi_cluster(c.objects.iter().flatten().map(crate::plan::reference))
                    .map(|r| (c.name.clone(), r))
            })
            .collect();
        let known: BTreeSet<String> = clusters.iter().map(|(_, r)| r.key()).collect();
        for (name, rec) in self.live.records() {
            if rec.management == entry.name
                && name != entry.name
                && let Some(r) = capi_cluster(rec.inventory())
                && !known.contains(&r.key())
            {
                clusters.push((name.clone(), r));
            }
        }
        clusters
    }

    /// Whether any workload Cluster is paused by capstan for this management cluster (from the
    /// live facts: no request).
    fn paused_any(&self, fleet: &Fleet, entry: &ClusterEntry) -> bool {
        self.workload_clusters(fleet, entry)
            .iter()
            .any(|(_, r)| Pause::of(self.live.get(r).as_ref(), &entry.name).ours)
    }

    /// Pauses (or unpauses) the Cluster API Cluster of every workload cluster of this
    /// management cluster. Pausing sets `spec.paused` and records the pause on the Cluster
    /// ([`PAUSED_FOR`]), as field manager [`PAUSE_MANAGER`], with the live resourceVersion as
    /// a precondition; a Cluster someone else paused is neither taken over nor, later,
    /// unpaused. Unpausing gives up both fields of exactly the Clusters that record capstan's
    /// pause for this management cluster.
    async fn pause_workloads(
        &self,
        fleet: &Fleet,
        entry: &ClusterEntry,
        paused: bool,
    ) -> Result<(), String> {
        let pp = crate::write::Apply::by(PAUSE_MANAGER);
        for (cluster, r) in self.workload_clusters(fleet, entry) {
            let Some(live) = self.live.get(&r) else {
                continue;
            };
            let mut metadata = json!({"name": r.name, "namespace": r.namespace});
            let body = match Pause::of(Some(&live), &entry.name).change(paused) {
                Some(true) => {
                    if live.resource_version > 0 {
                        metadata["resourceVersion"] = json!(live.resource_version.to_string());
                    }
                    metadata["annotations"] = json!({PAUSED_FOR: entry.name});
                    json!({"apiVersion": r.api_version, "kind": "Cluster", "metadata": metadata, "spec": {"paused": true}})
                }
                // Applying nothing of it gives up both fields: the server removes them.
                Some(false) => {
                    json!({"apiVersion": r.api_version, "kind": "Cluster", "metadata": metadata})
                }
                // Paused already (by this upgrade, or an operator's pause), or not capstan's to undo.
                None => continue,
            };
            // As the workload cluster's own identity: the tenancy policy lets it touch its own
            // Cluster only, whatever the record says.
            let writer = self
                .writer(
                    &Role::Workload {
                        management: entry.name.clone(),
                    },
                    &cluster,
                )
                .client;
            let (ar, _) = self
                .resolver()
                .resolve(&r.api_version, &r.kind)
                .await
                .map_err(|e| e.to_string())?;
            let api: Api<DynamicObject> = Api::namespaced_with(writer, &r.namespace, &ar);
            let answer = crate::write::apply(&api, &r.name, &pp, &body)
                .await
                .map_err(|e| format!("{}: {e}", r.subject()))?;
            self.wrote();
            // The next pass decides from what the server holds now, not from the watch's pace.
            if let Ok(v) = serde_json::to_value(&answer) {
                self.live.put(&r, &v);
            }
            if paused {
                crate::failpoint::stop_here("self-upgrade-paused-one").await;
            }
        }
        Ok(())
    }

    /// (iii): the control-plane machine whose node holds kube-vip's Lease goes last — every other
    /// outdated control-plane machine is marked for deletion, which Cluster API honours first.
    async fn kube_vip_last(&self, kcp: &ObjectRef) -> Result<(), String> {
        let machine = ObjectRef {
            api_version: "cluster.x-k8s.io/v1beta2".into(),
            kind: "Machine".into(),
            namespace: kcp.namespace.clone(),
            name: String::new(),
            hash: String::new(),
            generation: 0,
            fields: String::new(),
        };
        let machines = self.api_for(&machine).await?;
        mark_all_but_kube_vip_holder(
            self.client(),
            &machines,
            &kcp.name,
            &|| self.read(),
            &|| self.wrote(),
        )
        .await
        .map(|_| ())
    }
}

/// Marks for deletion every outdated machine of the control plane `kcp` (in `machines`'
/// namespace) but the one whose node holds kube-vip's Lease, as the agent does before its
/// management cluster's control plane rolls; the names marked. `read` and `wrote` are called
/// per request. (A function of its own so that the RBAC test runs it as a ServiceAccount.)
pub async fn mark_all_but_kube_vip_holder(
    client: &kube::Client,
    machines: &Api<DynamicObject>,
    kcp: &str,
    read: &(dyn Fn() + Sync),
    wrote: &(dyn Fn() + Sync),
) -> Result<Vec<String>, String> {
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), KUBE_VIP_LEASE.0);
    read();
    let Some(lease) = leases
        .get_opt(KUBE_VIP_LEASE.1)
        .await
        .map_err(|e| e.to_string())?
    else {
        return Ok(Vec::new());
    };
    let Some(holder) = lease.spec.and_then(|s| s.holder_identity) else {
        return Ok(Vec::new());
    };
    read();
    let listed = machines
        .list(&ListParams::default().labels(&format!("cluster.x-k8s.io/control-plane-name={kcp}")))
        .await
        .map_err(|e| e.to_string())?;
    let marked = marked_for_deletion(&listed.items, &holder);
    for m in &marked {
        let patch = json!({"metadata": {"annotations": {DELETE_MACHINE: ""}}});
        crate::write::merge(machines, m, &crate::write::Merge::blind(), &patch)
            .await
            .map_err(|e| format!("Machine/{m}: {e}"))?;
        wrote();
    }
    Ok(marked)
}

/// The outdated control-plane machines to mark for deletion so that the one whose node is
/// `holder` goes last: every outdated one but it, not marked yet. Outdated: Cluster API's
/// `UpToDate` condition is False.
pub fn marked_for_deletion(machines: &[DynamicObject], holder: &str) -> Vec<String> {
    let v = |m: &DynamicObject| serde_json::to_value(m).unwrap_or(Value::Null);
    let outdated = |m: &Value| {
        m.pointer("/status/conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "UpToDate" && c["status"] == "False")
    };
    let holds =
        |m: &Value| m.pointer("/status/nodeRef/name").and_then(Value::as_str) == Some(holder);
    if !machines.iter().map(v).any(|m| holds(&m) && outdated(&m)) {
        // The holder is up to date already (or not a machine of this control plane): nothing
        // to order.
        return Vec::new();
    }
    machines
        .iter()
        .map(v)
        .filter(|m| outdated(m) && !holds(m))
        .filter(|m| {
            m.pointer("/metadata/annotations")
                .and_then(|a| a.get(DELETE_MACHINE))
                .is_none()
        })
        .filter(|m| m.pointer("/metadata/deletionTimestamp").is_none())
        .filter_map(|m| {
            m.pointer("/metadata/name")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine(name: &str, node: &str, up_to_date: bool, marked: bool) -> DynamicObject {
        let mut annotations = serde_json::Map::new();
        if marked {
            annotations.insert(DELETE_MACHINE.into(), json!(""));
        }
        serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": name, "annotations": annotations},
            "status": {"nodeRef": {"name": node},
                "conditions": [{"type": "UpToDate", "status": if up_to_date { "True" } else { "False" }}]}
        }))
        .unwrap()
    }

    #[test]
    fn capstan_pauses_only_what_nobody_paused_and_unpauses_only_its_own() {
        let cluster = |paused: bool, by: Option<&str>| {
            let mut annotations = serde_json::Map::new();
            if let Some(m) = by {
                annotations.insert(PAUSED_FOR.into(), json!(m));
            }
            crate::live::LiveObject::from_value(&json!({
                "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                "metadata": {"name": "w", "namespace": "ns", "annotations": annotations},
                "spec": {"paused": paused}
            }))
        };
        // | the Cluster now                       | pausing     | unpausing   |
        for (what, live, pausing, unpausing) in [
            ("running", cluster(false, None), Some(true), None),
            (
                "paused by capstan for m",
                cluster(true, Some("m")),
                None,
                Some(false),
            ),
            ("paused by an operator", cluster(true, None), None, None),
            (
                "paused by capstan for m2",
                cluster(true, Some("m2")),
                None,
                None,
            ),
            // Someone unpaused it by hand; the record left behind is cleared, and a new
            // upgrade pauses it again.
            (
                "record left, unpaused",
                cluster(false, Some("m")),
                Some(true),
                Some(false),
            ),
        ] {
            let p = Pause::of(Some(&live), "m");
            assert_eq!(
                (p.change(true), p.change(false)),
                (pausing, unpausing),
                "{what}"
            );
        }
        assert_eq!(Pause::of(None, "m").change(true), Some(true));
    }

    #[test]
    fn every_outdated_machine_but_the_holder_is_marked() {
        let ms = [
            machine("cp-a", "node-a", false, false),
            machine("cp-b", "node-b", false, false),
            machine("cp-c", "node-c", false, true),
            machine("cp-new", "node-new", true, false),
        ];
        assert_eq!(marked_for_deletion(&ms, "node-b"), vec!["cp-a"]);
        // The holder already rolled (or is not ours): nothing to order.
        assert!(marked_for_deletion(&ms, "node-new").is_empty());
        assert!(marked_for_deletion(&ms, "elsewhere").is_empty());
    }
}
