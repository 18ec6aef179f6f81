//! The fleet config: `clusters/<mgmt>/fleet.yaml`, settings of a management cluster's whole fleet.
//!
//! ```yaml
//! apiVersion: capstan.dev/v1alpha1
//! kind: FleetConfig
//! metadata: {name: mgmt}          # optional
//! spec:
//!   release:                      # which EKS Anywhere release data the fleet renders with
//!     manifest: https://anywhere-assets.eks.amazonaws.com/releases/eks-a/manifest.yaml
//!     sha256: 3f5c…               # required for https; checked for repository files when given
//!     pins:                       # optional: sha256 of the documents the manifest refers to
//!       https://anywhere-assets.eks.amazonaws.com/releases/bundles/104/manifest.yaml: 9a0b…
//! ```
//!
//! Why a file of its own: a cluster spec is EKS Anywhere's format, and fleet-wide settings
//! (release data now; upgrade waves, rollout pacing and maintenance windows later) belong to no
//! single cluster. It sits in the management cluster's directory, is read with the same rules as
//! the cluster specs (every unknown field is an error with file:line:col, stable codes), and a
//! broken fleet config keeps the whole fleet of that management cluster from being applied, so
//! nothing renders with the wrong release data.
//!
//! Adding a section: a field of [`RawSpec`] (the raw, as-written form with `deny_unknown_fields`),
//! a field of [`FleetConfig`] (the validated form), and a `check_<section>` function called from
//! [`parse`]. Parsing is pure: documents the release section names are fetched by the agent and
//! checked against the pins in [`crate::fleet`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use capstan_templates::diag::{Code, Diagnostic};
use capstan_templates::release::Location;
use capstan_templates::spec::{SourceDoc, deserialize};
use capstan_templates::yaml;
use serde::Deserialize;
use serde_json::Value;

/// The file name of the fleet config in a management cluster's directory.
pub const FILE: &str = "fleet.yaml";
/// Its apiVersion.
pub const API_VERSION: &str = "capstan.dev/v1alpha1";
/// Its kind.
pub const KIND: &str = "FleetConfig";

/// `metadata` of the fleet config.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMeta {
    /// A name, for humans.
    #[serde(default)]
    pub name: Option<String>,
}

/// `spec` of the fleet config, as written. One optional field per section.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawSpec {
    /// Where the fleet's EKS Anywhere release data comes from.
    #[serde(default)]
    pub release: Option<RawRelease>,
}

/// `spec.release`, as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawRelease {
    /// An https:// URL or a path from the repository root.
    pub manifest: String,
    /// sha256 (hex) of the manifest.
    #[serde(default)]
    pub sha256: Option<String>,
    /// sha256 (hex) of documents the manifest refers to, by URL.
    #[serde(default)]
    pub pins: BTreeMap<String, String>,
}

/// A validated fleet config.
#[derive(Debug, Clone, Default)]
pub struct FleetConfig {
    /// The file, relative to the repository root.
    pub file: PathBuf,
    /// The release data of the fleet; None: capstan's embedded sample data.
    pub release: Option<ReleaseSource>,
}

/// Where a fleet's release data comes from, and what it must hash to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReleaseSource {
    /// The EKS Anywhere release manifest.
    pub manifest: Location,
    /// sha256 pins by document (the manifest's own included).
    pub pins: BTreeMap<Location, String>,
    /// Where the section was written (for diagnostics about its documents).
    pub pos: yaml::Pos,
}

/// The fleet config of a management cluster directory, if the tree has one: the validated config
/// (None when it has errors) and every problem found.
pub fn parse(file: &Path, text: &str) -> (Option<FleetConfig>, Vec<Diagnostic>) {
    let mut diags = Vec::new();
    let docs = match yaml::parse(text) {
        Ok(d) => d,
        Err(e) => {
            diags.push(
                Diagnostic::error(Code::YamlSyntax, e.message)
                    .in_file(file)
                    .at(e.pos),
            );
            return (None, diags);
        }
    };
    let here = |code, msg: String, sd: &SourceDoc, path: &str| {
        Diagnostic::error(code, msg)
            .in_file(file)
            .at(sd.doc.pos(path))
    };
    let mut docs: Vec<SourceDoc> = docs
        .into_iter()
        .map(|doc| SourceDoc {
            file: file.to_path_buf(),
            doc,
        })
        .collect();
    if docs.len() != 1 {
        let mut d = Diagnostic::error(
            Code::InvalidValue,
            format!(
                "{FILE} holds exactly one {KIND} document, found {}",
                docs.len()
            ),
        )
        .in_file(file);
        if let Some(second) = docs.get(1) {
            d = d.at(second.doc.start);
        }
        diags.push(d);
        return (None, diags);
    }
    let sd = docs.remove(0);
    let Value::Object(obj) = &sd.doc.value else {
        diags.push(here(
            Code::MissingTypeInfo,
            format!("{FILE} must be a mapping with apiVersion: {API_VERSION} and kind: {KIND}"),
            &sd,
            "",
        ));
        return (None, diags);
    };
    let text_of = |k: &str| obj.get(k).and_then(Value::as_str);
    match (text_of("apiVersion"), text_of("kind")) {
        (Some(API_VERSION), Some(KIND)) => {}
        (Some(a), Some(k)) => {
            diags.push(here(
                Code::InvalidValue,
                format!("{FILE} must be apiVersion: {API_VERSION}, kind: {KIND}, not {a} {k}; it is reserved for the fleet config"),
                &sd,
                if a != API_VERSION { "apiVersion" } else { "kind" },
            ));
            return (None, diags);
        }
        _ => {
            diags.push(here(
                Code::MissingTypeInfo,
                format!("{FILE} needs apiVersion: {API_VERSION} and kind: {KIND}"),
                &sd,
                "",
            ));
            return (None, diags);
        }
    }
    for key in obj.keys() {
        if !matches!(key.as_str(), "apiVersion" | "kind" | "metadata" | "spec") {
            diags.push(here(
                Code::UnknownField,
                format!("unknown field `{key}` in {KIND}"),
                &sd,
                key,
            ));
        }
    }
    let _meta: Option<RawMeta> = match obj.get("metadata") {
        Some(m) => deserialize(m.clone(), "metadata", &sd, &mut diags),
        None => Some(RawMeta::default()),
    };
    let spec: Option<RawSpec> = match obj.get("spec") {
        Some(s) => deserialize(s.clone(), "spec", &sd, &mut diags),
        None => Some(RawSpec::default()),
    };
    let Some(spec) = spec else {
        return (None, diags);
    };
    let mut config = FleetConfig {
        file: file.to_path_buf(),
        release: None,
    };
    if let Some(r) = &spec.release {
        config.release = check_release(r, &sd, &mut diags);
    }
    let ok = !capstan_templates::diag::has_errors(&diags);
    (ok.then_some(config), diags)
}

fn is_sha256(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
}

fn check_release(
    r: &RawRelease,
    sd: &SourceDoc,
    diags: &mut Vec<Diagnostic>,
) -> Option<ReleaseSource> {
    let mut err = |code, path: &str, msg: String| {
        diags.push(
            Diagnostic::error(code, msg)
                .in_file(&sd.file)
                .at(sd.doc.pos(path)),
        );
    };
    let manifest = if r.manifest.starts_with("https://") {
        Location::parse(&r.manifest)
    } else if r.manifest.contains("://") {
        None
    } else {
        Location::repo_file(r.manifest.trim_start_matches("./"))
    };
    let Some(manifest) = manifest else {
        err(
            Code::InvalidValue,
            "spec.release.manifest",
            format!(
                "manifest `{}` must be an https:// URL or a path from the repository root (no `..`)",
                r.manifest
            ),
        );
        return None;
    };
    let mut pins = BTreeMap::new();
    match &r.sha256 {
        Some(h) if !is_sha256(h) => err(
            Code::InvalidValue,
            "spec.release.sha256",
            format!("sha256 `{h}` must be 64 lowercase hex digits"),
        ),
        Some(h) => {
            pins.insert(manifest.clone(), h.clone());
        }
        None if manifest.is_remote() => err(
            Code::MissingField,
            "spec.release",
            format!(
                "a release manifest fetched over https must be pinned: add sha256 (the hex sha256 of {manifest}, e.g. from `sha256sum`)"
            ),
        ),
        None => {}
    }
    for (url, h) in &r.pins {
        let path = format!("spec.release.pins.{url}");
        match Location::parse(url).filter(Location::is_remote) {
            None => err(
                Code::InvalidValue,
                &path,
                format!("pin `{url}` must be an https:// URL of a document the manifest refers to"),
            ),
            Some(_) if !is_sha256(h) => err(
                Code::InvalidValue,
                &path,
                format!("sha256 `{h}` must be 64 lowercase hex digits"),
            ),
            Some(l) => {
                pins.insert(l, h.clone());
            }
        }
    }
    Some(ReleaseSource {
        manifest,
        pins,
        pos: sd.doc.pos("spec.release"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PIN: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

    #[test]
    fn a_pinned_https_manifest_parses() {
        let text = format!(
            "apiVersion: capstan.dev/v1alpha1\nkind: FleetConfig\nspec:\n  release:\n    manifest: https://assets.example/m.yaml\n    sha256: {PIN}\n"
        );
        let (c, d) = parse(Path::new("clusters/m/fleet.yaml"), &text);
        assert!(d.is_empty(), "{d:?}");
        let r = c.unwrap().release.unwrap();
        assert_eq!(r.manifest.as_str(), "https://assets.example/m.yaml");
        assert_eq!(r.pins[&r.manifest], PIN);
    }

    #[test]
    fn problems_are_located() {
        let text = "apiVersion: capstan.dev/v1alpha1\nkind: FleetConfig\nspec:\n  release:\n    manifest: https://assets.example/m.yaml\n    sha: x\n";
        let (c, d) = parse(Path::new("f.yaml"), text);
        assert!(c.is_none());
        let codes: Vec<_> = d.iter().map(|d| (d.code, d.line)).collect();
        assert_eq!(codes, vec![(Code::UnknownField, 6)]);
    }

    #[test]
    fn a_repository_manifest_needs_no_pin() {
        let text = "apiVersion: capstan.dev/v1alpha1\nkind: FleetConfig\nspec:\n  release:\n    manifest: release/manifest.yaml\n";
        let (c, d) = parse(Path::new("f.yaml"), text);
        assert!(d.is_empty(), "{d:?}");
        assert_eq!(
            c.unwrap().release.unwrap().manifest.repo_path(),
            Some("release/manifest.yaml")
        );
    }
}
