//! `spec.packages`: EKS Anywhere's curated packages controller.
//!
//! EKS Anywhere installs the package controller with Helm, from its release bundle's chart: on a
//! management cluster its CLI does so into the cluster itself, with the spec's controller and
//! cron job settings; for a workload cluster its controller installs a second release of the
//! chart **on the management cluster** (`workloadPackageOnly`), which then reaches into the
//! workload cluster. capstan renders the first (a HelmChartProxy of the management cluster,
//! `render::packages`) and refuses the second: a workload directory never puts software on the
//! management cluster, whose credentials it could then reach. The chart also takes an
//! authenticated registry mirror's login in its values, so that combination is refused too:
//! capstan never writes a credential into an object.
//!
//! EKS Anywhere checks only, when it installs, that each `env` entry is `NAME=value`; capstan
//! checks that here, at the entry's line.

use super::At;
use crate::diag::Code;
use crate::spec::{RegistryMirror, raw};

const FIELD: &str = "spec.packages";

/// The settings to render (None: no `packages`, disabled, or refused and reported).
pub(super) fn packages(
    at: &mut At,
    p: Option<&raw::PackageConfiguration>,
    management: bool,
    mirror: Option<&RegistryMirror>,
) -> Option<raw::PackageConfiguration> {
    let p = p?;
    if p.disable {
        return None;
    }
    if !management {
        at.err(
            Code::UnsupportedField,
            FIELD,
            "curated packages of a workload cluster: EKS Anywhere installs their controller as a Helm release on the management cluster, and a workload directory never puts software on the management cluster; remove packages (or set packages.disable: true) and install the packages as add-on objects of this directory",
        );
        return None;
    }
    if mirror.is_some_and(|m| m.authenticate) {
        at.err(
            Code::UnsupportedField,
            FIELD,
            "curated packages with an authenticated registry mirror: the package controller's chart takes the mirror's login in its Helm values, and capstan never writes a credential into an object; use a mirror without authentication for packages, or set packages.disable: true",
        );
        return None;
    }
    let mut ok = true;
    if let Some(c) = &p.controller {
        for (i, kv) in c.env.iter().enumerate() {
            if !kv.contains('=') {
                ok = false;
                at.err(
                    Code::InvalidValue,
                    &format!("{FIELD}.controller.env[{i}]"),
                    format!("package controller environment entry `{kv}` is not NAME=value (EKS Anywhere refuses it when it installs the controller)"),
                );
            }
        }
    }
    ok.then(|| p.clone())
}
