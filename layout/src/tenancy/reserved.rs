//! Names of clusters that do not exist yet: the Secrets and ConfigMaps controllers create per
//! cluster, under names made of the cluster's name and a fixed suffix.
//!
//! A cluster's own objects are named `<cluster>-…`, so `evil` may write `evil-prod-ca` while no
//! cluster `evil-prod` exists. When `evil-prod` joins, Cluster API finds a CA Secret already
//! there and signs the new cluster's certificates with it (a CA `evil` chose), or finds a
//! kubeconfig, an etcd CA, a control-plane init lock that blocks its first machine. What capstan
//! itself renders for `evil-prod` is safe already: the agent never takes over an object another
//! cluster wrote (the new cluster fails with `AlreadyExists`, naming the owner). What controllers
//! generate needs a rule of its own, since they take whatever is there:
//!
//! - a Secret or ConfigMap named `<x><suffix>` for a suffix of [`RESERVED_SUFFIXES`] is cluster
//!   `<x>`'s alone: a workload writes it only when `<x>` is its own name, for every reserved
//!   suffix the name ends with (`dev-etcd-lock` is `dev`'s etcd lock and `dev-etcd`'s init lock:
//!   nobody's to write);
//! - a cluster may not be named so that its names are another cluster's: one ending with what
//!   separates two suffixes ([`reserved_cluster_suffixes`]: `x-etcd`'s init lock `x-etcd-lock`
//!   is `x`'s etcd lock).
//!
//! Both layers hold both rules: validation (`reserved-name`) and the tenancy policy
//! (`ReservedName`).

/// Suffixes controllers append to a cluster's name for the Secrets and ConfigMaps they create,
/// with who does. From Cluster API's `util/secret` purposes, its kubeadm bootstrap provider's
/// init lock, etcdadm's lock, the vSphere and Nutanix credentials EKS Anywhere's templates
/// (and capstan's) name per cluster, the registry mirror login capstan's name per cluster, and
/// the AWS IAM authenticator's certificate EKS Anywhere's templates name per cluster.
pub const RESERVED_SUFFIXES: &[(&str, &str)] = &[
    ("-kubeconfig", "Cluster API: the cluster's admin kubeconfig"),
    ("-ca", "Cluster API: the cluster's CA"),
    ("-etcd", "Cluster API and etcdadm: the etcd CA"),
    ("-sa", "Cluster API: the service-account signing key"),
    ("-proxy", "Cluster API: the front-proxy CA"),
    (
        "-apiserver-etcd-client",
        "Cluster API and etcdadm: the API server's etcd client certificate",
    ),
    (
        "-lock",
        "Cluster API's kubeadm bootstrap provider: the control plane's init lock (a ConfigMap)",
    ),
    ("-etcd-lock", "etcdadm: its init lock (a ConfigMap)"),
    (
        "-vsphere-credentials",
        "CAPV's login to vCenter, as the vSphere templates name it",
    ),
    (
        "-cloud-provider-vsphere-credentials",
        "the vSphere cloud provider's login, as the vSphere templates name it",
    ),
    (
        "-nutanix-credentials",
        "CAPX's login to Prism Central, as capstan's Nutanix templates name it",
    ),
    (
        "-registry-credentials",
        "an authenticated registry mirror's login, read by the cluster's machines, as capstan's templates name it",
    ),
    (
        "-aws-iam-authenticator-ca",
        "the AWS IAM authenticator's certificate and key, read by the cluster's control-plane machines, as EKS Anywhere names it",
    ),
    (
        "-nutanix-ccm-secret",
        "the Nutanix cloud controller manager's login to Prism Central, as the Nutanix templates name it",
    ),
];

/// The kinds controllers create under those names.
pub const RESERVED_KINDS: &[&str] = &["Secret", "ConfigMap"];

/// The clusters a Secret or ConfigMap name is reserved for: `(cluster, suffix)` for each
/// reserved suffix it ends with.
pub fn reserved_for(name: &str) -> impl Iterator<Item = (&str, &'static str)> {
    RESERVED_SUFFIXES.iter().filter_map(move |(s, _)| {
        name.strip_suffix(s)
            .filter(|c| !c.is_empty())
            .map(|c| (c, *s))
    })
}

/// The first cluster other than `cluster` that `name` is reserved for, with the suffix.
pub fn squatted<'n>(name: &'n str, cluster: &str) -> Option<(&'n str, &'static str)> {
    reserved_for(name).find(|(c, _)| *c != cluster)
}

/// Pairs of reserved suffixes of which one ends with the other: `(what separates them, long,
/// short)`, e.g. `("-etcd", "-etcd-lock", "-lock")`.
pub fn overlapping_suffixes() -> Vec<(&'static str, &'static str, &'static str)> {
    let mut out = Vec::new();
    for (long, _) in RESERVED_SUFFIXES {
        for (short, _) in RESERVED_SUFFIXES {
            if long != short
                && let Some(t) = long.strip_suffix(short)
            {
                out.push((t, *long, *short));
            }
        }
    }
    out
}

/// What a cluster's name may not end with, so that no cluster's generated name is another's:
/// what separates two overlapping suffixes (`-etcd`: `x-etcd`'s init lock `x-etcd-lock` is
/// `x`'s etcd lock).
pub fn reserved_cluster_suffixes() -> Vec<&'static str> {
    let mut out: Vec<&'static str> = overlapping_suffixes().iter().map(|o| o.0).collect();
    out.dedup();
    out
}

/// When a cluster's name makes one of its generated names another cluster's: `(that cluster,
/// its suffix, the cluster's own suffix)`: `dev-etcd` → `("dev", "-etcd-lock", "-lock")`.
pub fn reserved_cluster_name(cluster: &str) -> Option<(&str, &'static str, &'static str)> {
    overlapping_suffixes()
        .into_iter()
        .find_map(|(t, long, short)| {
            cluster
                .strip_suffix(t)
                .filter(|base| !base.is_empty())
                .map(|base| (base, long, short))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nutanix_logins_are_their_clusters_alone() {
        assert_eq!(
            squatted("prod-nutanix-credentials", "evil"),
            Some(("prod", "-nutanix-credentials"))
        );
        assert_eq!(
            squatted("prod-nutanix-ccm-secret", "evil"),
            Some(("prod", "-nutanix-ccm-secret"))
        );
    }

    #[test]
    fn a_generated_name_is_its_clusters_alone() {
        assert_eq!(squatted("evil-prod-ca", "evil"), Some(("evil-prod", "-ca")));
        assert_eq!(
            squatted("evil-prod-kubeconfig", "evil"),
            Some(("evil-prod", "-kubeconfig"))
        );
        assert_eq!(squatted("evil-prod-ca", "evil-prod"), None);
        assert_eq!(squatted("evil-ca", "evil"), None);
        assert_eq!(squatted("evil-settings", "evil"), None);
        // dev's etcdadm lock and dev-etcd's init lock: nobody's to write.
        assert_eq!(
            squatted("dev-etcd-lock", "dev"),
            Some(("dev-etcd", "-lock"))
        );
        assert_eq!(
            squatted("dev-etcd-lock", "dev-etcd"),
            Some(("dev", "-etcd-lock"))
        );
        assert_eq!(
            squatted("dev-cloud-provider-vsphere-credentials", "dev"),
            Some(("dev-cloud-provider", "-vsphere-credentials"))
        );
        assert_eq!(squatted("dev-apiserver-etcd-client", "dev"), None);
        // dev's AWS IAM authenticator key, and the CA of a cluster that cannot exist: the
        // admin's to write, not dev's.
        assert_eq!(
            squatted("dev-aws-iam-authenticator-ca", "dev"),
            Some(("dev-aws-iam-authenticator", "-ca"))
        );
        assert_eq!(
            reserved_for("dev-aws-iam-authenticator-ca").collect::<Vec<_>>(),
            [
                ("dev-aws-iam-authenticator", "-ca"),
                ("dev", "-aws-iam-authenticator-ca")
            ]
        );
    }

    #[test]
    fn cluster_names_that_would_share_generated_names_are_reserved() {
        assert_eq!(
            reserved_cluster_suffixes(),
            vec!["-etcd", "-cloud-provider", "-aws-iam-authenticator"]
        );
        assert_eq!(
            reserved_cluster_name("dev-etcd"),
            Some(("dev", "-etcd-lock", "-lock"))
        );
        assert_eq!(
            reserved_cluster_name("dev-cloud-provider"),
            Some((
                "dev",
                "-cloud-provider-vsphere-credentials",
                "-vsphere-credentials"
            ))
        );
        assert_eq!(reserved_cluster_name("dev-ca"), None);
        assert_eq!(reserved_cluster_name("dev"), None);
    }
}
