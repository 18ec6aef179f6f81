//! The add-on decisions, pure: whether a workload cluster can take its add-ons yet, what to
//! prune, how healthy each add-on is, and what the `AddonsReady` condition says.
//!
//! The agent gathers the inputs (the cluster's kubeconfig from Cluster API's Secret, the workload
//! API server's answers, the objects read back after applying) and performs the results; the
//! rules live here so each is a case of a table test.
//!
//! Health follows kstatus (`sigs.k8s.io/cli-utils/pkg/kstatus`), the rules Flux and kubectl use:
//! an object is *current* once its controller has observed its latest generation and reports it
//! rolled out, *in progress* before, *failed* when its controller gave up (a Deployment past its
//! progress deadline, a failed Job, a `Stalled` condition).

use std::collections::BTreeSet;

use serde_json::Value;

use capstan_layout::addons::Addon;

use crate::status::{ConditionStatus, Reason};
use crate::{Action, Entry, ObjectRef};

/// What one cluster's add-on step did: its `AddonsReady` reason and how many add-ons it applied
/// and pruned (the agent's outcome of a pass; the `capstan_addon_*` metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    /// The `AddonsReady` condition's reason.
    pub reason: Reason,
    /// Add-ons applied.
    pub applied: usize,
    /// Add-ons pruned.
    pub pruned: usize,
}

/// The reason every add-on entry of a plan or diff carries: where it is applied.
pub const INSIDE: &str = "add-on, inside the workload cluster";

/// An add-on's identity across the layout (as written: no namespace for `default` or a
/// cluster-scoped kind) and the inventory (as the server answered): group, kind, namespace
/// (`default` written as none) and name.
fn loose_key(group: &str, kind: &str, namespace: &str, name: &str) -> String {
    let ns = if namespace == "default" {
        ""
    } else {
        namespace
    };
    capstan_templates::identity::key(group, kind, ns, name)
}

fn addon_key(a: &Addon) -> String {
    loose_key(
        capstan_templates::identity::group(a.api_version()),
        a.kind(),
        a.namespace(),
        a.name(),
    )
}

fn ref_key(r: &ObjectRef) -> String {
    loose_key(r.group(), &r.kind, &r.namespace, &r.name)
}

/// The content hash an inventory records for an add-on: of the object as written — for a
/// document of a SOPS file, of the encrypted file and its place in it, so no hash of a
/// decrypted value is ever recorded (a short secret's hash could be guessed back).
pub fn content_hash(a: &Addon) -> String {
    match &a.sealed {
        Some(s) => capstan_templates::identity::hash_json(&format!("sops:{}:{}", s.doc, s.text)),
        None => capstan_templates::identity::content_hash(&a.value),
    }
}

/// What two revisions' add-ons differ in (`capstan diff`): created, updated (with the diff) and
/// deleted add-ons, in apply order; unchanged ones left out.
pub fn compare(base: &[Addon], head: &[Addon]) -> Vec<Entry> {
    let before: std::collections::BTreeMap<String, &Addon> =
        base.iter().map(|a| (addon_key(a), a)).collect();
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    for a in head {
        let key = addon_key(a);
        seen.insert(key.clone());
        let was = before.get(&key);
        let old = was.map(|o| &o.value);
        if old == Some(&a.value) {
            continue;
        }
        let action = if old.is_some() {
            Action::Update
        } else {
            Action::Create
        };
        // An encrypted Secret's values are never shown, not even as ciphertext: only that the
        // file changed (a re-encryption changes every ciphertext without changing a value).
        let diff = if a.sealed.is_some() || was.is_some_and(|o| o.sealed.is_some()) {
            format!(
                "{}: encrypted with SOPS ({}), {} (values are not shown)\n",
                a.subject(),
                a.place(),
                if old.is_some() { "changed" } else { "new" }
            )
        } else {
            crate::diff_between(old, Some(&a.value), &a.subject(), ("base", "head"))
        };
        out.push(Entry {
            diff: Some(diff),
            ..Entry::new(ObjectRef::of(&a.value), action, Some(INSIDE.into()))
        });
    }
    for a in base.iter().rev().filter(|a| !seen.contains(&addon_key(a))) {
        out.push(Entry::new(
            ObjectRef::of(&a.value),
            Action::Prune,
            Some(INSIDE.into()),
        ));
    }
    out
}

/// What applying the add-ons would change against what the cluster's record says was applied
/// (`capstan plan`, PR plans; the workload cluster itself is not asked): those not applied yet,
/// those whose content changed since, and those to prune.
pub fn against_record(head: &[Addon], recorded: &[ObjectRef]) -> Vec<Entry> {
    let applied: std::collections::BTreeMap<String, &ObjectRef> =
        recorded.iter().map(|r| (ref_key(r), r)).collect();
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    for a in head {
        let key = addon_key(a);
        seen.insert(key.clone());
        let action = match applied.get(&key) {
            None => Action::Create,
            Some(r) if r.hash == content_hash(a) => continue,
            Some(_) => Action::Update,
        };
        out.push(Entry::new(
            ObjectRef::of(&a.value),
            action,
            Some(INSIDE.into()),
        ));
    }
    for r in recorded
        .iter()
        .rev()
        .filter(|r| !seen.contains(&ref_key(r)))
    {
        out.push(Entry::new(r.clone(), Action::Prune, Some(INSIDE.into())));
    }
    out
}

/// How far a workload cluster is from taking its add-ons.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reach {
    /// Cluster API has not written the `<cluster>-kubeconfig` Secret yet.
    NoKubeconfig,
    /// The kubeconfig is one capstan will not use (an exec plugin, a file path, no server):
    /// why. Never tried: a Secret in a tenant's namespace is not trusted to make the agent run
    /// commands or read its own files.
    Refused(String),
    /// The API server does not answer: the error.
    Unreachable(String),
    /// It answers, but no node is Ready (the kubelet reports Ready only once the CNI is up):
    /// how many nodes there are.
    NoReadyNode(usize),
    /// Reachable, with a Ready node.
    Ready,
}

/// One add-on's health.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    /// Rolled out.
    Current,
    /// Not yet: why.
    InProgress(String),
    /// Its controller gave up: why.
    Failed(String),
}

fn text<'a>(v: &'a Value, p: &str) -> Option<&'a str> {
    v.pointer(p).and_then(Value::as_str)
}

fn int(v: &Value, p: &str) -> i64 {
    v.pointer(p).and_then(Value::as_i64).unwrap_or(0)
}

/// The condition of `type_` in `status.conditions`: (status, reason, message).
fn condition<'a>(v: &'a Value, type_: &str) -> Option<(&'a str, &'a str, &'a str)> {
    v.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| text(c, "/type") == Some(type_))
        .map(|c| {
            (
                text(c, "/status").unwrap_or(""),
                text(c, "/reason").unwrap_or(""),
                text(c, "/message").unwrap_or(""),
            )
        })
}

/// An object's health as read back from the workload API server (kstatus rules).
pub fn health(v: &Value) -> Health {
    use Health::*;
    if v.pointer("/metadata/deletionTimestamp").is_some() {
        return InProgress("being deleted".into());
    }
    let generation = int(v, "/metadata/generation");
    if let Some(observed) = v
        .pointer("/status/observedGeneration")
        .and_then(Value::as_i64)
        && observed < generation
    {
        return InProgress(format!(
            "generation {generation} not observed yet (at {observed})"
        ));
    }
    if let Some(("True", reason, message)) = condition(v, "Stalled") {
        return Failed(format!("stalled: {reason} {message}").trim().to_string());
    }
    if let Some(("True", reason, _)) = condition(v, "Reconciling") {
        return InProgress(format!("reconciling: {reason}"));
    }
    let group = text(v, "/apiVersion")
        .map(capstan_templates::identity::group)
        .unwrap_or("");
    let kind = text(v, "/kind").unwrap_or("");
    let spec_replicas = v
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    match (group, kind) {
        ("apps", "Deployment") => {
            if let Some((_, "ProgressDeadlineExceeded", m)) = condition(v, "Progressing") {
                return Failed(format!("progress deadline exceeded: {m}"));
            }
            if v.pointer("/status/observedGeneration").is_none() {
                return InProgress("not observed by its controller yet".into());
            }
            let (updated, replicas, available) = (
                int(v, "/status/updatedReplicas"),
                int(v, "/status/replicas"),
                int(v, "/status/availableReplicas"),
            );
            if updated < spec_replicas {
                InProgress(format!("{updated}/{spec_replicas} replicas updated"))
            } else if replicas > updated {
                InProgress(format!(
                    "{} old replicas pending termination",
                    replicas - updated
                ))
            } else if available < updated {
                InProgress(format!("{available}/{updated} replicas available"))
            } else {
                Current
            }
        }
        ("apps", "StatefulSet") => {
            if v.pointer("/status/observedGeneration").is_none() {
                return InProgress("not observed by its controller yet".into());
            }
            if text(v, "/spec/updateStrategy/type") == Some("OnDelete") {
                return Current;
            }
            let ready = int(v, "/status/readyReplicas");
            let current = int(v, "/status/currentReplicas");
            let updated = int(v, "/status/updatedReplicas");
            if ready < spec_replicas {
                InProgress(format!("{ready}/{spec_replicas} replicas ready"))
            } else if text(v, "/status/currentRevision") != text(v, "/status/updateRevision")
                && updated < spec_replicas
            {
                InProgress(format!("{updated}/{spec_replicas} replicas updated"))
            } else if current < spec_replicas && updated < spec_replicas {
                InProgress(format!("{current}/{spec_replicas} replicas current"))
            } else {
                Current
            }
        }
        ("apps", "DaemonSet") => {
            if v.pointer("/status/observedGeneration").is_none() {
                return InProgress("not observed by its controller yet".into());
            }
            let desired = int(v, "/status/desiredNumberScheduled");
            let updated = int(v, "/status/updatedNumberScheduled");
            let available = int(v, "/status/numberAvailable");
            if updated < desired {
                InProgress(format!("{updated}/{desired} pods updated"))
            } else if available < desired {
                InProgress(format!("{available}/{desired} pods available"))
            } else {
                Current
            }
        }
        ("batch", "Job") => match (condition(v, "Complete"), condition(v, "Failed")) {
            (_, Some(("True", reason, m))) => {
                Failed(format!("job failed: {reason} {m}").trim().to_string())
            }
            (Some(("True", ..)), _) => Current,
            _ => InProgress(format!(
                "{} of {} completions",
                int(v, "/status/succeeded"),
                v.pointer("/spec/completions")
                    .and_then(Value::as_i64)
                    .unwrap_or(1)
            )),
        },
        ("", "Pod") => match text(v, "/status/phase") {
            Some("Succeeded") => Current,
            Some("Failed") => Failed("pod failed".into()),
            Some("Running") if condition(v, "Ready").is_some_and(|c| c.0 == "True") => Current,
            p => InProgress(format!("pod {}", p.unwrap_or("pending"))),
        },
        ("", "PersistentVolumeClaim") => match text(v, "/status/phase") {
            Some("Bound") => Current,
            p => InProgress(format!("claim {}", p.unwrap_or("pending"))),
        },
        ("", "Namespace") => match text(v, "/status/phase") {
            Some("Terminating") => InProgress("namespace terminating".into()),
            _ => Current,
        },
        ("apiextensions.k8s.io", "CustomResourceDefinition") => match condition(v, "Established") {
            Some(("True", ..)) => Current,
            _ => InProgress("not established yet".into()),
        },
        ("", "Service") if text(v, "/spec/type") == Some("LoadBalancer") => {
            let has_ingress = v
                .pointer("/status/loadBalancer/ingress")
                .and_then(Value::as_array)
                .is_some_and(|a| !a.is_empty());
            if has_ingress {
                Current
            } else {
                InProgress("no load balancer address yet".into())
            }
        }
        _ => match condition(v, "Ready") {
            Some(("False", reason, m)) => {
                InProgress(format!("not ready: {reason} {m}").trim().to_string())
            }
            _ => Current,
        },
    }
}

/// What the previous inventory holds that the desired set no longer does (by identity across
/// API versions), in reverse apply order: what lives in a Namespace or needs a CRD goes before
/// it.
pub fn prunes(previous: &[ObjectRef], desired: &[ObjectRef]) -> Vec<ObjectRef> {
    let keep: BTreeSet<String> = desired.iter().map(ObjectRef::key).collect();
    let mut out: Vec<ObjectRef> = previous
        .iter()
        .filter(|r| !keep.contains(&r.key()))
        .cloned()
        .collect();
    out.sort_by_key(|r| std::cmp::Reverse(capstan_layout::addons::rank(r.group(), &r.kind)));
    out
}

/// What a pass did with a cluster's add-ons: the condition, and the record to keep.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// The `AddonsReady` condition.
    pub verdict: Verdict,
    /// The record (None: nothing was ever applied and nothing is to be).
    pub status: Option<crate::status::AddonsStatus>,
    /// How many add-ons this step applied and pruned.
    pub applied: usize,
    /// See `applied`.
    pub pruned: usize,
}

/// The `AddonsReady` condition a pass records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// True: applied and current.
    pub status: ConditionStatus,
    /// Why.
    pub reason: Reason,
    /// For humans.
    pub message: String,
}

/// The condition from how far the cluster is (`reach`), what applying or pruning failed with
/// (`failure`), and each add-on's health, in apply order.
pub fn verdict(reach: &Reach, failure: Option<&str>, health: &[(String, Health)]) -> Verdict {
    let v = |status, reason, message: String| Verdict {
        status,
        reason,
        message,
    };
    use ConditionStatus::{False, True};
    match reach {
        Reach::NoKubeconfig => {
            return v(
                False,
                Reason::WaitingForCluster,
                "waiting for Cluster API to write the cluster's kubeconfig".into(),
            );
        }
        Reach::Refused(why) => {
            return v(
                False,
                Reason::AddonsFailed,
                format!("the cluster's kubeconfig is not used: {why}"),
            );
        }
        Reach::Unreachable(e) => {
            return v(
                False,
                Reason::WaitingForCluster,
                format!("waiting for the cluster's API server: {e}"),
            );
        }
        Reach::NoReadyNode(n) => {
            return v(
                False,
                Reason::WaitingForCluster,
                format!("waiting for a Ready node (the CNI up): {n} nodes, none Ready"),
            );
        }
        Reach::Ready => {}
    }
    if let Some(f) = failure {
        return v(False, Reason::AddonsFailed, f.to_string());
    }
    let failed: Vec<String> = health
        .iter()
        .filter_map(|(s, h)| match h {
            Health::Failed(why) => Some(format!("{s}: {why}")),
            _ => None,
        })
        .collect();
    if !failed.is_empty() {
        return v(False, Reason::AddonsFailed, failed.join("; "));
    }
    let waiting: Vec<String> = health
        .iter()
        .filter_map(|(s, h)| match h {
            Health::InProgress(why) => Some(format!("{s}: {why}")),
            _ => None,
        })
        .collect();
    if let Some(first) = waiting.first() {
        let more = match waiting.len() {
            1 => String::new(),
            n => format!(" (and {} more)", n - 1),
        };
        return v(False, Reason::AddonsProgressing, format!("{first}{more}"));
    }
    v(
        True,
        Reason::Available,
        format!("{} add-ons applied and current", health.len()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(replicas: i64, status: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "d", "generation": 2},
               "spec": {"replicas": replicas}, "status": status})
    }

    #[test]
    fn workloads_are_current_once_rolled_out_and_failed_when_their_controller_gives_up() {
        use Health::*;
        type Check = fn(&Health) -> bool;
        let cases: Vec<(&str, Value, Check)> = vec![
            ("deployment not observed", deployment(2, json!({})), |h| {
                matches!(h, InProgress(_))
            }),
            (
                "deployment old generation",
                deployment(
                    2,
                    json!({"observedGeneration": 1, "updatedReplicas": 2, "replicas": 2, "availableReplicas": 2}),
                ),
                |h| matches!(h, InProgress(m) if m.contains("generation 2")),
            ),
            (
                "deployment rolling",
                deployment(
                    2,
                    json!({"observedGeneration": 2, "updatedReplicas": 1, "replicas": 2, "availableReplicas": 2}),
                ),
                |h| matches!(h, InProgress(m) if m == "1/2 replicas updated"),
            ),
            (
                "deployment old pods",
                deployment(
                    2,
                    json!({"observedGeneration": 2, "updatedReplicas": 2, "replicas": 3, "availableReplicas": 2}),
                ),
                |h| matches!(h, InProgress(m) if m.contains("1 old")),
            ),
            (
                "deployment unavailable",
                deployment(
                    2,
                    json!({"observedGeneration": 2, "updatedReplicas": 2, "replicas": 2, "availableReplicas": 1}),
                ),
                |h| matches!(h, InProgress(m) if m == "1/2 replicas available"),
            ),
            (
                "deployment done",
                deployment(
                    2,
                    json!({"observedGeneration": 2, "updatedReplicas": 2, "replicas": 2, "availableReplicas": 2}),
                ),
                |h| *h == Current,
            ),
            (
                "deployment deadline",
                deployment(
                    2,
                    json!({"observedGeneration": 2, "conditions": [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded", "message": "too slow"}]}),
                ),
                |h| matches!(h, Failed(m) if m.contains("too slow")),
            ),
            (
                "daemonset rolling",
                json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"generation": 1}, "status": {"observedGeneration": 1, "desiredNumberScheduled": 3, "updatedNumberScheduled": 3, "numberAvailable": 2}}),
                |h| matches!(h, InProgress(m) if m == "2/3 pods available"),
            ),
            (
                "daemonset done",
                json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"generation": 1}, "status": {"observedGeneration": 1, "desiredNumberScheduled": 3, "updatedNumberScheduled": 3, "numberAvailable": 3}}),
                |h| *h == Current,
            ),
            (
                "statefulset not ready",
                json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"generation": 1}, "spec": {"replicas": 3}, "status": {"observedGeneration": 1, "readyReplicas": 1}}),
                |h| matches!(h, InProgress(m) if m == "1/3 replicas ready"),
            ),
            (
                "statefulset done",
                json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"generation": 1}, "spec": {"replicas": 2}, "status": {"observedGeneration": 1, "readyReplicas": 2, "currentReplicas": 2, "updatedReplicas": 2, "currentRevision": "a", "updateRevision": "a"}}),
                |h| *h == Current,
            ),
            (
                "job running",
                json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {}, "status": {"active": 1}}),
                |h| matches!(h, InProgress(_)),
            ),
            (
                "job complete",
                json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {}, "status": {"conditions": [{"type": "Complete", "status": "True"}]}}),
                |h| *h == Current,
            ),
            (
                "job failed",
                json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {}, "status": {"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}}),
                |h| matches!(h, Failed(m) if m.contains("BackoffLimitExceeded")),
            ),
            (
                "crd not established",
                json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {}, "status": {}}),
                |h| matches!(h, InProgress(_)),
            ),
            (
                "crd established",
                json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {}, "status": {"conditions": [{"type": "Established", "status": "True"}]}}),
                |h| *h == Current,
            ),
            (
                "configmap",
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}}),
                |h| *h == Current,
            ),
            (
                "custom stalled",
                json!({"apiVersion": "x.io/v1", "kind": "Thing", "metadata": {"generation": 1}, "status": {"observedGeneration": 1, "conditions": [{"type": "Stalled", "status": "True", "reason": "Broken"}]}}),
                |h| matches!(h, Failed(_)),
            ),
            (
                "custom not ready",
                json!({"apiVersion": "x.io/v1", "kind": "Thing", "metadata": {}, "status": {"conditions": [{"type": "Ready", "status": "False", "reason": "Waiting"}]}}),
                |h| matches!(h, InProgress(_)),
            ),
            (
                "being deleted",
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}),
                |h| matches!(h, InProgress(_)),
            ),
            (
                "lb without address",
                json!({"apiVersion": "v1", "kind": "Service", "metadata": {}, "spec": {"type": "LoadBalancer"}, "status": {}}),
                |h| matches!(h, InProgress(_)),
            ),
        ];
        for (name, v, ok) in cases {
            let h = health(&v);
            assert!(ok(&h), "{name}: {h:?}");
        }
    }

    fn addon(text: &str) -> Addon {
        Addon {
            value: serde_json::from_str(text).unwrap(),
            file: "a.yaml".into(),
            line: 1,
            set: None,
            sealed: None,
        }
    }

    #[test]
    fn an_encrypted_add_on_diffs_without_its_values_and_hashes_its_file() {
        let sealed = |cipher: &str, file: &str| Addon {
            sealed: Some(capstan_layout::addons::Sealed {
                text: std::sync::Arc::from(file),
                doc: 0,
            }),
            ..addon(&format!(
                r#"{{"apiVersion":"v1","kind":"Secret","metadata":{{"name":"s"}},"stringData":{{"p":"{cipher}"}}}}"#
            ))
        };
        let (old, new) = (
            sealed("ENC[old]", "file one"),
            sealed("ENC[new]", "file two"),
        );
        let d = compare(std::slice::from_ref(&old), std::slice::from_ref(&new));
        let text = d[0].diff.as_deref().unwrap();
        assert!(
            text.contains("encrypted with SOPS") && text.contains("changed"),
            "{text}"
        );
        assert!(!text.contains("ENC["), "{text}");
        let created = compare(&[], std::slice::from_ref(&new));
        assert!(created[0].diff.as_deref().unwrap().contains("new"));
        // The inventory's hash is of the encrypted file, not of any value.
        assert_ne!(content_hash(&old), content_hash(&new));
        assert_ne!(
            content_hash(&new),
            capstan_templates::identity::content_hash(&new.value)
        );
    }

    #[test]
    fn a_diff_and_a_plan_show_the_add_on_changes() {
        let ns = addon(r#"{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"p"}}"#);
        let cm1 = addon(
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"p"},"data":{"a":"1"}}"#,
        );
        let cm2 = addon(
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"p"},"data":{"a":"2"}}"#,
        );
        let dflt = addon(r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"d"}}"#);
        let said = |es: Vec<Entry>| -> Vec<(Action, String)> {
            es.into_iter()
                .map(|e| (e.action, e.object.subject()))
                .collect()
        };
        let d = compare(&[ns.clone(), cm1.clone()], &[cm2.clone(), dflt.clone()]);
        assert!(
            d[0].diff.as_deref().unwrap().contains("+  a: \"2\""),
            "{:?}",
            d[0].diff
        );
        assert_eq!(
            said(d),
            [
                (Action::Update, "ConfigMap/p/c".into()),
                (Action::Create, "ConfigMap/d".into()),
                (Action::Prune, "Namespace/p".into()),
            ]
        );
        assert!(compare(std::slice::from_ref(&cm1), std::slice::from_ref(&cm1)).is_empty());
        // Against the record: the inventory's namespace is the server's (`default`).
        let mut applied_cm = ObjectRef::of(&cm1.value);
        applied_cm.hash = content_hash(&cm1);
        let mut applied_d = ObjectRef::of(&dflt.value);
        applied_d.namespace = "default".into();
        applied_d.hash = content_hash(&dflt);
        let gone = r("v1", "Secret", "p", "old");
        let recorded = vec![applied_cm, applied_d, gone];
        assert_eq!(
            said(against_record(
                &[ns.clone(), cm2.clone(), dflt.clone()],
                &recorded
            )),
            [
                (Action::Create, "Namespace/p".into()),
                (Action::Update, "ConfigMap/p/c".into()),
                (Action::Prune, "Secret/p/old".into()),
            ]
        );
        assert!(against_record(&[cm1.clone(), dflt.clone()], &recorded[..2]).is_empty());
    }

    fn r(api: &str, kind: &str, ns: &str, name: &str) -> ObjectRef {
        ObjectRef::of(
            &json!({"apiVersion": api, "kind": kind, "metadata": {"namespace": ns, "name": name}}),
        )
    }

    #[test]
    fn prunes_what_left_the_set_across_versions_contents_before_their_namespace() {
        let prev = vec![
            r("v1", "Namespace", "", "gone"),
            r("apps/v1", "Deployment", "gone", "web"),
            r("v1", "ConfigMap", "kept", "c"),
            r(
                "apiextensions.k8s.io/v1",
                "CustomResourceDefinition",
                "",
                "w.x.io",
            ),
        ];
        let desired = vec![r("v1", "ConfigMap", "kept", "c")];
        let p: Vec<String> = prunes(&prev, &desired)
            .iter()
            .map(ObjectRef::subject)
            .collect();
        assert_eq!(
            p,
            [
                "Deployment/gone/web",
                "Namespace/gone",
                "CustomResourceDefinition/w.x.io"
            ]
        );
        // A new apiVersion of the same object is the same object.
        let prev = vec![r("example.io/v1beta1", "Thing", "a", "t")];
        let desired = vec![r("example.io/v1", "Thing", "a", "t")];
        assert!(prunes(&prev, &desired).is_empty());
    }

    #[test]
    fn the_condition_says_what_the_add_ons_wait_for_or_why_they_failed() {
        use ConditionStatus::*;
        let current = vec![("ConfigMap/a/c".to_string(), Health::Current)];
        let cases = [
            (
                Reach::NoKubeconfig,
                None,
                current.clone(),
                False,
                Reason::WaitingForCluster,
                "kubeconfig",
            ),
            (
                Reach::Unreachable("connection refused".into()),
                None,
                current.clone(),
                False,
                Reason::WaitingForCluster,
                "connection refused",
            ),
            (
                Reach::NoReadyNode(2),
                None,
                current.clone(),
                False,
                Reason::WaitingForCluster,
                "2 nodes, none Ready",
            ),
            (
                Reach::Refused("exec plugin".into()),
                None,
                current.clone(),
                False,
                Reason::AddonsFailed,
                "exec plugin",
            ),
            (
                Reach::Ready,
                Some("ConfigMap/a/c: denied"),
                current.clone(),
                False,
                Reason::AddonsFailed,
                "denied",
            ),
            (
                Reach::Ready,
                None,
                vec![
                    ("Job/a/j".into(), Health::Failed("job failed".into())),
                    ("Deployment/a/d".into(), Health::InProgress("1/2".into())),
                ],
                False,
                Reason::AddonsFailed,
                "Job/a/j: job failed",
            ),
            (
                Reach::Ready,
                None,
                vec![
                    ("Deployment/a/d".into(), Health::InProgress("1/2".into())),
                    ("Deployment/a/e".into(), Health::InProgress("0/1".into())),
                ],
                False,
                Reason::AddonsProgressing,
                "Deployment/a/d: 1/2 (and 1 more)",
            ),
            (
                Reach::Ready,
                None,
                current.clone(),
                True,
                Reason::Available,
                "1 add-ons applied",
            ),
        ];
        for (reach, failure, health, status, reason, says) in cases {
            let v = verdict(&reach, failure, &health);
            assert_eq!((v.status, v.reason), (status, reason), "{reach:?}");
            assert!(v.message.contains(says), "{reach:?}: {}", v.message);
        }
    }
}
