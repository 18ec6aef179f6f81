use super::*;

const NS: &str = "fleet";

fn meta(name: &str, uid: &str) -> Value {
    json!({"name": name, "namespace": NS, "uid": uid, "generation": 1})
}

fn with(mut o: Value, pointer_key: &str, v: Value) -> Value {
    let mut parts: Vec<&str> = pointer_key.split('/').filter(|p| !p.is_empty()).collect();
    let last = parts.pop().unwrap().replace("~1", "/");
    let mut at = &mut o;
    for p in parts {
        at = at
            .as_object_mut()
            .unwrap()
            .entry(p)
            .or_insert_with(|| json!({}));
    }
    at[last.as_str()] = v;
    o
}

fn capi(kind: &str, name: &str, uid: &str) -> Value {
    json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": kind, "metadata": meta(name, uid)})
}

fn labelled(o: Value, cluster: &str) -> Value {
    with(o, "/metadata/labels", json!({CLUSTER_NAME_LABEL: cluster}))
}

fn owned_by(o: Value, owner_uid: &str) -> Value {
    with(
        o,
        "/metadata/ownerReferences",
        json!([{"apiVersion": "x/v1", "kind": "Owner", "name": "o", "uid": owner_uid}]),
    )
}

fn core(kind: &str, name: &str, uid: &str) -> Value {
    json!({"apiVersion": "v1", "kind": kind, "metadata": meta(name, uid)})
}

fn cluster(name: &str, uid: &str, env: &str) -> Value {
    json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
        "metadata": {"name": name, "namespace": NS, "uid": uid, "generation": 1, "labels": {"env": env}},
        "spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerCluster", "name": name},
                 "controlPlaneRef": {"apiGroup": "controlplane.cluster.x-k8s.io", "kind": "KubeadmControlPlane", "name": name}},
        "status": {"observedGeneration": 1, "conditions": [{"type": "Available", "status": "True", "reason": "Available"}]}})
}

/// Two clusters (`w`, `w-2`) and one that stays (`keep`), with what each holds.
fn fleet() -> Vec<Value> {
    vec![
        cluster("w", "c-w", "prod"),
        cluster("w-2", "c-w2", "dev"),
        cluster("keep", "c-keep", "prod"),
        json!({"apiVersion": "anywhere.eks.amazonaws.com/v1alpha1", "kind": "Cluster", "metadata": meta("w", "e-w"),
            "spec": {"datacenterRef": {"kind": "DockerDatacenterConfig", "name": "w"},
                     "managementCluster": {"name": "keep"}}}),
        json!({"apiVersion": "anywhere.eks.amazonaws.com/v1alpha1", "kind": "DockerDatacenterConfig", "metadata": meta("w", "dc-w")}),
        json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "DockerCluster", "metadata": meta("w", "dk-w"),
            "spec": {"identityRef": {"kind": "VSphereClusterIdentity", "name": "shared-id"}}}),
        json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "VSphereClusterIdentity",
            "metadata": {"name": "shared-id", "uid": "id-1"}}),
        json!({"apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "KubeadmControlPlane", "metadata": meta("w", "kcp-w")}),
        labelled(capi("MachineDeployment", "w-md-0", "md-w"), "w"),
        owned_by(
            labelled(capi("MachineSet", "w-md-0-abc", "ms-w"), "w"),
            "md-w",
        ),
        owned_by(
            labelled(capi("Machine", "w-md-0-abc-x", "m-w"), "w"),
            "ms-w",
        ),
        owned_by(
            json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "DockerMachine", "metadata": meta("w-md-0-abc-x", "dm-w")}),
            "m-w",
        ),
        labelled(core("Secret", "w-kubeconfig", "s-kc"), "w"),
        core("Secret", "w-etcd", "s-etcd"),
        core("ConfigMap", "w-extra", "cm-extra"),
        labelled(core("Secret", "w-2-kubeconfig", "s-kc2"), "w-2"),
        core("Secret", "w-2-ca", "s-ca2"),
        core("Secret", "other", "s-other"),
        json!({"apiVersion": "addons.cluster.x-k8s.io/v1beta2", "kind": "ClusterResourceSet", "metadata": meta("crs-prod", "crs-1"),
            "spec": {"clusterSelector": {"matchLabels": {"env": "prod"}},
                     "resources": [{"kind": "ConfigMap", "name": "crs-cm"}]}}),
        json!({"apiVersion": "addons.cluster.x-k8s.io/v1beta2", "kind": "ClusterResourceSet", "metadata": meta("crs-none", "crs-2"),
            "spec": {"clusterSelector": {}}}),
        core("ConfigMap", "crs-cm", "cm-crs"),
        owned_by(capi("ClusterResourceSetBinding", "w", "crsb-w"), "c-w"),
        json!({"apiVersion": "capstan.dev/v1alpha1", "kind": "ManagedCluster",
            "metadata": {"name": "w", "namespace": RECORDS_NAMESPACE, "uid": "mc-w"},
            "status": {"inventory": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "namespace": NS, "name": "w"}]}}),
        // A record of a cluster w-2 of another namespace (its inventory says so).
        json!({"apiVersion": "capstan.dev/v1alpha1", "kind": "ManagedCluster",
            "metadata": {"name": "w-2", "namespace": RECORDS_NAMESPACE, "uid": "mc-w2"},
            "status": {"inventory": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "namespace": "elsewhere", "name": "w-2"}]}}),
        json!({"apiVersion": "capstan.dev/v1alpha1", "kind": "ManagedCluster",
            "metadata": {"name": "keep", "namespace": RECORDS_NAMESPACE, "uid": "mc-keep"}}),
    ]
}

fn key(name: &str) -> ClusterKey {
    format!("{NS}/{name}").parse().unwrap()
}

fn moved(objects: &[Value], names: &[&str]) -> Vec<(String, bool)> {
    let keys: Vec<ClusterKey> = names.iter().map(|n| key(n)).collect();
    plan(objects, &keys)
        .unwrap()
        .objects
        .into_iter()
        .map(|m| (m.subject, m.shared))
        .collect()
}

#[test]
fn a_cluster_takes_what_it_owns_refers_to_is_labelled_for_and_is_named_for() {
    let objects = fleet();
    let got = moved(&objects, &["w"]);
    let subjects: BTreeSet<&str> = got.iter().map(|(s, _)| s.as_str()).collect();
    for want in [
        "Cluster/fleet/w",
        "DockerDatacenterConfig/fleet/w",
        "DockerCluster/fleet/w",
        "KubeadmControlPlane/fleet/w",
        "MachineDeployment/fleet/w-md-0",
        "MachineSet/fleet/w-md-0-abc",
        "Machine/fleet/w-md-0-abc-x",
        "DockerMachine/fleet/w-md-0-abc-x",
        "Secret/fleet/w-kubeconfig",
        "Secret/fleet/w-etcd",
        "ConfigMap/fleet/w-extra",
        "ClusterResourceSet/fleet/crs-prod",
        "ConfigMap/fleet/crs-cm",
        "ClusterResourceSetBinding/fleet/w",
        "ManagedCluster/capstan-system/w",
        "VSphereClusterIdentity/shared-id",
    ] {
        assert!(subjects.contains(want), "{want} not moved: {got:?}");
    }
    // The two Cluster kinds of one name are both there.
    assert_eq!(
        got.iter().filter(|(s, _)| s == "Cluster/fleet/w").count(),
        2,
        "{got:?}"
    );
    for not in [
        "Secret/fleet/w-2-kubeconfig",
        "Secret/fleet/w-2-ca",
        "Secret/fleet/other",
        "Cluster/fleet/keep",
        "ClusterResourceSet/fleet/crs-none",
        "ManagedCluster/capstan-system/keep",
    ] {
        assert!(!subjects.contains(not), "{not} moved: {got:?}");
    }
    // What the cluster that stays also uses, and what is cluster-scoped, stays at the source
    // too; the rest is the moved cluster's alone.
    let shared: BTreeSet<&str> = got
        .iter()
        .filter(|(_, s)| *s)
        .map(|(s, _)| s.as_str())
        .collect();
    assert_eq!(
        shared,
        BTreeSet::from([
            "ClusterResourceSet/fleet/crs-prod",
            "ConfigMap/fleet/crs-cm",
            "VSphereClusterIdentity/shared-id"
        ])
    );
}

#[test]
fn moving_both_clusters_that_share_an_object_moves_it_whole() {
    let mut objects = fleet();
    objects.retain(|o| text(o, "/metadata/name") != "keep");
    let got = moved(&objects, &["w", "w-2"]);
    let crs = got
        .iter()
        .find(|(s, _)| s == "ClusterResourceSet/fleet/crs-prod")
        .unwrap();
    assert!(!crs.1, "{got:?}");
    assert!(got.iter().any(|(s, _)| s == "Secret/fleet/w-2-ca"));
    assert!(
        !got.iter()
            .any(|(s, _)| s == "ManagedCluster/capstan-system/w-2"),
        "another namespace's record: {got:?}"
    );
    assert!(
        got.iter()
            .any(|(s, _)| s == "ManagedCluster/capstan-system/w")
    );
}

#[test]
fn owners_come_before_what_they_own() {
    let objects = fleet();
    let got = moved(&objects, &["w"]);
    let at = |s: &str| got.iter().position(|(x, _)| x == s).unwrap();
    assert!(at("MachineDeployment/fleet/w-md-0") < at("MachineSet/fleet/w-md-0-abc"));
    assert!(at("MachineSet/fleet/w-md-0-abc") < at("Machine/fleet/w-md-0-abc-x"));
    assert!(at("Machine/fleet/w-md-0-abc-x") < at("DockerMachine/fleet/w-md-0-abc-x"));
    let order: Vec<String> = owners_first(vec![
        owned_by(capi("A", "a", "ua"), "ub"),
        owned_by(capi("B", "b", "ub"), "ua"),
    ])
    .iter()
    .map(|o| text(o, "/metadata/name").to_string())
    .collect();
    assert_eq!(order, vec!["a", "b"], "a cycle is broken in input order");
}

#[test]
fn a_cluster_not_at_the_source_is_refused_by_name() {
    let err = plan(&fleet(), &[key("w"), key("gone")]).unwrap_err();
    assert_eq!(err, vec![Refusal::NoSuchCluster(key("gone"))]);
    assert_eq!(
        err[0].to_string(),
        "Cluster fleet/gone: no such Cluster at the source"
    );
}

fn workers(md_status: Value, ms_status: Value) -> Vec<Value> {
    let template = json!({"spec": {"version": "v1.33.1",
        "bootstrap": {"configRef": {"name": "cfg-1"}}, "infrastructureRef": {"name": "tpl-1"}}});
    vec![
        cluster("w", "c-w", "prod"),
        with(
            json!({"apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "KubeadmControlPlane",
                "metadata": meta("w", "kcp-w"), "spec": {"replicas": 1}}),
            "/status",
            json!({"observedGeneration": 1, "replicas": 1, "upToDateReplicas": 1, "availableReplicas": 1}),
        ),
        with(
            with(
                labelled(capi("MachineDeployment", "w-md-0", "md-w"), "w"),
                "/spec",
                json!({"replicas": 2, "template": template}),
            ),
            "/status",
            md_status,
        ),
        with(
            with(
                with(
                    labelled(capi("MachineSet", "w-md-0-a", "ms-w"), "w"),
                    "/metadata/labels/cluster.x-k8s.io~1deployment-name",
                    json!("w-md-0"),
                ),
                "/spec",
                json!({"replicas": 2, "template": template}),
            ),
            "/status",
            ms_status,
        ),
    ]
}

#[test]
fn a_cluster_moves_only_when_ready_and_rolled_out() {
    let settled = json!({"observedGeneration": 1, "replicas": 2, "upToDateReplicas": 2, "availableReplicas": 2});
    let set = json!({"replicas": 2, "availableReplicas": 2});
    let cases: Vec<(&str, Vec<Value>, Option<&str>)> = vec![
        ("settled", workers(settled.clone(), set.clone()), None),
        (
            "workers rolling out",
            workers(
                json!({"observedGeneration": 1, "replicas": 3, "upToDateReplicas": 1, "availableReplicas": 2}),
                set.clone(),
            ),
            Some("1/2 machines up to date"),
        ),
        (
            "a new generation not observed",
            workers(json!({"observedGeneration": 0}), set.clone()),
            Some("not observed yet"),
        ),
        (
            "not Available",
            {
                let mut o = workers(settled.clone(), set.clone());
                o[0]["status"]["conditions"][0]["status"] = json!("False");
                o
            },
            Some("Available=False"),
        ),
        (
            "paused by an operator, settled when it was",
            {
                let mut o = workers(settled.clone(), set.clone());
                o[0]["spec"]["paused"] = json!(true);
                o
            },
            None,
        ),
    ];
    for (case, objects, want) in cases {
        let got = readiness(&objects, &key("w"));
        match (want, &got) {
            (None, None) => {}
            (Some(w), Some(Refusal::NotReady { why, .. })) => {
                assert!(why.contains(w), "{case}: {why}")
            }
            _ => panic!("{case}: {got:?}"),
        }
    }
    let mut deleting = workers(settled, set);
    deleting[0]["metadata"]["deletionTimestamp"] = json!("2026-12-02T00:00:00Z");
    assert_eq!(
        readiness(&deleting, &key("w")),
        Some(Refusal::Deleting(key("w")))
    );
}

#[test]
fn the_target_refuses_a_kind_it_lacks_and_a_name_that_is_not_our_copy() {
    let objects = fleet();
    let p = plan(&objects, &[key("w")]).unwrap();
    let mut served: BTreeSet<(String, String)> = p
        .objects
        .iter()
        .map(|m| {
            let o = &objects[m.index];
            (group_of(o).to_string(), text(o, "/kind").to_string())
        })
        .collect();
    let all = TargetFacts {
        served: served.clone(),
        existing: BTreeMap::new(),
    };
    assert_eq!(target_refusals(&objects, &p, &all), vec![]);
    served.remove(&(
        "infrastructure.cluster.x-k8s.io".into(),
        "DockerMachine".into(),
    ));
    let existing = BTreeMap::from([
        ("/Secret/fleet/w-etcd".to_string(), None),
        (
            "/Secret/fleet/w-kubeconfig".to_string(),
            Some("s-kc".to_string()),
        ),
        (
            "/ConfigMap/fleet/w-extra".to_string(),
            Some("another".to_string()),
        ),
        // The EKS Anywhere Cluster of the same name is another object.
        (
            "cluster.x-k8s.io/Cluster/fleet/w".to_string(),
            Some("c-w".to_string()),
        ),
    ]);
    let got = target_refusals(&objects, &p, &TargetFacts { served, existing });
    assert_eq!(
        got,
        vec![
            Refusal::Exists {
                subject: "Secret/fleet/w-etcd".into()
            },
            Refusal::Exists {
                subject: "ConfigMap/fleet/w-extra".into()
            },
            Refusal::MissingKind {
                kind: "DockerMachine.infrastructure.cluster.x-k8s.io".into(),
                objects: 1
            },
        ]
    );
}

#[test]
fn a_copy_names_its_source_and_its_new_owners_and_carries_no_finalizer() {
    let machine = with(
        owned_by(labelled(capi("Machine", "m", "m-1"), "w"), "ms-1"),
        "/metadata/finalizers",
        json!(["machine.cluster.x-k8s.io"]),
    );
    let machine = with(machine, "/status", json!({"phase": "Running"}));
    let copy = copy_of(
        &machine,
        &BTreeMap::from([("ms-1".into(), "new-ms".into())]),
    );
    assert_eq!(
        copy["metadata"]["annotations"][MOVED_FROM_ANNOTATION],
        "m-1"
    );
    assert_eq!(copy["metadata"]["ownerReferences"][0]["uid"], "new-ms");
    for gone in ["uid", "finalizers", "generation"] {
        assert!(copy["metadata"].get(gone).is_none(), "{gone}");
    }
    assert_eq!(copy["status"]["phase"], "Running");
    // An owner that was not copied is not named.
    let orphan = copy_of(&machine, &BTreeMap::new());
    assert!(orphan["metadata"].get("ownerReferences").is_none());
}

#[test]
fn selectors_read_labels_and_expressions() {
    let labels = json!({"env": "prod", "tier": "a"});
    let labels = labels.as_object().unwrap();
    let cases = [
        (json!({"matchLabels": {"env": "prod"}}), true),
        (json!({"matchLabels": {"env": "dev"}}), false),
        (
            json!({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}]}),
            true,
        ),
        (
            json!({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["a"]}]}),
            false,
        ),
        (
            json!({"matchExpressions": [{"key": "zone", "operator": "DoesNotExist"}]}),
            true,
        ),
        (
            json!({"matchExpressions": [{"key": "zone", "operator": "Exists"}]}),
            false,
        ),
        (
            json!({"matchLabels": {"env": "prod"}, "matchExpressions": [{"key": "tier", "operator": "Bogus"}]}),
            false,
        ),
    ];
    for (selector, want) in cases {
        assert_eq!(selects(&selector, labels, false), want, "{selector}");
    }
    assert!(!selects(&json!({}), labels, false));
    assert!(selects(&json!({}), labels, true));
}

#[test]
fn a_cluster_key_is_namespace_and_name() {
    assert_eq!(key("w").to_string(), "fleet/w");
    for bad in ["w", "/w", "ns/", "a/b/c"] {
        assert!(bad.parse::<ClusterKey>().is_err(), "{bad}");
    }
}

#[test]
fn a_running_agent_at_the_source_refuses_the_move() {
    let now = "2026-12-02T12:00:00Z"
        .parse::<k8s_openapi::jiff::Timestamp>()
        .unwrap()
        .as_second();
    let deployment = |replicas: i64| json!({"spec": {"replicas": replicas}});
    let lease = |holder: &str, renewed: &str| json!({"spec": {"holderIdentity": holder, "leaseDurationSeconds": 15, "renewTime": renewed}});
    /// A case: its name, the Deployment, the Lease, what the refusal says (None: no refusal).
    type Case<'a> = (&'a str, Option<Value>, Option<Value>, Option<&'a str>);
    let cases: Vec<Case> = vec![
        ("nothing installed", None, None, None),
        ("scaled to zero", Some(deployment(0)), None, None),
        (
            "a Deployment with replicas",
            Some(deployment(2)),
            None,
            Some("asks for 2 replica(s)"),
        ),
        (
            "a Lease renewed within its duration",
            Some(deployment(0)),
            Some(lease("capstan-7d9", "2026-12-02T11:59:50.000000Z")),
            Some("held by capstan-7d9, renewed 10s ago"),
        ),
        (
            "a Lease that expired",
            None,
            Some(lease("capstan-7d9", "2026-12-02T11:59:00Z")),
            None,
        ),
        (
            "a Lease released",
            None,
            Some(lease("", "2026-12-02T11:59:59Z")),
            None,
        ),
    ];
    for (case, d, l, want) in cases {
        let got = agent_running(d.as_ref(), l.as_ref(), now);
        match (want, &got) {
            (None, None) => {}
            (Some(w), Some(r @ Refusal::AgentRunning { why })) => {
                assert!(why.contains(w), "{case}: {why}");
                assert!(
                    r.to_string()
                        .contains("scale deployment capstan --replicas 0")
                );
            }
            _ => panic!("{case}: {got:?}"),
        }
    }
}

#[test]
fn an_eksa_cluster_takes_the_release_its_eksa_version_names_shared_while_another_uses_it() {
    let eksa = |name: &str, uid: &str, version: &str| {
        json!({"apiVersion": "anywhere.eks.amazonaws.com/v1alpha1", "kind": "Cluster", "metadata": meta(name, uid),
            "spec": {"eksaVersion": version}})
    };
    let release = |version: &str, uid: &str| {
        json!({"apiVersion": "anywhere.eks.amazonaws.com/v1alpha1", "kind": "EKSARelease",
            "metadata": {"name": eksa_release_name(version), "namespace": RELEASE_NAMESPACE, "uid": uid},
            "spec": {"version": version}})
    };
    let objects = vec![
        cluster("w", "c-w", "prod"),
        cluster("keep", "c-keep", "prod"),
        eksa("w", "e-w", "v0.26.1"),
        eksa("keep", "e-keep", "v0.25.2"),
        release("v0.26.1", "r-26"),
        release("v0.25.2", "r-25"),
        // Same name, another namespace: not EKS-A's release.
        with(
            release("v0.26.1", "r-26-elsewhere"),
            "/metadata/namespace",
            json!(NS),
        ),
    ];
    let got = moved(&objects, &["w"]);
    assert!(
        got.contains(&("EKSARelease/eksa-system/eksa-v0-26-1".to_string(), false)),
        "{got:?}"
    );
    assert!(
        !got.iter()
            .any(|(s, _)| s.contains("eksa-v0-25-2") || s.starts_with("EKSARelease/fleet/")),
        "{got:?}"
    );
    // Both clusters on one release: it goes, and stays for the cluster that stays.
    let mut shared = objects.clone();
    shared[3] = eksa("keep", "e-keep", "v0.26.1");
    let got = moved(&shared, &["w"]);
    assert!(
        got.contains(&("EKSARelease/eksa-system/eksa-v0-26-1".to_string(), true)),
        "{got:?}"
    );
}

/// A shared object kept at the source loses only its owner references to what the move deletes
/// there: the source's garbage collector would otherwise take it from the cluster that stays.
#[test]
fn a_shared_object_kept_at_the_source_is_not_left_to_the_garbage_collector() {
    let owner = |uid: &str| json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "name": uid, "uid": uid});
    let deleted: BTreeSet<String> = ["u-moved".to_string()].into();
    let object = |refs: Option<Vec<Value>>| {
        let mut o =
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta("cni", "u-cni")});
        if let Some(r) = refs {
            o["metadata"]["ownerReferences"] = json!(r);
        }
        o
    };
    let cases: Vec<(&str, Value, Option<Vec<Value>>)> = vec![
        ("no owners", object(None), None),
        (
            "owned by what stays only",
            object(Some(vec![owner("u-stay")])),
            None,
        ),
        (
            "owned by what moves only: kept with none",
            object(Some(vec![owner("u-moved")])),
            Some(vec![]),
        ),
        (
            "owned by both: the one that stays kept",
            object(Some(vec![owner("u-moved"), owner("u-stay")])),
            Some(vec![owner("u-stay")]),
        ),
    ];
    for (what, o, want) in cases {
        assert_eq!(kept_owners(&o, &deleted), want, "{what}");
    }
}
