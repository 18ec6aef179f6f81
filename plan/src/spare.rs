//! Whether a bare-metal cluster's rolling upgrade can start: the spare Hardware it needs.
//!
//! On bare metal a machine is a server of the admin's inventory (a Tinkerbell Hardware), and
//! CAPT provisions a new machine only on a free Hardware its template's affinity selects. A
//! rolling upgrade adds up to `maxSurge` new machines before it removes old ones, so a group
//! rolled with a surge of one needs one free matching server; without it the new machine waits
//! for Hardware that never comes, and the rollout stalls with an old machine possibly already
//! cordoned. EKS Anywhere's CLI refuses such an upgrade before it starts; capstan holds it,
//! saying which group lacks how many servers, until the inventory has them (an admin adds
//! Hardware, the pass after sees it) or the repository rolls without surge (`maxSurge: 0`,
//! `maxUnavailable: 1`: an old machine goes first and its server is reused).
//!
//! Like the health gate ([`crate::holds::health_gate`]) it only decides whether an upgrade
//! *starts*: once the revision is being applied it is not asked again, and creations and scales
//! are never held here (a scale that outgrows the inventory is validate's error,
//! `not-enough-hardware`). Hardware the agent may not read (no CRD, or RBAC) holds nothing: the
//! gate decides only from what it sees.

use capstan_layout::hardware::affinity_selects;
use serde_json::Value;

use crate::holds::{HealthFacts, machine_rolls, starts_rolling};
pub use crate::live::Server;
use crate::{ObjectRef, Plan, stages};

/// The surge a rollout strategy allows at `path` (an integer, or a percentage of `replicas`
/// rounded up, as Cluster API rounds it); 1 when unset, Cluster API's default.
fn surge(object: &Value, path: &str, replicas: u64) -> u64 {
    match object.pointer(path) {
        None | Some(Value::Null) => 1,
        Some(Value::Number(n)) => n.as_u64().unwrap_or(1),
        Some(Value::String(s)) => match s.strip_suffix('%').map(str::parse::<u64>) {
            Some(Ok(pct)) => (replicas * pct).div_ceil(100),
            _ => s.parse().unwrap_or(1),
        },
        Some(_) => 1,
    }
}

/// What a rolling group needs: its bare-metal template's affinity and its surge. None for a
/// group not on bare metal.
fn need<'a>(object: &Value, desired: &'a [Value]) -> Option<(&'a Value, u64)> {
    let kind = object["kind"].as_str()?;
    let (template_at, surge_at, replicas) = match kind {
        "KubeadmControlPlane" => (
            "/spec/machineTemplate/spec/infrastructureRef",
            "/spec/rollout/strategy/rollingUpdate/maxSurge",
            object.pointer("/spec/replicas").and_then(Value::as_u64)?,
        ),
        "MachineDeployment" => (
            "/spec/template/spec/infrastructureRef",
            "/spec/rollout/strategy/rollingUpdate/maxSurge",
            object.pointer("/spec/replicas").and_then(Value::as_u64)?,
        ),
        _ => return None,
    };
    let template = object.pointer(template_at)?;
    if template["kind"] != "TinkerbellMachineTemplate" {
        return None;
    }
    let namespace = &object["metadata"]["namespace"];
    let found = desired.iter().find(|o| {
        o["kind"] == "TinkerbellMachineTemplate"
            && o["metadata"]["name"] == template["name"]
            && &o["metadata"]["namespace"] == namespace
    })?;
    let affinity = found.pointer("/spec/template/spec/hardwareAffinity")?;
    Some((affinity, surge(object, surge_at, replicas)))
}

/// The groups of `plan` whose upgrade would start now and lack spare Hardware, one line each
/// (`KubeadmControlPlane/ns/name: a surge of 1, 0 free Hardware its template selects`).
/// `desired`: the cluster's rendered objects; `servers`: the management cluster's Hardware.
pub fn shortfalls(
    plan: &Plan,
    desired: &[Value],
    servers: &[Server],
    live: impl Fn(&ObjectRef) -> bool,
) -> Vec<String> {
    let mut out = Vec::new();
    for e in &plan.entries {
        if !stages::rolls_machines(e) || !live(&e.object) {
            continue;
        }
        // By identity: the plan's reference carries the hash and generation applied.
        let key = e.object.key();
        let Some(object) = desired.iter().find(|o| ObjectRef::of(o).key() == key) else {
            continue;
        };
        let Some((affinity, surge)) = need(object, desired) else {
            continue;
        };
        if surge == 0 {
            continue;
        }
        let free = servers
            .iter()
            .filter(|s| s.namespace == e.object.namespace && s.free())
            .filter(|s| affinity_selects(affinity, &s.labels))
            .count() as u64;
        if free < surge {
            out.push(format!(
                "{}: a surge of {surge}, {free} free Hardware its template selects",
                e.object.subject()
            ));
        }
    }
    out
}

/// The gate: when this revision would start a bare-metal rollout ([`HealthFacts`]: recorded
/// and target differ) and a rolling group lacks spare Hardware, every machine-rolling change
/// of the plan is held with why. `servers` is asked only then; None (Hardware unreadable)
/// holds nothing. Returns the hold's reason.
pub fn spare_gate(
    plan: &mut Plan,
    f: &HealthFacts<'_>,
    desired: &[Value],
    live: impl Fn(&ObjectRef) -> bool,
    servers: impl FnOnce() -> Option<Vec<Server>>,
) -> Option<String> {
    if !starts_rolling(plan, f, &live) {
        return None;
    }
    let servers = servers()?;
    let short = shortfalls(plan, desired, &servers, &live);
    if short.is_empty() {
        return None;
    }
    let why = format!(
        "not enough spare bare-metal Hardware for the rolling upgrade ({}): it starts once the inventory has them, or roll without surge (upgradeRolloutStrategy maxSurge 0, maxUnavailable 1)",
        short.join("; ")
    );
    machine_rolls(plan, &why, live);
    Some(why)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Action, Entry};
    use capstan_layout::hardware::OWNER_LABEL;
    use serde_json::json;
    use std::collections::BTreeMap;

    fn tmt(name: &str, role: &str) -> Value {
        json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
            "kind": "TinkerbellMachineTemplate",
            "metadata": {"namespace": "ns", "name": name},
            "spec": {"template": {"spec": {"hardwareAffinity": {"required": [
                {"labelSelector": {"matchLabels": {"cluster.x-k8s.io/cluster-name": "w", "type": role}}}
            ]}}}},
        })
    }

    fn kcp(template: &str, surge: Value) -> Value {
        json!({
            "apiVersion": "controlplane.cluster.x-k8s.io/v1beta2",
            "kind": "KubeadmControlPlane",
            "metadata": {"namespace": "ns", "name": "w"},
            "spec": {
                "replicas": 3,
                "machineTemplate": {"spec": {"infrastructureRef": {
                    "apiGroup": "infrastructure.cluster.x-k8s.io",
                    "kind": template.split(':').next().unwrap(),
                    "name": template.split(':').nth(1).unwrap(),
                }}},
                "rollout": {"strategy": {"rollingUpdate": {"maxSurge": surge}}},
            },
        })
    }

    fn md(surge: Value, replicas: u64) -> Value {
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2",
            "kind": "MachineDeployment",
            "metadata": {"namespace": "ns", "name": "w-md-0"},
            "spec": {
                "replicas": replicas,
                "template": {"spec": {"infrastructureRef": {
                    "apiGroup": "infrastructure.cluster.x-k8s.io",
                    "kind": "TinkerbellMachineTemplate",
                    "name": "w-md-0-2",
                }}},
                "rollout": {"strategy": {"rollingUpdate": {"maxSurge": surge}}},
            },
        })
    }

    fn server(role: &str, owner: Option<&str>) -> Server {
        let mut labels = BTreeMap::from([
            ("cluster.x-k8s.io/cluster-name".to_string(), "w".to_string()),
            ("type".to_string(), role.to_string()),
        ]);
        if let Some(o) = owner {
            labels.insert(OWNER_LABEL.into(), o.into());
        }
        Server {
            namespace: "ns".into(),
            labels,
        }
    }

    fn plan_of(objects: &[Value], action: Action) -> Plan {
        Plan {
            cluster: "w".into(),
            entries: objects
                .iter()
                .map(|o| {
                    // As a real pass's entries are: with the hash and generation applied.
                    let mut r = ObjectRef::of(o);
                    r.hash = "applied-hash".into();
                    r.generation = 3;
                    Entry::new(r, action, None)
                })
                .collect(),
        }
    }

    const STARTING: HealthFacts<'static> = HealthFacts {
        recorded: "old",
        target: "new",
        overridden: false,
    };

    #[test]
    fn a_rollout_starts_only_with_a_free_matching_server_per_group() {
        let desired = vec![
            tmt("w-cp-2", "cp"),
            tmt("w-md-0-2", "worker"),
            kcp("TinkerbellMachineTemplate:w-cp-2", json!(1)),
            md(json!(1), 2),
        ];
        let rolling = [desired[2].clone(), desired[3].clone()];
        let held = |servers: Vec<Server>| {
            let mut plan = plan_of(&rolling, Action::Update);
            let why = spare_gate(&mut plan, &STARTING, &desired, |_| true, || Some(servers));
            (
                why,
                plan.entries.iter().map(|e| e.action).collect::<Vec<_>>(),
            )
        };
        // Every machine holds its server: nothing spare, both groups short, both held.
        let (why, actions) = held(vec![server("cp", Some("a")), server("worker", Some("b"))]);
        let why = why.unwrap();
        assert!(
            why.contains("KubeadmControlPlane/ns/w: a surge of 1, 0 free")
                && why.contains("MachineDeployment/ns/w-md-0: a surge of 1, 0 free")
                && why.contains("maxSurge 0"),
            "{why}"
        );
        assert_eq!(actions, vec![Action::Held, Action::Held]);
        // A spare of each role: the upgrade starts.
        let (why, actions) = held(vec![
            server("cp", Some("a")),
            server("cp", None),
            server("worker", None),
        ]);
        assert_eq!((why, actions), (None, vec![Action::Update, Action::Update]));
        // A free server of the wrong role, or of another namespace, or of another cluster, is no
        // spare for this group.
        let mut elsewhere = server("cp", None);
        elsewhere.namespace = "other".into();
        let mut foreign = server("cp", None);
        foreign
            .labels
            .insert("cluster.x-k8s.io/cluster-name".into(), "x".into());
        let (why, _) = held(vec![server("worker", None), elsewhere, foreign]);
        assert!(
            why.unwrap()
                .contains("KubeadmControlPlane/ns/w: a surge of 1, 0 free")
        );
    }

    #[test]
    fn no_surge_needs_no_spare_and_a_percentage_rounds_up() {
        let desired = vec![tmt("w-md-0-2", "worker"), md(json!(0), 4)];
        let mut plan = plan_of(&desired[1..], Action::Update);
        assert_eq!(
            spare_gate(&mut plan, &STARTING, &desired, |_| true, || Some(vec![])),
            None
        );
        // 25% of 5 is 1.25: two servers.
        let desired = vec![tmt("w-md-0-2", "worker"), md(json!("25%"), 5)];
        let plan = plan_of(&desired[1..], Action::Update);
        let one = vec![server("worker", None)];
        assert_eq!(
            shortfalls(&plan, &desired, &one, |_| true),
            vec!["MachineDeployment/ns/w-md-0: a surge of 2, 1 free Hardware its template selects"]
        );
    }

    #[test]
    fn only_the_start_of_a_bare_metal_rollout_is_gated() {
        let desired = vec![
            tmt("w-cp-2", "cp"),
            kcp("TinkerbellMachineTemplate:w-cp-2", json!(1)),
        ];
        let none = || Some(vec![]);
        // The revision already being applied (an upgrade under way), or never applied (a
        // creation): not asked.
        for recorded in ["new", ""] {
            let f = HealthFacts {
                recorded,
                ..STARTING
            };
            let mut plan = plan_of(&desired[1..], Action::Update);
            assert_eq!(spare_gate(&mut plan, &f, &desired, |_| true, none), None);
        }
        // A creation (not live) or a scale rolls nothing.
        let mut plan = plan_of(&desired[1..], Action::Update);
        assert_eq!(
            spare_gate(&mut plan, &STARTING, &desired, |_| false, none),
            None
        );
        let mut plan = plan_of(&desired[1..], Action::Update);
        plan.entries[0].scale_only = true;
        assert_eq!(
            spare_gate(&mut plan, &STARTING, &desired, |_| true, none),
            None
        );
        // Not on bare metal.
        let docker = vec![kcp("DockerMachineTemplate:w-cp-2", json!(1))];
        let mut plan = plan_of(&docker, Action::Update);
        assert_eq!(
            spare_gate(&mut plan, &STARTING, &docker, |_| true, none),
            None
        );
        // Hardware the agent cannot read holds nothing.
        let mut plan = plan_of(&desired[1..], Action::Update);
        assert_eq!(
            spare_gate(&mut plan, &STARTING, &desired, |_| true, || None),
            None
        );
        assert_eq!(plan.entries[0].action, Action::Update);
    }
}
