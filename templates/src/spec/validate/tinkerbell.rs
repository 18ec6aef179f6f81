//! Tinkerbell (bare metal) datacenter, machine and template configs: EKS Anywhere's static checks
//! and the workflow each machine config provisions its machines with.
//!
//! A bare-metal machine is a Hardware object of the Tinkerbell stack; a machine config picks its
//! Hardware by one label (`hardwareSelector`) or by label-selector terms (`hardwareAffinity`),
//! never both, as EKS Anywhere requires. The workflow Tinkerbell runs to install the OS is the
//! TinkerbellTemplateConfig the machine config names, or EKS Anywhere's default for the OS
//! family: stream the image to the first disk, write the network config from the Hardware,
//! point cloud-init at the stack's metadata service, reboot (`default_workflow`, EKS Anywhere
//! v0.26's actions and images). Whether the inventory holds enough Hardware for each selector
//! is a question for the management cluster's Hardware objects, not for the spec alone.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::At;
use crate::diag::{Code, Diagnostic};
use crate::spec::parse::{Parsed, SourceDoc};
use crate::spec::{HardwareChoice, Tinkerbell, TinkerbellMachine, raw};

/// The port of the stack's metadata service (Tootles) in Tinkerbell's chart.
const METADATA_PORT: u16 = 7172;

/// Builds a cluster's Tinkerbell settings from its datacenter config and the directory's
/// machine and template configs, reporting what EKS Anywhere's validation refuses.
pub(super) fn tinkerbell(
    dc: &Parsed<raw::TinkerbellDatacenterSpec>,
    machines: &[Parsed<raw::TinkerbellMachineSpec>],
    templates: &[Parsed<raw::TinkerbellTemplateSpec>],
    docs: &[SourceDoc],
    diags: &mut Vec<Diagnostic>,
    cluster: (&str, &raw::ClusterSpec),
) -> Tinkerbell {
    let proxy = proxy_env(cluster.1);
    let s = &dc.spec;
    let mut at = At {
        sd: &docs[dc.src],
        diags,
    };
    if s.tinkerbell_ip.is_empty() {
        at.err(
            Code::MissingField,
            "spec.tinkerbellIP",
            "TinkerbellDatacenterConfig needs tinkerbellIP, the Tinkerbell stack's address",
        );
    } else if s.tinkerbell_ip.parse::<std::net::IpAddr>().is_err() {
        at.err(
            Code::InvalidValue,
            "spec.tinkerbellIP",
            format!("tinkerbellIP `{}` must be an IP address", s.tinkerbell_ip),
        );
    }
    for (field, v) in [
        ("osImageURL", &s.os_image_url),
        ("hookImagesURLPath", &s.hook_images_url_path),
        ("hookIsoURL", &s.hook_iso_url),
    ] {
        if !v.is_empty() && !is_url(v) {
            at.err(
                Code::InvalidValue,
                &format!("spec.{field}"),
                format!("{field} `{v}` is not a URL"),
            );
        }
    }
    if !s.iso_boot && !s.hook_iso_url.is_empty() {
        at.err(
            Code::InvalidValue,
            "spec.hookIsoURL",
            "hookIsoURL is used only with isoBoot: true",
        );
    }
    let diags = at.diags;
    let mut out = BTreeMap::new();
    for m in machines {
        let mut at = At {
            sd: &docs[m.src],
            diags: &mut *diags,
        };
        let image = if m.spec.os_image_url.is_empty() {
            s.os_image_url.as_str()
        } else {
            m.spec.os_image_url.as_str()
        };
        if image.is_empty() {
            at.err(
                Code::MissingField,
                "spec.osImageURL",
                format!(
                    "TinkerbellMachineConfig `{}` has no OS image: set osImageURL here or on the TinkerbellDatacenterConfig",
                    m.meta.name
                ),
            );
        }
        let named = m.spec.template_ref.as_ref().and_then(|r| {
            if r.kind != "TinkerbellTemplateConfig" {
                at.err(
                    Code::InvalidValue,
                    "spec.templateRef.kind",
                    format!(
                        "templateRef kind `{}` must be TinkerbellTemplateConfig",
                        r.kind
                    ),
                );
                return None;
            }
            let found = templates.iter().find(|t| t.meta.name == r.name);
            if found.is_none() && !super::present(docs, "TinkerbellTemplateConfig", Some(&r.name)) {
                at.err(
                    Code::DanglingRef,
                    "spec.templateRef.name",
                    format!(
                        "TinkerbellTemplateConfig `{}` is not in this cluster directory",
                        r.name
                    ),
                );
            }
            found
        });
        let machine = machine(&mut at, &m.spec, |os| match named {
            Some(t) => workflow_text(&t.spec.template),
            None => workflow_text(&default_workflow(
                cluster.0,
                image,
                &s.tinkerbell_ip,
                os,
                proxy.as_ref(),
            )),
        });
        out.insert(m.meta.name.clone(), machine);
    }
    Tinkerbell {
        tinkerbell_ip: s.tinkerbell_ip.clone(),
        skip_load_balancer: s.skip_load_balancer_deployment,
        iso_boot: s.iso_boot,
        machines: out,
    }
}

/// The proxy settings the default workflow's image download gets: `(http, https, no_proxy)`,
/// the last as EKS Anywhere joins it (the written destinations, the pod and service networks,
/// the control-plane endpoint).
fn proxy_env(spec: &raw::ClusterSpec) -> Option<(String, String, String)> {
    let p = spec.proxy_configuration.as_ref()?;
    let mut no_proxy = p.no_proxy.clone();
    no_proxy.extend(spec.cluster_network.pods.cidr_blocks.iter().cloned());
    no_proxy.extend(spec.cluster_network.services.cidr_blocks.iter().cloned());
    if let Some(e) = &spec.control_plane_configuration.endpoint
        && !e.host.is_empty()
    {
        no_proxy.push(e.host.clone());
    }
    Some((
        p.http_proxy.clone(),
        p.https_proxy.clone(),
        no_proxy.join(","),
    ))
}

/// Whether `s` is an absolute URL (scheme and the rest), as Go's `url.ParseRequestURI` wants.
fn is_url(s: &str) -> bool {
    match s.split_once("://") {
        Some((scheme, rest)) => {
            !scheme.is_empty()
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
                && !rest.is_empty()
                && !s.contains(char::is_whitespace)
        }
        None => s.starts_with('/'),
    }
}

fn machine(
    at: &mut At,
    s: &raw::TinkerbellMachineSpec,
    workflow: impl FnOnce(&str) -> String,
) -> TinkerbellMachine {
    let os_family = s.os_family.clone().unwrap_or_default();
    match os_family.as_str() {
        "ubuntu" | "redhat" => {}
        "" => at.err(
            Code::MissingField,
            "spec",
            "TinkerbellMachineConfig needs osFamily (ubuntu or redhat)",
        ),
        "bottlerocket" => at.err(
            Code::InvalidValue,
            "spec.osFamily",
            "osFamily bottlerocket is not supported: upstream Cluster API's kubeadm bootstrap has no bottlerocket format (EKS Anywhere uses its fork for it); use ubuntu or redhat",
        ),
        other => at.err(
            Code::InvalidValue,
            "spec.osFamily",
            format!("osFamily `{other}` must be one of ubuntu, redhat"),
        ),
    }
    let hardware = match (&s.hardware_affinity, s.hardware_selector.len()) {
        (Some(_), n) if n > 0 => {
            at.err(
                Code::InvalidValue,
                "spec.hardwareAffinity",
                "hardwareSelector and hardwareAffinity are mutually exclusive: keep one",
            );
            HardwareChoice::Selector(s.hardware_selector.clone())
        }
        (Some(a), _) => HardwareChoice::Affinity(affinity(at, a)),
        (None, 0) => {
            at.err(
                Code::MissingField,
                "spec.hardwareSelector",
                "TinkerbellMachineConfig needs hardwareSelector (one label of the Hardware its machines run on) or hardwareAffinity",
            );
            HardwareChoice::Selector(BTreeMap::new())
        }
        (None, 1) => HardwareChoice::Selector(s.hardware_selector.clone()),
        (None, n) => {
            at.err(
                Code::InvalidValue,
                "spec.hardwareSelector",
                format!("hardwareSelector must hold exactly one label (EKS Anywhere's rule), found {n}: use hardwareAffinity to match several"),
            );
            HardwareChoice::Selector(s.hardware_selector.clone())
        }
    };
    // EKS Anywhere's templates write the first user's first key: a machine without one could
    // never be reached, and EKS Anywhere's CLI would have generated one (capstan writes no keys).
    let user = match s.users.first() {
        Some(u) => match u.ssh_authorized_keys.first() {
            Some(k) if !k.trim().is_empty() => (u.name.clone(), k.trim().to_string()),
            _ => {
                at.err(
                    Code::MissingField,
                    "spec.users[0].sshAuthorizedKeys",
                    "the first user of a TinkerbellMachineConfig needs an SSH key",
                );
                (u.name.clone(), String::new())
            }
        },
        None => {
            at.err(
                Code::MissingField,
                "spec.users",
                "TinkerbellMachineConfig needs a user with an SSH key",
            );
            (String::new(), String::new())
        }
    };
    let ntp_servers = super::fields::host_os(at, s.host_os_configuration.as_ref(), "the OS image");
    TinkerbellMachine {
        workflow: workflow(&os_family),
        os_family,
        user,
        hardware,
        ntp_servers,
    }
}

/// A hardware affinity checked as EKS Anywhere checks it, in CAPT's shape.
fn affinity(at: &mut At, a: &raw::HardwareAffinity) -> Value {
    if a.required.is_empty() {
        at.err(
            Code::MissingField,
            "spec.hardwareAffinity.required",
            "hardwareAffinity needs at least one required term",
        );
    }
    let selector = |at: &mut At, sel: &raw::LabelSelector, path: &str| -> Value {
        for (i, e) in sel.match_expressions.iter().enumerate() {
            let p = format!("{path}.labelSelector.matchExpressions[{i}]");
            match e.operator.as_str() {
                "In" | "NotIn" if e.values.is_empty() => at.err(
                    Code::InvalidValue,
                    &format!("{p}.values"),
                    format!("operator {} needs values", e.operator),
                ),
                "Exists" | "DoesNotExist" if !e.values.is_empty() => at.err(
                    Code::InvalidValue,
                    &format!("{p}.values"),
                    format!("operator {} takes no values", e.operator),
                ),
                "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
                other => at.err(
                    Code::InvalidValue,
                    &format!("{p}.operator"),
                    format!("operator `{other}` must be one of In, NotIn, Exists, DoesNotExist"),
                ),
            }
        }
        let mut out = serde_json::Map::new();
        if !sel.match_labels.is_empty() {
            out.insert("matchLabels".into(), json!(sel.match_labels));
        }
        if !sel.match_expressions.is_empty() {
            out.insert(
                "matchExpressions".into(),
                Value::Array(
                    sel.match_expressions
                        .iter()
                        .map(|e| {
                            let mut m = json!({"key": e.key, "operator": e.operator});
                            if !e.values.is_empty() {
                                m["values"] = json!(e.values);
                            }
                            m
                        })
                        .collect(),
                ),
            );
        }
        Value::Object(out)
    };
    let required: Vec<Value> = a
        .required
        .iter()
        .enumerate()
        .map(|(i, t)| {
            json!({"labelSelector": selector(at, &t.label_selector, &format!("spec.hardwareAffinity.required[{i}]"))})
        })
        .collect();
    let preferred: Vec<Value> = a
        .preferred
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let path = format!("spec.hardwareAffinity.preferred[{i}]");
            if !(1..=100).contains(&t.weight) {
                at.err(
                    Code::InvalidValue,
                    &format!("{path}.weight"),
                    format!("weight {} must be between 1 and 100", t.weight),
                );
            }
            json!({
                "weight": t.weight,
                "hardwareAffinityTerm": {"labelSelector": selector(at, &t.hardware_affinity_term.label_selector, &format!("{path}.hardwareAffinityTerm"))},
            })
        })
        .collect();
    let mut out = json!({"required": required});
    if !preferred.is_empty() {
        out["preferred"] = Value::Array(preferred);
    }
    out
}

/// A workflow template as the YAML CAPT hands Tinkerbell (`templateOverride`).
fn workflow_text(w: &raw::TinkerbellWorkflow) -> String {
    crate::yaml::to_string(&serde_json::to_value(w).expect("a workflow is plain data"))
}

/// HookOS's embedded action images (EKS Anywhere v0.26 provisions with these).
const IMAGE2DISK: &str = "127.0.0.1/embedded/image2disk";
const WRITEFILE: &str = "127.0.0.1/embedded/writefile";
const REBOOT: &str = "127.0.0.1/embedded/reboot";

/// The Go template of the first disk, and of its partition `n`, that Tinkerbell's workflow
/// controller fills in from the Hardware.
const DISK: &str = "{{ index .Hardware.Disks 0 }}";
fn partition(n: u32) -> String {
    format!("{{{{ formatPartition ( index .Hardware.Disks 0 ) {n} }}}}")
}

/// The first interface's DHCP settings in Tinkerbell's template language.
const IF0: &str = "(index .Hardware.Interfaces 0).DHCP";

/// netplan configuration (ubuntu) from the Hardware's first interface, VLAN-tagged when the
/// Hardware names a VLAN.
fn netplan() -> String {
    let addr =
        format!("{{{{ {IF0}.IP.Address }}}}/{{{{ netmaskToPrefixLength {IF0}.IP.Netmask }}}}");
    let dns = format!(
        "[{{{{ range $i, $ns := {IF0}.NameServers }}}}{{{{if $i}}}}, {{{{end}}}}{{{{$ns}}}}{{{{end}}}}]"
    );
    let mac = format!("{{{{ {IF0}.MAC }}}}");
    let gw = format!("{{{{ {IF0}.IP.Gateway }}}}");
    let vlan = format!("{{{{ {IF0}.VLANID }}}}");
    let tagged = format!(
        "network:\n    version: 2\n    renderer: networkd\n    ethernets:\n        mainif:\n            match:\n                macaddress: {mac}\n            set-name: mainif\n\n    vlans:\n        vlan{vlan}:\n            id: {vlan}\n            link: mainif\n            addresses:\n            - {addr}\n            nameservers:\n                addresses: {dns}\n            {{{{- if {IF0}.IP.Gateway }}}}\n            routes:\n                - to: default\n                  via: {gw}\n            {{{{- end }}}}\n"
    );
    let plain = format!(
        "network:\n    version: 2\n    renderer: networkd\n    ethernets:\n        id0:\n            match:\n                macaddress: {mac}\n            addresses:\n                - {addr}\n            nameservers:\n                addresses: {dns}\n            routes:\n                - to: default\n                  via: {gw}\n"
    );
    format!("{{{{ if {IF0}.VLANID }}}}{tagged}{{{{ else }}}}{plain}{{{{ end }}}}")
}

/// NetworkManager keyfile (redhat) from the Hardware's first interface.
fn network_manager() -> String {
    let mac = format!("{{{{ {IF0}.MAC }}}}");
    let ipv4 = format!(
        "[ipv4]\naddress1={{{{ {IF0}.IP.Address }}}}/{{{{ netmaskToPrefixLength {IF0}.IP.Netmask }}}}\ndns={{{{ range $i, $ns := {IF0}.NameServers }}}}{{{{if $i}}}};{{{{end}}}}{{{{$ns}}}}{{{{end}}}};\ngateway={{{{ {IF0}.IP.Gateway }}}}\nmethod=manual\n\n[ipv6]\naddr-gen-mode=default\nmethod=ignore\n"
    );
    let tagged = format!(
        "[connection]\nid=vlan-connection\ntype=vlan\nautoconnect=yes\nautoconnect-priority=10\n\n[ethernet]\nmac-address={mac}\n\n[vlan]\nflags=1\nid={{{{ {IF0}.VLANID }}}}\nmac-address={mac}\n\n{ipv4}"
    );
    let plain = format!(
        "[connection]\nid=static-connection\ntype=ethernet\nautoconnect=yes\nautoconnect-priority=10\n\n[ethernet]\nmac-address={mac}\n\n{ipv4}"
    );
    format!("{{{{ if {IF0}.VLANID }}}}{tagged}{{{{ else }}}}{plain}{{{{ end }}}}")
}

fn write_file(
    name: &str,
    disk: &str,
    env: &[(&str, String)],
    pid_host: bool,
) -> raw::TinkerbellAction {
    let mut environment: BTreeMap<String, String> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    environment.insert("DEST_DISK".into(), disk.into());
    raw::TinkerbellAction {
        name: name.into(),
        image: WRITEFILE.into(),
        timeout: 90,
        command: Vec::new(),
        on_timeout: Vec::new(),
        on_failure: Vec::new(),
        volumes: Vec::new(),
        environment,
        pid: if pid_host {
            "host".into()
        } else {
            String::new()
        },
    }
}

/// The file-mode settings of writefile (`dirmode`, `mode`, root-owned, ext4).
fn mode(dirmode: &str, mode: &str) -> Vec<(&'static str, String)> {
    vec![
        ("DIRMODE", dirmode.into()),
        ("FS_TYPE", "ext4".into()),
        ("GID", "0".into()),
        ("MODE", mode.into()),
        ("UID", "0".into()),
    ]
}

/// EKS Anywhere's default workflow for a machine of `os` (ubuntu or redhat) streaming `image`:
/// the image to the first disk, the network config, cloud-init pointed at the stack's metadata
/// service (both of EKS Anywhere's metadata URLs are the stack's address once the management
/// cluster runs it), reboot.
pub(crate) fn default_workflow(
    name: &str,
    image: &str,
    tinkerbell_ip: &str,
    os: &str,
    proxy: Option<&(String, String, String)>,
) -> raw::TinkerbellWorkflow {
    let urls = [
        format!("http://{tinkerbell_ip}:{METADATA_PORT}"),
        format!("http://{tinkerbell_ip}:{METADATA_PORT}"),
    ];
    let mut stream_env: BTreeMap<String, String> = [
        ("DEST_DISK", DISK.to_string()),
        ("IMG_URL", image.to_string()),
        ("COMPRESSED", "true".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    if let Some((http, https, no_proxy)) = proxy {
        stream_env.insert("HTTP_PROXY".into(), http.clone());
        stream_env.insert("HTTPS_PROXY".into(), https.clone());
        let own = format!("{tinkerbell_ip},{tinkerbell_ip}");
        let no_proxy = if no_proxy.is_empty() {
            own
        } else {
            format!("{no_proxy},{own}")
        };
        stream_env.insert("NO_PROXY".into(), no_proxy);
    }
    let mut actions = vec![raw::TinkerbellAction {
        name: "stream image to disk".into(),
        image: IMAGE2DISK.into(),
        timeout: 600,
        command: Vec::new(),
        on_timeout: Vec::new(),
        on_failure: Vec::new(),
        volumes: Vec::new(),
        environment: stream_env,
        pid: String::new(),
    }];
    let (disk, network, metadata) = if os == "redhat" {
        let disk = partition(1);
        let mut env = mode("0755", "0600");
        env.push(("CONTENTS", network_manager()));
        env.push((
            "DEST_PATH",
            "/etc/NetworkManager/system-connections/static-connection.nmconnection".into(),
        ));
        let quoted: Vec<String> = urls.iter().map(|u| format!("'{u}'")).collect();
        (
            disk.clone(),
            write_file("write network manager config", &disk, &env, true),
            quoted.join(","),
        )
    } else {
        let disk = partition(2);
        let mut env = mode("0755", "0644");
        env.push(("CONTENTS", netplan()));
        env.push(("DEST_PATH", "/etc/netplan/config.yaml".into()));
        (
            disk.clone(),
            write_file("write netplan config", &disk, &env, true),
            urls.join(","),
        )
    };
    actions.push(network);
    let mut env = mode("0700", "0600");
    env.push(("CONTENTS", "network: {config: disabled}".into()));
    env.push((
        "DEST_PATH",
        "/etc/cloud/cloud.cfg.d/99-disable-network-config.cfg".into(),
    ));
    actions.push(write_file(
        "disable cloud-init network capabilities",
        &disk,
        &env,
        false,
    ));
    let mut env = mode("0700", "0600");
    env.push((
        "CONTENTS",
        format!("datasource:\n  Ec2:\n    metadata_urls: [{metadata}]\n    strict_id: false\nmanage_etc_hosts: localhost\nwarnings:\n  dsid_missing_source: off\n"),
    ));
    env.push((
        "DEST_PATH",
        "/etc/cloud/cloud.cfg.d/10_tinkerbell.cfg".into(),
    ));
    actions.push(write_file("add cloud-init config", &disk, &env, false));
    let mut env = mode("0700", "0600");
    env.push(("CONTENTS", "datasource: Ec2\n".into()));
    env.push(("DEST_PATH", "/etc/cloud/ds-identify.cfg".into()));
    actions.push(write_file("add cloud-init ds config", &disk, &env, false));
    actions.push(raw::TinkerbellAction {
        name: "reboot".into(),
        image: REBOOT.into(),
        timeout: 90,
        command: Vec::new(),
        on_timeout: Vec::new(),
        on_failure: Vec::new(),
        volumes: vec!["/worker:/worker".into()],
        environment: BTreeMap::new(),
        pid: "host".into(),
    });
    raw::TinkerbellWorkflow {
        version: "0.1".into(),
        name: name.into(),
        id: String::new(),
        global_timeout: 6000,
        tasks: vec![raw::TinkerbellTask {
            name: name.into(),
            worker: "{{.device_1}}".into(),
            actions,
            volumes: vec![
                "/dev:/dev".into(),
                "/dev/console:/dev/console".into(),
                "/lib/firmware:/lib/firmware:ro".into(),
            ],
            environment: BTreeMap::new(),
        }],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_absolute() {
        assert!(is_url("https://images.example.com/ubuntu.gz"));
        assert!(is_url("/images/ubuntu.gz"));
        assert!(!is_url("images.example.com/ubuntu.gz"));
        assert!(!is_url("https://"));
        assert!(!is_url("https://a b"));
    }

    #[test]
    fn the_default_workflow_writes_the_network_for_the_os_family() {
        let u = default_workflow("c", "https://i/u.gz", "10.0.0.2", "ubuntu", None);
        let names: Vec<&str> = u.tasks[0].actions.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "stream image to disk",
                "write netplan config",
                "disable cloud-init network capabilities",
                "add cloud-init config",
                "add cloud-init ds config",
                "reboot"
            ]
        );
        assert!(
            u.tasks[0].actions[3].environment["CONTENTS"]
                .contains("[http://10.0.0.2:7172,http://10.0.0.2:7172]")
        );
        let r = default_workflow("c", "https://i/r.gz", "10.0.0.2", "redhat", None);
        assert_eq!(r.tasks[0].actions[1].name, "write network manager config");
        assert_eq!(
            r.tasks[0].actions[1].environment["DEST_DISK"],
            "{{ formatPartition ( index .Hardware.Disks 0 ) 1 }}"
        );
        assert!(
            r.tasks[0].actions[3].environment["CONTENTS"]
                .contains("['http://10.0.0.2:7172','http://10.0.0.2:7172']")
        );
    }
}
