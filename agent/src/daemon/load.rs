//! Loading a revision: the Git source synced (or the working copy read), then the fleet
//! validated and rendered with the release documents its fleet configs name.

use std::time::Instant;

use capstan_layout::{Fleet, RenderCache, Tree, load_fetched};
use tracing::{error, warn};

use super::Repo;
use crate::serve::{Metrics, PipelineStep};
use crate::source::release::ReleaseFetcher;
use crate::source::verify::{Unverified, Verified};
use crate::source::{GitSource, SourceError, Verification};

/// Loads a tree's fleet, fetching the release documents its fleet configs name (off the
/// runtime threads: the fetcher blocks).
async fn load_release(
    tree: &Tree,
    fetcher: &mut Option<ReleaseFetcher>,
    renders: &mut RenderCache,
) -> anyhow::Result<Fleet> {
    let f = fetcher
        .as_mut()
        .expect("the fetcher is put back after every round");
    // A failure of an earlier pass is retried.
    f.fetched.failures.clear();
    let mut fleet = load_fetched(tree, &f.fetched, renders);
    for _ in 0..crate::source::release::MAX_ROUNDS {
        let mut f = fetcher
            .take()
            .expect("the fetcher is put back after every round");
        let wanted = f.wanted(&fleet);
        if wanted.is_empty() {
            *fetcher = Some(f);
            break;
        }
        let f = tokio::task::spawn_blocking(move || {
            f.fetch(wanted);
            f
        })
        .await?;
        fleet = load_fetched(tree, &f.fetched, renders);
        *fetcher = Some(f);
    }
    Ok(fleet)
}

/// What [`load`] read.
pub(super) struct Read {
    /// The fleet and its revision; `None` when there is nothing to reconcile (logged).
    pub fleet: Option<(Fleet, String)>,
    /// The newest revision, refused by commit verification (the fleet is then the last
    /// verified revision's).
    pub refused: Option<Unverified>,
    /// The verified signature of the revision read (with verification).
    pub verified: Option<Verified>,
    /// The source could not be synced (the remote unreachable): nothing is known of the
    /// newest revision.
    pub unsynced: bool,
}

/// Reads the newest revision: the Git source synced (the last good revision kept while the
/// remote is unreachable or the newest revision is refused by `verification`), or the working
/// copy read; then validated and rendered.
pub(super) async fn load(
    repo: &Repo,
    source: &mut Option<GitSource>,
    fetcher: &mut Option<ReleaseFetcher>,
    renders: &mut RenderCache,
    metrics: &Metrics,
    verification: Option<Verification>,
) -> anyhow::Result<Read> {
    let t = Instant::now();
    let mut refused = None;
    let mut verified = None;
    let mut unsynced = false;
    let loaded = match (repo, source.take()) {
        (Repo::Git(_), Some(mut src)) => {
            let (src_back, result) = tokio::task::spawn_blocking(move || {
                src.set_verification(verification);
                let r = src.sync().map(|_| ());
                (src, r)
            })
            .await?;
            match result {
                Err(SourceError::Unverified(u)) => refused = Some(*u),
                // Keep serving the last good revision while the remote is unreachable.
                Err(e) => {
                    unsynced = true;
                    warn!(error = %e, "source unavailable; reconciling the last good revision")
                }
                Ok(()) => {}
            }
            verified = src_back.verified().cloned();
            metrics.observe_step(PipelineStep::Source, t.elapsed());
            // Loaded from the source's own copy of the tree: no second copy.
            let t = Instant::now();
            let out = match src_back.last_good() {
                Some(r) => Some((
                    load_release(&r.tree, fetcher, renders).await?,
                    r.commit.clone(),
                )),
                None => None,
            };
            metrics.observe_step(PipelineStep::Render, t.elapsed());
            *source = Some(src_back);
            out
        }
        (Repo::WorkingCopy(path), _) => match Tree::from_dir(path) {
            Ok(tree) => {
                metrics.observe_step(PipelineStep::Source, t.elapsed());
                let t = Instant::now();
                let fleet = load_release(&tree, fetcher, renders).await?;
                metrics.observe_step(PipelineStep::Render, t.elapsed());
                Some((fleet, "local".to_string()))
            }
            Err(e) => {
                error!(error = %e, "reading the working copy");
                None
            }
        },
        (Repo::Git(_), None) => unreachable!("the source is put back after every sync"),
    };
    // The validated specs stay: a chained upgrade renders its steps from them
    // (`capstan_layout::step`).
    Ok(Read {
        fleet: loaded,
        refused,
        verified,
        unsynced,
    })
}
