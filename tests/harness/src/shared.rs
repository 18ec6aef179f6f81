//! One control plane per test binary, and namespaces that isolate tests sharing it.
//!
//! Starting a control plane costs seconds, so tests normally share one per test binary:
//! `let cp = capstan_harness::shared().await;`. It is started on first use and lives in
//! a `static`. Every `#[tokio::test]` has its own runtime, which is why the shared value
//! holds only runtime-independent things (std child processes, a [`kube::Config`]) and
//! [`ControlPlane::client`] makes a client for the calling runtime.
//!
//! Statics are never dropped, so the shared control plane is cleaned up by its watchdog
//! when the test binary exits (see [`crate::process`]): within a moment of the exit both
//! processes get SIGTERM (SIGKILL 5 s later) and the temp dir is removed.
//!
//! [`TestNamespace`] gives each test its own namespace. There is no
//! kube-controller-manager, so a deleted namespace would stay `Terminating` forever; the
//! helper therefore empties the namespace itself (`deletecollection` on every namespaced
//! resource) and then removes the `kubernetes` finalizer through the `finalize`
//! subresource, which is what the namespace controller would do.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, ObjectMeta, PostParams};
use kube::discovery::{Discovery, Scope, verbs};
use kube::{Client, Config};
use tokio::sync::OnceCell;

use crate::control_plane::ControlPlane;

/// Errors of namespace handling.
#[derive(Debug, thiserror::Error)]
pub enum NamespaceError {
    /// An API call failed.
    #[error("{action} namespace {name}: {source}")]
    Kube {
        action: &'static str,
        name: String,
        source: kube::Error,
    },
    /// The namespace did not go away in time.
    #[error("namespace {0} still exists after deletion")]
    Stuck(String),
}

static SHARED: OnceCell<ControlPlane> = OnceCell::const_new();

/// The control plane shared by all tests of this test binary (started on first call).
///
/// # Panics
/// If the control plane cannot be started (the message has the reason and log tail).
pub async fn shared() -> &'static ControlPlane {
    SHARED
        .get_or_init(|| async {
            match ControlPlane::start().await {
                Ok(cp) => cp,
                Err(e) => panic!("starting the shared test control plane failed: {e}"),
            }
        })
        .await
}

static SHARED_CONTROLLERS: OnceCell<ControlPlane> = OnceCell::const_new();

/// A control plane with the real controllers running (see [`crate::control_plane::controllers`]), shared by
/// the tests of this test binary that need them (started on first call; the first call also
/// builds the controllers when they are not cached).
///
/// # Panics
/// If it cannot be started (the message has the reason and log tail).
pub async fn shared_with_controllers() -> &'static ControlPlane {
    SHARED_CONTROLLERS
        .get_or_init(|| async {
            let opts = crate::StartOptions {
                controllers: true,
                timeout: std::time::Duration::from_secs(180),
                ..Default::default()
            };
            match ControlPlane::start_with(opts).await {
                Ok(cp) => cp,
                Err(e) => {
                    panic!("starting the shared test control plane with controllers failed: {e}")
                }
            }
        })
        .await
}

/// The shared control plane with controllers if it was already started.
pub fn shared_if_started_with_controllers() -> Option<&'static ControlPlane> {
    SHARED_CONTROLLERS.get()
}

/// The shared control plane if it was already started.
pub fn shared_if_started() -> Option<&'static ControlPlane> {
    SHARED.get()
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A uniquely named namespace, deleted (completely, see the module docs) on drop.
#[derive(Debug)]
pub struct TestNamespace {
    name: String,
    config: Config,
    deleted: bool,
}

impl TestNamespace {
    /// Creates `<prefix>-<unique suffix>` (prefix is truncated/lower-cased to stay a DNS label).
    pub async fn create(cp: &ControlPlane, prefix: &str) -> Result<Self, NamespaceError> {
        let prefix: String = prefix
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '-'
                }
            })
            .take(40)
            .collect();
        let prefix = prefix.trim_matches('-');
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let name = format!(
            "{}-{:x}{:x}{n}",
            if prefix.is_empty() { "test" } else { prefix },
            std::process::id(),
            nanos
        );
        let name: String = name.chars().take(63).collect();
        let api: Api<Namespace> = Api::all(cp.client());
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        api.create(&PostParams::default(), &ns)
            .await
            .map_err(|source| NamespaceError::Kube {
                action: "create",
                name: name.clone(),
                source,
            })?;
        Ok(TestNamespace {
            name,
            config: cp.kube_config().clone(),
            deleted: false,
        })
    }

    /// The namespace name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Deletes the namespace now and waits until it is gone.
    pub async fn delete(mut self) -> Result<(), NamespaceError> {
        self.deleted = true;
        crate::install_crypto_provider();
        let client =
            Client::try_from(self.config.clone()).map_err(|source| NamespaceError::Kube {
                action: "client for",
                name: self.name.clone(),
                source,
            })?;
        delete_namespace(&client, &self.name).await
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        if self.deleted {
            return;
        }
        // Drop cannot await, and the test's runtime may be shutting down: delete on a
        // private runtime in a helper thread, and wait for it.
        let (name, config) = (self.name.clone(), self.config.clone());
        let handle = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            rt.block_on(async {
                crate::install_crypto_provider();
                let client = Client::try_from(config).ok()?;
                tokio::time::timeout(Duration::from_secs(30), delete_namespace(&client, &name))
                    .await
                    .ok()?
                    .ok()
            })
        });
        let _ = handle.join();
    }
}

/// Empties `name`, deletes it and removes the `kubernetes` finalizer.
pub async fn delete_namespace(client: &Client, name: &str) -> Result<(), NamespaceError> {
    let err = |action| {
        move |source| NamespaceError::Kube {
            action,
            name: name.to_owned(),
            source,
        }
    };
    let discovery = Discovery::new(client.clone())
        .run_aggregated()
        .await
        .map_err(err("discover for"))?;
    let mut tasks = tokio::task::JoinSet::new();
    for group in discovery.groups() {
        for (ar, caps) in group.recommended_resources() {
            if caps.scope != Scope::Namespaced || !caps.supports_operation(verbs::DELETE_COLLECTION)
            {
                continue;
            }
            if ar.plural == "events" && ar.group.is_empty() {
                // Events are cheap to leave (and expire); skip the round trip.
                continue;
            }
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), name, &ar);
            tasks.spawn(async move {
                let _ = api
                    .delete_collection(&DeleteParams::background(), &ListParams::default())
                    .await;
            });
        }
    }
    while tasks.join_next().await.is_some() {}

    let api: Api<Namespace> = Api::all(client.clone());
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
        Err(e) => return Err(err("delete")(e)),
    }
    for _ in 0..50 {
        let mut ns = match api.get(name).await {
            Ok(ns) => ns,
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
            Err(e) => return Err(err("get")(e)),
        };
        if let Some(spec) = ns.spec.as_mut() {
            spec.finalizers = Some(Vec::new());
        }
        match api
            .replace_subresource("finalize", name, &PostParams::default(), &ns)
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(e) => return Err(err("finalize")(e)),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(NamespaceError::Stuck(name.to_owned()))
}

impl ControlPlane {
    /// Creates a uniquely named namespace that is deleted when the returned value drops.
    pub async fn test_namespace(&self, prefix: &str) -> Result<TestNamespace, NamespaceError> {
        TestNamespace::create(self, prefix).await
    }
}
