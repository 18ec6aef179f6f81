//! Intent recorded in the repository: deletion (a tombstone) and suspension.
//!
//! capstan never deletes a cluster because its directory disappeared (a bad merge or a moved
//! directory must not take a cluster down, the prune cascade Flux users fear most). Deletion is
//! written down: `capstan delete cluster NAME` replaces the cluster's spec with a `tombstone.yaml`,
//! reviewed and merged like any change. Suspension is a `suspend.yaml` in a cluster directory, or
//! in `clusters/` for the whole fleet; it is in Git, so it is visible, reviewed and survives
//! agent restarts (an annotation on a live object would be neither).
//!
//! ```yaml
//! apiVersion: capstan.dev/v1alpha1
//! kind: Tombstone          # or Suspend
//! reason: decommissioned after the Q3 migration
//! ```

use std::path::PathBuf;

use capstan_templates::spec::SourceDoc;
use capstan_templates::yaml::Pos;
use serde_json::Value;

/// apiVersion of capstan's own control documents.
pub const CONTROL_API_VERSION: &str = "capstan.dev/v1alpha1";
/// The file `capstan delete cluster` writes.
pub const TOMBSTONE_FILE: &str = "tombstone.yaml";
/// The file `capstan suspend` writes.
pub const SUSPEND_FILE: &str = "suspend.yaml";

/// Intent found among a directory's documents.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Intent {
    /// A Tombstone: delete the cluster.
    pub delete: Option<String>,
    /// Where the Tombstone was written.
    pub delete_at: Option<(PathBuf, Pos)>,
    /// A Suspend: leave the cluster alone.
    pub suspend: Option<String>,
}

fn control_kind(v: &Value) -> Option<&str> {
    (v.get("apiVersion").and_then(Value::as_str) == Some(CONTROL_API_VERSION))
        .then(|| v.get("kind").and_then(Value::as_str))
        .flatten()
}

/// Takes capstan's control documents out of a directory's documents.
pub fn split(docs: Vec<SourceDoc>) -> (Vec<SourceDoc>, Intent) {
    let mut intent = Intent::default();
    let mut rest = Vec::new();
    for d in docs {
        let reason = || {
            d.doc
                .value
                .get("reason")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        match control_kind(&d.doc.value) {
            Some("Tombstone") => {
                intent.delete = Some(reason());
                intent.delete_at = Some((d.file.clone(), d.doc.start));
            }
            Some("Suspend") => intent.suspend = Some(reason()),
            _ => rest.push(d),
        }
    }
    (rest, intent)
}

/// The text of a control document.
pub fn document(kind: &str, reason: &str) -> String {
    format!(
        "# Written by capstan: {}\napiVersion: {CONTROL_API_VERSION}\nkind: {kind}\nreason: {}\n",
        match kind {
            "Tombstone" =>
                "the cluster is deleted when this is merged; remove this file and restore the spec to cancel",
            _ => "the agent leaves this cluster alone while this file exists; delete it to resume",
        },
        serde_json::to_string(reason).expect("strings serialise")
    )
}
