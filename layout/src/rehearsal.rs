//! The repository a rehearsal runs: the clusters a change touches, moved onto CAPD's in-memory
//! backend, and nothing else.
//!
//! `capstan rehearse` applies a pull request's base revision and then its head through the
//! agent's own pass, on a local management cluster where Cluster API simulates the machines. It
//! does not apply the repository as it is: every cluster would be created, and the real ones
//! name vCenters and VM templates that do not exist here. It applies [`stand_in`]'s tree:
//!
//! ```text
//! clusters/<mgmt>/*.yaml                       the management cluster's spec, mapped (workloads
//!                                              are validated against it); reconciled only when
//!                                              it is one of the rehearsed clusters
//! clusters/<mgmt>/fleet.yaml, suspend.yaml …   as they are (waves, windows, health gates)
//! clusters/<mgmt>/workload-clusters/<name>/    each rehearsed cluster's files, mapped
//!                                              (`capstan_templates::rehearsal::in_memory`)
//! any other cluster directory                  left out
//! ```
//!
//! What a mapping cannot carry over is kept per cluster, at the file and line it was written,
//! for the rehearsal's report. Pure: one tree in, one tree out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use capstan_templates::rehearsal::{NotCarried, in_memory};
use capstan_templates::spec::SourceDoc;

use crate::fleet::Fleet;
use crate::tree::{Entry, Tree};

/// The tree a rehearsal applies, and what each rehearsed cluster does not have there.
#[derive(Debug, Clone, Default)]
pub struct Rehearsal {
    /// The repository to reconcile.
    pub tree: Tree,
    /// Per cluster (every cluster whose directory was mapped), what did not carry over.
    pub not_carried: BTreeMap<String, Vec<NotCarried>>,
}

fn is_yaml(p: &Path) -> bool {
    p.extension().is_some_and(|e| e == "yaml" || e == "yml")
}

/// `tree` (whose loaded fleet is `fleet`) reduced to the clusters named in `names` and their
/// management clusters, each moved onto the in-memory backend (see the module's overview).
/// Names absent from `fleet` are ignored.
pub fn stand_in(tree: &Tree, fleet: &Fleet, names: &BTreeSet<String>) -> Rehearsal {
    // Every cluster directory of the fleet, and whether it is kept (and as which cluster).
    let mut kept: BTreeMap<&Path, &str> = BTreeMap::new();
    for c in fleet.clusters.iter().filter(|c| names.contains(&c.name)) {
        kept.insert(&c.dir, &c.name);
        if let Some(m) = fleet.clusters.iter().find(|m| m.name == c.management()) {
            kept.insert(&m.dir, &m.name);
        }
    }
    let dirs: BTreeSet<&Path> = fleet.clusters.iter().map(|c| c.dir.as_path()).collect();
    let mut out = Rehearsal::default();
    // The YAML files of each kept directory, mapped together (a machine config may sit in
    // another file than the cluster that names it).
    let mut docs: BTreeMap<&Path, Vec<SourceDoc>> = BTreeMap::new();
    let mut sealed_left_out: Vec<(String, PathBuf)> = Vec::new();
    for (path, entry) in &tree.entries {
        let parent = path.parent().unwrap_or(Path::new(""));
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let own_file = name == crate::config::FILE || name == crate::intent::SUSPEND_FILE;
        let cluster_dir = dirs
            .iter()
            .find(|d| path.starts_with(d) && path != *d)
            .copied();
        match (cluster_dir, kept.get(parent)) {
            // An encrypted file of a kept cluster's directory: left out (the rehearsal holds no
            // key, and the in-memory backend reads no provider credentials), and said so.
            (_, Some(name)) if !own_file && crate::fleet::sealed::is_sealed_file(tree, path) => {
                sealed_left_out.push((name.to_string(), path.clone()));
            }
            // A file of a kept cluster's directory.
            (_, Some(_)) if !own_file => match entry {
                Entry::File(bytes) if is_yaml(path) => {
                    let parsed = std::str::from_utf8(bytes)
                        .ok()
                        .and_then(|t| capstan_templates::yaml::parse(t).ok());
                    match parsed {
                        Some(parsed) => {
                            docs.entry(parent)
                                .or_default()
                                .extend(parsed.into_iter().map(|doc| SourceDoc {
                                    file: path.clone(),
                                    doc,
                                }))
                        }
                        // Validation says what is wrong with it, at its line.
                        None => {
                            out.tree.entries.insert(path.clone(), entry.clone());
                        }
                    }
                }
                _ => {
                    out.tree.entries.insert(path.clone(), entry.clone());
                }
            },
            // A fleet config or suspension beside a management cluster's spec: kept, the
            // rehearsal is paced as the real fleet is.
            (Some(d), _) if own_file && parent == d && kept.contains_key(d) => {
                out.tree.entries.insert(path.clone(), entry.clone());
            }
            // Any other cluster's files: left out.
            (Some(_), _) => {}
            // Outside every cluster directory.
            (None, _) => {
                out.tree.entries.insert(path.clone(), entry.clone());
            }
        }
    }
    for (dir, docs) in docs {
        let stand_in = in_memory(&docs);
        let mut files: BTreeMap<PathBuf, Vec<String>> = BTreeMap::new();
        for d in &stand_in.docs {
            files
                .entry(d.file.clone())
                .or_default()
                .push(capstan_templates::yaml::to_string(&d.doc.value));
        }
        for (file, texts) in files {
            out.tree.insert(file, texts.join("---\n"));
        }
        if let Some(name) = kept.get(dir) {
            out.not_carried
                .insert(name.to_string(), stand_in.not_carried);
        }
    }
    for (name, file) in sealed_left_out {
        out.not_carried.entry(name).or_default().push(NotCarried {
            file,
            pos: capstan_templates::yaml::Pos { line: 1, column: 1 },
            what: "Secrets encrypted with SOPS: left out (the rehearsal holds no key to decrypt them, and the in-memory backend reads no provider credentials)".into(),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scaffold::{ClusterRequest, plan};

    /// A fleet of a management cluster and `workloads`, scaffolded as `capstan new cluster`
    /// writes them (vSphere workloads, docker management cluster).
    fn fleet(workloads: &[&str]) -> Tree {
        let mut tree = Tree::new();
        let add = |req: ClusterRequest, tree: &mut Tree| {
            for (p, t) in plan(tree, &req).unwrap().files {
                tree.insert(p, t);
            }
        };
        add(
            ClusterRequest {
                name: "mgmt".into(),
                provider: "docker".into(),
                pod_cidr: Some("192.168.0.0/16".into()),
                service_cidr: Some("10.96.0.0/12".into()),
                ..Default::default()
            },
            &mut tree,
        );
        for (i, w) in workloads.iter().enumerate() {
            add(
                ClusterRequest {
                    name: w.to_string(),
                    management: Some("mgmt".into()),
                    provider: "vsphere".into(),
                    pod_cidr: Some(format!("172.{}.0.0/16", 16 + i)),
                    service_cidr: Some(format!("10.{}.0.0/16", 112 + i)),
                    endpoint_host: Some(format!("10.20.0.{}", 10 + i)),
                    values: Some(serde_json::json!({"vsphere": {
                        "server": "vcenter.corp", "datacenter": "dc1",
                        "network": "/dc1/network/prod", "datastore": "/dc1/datastore/ds1",
                        "resourcePool": "/dc1/host/c1/Resources", "template": "/dc1/vm/ubuntu-1.33",
                    }})),
                    ..Default::default()
                },
                &mut tree,
            );
        }
        tree.insert("README.md", "the fleet");
        tree.insert(
            "clusters/mgmt/fleet.yaml",
            "apiVersion: capstan.dev/v1alpha1\nkind: FleetConfig\n",
        );
        tree
    }

    #[test]
    fn an_encrypted_file_is_left_out_and_said_so() {
        let mut tree = fleet(&["a"]);
        let key = age::x25519::Identity::generate();
        let sealed = crate::sops::encrypt(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: a-vsphere-credentials\n  annotations: {capstan.dev/encrypted-for: \"mgmt:a\"}\nstringData:\n  password: hunter2\n",
            &[key.to_public()],
            crate::sops::DATA_ONLY,
            "2026-12-03T00:00:00Z",
        )
        .unwrap();
        let file = "clusters/mgmt/workload-clusters/a/credentials.sops.yaml";
        tree.insert(file, sealed);
        let loaded = crate::load(&tree);
        assert!(!loaded.has_errors(), "{:#?}", loaded.all_diagnostics());
        let r = stand_in(&tree, &loaded, &BTreeSet::from(["a".to_string()]));
        assert!(!r.tree.entries.contains_key(Path::new(file)));
        let said: Vec<String> = r.not_carried["a"].iter().map(ToString::to_string).collect();
        assert!(
            said.iter()
                .any(|s| s.starts_with(file) && s.contains("SOPS")),
            "{said:?}"
        );
        assert!(!crate::load(&r.tree).has_errors());
    }

    #[test]
    fn only_the_rehearsed_clusters_and_their_management_cluster_are_kept_and_mapped() {
        let tree = fleet(&["a", "b"]);
        let loaded = crate::load(&tree);
        assert!(
            !loaded.has_errors(),
            "the scaffolded fleet is valid: {:#?}",
            loaded.all_diagnostics()
        );
        let r = stand_in(&tree, &loaded, &BTreeSet::from(["a".to_string()]));
        let paths: Vec<String> = r
            .tree
            .entries
            .keys()
            .map(|p| p.display().to_string())
            .collect();
        assert!(paths.iter().any(|p| p == "README.md"), "{paths:?}");
        assert!(
            paths.iter().any(|p| p == "clusters/mgmt/fleet.yaml"),
            "{paths:?}"
        );
        assert!(
            paths
                .iter()
                .any(|p| p.starts_with("clusters/mgmt/workload-clusters/a/")),
            "{paths:?}"
        );
        assert!(
            !paths.iter().any(|p| p.contains("workload-clusters/b")),
            "another cluster's directory is left out: {paths:?}"
        );
        // The stand-in validates, and its workload is on the in-memory backend.
        let rehearsed = crate::load(&r.tree);
        assert!(
            !rehearsed.has_errors(),
            "{:#?}",
            rehearsed.all_diagnostics()
        );
        let names: Vec<&str> = rehearsed.clusters.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["mgmt", "a"]);
        let a = rehearsed.cluster("a").unwrap().cluster.clone().unwrap();
        assert!(
            matches!(
                a.provider,
                capstan_templates::spec::Provider::Docker(
                    capstan_templates::spec::DockerBackend::InMemory
                )
            ),
            "{:?}",
            a.provider
        );
        // What vSphere had is listed for the rehearsed cluster, at its file.
        let listed = &r.not_carried["a"];
        assert!(!listed.is_empty());
        assert!(
            listed
                .iter()
                .all(|n| n.file.starts_with("clusters/mgmt/workload-clusters/a")),
            "{listed:?}"
        );
        // The management cluster was docker: its containers become simulated machines.
        assert!(
            r.not_carried["mgmt"]
                .iter()
                .any(|n| n.what.contains("simulates")),
            "{:?}",
            r.not_carried["mgmt"]
        );
    }

    #[test]
    fn a_tombstone_and_other_files_of_a_rehearsed_directory_are_kept_as_they_are() {
        let mut tree = fleet(&["a"]);
        let dir = "clusters/mgmt/workload-clusters/a";
        tree.entries
            .retain(|p, _| !p.ends_with("cluster.yaml") || !p.starts_with(dir));
        let tomb = crate::intent::document("Tombstone", "retired");
        tree.insert(
            format!("{dir}/{}", crate::intent::TOMBSTONE_FILE),
            tomb.clone(),
        );
        tree.insert(format!("{dir}/NOTES.md"), "notes");
        let loaded = crate::load(&tree);
        let r = stand_in(&tree, &loaded, &BTreeSet::from(["a".to_string()]));
        let file = |p: &str| match r.tree.entries.get(Path::new(p)) {
            Some(Entry::File(b)) => String::from_utf8(b.clone()).unwrap(),
            other => panic!("{p}: {other:?}"),
        };
        assert_eq!(file(&format!("{dir}/NOTES.md")), "notes");
        let kept = file(&format!("{dir}/{}", crate::intent::TOMBSTONE_FILE));
        assert!(kept.contains("kind: Tombstone"), "{kept}");
        assert!(
            crate::load(&r.tree)
                .cluster("a")
                .unwrap()
                .intent
                .delete
                .is_some(),
            "the rehearsal deletes it too"
        );
    }

    #[test]
    fn names_not_in_the_fleet_keep_nothing_but_the_files_outside_clusters() {
        let tree = fleet(&["a"]);
        let loaded = crate::load(&tree);
        let r = stand_in(&tree, &loaded, &BTreeSet::from(["nope".to_string()]));
        let paths: Vec<_> = r.tree.entries.keys().collect();
        assert_eq!(paths, [Path::new("README.md")]);
        assert!(r.not_carried.is_empty());
    }
}

#[cfg(test)]
mod health_check {
    use super::*;
    use crate::scaffold::{ClusterRequest, plan};
    use serde_json::Value;

    #[test]
    fn a_health_check_setting_is_carried_into_the_rendered_objects() {
        let mut tree = Tree::new();
        for req in [
            ClusterRequest {
                name: "m".into(),
                provider: "docker".into(),
                docker_backend: Some("in-memory".into()),
                pod_cidr: Some("192.168.0.0/16".into()),
                service_cidr: Some("10.96.0.0/12".into()),
                ..Default::default()
            },
            ClusterRequest {
                name: "w".into(),
                management: Some("m".into()),
                provider: "docker".into(),
                pod_cidr: Some("172.16.0.0/16".into()),
                service_cidr: Some("10.112.0.0/16".into()),
                ..Default::default()
            },
        ] {
            for (p, t) in plan(&tree, &req).unwrap().files {
                tree.insert(p, t);
            }
        }
        let path = PathBuf::from("clusters/m/workload-clusters/w/cluster.yaml");
        let Some(Entry::File(b)) = tree.entries.get(&path) else {
            panic!()
        };
        let text = String::from_utf8(b.clone()).unwrap().replacen(
            "  clusterNetwork:",
            "  machineHealthCheck:\n    nodeStartupTimeout: 10s\n  clusterNetwork:",
            1,
        );
        tree.insert(path, text);
        let fleet = crate::load(&tree);
        let r = stand_in(&tree, &fleet, &BTreeSet::from(["w".to_string()]));
        let rehearsed = crate::load(&r.tree);
        // The rehearsal's machines start at once; the real in-memory cluster's after a boot.
        let startups = |f: &Fleet| -> BTreeSet<String> {
            f.cluster("w")
                .unwrap()
                .objects
                .clone()
                .unwrap()
                .values()
                .iter()
                .filter(|o| o["kind"] == "DevMachineTemplate")
                .flat_map(|o| {
                    let m = &o["spec"]["template"]["spec"]["backend"]["inMemory"];
                    ["vm", "node", "apiServer", "etcd"]
                        .map(|k| m[k]["provisioning"]["startupDuration"].to_string())
                })
                .collect()
        };
        assert_eq!(startups(&rehearsed), BTreeSet::from(["\"0s\"".to_string()]));
        assert_eq!(
            startups(&fleet),
            BTreeSet::from(["\"3s\"".to_string(), "\"1s\"".to_string()])
        );
        for f in [&fleet, &rehearsed] {
            let objects = f.cluster("w").unwrap().objects.clone().unwrap().values();
            let timeouts: Vec<&Value> = objects
                .iter()
                .filter(|o| o["kind"] == "MachineHealthCheck")
                .map(|o| &o["spec"]["checks"]["nodeStartupTimeoutSeconds"])
                .collect();
            assert!(
                !timeouts.is_empty() && timeouts.iter().all(|t| **t == 10),
                "{timeouts:?}"
            );
        }
    }
}
