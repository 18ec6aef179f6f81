//! Property tests of the renderer: rendering is deterministic, and the name of every immutable
//! template changes exactly when its rendered content changes (that is what makes Cluster API
//! roll machines on a real change, and never on a no-op).

use std::collections::BTreeMap;
use std::path::PathBuf;

use capstan_templates::release::ReleaseManifest;
use capstan_templates::spec::{SourceDoc, parse_cluster};
use capstan_templates::{render, yaml};
use proptest::prelude::*;
use serde_json::Value;

#[derive(Debug, Clone)]
struct Group {
    count: u32,
    autoscale: bool,
    label: Option<String>,
    lag: u32,
    tainted: bool,
}

#[derive(Debug, Clone)]
struct Spec {
    vsphere: bool,
    /// A docker datacenter on CAPD's in-memory backend (`Dev*` kinds).
    in_memory: bool,
    cp_count: u32,
    external_etcd: bool,
    kube_minor: u32,
    groups: Vec<Group>,
    memory: u32,
    cp_label: Option<String>,
}

fn group() -> impl Strategy<Value = Group> {
    (
        0u32..6,
        any::<bool>(),
        proptest::option::of("[a-z]{1,6}"),
        0u32..3,
        any::<bool>(),
    )
        .prop_map(|(count, autoscale, label, lag, tainted)| Group {
            count,
            autoscale,
            label,
            lag,
            tainted,
        })
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        any::<bool>(),
        0u32..3,
        any::<bool>(),
        32u32..35,
        proptest::collection::vec(group(), 1..4),
        2048u32..65536,
        proptest::option::of("[a-z]{1,6}"),
        any::<bool>(),
    )
        .prop_map(
            |(vsphere, cp, external_etcd, kube_minor, groups, memory, cp_label, in_memory)| Spec {
                vsphere,
                in_memory: in_memory && !vsphere,
                cp_count: cp * 2 + 1,
                external_etcd,
                kube_minor,
                groups,
                memory,
                cp_label,
            },
        )
}

fn yaml_of(s: &Spec) -> String {
    let mut out = String::new();
    let dc = if s.vsphere {
        "VSphereDatacenterConfig"
    } else {
        "DockerDatacenterConfig"
    };
    out += &format!(
        "apiVersion: anywhere.eks.amazonaws.com/v1alpha1\nkind: Cluster\nmetadata:\n  name: c1\nspec:\n  kubernetesVersion: \"1.{}\"\n  eksaVersion: v0.26.1\n  datacenterRef:\n    kind: {dc}\n    name: c1\n",
        s.kube_minor
    );
    out += &format!("  controlPlaneConfiguration:\n    count: {}\n", s.cp_count);
    if s.vsphere {
        out += "    endpoint:\n      host: 10.0.0.1\n    machineGroupRef:\n      kind: VSphereMachineConfig\n      name: m-cp\n";
    }
    if let Some(l) = &s.cp_label {
        out += &format!("    labels:\n      role: \"{l}\"\n");
    }
    if s.external_etcd {
        out += "  externalEtcdConfiguration:\n    count: 3\n";
        if s.vsphere {
            out += "    machineGroupRef:\n      kind: VSphereMachineConfig\n      name: m-etcd\n";
        }
    }
    out += "  workerNodeGroupConfigurations:\n";
    // The first group never has a NoSchedule taint: a self-managed cluster needs one untainted group.
    for (i, g) in s.groups.iter().enumerate() {
        out += &format!("    - name: g{i}\n");
        if g.autoscale {
            out += &format!(
                "      autoscalingConfiguration:\n        minCount: {}\n        maxCount: {}\n",
                g.count,
                g.count + 3
            );
        } else {
            out += &format!("      count: {}\n", g.count);
        }
        if let Some(l) = &g.label {
            out += &format!("      labels:\n        team: \"{l}\"\n");
        }
        if g.lag > 0 {
            out += &format!("      kubernetesVersion: \"1.{}\"\n", s.kube_minor - g.lag);
        }
        if g.tainted && i > 0 {
            out += "      taints:\n        - key: dedicated\n          effect: NoSchedule\n";
        }
        if s.vsphere {
            out +=
                "      machineGroupRef:\n        kind: VSphereMachineConfig\n        name: m-w\n";
        }
    }
    out += "  clusterNetwork:\n    pods:\n      cidrBlocks: [192.168.0.0/16]\n    services:\n      cidrBlocks: [10.96.0.0/12]\n";
    if s.vsphere {
        out += "---\napiVersion: anywhere.eks.amazonaws.com/v1alpha1\nkind: VSphereDatacenterConfig\nmetadata:\n  name: c1\nspec:\n  datacenter: dc\n  network: net\n  server: vc.local\n";
        let mut roles = vec!["cp", "w"];
        if s.external_etcd {
            roles.push("etcd");
        }
        for r in roles {
            out += &format!(
                "---\napiVersion: anywhere.eks.amazonaws.com/v1alpha1\nkind: VSphereMachineConfig\nmetadata:\n  name: m-{r}\nspec:\n  datastore: ds\n  resourcePool: rp\n  template: t\n  osFamily: ubuntu\n  memoryMiB: {}\n",
                s.memory
            );
        }
    } else {
        out += "---\napiVersion: anywhere.eks.amazonaws.com/v1alpha1\nkind: DockerDatacenterConfig\nmetadata:\n  name: c1\n";
        if s.in_memory {
            out += &format!(
                "  annotations:\n    {}: in-memory\n",
                capstan_templates::spec::DOCKER_BACKEND_ANNOTATION
            );
        }
        out += "spec: {}\n";
    }
    out
}

fn render_spec(s: &Spec) -> Vec<Value> {
    let text = yaml_of(s);
    let docs: Vec<SourceDoc> = yaml::parse(&text)
        .unwrap()
        .into_iter()
        .map(|doc| SourceDoc {
            file: PathBuf::from("c.yaml"),
            doc,
        })
        .collect();
    let (cluster, diags) = parse_cluster(&docs);
    let cluster =
        cluster.unwrap_or_else(|| panic!("generated spec must validate: {diags:#?}\n{text}"));
    let manifest = ReleaseManifest::embedded();
    let resolved = manifest.resolve(&capstan_templates::release::Sample, &cluster, None);
    let release = resolved
        .release
        .unwrap_or_else(|| panic!("versions must resolve: {:#?}", resolved.diagnostics));
    render::render(&cluster, &release).unwrap()
}

const IMMUTABLE: &[&str] = &[
    "DockerMachineTemplate",
    "DevMachineTemplate",
    "VSphereMachineTemplate",
    "KubeadmConfigTemplate",
];

/// Immutable templates by (kind, base name) -> (full name, spec).
fn immutable(objs: &[Value]) -> BTreeMap<(String, String), (String, Value)> {
    objs.iter()
        .filter(|o| IMMUTABLE.contains(&o["kind"].as_str().unwrap()))
        .map(|o| {
            let name = o["metadata"]["name"].as_str().unwrap().to_string();
            let (base, hash) = name.rsplit_once('-').unwrap();
            assert_eq!(hash.len(), render::HASH_LEN);
            assert!(hash.bytes().all(|c| c.is_ascii_hexdigit()));
            (
                (o["kind"].as_str().unwrap().to_string(), base.to_string()),
                (name.clone(), o["spec"].clone()),
            )
        })
        .collect()
}

#[derive(Debug, Clone)]
enum Mutation {
    GroupLabel(usize, Option<String>),
    GroupCount(usize, u32),
    GroupLag(usize, u32),
    CpCount(u32),
    CpLabel(Option<String>),
    Memory(u32),
    Kube(u32),
}

fn template_edit() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (0usize..3, proptest::option::of("[a-z]{1,6}"))
            .prop_map(|(i, l)| Mutation::GroupLabel(i, l)),
        (0usize..3, 0u32..6).prop_map(|(i, c)| Mutation::GroupCount(i, c)),
        (0usize..3, 0u32..3).prop_map(|(i, l)| Mutation::GroupLag(i, l)),
        (0u32..3).prop_map(|c| Mutation::CpCount(c * 2 + 1)),
        proptest::option::of("[a-z]{1,6}").prop_map(Mutation::CpLabel),
        (2048u32..65536).prop_map(Mutation::Memory),
        (32u32..35).prop_map(Mutation::Kube),
    ]
}

fn apply(s: &Spec, m: &Mutation) -> Spec {
    let mut s = s.clone();
    let n = s.groups.len();
    match m.clone() {
        Mutation::GroupLabel(i, l) => s.groups[i % n].label = l,
        Mutation::GroupCount(i, c) => s.groups[i % n].count = c,
        Mutation::GroupLag(i, l) => s.groups[i % n].lag = l,
        Mutation::CpCount(c) => s.cp_count = c,
        Mutation::CpLabel(l) => s.cp_label = l,
        Mutation::Memory(m) => s.memory = m,
        Mutation::Kube(k) => s.kube_minor = k,
    }
    s
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn every_template_output_is_read_back_by_the_fast_reader(s in spec()) {
        render_spec(&s);
        prop_assert_eq!(render::slow_reads(), 0);
        // And straight from its value slots, without being rendered again as text.
        prop_assert_eq!(render::slot_misses(), 0);
    }

    #[test]
    fn value_slots_give_the_objects_the_text_gives(s in spec()) {
        let slotted = render_spec(&s);
        let text = render::text_only(|| render_spec(&s));
        prop_assert_eq!(slotted, text);
    }

    #[test]
    fn rendering_is_deterministic(s in spec()) {
        let a = yaml::to_string_multi(&render_spec(&s));
        let b = yaml::to_string_multi(&render_spec(&s));
        prop_assert_eq!(a, b);
    }

    #[test]
    fn template_names_change_exactly_when_content_changes(s in spec(), m in template_edit()) {
        let t = apply(&s, &m);
        let a = immutable(&render_spec(&s));
        let b = immutable(&render_spec(&t));
        prop_assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
        for (key, (name_a, spec_a)) in &a {
            let (name_b, spec_b) = &b[key];
            prop_assert_eq!(spec_a == spec_b, name_a == name_b, "{:?} after {:?}: names {} / {}", key, m, name_a, name_b);
        }
    }

    /// The in-memory backend stands in for docker machines in the tests and the quick start, so
    /// a change must rename (and so roll) the same templates on both: a Kubernetes version bump
    /// renames the machine templates of docker clusters (their node image), and so of in-memory
    /// ones, whose old templates are then pruned just as on docker.
    #[test]
    fn in_memory_templates_are_renamed_when_docker_ones_are(s in spec(), m in template_edit()) {
        let docker = Spec { vsphere: false, in_memory: false, ..s };
        let in_memory = Spec { in_memory: true, ..docker.clone() };
        let renamed = |s: &Spec| -> Vec<(String, bool)> {
            let (a, b) = (immutable(&render_spec(s)), immutable(&render_spec(&apply(s, &m))));
            a.iter()
                .map(|(key, (name, _))| {
                    let kind = key.0.replace("DevMachineTemplate", "DockerMachineTemplate");
                    (format!("{kind}/{}", key.1), b[key].0 != *name)
                })
                .collect()
        };
        prop_assert_eq!(renamed(&docker), renamed(&in_memory), "after {:?}", m);
    }
}

#[test]
fn a_version_bump_renames_every_in_memory_machine_template() {
    let s = Spec {
        vsphere: false,
        in_memory: true,
        cp_count: 1,
        external_etcd: true,
        kube_minor: 33,
        groups: vec![Group {
            count: 1,
            autoscale: false,
            label: None,
            lag: 0,
            tainted: false,
        }],
        memory: 8192,
        cp_label: None,
    };
    let (a, b) = (
        immutable(&render_spec(&s)),
        immutable(&render_spec(&apply(&s, &Mutation::Kube(34)))),
    );
    let machine_templates: Vec<_> = a
        .iter()
        .filter(|((kind, _), _)| kind == "DevMachineTemplate")
        .collect();
    assert_eq!(machine_templates.len(), 3, "{a:#?}");
    for (key, (name, spec)) in machine_templates {
        let image = spec
            .pointer("/template/metadata/annotations/capstan.dev~1node-image")
            .and_then(Value::as_str)
            .unwrap_or_default();
        assert!(image.contains("1-33"), "{key:?}: {spec}");
        assert_ne!(&b[key].0, name, "{key:?} keeps its name across 1.33 → 1.34");
    }
}

/// Label values that YAML would read as another type (`null`, `true`, `no`, a number) stay
/// strings when quoted in the spec, and the render keeps them strings in every object it writes.
#[test]
fn label_values_yaml_reads_as_other_types_render_as_strings() {
    for value in ["null", "true", "no", "on", "1", "0x1f"] {
        let s = Spec {
            vsphere: false,
            in_memory: false,
            cp_count: 1,
            external_etcd: false,
            kube_minor: 33,
            groups: vec![Group {
                count: 1,
                autoscale: false,
                label: Some(value.to_string()),
                lag: 0,
                tainted: false,
            }],
            memory: 8192,
            cp_label: Some(value.to_string()),
        };
        let objs = render_spec(&s);
        let text = yaml::to_string_multi(&objs);
        let cluster = objs
            .iter()
            .find(|o| {
                o["kind"] == "Cluster" && o["apiVersion"].as_str().unwrap().starts_with("anywhere")
            })
            .expect("the EKS-A Cluster");
        for pointer in [
            "/spec/workerNodeGroupConfigurations/0/labels/team",
            "/spec/controlPlaneConfiguration/labels/role",
        ] {
            assert_eq!(
                cluster.pointer(pointer),
                Some(&Value::String(value.to_string())),
                "{value} at {pointer}: {text}"
            );
        }
        assert!(
            text.contains(&format!("team={value}")),
            "{value}: node-labels lose it: {text}"
        );
    }
}
