//! ClusterProfiles (`multicluster.x-k8s.io/v1alpha1`, SIG Multicluster's cluster inventory API):
//! with `--cluster-profiles NAMESPACE` the agent keeps one per workload cluster it manages, so
//! that inventory consumers (Argo CD's cluster-inventory sync, Open Cluster Management, a
//! multicluster scheduler) learn the fleet from a standard object instead of from capstan's own
//! ManagedCluster.
//!
//! Why a separate object and not fields on ManagedCluster: consumers read only the standard
//! kind, and its `spec.clusterManager` and `x-k8s.io/cluster-manager` label say who owns it, so
//! several managers can share a namespace.
//!
//! [`desired`] is pure: the live Cluster API Cluster and control plane in, the object and its
//! status out (unit-tested below). [`apply`] and [`remove`] are the I/O at the edge, called by
//! the pass after a cluster's status was written, and after its deletion finished.
//!
//! What the fields hold (the module's v0.1.3 types):
//! - `status.conditions`: `ControlPlaneHealthy` from the control plane's `Available` condition
//!   (the one capstan's health reads, `capstan_plan::health`), `Joined` True once Cluster API
//!   reports the Cluster `Provisioned` (or later);
//! - `status.version.kubernetes`: what the control plane has rolled out (its machines' lowest
//!   version), else what it asks for;
//! - `status.accessProviders[kubeconfig-secretreader]`: the API server (`spec.controlPlaneEndpoint`)
//!   and, in the `client.authentication.k8s.io/exec` extension the module's
//!   `kubeconfig-secretreader` plugin reads, the Cluster API kubeconfig Secret
//!   `<cluster>-kubeconfig` (namespace, name, key `value`). The CRD requires `server`, so the
//!   provider is listed once the endpoint is known; until then the same reference is in the
//!   property [`KUBECONFIG_PROPERTY`] (always present, so a consumer never has to guess).
//!
//! Condition times come from the source conditions (their `lastTransitionTime`), never from the
//! clock: an unchanged cluster applies an identical object, which the API server does not write.

use serde_json::{Value, json};

/// The API group and version.
pub const API_VERSION: &str = "multicluster.x-k8s.io/v1alpha1";
/// The CRD's name.
pub const CRD_NAME: &str = "clusterprofiles.multicluster.x-k8s.io";
/// `spec.clusterManager.name` and the value of [`MANAGER_LABEL`].
pub const MANAGER: &str = "capstan";
/// The label naming the cluster manager (the API's `LabelClusterManagerKey`).
pub const MANAGER_LABEL: &str = "x-k8s.io/cluster-manager";
/// The access provider's name: the module's plugin that reads a kubeconfig from a Secret.
pub const ACCESS_PROVIDER: &str = "kubeconfig-secretreader";
/// The extension the plugin's configuration travels in.
pub const EXEC_EXTENSION: &str = "client.authentication.k8s.io/exec";
/// The property naming the kubeconfig Secret, `NAMESPACE/NAME` (key `value`).
pub const KUBECONFIG_PROPERTY: &str = "capstan.dev/kubeconfig-secret";
/// The field manager of the agent's ClusterProfile writes.
pub const FIELD_MANAGER: &str = "capstan-cluster-profiles";
/// The CRD as upstream ships it (v0.1.3's `config/crd/bases`), which `capstan install
/// --cluster-profiles` applies; a test compares it with the module's file.
pub const CRD_YAML: &str =
    include_str!("../../manifests/multicluster.x-k8s.io_clusterprofiles.yaml");

/// What the ClusterProfile of one cluster is made from.
#[derive(Debug, Clone, Copy)]
pub struct Facts<'a> {
    /// The fleet cluster's name: the ClusterProfile's name.
    pub name: &'a str,
    /// The namespace the ClusterProfiles live in (`--cluster-profiles`).
    pub namespace: &'a str,
    /// The Cluster API Cluster's namespace (where its kubeconfig Secret is).
    pub cluster_namespace: &'a str,
    /// The Cluster API Cluster's name.
    pub cluster_name: &'a str,
    /// The live Cluster API Cluster, if it exists.
    pub cluster: Option<&'a Value>,
    /// The live control plane (KubeadmControlPlane), if it exists.
    pub control_plane: Option<&'a Value>,
}

/// The object (metadata and spec) and its status, applied separately (status is a subresource).
pub fn desired(f: &Facts<'_>) -> (Value, Value) {
    let object = json!({
        "apiVersion": API_VERSION,
        "kind": "ClusterProfile",
        "metadata": {
            "name": f.name,
            "namespace": f.namespace,
            "labels": {MANAGER_LABEL: MANAGER, "capstan.dev/cluster": f.name},
        },
        "spec": {"displayName": f.name, "clusterManager": {"name": MANAGER}},
    });
    let secret = format!("{}-kubeconfig", f.cluster_name);
    let mut status = json!({
        "conditions": [control_plane_healthy(f), joined(f)],
        "properties": [
            {"name": KUBECONFIG_PROPERTY, "value": format!("{}/{secret}", f.cluster_namespace)},
        ],
    });
    if let Some(v) = version(f.control_plane) {
        status["version"] = json!({"kubernetes": v});
    }
    if let Some(server) = f.cluster.and_then(endpoint) {
        status["accessProviders"] = json!([{
            "name": ACCESS_PROVIDER,
            "cluster": {
                "server": server,
                "extensions": [{"name": EXEC_EXTENSION, "extension": {
                    "name": secret, "namespace": f.cluster_namespace, "key": "value",
                }}],
            },
        }]);
    }
    let status = json!({"apiVersion": API_VERSION, "kind": "ClusterProfile",
        "metadata": {"name": f.name, "namespace": f.namespace}, "status": status});
    (object, status)
}

fn condition<'v>(obj: Option<&'v Value>, type_: &str) -> Option<&'v Value> {
    obj?["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

/// When a condition last changed: the source's own time, else the object's creation, else the
/// epoch (never the clock, see the module docs).
fn since(source: Option<&Value>, obj: Option<&Value>) -> String {
    source
        .and_then(|c| c["lastTransitionTime"].as_str())
        .or_else(|| obj.and_then(|o| o["metadata"]["creationTimestamp"].as_str()))
        .unwrap_or("1970-01-01T00:00:00Z")
        .to_string()
}

/// A reason as the condition schema wants it (a CamelCase word).
fn reason(s: Option<&str>, fallback: &str) -> String {
    match s {
        Some(r) if !r.is_empty() && r.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') => {
            r.to_string()
        }
        _ => fallback.to_string(),
    }
}

fn control_plane_healthy(f: &Facts<'_>) -> Value {
    let available = condition(f.control_plane, "Available");
    let (status, why, message) = match (f.control_plane, available) {
        (None, _) => (
            "Unknown",
            "ControlPlaneNotFound".to_string(),
            "the control plane does not exist yet".to_string(),
        ),
        (Some(_), None) => (
            "Unknown",
            "NotReported".to_string(),
            "Cluster API has not reported the control plane's Available condition yet".into(),
        ),
        (Some(_), Some(c)) => {
            let s = match c["status"].as_str() {
                Some("True") => "True",
                Some("False") => "False",
                _ => "Unknown",
            };
            let fallback = if s == "True" {
                "Available"
            } else {
                "NotAvailable"
            };
            (
                s,
                reason(c["reason"].as_str(), fallback),
                c["message"].as_str().unwrap_or_default().to_string(),
            )
        }
    };
    json!({"type": "ControlPlaneHealthy", "status": status, "reason": why, "message": message,
        "lastTransitionTime": since(available, f.control_plane)})
}

/// The Cluster phases from `Provisioned` on (v1beta2 `status.phase`).
const JOINED_PHASES: &[&str] = &["Provisioned"];

fn joined(f: &Facts<'_>) -> Value {
    let phase = f.cluster.and_then(|c| c["status"]["phase"].as_str());
    let initialized = condition(f.cluster, "ControlPlaneInitialized");
    let (status, why, message) = match phase {
        _ if f.cluster.is_none() => (
            "False",
            "ClusterNotFound",
            "the Cluster API Cluster does not exist yet".to_string(),
        ),
        Some(p) if JOINED_PHASES.contains(&p) => (
            "True",
            "Provisioned",
            "Cluster API provisioned the cluster".to_string(),
        ),
        Some(p) => (
            "False",
            "NotProvisioned",
            format!("the Cluster API Cluster is {p}"),
        ),
        None => (
            "False",
            "NotProvisioned",
            "Cluster API has not reported the Cluster's phase yet".to_string(),
        ),
    };
    json!({"type": "Joined", "status": status, "reason": why, "message": message,
        "lastTransitionTime": since(initialized, f.cluster)})
}

/// What the control plane runs: the lowest version among its machines, else what it asks for.
fn version(cp: Option<&Value>) -> Option<String> {
    let cp = cp?;
    let rolled = crate::health::RolloutStatus::from_object(cp).rolled_out_version;
    rolled
        .map(|v| v.to_string())
        .or_else(|| cp["spec"]["version"].as_str().map(str::to_string))
        .filter(|v| !v.is_empty())
}

/// `https://host:port` of `spec.controlPlaneEndpoint`, once Cluster API knows it.
fn endpoint(cluster: &Value) -> Option<String> {
    let e = &cluster["spec"]["controlPlaneEndpoint"];
    let host = e["host"].as_str().filter(|h| !h.is_empty())?;
    let port = e["port"].as_i64().filter(|p| *p > 0).unwrap_or(443);
    let host = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_string()
    };
    Some(format!("https://{host}:{port}"))
}

fn api(client: &kube::Client, namespace: &str) -> kube::Api<kube::api::DynamicObject> {
    let gvk =
        kube::api::GroupVersionKind::gvk("multicluster.x-k8s.io", "v1alpha1", "ClusterProfile");
    let ar = kube::api::ApiResource::from_gvk_with_plural(&gvk, "clusterprofiles");
    kube::Api::namespaced_with(client.clone(), namespace, &ar)
}

/// Server-side applies a ClusterProfile and then its status ([`desired`]'s two halves). The
/// error names the object.
pub async fn apply(client: &kube::Client, object: &Value, status: &Value) -> Result<(), String> {
    let (ns, name) = (
        object["metadata"]["namespace"].as_str().unwrap_or_default(),
        object["metadata"]["name"].as_str().unwrap_or_default(),
    );
    let api = api(client, ns);
    let how = crate::write::Apply::by(FIELD_MANAGER);
    crate::write::apply(&api, name, &how, object)
        .await
        .map_err(|e| format!("applying ClusterProfile {ns}/{name}: {e}"))?;
    crate::write::apply_status(&api, name, &how, status)
        .await
        .map_err(|e| format!("applying the status of ClusterProfile {ns}/{name}: {e}"))?;
    Ok(())
}

/// Deletes a cluster's ClusterProfile (gone already is fine), only if capstan manages it.
pub async fn remove(client: &kube::Client, namespace: &str, name: &str) -> Result<(), String> {
    let api = api(client, namespace);
    let what = || format!("ClusterProfile {namespace}/{name}");
    let Some(live) = api
        .get_opt(name)
        .await
        .map_err(|e| format!("reading {}: {e}", what()))?
    else {
        return Ok(());
    };
    if live
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(MANAGER_LABEL))
        .map(String::as_str)
        != Some(MANAGER)
    {
        return Err(format!(
            "{} is not capstan's ({MANAGER_LABEL} is not {MANAGER}): left alone",
            what()
        ));
    }
    crate::write::delete(&api, name, &crate::write::Delete::of_uid(live.metadata.uid))
        .await
        .map(|_| ())
        .map_err(|e| format!("deleting {}: {e}", what()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts<'a>(cluster: Option<&'a Value>, cp: Option<&'a Value>) -> Facts<'a> {
        Facts {
            name: "dev",
            namespace: "inventory",
            cluster_namespace: "eksa-system",
            cluster_name: "dev",
            cluster,
            control_plane: cp,
        }
    }

    fn cond<'v>(status: &'v Value, t: &str) -> &'v Value {
        status["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == t)
            .unwrap()
    }

    #[test]
    fn a_provisioned_cluster_with_an_available_control_plane_is_healthy_and_joined() {
        let cluster = json!({"metadata": {"creationTimestamp": "2026-11-01T00:00:00Z"},
            "spec": {"controlPlaneEndpoint": {"host": "10.0.0.5", "port": 6443}},
            "status": {"phase": "Provisioned", "conditions": [
                {"type": "ControlPlaneInitialized", "status": "True", "lastTransitionTime": "2026-11-01T00:05:00Z"}]}});
        let cp = json!({"spec": {"version": "v1.33.1"},
            "status": {"version": "v1.33.1", "conditions": [{"type": "Available", "status": "True",
                "reason": "Available", "message": "", "lastTransitionTime": "2026-11-01T00:06:00Z"}]}});
        let (obj, st) = desired(&facts(Some(&cluster), Some(&cp)));
        assert_eq!(obj["metadata"]["labels"][MANAGER_LABEL], "capstan");
        assert_eq!(obj["spec"]["clusterManager"]["name"], "capstan");
        assert_eq!(obj["spec"]["displayName"], "dev");
        assert_eq!(obj["metadata"]["namespace"], "inventory");
        let h = cond(&st, "ControlPlaneHealthy");
        assert_eq!(
            (h["status"].as_str(), h["reason"].as_str()),
            (Some("True"), Some("Available"))
        );
        assert_eq!(h["lastTransitionTime"], "2026-11-01T00:06:00Z");
        let j = cond(&st, "Joined");
        assert_eq!(
            (j["status"].as_str(), j["lastTransitionTime"].as_str()),
            (Some("True"), Some("2026-11-01T00:05:00Z"))
        );
        assert_eq!(st["status"]["version"]["kubernetes"], "v1.33.1");
        let p = &st["status"]["accessProviders"][0];
        assert_eq!(p["name"], ACCESS_PROVIDER);
        assert_eq!(p["cluster"]["server"], "https://10.0.0.5:6443");
        let ext = &p["cluster"]["extensions"][0];
        assert_eq!(ext["name"], EXEC_EXTENSION);
        assert_eq!(
            ext["extension"],
            json!({"name": "dev-kubeconfig", "namespace": "eksa-system", "key": "value"})
        );
        assert_eq!(
            st["status"]["properties"][0]["value"],
            "eksa-system/dev-kubeconfig"
        );
    }

    #[test]
    fn a_cluster_not_yet_up_is_neither_healthy_nor_joined_and_has_no_access_provider() {
        let (_, st) = desired(&facts(None, None));
        assert_eq!(cond(&st, "ControlPlaneHealthy")["status"], "Unknown");
        assert_eq!(cond(&st, "Joined")["status"], "False");
        assert!(st["status"].get("accessProviders").is_none());
        assert!(st["status"].get("version").is_none());
        // The Secret reference is there all the same.
        assert_eq!(st["status"]["properties"][0]["name"], KUBECONFIG_PROPERTY);
        let cluster = json!({"status": {"phase": "Provisioning"}});
        let cp = json!({"spec": {"version": "v1.34.0"}, "status": {"conditions": [
            {"type": "Available", "status": "False", "reason": "NoReplicasAvailable", "message": "0 of 3"}]}});
        let (_, st) = desired(&facts(Some(&cluster), Some(&cp)));
        let h = cond(&st, "ControlPlaneHealthy");
        assert_eq!(
            (
                h["status"].as_str(),
                h["reason"].as_str(),
                h["message"].as_str()
            ),
            (Some("False"), Some("NoReplicasAvailable"), Some("0 of 3"))
        );
        assert_eq!(h["lastTransitionTime"], "1970-01-01T00:00:00Z");
        let j = cond(&st, "Joined");
        assert_eq!(
            (j["status"].as_str(), j["message"].as_str()),
            (
                Some("False"),
                Some("the Cluster API Cluster is Provisioning")
            )
        );
        assert_eq!(st["status"]["version"]["kubernetes"], "v1.34.0");
    }

    #[test]
    fn the_same_facts_give_the_same_object() {
        let cluster = json!({"status": {"phase": "Provisioned"}});
        assert_eq!(
            desired(&facts(Some(&cluster), None)),
            desired(&facts(Some(&cluster), None))
        );
    }

    #[test]
    fn endpoints_are_urls() {
        assert_eq!(
            endpoint(&json!({"spec": {"controlPlaneEndpoint": {"host": "fd00::1", "port": 6443}}}))
                .as_deref(),
            Some("https://[fd00::1]:6443")
        );
        assert_eq!(
            endpoint(&json!({"spec": {"controlPlaneEndpoint": {"host": "", "port": 0}}})),
            None
        );
        assert_eq!(reason(Some("has space"), "X"), "X");
    }
}
