//! Reaching a workload cluster: its kubeconfig from the Secret Cluster API writes for it, used
//! only as Cluster API writes it; the connections kept per cluster, bounded; the watch on a
//! cluster's add-ons; the API resources of their kinds.
//!
//! The kubeconfig is input the agent does not control (a Secret in the cluster's namespace), so
//! it is used only as Cluster API writes it: inline certificates and keys or a token, an
//! `https://` server. An exec plugin, an auth provider, any file path (a token file, a client
//! key, a CA), a proxy, `insecure-skip-tls-verify`, any impersonation (`as`, `as-uid`,
//! `as-groups`, `as-user-extra`) or a field kube-rs does not know is refused before anything is
//! tried: otherwise a Secret could make the agent run a command, send its own service-account
//! token, or talk to a server it does not authenticate. kube-rs keeps a cluster's or user's
//! unknown fields (its `other` map) instead of dropping them, so what is checked is exactly what
//! was written: a field another client honours is refused here too.
//!
//! Connections are cached per cluster, keyed by the Secret's resourceVersion (a rotated
//! kubeconfig is a new connection), at most [`MAX_CONNECTIONS`] at once (the least recently
//! used one is dropped, with its watch).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use capstan_layout::ClusterEntry;
use capstan_layout::addons::Addon;
use capstan_templates::identity;
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::api::{Api, DynamicObject, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::GroupVersionKind;
use kube::discovery::{ApiResource, Scope};
use kube::{Client, Config};
use serde_json::Value;

use super::ADDON_LABEL;
use crate::k8s::fence::Fence;
use crate::live::watch::OnChange;
use crate::plan::addons::Reach;

/// Nodes read a page at a time when looking for a Ready one.
const NODES_PAGE: u32 = 50;

/// How many workload clusters' connections are kept at once (past it, the least recently used
/// is dropped and made again when its cluster's next step comes).
pub const MAX_CONNECTIONS: usize = 256;

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
pub(super) type Found = BTreeMap<(String, String), (ApiResource, bool)>;

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
    pub(super) fn kinds(&self, cluster: &str) -> Found {
        let open = self.open.lock().expect("connections");
        open.get(cluster)
            .map(|c| c.kinds.clone())
            .unwrap_or_default()
    }

    /// Keeps the kinds a successful step found (a failed step keeps none: a kind may be gone).
    pub(super) fn keep_kinds(&self, cluster: &str, kinds: Found) {
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
    pub(super) fn watch(
        &self,
        cluster: &str,
        mut kinds: Vec<(String, String)>,
        on_change: &OnChange,
    ) {
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
/// cluster's add-ons. Every change is reported, and so is every completed listing: a change
/// made between the pass that started the watch and the first listing, or while the watch was
/// lost (the watcher lists again after a gap), shows only in a listing, so a listing asks for
/// one pass of the cluster, which finds nothing to do when nothing drifted.
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
    while let Some((kind, event)) = all.next().await {
        if let Ok(Event::InitDone | Event::Apply(_) | Event::Delete(_)) = event {
            on_change(&kind, Some(&cluster));
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
        if cl.insecure_skip_tls_verify == Some(true) {
            return Some(format!(
                "cluster `{}` sets insecure-skip-tls-verify (the server would not be authenticated)",
                c.name
            ));
        }
        if let Some(field) = c.other.keys().chain(cl.other.keys()).next() {
            return Some(format!(
                "cluster `{}` has an unknown field `{field}`",
                c.name
            ));
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
        } else if a.impersonate.is_some()
            || a.impersonate_uid.is_some()
            || a.impersonate_groups.is_some()
            || a.impersonate_user_extra.is_some()
        {
            "impersonates (as, as-uid, as-groups, as-user-extra)"
        } else if let Some(field) = u.other.keys().chain(a.other.keys()).next() {
            return Some(format!("user `{}` has an unknown field `{field}`", u.name));
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
pub(super) async fn reach(
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
    let kc = Kubeconfig::from_yaml(text).map_err(|e| unparsable(&e))?;
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

/// Why kubeconfig text is not one, by position only: the parser's message quotes the text
/// around the error (a snippet) and a value of the wrong type, and this text holds the
/// cluster's credentials — it would reach the status, its Events and notifications.
fn unparsable(e: &kube::config::KubeconfigError) -> String {
    let at = match e {
        kube::config::KubeconfigError::Parse(p) => p.location(),
        _ => None,
    };
    match at {
        Some(l) => format!(
            "not a kubeconfig: the YAML does not parse as one at line {}, column {} (its text is not repeated: it holds the cluster's credentials)",
            l.line(),
            l.column()
        ),
        None => "not a kubeconfig: the YAML does not parse as one (its text is not repeated: it holds the cluster's credentials)".into(),
    }
}

/// The API resources of the kinds written: found once per connection while its steps succeed.
pub(super) struct Kinds {
    pub(super) client: Client,
    pub(super) found: Found,
}

impl Kinds {
    pub(super) async fn of(
        &mut self,
        api_version: &str,
        kind: &str,
    ) -> Result<(ApiResource, bool), String> {
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

    pub(super) async fn api(&mut self, a: &Addon) -> Result<(Api<DynamicObject>, String), String> {
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
        let checked = format!("{server}\n    insecure-skip-tls-verify: false");
        assert_eq!(refused(&kubeconfig(inline, &checked)), None);
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
            ("    token: abc\n    as-uid: \"0\"", server, "impersonates"),
            (
                "    token: abc\n    as-groups: [system:masters]",
                server,
                "impersonates",
            ),
            (
                "    token: abc\n    as-user-extra:\n      scopes: [admin]",
                server,
                "impersonates",
            ),
            (
                "    token: abc\n    as-user-future: root",
                server,
                "unknown field `as-user-future`",
            ),
            (
                inline,
                "    server: https://10.0.0.1:6443\n    insecure-skip-tls-verify: true",
                "insecure-skip-tls-verify",
            ),
            (
                inline,
                "    server: https://10.0.0.1:6443\n    certificate-authority-data: Zm9v\n    socks-proxy: socks5://169.254.169.254",
                "unknown field `socks-proxy`",
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
        // Every case, each for its own reason.
        let wrong: Vec<String> = cases
            .iter()
            .filter_map(
                |(user, cluster, says)| match refused(&kubeconfig(user, cluster)) {
                    Some(why) if why.contains(says) => None,
                    other => Some(format!("{user:?} {cluster:?}: {other:?}, not {says:?}")),
                },
            )
            .collect();
        assert!(wrong.is_empty(), "{wrong:#?}");
    }

    #[test]
    fn a_kubeconfig_that_does_not_parse_is_refused_without_repeating_its_text() {
        // What reaches the cluster's status, its Events and notifications: the position, never
        // the credentials around it (the parser's message quotes a snippet, and a value).
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let cases = [
            // A snippet of the lines around the error would show the token above it.
            "apiVersion: v1\nkind: Config\nusers:\n- name: u\n  user:\n    token: sekrit-token-0d6f\n    client-key-data: [1, 2]\n",
            // A value of the wrong type is quoted in the message itself.
            "apiVersion: v1\nkind: Config\nclusters:\n- name: w\n  cluster:\n    server: https://10.0.0.1:6443\n    insecure-skip-tls-verify: sekrit-token-0d6f\n",
        ];
        for text in cases {
            let why = rt.block_on(connect(text.as_bytes())).err().unwrap();
            assert!(!why.contains("sekrit"), "{why}");
            assert!(
                why.contains("not a kubeconfig") && why.contains("line "),
                "{why}"
            );
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
