//! A cluster rendered at other Kubernetes versions than its spec asks for: one step of a chained
//! upgrade.
//!
//! The control plane moves one minor at a time (kubeadm supports nothing else), so a spec that
//! jumps from 1.31 to 1.33 is applied as 1.32 first. The agent decides the step from what is
//! live; this renders it: the same spec, the control plane at the step's version and each
//! worker group at the version the step gives it (a group stays where it is while the skew
//! allows, as Cluster API's chained upgrades let workers skip minors).
//!
//! Objects the fleet adds beyond the cluster's own render (the EKS-A release objects of a
//! management cluster) are kept as they are.

use std::collections::{BTreeMap, BTreeSet};

use capstan_templates::render::{self, RenderError};
use capstan_templates::spec::KubeVersion;

use crate::fleet::ClusterEntry;
use crate::objects::{Objects, Rendered};

/// Why a step could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    /// The entry has no validated spec or release (invalid, or its spec was dropped).
    #[error("cluster {0} has no validated spec to render a step from")]
    NoSpec(String),
    /// Rendering failed (e.g. the release has no bundle for the step's version).
    #[error("rendering cluster {cluster} at Kubernetes {version}: {source}")]
    Render {
        /// The cluster.
        cluster: String,
        /// The step's control-plane version.
        version: KubeVersion,
        /// Cause.
        #[source]
        source: RenderError,
    },
}

/// The cluster's objects with its control plane at `control_plane` and the worker groups named
/// in `workers` at their versions (groups not named: at the control plane's version, never above
/// what the spec asks).
pub fn render_at(
    entry: &ClusterEntry,
    control_plane: KubeVersion,
    workers: &BTreeMap<String, KubeVersion>,
) -> Result<Objects, StepError> {
    let (Some(spec), Some(release)) = (&entry.cluster, &entry.release) else {
        return Err(StepError::NoSpec(entry.name.clone()));
    };
    let err = |source| StepError::Render {
        cluster: entry.name.clone(),
        version: control_plane,
        source,
    };
    let mut stepped = (**spec).clone();
    stepped.kubernetes_version = control_plane;
    for w in &mut stepped.workers {
        w.kubernetes_version = workers
            .get(&w.name)
            .copied()
            .unwrap_or_else(|| w.kubernetes_version.min(control_plane));
    }
    let own: BTreeSet<String> = render::render(spec, release)
        .map_err(err)?
        .iter()
        .map(|v| Rendered::new(v).subject())
        .collect();
    let mut objects: Vec<Rendered> = entry
        .objects
        .iter()
        .flatten()
        .filter(|o| !own.contains(&o.subject()))
        .cloned()
        .collect();
    // The fleet's own additions (release objects) first, as in the entry.
    objects.extend(
        render::render(&stepped, release)
            .map_err(err)?
            .iter()
            .map(Rendered::new),
    );
    Ok(objects.into_iter().collect())
}
