//! The move's journal: one ConfigMap in the target, `capstan-system/capstan-move`.
//!
//! Why the target: it is the one place both ends of a move can reach that outlives the move.
//! The machine running `capstan move` may be a laptop or a CI runner that dies with the
//! process; the source is emptied by the move itself; a file beside the repository is not
//! seen by the operator who resumes from another machine. The target is where the clusters
//! live afterwards, so whoever manages them can read how they came.
//!
//! The journal holds the decisions (which clusters, which of them an operator had paused, the
//! move's id) and the phase reached. It is written *before* a phase acts, and every phase is
//! idempotent: the pause is recorded on each paused Cluster in the same write
//! (`capstan.dev/paused-for-move`), a copy names its source's UID
//! (`capstan.dev/moved-from`), a delete names the UID it checked. So a crash between any two
//! writes leaves a state the same phase can finish from. Each phase change is a merge of the
//! resourceVersion last read: a second `capstan move` running against the same target at the
//! same time fails its next phase change (409) and stops rather than racing.

use kube::Client;
use kube::api::{Api, ObjectMeta};
use serde::{Deserialize, Serialize};
use serde_json::json;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};

use capstan_plan::moving::{ClusterKey, RECORDS_NAMESPACE};

use super::MoveError;

/// The journal ConfigMap's name, in `capstan-system`.
pub const NAME: &str = "capstan-move";
/// Its key.
const KEY: &str = "move.json";
/// The field manager of a move's writes, here and in both clusters.
pub const MANAGER: &str = "capstan-move";

/// Where a move is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Phase {
    /// Pausing the clusters at the source.
    Pausing,
    /// Creating the copies in the target.
    Copying,
    /// Deleting the moved objects at the source.
    Deleting,
    /// Unpausing in the target what the move paused.
    Unpausing,
    /// Finished.
    Done,
}

/// What the journal records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    /// The move's id (what its pauses are marked with).
    pub id: String,
    /// The source's API server, as the mover was given it.
    pub source: String,
    /// The clusters moved (`namespace/name`).
    pub clusters: Vec<String>,
    /// Those an operator had paused before the move: left paused.
    pub operator_paused: Vec<String>,
    /// The phase reached.
    pub phase: Phase,
}

impl Record {
    /// The clusters as keys.
    pub fn keys(&self) -> Vec<ClusterKey> {
        self.clusters
            .iter()
            .filter_map(|c| c.parse().ok())
            .collect()
    }
}

/// The journal as read, with the version a phase change must match.
#[derive(Debug, Clone)]
pub struct Journal {
    /// Its content.
    pub record: Record,
    resource_version: Option<String>,
}

fn api(target: &Client) -> Api<ConfigMap> {
    Api::namespaced(target.clone(), RECORDS_NAMESPACE)
}

fn parse(cm: ConfigMap) -> Result<Journal, MoveError> {
    let text =
        cm.data.as_ref().and_then(|d| d.get(KEY)).ok_or_else(|| {
            MoveError::Journal(format!("{RECORDS_NAMESPACE}/{NAME} has no {KEY}"))
        })?;
    let record = serde_json::from_str(text)
        .map_err(|e| MoveError::Journal(format!("{RECORDS_NAMESPACE}/{NAME}: {e}")))?;
    Ok(Journal {
        record,
        resource_version: cm.metadata.resource_version,
    })
}

fn body(record: &Record) -> String {
    serde_json::to_string_pretty(record).expect("a record serialises")
}

/// The journal of the target, if there is one.
pub async fn read(target: &Client) -> Result<Option<Journal>, MoveError> {
    match api(target).get_opt(NAME).await {
        Ok(Some(cm)) => parse(cm).map(Some),
        Ok(None) => Ok(None),
        Err(e) => Err(MoveError::kube("reading the journal", e)),
    }
}

/// Starts a journal: created, so that two moves starting at once do not both start (the second
/// gets 409 and is told a move is under way).
pub async fn start(target: &Client, record: Record) -> Result<Journal, MoveError> {
    let namespaces: Api<Namespace> = Api::all(target.clone());
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(RECORDS_NAMESPACE.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    match crate::write::create(&namespaces, Some(MANAGER), &ns).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(MoveError::kube("creating namespace capstan-system", e)),
    }
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(NAME.into()),
            namespace: Some(RECORDS_NAMESPACE.into()),
            ..Default::default()
        },
        data: Some([(KEY.to_string(), body(&record))].into()),
        ..Default::default()
    };
    match crate::write::create(&api(target), Some(MANAGER), &cm).await {
        Ok(made) => Ok(Journal {
            record,
            resource_version: made.metadata.resource_version,
        }),
        Err(kube::Error::Api(e)) if e.code == 409 => Err(MoveError::Busy(
            "another move started its journal at the same moment".into(),
        )),
        Err(e) => Err(MoveError::kube("writing the journal", e)),
    }
}

impl Journal {
    /// Records `record` in place of what was read, only if nobody wrote the journal since.
    pub async fn replace(&mut self, target: &Client, record: Record) -> Result<(), MoveError> {
        let patch = json!({"data": {KEY: body(&record)}});
        let how = crate::write::Merge::read(self.resource_version.clone()).by(MANAGER);
        match crate::write::merge(&api(target), NAME, &how, &patch).await {
            Ok(cm) => {
                self.resource_version = cm.metadata.resource_version;
                self.record = record;
                Ok(())
            }
            Err(kube::Error::Api(e)) if e.code == 409 => Err(MoveError::Busy(
                "the journal changed under this move: another `capstan move` is running against the same target".into(),
            )),
            Err(e) => Err(MoveError::kube("writing the journal", e)),
        }
    }

    /// Moves on to `phase`.
    pub async fn enter(&mut self, target: &Client, phase: Phase) -> Result<(), MoveError> {
        let record = Record {
            phase,
            ..self.record.clone()
        };
        self.replace(target, record).await
    }
}
