//! A stand-in for the kubelet (there are no nodes here): runs the container of a Deployment that
//! is on the API server as the kubelet would run it, with the locally built `capstan` binary in
//! place of the image.
//!
//! What it does as the kubelet does: the container's args and env (plain values, the downward
//! API's pod name and namespace, Secret keys), Secret volumes at their mount paths (files
//! `root:<fsGroup>`, the volume's mode), `emptyDir` volumes and PersistentVolumeClaim volumes
//! (an empty tmpfs: no storage here; the claim must exist), the ServiceAccount token (from the
//! TokenRequest API), `ca.crt` and `namespace` at `/var/run/secrets/kubernetes.io/serviceaccount`,
//! `KUBERNETES_SERVICE_HOST`/`PORT`, and the pod's `runAsUser`/`runAsGroup`. The files are
//! mounted in a private mount namespace (`unshare -m`, a tmpfs over `/run` and `/tmp`), so the
//! agent finds them at the real paths and nothing on the machine changes but a missing mount
//! point, created (`/var/lib/capstan/backups`). What it does not:
//! pull images, isolate the network (the container's ports are remapped to free loopback ports,
//! [`Pod::ports`]), enforce limits.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use capstan_harness::ControlPlane;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;

use super::free_port;

/// A running "pod"; killed on drop.
pub struct Pod {
    pub child: Child,
    /// Container port → the loopback port it listens on here.
    pub ports: BTreeMap<u16, u16>,
    pub log: PathBuf,
    _stage: tempfile::TempDir,
}

impl Drop for Pod {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Pod {
    /// What the container logged.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// Writes `data` to `path` (parents created) with `mode`, and group `gid` if given.
fn write_with_mode(path: &Path, data: &[u8], mode: u32, gid: Option<u32>) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, data).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    if let Some(g) = gid {
        std::os::unix::fs::chown(path, Some(0), Some(g)).unwrap();
    }
}

/// Starts the first container of Deployment `namespace/name` as pod `pod_name`.
pub async fn run_deployment(
    cp: &ControlPlane,
    namespace: &str,
    name: &str,
    pod_name: &str,
    log: &Path,
) -> Pod {
    let client = cp.client();
    let d = Api::<Deployment>::namespaced(client.clone(), namespace)
        .get(name)
        .await
        .unwrap();
    let spec = d.spec.unwrap().template.spec.unwrap();
    let c = spec.containers[0].clone();
    let security = spec.security_context.clone().unwrap_or_default();
    let (uid, gid) = (
        security.run_as_user,
        security.run_as_group.or(security.fs_group),
    );
    let fs_group = security.fs_group.map(|g| g as u32);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let stage = tempfile::tempdir().unwrap();
    let root = stage.path().join("root");

    // Volumes.
    let mut empty_dirs = Vec::new();
    for m in c.volume_mounts.iter().flatten() {
        let v = spec
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == m.name)
            .unwrap();
        if let Some(s) = &v.secret {
            let secret_name = s.secret_name.clone().unwrap();
            let mode = s.default_mode.unwrap_or(0o644) as u32;
            match secrets.get_opt(&secret_name).await.unwrap() {
                Some(secret) => {
                    for (k, data) in secret.data.unwrap_or_default() {
                        let path = root.join(m.mount_path.trim_start_matches('/')).join(&k);
                        write_with_mode(&path, &data.0, mode, fs_group);
                    }
                }
                None if s.optional.unwrap_or(false) => {}
                None => {
                    panic!("secret {secret_name} not found: the kubelet would not start the pod")
                }
            }
        } else if v.empty_dir.is_some() {
            empty_dirs.push(m.mount_path.clone());
        } else if let Some(claim) = &v.persistent_volume_claim {
            // No storage here: the claim must exist (the kubelet would wait for it), and its
            // volume is an empty directory of the pod's.
            let claims: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
                Api::namespaced(client.clone(), namespace);
            assert!(
                claims.get_opt(&claim.claim_name).await.unwrap().is_some(),
                "claim {} not found: the kubelet would not start the pod",
                claim.claim_name
            );
            empty_dirs.push(m.mount_path.clone());
        }
    }
    // The ServiceAccount.
    let sa = spec
        .service_account_name
        .clone()
        .unwrap_or("default".into());
    let token = cp.service_account_token(namespace, &sa).await.unwrap();
    let sa_dir = root.join("var/run/secrets/kubernetes.io/serviceaccount");
    write_with_mode(&sa_dir.join("token"), token.as_bytes(), 0o644, fs_group);
    write_with_mode(
        &sa_dir.join("ca.crt"),
        cp.ca_pem().as_bytes(),
        0o644,
        fs_group,
    );
    write_with_mode(
        &sa_dir.join("namespace"),
        namespace.as_bytes(),
        0o644,
        fs_group,
    );

    // Environment.
    let mut env: Vec<(String, String)> = vec![
        (
            "PATH".into(),
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
        ),
        ("HOSTNAME".into(), pod_name.into()),
        ("KUBERNETES_SERVICE_HOST".into(), "127.0.0.1".into()),
        (
            "KUBERNETES_SERVICE_PORT".into(),
            cp.endpoints().apiserver_port.to_string(),
        ),
    ];
    for e in c.env.iter().flatten() {
        let value = match (&e.value, &e.value_from) {
            (Some(v), _) => Some(v.clone()),
            (None, Some(from)) => {
                if let Some(f) = &from.field_ref {
                    match f.field_path.as_str() {
                        "metadata.name" => Some(pod_name.to_string()),
                        "metadata.namespace" => Some(namespace.to_string()),
                        other => panic!("fieldRef {other} is not supported by this stand-in"),
                    }
                } else if let Some(r) = &from.secret_key_ref {
                    let secret = secrets.get_opt(&r.name).await.unwrap();
                    let v = secret.and_then(|s| s.data?.get(&r.key).cloned());
                    match v {
                        Some(v) => Some(String::from_utf8(v.0).unwrap()),
                        None if r.optional.unwrap_or(false) => None,
                        None => panic!("secret {} key {} not found", r.name, r.key),
                    }
                } else {
                    None
                }
            }
            _ => None,
        };
        if let Some(v) = value {
            env.push((e.name.clone(), v));
        }
    }
    // Ports: the container's, remapped to free loopback ports.
    let mut ports = BTreeMap::new();
    let mut args = c.args.clone().unwrap_or_default();
    for p in c.ports.iter().flatten() {
        let port = p.container_port as u16;
        let local = free_port();
        ports.insert(port, local);
        for a in &mut args {
            *a = a.replace(&format!("0.0.0.0:{port}"), &format!("127.0.0.1:{local}"));
        }
    }

    // The mount namespace: /run (so /var/run) and /tmp are private tmpfs, the staged files copied in.
    let mut script = String::from("set -e\nmount -t tmpfs -o mode=755 tmpfs /run\n");
    script.push_str(&format!(
        "if [ -d {r}/var/run ]; then cp -a {r}/var/run/. /run/; fi\n",
        r = root.display()
    ));
    if let Some(u) = uid {
        // The image's /etc/passwd names its user (ssh refuses to run for a uid without one).
        script.push_str(&format!(
            "cp /etc/passwd /run/.passwd && echo 'nonroot:x:{u}:{g}:nonroot:/tmp:/usr/sbin/nologin' >> /run/.passwd && mount --bind /run/.passwd /etc/passwd\n",
            g = gid.unwrap_or(u)
        ));
    }
    // The image's binary, copied before the emptyDirs hide where it was built (a checkout under
    // /tmp, say).
    script.push_str(&format!(
        "cp {} /run/.capstan\n",
        shell(env!("CARGO_BIN_EXE_capstan"))
    ));
    for d in &empty_dirs {
        script.push_str(&format!(
            "mkdir -p {d} && mount -t tmpfs -o mode=1777 tmpfs {d}\n"
        ));
    }
    let mut exec = String::from("exec env -i");
    for (k, v) in &env {
        exec.push_str(&format!(" {k}={}", shell(v)));
    }
    if let Some(u) = uid {
        exec.push_str(&format!(
            " setpriv --reuid={u} --regid={} --clear-groups",
            gid.unwrap_or(u)
        ));
    }
    exec.push_str(" /run/.capstan");
    for a in &args {
        exec.push(' ');
        exec.push_str(&shell(a));
    }
    script.push_str(&exec);
    script.push('\n');
    let child = Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    Pod {
        child,
        ports,
        log: log.to_path_buf(),
        _stage: stage,
    }
}

fn shell(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}
