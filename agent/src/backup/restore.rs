//! Restoring a backup ([`super`]): owners before what they own, every Cluster paused until
//! everything is back, statuses written back through the status subresource.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams};
use kube::discovery::{ApiResource, Discovery, Scope};
use serde_json::{Value, json};

use super::{BackupError, Identities, read};

/// The field manager of restore's writes.
pub const RESTORE_MANAGER: &str = "capstan-restore";

fn uid(o: &Value) -> &str {
    o.pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// Orders objects so that every owner comes before what it owns (and otherwise as given):
/// what `restore` needs to rewrite owner references to the new UIDs. Owners missing from the
/// set do not hold anything back; a cycle is broken in input order. (The move's order:
/// [`capstan_plan::moving::owners_first`].)
pub fn restore_order(objects: Vec<Value>) -> Vec<Value> {
    capstan_plan::moving::owners_first(objects)
}

/// The object as it is created again: without what the server assigns (its status kept), its
/// owner references pointing at the new UIDs of restored owners (and dropped where the owner
/// was not restored), and — for a Cluster API Cluster — paused.
pub fn prepared(o: &Value, new_uids: &BTreeMap<String, String>) -> Value {
    // The status stays: a kind without a status subresource keeps it from the create; where
    // there is one (capstan's ManagedCluster among them), the server ignores it and `restore`
    // writes it after.
    let mut v = capstan_plan::moving::fresh(o, new_uids);
    if is_capi_cluster(o) {
        v["spec"]["paused"] = json!(true);
    }
    v
}

fn is_capi_cluster(o: &Value) -> bool {
    capstan_plan::moving::is_capi_cluster(o)
}

/// What a restore did.
#[derive(Debug, Clone, Default)]
pub struct Restored {
    /// Objects created.
    pub created: usize,
    /// Objects that already existed, left as they were (`Kind/ns/name`).
    pub existing: Vec<String>,
    /// Objects whose kind the server does not serve (`Kind/ns/name`): their CRDs are missing.
    pub unknown: Vec<String>,
}

fn gvk_of(o: &Value) -> kube::core::GroupVersionKind {
    let s = |p: &str| o.pointer(p).and_then(Value::as_str).unwrap_or("");
    crate::k8s::gvk_of(s("/apiVersion"), s("/kind"))
}

/// Discovery for a restore. Kinds of the backup the server does not list but has a CRD for are
/// waited for (a CRD is Established before discovery lists it), then discovery runs again.
async fn discovery_for(client: &Client, objects: &[Value]) -> Result<Discovery, BackupError> {
    let run = || async {
        Discovery::new(client.clone())
            .run_aggregated()
            .await
            .map_err(BackupError::Discovery)
    };
    let discovery = run().await?;
    let missing: BTreeSet<(String, String)> = objects
        .iter()
        .map(gvk_of)
        .filter(|g| discovery.resolve_gvk(g).is_none())
        .map(|g| (g.group, g.kind))
        .collect();
    if missing.is_empty() {
        return Ok(discovery);
    }
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let pending: Vec<String> = crds
        .list(&ListParams::default())
        .await
        .map_err(|source| BackupError::List {
            resource: "customresourcedefinitions".into(),
            source,
        })?
        .items
        .into_iter()
        .filter(|c| missing.contains(&(c.spec.group.clone(), c.spec.names.kind.clone())))
        .filter_map(|c| c.metadata.name)
        .collect();
    if pending.is_empty() {
        return Ok(discovery);
    }
    crate::k8s::wait_served(client, &pending, crate::k8s::SERVED_WAIT).await?;
    run().await
}

/// Restores a backup onto the cluster `client` talks to (see the module docs), decrypting it
/// with `identities`. The backup is read, decrypted and parsed whole before the first write:
/// one that cannot be (no identity, a wrong one, a damaged file) changes nothing.
pub async fn restore(
    client: &Client,
    dir: &Path,
    identities: &Identities,
) -> Result<Restored, BackupError> {
    let objects = restore_order(read(dir, identities)?);
    let discovery = discovery_for(client, &objects).await?;
    let mut out = Restored::default();
    let mut new_uids: BTreeMap<String, String> = BTreeMap::new();
    let mut to_unpause: Vec<(ApiResource, String, String)> = Vec::new();
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let mut made_namespaces = BTreeSet::new();
    for o in &objects {
        let s = |p: &str| o.pointer(p).and_then(Value::as_str).unwrap_or("");
        let subject = capstan_templates::identity::subject(
            s("/kind"),
            s("/metadata/namespace"),
            s("/metadata/name"),
        );
        let Some((ar, caps)) = discovery.resolve_gvk(&gvk_of(o)) else {
            out.unknown.push(subject);
            continue;
        };
        let ns = s("/metadata/namespace");
        if !ns.is_empty() && made_namespaces.insert(ns.to_string()) {
            let obj = k8s_openapi::api::core::v1::Namespace {
                metadata: kube::api::ObjectMeta {
                    name: Some(ns.to_string()),
                    ..Default::default()
                },
                ..Default::default()
            };
            match crate::write::create(&namespaces, None, &obj).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(source) => {
                    return Err(BackupError::Restore {
                        subject: format!("Namespace/{ns}"),
                        source,
                    });
                }
            }
        }
        let api: Api<DynamicObject> = if caps.scope == Scope::Namespaced {
            Api::namespaced_with(client.clone(), ns, &ar)
        } else {
            Api::all_with(client.clone(), &ar)
        };
        let body: DynamicObject =
            serde_json::from_value(prepared(o, &new_uids)).map_err(|e| BackupError::Format {
                path: dir.join("objects.json"),
                message: format!("{subject}: {e}"),
            })?;
        let name = s("/metadata/name").to_string();
        let created = match crate::write::create(&api, None, &body).await {
            Ok(c) => c,
            Err(kube::Error::Api(e)) if e.code == 409 => {
                out.existing.push(subject);
                continue;
            }
            Err(source) => return Err(BackupError::Restore { subject, source }),
        };
        out.created += 1;
        if let Some(u) = created.metadata.uid.clone() {
            new_uids.insert(uid(o).to_string(), u);
        }
        if let Some(status) = o.get("status").filter(|st| !st.is_null())
            && caps.subresources.iter().any(|(r, _)| r.plural == "status")
        {
            let how = crate::write::Apply::by(RESTORE_MANAGER);
            let patch = json!({
                "apiVersion": s("/apiVersion"),
                "kind": s("/kind"),
                "metadata": {"name": name, "namespace": ns},
                "status": status,
            });
            crate::write::apply_status(&api, &name, &how, &patch)
                .await
                .map_err(|source| BackupError::Restore {
                    subject: format!("{subject} (status)"),
                    source,
                })?;
        }
        if is_capi_cluster(o) && o.pointer("/spec/paused") != Some(&json!(true)) {
            to_unpause.push((ar.clone(), ns.to_string(), name));
        }
    }
    // Everything is back: the Clusters that were running run again.
    for (ar, ns, name) in to_unpause {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &ar);
        let unpause = json!({"spec": {"paused": null}});
        crate::write::merge(&api, &name, &crate::write::Merge::blind(), &unpause)
            .await
            .map_err(|source| BackupError::Restore {
                subject: format!("Cluster/{ns}/{name} (unpause)"),
                source,
            })?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(kind: &str, name: &str, uid: &str, owners: &[&str]) -> Value {
        let refs: Vec<Value> = owners
            .iter()
            .map(|u| json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Owner", "name": "o", "uid": u}))
            .collect();
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": kind,
            "metadata": {"name": name, "namespace": "ns", "uid": uid, "resourceVersion": "7",
                "creationTimestamp": "2026-01-01T00:00:00Z", "ownerReferences": refs},
            "spec": {"x": 1}, "status": {"ready": true}})
    }

    #[test]
    fn owners_come_before_what_they_own() {
        let machine = obj("Machine", "m", "u3", &["u2"]);
        let set = obj("MachineSet", "s", "u2", &["u1"]);
        let md = obj("MachineDeployment", "d", "u1", &["u0"]);
        let cluster = obj("Cluster", "c", "u0", &[]);
        let orphan = obj("Secret", "x", "u9", &["gone"]);
        let order: Vec<String> = restore_order(vec![machine, set, orphan, md, cluster])
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(order, vec!["x", "c", "d", "s", "m"]);
        // A cycle does not hang.
        let a = obj("A", "a", "ua", &["ub"]);
        let b = obj("B", "b", "ub", &["ua"]);
        assert_eq!(restore_order(vec![a, b]).len(), 2);
    }

    #[test]
    fn restored_objects_lose_server_fields_and_point_at_new_owners() {
        let set = obj("MachineSet", "s", "u2", &["u1", "gone"]);
        let new: BTreeMap<String, String> = [("u1".to_string(), "n1".to_string())].into();
        let p = prepared(&set, &new);
        assert!(p["metadata"].get("uid").is_none());
        assert!(p["metadata"].get("resourceVersion").is_none());
        assert_eq!(p["status"]["ready"], true);
        let refs = p["metadata"]["ownerReferences"].as_array().unwrap();
        assert_eq!(refs.len(), 1);
        assert_eq!(refs[0]["uid"], "n1");
        // Clusters come back paused.
        let c = obj("Cluster", "c", "u0", &[]);
        assert_eq!(prepared(&c, &new)["spec"]["paused"], true);
        assert!(
            prepared(&c, &new)["metadata"]
                .get("ownerReferences")
                .is_none()
        );
    }
}
