//! What each kind of machine is bootstrapped with: component flags, kubelet settings, files and
//! commands, computed the way EKS Anywhere computes them (`pkg/clusterapi/extraargs.go` and the
//! providers' template builders) and handed to the templates as data.
//!
//! The hardening EKS Anywhere applies is here: an audit policy and audit log for the API server,
//! TLS cipher suites on every component that takes them, `profiling=false`, a read-only-port and
//! anonymous-auth free kubelet on vSphere. So are the optional features: proxy and registry
//! mirror files for containerd, OIDC and pod IAM flags, the AWS IAM authenticator's webhook, KMS
//! encryption of etcd, kubelet configuration patches.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use crate::spec::{Cluster, Provider, RegistryMirror};

/// The one cipher suite EKS Anywhere allows on its components' TLS endpoints.
pub const CIPHER_SUITES: &str = "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256";
/// Where the audit policy is written on control-plane machines.
pub const AUDIT_POLICY_PATH: &str = "/etc/kubernetes/audit-policy.yaml";
/// Where kubeadm reads kubelet configuration patches.
pub const PATCHES_DIR: &str = "/etc/kubernetes/patches";
/// The kubelet configuration patch file.
pub const KUBELET_PATCH_PATH: &str = "/etc/kubernetes/patches/kubeletconfiguration0+strategic.yaml";
/// The KMS encryption configuration on control-plane machines.
pub const ENCRYPTION_CONFIG_PATH: &str = "/var/lib/kubeadm/encryption-config.yaml";
/// The default audit policy (audit.k8s.io/v1), capstan's copy of the rules EKS Anywhere applies.
pub const DEFAULT_AUDIT_POLICY: &str = include_str!("../../providers/common/audit-policy.yaml");
/// Where the admission exclusion rules are written on control-plane machines
/// (`skipAdmissionForSystemResources`).
pub const ADMISSION_EXCLUSION_PATH: &str = "/etc/kubernetes/admission-plugin-exclusion-rules.json";
/// The environment variable that names the rules file to EKS Distro's API server.
pub const ADMISSION_EXCLUSION_ENV: &str = "EKS_PATCH_EXCLUSION_RULES_FILE";
/// The admission exclusion rules, capstan's copy of EKS Anywhere's, as YAML.
const ADMISSION_EXCLUSION_RULES: &str =
    include_str!("../../providers/common/admission-exclusion-rules.yaml");

/// The admission exclusion rules as the JSON file the API server reads.
pub fn admission_exclusion_rules() -> &'static str {
    static R: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    R.get_or_init(|| {
        let v = crate::yaml::parse_values(ADMISSION_EXCLUSION_RULES)
            .expect("the admission exclusion rules parse; checked by a test");
        serde_json::to_string_pretty(&v[0]).expect("JSON values serialise")
    })
}

/// Flags as an ordered map (name → value); rendered as Cluster API v1beta2 `[{name, value}]`.
pub type Args = BTreeMap<String, String>;

/// `[{name, value}]`, sorted by name.
pub fn args_json(args: &Args) -> Value {
    Value::Array(
        args.iter()
            .map(|(k, v)| json!({"name": k, "value": v}))
            .collect(),
    )
}

fn args(pairs: &[(&str, &str)]) -> Args {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// `node-labels` of a group, `k=v` joined by commas in key order.
pub fn node_labels(labels: &BTreeMap<String, String>) -> Option<String> {
    (!labels.is_empty()).then(|| {
        labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",")
    })
}

/// Whether the cluster's provider gets EKS Anywhere's component hardening (profiling off, one
/// TLS cipher suite on the API server, scheduler and etcd): docker and vSphere do; EKS
/// Anywhere's Nutanix templates leave it out, and capstan renders what EKS Anywhere renders.
pub fn hardened(c: &Cluster) -> bool {
    !matches!(c.provider, Provider::Nutanix(_) | Provider::Tinkerbell(_))
}

/// kube-apiserver flags.
pub fn apiserver_args(c: &Cluster, minor: u32) -> Args {
    let vm = matches!(c.provider, Provider::VSphere(_) | Provider::Nutanix(_));
    let mut a = args(&[
        ("audit-policy-file", AUDIT_POLICY_PATH),
        ("audit-log-path", "/var/log/kubernetes/api-audit.log"),
        ("audit-log-maxage", "30"),
        ("audit-log-maxbackup", "10"),
        ("audit-log-maxsize", "512"),
    ]);
    if hardened(c) {
        a.insert("profiling".into(), "false".into());
    }
    // kube-apiserver dropped --cloud-provider in 1.33; kubelets and the controller manager keep
    // cloud-provider=external and the provider's cloud controller manager initialises the nodes.
    if vm && minor < 33 {
        a.insert("cloud-provider".into(), "external".into());
    }
    if !c.etcd_encryption.is_empty() && minor >= 29 {
        a.insert("feature-gates".into(), "KMSv1=true".into());
    }
    if let Some(o) = &c.oidc {
        let mut put = |k: &str, v: &str| {
            if !v.is_empty() {
                a.insert(k.into(), v.into());
            }
        };
        put("oidc-client-id", &o.client_id);
        put("oidc-groups-claim", &o.groups_claim);
        put("oidc-groups-prefix", &o.groups_prefix);
        put("oidc-issuer-url", &o.issuer_url);
        if let Some(r) = o.required_claims.first() {
            put("oidc-required-claim", &format!("{}={}", r.claim, r.value));
        }
        put("oidc-username-claim", &o.username_claim);
        put("oidc-username-prefix", &o.username_prefix);
    }
    if c.aws_iam.is_some() {
        a.insert(
            "authentication-token-webhook-config-file".into(),
            AWS_IAM_WEBHOOK_CONFIG.into(),
        );
    }
    for (k, v) in &c.control_plane.api_server_extra_args {
        a.insert(k.clone(), v.clone());
    }
    if !c.etcd_encryption.is_empty() {
        a.insert(
            "encryption-provider-config".into(),
            "/etc/kubernetes/enc/encryption-config.yaml".into(),
        );
    }
    if hardened(c) {
        a.insert("tls-cipher-suites".into(), CIPHER_SUITES.into());
    }
    if let Some(issuer) = &c.pod_iam_issuer {
        let joined = match a.get("service-account-issuer") {
            Some(v) => format!("{v},{issuer}"),
            None => issuer.clone(),
        };
        a.insert("service-account-issuer".into(), joined);
    }
    a
}

/// kube-controller-manager flags.
pub fn controller_manager_args(c: &Cluster) -> Args {
    let mut a = args(&[("profiling", "false"), ("tls-cipher-suites", CIPHER_SUITES)]);
    match c.provider {
        Provider::VSphere(_) => {
            a.insert("cloud-provider".into(), "external".into());
        }
        Provider::Docker(_) => {
            a.insert("enable-hostpath-provisioner".into(), "true".into());
        }
        Provider::Nutanix(_) => {
            a = args(&[
                ("cloud-provider", "external"),
                ("enable-hostpath-provisioner", "true"),
            ]);
        }
        // EKS Anywhere's bare-metal template gives the controller manager no flags.
        Provider::Tinkerbell(_) => a = Args::new(),
    }
    if let Some(m) = c.network.node_cidr_mask_size {
        a.insert("node-cidr-mask-size".into(), m.to_string());
    }
    a
}

/// kube-scheduler flags.
pub fn scheduler_args() -> Args {
    args(&[("profiling", "false"), ("tls-cipher-suites", CIPHER_SUITES)])
}

/// Flags of stacked etcd.
pub fn etcd_args() -> Args {
    args(&[("cipher-suites", CIPHER_SUITES)])
}

/// Which kubelet a machine's flags are for. EKS Anywhere's Nutanix templates give the first
/// control-plane node (kubeadm init) and workers `eviction-hard`, and joining control-plane
/// nodes the read-only-port and anonymous-auth hardening; every other provider gives all its
/// machines the same flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KubeletRole {
    /// The first control-plane node.
    Init,
    /// Control-plane nodes that join.
    Join,
    /// Worker nodes.
    Worker,
}

/// kubelet flags of a machine, and the kubelet configuration patch when one is written (which
/// replaces the hardening flags, as in EKS-A).
pub fn kubelet(
    c: &Cluster,
    minor: u32,
    config: Option<&Map<String, Value>>,
    labels: &BTreeMap<String, String>,
    role: KubeletRole,
) -> (Args, Option<String>) {
    let docker = matches!(c.provider, Provider::Docker(_));
    let bare_metal = matches!(c.provider, Provider::Tinkerbell(_));
    let mut a = Args::new();
    if bare_metal {
        // CAPT replaces the placeholder with the Hardware's provider ID.
        a.insert("provider-id".into(), "PROVIDER_ID".into());
    } else if !docker {
        a.insert("cloud-provider".into(), "external".into());
    }
    let patch = match config {
        Some(cfg) => {
            let mut cfg = cfg.clone();
            cfg.entry("tlsCipherSuites")
                .or_insert_with(|| json!([CIPHER_SUITES]));
            if let Some(r) = &c.network.resolv_conf {
                cfg.entry("resolvConf").or_insert_with(|| json!(r));
            }
            if docker && minor >= 31 {
                cfg.entry("failCgroupV1").or_insert(json!(false));
            }
            Some(crate::yaml::to_string(&Value::Object(cfg)))
        }
        None => {
            if docker {
                a.insert(
                    "eviction-hard".into(),
                    "nodefs.available<0%,nodefs.inodesFree<0%,imagefs.available<0%".into(),
                );
                a.insert("cgroup-driver".into(), "systemd".into());
                if minor >= 31 {
                    a.insert("fail-cgroupv1".into(), "false".into());
                }
            } else if matches!(c.provider, Provider::Nutanix(_)) && role != KubeletRole::Join {
                a.insert(
                    "eviction-hard".into(),
                    "nodefs.available<0%,nodefs.inodesFree<0%,imagefs.available<0%".into(),
                );
            } else {
                a.insert("read-only-port".into(), "0".into());
                a.insert("anonymous-auth".into(), "false".into());
            }
            a.insert("tls-cipher-suites".into(), CIPHER_SUITES.into());
            if let Some(r) = &c.network.resolv_conf {
                a.insert("resolv-conf".into(), r.clone());
            }
            None
        }
    };
    if let Some(l) = node_labels(labels) {
        a.insert("node-labels".into(), l);
    }
    (a, patch)
}

fn file(path: &str, content: String) -> Value {
    json!({"path": path, "owner": "root:root", "content": content})
}

/// The kubelet patch file.
pub fn kubelet_patch_file(patch: &str) -> Value {
    let mut f = file(KUBELET_PATCH_PATH, patch.to_string());
    f["permissions"] = json!("0644");
    f
}

/// The server a provider's machines reach past the proxy: vCenter or Prism Central (None on
/// docker, whose nodes use the host's network).
pub fn provider_server(c: &Cluster) -> Option<&str> {
    match &c.provider {
        Provider::VSphere(v) => Some(&v.server),
        Provider::Nutanix(n) => Some(&n.endpoint),
        Provider::Tinkerbell(t) => Some(&t.tinkerbell_ip),
        Provider::Docker(_) => None,
    }
}

/// The proxy drop-in of containerd (not on docker: CAPD nodes use the host's network).
pub fn proxy_file(c: &Cluster) -> Option<Value> {
    let p = c.proxy.as_ref()?;
    let server = provider_server(c)?;
    let no_proxy = no_proxy(c, server);
    Some(file(
        "/etc/systemd/system/containerd.service.d/http-proxy.conf",
        format!(
            "[Service]\nEnvironment=\"HTTP_PROXY={}\"\nEnvironment=\"HTTPS_PROXY={}\"\nEnvironment=\"NO_PROXY={}\"\n",
            p.http,
            p.https,
            no_proxy.join(",")
        ),
    ))
}

/// Destinations that bypass the proxy: the cluster's networks, what the user lists, the
/// defaults EKS-A adds, vCenter or Prism Central, and the API endpoint.
pub fn no_proxy(c: &Cluster, server: &str) -> Vec<String> {
    let mut out = vec![c.network.pods.to_string(), c.network.services.to_string()];
    if let Some(p) = &c.proxy {
        out.extend(p.no_proxy.iter().cloned());
    }
    out.extend(["localhost", "127.0.0.1", ".svc"].map(String::from));
    // EKS Anywhere's bare-metal template names the Tinkerbell stack after the endpoint.
    let last = matches!(c.provider, Provider::Tinkerbell(_));
    if !last {
        out.push(server.to_string());
    }
    if let Some(h) = &c.control_plane.endpoint_host {
        out.push(h.clone());
    }
    if last {
        out.push(server.to_string());
    }
    out
}

/// containerd's API endpoint of a registry mirror (`host:port[/ns]` → `host:port/v2[/ns]`).
pub fn mirror_api_endpoint(addr: &str) -> String {
    match addr.split_once('/') {
        Some((host, ns)) => format!("{host}/v2/{ns}"),
        None => format!("{addr}/v2"),
    }
}

/// Where a machine of a cluster with an authenticated registry mirror finds the mirror's login
/// while its containerd files are written: two files kubeadm's bootstrap fills from the
/// cluster's [`crate::spec::registry_credentials_secret`] (Cluster API resolves `contentFrom`
/// when it makes the machine's bootstrap data), removed once read.
pub const MIRROR_LOGIN_DIR: &str = "/etc/containerd/registry-login";

/// The registries of a mirror's hosts files: (the registry whose `certs.d` directory it is, the
/// mirror's API endpoint for it), the mirror itself first.
fn mirror_hosts(m: &RegistryMirror) -> Vec<(&str, String)> {
    let mut out = vec![(m.base.as_str(), mirror_api_endpoint(&m.base))];
    out.extend(
        m.namespaces
            .iter()
            .map(|(orig, mirror)| (orig.as_str(), mirror_api_endpoint(mirror))),
    );
    out
}

/// containerd's files for a registry mirror: its CA, the config that enables `certs.d`, and
/// one hosts.toml for the mirror itself and for each registry it mirrors; with `authenticate`,
/// the login's two files from the cluster's Secret (`cluster`: the cluster's name).
pub fn mirror_files(m: &RegistryMirror, cluster: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let ca_path = format!("/etc/containerd/certs.d/{}/ca.crt", m.base);
    if let Some(ca) = &m.ca_cert {
        out.push(file(&ca_path, ca.clone()));
    }
    out.push(file(
        "/etc/containerd/config_append.toml",
        "[plugins.\"io.containerd.grpc.v1.cri\".registry]\n  config_path = \"/etc/containerd/certs.d\"\n".into(),
    ));
    for (server, endpoint) in mirror_hosts(m) {
        let mut t = format!(
            "server = \"https://{server}\"\n\n[host.\"https://{endpoint}\"]\n  capabilities = [\"pull\", \"resolve\"]\n  override_path = true\n"
        );
        if m.ca_cert.is_some() {
            t.push_str(&format!("  ca = \"{ca_path}\"\n"));
        }
        if m.insecure_skip_verify {
            t.push_str("  skip_verify = true\n");
        }
        out.push(file(
            &format!("/etc/containerd/certs.d/{server}/hosts.toml"),
            t,
        ));
    }
    if m.authenticate {
        let secret = crate::spec::registry_credentials_secret(cluster);
        for key in ["username", "password"] {
            out.push(json!({
                "path": format!("{MIRROR_LOGIN_DIR}/{key}"),
                "owner": "root:root",
                "permissions": "0600",
                "contentFrom": {"secret": {"name": secret, "key": key}},
            }));
        }
    }
    out
}

/// With an authenticated mirror, the command that gives each hosts.toml the login as the
/// `authorization` header EKS Anywhere writes there (`Basic` and base64 of `user:password`),
/// made on the machine from [`MIRROR_LOGIN_DIR`] and removing it: the login is in the
/// machine's containerd configuration, as with EKS Anywhere, but not in any object's spec.
fn mirror_login_command(m: &RegistryMirror) -> Option<String> {
    if !m.authenticate {
        return None;
    }
    let d = MIRROR_LOGIN_DIR;
    let mut cmd = format!(
        "login=$(printf '%s:%s' \"$(cat {d}/username)\" \"$(cat {d}/password)\" | base64 -w0)"
    );
    for (server, endpoint) in mirror_hosts(m) {
        cmd.push_str(&format!(
            " && printf '  [host.\"https://%s\".header]\\n    authorization = \"Basic %s\"\\n' '{endpoint}' \"$login\" >> '/etc/containerd/certs.d/{server}/hosts.toml'"
        ));
    }
    cmd.push_str(&format!(" && rm -rf {d}"));
    Some(cmd)
}

/// Where the API server reads the AWS IAM authenticator's webhook configuration (a kubeconfig),
/// inside its static pod.
pub const AWS_IAM_WEBHOOK_CONFIG: &str = "/etc/kubernetes/aws-iam-authenticator/kubeconfig.yaml";
/// The host directory of the authenticator's webhook kubeconfig (mounted at the directory of
/// [`AWS_IAM_WEBHOOK_CONFIG`] in the API server, read by the authenticator from there).
const AWS_IAM_HOST_DIR: &str = "/var/lib/kubeadm/aws-iam-authenticator/";
/// The host directory of the authenticator's certificate and key (`/var/aws-iam-authenticator/`
/// in the API server, which trusts the certificate as the webhook's CA).
const AWS_IAM_PKI_DIR: &str = "/var/lib/kubeadm/aws-iam-authenticator/pki/";
/// The API server's kubeconfig for the authenticator's webhook: the authenticator serves on the
/// node's loopback (port 21362), with the certificate of the cluster's CA Secret.
const AWS_IAM_WEBHOOK_KUBECONFIG: &str = "# clusters refers to the remote service.
clusters:
  - name: aws-iam-authenticator
    cluster:
      certificate-authority: /var/aws-iam-authenticator/cert.pem
      server: https://localhost:21362/authenticate
# users refers to the API Server's webhook configuration
# (we don't need to authenticate the API server).
users:
  - name: apiserver
# kubeconfig files require a context. Provide one for the API Server.
current-context: webhook
contexts:
- name: webhook
  context:
    cluster: aws-iam-authenticator
    user: apiserver
";

/// With an AWSIamConfig, the control-plane machines' files for the authenticator: the API
/// server's webhook kubeconfig, and the certificate and key kubeadm's bootstrap fills from the
/// cluster's [`crate::spec::aws_iam_ca_secret`] (the key never in an object's spec).
pub fn aws_iam_files(c: &Cluster) -> Vec<Value> {
    if c.aws_iam.is_none() {
        return Vec::new();
    }
    let secret = crate::spec::aws_iam_ca_secret(&c.name);
    let mut out = vec![json!({
        "path": format!("{AWS_IAM_HOST_DIR}kubeconfig.yaml"),
        "owner": "root:root",
        "permissions": "0640",
        "content": AWS_IAM_WEBHOOK_KUBECONFIG,
    })];
    for key in ["cert.pem", "key.pem"] {
        out.push(json!({
            "path": format!("{AWS_IAM_PKI_DIR}{key}"),
            "owner": "root:root",
            "permissions": "0640",
            "contentFrom": {"secret": {"name": secret, "key": key}},
        }));
    }
    out
}

/// With an AWSIamConfig, the API server's two volumes: the webhook kubeconfig's directory and
/// the authenticator's certificate directory.
pub fn aws_iam_volumes(c: &Cluster) -> Vec<Value> {
    if c.aws_iam.is_none() {
        return Vec::new();
    }
    vec![
        json!({"name": "authconfig", "hostPath": AWS_IAM_HOST_DIR, "mountPath": "/etc/kubernetes/aws-iam-authenticator/", "readOnly": false}),
        json!({"name": "awsiamcert", "hostPath": AWS_IAM_PKI_DIR, "mountPath": "/var/aws-iam-authenticator/", "readOnly": false}),
    ]
}

/// The KMS EncryptionConfiguration of kube-apiserver.
pub fn encryption_config(c: &Cluster) -> Option<String> {
    if c.etcd_encryption.is_empty() {
        return None;
    }
    let resources: Vec<Value> = c
        .etcd_encryption
        .iter()
        .map(|e| {
            let mut providers: Vec<Value> = e
                .providers
                .iter()
                .map(|p| {
                    let mut kms = Map::new();
                    kms.insert("apiVersion".into(), json!("v1"));
                    kms.insert("name".into(), json!(p.kms.name));
                    kms.insert("endpoint".into(), json!(p.kms.socket_listen_address));
                    kms.insert("cachesize".into(), json!(p.kms.cache_size.unwrap_or(1000)));
                    let timeout = p
                        .kms
                        .timeout
                        .as_deref()
                        .and_then(crate::spec::parse_duration_seconds)
                        .unwrap_or(3);
                    kms.insert("timeout".into(), json!(go_duration(timeout)));
                    json!({"kms": kms})
                })
                .collect();
            providers.push(json!({"identity": {}}));
            json!({"resources": e.resources, "providers": providers})
        })
        .collect();
    Some(crate::yaml::to_string(&json!({
        "apiVersion": "apiserver.config.k8s.io/v1",
        "kind": "EncryptionConfiguration",
        "resources": resources,
    })))
}

/// A duration as Go prints one (`3s`, `1m30s`, `1h0m0s`), which is how EKS-A writes them.
pub fn go_duration(secs: u64) -> String {
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    match (h, m) {
        (0, 0) => format!("{s}s"),
        (0, _) => format!("{m}m{s}s"),
        _ => format!("{h}h{m}m{s}s"),
    }
}

/// Commands run before kubeadm on a vSphere machine: containerd restarts for proxy and mirror
/// settings, then the hostname from cloud-init's metadata.
pub fn vsphere_pre_commands(c: &Cluster) -> Vec<String> {
    let mut out = containerd_restart(c);
    out.extend(hostname_commands());
    out
}

/// containerd's restart for proxy and mirror settings (vSphere, Nutanix and bare-metal machines).
fn containerd_restart(c: &Cluster) -> Vec<String> {
    let mut out = Vec::new();
    out.extend(c.registry_mirror.as_ref().and_then(mirror_login_command));
    if c.registry_mirror.is_some() {
        out.push("cat /etc/containerd/config_append.toml >> /etc/containerd/config.toml".into());
    }
    if c.registry_mirror.is_some() || c.proxy.is_some() {
        out.push("sudo systemctl daemon-reload".into());
        out.push("sudo systemctl restart containerd".into());
    }
    out
}

/// Commands run before kubeadm on a bare-metal machine: containerd restarts for proxy and mirror
/// settings (the hostname comes from the Hardware through Tinkerbell's metadata service).
pub fn tinkerbell_pre_commands(c: &Cluster) -> Vec<String> {
    containerd_restart(c)
}

/// Commands run before kubeadm on a Nutanix machine: containerd restarts for proxy and mirror
/// settings, the hostname from cloud-init's metadata, and on control-plane machines
/// `/etc/hosts`.
pub fn nutanix_pre_commands(c: &Cluster, control_plane: bool) -> Vec<String> {
    const H: &str = "{{ ds.meta_data.hostname }}";
    let mut out = containerd_restart(c);
    out.push(format!("hostnamectl set-hostname \"{H}\""));
    if control_plane {
        out.push("echo \"::1         ipv6-localhost ipv6-loopback\" >/etc/hosts".into());
        out.push("echo \"127.0.0.1   localhost\" >>/etc/hosts".into());
        out.push(format!("echo \"127.0.0.1   {H}\" >> /etc/hosts"));
    }
    out
}

/// Set the hostname and /etc/hosts from cloud-init's metadata (vSphere machines and etcd).
pub fn hostname_commands() -> Vec<String> {
    const H: &str = "{{ ds.meta_data.hostname }}";
    vec![
        format!("hostname \"{H}\""),
        "echo \"::1         ipv6-localhost ipv6-loopback\" >/etc/hosts".into(),
        "echo \"127.0.0.1   localhost\" >>/etc/hosts".into(),
        format!("echo \"127.0.0.1   {H}\" >>/etc/hosts"),
        format!("echo \"{H}\" >/etc/hostname"),
    ]
}

/// Commands run before kubeadm on a docker machine with a registry mirror.
pub fn docker_pre_commands(c: &Cluster) -> Vec<String> {
    let Some(m) = &c.registry_mirror else {
        return Vec::new();
    };
    let mut out: Vec<String> = mirror_login_command(m).into_iter().collect();
    out.extend([
        "cat /etc/containerd/config_append.toml >> /etc/containerd/config.toml".into(),
        "systemctl daemon-reload".into(),
        "systemctl restart containerd".into(),
    ]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mirror_endpoints_put_v2_before_the_namespace() {
        assert_eq!(mirror_api_endpoint("m.corp:443"), "m.corp:443/v2");
        assert_eq!(
            mirror_api_endpoint("m.corp:443/ecr-public"),
            "m.corp:443/v2/ecr-public"
        );
    }

    #[test]
    fn durations_print_as_go_does() {
        assert_eq!(go_duration(3), "3s");
        assert_eq!(go_duration(90), "1m30s");
        assert_eq!(go_duration(3600), "1h0m0s");
    }

    #[test]
    fn the_admission_exclusion_rules_are_a_list_of_complete_rules() {
        let rules: Vec<Value> = serde_json::from_str(admission_exclusion_rules()).unwrap();
        assert_eq!(rules.len(), 17);
        for r in &rules {
            for key in [
                "apiGroup",
                "apiVersion",
                "kind",
                "scope",
                "name",
                "username",
            ] {
                assert!(r.get(key).is_some(), "{key} missing in {r}");
            }
            let namespaced = r["scope"] == "Namespaced";
            assert_eq!(r.get("namespace").is_some(), namespaced, "{r}");
        }
    }

    #[test]
    fn the_default_audit_policy_is_a_policy() {
        let docs = crate::yaml::parse_values(DEFAULT_AUDIT_POLICY).unwrap();
        assert_eq!(docs.len(), 1);
        assert_eq!(docs[0]["kind"], "Policy");
        assert_eq!(docs[0]["apiVersion"], "audit.k8s.io/v1");
    }

    /// The login files come from the cluster's Secret, never inline; run by a real `sh` over a
    /// scratch copy of the machine's files, the command gives every hosts.toml the header EKS
    /// Anywhere writes (`Basic` base64 of `user:password`) and removes the login.
    #[test]
    fn an_authenticated_mirror_gets_its_login_on_the_machine() {
        use std::collections::BTreeMap;
        let m = RegistryMirror {
            base: "mirror.corp:5000".into(),
            namespaces: BTreeMap::from([
                ("public.ecr.aws".into(), "mirror.corp:5000/ecr".into()),
                ("docker.io".into(), "mirror.corp:5000/hub".into()),
            ]),
            ca_cert: None,
            insecure_skip_verify: false,
            authenticate: true,
        };
        let files = mirror_files(&m, "dev");
        let logins: Vec<&Value> = files
            .iter()
            .filter(|f| f.get("contentFrom").is_some())
            .collect();
        assert_eq!(logins.len(), 2);
        for (f, key) in logins.iter().zip(["username", "password"]) {
            assert_eq!(
                f["contentFrom"]["secret"]["name"],
                "dev-registry-credentials"
            );
            assert_eq!(f["contentFrom"]["secret"]["key"], key);
            assert_eq!(f["permissions"], "0600");
            assert!(f.get("content").is_none());
        }
        let root =
            std::env::temp_dir().join(format!("capstan-mirror-login-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let at = |p: &str| root.join(p.trim_start_matches('/'));
        for f in &files {
            let path = at(f["path"].as_str().unwrap());
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            let content = match f["contentFrom"]["secret"]["key"].as_str() {
                Some("username") => "robot\n",
                Some(_) => "s3cr%t\"pw",
                None => f["content"].as_str().unwrap(),
            };
            std::fs::write(path, content).unwrap();
        }
        let cmd = mirror_login_command(&m)
            .unwrap()
            .replace("/etc/", &format!("{}/etc/", root.display()));
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(&cmd)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!at(MIRROR_LOGIN_DIR).exists(), "the login is removed");
        // base64("robot:s3cr%t\"pw")
        let header = "authorization = \"Basic cm9ib3Q6czNjciV0InB3\"\n";
        for (server, endpoint) in [
            ("mirror.corp:5000", "mirror.corp:5000/v2"),
            ("public.ecr.aws", "mirror.corp:5000/v2/ecr"),
            ("docker.io", "mirror.corp:5000/v2/hub"),
        ] {
            let hosts = std::fs::read_to_string(at(&format!(
                "/etc/containerd/certs.d/{server}/hosts.toml"
            )))
            .unwrap();
            assert!(
                hosts.ends_with(&format!(
                    "  override_path = true\n  [host.\"https://{endpoint}\".header]\n    {header}"
                )),
                "{hosts}"
            );
        }
        std::fs::remove_dir_all(&root).unwrap();
        // Without authenticate: no login files, no command.
        let plain = RegistryMirror {
            authenticate: false,
            ..m
        };
        assert!(
            mirror_files(&plain, "dev")
                .iter()
                .all(|f| f.get("contentFrom").is_none())
        );
        assert!(mirror_login_command(&plain).is_none());
    }
}
