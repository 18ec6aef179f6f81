//! `--verify-commits` for `capstan plan` and `capstan diff`: commits of a local repository
//! checked by the agent's own rules ([`crate::source::verify`]), so CI refuses what the agent
//! would refuse.

use std::path::Path;
use std::time::SystemTime;

use anyhow::Context;

use crate::cli::VerifyArgs;
use crate::source::verify::{Mode, Unverified, Verified, verify_commit};

/// Verifies `head` of the repository at `repo` (with `all` and a `base`, every commit from
/// `base` to `head`); prints each good signature on stderr. Err: the refusal.
pub fn verify_local(
    repo: &Path,
    base: Option<&str>,
    head: &str,
    args: &VerifyArgs,
) -> anyhow::Result<Verified> {
    let keys = args.keys()?;
    let r =
        gix::discover(repo).with_context(|| format!("{}: not a Git repository", repo.display()))?;
    let id = |rev: &str| -> anyhow::Result<gix::ObjectId> {
        Ok(r.rev_parse_single(rev)
            .with_context(|| format!("unknown revision {rev}"))?
            .object()?
            .peel_to_commit()
            .with_context(|| format!("{rev} is not a commit"))?
            .id)
    };
    let tip = id(head)?;
    let commits = match (args.mode(), base) {
        (Some(Mode::All), Some(base)) => {
            let mut v: Vec<gix::ObjectId> = r
                .rev_walk([tip])
                .with_hidden([id(base)?])
                .all()?
                .map(|i| i.map(|i| i.id))
                .collect::<Result<_, _>>()?;
            v.reverse();
            v
        }
        _ => vec![tip],
    };
    let now = SystemTime::now();
    let mut last = None;
    for c in commits {
        let data = r.find_object(c)?.detach().data;
        match verify_commit(&c.to_string(), &data, &keys, now) {
            Ok(v) => {
                eprintln!("{v}");
                last = Some(v);
            }
            Err(refused) => {
                let u = Unverified {
                    head: tip.to_string(),
                    refused,
                };
                anyhow::bail!(
                    "revision {head} ({}) refused by --verify-commits: {u}",
                    &u.head[..12]
                );
            }
        }
    }
    last.context("no commit to verify")
}
