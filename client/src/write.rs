//! The one door for writes: every request by which capstan changes an API server — server-side
//! apply, merge patch, create, delete — and the review APIs' POSTs go out here and nowhere else
//! (`tests/structure` fails on a write named in any other file of the client or the agent).
//!
//! Why one door. What must hold for every write is decided in one place, as Flux's ssa package
//! keeps one file per verb:
//!
//! - **Who writes** travels in the [`Client`] behind the [`Api`] a caller hands in. A leading
//!   replica's clients carry its write fence ([`crate::k8s::fence`]: nothing leaves once it may
//!   no longer lead) and a fleet write's client carries its cluster's identity
//!   ([`crate::k8s::identity`]: impersonation the tenancy policy confines); both are layers of
//!   the client, set once where the client is made, so no write here can slip past them.
//! - **What it may touch**: the preconditions. A delete names the UID of the object whose labels
//!   were checked ([`Delete::of_uid`]), so an object created since under the same name is never
//!   the one deleted; a merge patch of an object read first names the resourceVersion read
//!   ([`Merge::read`]), so a change since is a conflict (409), not overwritten.
//! - **How**: a server-side apply always names its field manager and takes ownership of the
//!   fields it sets (`force`); strict field validation and dry runs are asked for by name.
//! - **What came of it**: a delete answers [`Deleted`] (gone, still held by finalizers, or not
//!   there at all), so no caller reads 404s or `Either`s by itself.

use kube::api::{
    Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions, PropagationPolicy,
    ValidationDirective,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// How a server-side apply is made.
#[derive(Debug, Clone)]
pub struct Apply<'a> {
    manager: &'a str,
    strict: bool,
    dry_run: bool,
}

impl<'a> Apply<'a> {
    /// As `manager`, taking ownership of the fields it sets.
    pub fn by(manager: &'a str) -> Apply<'a> {
        Apply {
            manager,
            strict: false,
            dry_run: false,
        }
    }

    /// An unknown or mistyped field is an error, not silently dropped by the server.
    pub fn strict(mut self) -> Apply<'a> {
        self.strict = true;
        self
    }

    /// Asks the server to admit it exactly as it would on apply, persisting nothing.
    pub fn dry_run(mut self) -> Apply<'a> {
        self.dry_run = true;
        self
    }

    fn params(&self) -> PatchParams {
        let p = PatchParams::apply(self.manager).force();
        let p = if self.strict {
            p.validation(ValidationDirective::Strict)
        } else {
            p
        };
        if self.dry_run { p.dry_run() } else { p }
    }
}

/// Server-side applies `body` to the object `name` of `api`.
pub async fn apply<K, B>(api: &Api<K>, name: &str, how: &Apply<'_>, body: &B) -> kube::Result<K>
where
    K: Clone + DeserializeOwned + std::fmt::Debug,
    B: Serialize + std::fmt::Debug,
{
    api.patch(name, &how.params(), &Patch::Apply(body)).await
}

/// Server-side applies `body` to the status subresource of the object `name` of `api`.
pub async fn apply_status<K, B>(
    api: &Api<K>,
    name: &str,
    how: &Apply<'_>,
    body: &B,
) -> kube::Result<K>
where
    K: Clone + DeserializeOwned + std::fmt::Debug,
    B: Serialize + std::fmt::Debug,
{
    api.patch_status(name, &how.params(), &Patch::Apply(body))
        .await
}

/// How a JSON merge patch is made.
#[derive(Debug, Clone, Default)]
pub struct Merge<'a> {
    manager: Option<&'a str>,
    read: Option<String>,
}

impl<'a> Merge<'a> {
    /// A merge patch with no precondition: the fields named are set whatever the object holds
    /// now (an annotation of its own, a pause taken off).
    pub fn blind() -> Merge<'a> {
        Merge::default()
    }

    /// Only onto the version of the object that was read (its resourceVersion): a change made
    /// since fails with 409 Conflict instead of being written over. `None` (the object as read
    /// had none) is no precondition.
    pub fn read(resource_version: Option<String>) -> Merge<'a> {
        Merge {
            manager: None,
            read: resource_version,
        }
    }

    /// Records the fields as `manager`'s.
    pub fn by(mut self, manager: &'a str) -> Merge<'a> {
        self.manager = Some(manager);
        self
    }
}

/// Merge-patches the object `name` of `api` with `patch` (a JSON object).
pub async fn merge<K>(api: &Api<K>, name: &str, how: &Merge<'_>, patch: &Value) -> kube::Result<K>
where
    K: Clone + DeserializeOwned + std::fmt::Debug,
{
    let params = PatchParams {
        field_manager: how.manager.map(str::to_string),
        ..Default::default()
    };
    let patch = preconditioned(patch, how.read.as_deref());
    api.patch(name, &params, &Patch::Merge(&patch)).await
}

/// `patch` with the resourceVersion read as its precondition, if one was.
fn preconditioned(patch: &Value, read: Option<&str>) -> Value {
    let mut patch = patch.clone();
    if let (Some(rv), Some(body)) = (read, patch.as_object_mut()) {
        let meta = body
            .entry("metadata")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Some(meta) = meta.as_object_mut() {
            meta.insert("resourceVersion".into(), Value::String(rv.to_string()));
        }
    }
    patch
}

/// Creates `body` in `api`, as `manager` when one is named. An object of the same name already
/// there is the caller's to read (409 Conflict).
pub async fn create<K>(api: &Api<K>, manager: Option<&str>, body: &K) -> kube::Result<K>
where
    K: Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    let params = PostParams {
        field_manager: manager.map(str::to_string),
        ..Default::default()
    };
    api.create(&params, body).await
}

/// Sends a review (TokenReview, SubjectAccessReview, SelfSubjectAccessReview): a POST that
/// asks the server a question and stores nothing, so the write fence lets it pass.
pub async fn review<K>(api: &Api<K>, body: &K) -> kube::Result<K>
where
    K: Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    api.create(&PostParams::default(), body).await
}

/// How a delete is made.
#[derive(Debug, Clone, Default)]
pub struct Delete {
    uid: Option<String>,
    background: bool,
}

impl Delete {
    /// Whatever object holds the name now, with the server's default propagation.
    pub fn any() -> Delete {
        Delete::default()
    }

    /// Only the object with this UID (the one whose labels were checked); `None`: the object
    /// was not read first, so no precondition.
    pub fn of_uid(uid: Option<String>) -> Delete {
        Delete {
            uid,
            background: false,
        }
    }

    /// Dependents are deleted by the garbage collector after the object is gone.
    pub fn background(mut self) -> Delete {
        self.background = true;
        self
    }
}

/// What a delete came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deleted {
    /// Gone now.
    Gone,
    /// Marked for deletion, held by finalizers.
    Terminating,
    /// Was not there (404).
    Absent,
}

/// Deletes the object `name` of `api`.
pub async fn delete<K>(api: &Api<K>, name: &str, how: &Delete) -> kube::Result<Deleted>
where
    K: Clone + DeserializeOwned + std::fmt::Debug,
{
    let params = DeleteParams {
        propagation_policy: how.background.then_some(PropagationPolicy::Background),
        preconditions: how.uid.clone().map(|uid| Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..Default::default()
    };
    match api.delete(name, &params).await {
        // The server answers with the object while finalizers hold it, with a Status once
        // it is gone.
        Ok(answer) if answer.is_left() => Ok(Deleted::Terminating),
        Ok(_) => Ok(Deleted::Gone),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(Deleted::Absent),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_apply_takes_ownership_and_asks_for_what_it_names() {
        let p = Apply::by("capstan").params();
        assert_eq!(p.field_manager.as_deref(), Some("capstan"));
        assert!(p.force && !p.dry_run && p.field_validation.is_none());
        let p = Apply::by("capstan").strict().dry_run().params();
        assert!(p.force && p.dry_run);
        assert!(matches!(
            p.field_validation,
            Some(ValidationDirective::Strict)
        ));
    }

    #[test]
    fn a_merge_of_what_was_read_names_its_version() {
        let patch = serde_json::json!({"metadata": {"annotations": {"a": "1"}}, "spec": {"x": 1}});
        assert_eq!(preconditioned(&patch, None), patch);
        let mut want = patch.clone();
        want["metadata"]["resourceVersion"] = "42".into();
        assert_eq!(preconditioned(&patch, Some("42")), want);
        let bare = serde_json::json!({"spec": {"x": 1}});
        assert_eq!(
            preconditioned(&bare, Some("7")),
            serde_json::json!({"spec": {"x": 1}, "metadata": {"resourceVersion": "7"}})
        );
    }
}
