//! A workload cluster's add-ons applied inside it ([`capstan_layout::addons`]): reached through
//! the kubeconfig Secret Cluster API writes for it (`<cluster>-kubeconfig`, key `value`), never
//! through the management cluster's client, so nothing of an add-on can land on the management
//! cluster (`connect.rs`: the kubeconfig's rules, the connections, the watches).
//!
//! One step of a workload cluster's pass, after its own objects are out: reach the cluster
//! (its kubeconfig, its API server answering, a Ready node), apply the CRDs and Namespaces,
//! server-side dry-run the rest (a refusal applies nothing more and fails the add-ons only), apply
//! it in order, prune what left the repository, and read each add-on's health from the apply's
//! answer. Every pass applies the whole set again: server-side apply of unchanged content writes
//! nothing, and a field someone changed inside the cluster is put back (drift).

mod connect;

use std::time::Duration;

use capstan_layout::ClusterEntry;
use capstan_layout::addons::Addon;
use capstan_templates::identity;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject};
use serde_json::Value;

pub use self::connect::{Connections, MAX_CONNECTIONS, refused};
use self::connect::{Found, Kinds, reach};
use crate::k8s::fence::Fence;
use crate::live::watch::OnChange;
use crate::plan::ObjectRef;
use crate::plan::addons::{self, Health, Outcome, Reach};
use crate::status::{AddonsStatus, Recorded};

/// How long a CRD add-on may take to be established before what uses it is applied.
const CRD_ESTABLISHED: Duration = Duration::from_secs(30);

/// The label every add-on carries inside its cluster: the cluster it is an add-on of. Prune
/// deletes only what carries it.
pub const ADDON_LABEL: &str = "capstan.dev/addon-of";

pub use super::sops::SOPS_AGE_SECRET;
use super::sops::{sops_identities, sops_secret};

/// The add-ons with every SOPS-encrypted one decrypted (in memory: the copies live for this
/// step only); the first that does not decrypt fails the step, named by its file and line.
async fn opened(
    mgmt: &Client,
    secret: &(String, String),
    wanted: &[Addon],
) -> Result<Option<Vec<Addon>>, String> {
    if wanted.iter().all(|a| a.sealed.is_none()) {
        return Ok(None);
    }
    let ids = sops_identities(mgmt, secret).await?;
    let mut files: std::collections::HashMap<*const str, Vec<Value>> = Default::default();
    let mut out = Vec::with_capacity(wanted.len());
    for a in wanted {
        let Some(s) = &a.sealed else {
            out.push(a.clone());
            continue;
        };
        let docs = match files.entry(std::sync::Arc::as_ptr(&s.text)) {
            std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => v.insert(
                capstan_layout::sops::decrypt(&s.text, &ids)
                    .map_err(|e| format!("{} ({}): SOPS: {e}", a.subject(), a.place()))?,
            ),
        };
        let mut doc = docs.get(s.doc).cloned().ok_or_else(|| {
            format!(
                "{} ({}): SOPS: the document is missing",
                a.subject(),
                a.place()
            )
        })?;
        if let Some(m) = doc.as_object_mut() {
            m.remove("sops");
        }
        // The MAC covers the plain metadata, so the decrypted object is the one validated: a
        // mismatch here would be a bug, never applied.
        if ObjectRef::of(&doc).key() != ObjectRef::of(&a.value).key() {
            return Err(format!(
                "{} ({}): SOPS: the decrypted document is another object",
                a.subject(),
                a.place()
            ));
        }
        out.push(Addon {
            value: doc,
            ..a.clone()
        });
    }
    Ok(Some(out))
}

/// The object as applied: the add-on label set, the namespace `kinds` resolved.
fn desired(a: &Addon, cluster: &str, namespace: &str) -> Value {
    let mut v = a.value.clone();
    if !namespace.is_empty() {
        v["metadata"]["namespace"] = Value::String(namespace.to_string());
    }
    let labels = &mut v["metadata"]["labels"];
    if !labels.is_object() {
        *labels = Value::Object(Default::default());
    }
    labels[ADDON_LABEL] = Value::String(cluster.to_string());
    v
}

/// The reference an inventory keeps of an applied add-on (`v`, the server's answer): its
/// identity there, and the hash of `a` as written (what `capstan plan` compares).
fn reference(v: &Value, a: &Addon) -> ObjectRef {
    ObjectRef {
        hash: addons::content_hash(a),
        ..ObjectRef::of(v)
    }
}

/// How add-ons are written: server-side apply, or — on an API server that refuses apply's
/// content type (415: CAPD's in-memory backend, which serves only what Cluster API needs) —
/// created when absent and merge-patched when present. That fallback puts back drift in the
/// fields capstan writes, but has no field ownership: a field removed from the repository stays
/// in the cluster until the object is replaced.
#[derive(Default)]
struct Writer {
    merge_only: bool,
}

impl Writer {
    async fn write(
        &mut self,
        api: &Api<DynamicObject>,
        a: &Addon,
        obj: &Value,
    ) -> Result<DynamicObject, kube::Error> {
        use crate::write;
        if !self.merge_only {
            let how = write::Apply::by(identity::FIELD_MANAGER);
            match write::apply(api, a.name(), &how, obj).await {
                // 415, or a body that is no Kubernetes Status (go-restful's own 415 answer,
                // which kube reads as code 0).
                Err(kube::Error::Api(s)) if s.code == 415 || s.code == 0 => self.merge_only = true,
                other => return other,
            }
        }
        let how = write::Merge::blind().by(identity::FIELD_MANAGER);
        // Merge-patched when it exists, else created (such a server's answers to a read of a
        // missing object are not always a Status kube can read, so no read decides it).
        match write::merge(api, a.name(), &how, obj).await {
            Ok(o) => Ok(o),
            Err(_) => {
                let o: DynamicObject =
                    serde_json::from_value(obj.clone()).map_err(kube::Error::SerdeError)?;
                write::create(api, Some(identity::FIELD_MANAGER), &o).await
            }
        }
    }
}

/// What the applies so far did: each add-on's reference and health.
type Done = Vec<(ObjectRef, Health)>;

/// Add-ons to read again once all is applied: their place in [`Done`], their API and name.
type Again = Vec<(usize, Api<DynamicObject>, String)>;

/// Records an applied add-on from the server's answer `o`; one not current yet is read again
/// once all is applied (a CRD is established, a Namespace active, a moment after its apply).
fn record(
    done: &mut Done,
    again: &mut Again,
    api: &Api<DynamicObject>,
    a: &Addon,
    o: &DynamicObject,
) {
    let v = serde_json::to_value(o).unwrap_or_default();
    let h = addons::health(&v);
    if h != Health::Current {
        again.push((done.len(), api.clone(), a.name().to_string()));
    }
    done.push((reference(&v, a), h));
}

/// Applies `addons` (in order) with the server's dry run first for all but the foundation; the
/// references applied, each with its health, or the first refusal.
async fn apply_all(
    kinds: &mut Kinds,
    cluster: &str,
    addons: &[Addon],
    dry_run: bool,
) -> Result<Done, (String, Done)> {
    let client = kinds.client.clone();
    let mut w = Writer::default();
    let mut done = Vec::new();
    let (foundation, rest): (Vec<&Addon>, Vec<&Addon>) = addons.iter().partition(|a| {
        capstan_layout::addons::is_foundation(identity::group(a.api_version()), a.kind())
    });
    let fail = |a: &Addon, e: String, done: Done| {
        Err((format!("{} ({}): {e}", a.subject(), a.place()), done))
    };
    let mut again = Again::new();
    for a in foundation {
        let (api, ns) = match kinds.api(a).await {
            Ok(x) => x,
            Err(e) => return fail(a, e, done),
        };
        match w.write(&api, a, &desired(a, cluster, &ns)).await {
            Ok(o) => record(&mut done, &mut again, &api, a, &o),
            Err(e) => return fail(a, e.to_string(), done),
        }
    }
    // The kinds the CRDs add are served once they are established: waited for (bounded),
    // then discovered with the rest.
    for a in addons
        .iter()
        .filter(|a| a.kind() == "CustomResourceDefinition")
    {
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        let established = kube::runtime::wait::await_condition(
            crds,
            a.name(),
            kube::runtime::wait::conditions::is_crd_established(),
        );
        match tokio::time::timeout(CRD_ESTABLISHED, established).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return fail(a, e.to_string(), done),
            Err(_) => {
                return fail(
                    a,
                    format!("not established within {}s", CRD_ESTABLISHED.as_secs()),
                    done,
                );
            }
        }
    }
    let mut apis = Vec::new();
    for a in &rest {
        match kinds.api(a).await {
            Ok((api, ns)) => apis.push((api, ns)),
            Err(e) => return fail(a, e, done),
        }
    }
    let dry = crate::write::Apply::by(identity::FIELD_MANAGER).dry_run();
    // A server that takes no apply cannot dry-run one either.
    for (a, (api, ns)) in rest.iter().zip(&apis).filter(|_| dry_run && !w.merge_only) {
        if let Err(e) = crate::write::apply(api, a.name(), &dry, &desired(a, cluster, ns)).await {
            return fail(a, format!("refused by the cluster's API server: {e}"), done);
        }
    }
    for (a, (api, ns)) in rest.iter().zip(&apis) {
        match w.write(api, a, &desired(a, cluster, ns)).await {
            Ok(o) => record(&mut done, &mut again, api, a, &o),
            Err(e) => return fail(a, e.to_string(), done),
        }
    }
    for (i, api, name) in again {
        if let Ok(o) = api.get(&name).await {
            done[i].1 = addons::health(&serde_json::to_value(&o).unwrap_or_default());
        }
    }
    Ok(done)
}

/// Deletes what left the set, if it is still this cluster's add-on; the first failure.
async fn prune(kinds: &mut Kinds, cluster: &str, gone: &[ObjectRef]) -> Option<String> {
    let client = kinds.client.clone();
    for r in gone {
        let (ar, namespaced) = match kinds.of(&r.api_version, &r.kind).await {
            Ok(x) => x,
            // Its kind is gone (a CRD pruned before): so is the object.
            Err(_) => continue,
        };
        let api: Api<DynamicObject> = if namespaced {
            Api::namespaced_with(client.clone(), &r.namespace, &ar)
        } else {
            Api::all_with(client.clone(), &ar)
        };
        match api.get_opt(&r.name).await {
            Ok(Some(o)) if o.labels().get(ADDON_LABEL).map(String::as_str) == Some(cluster) => {
                let how = crate::write::Delete::any().background();
                if let Err(e) = crate::write::delete(&api, &r.name, &how).await {
                    return Some(format!("pruning {}: {e}", r.subject()));
                }
            }
            Ok(_) => {}
            Err(e) => return Some(format!("pruning {}: {e}", r.subject())),
        }
    }
    None
}

/// The add-on step of a workload cluster's pass; None when it has no add-ons and never had.
pub(super) async fn step(
    mgmt: &Client,
    conns: &Connections,
    on_change: Option<&OnChange>,
    fence: Option<&Fence>,
    entry: &ClusterEntry,
    prev: Option<&Recorded>,
    opts: &super::Options,
) -> Option<Outcome> {
    let revision = opts.revision.as_str();
    let recorded = prev.and_then(|p| p.status.addons.clone());
    let wanted = entry.addons.as_deref().map(Vec::as_slice).unwrap_or(&[]);
    if wanted.is_empty() && recorded.as_ref().is_none_or(|r| r.inventory.is_empty()) {
        return None;
    }
    let client = match reach(mgmt, conns, fence, entry).await {
        Ok(c) => c,
        Err(reach) => {
            return Some(Outcome {
                verdict: addons::verdict(&reach, None, &[]),
                status: recorded,
                applied: 0,
                pruned: 0,
            });
        }
    };
    if let Some(on_change) = on_change
        && !wanted.is_empty()
    {
        let kinds = wanted
            .iter()
            .map(|a| (a.api_version().to_string(), a.kind().to_string()))
            .collect();
        conns.watch(&entry.name, kinds, on_change);
    }
    let previous = recorded
        .as_ref()
        .map(|r| r.inventory.clone())
        .unwrap_or_default();
    // The set applied in full before, unchanged since: no dry run (it is what the server took).
    let unchanged = recorded
        .as_ref()
        .is_some_and(|r| !r.hash.is_empty() && r.hash == set_hash(wanted));
    let mut kinds = Kinds {
        client: client.clone(),
        found: conns.kinds(&entry.name),
    };
    // Encrypted add-ons are decrypted only now, once the cluster is reached; one that does not
    // decrypt applies nothing of the set (and prunes nothing).
    let plain = match opened(mgmt, &sops_secret(opts), wanted).await {
        Ok(p) => p,
        Err(failure) => {
            return Some(Outcome {
                verdict: addons::verdict(&Reach::Ready, Some(&failure), &[]),
                status: recorded,
                applied: 0,
                pruned: 0,
            });
        }
    };
    let to_apply = plain.as_deref().unwrap_or(wanted);
    let (failure, applied) = match apply_all(&mut kinds, &entry.name, to_apply, !unchanged).await {
        Ok(done) => (None, done),
        Err((f, done)) => (Some(f), done),
    };
    let refs: Vec<ObjectRef> = applied.iter().map(|(r, _)| r.clone()).collect();
    // Prune only after the whole set applied: a failure leaves the previous set's objects.
    let gone = addons::prunes(&previous, &refs);
    let (failure, pruned) = match failure {
        Some(f) => (Some(f), 0),
        None => (prune(&mut kinds, &entry.name, &gone).await, gone.len()),
    };
    conns.keep_kinds(
        &entry.name,
        if failure.is_none() {
            kinds.found
        } else {
            Found::new()
        },
    );
    let inventory = match &failure {
        // What was applied joins what was recorded: nothing applied is ever forgotten.
        Some(_) => {
            let mut inv = previous.clone();
            for r in &refs {
                if !inv.iter().any(|p| p.key() == r.key()) {
                    inv.push(r.clone());
                }
            }
            inv
        }
        None => refs,
    };
    let count = applied.len();
    let health: Vec<(String, Health)> =
        applied.into_iter().map(|(r, h)| (r.subject(), h)).collect();
    let verdict = addons::verdict(&Reach::Ready, failure.as_deref(), &health);
    let hash = if failure.is_none() {
        set_hash(wanted)
    } else {
        recorded
            .as_ref()
            .map(|r| r.hash.clone())
            .unwrap_or_default()
    };
    Some(Outcome {
        verdict,
        applied: count,
        pruned,
        status: (!inventory.is_empty() || !hash.is_empty()).then(|| AddonsStatus {
            hash,
            revision: revision.to_string(),
            inventory,
        }),
    })
}

/// The hash of a set of add-ons as written.
fn set_hash(addons: &[Addon]) -> String {
    let text: Vec<String> = addons.iter().map(|a| a.value.to_string()).collect();
    identity::hash_json(&text.join("\n"))
}
