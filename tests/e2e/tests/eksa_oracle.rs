//! Differential test: capstan renders what EKS Anywhere renders.
//!
//! Every spec of `tests/e2e/oracle/` at every Kubernetes version of capstan's release data goes
//! to capstan's renderer and to EKS Anywhere's own code (the `eksa-oracle` program of
//! `tests/eksa-oracle`, EKS Anywhere v0.26.1 built from the Go module proxy and cached in
//! `~/.cache/capstan/eksa-oracle/`). Both get the same release data: the Bundles and EKS-D
//! release manifests of `templates/release/`. The Cluster API objects are compared semantically
//! (`capstan_e2e::oracle`); every remaining difference must be on the reviewed allow-list, and
//! every allow-list entry must still be needed.
//!
//! The first run builds the oracle (about 3 to 7 minutes with module downloads); build it
//! outside a network namespace first: `cargo test -p capstan-e2e --test eksa_oracle`.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

use capstan_e2e::oracle::{self, ALLOWED, Side};
use capstan_e2e::repo_root;
use capstan_templates::release::{Release, ReleaseManifest, Sample, SemVer};
use capstan_templates::spec::{SourceDoc, parse_cluster};
use capstan_templates::{render, yaml};
use serde_json::{Value, json};

struct Case {
    name: String,
    text: String,
    tags: Vec<String>,
    release: Arc<Release>,
}

fn corpus() -> Vec<Case> {
    let manifest = ReleaseManifest::embedded();
    let mut cases = Vec::new();
    for spec in oracle::corpus_specs() {
        let (stem, text, tags, lag) = (spec.name, spec.text, spec.tags, spec.worker_lag);
        for (minor, eksa) in oracle::VERSIONS {
            let release = manifest
                .release(&Sample, &SemVer::parse(eksa).unwrap())
                .unwrap();
            if release
                .versions_bundle(capstan_templates::KubeVersion {
                    major: 1,
                    minor: minor - lag,
                })
                .is_none()
            {
                continue;
            }
            cases.push(Case {
                name: format!("{stem}@1.{minor}"),
                text: oracle::with_versions(&text, *minor, lag, eksa),
                tags: tags.clone(),
                release: release.clone(),
            });
        }
    }
    cases
}

/// The files of the sample data a release reads: its Bundles and the EKS-D releases it names.
fn release_files(release: &Release) -> (PathBuf, Vec<PathBuf>) {
    let dir = repo_root().join("templates/release");
    let bundles = dir.join(format!("bundles-{}.yaml", release.number));
    let text = std::fs::read_to_string(&bundles).unwrap();
    let doc = &yaml::parse_values(&text).unwrap()[0];
    let eksd = doc["spec"]["versionsBundles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|vb| dir.join(vb["eksD"]["manifestUrl"].as_str().unwrap()))
        .collect();
    (bundles, eksd)
}

/// EKS Anywhere's render of every case: name → objects, or the error EKS-A gave.
fn run_oracle(cases: &[Case], scratch: &Path) -> BTreeMap<String, Result<Vec<Value>, String>> {
    let oracle = capstan_harness::ensure_eksa_oracle().expect("building the EKS Anywhere oracle");
    let mut input = Vec::new();
    for c in cases {
        let spec = scratch.join(format!("{}.yaml", c.name));
        std::fs::write(&spec, &c.text).unwrap();
        let (bundles, eksd) = release_files(&c.release);
        input.push(json!({
            "name": c.name, "spec": spec, "bundles": bundles, "eksd": eksd,
            "eksaVersion": c.release.version.to_string(),
            "skipValidation": c.tags.iter().any(|t| t == "control-plane-only"),
            "iamClusterID": iam_cluster_id(c),
        }));
    }
    let mut child = Command::new(&oracle)
        // What EKS Anywhere's CLI reads an authenticated mirror's login from.
        .env("REGISTRY_USERNAME", MIRROR_USER)
        .env("REGISTRY_PASSWORD", MIRROR_PASSWORD)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting the oracle");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(json!({"cases": input}).to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "oracle failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let parsed: BTreeMap<String, Value> = serde_json::from_slice(&out.stdout).unwrap();
    parsed
        .into_iter()
        .map(|(k, v)| {
            let r = match v.get("error").and_then(Value::as_str) {
                Some(e) => Err(e.to_string()),
                None => Ok(v["objects"].as_array().cloned().unwrap_or_default()),
            };
            (k, r)
        })
        .collect()
}

/// The registry mirror login both sides get: EKS Anywhere's CLI from its environment, capstan's
/// machines from the cluster's `<cluster>-registry-credentials` Secret (played by
/// [`boot_mirror_logins`]).
const MIRROR_USER: &str = "oracle-robot";
const MIRROR_PASSWORD: &str = "oracle-p%ss\"word";

/// What a machine does with capstan's authenticated-mirror files before kubeadm, played for
/// real: each KubeadmControlPlane's and KubeadmConfigTemplate's files are written under a
/// scratch directory (the two login files with [`MIRROR_USER`] and [`MIRROR_PASSWORD`], as
/// Cluster API fills them from the Secret), the login command of its `preKubeadmCommands` is
/// run by `sh` there, and the files are read back; the login files and the command then go.
/// What remains is what the machine's containerd reads, compared with what EKS Anywhere writes
/// inline.
fn boot_mirror_logins(objects: &mut [Value], scratch: &Path) {
    let login_dir = capstan_templates::render::node::MIRROR_LOGIN_DIR;
    for (n, o) in objects.iter_mut().enumerate() {
        let spec = match o["kind"].as_str() {
            Some("KubeadmControlPlane") => o.pointer_mut("/spec/kubeadmConfigSpec"),
            Some("KubeadmConfigTemplate") => o.pointer_mut("/spec/template/spec"),
            _ => None,
        };
        let Some(spec) = spec else { continue };
        let Some(files) = spec.get("files").and_then(Value::as_array).cloned() else {
            continue;
        };
        let is_login = |f: &Value| f["path"].as_str().is_some_and(|p| p.starts_with(login_dir));
        if !files.iter().any(is_login) {
            continue;
        }
        let root = scratch.join(format!("machine-{n}"));
        let _ = std::fs::remove_dir_all(&root);
        let at = |p: &str| root.join(p.trim_start_matches('/'));
        for f in &files {
            let path = at(f["path"].as_str().unwrap());
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            let content = match f.pointer("/contentFrom/secret/key").and_then(Value::as_str) {
                Some("username") => MIRROR_USER,
                Some("password") => MIRROR_PASSWORD,
                // Another Secret's file (the AWS IAM authenticator's certificate): kept as it
                // is, EKS Anywhere writes the same.
                Some(_) => continue,
                None => f["content"].as_str().unwrap(),
            };
            std::fs::write(path, content).unwrap();
        }
        let commands = spec["preKubeadmCommands"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let (login, rest): (Vec<Value>, Vec<Value>) = commands
            .into_iter()
            .partition(|c| c.as_str().is_some_and(|c| c.contains(login_dir)));
        assert_eq!(login.len(), 1, "one login command: {login:?}");
        let cmd = login[0]
            .as_str()
            .unwrap()
            .replace("/etc/", &format!("{}/etc/", root.display()));
        let out = Command::new("sh").arg("-c").arg(&cmd).output().unwrap();
        assert!(
            out.status.success(),
            "{cmd}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            !at(login_dir).exists(),
            "the login stays on the machine: {cmd}"
        );
        let booted: Vec<Value> = files
            .into_iter()
            .filter(|f| !is_login(f))
            .map(|mut f| {
                if f.get("contentFrom").is_some() {
                    return f;
                }
                f["content"] =
                    json!(std::fs::read_to_string(at(f["path"].as_str().unwrap())).unwrap());
                f
            })
            .collect();
        spec["files"] = Value::Array(booted);
        spec["preKubeadmCommands"] = Value::Array(rest);
    }
}

/// The AWS IAM authenticator's cluster ID capstan derives for a case's cluster (EKS Anywhere's
/// draws a random one, so the oracle is handed this one); any UUID where capstan refuses the
/// spec.
fn iam_cluster_id(c: &Case) -> String {
    parse_cluster(&source_docs(c))
        .0
        .map(|cl| render::authenticator::cluster_id(&cl.management, &cl.namespace, &cl.name))
        .unwrap_or_else(|| "00000000-0000-8000-8000-000000000000".into())
}

fn source_docs(c: &Case) -> Vec<SourceDoc> {
    yaml::parse(&c.text)
        .unwrap()
        .into_iter()
        .map(|doc| SourceDoc {
            file: PathBuf::from(format!("{}.yaml", c.name)),
            doc,
        })
        .collect()
}

/// The `aws-auth` ConfigMap's mappings read as YAML: EKS Anywhere writes them with Go's YAML
/// encoder, capstan with its own; the authenticator reads the YAML, so that is what is compared.
fn read_iam_mappings(objects: &mut [Value]) {
    for o in objects {
        if o["kind"] != "ConfigMap" || o.pointer("/metadata/name") != Some(&json!("aws-auth")) {
            continue;
        }
        for key in ["mapRoles", "mapUsers"] {
            if let Some(v) = o.pointer_mut(&format!("/data/{key}"))
                && let Some(text) = v.as_str()
            {
                *v = yaml::parse_values(text).unwrap().remove(0);
            }
        }
    }
}

/// capstan's render of a case, or why capstan refused it.
fn capstan_render(
    c: &Case,
    env: Option<&minijinja::Environment<'static>>,
) -> Result<Vec<Value>, String> {
    let (cluster, diags) = parse_cluster(&source_docs(c));
    let show = |d: &[capstan_templates::Diagnostic]| {
        d.iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join("; ")
    };
    let cluster = cluster.ok_or_else(|| format!("capstan refuses the spec: {}", show(&diags)))?;
    let resolved = ReleaseManifest::embedded().resolve(&Sample, &cluster, None);
    let release = resolved
        .release
        .ok_or_else(|| show(&resolved.diagnostics))?;
    let mut objects = match env {
        None => render::render(&cluster, &release),
        Some(env) => render::render_with(env, &cluster, &release),
    }
    .map_err(|e| e.to_string())?;
    // What capstan applies inside the cluster as its add-ons.
    objects.extend(render::authenticator::addons(&cluster, &release).map_err(|e| e.to_string())?);
    Ok(objects)
}

#[test]
fn capstan_renders_what_eks_anywhere_renders() {
    let cases = corpus();
    let scratch = tempfile::tempdir().unwrap();
    let eksa = run_oracle(&cases, scratch.path());
    let mut unexplained = Vec::new();
    let mut used: BTreeMap<usize, usize> = BTreeMap::new();
    let mut objects = 0;
    let mut specs = std::collections::BTreeSet::new();
    for c in &cases {
        specs.insert(c.name.split('@').next().unwrap().to_string());
        let theirs = match &eksa[&c.name] {
            Ok(o) => o,
            Err(e) => {
                unexplained.push(format!("{}: EKS Anywhere refused the spec: {e}", c.name));
                continue;
            }
        };
        let mut ours = match capstan_render(c, None) {
            Ok(o) => o,
            Err(e) => {
                unexplained.push(format!("{}: {e}", c.name));
                continue;
            }
        };
        boot_mirror_logins(&mut ours, scratch.path());
        let mut theirs = theirs.clone();
        read_iam_mappings(&mut theirs);
        read_iam_mappings(&mut ours);
        let a = oracle::normalise(&theirs, Side::Eksa);
        let b = oracle::normalise(&ours, Side::Capstan);
        objects += a.len();
        let tags: Vec<&str> = c.tags.iter().map(String::as_str).collect();
        for d in oracle::diff(&a, &b) {
            match oracle::allowed(&d, &tags) {
                Some(entry) => {
                    let i = ALLOWED.iter().position(|x| std::ptr::eq(x, entry)).unwrap();
                    *used.entry(i).or_default() += 1;
                }
                None => unexplained.push(format!("{}: {d}", c.name)),
            }
        }
    }
    eprintln!(
        "differential render: {} specs x Kubernetes versions = {} cases, {} EKS-A objects compared",
        specs.len(),
        cases.len(),
        objects
    );
    for (i, a) in ALLOWED.iter().enumerate() {
        eprintln!(
            "  allowed x{:<4} {} {}{}: {}",
            used.get(&i).copied().unwrap_or(0),
            a.kind,
            if a.path.is_empty() {
                "<object>"
            } else {
                a.path
            },
            a.when.map(|w| format!(" [{w}]")).unwrap_or_default(),
            a.reason
        );
    }
    assert!(
        unexplained.is_empty(),
        "{} differences from EKS Anywhere are not on the allow-list:\n{}",
        unexplained.len(),
        unexplained.join("\n")
    );
    let stale: Vec<&str> = ALLOWED
        .iter()
        .enumerate()
        .filter(|(i, _)| !used.contains_key(i))
        .map(|(_, a)| a.reason)
        .collect();
    assert!(
        stale.is_empty(),
        "allow-list entries no case needs: {stale:#?}"
    );
    assert!(cases.len() >= 100, "corpus too small: {}", cases.len());
}

/// The comparison can fail: a template that drops one hardening flag is caught.
#[test]
fn a_template_that_drifts_from_eks_anywhere_is_caught() {
    let case = corpus()
        .into_iter()
        .find(|c| c.name == "vsphere-minimal@1.31")
        .unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let eksa = run_oracle(std::slice::from_ref(&case), scratch.path());
    let theirs = eksa[&case.name].as_ref().unwrap();
    let root = repo_root().join("templates/providers");
    let mut templates = Vec::new();
    for dir in ["common", "docker", "vsphere", "nutanix", "tinkerbell"] {
        for e in std::fs::read_dir(root.join(dir)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_none_or(|x| x != "j2") {
                continue;
            }
            let name: &'static str = Box::leak(
                format!("{dir}/{}", p.file_name().unwrap().to_str().unwrap()).into_boxed_str(),
            );
            let mut src = std::fs::read_to_string(&p).unwrap();
            if name == "vsphere/control-plane.yaml.j2" {
                src = src.replace(
                    "        extraArgs: {{ cp.scheduler_args | tojson }}",
                    "        extraArgs: []",
                );
            }
            templates.push((name, &*Box::leak(src.into_boxed_str())));
        }
    }
    let env = render::environment_with(&templates).unwrap();
    let ours = capstan_render(&case, Some(&env)).unwrap();
    let diffs = oracle::diff(
        &oracle::normalise(theirs, Side::Eksa),
        &oracle::normalise(&ours, Side::Capstan),
    );
    let unexplained: Vec<_> = diffs
        .iter()
        .filter(|d| oracle::allowed(d, &[]).is_none())
        .collect();
    assert!(
        unexplained.iter().any(|d| d
            .path
            .starts_with("spec.kubeadmConfigSpec.clusterConfiguration.scheduler")),
        "expected the dropped scheduler flags to be reported, got {unexplained:#?}"
    );
}
