//! What is wrong with the installed agent, from what Kubernetes reports about it: the
//! Deployment's conditions, its pods' waiting containers (a wrong image is `ErrImagePull` /
//! `ImagePullBackOff`, a missing Secret `CreateContainerConfigError` or a pod stuck creating), the
//! Secrets it needs that do not exist (the backups' recipients among them: without it a
//! management cluster's upgrade of itself waits), backups written unencrypted, and who holds
//! the leader Lease. `capstan status` and a
//! `capstan bootstrap` that times out print it.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret};
use kube::Client;
use kube::api::{Api, ListParams};

use super::manifests::{LEASE, NAME};
use crate::status::NAMESPACE;

/// One line per finding; empty when the agent is not installed.
pub async fn health(client: &Client) -> Result<Vec<String>, kube::Error> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    let Some(d) = deployments.get_opt(NAME).await? else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    let spec = d.spec.as_ref();
    let want = spec.and_then(|s| s.replicas).unwrap_or(1);
    let st = d.status.clone().unwrap_or_default();
    out.push(format!(
        "Deployment {NAMESPACE}/{NAME}: {}/{want} ready, {} available",
        st.ready_replicas.unwrap_or(0),
        st.available_replicas.unwrap_or(0)
    ));
    for c in st
        .conditions
        .iter()
        .flatten()
        .filter(|c| c.status != "True")
    {
        out.push(format!(
            "  {} is {}: {} {}",
            c.type_,
            c.status,
            c.reason.as_deref().unwrap_or(""),
            c.message.as_deref().unwrap_or("")
        ));
    }
    // Secrets the pods cannot start without.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NAMESPACE);
    let pod = spec
        .and_then(|s| s.template.spec.clone())
        .unwrap_or_default();
    let mut required: Vec<(String, String)> = Vec::new();
    for v in pod.volumes.iter().flatten() {
        if let Some(s) = &v.secret
            && !s.optional.unwrap_or(false)
        {
            required.push((
                s.secret_name.clone().unwrap_or_default(),
                format!("volume {}", v.name),
            ));
        }
    }
    for c in &pod.containers {
        for e in c.env.iter().flatten() {
            if let Some(r) = e
                .value_from
                .as_ref()
                .and_then(|f| f.secret_key_ref.as_ref())
                && !r.optional.unwrap_or(false)
            {
                required.push((r.name.clone(), format!("env {}", e.name)));
            }
        }
    }
    for (name, why) in required {
        if secrets.get_opt(&name).await?.is_none() {
            out.push(format!(
                "  Secret {NAMESPACE}/{name} ({why}) is missing: the agent's pods cannot start"
            ));
        }
    }
    // The backups' recipients: the pods start without them, a self-upgrade does not.
    let args: Vec<String> = pod
        .containers
        .iter()
        .flat_map(|c| c.args.iter().flatten().cloned())
        .collect();
    if args.iter().any(|a| a == "--backup-plaintext") {
        out.push(
            "  backups are written UNENCRYPTED (--backup-plaintext): whoever reads the volume capstan-backups or its snapshots holds every cluster's keys"
                .into(),
        );
    } else if let Some((ns, name)) = args
        .windows(2)
        .find(|w| w[0] == "--backup-recipients-secret")
        .and_then(|w| w[1].split_once('/'))
        && Api::<Secret>::namespaced(client.clone(), ns)
            .get_opt(name)
            .await?
            .is_none()
    {
        out.push(format!(
            "  Secret {ns}/{name} (backup recipients) is missing: backups cannot be encrypted, so a management cluster's upgrade of itself waits (create it with key `recipients`, one age public key per line)"
        ));
    }
    // Volumes the pods cannot be scheduled without.
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NAMESPACE);
    for v in pod.volumes.iter().flatten() {
        let Some(name) = v.persistent_volume_claim.as_ref().map(|c| &c.claim_name) else {
            continue;
        };
        let phase = match claims.get_opt(name).await? {
            None => "missing".to_string(),
            Some(c) => c.status.and_then(|s| s.phase).unwrap_or_default(),
        };
        if phase != "Bound" {
            out.push(format!(
                "  PersistentVolumeClaim {NAMESPACE}/{name} (volume {}) is {}: the agent's pods cannot start until it is bound (is there a default storage class, or the one --backup-storage-class names, with the access mode of --backup-access-mode?)",
                v.name,
                if phase.is_empty() { "not bound" } else { &phase }
            ));
        }
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let lp = ListParams::default().labels(&format!("app.kubernetes.io/name={NAME}"));
    for p in pods.list(&lp).await?.items {
        let name = p.metadata.name.clone().unwrap_or_default();
        let status = p.status.unwrap_or_default();
        for cs in status.container_statuses.iter().flatten() {
            if let Some(w) = cs.state.as_ref().and_then(|s| s.waiting.as_ref()) {
                out.push(format!(
                    "  pod {name}: container {} waiting: {} {}",
                    cs.name,
                    w.reason.as_deref().unwrap_or(""),
                    w.message.as_deref().unwrap_or("")
                ));
            }
        }
    }
    let leases: Api<Lease> = Api::namespaced(client.clone(), NAMESPACE);
    if let Some(l) = leases.get_opt(LEASE).await? {
        let holder = l.spec.and_then(|s| s.holder_identity).unwrap_or_default();
        out.push(format!(
            "  leader: {}",
            if holder.is_empty() { "none" } else { &holder }
        ));
    }
    Ok(out)
}
