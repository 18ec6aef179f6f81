//! A workload cluster's add-ons applied inside it ([`capstan_layout::addons`]): reached through
//! the kubeconfig Secret Cluster API writes for it (`<cluster>-kubeconfig`, key `value`), never
//! through the management cluster's client, so nothing of an add-on can land on the management
//! cluster.
//!
//! One step of a workload cluster's pass, after its own objects are out: reach the cluster
//! (its kubeconfig, its API server answering, a Ready node), apply the CRDs and Namespaces,
//! server-side dry-run the rest (a refusal applies nothing more and fails the add-ons only), apply
//! it in order, prune what left the repository, and read each add-on's health from the apply's
//! answer. Every pass applies the whole set again: server-side apply of unchanged content writes
//! nothing, and a field someone changed inside the cluster is put back (drift).
//!
//! The kubeconfig is input the agent does not control (a Secret in the cluster's namespace), so
//! it is used only as Cluster API writes it: inline certificates and keys or a token. An exec
//! plugin, an auth provider, or any file path (a token file, a client key, a CA) is refused
//! before anything is tried: otherwise a Secret could make the agent run a command or send its
//! own service-account token.
//!
//! Connections are cached per cluster, keyed by the Secret's resourceVersion (a rotated
//! kubeconfig is a new connection), at most [`MAX_CONNECTIONS`] at once (the least recently
//! used one is dropped).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use capstan_layout::ClusterEntry;
use capstan_layout::addons::Addon;
use capstan_templates::identity;
use k8s_openapi::api::core::v1::{Node, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::GroupVersionKind;
use kube::discovery::{ApiResource, Scope};
use kube::{Client, Config, ResourceExt};
use serde_json::Value;

use crate::k8s::fence::Fence;
use crate::live::watch::OnChange;
use crate::plan::ObjectRef;
use crate::plan::addons::{self, Health, Outcome, Reach};
use crate::status::{AddonsStatus, Recorded};

/// How long a CRD add-on may take to be established before what uses it is applied.
const CRD_ESTABLISHED: Duration = Duration::from_secs(30);

/// Nodes read a page at a time when looking for a Ready one.
const NODES_PAGE: u32 = 50;

/// How many workload clusters' connections are kept at once (past it, the least recently used
/// is dropped and made again when its cluster's next step comes).
pub const MAX_CONNECTIONS: usize = 256;

/// The label every add-on carries inside its cluster: the cluster it is an add-on of. Prune
/// deletes only what carries it.
pub const ADDON_LABEL: &str = "capstan.dev/addon-of";

/// Connections to workload clusters, by cluster: the kubeconfig Secret's resourceVersion it was
/// made from, the client, when it was last used, and the watch on its add-ons (dropped, and so
/// stopped, with the connection).
#[derive(Default)]
pub struct Connections {
    open: Mutex<HashMap<String, Connection>>,
    uses: std::sync::atomic::AtomicU64,
}

struct Connection {
    version: String,
    client: Client,
    used: u64,
    watch: Option<Watching>,
    /// The API resources found for its add-ons' kinds (kept while every step succeeds).
    kinds: Found,
}

/// API resources by (apiVersion, kind): the resource, and whether it is namespaced.
type Found = BTreeMap<(String, String), (ApiResource, bool)>;

/// A watch on one cluster's add-ons: the kinds it covers, and its task (aborted when dropped).
struct Watching {
    kinds: Vec<(String, String)>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Watching {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Connections {
    /// How many are open.
    pub fn len(&self) -> usize {
        self.open.lock().expect("connections").len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many clusters' add-ons are watched.
    pub fn watched(&self) -> usize {
        self.open
            .lock()
            .expect("connections")
            .values()
            .filter(|c| c.watch.is_some())
            .count()
    }

    fn get(&self, cluster: &str, version: &str) -> Option<Client> {
        let tick = self.tick();
        let mut open = self.open.lock().expect("connections");
        let c = open.get_mut(cluster)?;
        (c.version == version).then(|| {
            c.used = tick;
            c.client.clone()
        })
    }

    fn put(&self, cluster: &str, version: &str, client: Client) {
        let tick = self.tick();
        let mut open = self.open.lock().expect("connections");
        open.insert(
            cluster.to_string(),
            Connection {
                version: version.to_string(),
                client,
                used: tick,
                watch: None,
                kinds: Found::new(),
            },
        );
        while open.len() > MAX_CONNECTIONS {
            let oldest = open
                .iter()
                .min_by_key(|(_, c)| c.used)
                .map(|(k, _)| k.clone());
            match oldest {
                Some(k) => open.remove(&k),
                None => break,
            };
        }
    }

    /// The kinds found by the cluster's last successful step.
    fn kinds(&self, cluster: &str) -> Found {
        let open = self.open.lock().expect("connections");
        open.get(cluster)
            .map(|c| c.kinds.clone())
            .unwrap_or_default()
    }

    /// Keeps the kinds a successful step found (a failed step keeps none: a kind may be gone).
    fn keep_kinds(&self, cluster: &str, kinds: Found) {
        if let Some(c) = self.open.lock().expect("connections").get_mut(cluster) {
            c.kinds = kinds;
        }
    }

    fn forget(&self, cluster: &str) {
        self.open.lock().expect("connections").remove(cluster);
    }

    /// Watches the cluster's add-ons of `kinds` (apiVersion, kind) for changes made inside it,
    /// calling `on_change` for each (the daemon then reconciles the cluster: drift put back
    /// without waiting for the next resync). Started only for a cluster with add-ons; a watch
    /// already running over the same kinds is kept.
    fn watch(&self, cluster: &str, mut kinds: Vec<(String, String)>, on_change: &OnChange) {
        kinds.sort();
        kinds.dedup();
        let mut open = self.open.lock().expect("connections");
        let Some(c) = open.get_mut(cluster) else {
            return;
        };
        if c.watch.as_ref().is_some_and(|w| w.kinds == kinds) {
            return;
        }
        let task = tokio::spawn(watch_addons(
            c.client.clone(),
            cluster.to_string(),
            kinds.clone(),
            on_change.clone(),
        ));
        c.watch = Some(Watching { kinds, task });
    }

    fn tick(&self) -> u64 {
        self.uses.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }
}

/// The watch of [`Connections::watch`]: one watcher per kind, on the objects labelled as the
/// cluster's add-ons; every change after the initial listing is reported.
async fn watch_addons(
    client: Client,
    cluster: String,
    kinds: Vec<(String, String)>,
    on_change: OnChange,
) {
    use futures::StreamExt;
    use kube::runtime::WatchStreamExt;
    use kube::runtime::watcher::{self, Event};
    let selector = format!("{ADDON_LABEL}={cluster}");
    let mut streams = Vec::new();
    for (api_version, kind) in &kinds {
        let mut k = Kinds {
            client: client.clone(),
            found: BTreeMap::new(),
        };
        let Ok((ar, _)) = k.of(api_version, kind).await else {
            continue;
        };
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        let kind = kind.clone();
        let stream = watcher::watcher(api, watcher::Config::default().labels(&selector))
            .default_backoff()
            .map(move |e| (kind.clone(), e));
        streams.push(stream.boxed());
    }
    let mut all = futures::stream::select_all(streams);
    let mut listed: std::collections::BTreeSet<String> = Default::default();
    while let Some((kind, event)) = all.next().await {
        match event {
            Ok(Event::InitDone) => {
                listed.insert(kind);
            }
            Ok(Event::Apply(_) | Event::Delete(_)) if listed.contains(&kind) => {
                on_change(&kind, Some(&cluster));
            }
            _ => {}
        }
    }
}

/// Why a kubeconfig is not used, if so: anything but what Cluster API writes (inline
/// certificates, keys and tokens, one server).
pub fn refused(kc: &Kubeconfig) -> Option<String> {
    for c in &kc.clusters {
        let Some(cl) = &c.cluster else { continue };
        if cl.certificate_authority.is_some() {
            return Some(format!("cluster `{}` names a CA file", c.name));
        }
        if cl.proxy_url.is_some() {
            return Some(format!("cluster `{}` sets a proxy", c.name));
        }
        if cl
            .server
            .as_deref()
            .is_none_or(|s| !s.starts_with("https://"))
        {
            return Some(format!("cluster `{}` has no https:// server", c.name));
        }
    }
    for u in &kc.auth_infos {
        let Some(a) = &u.auth_info else { continue };
        let why = if a.exec.is_some() {
            "runs an exec plugin"
        } else if a.auth_provider.is_some() {
            "uses an auth provider"
        } else if a.token_file.is_some() {
            "reads a token file"
        } else if a.client_certificate.is_some() || a.client_key.is_some() {
            "reads a certificate or key file"
        } else if a.impersonate.is_some() || a.impersonate_groups.is_some() {
            "impersonates"
        } else {
            continue;
        };
        return Some(format!("user `{}` {why}", u.name));
    }
    None
}

/// The cluster's Cluster API namespace (where its kubeconfig Secret is), from its rendered
/// Cluster API Cluster.
fn capi_namespace(entry: &ClusterEntry) -> Option<String> {
    entry
        .objects
        .iter()
        .flatten()
        .find(|o| o.kind() == "Cluster" && identity::group(o.api_version()) == "cluster.x-k8s.io")
        .and_then(|o| {
            o.value()
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
}

/// Reaches the cluster: a client, or how far it is from one.
async fn reach(
    mgmt: &Client,
    conns: &Connections,
    fence: Option<&Fence>,
    entry: &ClusterEntry,
) -> Result<Client, Reach> {
    let ns = capi_namespace(entry).unwrap_or_else(|| "default".into());
    let secrets: Api<Secret> = Api::namespaced(mgmt.clone(), &ns);
    let name = format!("{}-kubeconfig", entry.name);
    let secret = match secrets.get_opt(&name).await {
        Ok(Some(s)) => s,
        Ok(None) => return Err(Reach::NoKubeconfig),
        Err(e) => {
            return Err(Reach::Unreachable(format!(
                "reading Secret/{ns}/{name}: {e}"
            )));
        }
    };
    // Cluster API's own Secret: labelled for the cluster, of its type.
    let labelled = secret
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("cluster.x-k8s.io/cluster-name"))
        == Some(&entry.name);
    if !labelled || secret.type_.as_deref() != Some("cluster.x-k8s.io/secret") {
        return Err(Reach::Refused(format!(
            "Secret/{ns}/{name} is not Cluster API's (type cluster.x-k8s.io/secret, labelled cluster.x-k8s.io/cluster-name: {})",
            entry.name
        )));
    }
    let version = secret.metadata.resource_version.clone().unwrap_or_default();
    let client = match conns.get(&entry.name, &version) {
        Some(c) => c,
        None => {
            let bytes = secret
                .data
                .as_ref()
                .and_then(|d| d.get("value"))
                .map(|b| b.0.clone())
                .ok_or_else(|| Reach::Refused(format!("Secret/{ns}/{name} has no `value`")))?;
            let client = connect(&bytes)
                .await
                .map_err(|e| Reach::Refused(format!("Secret/{ns}/{name}: {e}")))?;
            // The leader's fence: a replica that may no longer lead writes into no cluster.
            let client = match fence {
                Some(f) => f.guard(&client),
                None => client,
            };
            conns.put(&entry.name, &version, client.clone());
            client
        }
    };
    // The nodes, a page at a time until a Ready one: the API server answering and a node Ready
    // in one request on a cluster that is up.
    let nodes: Api<Node> = Api::all(client.clone());
    let mut seen = 0;
    let mut page = ListParams::default().limit(NODES_PAGE);
    loop {
        let listed = match nodes.list(&page).await {
            Ok(l) => l,
            Err(e) => {
                conns.forget(&entry.name);
                return Err(Reach::Unreachable(e.to_string()));
            }
        };
        seen += listed.items.len();
        let ready = listed.items.iter().any(|n| {
            n.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        });
        if ready {
            return Ok(client);
        }
        match listed.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(next) => page = page.continue_token(&next),
            None => return Err(Reach::NoReadyNode(seen)),
        }
    }
}

/// A client from kubeconfig bytes, refused unless it is what Cluster API writes.
async fn connect(bytes: &[u8]) -> Result<Client, String> {
    capstan_client::install_crypto_provider();
    let text = std::str::from_utf8(bytes).map_err(|_| "the kubeconfig is not UTF-8".to_string())?;
    let kc = Kubeconfig::from_yaml(text).map_err(|e| format!("not a kubeconfig: {e}"))?;
    if let Some(why) = refused(&kc) {
        return Err(why);
    }
    let mut config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|e| format!("kubeconfig: {e}"))?;
    config.connect_timeout = Some(Duration::from_secs(5));
    config.read_timeout = Some(Duration::from_secs(30));
    Client::try_from(config).map_err(|e| e.to_string())
}

/// The API resources of the kinds written: found once per connection while its steps succeed.
struct Kinds {
    client: Client,
    found: Found,
}

impl Kinds {
    async fn of(&mut self, api_version: &str, kind: &str) -> Result<(ApiResource, bool), String> {
        let key = (api_version.to_string(), kind.to_string());
        if let Some(f) = self.found.get(&key) {
            return Ok(f.clone());
        }
        let (g, v) = match api_version.split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", api_version),
        };
        let gvk = GroupVersionKind::gvk(g, v, kind);
        let (ar, caps) = kube::discovery::pinned_kind(&self.client, &gvk)
            .await
            .map_err(|e| format!("{api_version} {kind} is not served by the cluster: {e}"))?;
        let f = (ar, caps.scope == Scope::Namespaced);
        self.found.insert(key, f.clone());
        Ok(f)
    }

    async fn api(&mut self, a: &Addon) -> Result<(Api<DynamicObject>, String), String> {
        let (ar, namespaced) = self.of(a.api_version(), a.kind()).await?;
        if namespaced {
            let ns = match a.namespace() {
                "" => "default",
                n => n,
            };
            Ok((
                Api::namespaced_with(self.client.clone(), ns, &ar),
                ns.to_string(),
            ))
        } else {
            Ok((Api::all_with(self.client.clone(), &ar), String::new()))
        }
    }
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
        if !self.merge_only {
            let pp = PatchParams::apply(identity::FIELD_MANAGER).force();
            match api.patch(a.name(), &pp, &Patch::Apply(obj)).await {
                // 415, or a body that is no Kubernetes Status (go-restful's own 415 answer,
                // which kube reads as code 0).
                Err(kube::Error::Api(s)) if s.code == 415 || s.code == 0 => self.merge_only = true,
                other => return other,
            }
        }
        let pp = PatchParams {
            field_manager: Some(identity::FIELD_MANAGER.to_string()),
            ..Default::default()
        };
        // Merge-patched when it exists, else created (such a server's answers to a read of a
        // missing object are not always a Status kube can read, so no read decides it).
        match api.patch(a.name(), &pp, &Patch::Merge(obj)).await {
            Ok(o) => Ok(o),
            Err(_) => {
                let o: DynamicObject =
                    serde_json::from_value(obj.clone()).map_err(kube::Error::SerdeError)?;
                let post = kube::api::PostParams {
                    field_manager: Some(identity::FIELD_MANAGER.to_string()),
                    ..Default::default()
                };
                api.create(&post, &o).await
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
    let dry = PatchParams::apply(identity::FIELD_MANAGER)
        .force()
        .dry_run();
    // A server that takes no apply cannot dry-run one either.
    for (a, (api, ns)) in rest.iter().zip(&apis).filter(|_| dry_run && !w.merge_only) {
        if let Err(e) = api
            .patch(a.name(), &dry, &Patch::Apply(desired(a, cluster, ns)))
            .await
        {
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
                let dp = DeleteParams::background();
                if let Err(e) = api.delete(&r.name, &dp).await
                    && !matches!(&e, kube::Error::Api(s) if s.code == 404)
                {
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
    revision: &str,
) -> Option<Outcome> {
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
    let (failure, applied) = match apply_all(&mut kinds, &entry.name, wanted, !unchanged).await {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn kubeconfig(user: &str, cluster: &str) -> Kubeconfig {
        Kubeconfig::from_yaml(&format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: w\n  cluster:\n{cluster}\ncontexts:\n- name: w\n  context: {{cluster: w, user: u}}\ncurrent-context: w\nusers:\n- name: u\n  user:\n{user}\n"
        ))
        .unwrap()
    }

    #[test]
    fn only_a_kubeconfig_as_cluster_api_writes_it_is_used() {
        let server = "    server: https://10.0.0.1:6443\n    certificate-authority-data: Zm9v";
        let inline = "    client-certificate-data: Zm9v\n    client-key-data: Zm9v";
        assert_eq!(refused(&kubeconfig(inline, server)), None);
        assert_eq!(refused(&kubeconfig("    token: abc", server)), None);
        let cases = [
            (
                "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /bin/sh\n      args: [-c, id]",
                server,
                "exec plugin",
            ),
            (
                "    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token",
                server,
                "token file",
            ),
            (
                "    client-certificate: /etc/agent.crt\n    client-key: /etc/agent.key",
                server,
                "certificate or key file",
            ),
            (
                "    auth-provider:\n      name: oidc\n      config: {}",
                server,
                "auth provider",
            ),
            (
                "    token: abc\n    as: system:admin",
                server,
                "impersonates",
            ),
            (
                inline,
                "    server: https://10.0.0.1:6443\n    certificate-authority: /etc/ca.crt",
                "CA file",
            ),
            (inline, "    server: http://10.0.0.1:8080", "https://"),
            (
                inline,
                "    server: https://10.0.0.1:6443\n    proxy-url: http://169.254.169.254",
                "proxy",
            ),
        ];
        for (user, cluster, says) in cases {
            let why = refused(&kubeconfig(user, cluster))
                .unwrap_or_else(|| panic!("{user} {cluster}: used"));
            assert!(why.contains(says), "{why}");
        }
    }

    #[test]
    fn the_connection_cache_is_bounded_and_keyed_by_the_secret_version() {
        capstan_client::install_crypto_provider();
        let conns = Connections::default();
        let client = || {
            let config = Config::new("http://127.0.0.1:1".parse().unwrap());
            Client::try_from(config).unwrap()
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            for i in 0..MAX_CONNECTIONS + 5 {
                conns.put(&format!("c{i}"), "1", client());
            }
            assert_eq!(conns.len(), MAX_CONNECTIONS);
            assert!(
                conns.get("c0", "1").is_none(),
                "the least recently used went first"
            );
            assert!(conns.get("c10", "1").is_some());
            assert!(
                conns.get("c10", "2").is_none(),
                "a rotated kubeconfig is a new connection"
            );
        });
    }
}
