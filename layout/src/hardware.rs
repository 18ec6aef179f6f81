//! A bare-metal inventory for the repository: EKS Anywhere's hardware CSV read into the objects
//! the Tinkerbell stack works from, for `capstan hardware import`.
//!
//! Each row of the CSV (`hostname, bmc_ip, bmc_username, bmc_password, mac, ip_address, netmask,
//! gateway, nameservers, labels, disk`, optionally `vlan_id`; nameservers and labels separated by
//! `|`) becomes, as EKS Anywhere's `generate hardware` writes it: a Hardware (tinkerbell.org: the
//! machine's disk, its one interface with a static address, netboot allowed, its labels) and,
//! when the row names a BMC, a Rufio Machine `bmc-<hostname>` (bmc.tinkerbell.org: the BMC's
//! address, Redfish preferred) and its credentials Secret `bmc-<hostname>-auth`. The Secret is the
//! only object with anything secret in it; the command encrypts it with SOPS before anything
//! is written, so the password never reaches the disk in plain text.
//!
//! The rows are checked as EKS Anywhere's validator checks them (addresses, MAC, hostname as a
//! DNS subdomain, disk path, label syntax, BMC fields all or none, VLAN 1-4094, no hostname, MAC,
//! IP or BMC address twice), every problem named with its line; a file with one is refused
//! whole. A `--cluster` import labels every Hardware `cluster.x-k8s.io/cluster-name: <cluster>`,
//! the label a workload cluster's machines must select (the tenancy table's
//! TinkerbellMachineTemplate rows).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::{Value, json};

use crate::tenancy::CLUSTER_NAME_LABEL;

/// One machine of the inventory, as its CSV row says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Machine {
    /// The row's line in the file (1-based; the header is line 1).
    pub line: usize,
    /// Hostname, the Hardware's name.
    pub hostname: String,
    /// The address it gets (static, from the Hardware).
    pub ip_address: String,
    /// Its netmask.
    pub netmask: String,
    /// Its gateway.
    pub gateway: String,
    /// Its name servers.
    pub nameservers: Vec<String>,
    /// The MAC address of the interface it boots from.
    pub mac: String,
    /// The disk the OS image is written to.
    pub disk: String,
    /// Labels machine configs select it by.
    pub labels: BTreeMap<String, String>,
    /// The BMC's address, user and password (empty: no BMC).
    pub bmc: Option<(String, String, String)>,
    /// VLAN ID (empty: untagged).
    pub vlan_id: String,
}

/// A problem of the file, with its line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The line (1-based).
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

/// The columns EKS Anywhere's CSV has; `vlan_id` may be left out.
const COLUMNS: &[&str] = &[
    "hostname",
    "bmc_ip",
    "bmc_username",
    "bmc_password",
    "mac",
    "ip_address",
    "netmask",
    "gateway",
    "nameservers",
    "labels",
    "disk",
];

/// Reads and checks an EKS Anywhere hardware CSV: every machine, or every problem found.
pub fn read_csv(text: &str) -> Result<Vec<Machine>, Vec<Problem>> {
    let mut reader = csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .flexible(false)
        .from_reader(text.as_bytes());
    let problem = |line: usize, message: String| Problem { line, message };
    let headers = match reader.headers() {
        Ok(h) => h.clone(),
        Err(e) => return Err(vec![problem(1, format!("not a CSV file: {e}"))]),
    };
    let index: BTreeMap<&str, usize> = headers.iter().enumerate().map(|(i, h)| (h, i)).collect();
    let missing: Vec<&str> = COLUMNS
        .iter()
        .copied()
        .filter(|c| !index.contains_key(c))
        .collect();
    if !missing.is_empty() {
        return Err(vec![problem(
            1,
            format!(
                "the header lacks {} (EKS Anywhere's columns: {}, and optionally vlan_id)",
                missing.join(", "),
                COLUMNS.join(",")
            ),
        )]);
    }
    let mut machines = Vec::new();
    let mut problems = Vec::new();
    for record in reader.records() {
        let record = match record {
            Ok(r) => r,
            Err(e) => {
                let line = e.position().map(|p| p.line() as usize).unwrap_or(0);
                problems.push(problem(line, format!("unreadable row: {e}")));
                continue;
            }
        };
        let line = record.position().map(|p| p.line() as usize).unwrap_or(0);
        let field = |name: &str| {
            index
                .get(name)
                .and_then(|&i| record.get(i))
                .unwrap_or("")
                .to_string()
        };
        let mut labels = BTreeMap::new();
        let raw_labels = field("labels");
        if !raw_labels.is_empty() {
            for pair in raw_labels.split('|') {
                match pair.trim().split_once('=') {
                    Some((k, v)) if !v.contains('=') => {
                        labels.insert(k.trim().to_string(), v.trim().to_string());
                    }
                    _ => problems.push(problem(
                        line,
                        format!("label `{pair}` is not key=value (labels are separated by |)"),
                    )),
                }
            }
        }
        let (bmc_ip, bmc_user, bmc_password) = (
            field("bmc_ip"),
            field("bmc_username"),
            field("bmc_password"),
        );
        let bmc = (!bmc_ip.is_empty() || !bmc_user.is_empty() || !bmc_password.is_empty())
            .then_some((bmc_ip, bmc_user, bmc_password));
        let raw_ns = field("nameservers");
        machines.push(Machine {
            line,
            hostname: field("hostname"),
            ip_address: field("ip_address"),
            netmask: field("netmask"),
            gateway: field("gateway"),
            nameservers: if raw_ns.is_empty() {
                Vec::new()
            } else {
                raw_ns.split('|').map(|s| s.trim().to_string()).collect()
            },
            mac: field("mac"),
            disk: field("disk"),
            labels,
            bmc,
            vlan_id: field("vlan_id"),
        });
    }
    if machines.is_empty() && problems.is_empty() {
        problems.push(problem(1, "no machines: the file has a header only".into()));
    }
    for m in &machines {
        for message in check(m) {
            problems.push(problem(m.line, message));
        }
    }
    problems.extend(duplicates(&machines));
    if problems.is_empty() {
        Ok(machines)
    } else {
        problems.sort_by_key(|p| p.line);
        Err(problems)
    }
}

fn is_ip(s: &str) -> bool {
    s.parse::<std::net::IpAddr>().is_ok()
}

fn is_mac(s: &str) -> bool {
    let parts: Vec<&str> = s.split(':').collect();
    parts.len() == 6
        && parts
            .iter()
            .all(|p| p.len() == 2 && p.chars().all(|c| c.is_ascii_hexdigit()))
}

/// A DNS-1123 subdomain (what a Kubernetes object's name may be).
fn is_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

/// A label value: empty, or up to 63 alphanumerics with `-`, `_`, `.` inside.
fn is_label_value(v: &str) -> bool {
    v.is_empty()
        || (v.len() <= 63
            && v.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            && v.starts_with(|c: char| c.is_ascii_alphanumeric())
            && v.ends_with(|c: char| c.is_ascii_alphanumeric()))
}

/// A label key: `[prefix/]name`, the prefix a DNS subdomain, the name a label value of 1-63.
fn is_label_key(k: &str) -> bool {
    let (prefix, name) = match k.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    prefix.is_none_or(is_subdomain) && !name.is_empty() && is_label_value(name)
}

/// What EKS Anywhere's validator refuses in one row.
fn check(m: &Machine) -> Vec<String> {
    let mut out = Vec::new();
    let mut need_ip = |name: &str, v: &str| {
        if v.is_empty() {
            out.push(format!("{name} is empty"));
        } else if !is_ip(v) {
            out.push(format!("{name} `{v}` is not an IP address"));
        }
    };
    need_ip("ip_address", &m.ip_address);
    need_ip("gateway", &m.gateway);
    if m.netmask.is_empty() {
        out.push("netmask is empty".into());
    }
    if m.nameservers.is_empty() {
        out.push("nameservers is empty".into());
    } else if m.nameservers.iter().any(String::is_empty) {
        out.push("nameservers has an empty entry".into());
    }
    if m.mac.is_empty() {
        out.push("mac is empty".into());
    } else if !is_mac(&m.mac) {
        out.push(format!(
            "mac `{}` is not a MAC address (six hex pairs separated by :)",
            m.mac
        ));
    }
    if m.hostname.is_empty() {
        out.push("hostname is empty".into());
    } else if !is_subdomain(&m.hostname) {
        out.push(format!(
            "hostname `{}` must be a DNS-1123 subdomain (it names the Hardware)",
            m.hostname
        ));
    }
    let disk_ok = m.disk.starts_with("/dev/")
        && m.disk[1..].split('/').skip(1).all(|p| {
            !p.is_empty()
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_-".contains(c))
        });
    if !disk_ok {
        out.push(format!(
            "disk `{}` must be a device path such as /dev/sda or /dev/nvme0n1",
            m.disk
        ));
    }
    for (k, v) in &m.labels {
        if !is_label_key(k) {
            out.push(format!("label key `{k}` is not a Kubernetes label key"));
        }
        if !is_label_value(v) {
            out.push(format!(
                "label value `{v}` of `{k}` is not a Kubernetes label value"
            ));
        }
    }
    if let Some((ip, user, password)) = &m.bmc {
        if ip.is_empty() {
            out.push("bmc_ip is empty while the row names a BMC user or password".into());
        } else if !is_ip(ip) {
            out.push(format!("bmc_ip `{ip}` is not an IP address"));
        }
        if user.is_empty() {
            out.push("bmc_username is empty while the row names a BMC".into());
        }
        if password.is_empty() {
            out.push("bmc_password is empty while the row names a BMC".into());
        }
    }
    if !m.vlan_id.is_empty()
        && !m
            .vlan_id
            .parse::<u32>()
            .is_ok_and(|v| (1..=4094).contains(&v))
    {
        out.push(format!("vlan_id `{}` must be 1 to 4094", m.vlan_id));
    }
    out
}

/// Hostnames, MACs, IP addresses and BMC addresses written twice.
fn duplicates(machines: &[Machine]) -> Vec<Problem> {
    let mut out = Vec::new();
    let mut seen: BTreeMap<(&str, String), usize> = BTreeMap::new();
    for m in machines {
        let mut keys = vec![
            ("hostname", m.hostname.clone()),
            ("mac", m.mac.to_ascii_lowercase()),
            ("ip_address", m.ip_address.clone()),
        ];
        if let Some((ip, _, _)) = &m.bmc {
            keys.push(("bmc_ip", ip.clone()));
        }
        for (what, v) in keys {
            if v.is_empty() {
                continue;
            }
            if let Some(first) = seen.get(&(what, v.clone())) {
                out.push(Problem {
                    line: m.line,
                    message: format!("{what} `{v}` is also on line {first}"),
                });
            } else {
                seen.insert((what, v), m.line);
            }
        }
    }
    out
}

/// The BMC's objects' names: the Rufio Machine and its credentials Secret.
pub fn bmc_names(hostname: &str) -> (String, String) {
    (format!("bmc-{hostname}"), format!("bmc-{hostname}-auth"))
}

/// The Hardware of a machine in `namespace`, labelled for `cluster` when given.
pub fn hardware(m: &Machine, namespace: &str, cluster: Option<&str>) -> Value {
    let mut labels = m.labels.clone();
    if let Some(c) = cluster {
        labels.insert(CLUSTER_NAME_LABEL.to_string(), c.to_string());
    }
    let mut dhcp = json!({
        "arch": "x86_64",
        "mac": m.mac,
        "hostname": m.hostname,
        "ip": {"address": m.ip_address, "netmask": m.netmask, "gateway": m.gateway, "family": 4},
        "name_servers": m.nameservers,
        // EKS Anywhere's longest lease (its machines keep their address for good).
        "lease_time": 4_294_967_294u64,
        "uefi": true,
    });
    if !m.vlan_id.is_empty() {
        dhcp["vlan_id"] = json!(m.vlan_id);
    }
    let mut spec = json!({
        "disks": [{"device": m.disk}],
        "metadata": {
            "facility": {"facility_code": "onprem", "plan_slug": "c2.medium.x86"},
            "instance": {
                "id": m.mac,
                "hostname": m.hostname,
                "ips": [{"address": m.ip_address, "netmask": m.netmask, "gateway": m.gateway, "family": 4, "public": true}],
                "operating_system": {},
                "allow_pxe": true,
                "always_pxe": true,
            },
        },
        "interfaces": [{"netboot": {"allowPXE": true, "allowWorkflow": true}, "dhcp": dhcp}],
    });
    if m.bmc.is_some() {
        spec["bmcRef"] = json!({"kind": "Machine", "name": bmc_names(&m.hostname).0});
    }
    let mut meta = json!({"name": m.hostname, "namespace": namespace});
    if !labels.is_empty() {
        meta["labels"] = json!(labels);
    }
    json!({"apiVersion": "tinkerbell.org/v1alpha1", "kind": "Hardware", "metadata": meta, "spec": spec})
}

/// The Rufio Machine of a machine's BMC (None without one): its address, the Secret with its
/// credentials, Redfish preferred as EKS Anywhere prefers it.
pub fn bmc_machine(m: &Machine, namespace: &str) -> Option<Value> {
    let (ip, _, _) = m.bmc.as_ref()?;
    let (name, secret) = bmc_names(&m.hostname);
    Some(json!({
        "apiVersion": "bmc.tinkerbell.org/v1alpha1",
        "kind": "Machine",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"connection": {
            "host": ip,
            "authSecretRef": {"name": secret, "namespace": namespace},
            "insecureTLS": true,
            "providerOptions": {"preferredOrder": ["gofish"]},
        }},
    }))
}

/// The BMC credentials Secret (None without a BMC), in plain text: the caller encrypts it.
pub fn bmc_secret(m: &Machine, namespace: &str) -> Option<Value> {
    let (_, user, password) = m.bmc.as_ref()?;
    let (_, secret) = bmc_names(&m.hostname);
    Some(json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": secret, "namespace": namespace,
            "labels": {"clusterctl.cluster.x-k8s.io/move": "true"}},
        "type": "kubernetes.io/basic-auth",
        "stringData": {"username": user, "password": password},
    }))
}

/// The labels of every Hardware in `objects` (values as written), by name: what a machine
/// config's selector is matched against.
pub fn inventory(objects: &[Value]) -> BTreeMap<String, BTreeMap<String, String>> {
    objects
        .iter()
        .filter(|o| {
            o["kind"] == "Hardware"
                && o["apiVersion"]
                    .as_str()
                    .is_some_and(|a| a.starts_with("tinkerbell.org/"))
        })
        .filter_map(|o| {
            let name = o["metadata"]["name"].as_str()?.to_string();
            let labels = o["metadata"]["labels"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                        .collect()
                })
                .unwrap_or_default();
            Some((name, labels))
        })
        .collect()
}

/// The hostnames of an import, to refuse one already in the repository.
pub fn hostnames(machines: &[Machine]) -> BTreeSet<&str> {
    machines.iter().map(|m| m.hostname.as_str()).collect()
}

/// A Kubernetes label selector (matchLabels and matchExpressions) against `labels`.
pub fn selects(selector: &Value, labels: &BTreeMap<String, String>) -> bool {
    let by_labels = selector["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
        .all(|(k, v)| labels.get(k).map(String::as_str) == v.as_str());
    let by_expressions = selector["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
        .all(|e| {
            let key = e["key"].as_str().unwrap_or("");
            let values: Vec<&str> = e["values"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let have = labels.get(key).map(String::as_str);
            match e["operator"].as_str() {
                Some("In") => have.is_some_and(|h| values.contains(&h)),
                Some("NotIn") => have.is_none_or(|h| !values.contains(&h)),
                Some("Exists") => have.is_some(),
                Some("DoesNotExist") => have.is_none(),
                _ => false,
            }
        });
    by_labels && by_expressions
}

/// Whether a TinkerbellMachineTemplate's `hardwareAffinity` lets CAPT take Hardware labelled
/// `labels`: one of its required terms selects it (the preferred terms only rank).
pub fn affinity_selects(affinity: &Value, labels: &BTreeMap<String, String>) -> bool {
    affinity["required"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|term| selects(&term["labelSelector"], labels))
}

/// The label CAPT marks the Hardware a machine holds with (the machine's name): Hardware
/// without it is free.
pub const OWNER_LABEL: &str = "v1alpha1.tinkerbell.org/ownerName";

#[cfg(test)]
mod tests {
    use super::*;

    const CSV: &str = "hostname,bmc_ip,bmc_username,bmc_password,mac,ip_address,netmask,gateway,nameservers,labels,disk
cp-1,192.168.0.10,Admin,s3cret,00:00:00:00:00:01,10.10.10.10,255.255.255.0,10.10.10.1,1.1.1.1|8.8.8.8,type=cp|rack=r1,/dev/sda
worker-1,,,,00:00:00:00:00:02,10.10.10.11,255.255.255.0,10.10.10.1,1.1.1.1,type=worker,/dev/nvme0n1
";

    #[test]
    fn rows_become_hardware_bmc_machines_and_secrets() {
        let machines = read_csv(CSV).unwrap();
        assert_eq!(machines.len(), 2);
        assert_eq!(machines[0].line, 2);
        assert_eq!(machines[0].nameservers, ["1.1.1.1", "8.8.8.8"]);
        let h = hardware(&machines[0], "eksa-system", Some("w1"));
        assert_eq!(h["metadata"]["labels"]["type"], "cp");
        assert_eq!(h["metadata"]["labels"][CLUSTER_NAME_LABEL], "w1");
        assert_eq!(h["spec"]["bmcRef"]["name"], "bmc-cp-1");
        assert_eq!(
            h["spec"]["interfaces"][0]["dhcp"]["mac"],
            "00:00:00:00:00:01"
        );
        let b = bmc_machine(&machines[0], "eksa-system").unwrap();
        assert_eq!(
            b["spec"]["connection"]["authSecretRef"]["name"],
            "bmc-cp-1-auth"
        );
        let s = bmc_secret(&machines[0], "eksa-system").unwrap();
        assert_eq!(s["stringData"]["password"], "s3cret");
        // No BMC: no Rufio Machine, no Secret, no bmcRef.
        assert!(bmc_machine(&machines[1], "eksa-system").is_none());
        assert!(bmc_secret(&machines[1], "eksa-system").is_none());
        assert!(
            hardware(&machines[1], "eksa-system", None)["spec"]
                .get("bmcRef")
                .is_none()
        );
        assert_eq!(
            inventory(&[h]).get("cp-1").map(|l| l["rack"].as_str()),
            Some("r1")
        );
    }

    #[test]
    fn every_bad_row_is_named_with_its_line() {
        let text = "hostname,bmc_ip,bmc_username,bmc_password,mac,ip_address,netmask,gateway,nameservers,labels,disk,vlan_id
Bad_Host,192.168.0.10,Admin,,00:00:00:00:00:0g,10.10.10.300,255.255.255.0,10.10.10.1,,type,sda,5000
ok-1,,,,00:00:00:00:00:02,10.10.10.11,255.255.255.0,10.10.10.1,1.1.1.1,type=worker,/dev/sdb,
ok-2,,,,00:00:00:00:00:02,10.10.10.11,255.255.255.0,10.10.10.1,1.1.1.1,type=worker,/dev/sdb,
";
        let problems = read_csv(text).unwrap_err();
        let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
        for want in [
            "line 2: label `type` is not key=value",
            "line 2: ip_address `10.10.10.300` is not an IP address",
            "line 2: nameservers is empty",
            "line 2: mac `00:00:00:00:00:0g` is not a MAC address",
            "line 2: hostname `Bad_Host` must be a DNS-1123 subdomain",
            "line 2: disk `sda` must be a device path",
            "line 2: bmc_password is empty while the row names a BMC",
            "line 2: vlan_id `5000` must be 1 to 4094",
            "line 4: mac `00:00:00:00:00:02` is also on line 3",
            "line 4: ip_address `10.10.10.11` is also on line 3",
        ] {
            assert!(
                text.iter().any(|t| t.starts_with(want)),
                "{want}: {text:#?}"
            );
        }
        assert!(
            read_csv("hostname,mac\nx,y\n").unwrap_err()[0]
                .message
                .contains("the header lacks")
        );
    }
}
