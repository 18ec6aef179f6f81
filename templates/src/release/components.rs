//! What runs a management cluster, as a release names it: the components manifests of
//! cert-manager, Cluster API and its providers, and EKS Anywhere's controller.
//!
//! `clusterctl init` installs a management cluster's controllers from each provider's
//! "components" manifest; EKS Anywhere's Bundles name the manifests of the exact builds a release
//! runs (`certManager.manifest`, `clusterAPI.components`, `bootstrap.components`, …), and its
//! CLI installs them in that order into every cluster it makes a management cluster. capstan's
//! `pivot` does the same into the new cluster, so the versions come from the release the spec
//! names and nowhere else.
//!
//! Two pure pieces live here: [`Components::for_provider`], the manifests a provider's
//! management cluster needs in the order they go in (cert-manager first: every Cluster API
//! manager's webhook certificate is a cert-manager Certificate), and [`substitute`], clusterctl's
//! variable syntax (`${NAME}`, `${NAME:=default}`) filled in from a lookup, every missing
//! variable reported at once as clusterctl does. Reading and applying the manifests is the
//! agent's (`capstan::components`).

use std::collections::BTreeSet;

use super::Location;

/// The components manifests one versions bundle names (their `uri`s, relative to the Bundles
/// manifest or https); None where the bundle names none.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Components {
    /// `certManager.manifest`.
    pub cert_manager: Option<String>,
    /// `clusterAPI.components`: the core controller.
    pub core: Option<String>,
    /// `bootstrap.components`: kubeadm bootstrap.
    pub bootstrap: Option<String>,
    /// `controlPlane.components`: kubeadm control plane.
    pub control_plane: Option<String>,
    /// `etcdadmBootstrap.components`.
    pub etcdadm_bootstrap: Option<String>,
    /// `etcdadmController.components`.
    pub etcdadm_controller: Option<String>,
    /// `docker.components` (CAPD).
    pub docker: Option<String>,
    /// `vSphere.components` (CAPV).
    pub vsphere: Option<String>,
    /// `nutanix.components` (CAPX).
    pub nutanix: Option<String>,
    /// `tinkerbell.components` (CAPT).
    pub tinkerbell: Option<String>,
    /// `eksa.components`: EKS Anywhere's controller and CRDs.
    pub eksa: Option<String>,
}

/// One manifest to install: clusterctl's provider name and where the manifest is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Component {
    /// "cert-manager", "cluster-api", "kubeadm-bootstrap", …, the infrastructure provider's name,
    /// "eks-anywhere".
    pub name: &'static str,
    /// Where the manifest is (resolved against the Bundles manifest).
    pub location: Location,
}

impl Components {
    /// The manifests a management cluster of `provider` ("docker", "vsphere", "nutanix",
    /// "tinkerbell") needs, in install order: cert-manager, Cluster API core, kubeadm bootstrap and
    /// control plane, etcdadm's bootstrap and controller (EKS-A installs them into every
    /// management cluster: any workload may ask for external etcd), the infrastructure provider,
    /// EKS Anywhere. `bundles` is where the Bundles manifest was read; the error names every
    /// field the bundle lacks or whose uri capstan cannot read.
    pub fn for_provider(
        &self,
        provider: &str,
        bundles: &Location,
    ) -> Result<Vec<Component>, Vec<String>> {
        let infra = match provider {
            "docker" => ("docker.components", &self.docker),
            "vsphere" => ("vSphere.components", &self.vsphere),
            "nutanix" => ("nutanix.components", &self.nutanix),
            "tinkerbell" => ("tinkerbell.components", &self.tinkerbell),
            other => return Err(vec![format!("no components for provider {other}")]),
        };
        let wanted: [(&'static str, &str, &Option<String>); 8] = [
            ("cert-manager", "certManager.manifest", &self.cert_manager),
            ("cluster-api", "clusterAPI.components", &self.core),
            ("kubeadm-bootstrap", "bootstrap.components", &self.bootstrap),
            (
                "kubeadm-control-plane",
                "controlPlane.components",
                &self.control_plane,
            ),
            (
                "etcdadm-bootstrap",
                "etcdadmBootstrap.components",
                &self.etcdadm_bootstrap,
            ),
            (
                "etcdadm-controller",
                "etcdadmController.components",
                &self.etcdadm_controller,
            ),
            (provider_name(provider), infra.0, infra.1),
            ("eks-anywhere", "eksa.components", &self.eksa),
        ];
        let mut out = Vec::new();
        let mut errors = Vec::new();
        for (name, field, uri) in wanted {
            match uri.as_deref().map(|u| (u, bundles.join(u))) {
                Some((_, Some(location))) => out.push(Component { name, location }),
                Some((u, None)) => errors.push(format!(
                    "{field} `{u}` is not a location capstan reads (https, or a path next to the Bundles manifest)"
                )),
                None => errors.push(format!("{field} is not in the bundle")),
            }
        }
        if errors.is_empty() {
            Ok(out)
        } else {
            Err(errors)
        }
    }
}

fn provider_name(provider: &str) -> &'static str {
    match provider {
        "docker" => "docker",
        "vsphere" => "vsphere",
        "nutanix" => "nutanix",
        _ => "tinkerbell",
    }
}

/// Fills clusterctl's variables in a components manifest: `${NAME}` (required),
/// `${NAME:=default}` and `${NAME:-default}` (the default when NAME is unset or empty),
/// `${NAME=default}` and `${NAME-default}` (the default when NAME is unset). `$$` is a literal
/// `$`; a `$` not followed by `{` is left as it is (shell snippets in manifests keep theirs).
/// Every required variable `lookup` does not know is returned, sorted, none filled.
pub fn substitute(
    text: &str,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<String, Vec<String>> {
    let mut out = String::with_capacity(text.len());
    let mut missing = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
            continue;
        }
        let Some(body_start) = after.strip_prefix('{') else {
            out.push('$');
            rest = after;
            continue;
        };
        let Some(end) = body_start.find('}') else {
            out.push('$');
            rest = after;
            continue;
        };
        let body = &body_start[..end];
        let name_len = body
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(body.len());
        let (name, op) = body.split_at(name_len);
        if name.is_empty() || !name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
            // Not a variable (e.g. a Go template's `${{`): kept.
            out.push('$');
            rest = after;
            continue;
        }
        let value = lookup(name);
        let filled = if op.is_empty() {
            value
        } else if let Some(d) = op.strip_prefix(":=").or_else(|| op.strip_prefix(":-")) {
            Some(
                value
                    .filter(|v| !v.is_empty())
                    .unwrap_or_else(|| d.to_string()),
            )
        } else if let Some(d) = op.strip_prefix('=').or_else(|| op.strip_prefix('-')) {
            Some(value.unwrap_or_else(|| d.to_string()))
        } else {
            out.push('$');
            rest = after;
            continue;
        };
        match filled {
            Some(v) => out.push_str(&v),
            None => {
                missing.insert(name.to_string());
            }
        }
        rest = &body_start[end + 1..];
    }
    out.push_str(rest);
    if missing.is_empty() {
        Ok(out)
    } else {
        Err(missing.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "SET" => Some("yes".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn clusterctl_forms_are_filled() {
        let text =
            "a=${SET} b=${UNSET:=d1} c=${EMPTY:=d2} d=${EMPTY=d3} e=${UNSET-d4} f=${SET:-no}";
        assert_eq!(
            substitute(text, env).unwrap(),
            "a=yes b=d1 c=d2 d= e=d4 f=yes"
        );
    }

    #[test]
    fn every_missing_required_variable_is_named_once() {
        let err = substitute("${B} ${A} ${B} ${SET}", env).unwrap_err();
        assert_eq!(err, ["A", "B"]);
    }

    #[test]
    fn dollars_that_are_not_variables_are_kept() {
        let text = "echo $HOME; cost $$5; ${{ .Values }}; ${} ${1X}; tail $";
        assert_eq!(
            substitute(text, env).unwrap(),
            "echo $HOME; cost $5; ${{ .Values }}; ${} ${1X}; tail $"
        );
    }

    #[test]
    fn a_default_may_hold_a_colon() {
        assert_eq!(
            substitute("--addr=${CAPI_DIAGNOSTICS_ADDRESS:=:8443}", env).unwrap(),
            "--addr=:8443"
        );
    }

    #[test]
    fn the_order_is_cert_manager_first_and_eks_anywhere_last() {
        let c = Components {
            cert_manager: Some("cm.yaml".into()),
            core: Some("core.yaml".into()),
            bootstrap: Some("b.yaml".into()),
            control_plane: Some("cp.yaml".into()),
            etcdadm_bootstrap: Some("eb.yaml".into()),
            etcdadm_controller: Some("ec.yaml".into()),
            docker: Some("d.yaml".into()),
            vsphere: None,
            nutanix: None,
            tinkerbell: None,
            eksa: Some("https://example.com/eksa.yaml".into()),
        };
        let at = Location::parse("repo:/release/bundles.yaml").unwrap();
        let names: Vec<_> = c
            .for_provider("docker", &at)
            .unwrap()
            .into_iter()
            .map(|c| (c.name, c.location.to_string()))
            .collect();
        assert_eq!(names[0], ("cert-manager", "repo:/release/cm.yaml".into()));
        assert_eq!(names[6], ("docker", "repo:/release/d.yaml".into()));
        assert_eq!(
            names[7],
            ("eks-anywhere", "https://example.com/eksa.yaml".into())
        );
        let err = c.for_provider("vsphere", &at).unwrap_err();
        assert_eq!(err, ["vSphere.components is not in the bundle"]);
    }
}
