//! Curated packages: EKS Anywhere's package controller on a management cluster, as a
//! HelmChartProxy of the release bundle's chart.
//!
//! EKS Anywhere's CLI installs the controller with `helm upgrade --install` of the bundle's
//! `packageController.helmChart` into the cluster's `eksa-packages` namespace. It passes
//! `--set` values (the registries packages come from, the cluster's name, its proxy) and a
//! values file (the spec's `packages.controller` and `packages.cronjob`, and the registry
//! mirror and AWS Secrets the chart creates, base64 encoded). capstan hands the same chart, the
//! same version and the same values, merged as Helm merges them, to the Cluster API add-on
//! provider for Helm, which installs it into the cluster through Cluster API's kubeconfig: for a
//! self-managed cluster, into itself. Kept against drift and upgraded with the release, like
//! Cilium.
//!
//! What EKS Anywhere takes from the CLI's environment is not rendered: AWS credentials for the
//! regional ECR registry (capstan never writes a credential into an object). Without them EKS
//! Anywhere falls back to the public registry and suspends the ECR token refresher, and so does
//! this render. The admin gives the controller credentials the way EKS Anywhere documents for a
//! running cluster, in the `aws-secret` Secret of `eksa-packages`.
//!
//! Only management clusters (`spec::validate::packages` says why), and only when the spec has a
//! `packages` section that does not disable them: EKS Anywhere's CLI installs the controller
//! unless disabled, capstan only when asked.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value, json};

use super::RenderError;
use crate::release::VersionsBundle;
use crate::spec::{Cluster, raw};

/// The namespace the controller is installed in.
pub const NAMESPACE: &str = "eksa-packages";

/// EKS Anywhere's public registry alias of curated packages, and its staging and development
/// aliases (a chart from those takes its packages from there too).
const PUBLIC_ALIASES: [(&str, &str); 3] = [
    ("w9m0f3l5", "staging"),
    ("x3k6m8v0", "development"),
    ("eks-anywhere", "production"),
];
/// The registry of the packages' images when no regional registry is reachable.
const NON_REGIONAL_IMAGES: &str = "783794618700.dkr.ecr.us-west-2.amazonaws.com";
/// The regional registry of the development and staging aliases.
const DEV_REGIONAL_IMAGES: &str = "067575901363.dkr.ecr.us-west-2.amazonaws.com";
const STAGING_REGIONAL_IMAGES: &str = "724423470321.dkr.ecr.us-west-2.amazonaws.com";
/// EKS Anywhere's default region of the packages' registries.
const DEFAULT_REGION: &str = "us-west-2";

/// The regional private registries of curated packages' images, by region (EKS Anywhere's
/// published registry accounts): a registry mirror that mirrors one of them serves the images.
const REGIONAL_IMAGES: &[&str] = &[
    "783635962247.dkr.ecr.af-south-1.amazonaws.com",
    "804323328300.dkr.ecr.ap-east-1.amazonaws.com",
    "143143237519.dkr.ecr.ap-northeast-1.amazonaws.com",
    "447311122189.dkr.ecr.ap-northeast-2.amazonaws.com",
    "376465423944.dkr.ecr.ap-northeast-3.amazonaws.com",
    "357015164304.dkr.ecr.ap-south-1.amazonaws.com",
    "388483641499.dkr.ecr.ap-south-2.amazonaws.com",
    "654894141437.dkr.ecr.ap-southeast-1.amazonaws.com",
    "299286866837.dkr.ecr.ap-southeast-2.amazonaws.com",
    "703305448174.dkr.ecr.ap-southeast-3.amazonaws.com",
    "106475008004.dkr.ecr.ap-southeast-4.amazonaws.com",
    "396913739932.dkr.ecr.ap-southeast-5.amazonaws.com",
    "141666480881.dkr.ecr.ap-southeast-7.amazonaws.com",
    "064352486547.dkr.ecr.ca-central-1.amazonaws.com",
    "571600859530.dkr.ecr.ca-west-1.amazonaws.com",
    "364992945014.dkr.ecr.eu-central-1.amazonaws.com",
    "551422459769.dkr.ecr.eu-central-2.amazonaws.com",
    "826441621985.dkr.ecr.eu-north-1.amazonaws.com",
    "787863792200.dkr.ecr.eu-south-1.amazonaws.com",
    "127214161500.dkr.ecr.eu-south-2.amazonaws.com",
    "090204409458.dkr.ecr.eu-west-1.amazonaws.com",
    "371148654473.dkr.ecr.eu-west-2.amazonaws.com",
    "282646289008.dkr.ecr.eu-west-3.amazonaws.com",
    "131750224677.dkr.ecr.il-central-1.amazonaws.com",
    "454241080883.dkr.ecr.me-central-1.amazonaws.com",
    "158698011868.dkr.ecr.me-south-1.amazonaws.com",
    "295916874491.dkr.ecr.mx-central-1.amazonaws.com",
    "517745584577.dkr.ecr.sa-east-1.amazonaws.com",
    "331113665574.dkr.ecr.us-east-1.amazonaws.com",
    "297090588151.dkr.ecr.us-east-2.amazonaws.com",
    "440460740297.dkr.ecr.us-west-1.amazonaws.com",
    "346438352937.dkr.ecr.us-west-2.amazonaws.com",
    DEV_REGIONAL_IMAGES,
    STAGING_REGIONAL_IMAGES,
];

/// The HelmChartProxy's settings for the templates (`packages` of the render context), or Null
/// when the cluster has no package controller.
pub fn context(cluster: &Cluster, bundle: &VersionsBundle) -> Result<Value, RenderError> {
    let Some(p) = &cluster.packages else {
        return Ok(Value::Null);
    };
    let chart = bundle
        .package_chart
        .as_ref()
        .ok_or_else(|| RenderError::Output {
            template: "packages".into(),
            message: format!(
                "curated packages need the package controller's chart, which the release's Kubernetes {} bundle does not name (packageController.helmChart)",
                bundle.kube_version
            ),
        })?;
    let (reference, version) = chart.uri.rsplit_once(':').unwrap_or((&chart.uri, ""));
    let reference = mirrored(cluster, reference);
    let (repo, chart_name) = reference.rsplit_once('/').unwrap_or(("", &reference));
    let values = values(cluster, p, reference.as_str());
    Ok(json!({
        "repo_url": format!("oci://{repo}"),
        "chart": chart_name,
        "version": version,
        "release": chart.name,
        "namespace": NAMESPACE,
        "values": go_literal(&crate::yaml::to_string(&values)),
    }))
}

/// `reference` with its registry replaced by the mirror's namespace for it, as EKS Anywhere
/// pulls the chart.
fn mirrored(cluster: &Cluster, reference: &str) -> String {
    let Some(m) = &cluster.registry_mirror else {
        return reference.to_string();
    };
    let (host, rest) = reference.split_once('/').unwrap_or((reference, ""));
    match m.namespaces.get(host) {
        Some(to) if rest.is_empty() => to.clone(),
        Some(to) => format!("{to}/{rest}"),
        None => reference.to_string(),
    }
}

/// The values Helm gets: the values file, then the `--set` values over it.
fn values(cluster: &Cluster, p: &raw::PackageConfiguration, chart: &str) -> Value {
    let mut v = Map::new();
    if let Some(c) = &p.controller {
        let mut controller = Map::new();
        put(&mut controller, "digest", &c.digest);
        controller.insert("enableWebhooks".into(), json!(!c.disable_webhooks));
        put(&mut controller, "repository", &c.repository);
        put(&mut controller, "tag", &c.tag);
        let mut resources = Map::new();
        for (key, r) in [
            ("limits", &c.resources.limits),
            ("requests", &c.resources.requests),
        ] {
            let mut m = Map::new();
            put(&mut m, "cpu", &r.cpu);
            put(&mut m, "memory", &r.memory);
            if !m.is_empty() {
                resources.insert(key.into(), Value::Object(m));
            }
        }
        if !resources.is_empty() {
            controller.insert("resources".into(), Value::Object(resources));
        }
        if !c.env.is_empty() {
            let env: Vec<Value> = c
                .env
                .iter()
                .filter_map(|kv| kv.split_once('='))
                .map(|(name, value)| json!({"name": name, "value": value}))
                .collect();
            controller.insert("env".into(), Value::Array(env));
        }
        v.insert("controller".into(), Value::Object(controller));
    }
    if let Some(c) = &p.cronjob {
        let mut cron = Map::new();
        put(&mut cron, "digest", &c.digest);
        put(&mut cron, "repository", &c.repository);
        cron.insert("suspend".into(), json!(c.disable));
        put(&mut cron, "tag", &c.tag);
        v.insert("cronjob".into(), Value::Object(cron));
    }
    let b64 = |s: &str| STANDARD.encode(s);
    let mirror = cluster.registry_mirror.as_ref();
    v.insert(
        "registryMirrorSecret".into(),
        json!({
            "endpoint": b64(mirror.map(|m| m.base.as_str()).unwrap_or("")),
            // EKS Anywhere's placeholders when the mirror needs no login (an authenticated
            // mirror is refused with packages).
            "username": b64("username"),
            "password": b64("password"),
            "cacertcontent": b64(mirror.and_then(|m| m.ca_cert.as_deref()).unwrap_or("")),
            "insecure": b64(if mirror.is_some_and(|m| m.insecure_skip_verify) { "true" } else { "false" }),
        }),
    );
    v.insert(
        "awsSecret".into(),
        json!({"id": "", "secret": "", "region": b64(DEFAULT_REGION), "config": ""}),
    );

    // The --set values.
    let (source, default, images) = registries(cluster, chart);
    v.insert("sourceRegistry".into(), json!(source));
    v.insert("defaultRegistry".into(), json!(default));
    v.insert("defaultImageRegistry".into(), json!(images));
    v.insert("clusterName".into(), json!(cluster.name));
    if let Some(proxy) = &cluster.proxy {
        let mut no_proxy = vec![
            cluster.network.pods.to_string(),
            cluster.network.services.to_string(),
        ];
        no_proxy.extend(proxy.no_proxy.iter().cloned());
        no_proxy.extend(cluster.control_plane.endpoint_host.iter().cloned());
        v.insert(
            "proxy".into(),
            json!({"HTTP_PROXY": proxy.http, "HTTPS_PROXY": proxy.https, "NO_PROXY": no_proxy.join(",")}),
        );
    }
    if mirror.is_none() {
        // No AWS credentials: the ECR token refresher has nothing to refresh.
        match v.get_mut("cronjob") {
            Some(Value::Object(cron)) => {
                cron.insert("suspend".into(), json!(true));
            }
            _ => {
                v.insert("cronjob".into(), json!({"suspend": true}));
            }
        }
    }
    Value::Object(v)
}

/// Where packages come from (`sourceRegistry`), where their bundles are (`defaultRegistry`) and
/// where their images are (`defaultImageRegistry`), as EKS Anywhere decides without AWS
/// credentials.
fn registries(cluster: &Cluster, chart: &str) -> (String, String, String) {
    let (alias, kind) = PUBLIC_ALIASES
        .iter()
        .find(|(a, _)| chart.contains(a))
        .copied()
        .unwrap_or(PUBLIC_ALIASES[2]);
    let mut images = match kind {
        "production" => NON_REGIONAL_IMAGES,
        _ => DEV_REGIONAL_IMAGES,
    }
    .to_string();
    let Some(m) = &cluster.registry_mirror else {
        let source = format!("public.ecr.aws/{alias}");
        return (source.clone(), source, images);
    };
    let core = m
        .namespaces
        .get("public.ecr.aws")
        .cloned()
        .unwrap_or_default();
    let source = format!("{core}/{alias}");
    let mut default = source.clone();
    if let Some(to) = m
        .namespaces
        .iter()
        .find(|(registry, _)| non_regional(registry))
        .map(|(_, to)| to)
    {
        images = to.clone();
    }
    if let Some(to) = REGIONAL_IMAGES
        .iter()
        .find_map(|r| m.namespaces.get(*r).filter(|to| !to.is_empty()))
    {
        default = to.clone();
        images = to.clone();
    }
    (source, default, images)
}

/// Whether `registry` holds the non-regional account's registry (`783794618700.dkr.ecr.*.
/// amazonaws.com`, anywhere in the name, as EKS Anywhere matches it).
fn non_regional(registry: &str) -> bool {
    registry
        .match_indices("783794618700.dkr.ecr.")
        .any(|(i, m)| registry[i + m.len()..].find(".amazonaws.com").is_some())
}

fn put(m: &mut Map<String, Value>, key: &str, value: &str) {
    if !value.is_empty() {
        m.insert(key.into(), json!(value));
    }
}

/// `text` as a Go template that prints it unchanged: the add-on provider runs a HelmChartProxy's
/// values through Go's text/template, so every `{{` is written as an action printing it.
fn go_literal(text: &str) -> String {
    text.replace("{{", "{{\"{{\"}}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_values_text_with_braces_prints_itself() {
        assert_eq!(go_literal("a: \"{{x}}\"\n"), "a: \"{{\"{{\"}}x}}\"\n");
        assert_eq!(go_literal("plain: 1\n"), "plain: 1\n");
    }

    #[test]
    fn the_non_regional_registry_is_matched_as_eks_anywhere_matches_it() {
        assert!(non_regional("783794618700.dkr.ecr.us-west-2.amazonaws.com"));
        assert!(non_regional("783794618700.dkr.ecr.eu-west-1.amazonaws.com"));
        // `.*` matches nothing too.
        assert!(non_regional("783794618700.dkr.ecr..amazonaws.com"));
        assert!(!non_regional(
            "346438352937.dkr.ecr.us-west-2.amazonaws.com"
        ));
        assert!(!non_regional("public.ecr.aws"));
    }
}
