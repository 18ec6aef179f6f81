//! `capstan bootstrap` end to end: an empty repository behind a real sshd gets the fleet
//! skeleton and the agent's manifests pushed with the deploy key; the manifests are installed on
//! the real API server with the Git credentials Secret; the agent's Deployment is then run as
//! the kubelet would run it (a stand-in, `source_support::kubelet`: no nodes here), so the agent
//! starts from the in-cluster configuration (ServiceAccount token, CA, KUBERNETES_SERVICE_HOST)
//! as the installed ServiceAccount, as a non-root user, with the deploy key from the Secret; and
//! bootstrap returns once the agent reports the pushed commit applied. Running it again changes
//! nothing; a missing Secret shows in `capstan status`; `capstan uninstall` removes the agent
//! and leaves the managed cluster.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, DynamicObject};
use kube::discovery::ApiResource;

use crate::source_support;
use crate::source_support::agent::{scrape, value_in};
use crate::source_support::kubelet;
use crate::source_support::sshd::Sshd;
use capstan_harness::run::{self, kubectl_with_stdin};

const NS: &str = "capstan-system";

/// The capstan binary with `args`, against `kubeconfig`.
fn capstan_against(args: &[&str], kubeconfig: &std::path::Path) -> Command {
    let mut c = run::capstan(args);
    c.arg("--kubeconfig").arg(kubeconfig);
    c
}

/// Polls `check` every 100 ms until it holds; panics with `what` after `limit`.
async fn poll_until<F, Fut>(what: &str, limit: Duration, check: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !check().await {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bootstrap_pushes_installs_and_waits_for_the_agent_running_in_cluster() {
    // A control plane of its own: `capstan uninstall` at the end removes the agent's
    // ServiceAccount and roles, which the agents of the tests sharing one run as, and every
    // write with capstan's field manager is checked to be the installed agent's.
    let own = capstan_harness::ControlPlane::start().await.unwrap();
    let cp = &own;
    let client = cp.client();
    let admin = cp.kubeconfig_path();
    let tmp = tempfile::tempdir().unwrap();
    let served = tmp.path().join("served");
    std::fs::create_dir_all(&served).unwrap();
    let bare = served.join("fleet.git");
    source_support::git(
        &served,
        &[
            "init",
            "--quiet",
            "--bare",
            "-b",
            "main",
            bare.to_str().unwrap(),
        ],
    );
    let sshd = Sshd::start_push(&served);
    let url = sshd.url(&bare);

    let bootstrap_args = [
        "bootstrap",
        "--repo",
        &url,
        "--branch",
        "main",
        "--management",
        "m-boot",
        "--ssh-key",
        sshd.key.to_str().unwrap(),
        "--known-hosts",
        sshd.known_hosts.to_str().unwrap(),
        "--provider",
        "docker",
        "--pod-cidr",
        "192.168.0.0/16",
        "--service-cidr",
        "10.96.0.0/12",
        "--namespace",
        "t-boot",
        "--image",
        "capstan:test",
        "--timeout",
        "3m",
    ];
    let log = tmp.path().join("bootstrap.log");
    let mut boot = capstan_against(&bootstrap_args, admin)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();

    // Bootstrap installs the agent and waits for it: what a node would now run.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    poll_until(
        "the Deployment and the Git Secret",
        Duration::from_secs(120),
        || async {
            deployments.get_opt("capstan").await.unwrap().is_some()
                && secrets.get_opt("capstan-git").await.unwrap().is_some()
        },
    )
    .await;
    let mark = cp.audit().mark();
    let pod_log = tmp.path().join("pod.log");
    let pod = kubelet::run_deployment(cp, NS, "capstan", "capstan-7d9f-x2", &pod_log).await;
    let out = tokio::task::spawn_blocking(move || {
        let status = boot.wait().unwrap();
        let mut stdout = String::new();
        std::io::Read::read_to_string(boot.stdout.as_mut().unwrap(), &mut stdout).unwrap();
        (status, stdout)
    })
    .await
    .unwrap();
    let boot_log = std::fs::read_to_string(&log).unwrap();
    assert!(
        out.0.success(),
        "bootstrap failed: {}\n{boot_log}\nagent:\n{}",
        out.1,
        pod.logs()
    );
    assert!(out.1.contains("bootstrapped"), "{}", out.1);

    // Pushed for real: the skeleton and the manifests, the commit the agent applied.
    let head = source_support::git(&bare, &["rev-parse", "main"]);
    let files = source_support::git(&bare, &["ls-tree", "-r", "--name-only", "main"]);
    assert!(files.contains("clusters/m-boot/cluster.yaml"), "{files}");
    assert!(files.contains("capstan-system/m-boot.yaml"), "{files}");
    let mc = capstan::status::api(&client).get("m-boot").await.unwrap();
    assert_eq!(mc.status.unwrap().last_applied_revision, head);

    // The agent ran from the in-cluster configuration, as the installed ServiceAccount.
    assert!(
        pod.logs().contains("in-cluster service account"),
        "{}",
        pod.logs()
    );
    let metrics = scrape(pod.ports[&8080]);
    assert_eq!(value_in(&metrics, "capstan_leader"), 1.0, "{metrics}");
    cp.audit()
        .sync(&cp.client(), Duration::from_secs(10))
        .await
        .unwrap();
    let writes = cp.audit().writes_by_manager_since(mark, "capstan").unwrap();
    assert!(!writes.is_empty());
    assert!(
        writes
            .iter()
            .all(|e| e.user.username == "system:serviceaccount:capstan-system:capstan"),
        "{:?}",
        writes.iter().map(|e| &e.user.username).collect::<Vec<_>>()
    );
    let capi = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        "t-boot",
        &ApiResource {
            group: "cluster.x-k8s.io".into(),
            version: "v1beta2".into(),
            api_version: "cluster.x-k8s.io/v1beta2".into(),
            kind: "Cluster".into(),
            plural: "clusters".into(),
        },
    );
    assert!(capi.get_opt("m-boot").await.unwrap().is_some());

    // Again: nothing to push, the agent already there.
    let again = capstan_against(&bootstrap_args, admin).output().unwrap();
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    assert_eq!(
        source_support::git(&bare, &["rev-parse", "main"]),
        head,
        "a second bootstrap pushed"
    );
    drop(pod);

    // A Secret the agent needs is gone: `capstan status` says so.
    secrets
        .delete("capstan-git", &DeleteParams::default())
        .await
        .unwrap();
    let status = capstan_against(&["status"], admin).output().unwrap();
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(
        text.contains("Secret capstan-system/capstan-git (volume git) is missing"),
        "{text}"
    );
    // The backups' recipients are the admin's to create: until then a self-upgrade waits.
    assert!(
        text.contains(
            "Secret capstan-system/capstan-backup-recipients (backup recipients) is missing"
        ),
        "{text}"
    );
    // No storage here: the backup volume's claim is never bound, and that is said too.
    assert!(
        text.contains("PersistentVolumeClaim capstan-system/capstan-backups (volume backups) is"),
        "{text}"
    );

    // A wrong image: the kubelet reports the pod's container waiting on the pull (played here by
    // writing the status a kubelet writes), and `capstan status` shows it with the reason.
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), NS);
    let pod_obj = serde_json::json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "capstan-7d9f-wrong", "namespace": NS, "labels": {"app.kubernetes.io/name": "capstan"}},
        "spec": {"containers": [{"name": "agent", "image": "capstan:wrong"}]}});
    let pp = kube::api::PatchParams::apply("kubelet-stand-in").force();
    pods.patch(
        "capstan-7d9f-wrong",
        &pp,
        &kube::api::Patch::Apply(&pod_obj),
    )
    .await
    .unwrap();
    let waiting = serde_json::json!({"apiVersion": "v1", "kind": "Pod", "status": {"containerStatuses": [{
        "name": "agent", "image": "capstan:wrong", "imageID": "", "ready": false, "restartCount": 0,
        "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image \"capstan:wrong\""}}}]}});
    pods.patch_status(
        "capstan-7d9f-wrong",
        &pp,
        &kube::api::Patch::Apply(&waiting),
    )
    .await
    .unwrap();
    let status = capstan_against(&["status"], admin).output().unwrap();
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(
        text.contains("pod capstan-7d9f-wrong: container agent waiting: ImagePullBackOff Back-off pulling image \"capstan:wrong\""),
        "{text}"
    );
    pods.delete(
        "capstan-7d9f-wrong",
        &DeleteParams::default().grace_period(0),
    )
    .await
    .unwrap();

    // Uninstall: the agent goes, the managed cluster, its record and the backups stay.
    let un = capstan_against(&["uninstall"], admin).output().unwrap();
    assert!(
        un.status.success(),
        "{}",
        String::from_utf8_lossy(&un.stderr)
    );
    assert!(deployments.get_opt("capstan").await.unwrap().is_none());
    let roles: Api<k8s_openapi::api::rbac::v1::Role> = Api::namespaced(client.clone(), NS);
    assert!(
        roles
            .get_opt(capstan::install::manifests::BACKUP_RECIPIENTS_ROLE)
            .await
            .unwrap()
            .is_none(),
        "uninstall left the Role reading the backups' recipients"
    );
    assert!(capi.get_opt("m-boot").await.unwrap().is_some());
    let claims: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
        Api::namespaced(client.clone(), NS);
    assert!(
        claims.get_opt("capstan-backups").await.unwrap().is_some(),
        "uninstall removed the backups"
    );
    assert!(
        capstan::status::api(&client)
            .get_opt("m-boot")
            .await
            .unwrap()
            .is_some()
    );
}

/// A cluster without Cluster API: `capstan install` refuses and names the missing CRDs, writing
/// nothing.
#[tokio::test]
async fn install_without_cluster_api_names_the_missing_crds() {
    let cp = capstan_harness::ControlPlane::start_with(capstan_harness::StartOptions {
        install_crds: false,
        ..Default::default()
    })
    .await
    .unwrap();
    let out = capstan_against(
        &[
            "install",
            "--repo",
            "https://example.com/fleet.git",
            "--management",
            "m",
        ],
        cp.kubeconfig_path(),
    )
    .output()
    .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    for crd in capstan::install::REQUIRED_CRDS {
        assert!(err.contains(crd), "{crd} not named: {err}");
    }
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(cp.client());
    assert!(
        namespaces.get_opt(NS).await.unwrap().is_none(),
        "nothing is written"
    );

    // The agent does not install its CRD: without it, it says what to run.
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("fleet");
    for (p, t) in source_support::agent::fleet_with("nocrd", &[]) {
        let path = repo.join(p);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, t).unwrap();
    }
    let reconcile = |kubeconfig: &std::path::Path| {
        capstan_against(
            &["reconcile", "--once", "--repo", repo.to_str().unwrap()],
            kubeconfig,
        )
        .output()
        .unwrap()
    };
    let out = reconcile(cp.kubeconfig_path());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("managedclusters.capstan.dev) is not installed: run `capstan install`"),
        "{err}"
    );
    // An older CRD (here: one without observedGeneration) is named as such.
    let mut older = capstan::install::manifests::crd();
    older["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
        .as_object_mut()
        .unwrap()
        .remove("observedGeneration");
    capstan::install::apply(&cp.client(), &[older], Duration::from_secs(30))
        .await
        .unwrap();
    let out = reconcile(cp.kubeconfig_path());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "is older than this agent (it lacks status.observedGeneration): run `capstan install`"
        ),
        "{err}"
    );
}

/// A cluster with Cluster API but one CRD every cluster needs missing: `capstan install` names
/// exactly that one and writes nothing. With it back: `--export` prints the objects `install`
/// applies, which the API server admits (`kubectl apply --server-side` of the export);
/// `install` over them then changes no object, nor does a second `install` (resourceVersions
/// as they were), and the Service is there.
#[tokio::test]
async fn install_preflight_export_and_a_second_install_that_changes_nothing() {
    // Cluster API and EKS Anywhere, but not the Helm add-on provider's HelmChartProxy.
    let missing = "helmchartproxies.addons.cluster.x-k8s.io";
    let cp = capstan_harness::ControlPlane::start_with(capstan_harness::StartOptions {
        install_crds: false,
        ..Default::default()
    })
    .await
    .unwrap();
    let (left_out, files): (Vec<_>, Vec<_>) =
        tokio::task::spawn_blocking(capstan_harness::crd_files)
            .await
            .unwrap()
            .unwrap()
            .into_iter()
            .partition(|f| f.name == missing);
    assert_eq!(left_out.len(), 1);
    let limit = Duration::from_secs(120);
    capstan_harness::install_crds(&cp.client(), &files, limit)
        .await
        .unwrap();
    let kubeconfig = cp.kubeconfig_path();
    let install_args = [
        "install",
        "--repo",
        "https://example.com/fleet.git",
        "--management",
        "m-export",
    ];
    let mark = cp.audit().mark();
    let out = capstan_against(&install_args, kubeconfig).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(missing), "{err}");
    for crd in capstan::install::REQUIRED_CRDS
        .iter()
        .filter(|c| **c != missing)
    {
        assert!(!err.contains(crd), "{crd} is there but named: {err}");
    }
    cp.audit()
        .sync(&cp.client(), Duration::from_secs(10))
        .await
        .unwrap();
    let writes = cp
        .audit()
        .writes_by_manager_since(mark, capstan::install::FIELD_MANAGER)
        .unwrap();
    assert!(
        writes.is_empty(),
        "written: {:?}",
        writes.iter().map(|e| &e.request_uri).collect::<Vec<_>>()
    );
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(cp.client());
    assert!(namespaces.get_opt(NS).await.unwrap().is_none());

    // Back.
    capstan_harness::install_crds(&cp.client(), &left_out, limit)
        .await
        .unwrap();

    // --export: the objects, in apply order, that the API server admits.
    let mut export_args = install_args.to_vec();
    export_args.push("--export");
    let out = capstan_against(&export_args, kubeconfig).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let yaml = String::from_utf8(out.stdout).unwrap();
    let docs = capstan_templates::yaml::parse_values(&yaml).unwrap();
    let names: Vec<String> = docs
        .iter()
        .map(|d| {
            format!(
                "{}/{}",
                d["kind"].as_str().unwrap(),
                d["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        names,
        [
            "Namespace/capstan-system",
            "CustomResourceDefinition/managedclusters.capstan.dev",
            "ValidatingAdmissionPolicy/capstan-tenancy",
            "ValidatingAdmissionPolicyBinding/capstan-tenancy",
            "ClusterRole/capstan-workload",
            "ClusterRoleBinding/capstan-workload",
            "ClusterRole/capstan-management",
            "ClusterRoleBinding/capstan-management",
            "ServiceAccount/capstan",
            "ClusterRole/capstan",
            "ClusterRoleBinding/capstan",
            "Role/capstan",
            "RoleBinding/capstan",
            "Role/capstan-backup-recipients",
            "RoleBinding/capstan-backup-recipients",
            "Service/capstan",
            "PersistentVolumeClaim/capstan-backups",
            "Deployment/capstan",
        ]
    );
    let rules = |holder| -> Vec<serde_json::Value> {
        capstan::install::rbac::rules()
            .iter()
            .filter(|r| r.holder == holder)
            .map(capstan::install::rbac::Rule::to_value)
            .collect()
    };
    assert_eq!(
        docs[4]["rules"],
        serde_json::Value::from(rules(capstan::install::rbac::Holder::Workload))
    );
    assert_eq!(
        docs[6]["rules"],
        serde_json::Value::from(rules(capstan::install::rbac::Holder::Management))
    );
    assert_eq!(
        docs[9]["rules"],
        serde_json::Value::from(rules(capstan::install::rbac::Holder::Cluster))
    );
    assert_eq!(
        docs[11]["rules"],
        serde_json::Value::from(rules(capstan::install::rbac::Holder::System))
    );
    let deployment = docs.iter().find(|d| d["kind"] == "Deployment").unwrap();
    assert_eq!(deployment["spec"]["replicas"], 2);
    // The API server admits every object as it is (kubectl's server-side apply validates
    // strictly). Applied for real, under install's field manager: a server-side dry run cannot
    // create the namespaced objects in a namespace that does not exist yet.
    let (ok, text) = kubectl_with_stdin(
        kubeconfig,
        &[
            "apply",
            "--server-side",
            "--field-manager",
            capstan::install::FIELD_MANAGER,
            "-o",
            "name",
            "-f",
            "-",
        ],
        &yaml,
    );
    assert!(ok, "{text}");
    let kubectl_names: Vec<&str> = text.lines().collect();
    assert_eq!(kubectl_names.len(), 18, "{text}");
    assert_eq!(kubectl_names[0], "namespace/capstan-system", "{text}");
    assert_eq!(kubectl_names[17], "deployment.apps/capstan", "{text}");

    // What each object's resourceVersion is, read by kubectl. (The claim's content instead: the
    // API server gives a PersistentVolumeClaim created by kubectl's apply a new resourceVersion
    // on the first apply of the same content by another client — the stored object is the same,
    // field for field and in its managed fields, and later applies leave it as it is.)
    let versions = || {
        kubectl_names
            .iter()
            .map(|name| {
                let what = if name.starts_with("persistentvolumeclaim/") {
                    "jsonpath={.spec}{.metadata.labels}{.metadata.managedFields}"
                } else {
                    "jsonpath={.metadata.resourceVersion}"
                };
                let mut args = vec!["get", name, "-o", what];
                if !name.starts_with("namespace/")
                    && !name.starts_with("customresourcedefinition")
                    && !name.starts_with("clusterrole")
                    && !name.starts_with("validatingadmissionpolicy")
                {
                    args.extend(["-n", NS]);
                }
                let (ok, v) = kubectl_with_stdin(kubeconfig, &args, "");
                assert!(ok, "{name}: {v}");
                format!("{name}@{v}")
            })
            .collect::<Vec<_>>()
    };
    // `capstan install` over what kubectl applied from the export changes nothing (the export
    // is what it applies); and again, nothing; the Service is there.
    let exported = versions();
    for round in ["first", "second"] {
        let out = capstan_against(&install_args, kubeconfig).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(versions(), exported, "the {round} install changed objects");
    }
    let (ok, ports) = kubectl_with_stdin(
        kubeconfig,
        &[
            "get",
            "service",
            "capstan",
            "-n",
            NS,
            "-o",
            "jsonpath={.spec.ports[*].name}",
        ],
        "",
    );
    assert!(ok, "{ports}");
    assert_eq!(ports, "webhook metrics");
}
