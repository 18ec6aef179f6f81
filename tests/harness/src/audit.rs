//! The API server's audit log, so tests can count the requests the agent really sent.
//!
//! kube-apiserver runs with `--audit-log-path` (JSON lines, `blocking` mode, no rotation)
//! and a policy that logs every request at `Metadata` level, only at stage
//! `ResponseComplete` (so each finished request is exactly one line; watches show up
//! when they end). Take a [`AuditMark`] before the code under test runs, then read
//! [`AuditLog::events_since`]. In blocking mode the event is written while the request
//! finishes, which can be a moment after the client saw the response: call
//! [`AuditLog::sync`] before counting (it waits for an event of its own request). Tests never
//! use [`AuditLog::settle`], a quiet period; benchmarks use it to see a peer controller go idle.
//!
//! The shared control plane serves all tests of a binary at once, so filter events by
//! namespace, user agent or resource (see [`AuditEvent::is_write`] and the fields).

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Deserialize;

/// The audit policy file written next to the log.
pub const AUDIT_POLICY: &str = "\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages:
- RequestReceived
- ResponseStarted
rules:
- level: Metadata
";

/// Errors reading the audit log.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// The file could not be read.
    #[error("read audit log {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A complete line is not an audit event.
    #[error("audit log {path}: bad event: {source}")]
    Parse {
        path: PathBuf,
        source: serde_json::Error,
    },
    /// The sentinel request of [`AuditLog::sync`] failed or its event never arrived.
    #[error("audit log {path}: sync: {message}")]
    Sync { path: PathBuf, message: String },
}

/// A position in the audit log (a byte offset).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct AuditMark(pub u64);

/// `objectRef` of an audit event.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default)]
pub struct ObjectRef {
    /// Plural resource, e.g. `clusters`.
    pub resource: Option<String>,
    /// Namespace, if namespaced.
    pub namespace: Option<String>,
    /// Object name (absent for list/create-without-name).
    pub name: Option<String>,
    /// API group (`""` / absent for core).
    pub api_group: Option<String>,
    /// API version.
    pub api_version: Option<String>,
    /// Subresource, e.g. `status`.
    pub subresource: Option<String>,
}

/// `user` of an audit event.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct UserInfo {
    /// User name (`admin` for the harness kubeconfig).
    pub username: String,
    /// Groups.
    pub groups: Vec<String>,
    /// Extra attributes, e.g. a ServiceAccount token's `authentication.kubernetes.io/credential-id`.
    pub extra: std::collections::BTreeMap<String, Vec<String>>,
}

/// `responseStatus` of an audit event.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct ResponseStatus {
    /// HTTP status code.
    pub code: Option<i32>,
}

/// One `audit.k8s.io/v1` `Event` (the fields tests need; `raw` has everything).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditEvent {
    /// Unique id of the request.
    #[serde(rename = "auditID", default)]
    pub audit_id: String,
    /// Stage (always `ResponseComplete` or `Panic` with the harness policy).
    #[serde(default)]
    pub stage: String,
    /// Kubernetes verb: get, list, watch, create, update, patch, delete, deletecollection.
    #[serde(default)]
    pub verb: String,
    /// Request URI including the query string (e.g. `?dryRun=All&fieldManager=...`).
    #[serde(rename = "requestURI", default)]
    pub request_uri: String,
    /// Authenticated user.
    #[serde(default)]
    pub user: UserInfo,
    /// The user the request was made as, when the authenticated one impersonated another.
    #[serde(default)]
    pub impersonated_user: Option<UserInfo>,
    /// User-Agent header.
    #[serde(default)]
    pub user_agent: Option<String>,
    /// Target object, when the request addresses a resource.
    #[serde(default)]
    pub object_ref: Option<ObjectRef>,
    /// Response status.
    #[serde(default)]
    pub response_status: ResponseStatus,
    /// The whole event.
    #[serde(skip)]
    pub raw: serde_json::Value,
}

impl AuditEvent {
    /// The `fieldManager` query parameter of the request, if any.
    pub fn field_manager(&self) -> Option<&str> {
        let query = self.request_uri.split_once('?')?.1;
        query
            .split('&')
            .find_map(|p| p.strip_prefix("fieldManager="))
    }

    /// A mutating request (create, update, patch, delete, deletecollection) that was not a
    /// dry run.
    pub fn is_write(&self) -> bool {
        matches!(
            self.verb.as_str(),
            "create" | "update" | "patch" | "delete" | "deletecollection"
        ) && !self.request_uri.contains("dryRun=All")
    }

    /// Namespace of the target object, if any.
    pub fn namespace(&self) -> Option<&str> {
        self.object_ref.as_ref()?.namespace.as_deref()
    }

    /// The id of the credential the request was authenticated with (`JTI=<id>` for a
    /// ServiceAccount token), if the API server recorded one.
    pub fn credential_id(&self) -> Option<&str> {
        self.user
            .extra
            .get("authentication.kubernetes.io/credential-id")?
            .first()
            .map(String::as_str)
    }

    /// Plural resource of the target object, if any.
    pub fn resource(&self) -> Option<&str> {
        self.object_ref.as_ref()?.resource.as_deref()
    }
}

/// Handle on a control plane's audit log file.
#[derive(Debug, Clone)]
pub struct AuditLog {
    path: PathBuf,
}

impl AuditLog {
    pub(crate) fn new(path: PathBuf) -> Self {
        AuditLog { path }
    }

    /// Path of the JSON-lines file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The current end of the log.
    pub fn mark(&self) -> AuditMark {
        AuditMark(std::fs::metadata(&self.path).map(|m| m.len()).unwrap_or(0))
    }

    /// All events so far.
    pub fn events(&self) -> Result<Vec<AuditEvent>, AuditError> {
        self.events_since(AuditMark(0))
    }

    /// Events written after `mark` (complete lines only).
    pub fn events_since(&self, mark: AuditMark) -> Result<Vec<AuditEvent>, AuditError> {
        let read_err = |source| AuditError::Read {
            path: self.path.clone(),
            source,
        };
        let mut f = match std::fs::File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(read_err(e)),
        };
        // Read from one byte before the mark and skip through the first newline: on a line
        // boundary that byte is the newline itself; a mark taken while the API server was
        // part-way through a line (other tests share the control plane) skips that line, whose
        // event belongs to a request already in flight before the mark.
        f.seek(SeekFrom::Start(mark.0.saturating_sub(1)))
            .map_err(read_err)?;
        let mut bytes = Vec::new();
        f.read_to_end(&mut bytes).map_err(read_err)?;
        let text = String::from_utf8_lossy(&bytes);
        let text: &str = match (mark.0, text.find('\n')) {
            (0, _) => &text,
            (_, Some(i)) => &text[i + 1..],
            (_, None) => "",
        };
        let complete = match text.rfind('\n') {
            Some(i) => &text[..=i],
            None => "",
        };
        complete
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                let raw: serde_json::Value =
                    serde_json::from_str(l).map_err(|source| AuditError::Parse {
                        path: self.path.clone(),
                        source,
                    })?;
                let mut ev: AuditEvent =
                    serde_json::from_value(raw.clone()).map_err(|source| AuditError::Parse {
                        path: self.path.clone(),
                        source,
                    })?;
                ev.raw = raw;
                Ok(ev)
            })
            .collect()
    }

    /// Number of write requests (see [`AuditEvent::is_write`]) since `mark` that match `filter`.
    pub fn count_writes_since(
        &self,
        mark: AuditMark,
        filter: impl Fn(&AuditEvent) -> bool,
    ) -> Result<usize, AuditError> {
        Ok(self
            .events_since(mark)?
            .iter()
            .filter(|e| e.is_write() && filter(e))
            .count())
    }

    /// Write requests since `mark` made with field manager `manager` (server-side applies and
    /// status writes name it in their `fieldManager` query parameter), in order.
    pub fn writes_by_manager_since(
        &self,
        mark: AuditMark,
        manager: &str,
    ) -> Result<Vec<AuditEvent>, AuditError> {
        Ok(self
            .events_since(mark)?
            .into_iter()
            .filter(|e| e.is_write() && e.field_manager() == Some(manager))
            .collect())
    }

    /// Waits until the requests that returned before this call are in the log: makes a request of
    /// its own (a GET of a uniquely named ConfigMap that does not exist) and waits, at most `max`,
    /// for its event. The API server writes events in blocking mode, each before its handler
    /// finishes, so an event that follows a request's response is on disk once a later
    /// request's is: an event to wait for, not a quiet period.
    pub async fn sync(&self, client: &kube::Client, max: Duration) -> Result<(), AuditError> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static N: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "capstan-audit-sync-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let err = |message: String| AuditError::Sync {
            path: self.path.clone(),
            message,
        };
        let mark = self.mark();
        let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
            kube::Api::namespaced(client.clone(), "default");
        api.get_opt(&name)
            .await
            .map_err(|e| err(format!("GET {name}: {e}")))?;
        let deadline = Instant::now() + max;
        loop {
            if self
                .events_since(mark)?
                .iter()
                .any(|e| e.request_uri.contains(&name))
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(err(format!("no event for {name} within {max:?}")));
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Waits until the log has not grown for `quiet` (at most `max`), so that events of
    /// requests that just returned are on disk. Prefer [`AuditLog::sync`], which waits for an
    /// event instead of a quiet period.
    pub async fn settle(&self, quiet: Duration, max: Duration) {
        let deadline = Instant::now() + max;
        let mut last = self.mark();
        let mut since = Instant::now();
        while Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(25)).await;
            let now = self.mark();
            if now != last {
                last = now;
                since = Instant::now();
            } else if since.elapsed() >= quiet {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_field_manager_is_read_from_the_query() {
        let ev = |uri: &str| AuditEvent {
            request_uri: uri.into(),
            ..serde_json::from_value(
                serde_json::json!({"auditID": "a", "stage": "ResponseComplete", "verb": "patch",
                "requestURI": "", "user": {"username": "u"}, "responseStatus": {}}),
            )
            .unwrap()
        };
        assert_eq!(
            ev("/api/v1/x?fieldManager=capstan&force=true").field_manager(),
            Some("capstan")
        );
        assert_eq!(
            ev("/api/v1/x?force=true&fieldManager=capstan-harness").field_manager(),
            Some("capstan-harness")
        );
        assert_eq!(ev("/api/v1/x").field_manager(), None);
    }

    #[test]
    fn parses_events_and_counts_writes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let line = |verb: &str, uri: &str| {
            format!(
                r#"{{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"x","stage":"ResponseComplete","requestURI":"{uri}","verb":"{verb}","user":{{"username":"admin","groups":["system:masters"]}},"objectRef":{{"resource":"clusters","namespace":"ns1","apiGroup":"cluster.x-k8s.io","apiVersion":"v1beta2"}},"responseStatus":{{"code":200}}}}"#
            )
        };
        std::fs::write(&path, format!("{}\n", line("get", "/x"))).unwrap();
        let log = AuditLog::new(path.clone());
        let mark = log.mark();
        let more = format!(
            "{}\n{}\n{}",
            line("patch", "/a"),
            line("patch", "/a?dryRun=All"),
            "{\"partial"
        );
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .and_then(|mut f| std::io::Write::write_all(&mut f, more.as_bytes()))
            .unwrap();
        let evs = log.events_since(mark).unwrap();
        assert_eq!(evs.len(), 2);
        assert_eq!(evs[0].namespace(), Some("ns1"));
        assert_eq!(
            log.count_writes_since(mark, |e| e.resource() == Some("clusters"))
                .unwrap(),
            1
        );
        assert_eq!(log.events().unwrap().len(), 3);
    }

    #[test]
    fn a_mark_taken_mid_line_skips_that_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let ev = |uri: &str| {
            format!(
                r#"{{"auditID":"x","stage":"ResponseComplete","requestURI":"{uri}","verb":"patch","user":{{"username":"u"}},"responseStatus":{{"code":200}}}}"#
            )
        };
        let first = ev("/first");
        // The API server has written half of the first event when the mark is taken.
        std::fs::write(&path, &first[..first.len() / 2]).unwrap();
        let log = AuditLog::new(path.clone());
        let mark = log.mark();
        let rest = format!("{}\n{}\n", &first[first.len() / 2..], ev("/second"));
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .and_then(|mut f| std::io::Write::write_all(&mut f, rest.as_bytes()))
            .unwrap();
        let uris: Vec<String> = log
            .events_since(mark)
            .unwrap()
            .into_iter()
            .map(|e| e.request_uri)
            .collect();
        assert_eq!(uris, ["/second"]);
        // A mark on a line boundary keeps the line after it.
        let at_boundary = AuditMark(first.len() as u64 + 1);
        assert_eq!(log.events_since(at_boundary).unwrap().len(), 1);
        assert_eq!(log.events().unwrap().len(), 2);
    }
}
