//! A fleet that names the published EKS Anywhere release manifest in its fleet config
//! (`clusters/<mgmt>/fleet.yaml`): the agent fetches the manifest, the Bundles of the release the
//! fleet uses and their EKS-D releases over https (a local server with a private CA, serving
//! documents in EKS-A's published shape: absolute URLs, fields capstan does not read), checks
//! the pinned checksum, caches them, and renders with the fetched Bundles.

use std::collections::HashMap;
use std::path::Path;
use std::process::Output;

use capstan_harness::certs::Pki;
use capstan_templates::release::sha256_hex;

use crate::source_support::http::HttpGitServer;
use capstan_harness::run::{self, files_under, output_text};

/// The capstan binary with `args`, `env` set and no $CAPSTAN_CA_FILE of the user's.
fn capstan_with_ca_env(args: &[&str], env: &[(&str, &Path)]) -> Output {
    let mut c = run::capstan(args);
    c.env_remove("CAPSTAN_CA_FILE");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("running capstan")
}

/// The sample release data rewritten as EKS-A publishes it: one manifest at
/// /releases/eks-a/manifest.yaml, Bundles at /releases/bundles/104/manifest.yaml, EKS-D releases
/// at /kubernetes-1-NN/<name>.yaml, every reference an absolute URL, and a kind node image of a
/// registry the sample data does not use.
fn published(base: &str) -> HashMap<String, Vec<u8>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../templates/release");
    let read = |p: &str| std::fs::read_to_string(root.join(p)).unwrap();
    let mut out = HashMap::new();
    let mut bundles = read("bundles-104.yaml").replace(
        "public.ecr.aws/eks-anywhere/kubernetes-sigs/kind/node",
        "registry.example.com/published/kind/node",
    );
    for e in std::fs::read_dir(root.join("eks-distro")).unwrap() {
        let name = e.unwrap().file_name().into_string().unwrap();
        let channel = name
            .trim_start_matches("kubernetes-")
            .split("-eks-")
            .next()
            .unwrap()
            .to_string();
        let url_path = format!("/kubernetes-{channel}/{name}");
        bundles = bundles.replace(
            &format!("manifestUrl: eks-distro/{name}"),
            &format!("manifestUrl: {base}{url_path}"),
        );
        out.insert(url_path, read(&format!("eks-distro/{name}")).into_bytes());
    }
    // Fields of the published shape capstan does not read are ignored.
    bundles = bundles.replace(
        "    eksa:\n",
        "    flux:\n      version: v2.6.4\n    eksa:\n      version: v0.26.1\n",
    );
    out.insert(
        "/releases/bundles/104/manifest.yaml".into(),
        bundles.into_bytes(),
    );
    let manifest = format!(
        "apiVersion: anywhere.eks.amazonaws.com/v1alpha1\nkind: Release\nmetadata:\n  name: eks-anywhere\nspec:\n  latestVersion: v0.26.1\n  releases:\n  - version: v0.26.1\n    number: 104\n    date: \"2026-08-13\"\n    gitCommit: af33358d7ef25452d16cd640b836175cd8577f81\n    gitTag: v0.26.1\n    bundleManifestUrl: {base}/releases/bundles/104/manifest.yaml\n    eksACLI:\n      linux:\n        amd64:\n          uri: {base}/releases/eks-a/104/artifacts/eks-a/v0.26.1/linux/amd64/eksctl-anywhere.tar.gz\n"
    );
    out.insert(
        "/releases/eks-a/manifest.yaml".into(),
        manifest.into_bytes(),
    );
    out
}

/// Writes a one-cluster fleet into `repo` whose release manifest is `manifest_url` with digest `sha`.
fn write_release_fleet(repo: &Path, manifest_url: &str, sha: &str) {
    let dir = repo.join("clusters/mgmt");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("cluster.yaml"),
        "apiVersion: anywhere.eks.amazonaws.com/v1alpha1\nkind: Cluster\nmetadata:\n  name: mgmt\nspec:\n  kubernetesVersion: \"1.33\"\n  eksaVersion: v0.26.1\n  controlPlaneConfiguration:\n    count: 1\n  workerNodeGroupConfigurations:\n  - name: md-0\n    count: 1\n  datacenterRef:\n    kind: DockerDatacenterConfig\n    name: mgmt\n  clusterNetwork:\n    cniConfig:\n      cilium: {}\n    pods:\n      cidrBlocks: [192.168.0.0/16]\n    services:\n      cidrBlocks: [10.96.0.0/12]\n---\napiVersion: anywhere.eks.amazonaws.com/v1alpha1\nkind: DockerDatacenterConfig\nmetadata:\n  name: mgmt\nspec: {}\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("fleet.yaml"),
        format!("apiVersion: capstan.dev/v1alpha1\nkind: FleetConfig\nspec:\n  release:\n    manifest: {manifest_url}\n    sha256: {sha}\n"),
    )
    .unwrap();
}

#[test]
fn a_fleet_renders_with_the_published_release_manifest_it_pins() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::generate().unwrap();
    let ca = tmp.path().join("ca.pem");
    std::fs::write(&ca, &pki.serving_ca_pem).unwrap();
    let server = HttpGitServer::start_static_tls(
        HashMap::new(),
        &pki.serving_cert_pem,
        &pki.serving_key_pem,
    );
    let base = server.url("").trim_end_matches('/').to_string();
    for (path, body) in published(&base) {
        server.set_file(&path, &body);
    }
    let manifest_url = format!("{base}/releases/eks-a/manifest.yaml");
    let manifest = published(&base)["/releases/eks-a/manifest.yaml"].clone();
    let repo = tmp.path().join("repo");
    let cache = tmp.path().join("cache");
    write_release_fleet(&repo, &manifest_url, &sha256_hex(&manifest));
    let env = [
        ("CAPSTAN_CA_FILE", ca.as_path()),
        ("CAPSTAN_CACHE_DIR", cache.as_path()),
    ];
    let repo_s = repo.to_str().unwrap();

    // Validated and rendered with the fetched Bundles.
    let out = capstan_with_ca_env(&["validate", repo_s, "--output", "json"], &env);
    assert!(out.status.success(), "{}", output_text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["clusters"][0]["eksaVersion"], "v0.26.1");
    let rendered = tmp.path().join("rendered");
    let out = capstan_with_ca_env(
        &["render", repo_s, "--output-dir", rendered.to_str().unwrap()],
        &env,
    );
    assert!(out.status.success(), "{}", output_text(&out));
    let mut all = String::new();
    for e in files_under(&rendered, &[]) {
        all.push_str(&std::fs::read_to_string(e).unwrap());
    }
    assert!(
        all.contains("registry.example.com/published/kind/node:v1.33.5"),
        "the render uses the fetched Bundles' images"
    );
    assert!(!all.contains("public.ecr.aws/eks-anywhere/kubernetes-sigs/kind/node"));
    assert!(
        all.contains(&format!(
            "bundleManifestUrl: {base}/releases/bundles/104/manifest.yaml"
        )),
        "the EKSARelease names the published Bundles"
    );
    // The manifest, the Bundles and the seven EKS-D releases, each fetched once (the render
    // above read them from the cache).
    let fetched: Vec<String> = server.log().into_iter().map(|l| l.path).collect();
    assert_eq!(fetched.len(), 9, "{fetched:#?}");
    assert_eq!(
        fetched
            .iter()
            .collect::<std::collections::BTreeSet<_>>()
            .len(),
        9
    );

    // A pin that does not match what the URL holds: nothing renders, the error says why.
    write_release_fleet(&repo, &manifest_url, &sha256_hex(b"something else"));
    let out = capstan_with_ca_env(&["validate", repo_s], &env);
    assert_eq!(out.status.code(), Some(1), "{}", output_text(&out));
    assert!(
        output_text(&out).contains("clusters/mgmt/fleet.yaml:4:3: error[checksum-mismatch]"),
        "{}",
        output_text(&out)
    );

    // The server goes away: with the right pin again, the cached documents serve.
    write_release_fleet(&repo, &manifest_url, &sha256_hex(&manifest));
    let requests = server.log().len();
    drop(server);
    let out = capstan_with_ca_env(&["validate", repo_s], &env);
    assert!(out.status.success(), "{}", output_text(&out));
    assert!(requests >= 10, "the mismatched manifest was fetched again");
}

#[test]
fn a_server_signed_by_an_untrusted_ca_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::generate().unwrap();
    let server = HttpGitServer::start_static_tls(
        HashMap::new(),
        &pki.serving_cert_pem,
        &pki.serving_key_pem,
    );
    let base = server.url("").trim_end_matches('/').to_string();
    let docs = published(&base);
    for (path, body) in &docs {
        server.set_file(path, body);
    }
    let repo = tmp.path().join("repo");
    let cache = tmp.path().join("cache");
    write_release_fleet(
        &repo,
        &format!("{base}/releases/eks-a/manifest.yaml"),
        &sha256_hex(&docs["/releases/eks-a/manifest.yaml"]),
    );
    let out = capstan_with_ca_env(
        &["validate", repo.to_str().unwrap()],
        &[("CAPSTAN_CACHE_DIR", cache.as_path())],
    );
    assert_eq!(out.status.code(), Some(1), "{}", output_text(&out));
    let t = output_text(&out);
    assert!(
        t.contains("error[release-unavailable]") && t.contains("could not be fetched"),
        "{t}"
    );
    assert!(
        server.log().is_empty(),
        "no request got through the TLS handshake"
    );
}
