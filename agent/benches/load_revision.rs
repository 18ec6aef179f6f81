//! Benchmark (prints figures; not a test): what the agent does before it can plan a push that
//! changes one cluster of a large fleet, without an API server: the Git source synced to the
//! new commit (fetch from a local repository, the commit's tree read) and the fleet loaded with
//! the render cache of the revision before (layout, validation, versions, CIDRs, tenancy,
//! collisions; one cluster read and rendered).
//!
//! These are the `source` and `render` stages of push → applied; at 10,000 clusters they were
//! most of it. Rounds alternate between the fleet's commit and one scaling `w0000`, so every
//! round is a one-cluster change.
//!
//! Run: `CAPSTAN_BENCH_CLUSTERS=10000 cargo bench -p capstan --bench load_revision`
//! (default 1,000 clusters; `CAPSTAN_BENCH_ROUNDS` rounds, default 6).

mod support;

use std::time::{Duration, Instant};

use capstan::source::GitSource;
use capstan_layout::{Fetched, RenderCache, load_fetched};
use support::setting;

fn main() {
    let n = setting::<usize>("CAPSTAN_BENCH_CLUSTERS", 1000);
    let rounds = setting::<usize>("CAPSTAN_BENCH_ROUNDS", 6);
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("fleet");
    let fleet = support::write_fleet(&repo, n);
    let c1 = fleet.commit.clone();
    let c2 = support::scale_w0000(&repo, 2, 3);
    let cfg = capstan::daemon::git_config(
        repo.display().to_string(),
        Some("main".into()),
        None,
        None,
        tmp.path().join("mirror"),
        None,
        None,
        None,
    );
    let mut src = GitSource::open(cfg).unwrap();
    let mut cache = RenderCache::default();
    let fetched = Fetched::default();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let mut changes = Vec::new();
    println!("fleet: {n} workload clusters + management");
    for round in 0..=rounds {
        let target = if round % 2 == 0 { &c1 } else { &c2 };
        support::bench_git(&repo, &["reset", "-q", "--hard", target]);
        let t = Instant::now();
        src.sync().unwrap();
        let source = t.elapsed();
        let tree = src.last_good().unwrap().tree.clone();
        let t = Instant::now();
        let loaded = load_fetched(&tree, &fetched, &mut cache);
        let load = t.elapsed();
        assert!(!loaded.has_errors());
        assert_eq!(loaded.clusters.len(), n + 1);
        if round == 0 {
            println!(
                "first revision: source {:.0} ms, load {:.0} ms (every cluster read and rendered)",
                ms(source),
                ms(load)
            );
        } else {
            assert_eq!((cache.reads, cache.misses), (1, 1), "one cluster changed");
            changes.push((source, load));
        }
    }
    changes.sort_by_key(|(s, l)| *s + *l);
    let (source, load) = changes[changes.len() / 2];
    let (best_s, best_l) = changes[0];
    println!(
        "one-cluster change, median of {rounds}: source {:.0} ms + load {:.0} ms = {:.0} ms (best {:.0} ms)",
        ms(source),
        ms(load),
        ms(source + load),
        ms(best_s + best_l)
    );
}
