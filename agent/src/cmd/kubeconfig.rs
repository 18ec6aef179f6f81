//! `capstan kubeconfig CLUSTER`: a workload cluster's kubeconfig, as `clusterctl get
//! kubeconfig` gives it: the Secret Cluster API writes for it (`<cluster>-kubeconfig`, key
//! `value`, in the Cluster's namespace), read with the user's own credentials. Printed, or with
//! `--merge` added to the user's kubeconfig file as a context with a cluster and a user of its
//! own.
//!
//! Only Cluster API's Secret is read (its type and its cluster-name label), and a kubeconfig is
//! merged only as Cluster API writes it: inline certificates and keys or a token, never an exec
//! plugin, an auth provider or a file path (the rule the agent applies before it connects to a
//! workload cluster, [`crate::reconcile::addons::refused`]): anyone who can write Secrets in
//! that namespace must not get to run commands through the user's kubectl.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, anyhow, bail};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject, ListParams};
use kube::config::{Context as KubeContext, Kubeconfig, NamedAuthInfo, NamedCluster, NamedContext};
use kube::discovery::ApiResource;

use crate::cli::KubeconfigArgs;

/// The type of the Secrets Cluster API writes.
const SECRET_TYPE: &str = "cluster.x-k8s.io/secret";
/// The label naming the cluster a Cluster API Secret is for.
const CLUSTER_LABEL: &str = "cluster.x-k8s.io/cluster-name";

/// `capstan kubeconfig`.
pub fn run(args: KubeconfigArgs) -> anyhow::Result<ExitCode> {
    if !is_name(&args.cluster) {
        bail!("`{}` is not a Cluster API Cluster's name", args.cluster);
    }
    let read = super::runtime()?.block_on(read(&args))?;
    if !args.merge && read.aws_iam_id.is_none() {
        let mut out = std::io::stdout().lock();
        out.write_all(&read.value)?;
        out.flush()?;
        return Ok(ExitCode::SUCCESS);
    }
    let source = format!("Secret {}/{}", read.namespace, read.secret);
    let text = std::str::from_utf8(&read.value)
        .map_err(|_| anyhow!("{source}: the kubeconfig is not UTF-8"))?;
    let mut theirs =
        Kubeconfig::from_yaml(text).with_context(|| format!("{source}: not a kubeconfig"))?;
    if let Some(why) = crate::reconcile::addons::refused(&theirs) {
        let not = if args.merge { "merged" } else { "used" };
        bail!(
            "{source}: its kubeconfig's {why}, which Cluster API does not write: not {not} (without --merge or --aws-iam it is printed)"
        );
    }
    let mut user_suffix = "admin";
    if let Some(id) = &read.aws_iam_id {
        theirs =
            aws_iam_kubeconfig(&theirs, &args.cluster, id).map_err(|e| anyhow!("{source}: {e}"))?;
        user_suffix = "aws";
        if !args.merge {
            let yaml = capstan_templates::yaml::to_string(&serde_json::to_value(&theirs)?);
            print!("{yaml}");
            return Ok(ExitCode::SUCCESS);
        }
    }
    let path = target(args.kube.kubeconfig.as_deref())?;
    let name = args.context_name.as_deref().unwrap_or(&args.cluster);
    let mut mine = read_target(&path)?;
    let replaced = merge(&mut mine, &theirs, name, user_suffix, args.use_context)
        .map_err(|e| anyhow!("merging {source} into {}: {e}", path.display()))?;
    let yaml = capstan_templates::yaml::to_string(&serde_json::to_value(&mine)?);
    write_private(&path, &yaml).with_context(|| format!("writing {}", path.display()))?;
    println!(
        "context `{name}` {} {}{}",
        if replaced { "replaced in" } else { "added to" },
        path.display(),
        if args.use_context {
            " (now the current context)"
        } else {
            ""
        }
    );
    Ok(ExitCode::SUCCESS)
}

/// What was read: where, the kubeconfig's bytes as the Secret holds them, and with --aws-iam the
/// cluster's AWS IAM authenticator ID.
struct Read {
    namespace: String,
    secret: String,
    value: Vec<u8>,
    aws_iam_id: Option<String>,
}

async fn read(args: &KubeconfigArgs) -> anyhow::Result<Read> {
    let conn = crate::k8s::connect(
        args.kube.kubeconfig.as_deref(),
        args.kube.context.as_deref(),
    )
    .await?;
    let cluster = &args.cluster;
    let namespace = match &args.namespace {
        Some(ns) => ns.clone(),
        None => namespace_of(&conn.client, cluster).await?,
    };
    let name = format!("{cluster}-kubeconfig");
    let secret = Api::<Secret>::namespaced(conn.client.clone(), &namespace)
        .get_opt(&name)
        .await
        .with_context(|| format!("reading Secret {namespace}/{name}"))?;
    let Some(secret) = secret else {
        let hint = if args.namespace.is_some() {
            format!("is Cluster API Cluster `{cluster}` in namespace {namespace}? ")
        } else {
            String::new()
        };
        bail!(
            "no Secret {namespace}/{name} ({hint}Cluster API writes it as it creates the cluster's control plane)"
        );
    };
    let type_ = secret.type_.as_deref().unwrap_or("Opaque");
    if type_ != SECRET_TYPE {
        bail!(
            "Secret {namespace}/{name} is not Cluster API's: its type is {type_}, not {SECRET_TYPE}; refused"
        );
    }
    let labelled = secret
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(CLUSTER_LABEL))
        == Some(cluster);
    if !labelled {
        bail!(
            "Secret {namespace}/{name} is not Cluster API's kubeconfig of cluster `{cluster}`: it is not labelled {CLUSTER_LABEL}: {cluster}; refused"
        );
    }
    let value = secret
        .data
        .and_then(|mut d| d.remove("value"))
        .ok_or_else(|| anyhow!("Secret {namespace}/{name} has no key `value`"))?;
    let aws_iam_id = if args.aws_iam {
        Some(aws_iam_id(&conn.client, &namespace, cluster).await?)
    } else {
        None
    };
    Ok(Read {
        namespace,
        secret: name,
        value: value.0,
        aws_iam_id,
    })
}

/// The AWS IAM authenticator's cluster ID of `cluster`, derived as capstan renders it from the
/// EKS Anywhere Cluster on the management cluster (its management cluster, namespace and name);
/// refused when that Cluster names no AWSIamConfig.
async fn aws_iam_id(
    client: &kube::Client,
    namespace: &str,
    cluster: &str,
) -> anyhow::Result<String> {
    let eksa = ApiResource {
        group: capstan_templates::spec::EKSA_GROUP.into(),
        version: "v1alpha1".into(),
        api_version: capstan_templates::spec::EKSA_API_VERSION.into(),
        kind: "Cluster".into(),
        plural: "clusters".into(),
    };
    let what = format!("EKS Anywhere Cluster {namespace}/{cluster}");
    let c = Api::<DynamicObject>::namespaced_with(client.clone(), namespace, &eksa)
        .get_opt(cluster)
        .await
        .with_context(|| format!("reading {what}"))?
        .ok_or_else(|| anyhow!("no {what}: --aws-iam is for clusters capstan applies"))?;
    let spec = &c.data["spec"];
    let with_iam = spec["identityProviderRefs"]
        .as_array()
        .is_some_and(|refs| refs.iter().any(|r| r["kind"] == "AWSIamConfig"));
    if !with_iam {
        bail!(
            "{what} names no AWSIamConfig in identityProviderRefs: its API server does not ask the AWS IAM authenticator"
        );
    }
    let management = spec["managementCluster"]["name"]
        .as_str()
        .filter(|m| !m.is_empty())
        .ok_or_else(|| anyhow!("{what} has no spec.managementCluster.name"))?;
    Ok(capstan_templates::render::authenticator::cluster_id(
        management, namespace, cluster,
    ))
}

/// The kubeconfig EKS Anywhere writes for an AWS IAM authenticator's users
/// (`<cluster>-aws.kubeconfig`): `theirs`' cluster entry (server, CA) as cluster `cluster`, and
/// context and user `<cluster>-aws`, the user running `aws-iam-authenticator token -i <id>`.
fn aws_iam_kubeconfig(theirs: &Kubeconfig, cluster: &str, id: &str) -> Result<Kubeconfig, String> {
    let (_, entry, _) = current(theirs)?;
    let entry = serde_json::to_value(&entry.cluster).map_err(|e| e.to_string())?;
    let user = format!("{cluster}-aws");
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "clusters": [{"name": cluster, "cluster": entry}],
        "contexts": [{"name": user, "context": {"cluster": cluster, "user": user}}],
        "current-context": user,
        "users": [{"name": user, "user": {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": "aws-iam-authenticator",
            "args": ["token", "-i", id],
        }}}],
    }))
    .map_err(|e| e.to_string())
}

/// `theirs`' current context (its current one, else its only one) with its cluster entry and
/// user entry.
type Current<'a> = (&'a KubeContext, &'a NamedCluster, Option<&'a NamedAuthInfo>);

fn current(theirs: &Kubeconfig) -> Result<Current<'_>, String> {
    let chosen = match &theirs.current_context {
        Some(current) => theirs.contexts.iter().find(|c| &c.name == current),
        None if theirs.contexts.len() == 1 => theirs.contexts.first(),
        None => None,
    };
    let Some(ctx) = chosen.and_then(|c| c.context.as_ref()) else {
        return Err(format!(
            "it has no current context (and {} contexts)",
            theirs.contexts.len()
        ));
    };
    let cluster = theirs
        .clusters
        .iter()
        .find(|c| c.name == ctx.cluster)
        .ok_or_else(|| format!("its context names cluster `{}`, not in it", ctx.cluster))?;
    let user = match &ctx.user {
        Some(u) => Some(
            theirs
                .auth_infos
                .iter()
                .find(|a| &a.name == u)
                .ok_or_else(|| format!("its context names user `{u}`, not in it"))?,
        ),
        None => None,
    };
    Ok((ctx, cluster, user))
}

/// The namespace of the only Cluster API Cluster named `cluster`.
async fn namespace_of(client: &kube::Client, cluster: &str) -> anyhow::Result<String> {
    let clusters = ApiResource {
        group: "cluster.x-k8s.io".into(),
        version: "v1beta2".into(),
        api_version: "cluster.x-k8s.io/v1beta2".into(),
        kind: "Cluster".into(),
        plural: "clusters".into(),
    };
    let listed = Api::<DynamicObject>::all_with(client.clone(), &clusters)
        .list_metadata(&ListParams::default().fields(&format!("metadata.name={cluster}")))
        .await
        .with_context(|| {
            format!("looking for Cluster API Cluster `{cluster}` in every namespace (or pass --namespace)")
        })?;
    let mut namespaces: Vec<String> = listed
        .items
        .into_iter()
        .filter_map(|c| c.metadata.namespace)
        .collect();
    namespaces.sort();
    match namespaces.as_slice() {
        [ns] => Ok(ns.clone()),
        [] => bail!("no Cluster API Cluster named `{cluster}`; pass --namespace"),
        several => bail!(
            "Cluster API Clusters named `{cluster}` in namespaces {}; pass --namespace",
            several.join(", ")
        ),
    }
}

/// A DNS subdomain, as Kubernetes names objects (and safe in a field selector).
fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// The kubeconfig file `--merge` writes: `--kubeconfig`, else the first file of `$KUBECONFIG`
/// (where kubectl writes new entries), else `~/.kube/config`.
fn target(flag: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(p) = flag {
        return Ok(p.to_path_buf());
    }
    if let Some(v) = std::env::var_os("KUBECONFIG")
        && let Some(first) = std::env::split_paths(&v).find(|p| !p.as_os_str().is_empty())
    {
        return Ok(first);
    }
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(|h| PathBuf::from(h).join(".kube/config"))
        .ok_or_else(|| {
            anyhow!(
                "no kubeconfig file to merge into (no $KUBECONFIG, no $HOME): pass --kubeconfig"
            )
        })
}

/// The file as it is (relative paths in it left as written), or a new kubeconfig when there is
/// none.
fn read_target(path: &Path) -> anyhow::Result<Kubeconfig> {
    let mut kc = match fs::read_to_string(path) {
        Ok(text) => Kubeconfig::from_yaml(&text)
            .with_context(|| format!("kubeconfig {}", path.display()))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Kubeconfig::default(),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    kc.api_version.get_or_insert_with(|| "v1".into());
    kc.kind.get_or_insert_with(|| "Config".into());
    Ok(kc)
}

/// Adds `theirs`' context (its current one, else its only one) to `mine` as context `name`, with
/// its cluster as cluster `name` and its user as user `name-<user_suffix>`, each replacing an
/// entry of that name; makes it the current context when `make_current`. Whether the context was
/// there before. Refused when an entry it would replace is used by another context.
fn merge(
    mine: &mut Kubeconfig,
    theirs: &Kubeconfig,
    name: &str,
    user_suffix: &str,
    make_current: bool,
) -> Result<bool, String> {
    let (ctx, cluster, user) = current(theirs)?;
    let user_name = format!("{name}-{user_suffix}");
    for other in mine.contexts.iter().filter(|c| c.name != name) {
        let Some(c) = &other.context else { continue };
        if c.cluster == name {
            return Err(format!(
                "its cluster entry `{name}` is used by context `{}`; pass --context-name",
                other.name
            ));
        }
        if c.user.as_deref() == Some(user_name.as_str()) {
            return Err(format!(
                "its user entry `{user_name}` is used by context `{}`; pass --context-name",
                other.name
            ));
        }
    }
    upsert(
        &mut mine.clusters,
        NamedCluster {
            name: name.to_string(),
            ..cluster.clone()
        },
        |c| &c.name,
    );
    let user_entry = user.map(|u| {
        upsert(
            &mut mine.auth_infos,
            NamedAuthInfo {
                name: user_name.clone(),
                ..u.clone()
            },
            |a| &a.name,
        );
        user_name
    });
    let mut context = ctx.clone();
    context.cluster = name.to_string();
    context.user = user_entry;
    let replaced = upsert(
        &mut mine.contexts,
        NamedContext {
            name: name.to_string(),
            context: Some(context),
            other: Default::default(),
        },
        |c| &c.name,
    );
    if make_current {
        mine.current_context = Some(name.to_string());
    }
    Ok(replaced)
}

/// Replaces the entry of `item`'s name in place, or appends it. Whether it replaced one.
fn upsert<T>(entries: &mut Vec<T>, item: T, name: impl Fn(&T) -> &String) -> bool {
    match entries.iter().position(|e| name(e) == name(&item)) {
        Some(i) => {
            entries[i] = item;
            true
        }
        None => {
            entries.push(item);
            false
        }
    }
}

/// Writes `text` to `path` atomically (a temporary file beside it, renamed over it), readable by
/// the owner only. A symbolic link is followed, so the file it points to is the one replaced.
fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let path = match fs::canonicalize(path) {
        Ok(real) => real,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => path.to_path_buf(),
        Err(e) => return Err(e.into()),
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    fs::create_dir_all(dir)?;
    let mut tmp = tempfile::Builder::new()
        .prefix(".kubeconfig-")
        .tempfile_in(dir)?;
    tmp.as_file()
        .set_permissions(fs::Permissions::from_mode(0o600))?;
    tmp.write_all(text.as_bytes())?;
    tmp.as_file().sync_all()?;
    tmp.persist(&path).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAPI: &str = "apiVersion: v1
kind: Config
clusters:
- name: w
  cluster:
    server: https://10.0.0.1:6443
    certificate-authority-data: Q0E=
users:
- name: w-admin
  user:
    client-certificate-data: Q0VSVA==
    client-key-data: S0VZ
contexts:
- name: w-admin@w
  context:
    cluster: w
    user: w-admin
current-context: w-admin@w
";

    const MINE: &str = "apiVersion: v1
kind: Config
preferences: {}
clusters:
- name: mgmt
  cluster:
    server: https://10.0.0.9:6443
    certificate-authority: ca.crt
users:
- name: me
  user:
    token: abc
contexts:
- name: mgmt
  context:
    cluster: mgmt
    user: me
    namespace: eksa-system
current-context: mgmt
";

    fn round_trip(kc: &Kubeconfig) -> Kubeconfig {
        let yaml = capstan_templates::yaml::to_string(&serde_json::to_value(kc).unwrap());
        Kubeconfig::from_yaml(&yaml).unwrap()
    }

    #[test]
    fn merging_adds_a_context_of_its_own_and_keeps_the_rest() {
        let theirs = Kubeconfig::from_yaml(CAPI).unwrap();
        let mut mine = Kubeconfig::from_yaml(MINE).unwrap();
        assert!(!merge(&mut mine, &theirs, "w", "admin", false).unwrap());
        let kc = round_trip(&mine);
        assert_eq!(kc.current_context.as_deref(), Some("mgmt"));
        let names = |v: Vec<&String>| v.into_iter().cloned().collect::<Vec<_>>();
        assert_eq!(
            names(kc.contexts.iter().map(|c| &c.name).collect()),
            ["mgmt", "w"]
        );
        assert_eq!(
            names(kc.clusters.iter().map(|c| &c.name).collect()),
            ["mgmt", "w"]
        );
        assert_eq!(
            names(kc.auth_infos.iter().map(|c| &c.name).collect()),
            ["me", "w-admin"]
        );
        let w = kc.contexts[1].context.as_ref().unwrap();
        assert_eq!(
            (w.cluster.as_str(), w.user.as_deref()),
            ("w", Some("w-admin"))
        );
        assert_eq!(
            kc.clusters[1].cluster.as_ref().unwrap().server.as_deref(),
            Some("https://10.0.0.1:6443")
        );
        // The rest as it was: a relative CA path, the namespace, the token.
        let mgmt = kc.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(mgmt.certificate_authority.as_deref(), Some("ca.crt"));
        assert_eq!(
            kc.contexts[0]
                .context
                .as_ref()
                .unwrap()
                .namespace
                .as_deref(),
            Some("eksa-system")
        );
        assert!(kc.auth_infos[0].auth_info.as_ref().unwrap().token.is_some());
    }

    #[test]
    fn merging_again_replaces_and_use_makes_it_current() {
        let theirs = Kubeconfig::from_yaml(CAPI).unwrap();
        let mut mine = Kubeconfig::from_yaml(MINE).unwrap();
        merge(&mut mine, &theirs, "w", "admin", false).unwrap();
        assert!(merge(&mut mine, &theirs, "w", "admin", true).unwrap());
        assert_eq!(mine.contexts.len(), 2);
        assert_eq!(mine.clusters.len(), 2);
        assert_eq!(mine.auth_infos.len(), 2);
        assert_eq!(mine.current_context.as_deref(), Some("w"));
    }

    #[test]
    fn an_entry_another_context_uses_is_not_replaced() {
        let theirs = Kubeconfig::from_yaml(CAPI).unwrap();
        let mut mine = Kubeconfig::from_yaml(MINE).unwrap();
        let e = merge(&mut mine, &theirs, "mgmt-2", "admin", false);
        assert!(e.is_ok());
        let e = merge(&mut mine, &theirs, "me", "admin", false);
        assert!(e.is_ok(), "a user entry `me-admin` is free: {e:?}");
        let e = merge(&mut mine, &theirs, "mgmt", "admin", false);
        assert!(e.is_ok(), "context mgmt itself is replaced: {e:?}");
        let mut mine = Kubeconfig::from_yaml(MINE).unwrap();
        mine.contexts[0].name = "other".into();
        let e = merge(&mut mine, &theirs, "mgmt", "admin", false).unwrap_err();
        assert!(
            e.contains("cluster entry `mgmt` is used by context `other`"),
            "{e}"
        );
    }

    #[test]
    fn a_kubeconfig_without_a_current_context_of_several_is_refused() {
        let mut theirs = Kubeconfig::from_yaml(CAPI).unwrap();
        theirs.current_context = None;
        let mut two = theirs.contexts[0].clone();
        two.name = "again".into();
        theirs.contexts.push(two);
        let e = merge(&mut Kubeconfig::default(), &theirs, "w", "admin", false).unwrap_err();
        assert!(e.contains("no current context"), "{e}");
        theirs.contexts.pop();
        assert!(merge(&mut Kubeconfig::default(), &theirs, "w", "admin", false).is_ok());
    }

    #[test]
    fn names() {
        assert!(is_name("kc-w"));
        assert!(is_name("a.b-1"));
        assert!(!is_name(""));
        assert!(!is_name("W"));
        assert!(!is_name("a,metadata.namespace=x"));
        assert!(!is_name("-a"));
    }
}
