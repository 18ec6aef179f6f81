//! The daemon's live cache: one watch per kind, open for as long as the agent runs.
//!
//! ```text
//! watch Kind A (metadata only)      ─┐
//! watch Kind B (metadata only)      ─┤
//! watch Cluster, KCP, MD (whole)    ─┼─▶ Live { facts per object, MachineSets, statuses } ◀── passes
//! watch MachineSets (whole)         ─┤         │ a fact changed that capstan did not write
//! watch ManagedCluster              ─┘         └─▶ on_change(kind, cluster): the daemon queues it
//! ```
//!
//! A pass asks for the kinds it needs ([`LiveCache::ensure`]); a kind seen for the first time
//! gets its watch, and the pass waits until that watch has listed everything once. From then on
//! the pass reads memory only: a steady-state pass makes no read requests.
//!
//! Drift is an event: when a watched object's facts change (generation, content hash, label,
//! deletion, rollout status) or it is deleted, and the change is not the one capstan just wrote
//! (applies and deletes update the cache before their watch events arrive), `on_change` fires.
//! A re-list after a watch expired replaces the kind's facts wholesale and fires when anything
//! differs. Watch errors are retried with kube's default backoff and never empty the cache: a
//! fact is only dropped by a delete event or a complete re-list.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, PartialObjectMeta};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::sync::watch as signal;
use tokio::task::AbortHandle;
use tracing::{debug, warn};

use super::{
    HARDWARE, Live, LiveError, LiveObject, MACHINE_SET, MACHINE_SET_SELECTOR, SELECTOR, Server,
    draws_on_hardware, has_machine_sets, key_of, machine_set_key, read_whole, server_of,
};
use crate::health::MachineSet;
use crate::k8s::refusal::{self, Refusal, Refused};
use crate::k8s::{DiscoveryError, Resolver};
use crate::status::{self, Recorded};

/// What the cache calls when the cluster changed under it: the kind that changed, and the fleet
/// cluster whose object it was (`None`: not known, e.g. a re-list that found differences: any
/// of them may have changed).
pub type OnChange = Arc<dyn Fn(&str, Option<&str>) + Send + Sync>;

/// The clusters whose objects' changes matter: the prepared revision's scope (`None`: every
/// cluster, before the first pass).
type Scope = Arc<std::sync::RwLock<Option<std::collections::HashSet<String>>>>;

/// An object reduced to its key, what the cache keeps of it, and the fleet cluster it belongs to
/// (its label).
type Facts<V> = (String, V, Option<String>);

fn cluster_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Option<String> {
    meta.labels
        .as_ref()
        .and_then(|l| l.get(capstan_templates::identity::CLUSTER_LABEL))
        .cloned()
}

/// Whether a change to an object of `cluster` concerns this agent. Objects of no cluster (the
/// EKS-A release objects every cluster shares) always do.
fn in_scope(scope: &Scope, cluster: Option<&str>) -> bool {
    match (
        scope.read().unwrap_or_else(|p| p.into_inner()).as_ref(),
        cluster,
    ) {
        (Some(names), Some(c)) => names.contains(c),
        _ => true,
    }
}

/// Where a watch is with its first list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Synced {
    /// Not listed yet.
    No,
    /// Listed at least once.
    Yes,
    /// The API server refuses it (RBAC): a pass fails at once, saying so, instead of waiting.
    Denied(String),
}

/// A list or watch the API server refuses with 403, and then confirms it refuses
/// ([`Refused::confirm`]), marks the kind [`Synced::Denied`] (also after its first list: a cache
/// that no longer hears of changes must not pass for current) until the next list or event
/// arrives. A refusal it does not confirm is any other failed request: retried, a kind not yet
/// listed still waited for, a listed one's facts kept (the watch resumes where it stopped).
async fn deny(
    synced: &signal::Sender<Synced>,
    e: &watcher::Error,
    client: &Client,
    refused: &Refused,
) {
    let status = match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => Some(s.as_ref()),
        watcher::Error::WatchError(s) => Some(s.as_ref()),
        _ => None,
    };
    let Some(s) = status.filter(|s| s.code == 403) else {
        return;
    };
    match refused.confirm(client).await {
        Refusal::Stands => {
            synced.send_replace(Synced::Denied(s.message.clone()));
        }
        Refusal::Unsure(why) => {
            warn!(resource = %refused.resource, %why, "a refusal the API server did not confirm; retrying");
        }
    }
}

/// Watches kept open across passes; dropping the cache stops them.
pub struct LiveCache {
    client: Client,
    live: Arc<Live>,
    kinds: Mutex<HashMap<(String, String), signal::Receiver<Synced>>>,
    records: Mutex<Option<signal::Receiver<Synced>>>,
    on_change: OnChange,
    scope: Scope,
    tasks: Mutex<Vec<AbortHandle>>,
    /// How long a pass waits for a new watch's first list.
    pub sync_timeout: Duration,
}

impl LiveCache {
    /// An empty cache; watches open as passes ask for kinds.
    pub fn start(client: Client, on_change: OnChange) -> LiveCache {
        LiveCache {
            client,
            live: Arc::new(Live::default()),
            kinds: Mutex::new(HashMap::new()),
            records: Mutex::new(None),
            on_change,
            scope: Arc::new(std::sync::RwLock::new(None)),
            tasks: Mutex::new(Vec::new()),
            sync_timeout: Duration::from_secs(60),
        }
    }

    /// The clusters this agent reconciles: changes to objects of other clusters (another
    /// management cluster's agent on the same API server) do not wake it.
    pub fn set_scope(&self, clusters: impl IntoIterator<Item = String>) {
        *self.scope.write().unwrap_or_else(|p| p.into_inner()) =
            Some(clusters.into_iter().collect());
    }

    /// The state the watches keep current.
    pub fn live(&self) -> &Arc<Live> {
        &self.live
    }

    /// Makes sure every kind (`apiVersion`, `kind`) is watched, and waits until each watch (and
    /// the statuses' watch, opened on the first call: after the status CRD is installed) has
    /// listed its objects at least once.
    pub async fn ensure(
        &self,
        resolver: &Resolver,
        kinds: &[(String, String)],
    ) -> Result<(), LiveError> {
        let records = {
            let mut records = self.records.lock().unwrap_or_else(|p| p.into_inner());
            records
                .get_or_insert_with(|| {
                    let (tx, rx) = signal::channel(Synced::No);
                    let task = tokio::spawn(watch_records(
                        self.client.clone(),
                        self.live.clone(),
                        tx,
                        self.on_change.clone(),
                    ));
                    self.tasks
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(task.abort_handle());
                    rx
                })
                .clone()
        };
        // What is waited for, and for a kind its `(group, kind)`: a kind the agent may not read
        // fails only the clusters that carry it ([`Live::denied`]); the statuses fail the pass.
        let mut waits = vec![("ManagedCluster".to_string(), None, records)];
        // MachineDeployments bring their MachineSets (health reads them).
        let machine_sets = kinds
            .iter()
            .any(|(v, k)| has_machine_sets(v, k))
            .then(|| (MACHINE_SET.0.to_string(), MACHINE_SET.1.to_string()));
        // Bare-metal machines bring the Hardware (the spare-hardware gate reads it).
        let servers = kinds
            .iter()
            .any(|(v, k)| draws_on_hardware(v, k))
            .then(|| (HARDWARE.0.to_string(), HARDWARE.1.to_string()));
        for (api_version, kind) in kinds
            .iter()
            .chain(machine_sets.iter())
            .chain(servers.iter())
        {
            let (ar, _) = match resolver.resolve(api_version, kind).await {
                Ok(r) => r,
                Err(DiscoveryError::Unknown(_)) => continue,
                Err(e) => return Err(e.into()),
            };
            let id = (ar.group.clone(), kind.clone());
            let rx = {
                let mut known = self.kinds.lock().unwrap_or_else(|p| p.into_inner());
                match known.get(&id) {
                    Some(rx) => rx.clone(),
                    None => {
                        let (tx, rx) = signal::channel(Synced::No);
                        let task = if (api_version.as_str(), kind.as_str()) == HARDWARE {
                            tokio::spawn(watch_servers(
                                self.client.clone(),
                                ar.clone(),
                                self.live.clone(),
                                tx,
                                self.on_change.clone(),
                                self.scope.clone(),
                            ))
                        } else if (api_version.as_str(), kind.as_str()) == MACHINE_SET {
                            tokio::spawn(watch_machine_sets(
                                self.client.clone(),
                                ar.clone(),
                                self.live.clone(),
                                tx,
                                self.on_change.clone(),
                                self.scope.clone(),
                            ))
                        } else {
                            tokio::spawn(watch_kind(
                                self.client.clone(),
                                ar.clone(),
                                kind.clone(),
                                read_whole(api_version, kind),
                                self.live.clone(),
                                tx,
                                self.on_change.clone(),
                                self.scope.clone(),
                            ))
                        };
                        self.tasks
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push(task.abort_handle());
                        known.insert(id.clone(), rx.clone());
                        debug!(%kind, %api_version, "watching");
                        rx
                    }
                }
            };
            waits.push((format!("{kind} ({api_version})"), Some(id), rx));
        }
        for (what, id, mut rx) in waits {
            let state = tokio::time::timeout(self.sync_timeout, rx.wait_for(|s| *s != Synced::No))
                .await
                .ok()
                .and_then(|r| r.ok().map(|s| s.clone()));
            match (state, id) {
                (Some(Synced::Denied(message)), None) => {
                    return Err(LiveError::Forbidden(what, message));
                }
                (Some(state), Some((group, kind))) => self.note(&group, &kind, &state),
                (Some(_), None) => {}
                (None, _) => return Err(LiveError::NotSynced(what)),
            }
        }
        Ok(())
    }

    /// Carries into the live state whether each watched kind is refused to the agent now, as
    /// [`LiveCache::ensure`] does, without waiting for anything: for a revision looked at again
    /// without being prepared anew (watch events naming its clusters).
    pub fn refresh_denied(&self) {
        let kinds = self.kinds.lock().unwrap_or_else(|p| p.into_inner());
        for ((group, kind), rx) in kinds.iter() {
            self.note(group, kind, &rx.borrow());
        }
    }

    /// Records a watch's state as the kind's refusal (a watch not synced yet changes nothing).
    fn note(&self, group: &str, kind: &str, state: &Synced) {
        match state {
            Synced::Yes => self.live.set_denied(group, kind, None),
            Synced::Denied(message) => self.live.set_denied(group, kind, Some(message.clone())),
            Synced::No => {}
        }
    }
}

impl Drop for LiveCache {
    fn drop(&mut self) {
        for t in self
            .tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
        {
            t.abort();
        }
    }
}

/// One kind's watch: keeps its facts in `live` and reports changes capstan did not make.
#[allow(clippy::too_many_arguments)]
async fn watch_kind(
    client: Client,
    ar: ApiResource,
    kind: String,
    whole: bool,
    live: Arc<Live>,
    synced: signal::Sender<Synced>,
    on_change: OnChange,
    scope: Scope,
) {
    let config = watcher::Config::default().labels(SELECTOR);
    let group = ar.group.clone();
    let (g, k) = (group.clone(), kind.clone());
    let refused = Refused::new(&ar.group, &ar.plural, refusal::WATCH);
    let events = if whole {
        watcher::watcher(Api::<DynamicObject>::all_with(client.clone(), &ar), config)
            .map_ok(move |ev| {
                facts_event(ev, |o: &DynamicObject| {
                    (
                        key_of(&g, &k, &o.metadata),
                        LiveObject::from_value(
                            &serde_json::to_value(o).expect("objects serialise"),
                        ),
                        cluster_of(&o.metadata),
                    )
                })
            })
            .boxed()
    } else {
        watcher::watcher(
            Api::<PartialObjectMeta<DynamicObject>>::all_with(client.clone(), &ar),
            config,
        )
        .map_ok(move |ev| {
            facts_event(ev, |o: &PartialObjectMeta<DynamicObject>| {
                (
                    key_of(&g, &k, &o.metadata),
                    LiveObject::from_meta(&o.metadata),
                    cluster_of(&o.metadata),
                )
            })
        })
        .boxed()
    };
    let store = Objects {
        live,
        prefix: format!("{group}/{kind}/"),
    };
    let asked = (client, refused);
    follow(events, store, &kind, synced, on_change, scope, asked).await;
}

/// Where a watch keeps what it learns of one kind's objects.
trait Store<V> {
    /// Replaces every entry with `fresh` (a complete list); whether anything differed.
    fn replace(&self, fresh: HashMap<String, V>) -> bool;
    /// Records one object; whether it differed from what was known.
    fn insert(&self, key: String, value: V) -> bool;
    /// Forgets one object; whether it was known.
    fn remove(&self, key: &str) -> bool;
    /// The fleet cluster the known object belonged to (its label), where the store keeps it.
    fn cluster_of(&self, _key: &str) -> Option<String> {
        None
    }
}

/// The facts of the objects of one group and kind, in [`Live`]'s objects.
struct Objects {
    live: Arc<Live>,
    /// `group/Kind/`: the keys of this kind.
    prefix: String,
}

impl Store<LiveObject> for Objects {
    fn replace(&self, fresh: HashMap<String, LiveObject>) -> bool {
        let mut objects = self.live.objects_mut();
        let before = objects.len();
        objects.retain(|k, _| !k.starts_with(&self.prefix) || fresh.contains_key(k));
        let mut changed = objects.len() != before;
        for (k, f) in fresh {
            if objects.get(&k) != Some(&f) {
                changed = true;
                objects.insert(k, f);
            }
        }
        changed
    }

    fn insert(&self, key: String, value: LiveObject) -> bool {
        self.live
            .objects_mut()
            .insert(key, value.clone())
            .is_none_or(|old| old != value)
    }

    fn remove(&self, key: &str) -> bool {
        self.live.objects_mut().remove(key).is_some()
    }

    fn cluster_of(&self, key: &str) -> Option<String> {
        self.live.cluster_of(key)
    }
}

/// The MachineSets in [`Live`].
struct MachineSets(Arc<Live>);

impl Store<MachineSet> for MachineSets {
    fn replace(&self, fresh: HashMap<String, MachineSet>) -> bool {
        let fresh: std::collections::BTreeMap<String, MachineSet> = fresh.into_iter().collect();
        let mut sets = self.0.machine_sets_mut();
        let changed = *sets != fresh;
        *sets = fresh;
        changed
    }

    fn insert(&self, key: String, value: MachineSet) -> bool {
        self.0
            .machine_sets_mut()
            .insert(key, value.clone())
            .is_none_or(|old| old != value)
    }

    fn remove(&self, key: &str) -> bool {
        self.0.machine_sets_mut().remove(key).is_some()
    }
}

/// Follows a watch's events (reduced to key, value and fleet cluster) into a store: a
/// complete (re-)list replaces the store's entries, single events update it, and a change of an
/// object of this agent's clusters, after the first list, calls `on_change(what)`. Errors are
/// retried with kube's default backoff and never empty the store; a 403 is put to the API
/// server (`refused`, with the watch's client) before it counts ([`deny`]).
async fn follow<V>(
    events: futures::stream::BoxStream<'static, Result<Event<Facts<V>>, watcher::Error>>,
    store: impl Store<V>,
    what: &str,
    synced: signal::Sender<Synced>,
    on_change: OnChange,
    scope: Scope,
    (client, refused): (Client, Refused),
) {
    let mut events = events.default_backoff().boxed();
    let mut buffer: HashMap<String, V> = HashMap::new();
    while let Some(ev) = events.next().await {
        let is_synced = *synced.borrow() != Synced::No;
        // Some(cluster) when a change concerns this agent (`None` inside: which one is unknown).
        let changed: Option<Option<String>> = match ev {
            Err(e) => {
                warn!(%what, error = %e, "watch failed; retrying (the cache keeps what it knew)");
                deny(&synced, &e, &client, &refused).await;
                None
            }
            Ok(Event::Init) => {
                buffer.clear();
                None
            }
            Ok(Event::InitApply((key, value, _))) => {
                buffer.insert(key, value);
                None
            }
            Ok(Event::InitDone) => {
                let changed = store.replace(std::mem::take(&mut buffer));
                synced.send_replace(Synced::Yes);
                (changed && is_synced).then_some(None)
            }
            Ok(Event::Apply((key, value, cluster))) => {
                if matches!(*synced.borrow(), Synced::Denied(_)) {
                    synced.send_replace(Synced::Yes);
                }
                // A relabelled object (its capstan.dev/cluster label edited away) concerns the
                // cluster it belonged to.
                let before = store.cluster_of(&key);
                let cluster = match (&before, &cluster) {
                    (Some(b), Some(c)) if b != c && !in_scope(&scope, Some(c)) => before,
                    (Some(_), None) => before,
                    _ => cluster,
                };
                (store.insert(key, value) && is_synced && in_scope(&scope, cluster.as_deref()))
                    .then_some(cluster)
            }
            Ok(Event::Delete((key, _, cluster))) => {
                (store.remove(&key) && is_synced && in_scope(&scope, cluster.as_deref()))
                    .then_some(cluster)
            }
        };
        if let Some(cluster) = changed {
            on_change(what, cluster.as_deref());
        }
    }
}

/// The MachineSets' watch (whole objects, [`MACHINE_SET_SELECTOR`]): keeps what health reads of
/// them in `live`, and reports changes of this agent's clusters (a rollout progressing).
async fn watch_machine_sets(
    client: Client,
    ar: ApiResource,
    live: Arc<Live>,
    synced: signal::Sender<Synced>,
    on_change: OnChange,
    scope: Scope,
) {
    let config = watcher::Config::default().labels(MACHINE_SET_SELECTOR);
    let refused = Refused::new(&ar.group, &ar.plural, refusal::WATCH);
    let events = watcher::watcher(Api::all_with(client.clone(), &ar), config)
        .map_ok(|ev| {
            facts_event(ev, |o: &DynamicObject| {
                let cluster = o
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("cluster.x-k8s.io/cluster-name"))
                    .cloned();
                let set =
                    MachineSet::from_object(&serde_json::to_value(o).expect("objects serialise"));
                (machine_set_key(&o.metadata), set, cluster)
            })
        })
        .boxed();
    follow(
        events,
        MachineSets(live),
        MACHINE_SET.1,
        synced,
        on_change,
        scope,
        (client, refused),
    )
    .await;
}

/// The bare-metal Hardware in [`Live`] (namespace and labels).
struct Servers(Arc<Live>);

impl Store<Server> for Servers {
    fn replace(&self, fresh: HashMap<String, Server>) -> bool {
        let fresh: std::collections::BTreeMap<String, Server> = fresh.into_iter().collect();
        let mut servers = self.0.servers_mut();
        let changed = servers.as_ref() != Some(&fresh);
        *servers = Some(fresh);
        changed
    }

    fn insert(&self, key: String, value: Server) -> bool {
        self.0
            .servers_mut()
            .get_or_insert_default()
            .insert(key, value.clone())
            .is_none_or(|old| old != value)
    }

    fn remove(&self, key: &str) -> bool {
        self.0
            .servers_mut()
            .as_mut()
            .is_some_and(|s| s.remove(key).is_some())
    }
}

/// The Hardware's watch (metadata, every object: an admin's inventory carries no capstan
/// label): keeps each server's namespace and labels in `live`, and reports a change as one of
/// the fleet cluster its `cluster.x-k8s.io/cluster-name` label names, so a rollout held for
/// spare Hardware is looked at again when an admin adds some.
async fn watch_servers(
    client: Client,
    ar: ApiResource,
    live: Arc<Live>,
    synced: signal::Sender<Synced>,
    on_change: OnChange,
    scope: Scope,
) {
    let refused = Refused::new(&ar.group, &ar.plural, refusal::WATCH);
    let api = Api::<PartialObjectMeta<DynamicObject>>::all_with(client.clone(), &ar);
    let events = watcher::watcher(api, watcher::Config::default())
        .map_ok(|ev| {
            facts_event(ev, |o: &PartialObjectMeta<DynamicObject>| {
                let (key, server) = server_of(&o.metadata);
                let cluster = server.labels.get("cluster.x-k8s.io/cluster-name").cloned();
                (key, server, cluster)
            })
        })
        .boxed();
    follow(
        events,
        Servers(live),
        HARDWARE.1,
        synced,
        on_change,
        scope,
        (client, refused),
    )
    .await;
}

/// The statuses' watch: keeps every recorded status in `live`. A status deleted by someone else
/// schedules a pass (which writes it again); capstan's own writes are recorded before their
/// events arrive and so never do.
async fn watch_records(
    client: Client,
    live: Arc<Live>,
    synced: signal::Sender<Synced>,
    on_change: OnChange,
) {
    use kube::Resource;
    let refused = Refused::new(
        &status::ManagedCluster::group(&()),
        &status::ManagedCluster::plural(&()),
        refusal::WATCH,
    )
    .in_namespace(status::NAMESPACE);
    let mut events = watcher::watcher(status::api(&client), watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut buffer: std::collections::BTreeMap<String, Recorded> = Default::default();
    while let Some(ev) = events.next().await {
        let name = |o: &status::ManagedCluster| o.metadata.name.clone().unwrap_or_default();
        match ev {
            Err(e) => {
                warn!(error = %e, "watch of ManagedClusters failed; retrying");
                deny(&synced, &e, &client, &refused).await;
            }
            Ok(Event::Init) => buffer.clear(),
            Ok(Event::InitApply(o)) => {
                buffer.insert(name(&o), Recorded::from_object(&o));
            }
            Ok(Event::InitDone) => {
                live.set_records(std::mem::take(&mut buffer));
                synced.send_replace(Synced::Yes);
            }
            Ok(Event::Apply(o)) => {
                live.set_record(&name(&o), Some(Recorded::from_object(&o)));
            }
            Ok(Event::Delete(o)) => {
                if live.set_record(&name(&o), None) {
                    on_change("ManagedCluster", Some(&name(&o)));
                }
            }
        }
    }
}

/// A watch event reduced to keys and facts.
fn facts_event<K, V>(ev: Event<K>, f: impl Fn(&K) -> Facts<V>) -> Event<Facts<V>> {
    match ev {
        Event::Apply(o) => Event::Apply(f(&o)),
        Event::Delete(o) => Event::Delete(f(&o)),
        Event::Init => Event::Init,
        Event::InitApply(o) => Event::InitApply(f(&o)),
        Event::InitDone => Event::InitDone,
    }
}
