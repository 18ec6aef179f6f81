//! Watching a local working copy: edit a cluster spec, see it reconciled, no commit needed.
//!
//! This is the inner loop for someone trying capstan against a local management cluster. Events
//! come from notify through notify-debouncer-full (recursive, [`DEFAULT_DEBOUNCE`]), so an editor's
//! save (write temp file, rename, chmod) or a `git checkout` touching hundreds of files arrives as
//! one batch and fires one [`Trigger::LocalChange`]. The trigger channel coalesces further.
//!
//! Ignored, because they are not the desired state and would otherwise cause reconcile loops:
//! anything under a `.git/` directory (every `git status` rewrites the index), editor droppings
//! (`*.swp`, `*.swo`, `*.swx`, `*~`, `.#*`, `#*#`, vim's `4913` probe, JetBrains `___jb_*___`), and
//! pure access events (the agent reading its own working copy must not trigger itself).
//!
//! The debouncer calls back on its own thread, not a tokio one; [`TriggerSender::fire`] is
//! synchronous and non-blocking, so it is called right there. Watch errors (for example an
//! inotify queue overflow) may mean missed events, so they fire a trigger too: a reconcile is
//! idempotent, a missed change is not noticed.

use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use notify_debouncer_full::notify::event::{EventKind, MetadataKind, ModifyKind};
use notify_debouncer_full::notify::{RecommendedWatcher, RecursiveMode};
use notify_debouncer_full::{
    DebounceEventResult, DebouncedEvent, Debouncer, RecommendedCache, new_debouncer,
};

use super::trigger::{Trigger, TriggerSender};

/// How long the file system must be quiet before a batch of events is delivered.
pub const DEFAULT_DEBOUNCE: Duration = Duration::from_millis(300);

/// How many firing paths [`LocalWatcher::fired_for`] keeps.
pub const FIRED_KEPT: usize = 64;

/// Why the working copy cannot be watched.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// The directory does not exist or cannot be resolved.
    #[error("cannot watch {}: {source}", path.display())]
    Root {
        /// The directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The OS watcher could not be started or could not watch the directory (inotify limits).
    #[error("cannot watch {}: {source}", path.display())]
    Notify {
        /// The directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: notify_debouncer_full::notify::Error,
    },
}

/// A running watch; dropping it (or [`LocalWatcher::stop`]) stops watching.
pub struct LocalWatcher {
    debouncer: Debouncer<RecommendedWatcher, RecommendedCache>,
    root: PathBuf,
    fired: Arc<Mutex<Vec<PathBuf>>>,
}

impl LocalWatcher {
    /// The watched directory (canonical).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The path that made each trigger fire so far (the first relevant path of its batch), the
    /// last [`FIRED_KEPT`]: what a test waits on instead of waiting for nothing to happen.
    pub fn fired_for(&self) -> Vec<PathBuf> {
        self.fired.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Stops watching and waits for the debouncer thread to finish.
    pub fn stop(self) {
        self.debouncer.stop();
    }
}

impl std::fmt::Debug for LocalWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalWatcher")
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

/// Watches `root` recursively with the default debounce, firing [`Trigger::LocalChange`].
pub fn watch_local(root: &Path, triggers: TriggerSender) -> Result<LocalWatcher, WatchError> {
    watch_local_with(root, DEFAULT_DEBOUNCE, triggers)
}

/// Watches `root` recursively, delivering events after `debounce` of quiet.
pub fn watch_local_with(
    root: &Path,
    debounce: Duration,
    triggers: TriggerSender,
) -> Result<LocalWatcher, WatchError> {
    let root = root.canonicalize().map_err(|source| WatchError::Root {
        path: root.to_owned(),
        source,
    })?;
    let callback_root = root.clone();
    let fired: Arc<Mutex<Vec<PathBuf>>> = Arc::default();
    let record = fired.clone();
    let handler = move |result: DebounceEventResult| match result {
        Ok(events) => {
            if let Some(path) = first_relevant(&callback_root, &events) {
                tracing::debug!(path = %path.display(), events = events.len(), "local change");
                let mut f = record.lock().unwrap_or_else(|p| p.into_inner());
                if f.len() >= FIRED_KEPT {
                    f.remove(0);
                }
                f.push(path.to_path_buf());
                drop(f);
                triggers.fire(Trigger::LocalChange);
            }
        }
        Err(errors) => {
            for e in &errors {
                tracing::warn!(error = %e, "file watcher error; reconciling in case a change was missed");
            }
            triggers.fire(Trigger::LocalChange);
        }
    };
    let notify_err = |source| WatchError::Notify {
        path: root.clone(),
        source,
    };
    let mut debouncer = new_debouncer(debounce, None, handler).map_err(notify_err)?;
    debouncer
        .watch(&root, RecursiveMode::Recursive)
        .map_err(notify_err)?;
    tracing::info!(root = %root.display(), "watching the local working copy");
    Ok(LocalWatcher {
        debouncer,
        root,
        fired,
    })
}

/// The first path in a batch that is a change to the desired state, if any.
fn first_relevant<'a>(root: &'a Path, events: &'a [DebouncedEvent]) -> Option<&'a Path> {
    events
        .iter()
        .filter(|e| is_relevant_kind(&e.kind) || e.need_rescan())
        .find_map(|e| {
            if e.need_rescan() {
                // The OS dropped events; the paths say nothing about what changed.
                return Some(root_or_first(root, e));
            }
            e.paths
                .iter()
                .map(PathBuf::as_path)
                .find(|p| !is_ignored(root, p))
        })
}

fn root_or_first<'a>(root: &'a Path, e: &'a DebouncedEvent) -> &'a Path {
    e.paths.first().map(PathBuf::as_path).unwrap_or(root)
}

fn is_relevant_kind(kind: &EventKind) -> bool {
    !matches!(
        kind,
        EventKind::Access(_) | EventKind::Modify(ModifyKind::Metadata(MetadataKind::AccessTime))
    )
}

/// Whether a changed path is not part of the desired state: under `.git/`, or an editor's
/// temporary file. `path` may be absolute (under `root`) or relative to it.
pub fn is_ignored(root: &Path, path: &Path) -> bool {
    let relative = path.strip_prefix(root).unwrap_or(path);
    if relative
        .components()
        .any(|c| matches!(c, Component::Normal(name) if name == ".git"))
    {
        return true;
    }
    let Some(name) = relative.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    name.ends_with(".swp")
        || name.ends_with(".swo")
        || name.ends_with(".swx")
        || name.ends_with('~')
        || name.starts_with(".#")
        || (name.len() > 1 && name.starts_with('#') && name.ends_with('#'))
        || name == "4913"
        || (name.ends_with("___jb_tmp___") || name.ends_with("___jb_old___"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn git_and_editor_files_are_ignored() {
        let root = Path::new("/repo");
        for p in [
            "/repo/.git",
            "/repo/.git/index",
            "/repo/.git/refs/heads/main",
            "/repo/clusters/.a.yaml.swp",
            "/repo/clusters/a.yaml.swx",
            "/repo/clusters/a.yaml~",
            "/repo/clusters/.#a.yaml",
            "/repo/clusters/#a.yaml#",
            "/repo/clusters/4913",
            "/repo/clusters/a.yaml___jb_tmp___",
            "sub/.git/HEAD",
        ] {
            assert!(is_ignored(root, Path::new(p)), "{p} should be ignored");
        }
        for p in [
            "/repo/clusters/mgmt/cluster.yaml",
            "/repo/README.md",
            "/repo/.github/workflows/ci.yaml",
            "/repo/#",
        ] {
            assert!(!is_ignored(root, Path::new(p)), "{p} should count");
        }
    }

    #[test]
    fn access_events_do_not_count() {
        use notify_debouncer_full::notify::event::AccessKind;
        assert!(!is_relevant_kind(&EventKind::Access(AccessKind::Any)));
        assert!(!is_relevant_kind(&EventKind::Modify(ModifyKind::Metadata(
            MetadataKind::AccessTime
        ))));
        assert!(is_relevant_kind(&EventKind::Modify(ModifyKind::Any)));
    }
}
