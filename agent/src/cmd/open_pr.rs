//! `--open-pr`: a repository change (a new cluster, a tombstone, a suspension) made on a branch
//! and proposed as a pull request, the way developers without admin credentials create clusters.
//!
//! ```text
//! git fetch <remote> <base> ─▶ temporary worktree at it ─▶ make the change there
//!   ─▶ validate the whole fleet with it (refuse, push nothing, on any error)
//!   ─▶ commit ─▶ git push --force <remote> HEAD:refs/heads/<branch>
//!   ─▶ GitHub: open the PR, or update the open one of that branch; body = `capstan diff`
//! ```
//!
//! The change is always made afresh from the base branch and force-pushed, so re-running the
//! command (other values, a rebased base) moves the same branch and edits the same pull request
//! instead of stacking commits or opening duplicates. The user's working copy is not touched.
//! Pushing goes through the `git` binary (gix cannot push), reaching the remote as the agent
//! does: `--ssh-key`/`--known-hosts` become `GIT_SSH_COMMAND`, `--ca-file` is added to the
//! system's roots in `GIT_SSL_CAINFO`; otherwise git's own credentials (helpers, agent) apply.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{Context, bail};
use capstan_layout::{Tree, load};

use crate::cli::PrArgs;
use crate::plan::report::COMMENT_LIMIT;

/// Git in `dir` with the credentials of `pr`.
struct Git<'a> {
    pr: &'a PrArgs,
    /// The system's CA certificates plus `--ca-file`'s.
    ca_bundle: Option<PathBuf>,
}

/// `--ca-file` added to the system's roots, as the agent's source trusts it: git's
/// `GIT_SSL_CAINFO` (which wins over `http.sslCAInfo`) replaces the roots rather than adding.
fn ca_bundle(extra: &Path, dir: &Path) -> anyhow::Result<PathBuf> {
    let mut pem = std::fs::read(extra).with_context(|| format!("reading {}", extra.display()))?;
    let system = [
        std::env::var_os("GIT_SSL_CAINFO"),
        std::env::var_os("SSL_CERT_FILE"),
        Some("/etc/ssl/certs/ca-certificates.crt".into()),
    ];
    if let Some(bytes) = system
        .into_iter()
        .flatten()
        .find_map(|p| std::fs::read(p).ok())
    {
        pem.push(b'\n');
        pem.extend(bytes);
    }
    let path = dir.join("ca-bundle.pem");
    std::fs::write(&path, pem)?;
    Ok(path)
}

impl Git<'_> {
    fn command(&self, dir: &Path) -> Command {
        let mut cmd = Command::new("git");
        cmd.arg("-C").arg(dir);
        if let Some(ca) = &self.ca_bundle {
            cmd.env("GIT_SSL_CAINFO", ca);
        }
        if let Some(ssh) =
            crate::source::ssh_command(self.pr.ssh_key.as_deref(), self.pr.known_hosts.as_deref())
        {
            cmd.env("GIT_SSH_COMMAND", ssh);
        }
        cmd.env("GIT_TERMINAL_PROMPT", "0");
        cmd
    }

    fn run(&self, dir: &Path, args: &[&str]) -> anyhow::Result<String> {
        let out = self
            .command(dir)
            .args(args)
            .output()
            .context("running git")?;
        if !out.status.success() {
            bail!(
                "git {} failed: {}",
                args.iter()
                    .map(|a| crate::source::redact_url(a))
                    .collect::<Vec<_>>()
                    .join(" "),
                crate::source::redact_url(String::from_utf8_lossy(&out.stderr).trim())
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }
}

/// Removes the temporary worktree however the command ends.
struct Worktree<'a> {
    git: &'a Git<'a>,
    repo: PathBuf,
    dir: PathBuf,
    _tmp: tempfile::TempDir,
}

impl Drop for Worktree<'_> {
    fn drop(&mut self) {
        let dir = self.dir.display().to_string();
        let _ = self
            .git
            .run(&self.repo, &["worktree", "remove", "--force", &dir]);
    }
}

/// Makes `change` (in a worktree of `repo` at the remote's base branch), validates, commits,
/// pushes `branch` and opens or updates its pull request titled `title`.
pub fn open_pr(
    repo: &Path,
    pr: &PrArgs,
    branch: String,
    title: &str,
    change: impl FnOnce(&Path) -> anyhow::Result<()>,
) -> anyhow::Result<ExitCode> {
    let tmp = tempfile::tempdir()?;
    let ca_bundle = match &pr.ca_file {
        Some(f) => Some(ca_bundle(f, tmp.path())?),
        None => None,
    };
    let git = Git { pr, ca_bundle };
    let branch = pr.branch.clone().unwrap_or(branch);
    let remote = git
        .run(repo, &["remote", "get-url", &pr.remote])
        .with_context(|| format!("{} has no Git remote `{}`", repo.display(), pr.remote))?;
    let shown = crate::source::redact_url(&remote);
    git.run(repo, &["fetch", "--quiet", &remote, &pr.base])
        .with_context(|| format!("fetching {} from {shown}", pr.base))?;
    let base = git.run(repo, &["rev-parse", "FETCH_HEAD^{commit}"])?;
    let dir = tmp.path().join("worktree");
    git.run(
        repo,
        &[
            "worktree",
            "add",
            "--quiet",
            "--detach",
            &dir.display().to_string(),
            &base,
        ],
    )?;
    let wt = Worktree {
        git: &git,
        repo: repo.to_path_buf(),
        dir: dir.clone(),
        _tmp: tmp,
    };
    change(&wt.dir)?;
    // The fleet with the change must validate as a whole, or nothing is pushed.
    let fleet = load(&Tree::from_dir(&wt.dir)?);
    if fleet.has_errors() {
        for d in fleet.all_diagnostics().iter().filter(|d| d.is_error()) {
            eprintln!("{d}");
        }
        eprintln!("the fleet does not validate with this change: nothing pushed");
        return Ok(ExitCode::from(1));
    }
    git.run(&wt.dir, &["add", "--all"])?;
    if git.run(&wt.dir, &["status", "--porcelain"])?.is_empty() {
        bail!("the change leaves {} as it is: nothing to propose", pr.base);
    }
    let identity = git
        .run(&wt.dir, &["config", "user.email"])
        .unwrap_or_default();
    let mut commit = vec![];
    if identity.is_empty() {
        commit.extend([
            "-c",
            "user.name=capstan",
            "-c",
            "user.email=capstan@localhost",
        ]);
    }
    commit.extend(["commit", "--quiet", "-m", title]);
    git.run(&wt.dir, &commit)?;
    let head = git.run(&wt.dir, &["rev-parse", "HEAD"])?;
    let report = super::diff::report(&wt.dir, &base, Some(&head), None)?;
    let body = report.markdown(COMMENT_LIMIT);
    git.run(
        &wt.dir,
        &[
            "push",
            "--quiet",
            "--force",
            &remote,
            &format!("HEAD:refs/heads/{branch}"),
        ],
    )
    .with_context(|| format!("pushing {branch} to {shown}"))?;
    println!("pushed {branch} ({}) to {shown}", &head[..12]);
    let github = super::runtime()?.block_on(async {
        let Some(gh) = pr.github.client(&remote)? else {
            return anyhow::Ok(None);
        };
        Ok(Some(
            gh.open_or_update_pr(&branch, &pr.base, title, &body)
                .await?,
        ))
    })?;
    match github {
        Some((n, url, true)) => println!("opened pull request #{n}: {url}"),
        Some((n, url, false)) => println!("updated pull request #{n}: {url}"),
        None => println!(
            "no GitHub credentials (--github-token-file or a GitHub App): open the pull request from {branch} into {} yourself",
            pr.base
        ),
    }
    Ok(ExitCode::SUCCESS)
}
