//! Who the agent is when it writes a cluster's objects: not itself, but an identity of that
//! cluster, so that the API server enforces tenancy even where the agent's own checks miss a
//! case.
//!
//! Every write of a fleet object (server-side apply, its dry run, prune and deletion) is made
//! impersonating [`WORKLOAD_USER`] (an object of a workload directory) or [`MANAGEMENT_USER`] (of
//! a management directory), with the cluster's name as the user's extra [`CLUSTER_EXTRA`]. The
//! two users hold the write rights (`capstan install` binds them; the agent's own ServiceAccount
//! reads, and may impersonate exactly these two users); the ValidatingAdmissionPolicy
//! [`POLICY`] that `capstan install` installs admits from them only objects of that cluster:
//!
//! ```text
//! agent (ServiceAccount capstan) ──Impersonate-User: capstan:workload──────────▶ kube-apiserver
//!                                  Impersonate-Extra-capstan.dev%2Fcluster: dev     │ RBAC: the
//!                                                                                  │ workload kinds
//!                                                ValidatingAdmissionPolicy ◀───────┘
//!                                                capstan-tenancy: labelled and named for `dev`,
//!                                                not another's object, selectors confined, ...
//! ```
//!
//! Flux reaches the same defence by impersonating a tenant's ServiceAccount; capstan's tenants
//! share namespaces (EKS Anywhere puts every cluster in `eksa-system`), where RBAC, which is per
//! namespace, cannot tell one cluster's objects from another's: an admission policy can.
//!
//! Clients are made once per cluster and kept: each is the agent's client (its connection pool,
//! credentials and request counting) with the impersonation headers added.

use std::collections::HashMap;
use std::sync::Mutex;

use http::{HeaderName, HeaderValue, Request};
use kube::Client;
use kube::client::Body;

/// The user an object of a workload directory is written as.
pub const WORKLOAD_USER: &str = "capstan:workload";
/// The user an object of a management directory is written as.
pub const MANAGEMENT_USER: &str = "capstan:management";
/// The user extra naming the fleet cluster a write is for.
pub const CLUSTER_EXTRA: &str = "capstan.dev/cluster";
/// The user extra by which the agent vouches for an object of the cluster's record whose
/// cluster label someone else changed or took off (its UID): the write that puts the label back
/// is then not refused as a takeover.
pub const OWNS_EXTRA: &str = "capstan.dev/owns";
/// The ValidatingAdmissionPolicy (and its binding) that confines the two users.
pub const POLICY: &str = "capstan-tenancy";

/// Which directory an object comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tenant {
    /// `clusters/<mgmt>/workload-clusters/<name>/`: confined to its cluster.
    Workload,
    /// `clusters/<mgmt>/`: an admin's.
    Management,
}

impl Tenant {
    /// The user it writes as.
    pub fn user(self) -> &'static str {
        match self {
            Tenant::Workload => WORKLOAD_USER,
            Tenant::Management => MANAGEMENT_USER,
        }
    }

    /// The tenant of a fleet cluster's directory.
    pub fn of(role: &capstan_layout::Role) -> Tenant {
        match role {
            capstan_layout::Role::Management => Tenant::Management,
            capstan_layout::Role::Workload { .. } => Tenant::Workload,
        }
    }
}

/// The header carrying a user extra: its key percent-encoded, as the API server reads it.
fn extra_header(key: &str) -> HeaderName {
    let key: String = key
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' => (b as char).to_string(),
            other => format!("%{other:02x}"),
        })
        .collect();
    HeaderName::try_from(format!("impersonate-extra-{key}")).expect("a valid header name")
}

/// A client that sends every request as `tenant` for `cluster`, over `base`'s connections.
pub fn impersonating(base: &Client, tenant: Tenant, cluster: &str) -> Client {
    vouching(base, tenant, cluster, &[])
}

/// [`impersonating`], vouching for the objects of these UIDs ([`OWNS_EXTRA`]).
pub fn vouching(base: &Client, tenant: Tenant, cluster: &str, uids: &[String]) -> Client {
    let base = base.clone();
    let user = HeaderValue::from_static(tenant.user());
    // A cluster name is a DNS label (validated), so always a valid header value.
    let cluster = HeaderValue::try_from(cluster).unwrap_or(HeaderValue::from_static("invalid"));
    let owns: Vec<HeaderValue> = uids
        .iter()
        .filter_map(|u| HeaderValue::try_from(u.as_str()).ok())
        .collect();
    let (cluster_key, owns_key) = (extra_header(CLUSTER_EXTRA), extra_header(OWNS_EXTRA));
    let service = tower::service_fn(move |mut req: Request<Body>| {
        let base = base.clone();
        let headers = req.headers_mut();
        headers.insert(HeaderName::from_static("impersonate-user"), user.clone());
        headers.insert(cluster_key.clone(), cluster.clone());
        for uid in &owns {
            headers.append(owns_key.clone(), uid.clone());
        }
        async move { base.send(req).await }
    });
    Client::new(service, "default")
}

/// The impersonating clients of a fleet, one per cluster, made on first use.
pub struct Identities {
    base: Client,
    clients: Mutex<HashMap<(Tenant, String), Client>>,
}

impl Identities {
    /// Clients over `base`.
    pub fn new(base: Client) -> Identities {
        Identities {
            base,
            clients: Mutex::new(HashMap::new()),
        }
    }

    /// A client that writes `cluster`'s objects as `tenant`, vouching for `uids` (made for the
    /// occasion: such writes are rare).
    pub fn vouching(&self, tenant: Tenant, cluster: &str, uids: &[String]) -> Client {
        vouching(&self.base, tenant, cluster, uids)
    }

    /// The client that writes `cluster`'s objects as `tenant`.
    pub fn client(&self, tenant: Tenant, cluster: &str) -> Client {
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        clients
            .entry((tenant, cluster.to_string()))
            .or_insert_with(|| impersonating(&self.base, tenant, cluster))
            .clone()
    }
}

impl std::fmt::Debug for Identities {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identities").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_extra_key_is_percent_encoded_in_its_header() {
        assert_eq!(
            extra_header(CLUSTER_EXTRA).as_str(),
            "impersonate-extra-capstan.dev%2fcluster"
        );
    }
}
