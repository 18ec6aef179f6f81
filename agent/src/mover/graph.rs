//! What the mover reads: every object at the source that may belong to a moved cluster, with
//! the API resource to write it through, and what the target already holds of the same names.
//!
//! Read at the source: every kind of the Cluster API groups (`cluster.x-k8s.io` and its
//! providers, IPAM and add-ons among them), of EKS Anywhere and of capstan, in the moved
//! clusters' namespaces and cluster-wide where the kind is cluster-scoped; every Secret and
//! ConfigMap of those namespaces; capstan's records in `capstan-system`. Which of them go is
//! `capstan_plan::moving::plan`'s decision.

use std::collections::{BTreeMap, BTreeSet};

use capstan_layout::fleet::RELEASE_NAMESPACE;
use capstan_plan::moving::{ClusterKey, RECORDS_NAMESPACE, TargetFacts};
use capstan_templates::identity::MOVED_FROM_ANNOTATION;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams};
use kube::discovery::{ApiResource, Discovery, Scope};
use serde_json::Value;

use super::MoveError;

/// One object read, and how to write its kind.
#[derive(Debug, Clone)]
pub struct Found {
    /// The object, with `apiVersion` and `kind` set.
    pub object: Value,
    /// Its resource.
    pub resource: ApiResource,
    /// Namespaced (else cluster-scoped).
    pub namespaced: bool,
    /// Its kind has a status subresource.
    pub status: bool,
}

impl Found {
    /// The API of its kind, in its namespace.
    pub fn api(&self, client: &Client) -> Api<DynamicObject> {
        let ns = self
            .object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("");
        if self.namespaced {
            Api::namespaced_with(client.clone(), ns, &self.resource)
        } else {
            Api::all_with(client.clone(), &self.resource)
        }
    }

    /// `metadata.name`.
    pub fn name(&self) -> &str {
        self.object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
    }
}

async fn list(
    client: &Client,
    ar: &ApiResource,
    namespace: Option<&str>,
    namespaced: bool,
    status: bool,
    out: &mut Vec<Found>,
) -> Result<(), MoveError> {
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, ar),
        None => Api::all_with(client.clone(), ar),
    };
    let mut lp = ListParams::default().limit(crate::backup::PAGE);
    loop {
        let page = api
            .list(&lp)
            .await
            .map_err(|e| MoveError::kube(&format!("listing {}.{}", ar.plural, ar.group), e))?;
        for o in page.items {
            out.push(Found {
                object: crate::backup::as_listed(&o, ar),
                resource: ar.clone(),
                namespaced,
                status,
            });
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => lp = lp.continue_token(&token),
            None => return Ok(()),
        }
    }
}

/// Every object at the source that may belong to one of `clusters`.
pub async fn source_objects(
    source: &Client,
    clusters: &[ClusterKey],
) -> Result<Vec<Found>, MoveError> {
    let discovery = Discovery::new(source.clone())
        .run_aggregated()
        .await
        .map_err(|e| MoveError::kube("API discovery at the source", e))?;
    let namespaces: BTreeSet<&str> = clusters.iter().map(|c| c.namespace.as_str()).collect();
    let mut out = Vec::new();
    for group in discovery.groups() {
        if !crate::backup::backed_up_group(group.name()) {
            continue;
        }
        for (ar, caps) in group.resources_by_stability() {
            if !caps.supports_operation(kube::discovery::verbs::LIST) || ar.plural.contains('/') {
                continue;
            }
            let status = caps.subresources.iter().any(|(r, _)| r.plural == "status");
            if caps.scope == Scope::Cluster {
                list(source, &ar, None, false, status, &mut out).await?;
                continue;
            }
            let mut wanted = namespaces.clone();
            if ar.group == "capstan.dev" {
                wanted.insert(RECORDS_NAMESPACE);
            }
            // EKS-A's releases live in its own namespace, whichever namespace the clusters use.
            if ar.group == "anywhere.eks.amazonaws.com" {
                wanted.insert(RELEASE_NAMESPACE);
            }
            for ns in wanted {
                list(source, &ar, Some(ns), true, status, &mut out).await?;
            }
        }
    }
    let secrets = ApiResource::erase::<Secret>(&());
    let config_maps = ApiResource::erase::<ConfigMap>(&());
    for ns in namespaces {
        list(source, &secrets, Some(ns), true, false, &mut out).await?;
        list(source, &config_maps, Some(ns), true, false, &mut out).await?;
    }
    Ok(out)
}

/// What the target serves and holds of the names of `objects`.
pub async fn target_facts(target: &Client, objects: &[&Found]) -> Result<TargetFacts, MoveError> {
    let discovery = Discovery::new(target.clone())
        .run_aggregated()
        .await
        .map_err(|e| MoveError::kube("API discovery at the target", e))?;
    let mut served = BTreeSet::new();
    for group in discovery.groups() {
        for version in group.versions() {
            for (ar, _) in group.versioned_resources(version) {
                served.insert((ar.group.clone(), ar.kind.clone()));
            }
        }
    }
    let mut existing = BTreeMap::new();
    // One list per kind and namespace, not a read per object.
    let mut asked: BTreeSet<(String, String, String)> = BTreeSet::new();
    for f in objects {
        let ns = f
            .object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if !served.contains(&(f.resource.group.clone(), f.resource.kind.clone()))
            || !asked.insert((
                f.resource.group.clone(),
                f.resource.kind.clone(),
                ns.clone(),
            ))
        {
            continue;
        }
        let mut there = Vec::new();
        // The target may serve the kind at another version than the source's.
        let Some((ar, caps)) = discovery.resolve_gvk(&kube::core::GroupVersionKind {
            group: f.resource.group.clone(),
            version: f.resource.version.clone(),
            kind: f.resource.kind.clone(),
        }) else {
            continue;
        };
        let namespaced = caps.scope == Scope::Namespaced;
        list(
            target,
            &ar,
            namespaced.then_some(ns.as_str()),
            namespaced,
            false,
            &mut there,
        )
        .await?;
        for t in there {
            let from = t
                .object
                .pointer("/metadata/annotations")
                .and_then(|a| a.get(MOVED_FROM_ANNOTATION))
                .and_then(Value::as_str)
                .map(str::to_string);
            existing.insert(capstan_plan::moving::object_key(&t.object), from);
        }
    }
    Ok(TargetFacts { served, existing })
}

/// Whether capstan's agent runs at the source (`capstan_plan::moving::agent_running`, from its
/// Deployment and leader Lease there).
pub async fn source_agent(
    source: &Client,
) -> Result<Option<capstan_plan::moving::Refusal>, MoveError> {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::coordination::v1::Lease;
    let deployments: Api<Deployment> = Api::namespaced(source.clone(), RECORDS_NAMESPACE);
    let leases: Api<Lease> = Api::namespaced(source.clone(), RECORDS_NAMESPACE);
    let deployment = deployments
        .get_opt(crate::install::manifests::NAME)
        .await
        .map_err(|e| MoveError::kube("reading the source's capstan Deployment", e))?
        .map(|d| serde_json::to_value(d).expect("objects serialise"));
    let lease = leases
        .get_opt(crate::install::manifests::LEASE)
        .await
        .map_err(|e| MoveError::kube("reading the source's capstan Lease", e))?
        .map(|l| serde_json::to_value(l).expect("objects serialise"));
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    Ok(capstan_plan::moving::agent_running(
        deployment.as_ref(),
        lease.as_ref(),
        now,
    ))
}
