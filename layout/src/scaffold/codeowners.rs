//! `.github/CODEOWNERS`: who must approve a change to which path of a fleet.
//!
//! Developers change a workload cluster through pull requests against its directory
//! `clusters/<mgmt>/workload-clusters/<name>/`. Everything else belongs to the platform admins:
//! each management cluster's own files (its spec, `fleet.yaml`), `clusters/suspend.yaml`,
//! `capstan-system/` (the agent's install manifests), CI workflows under `.github/`, and this
//! file itself. The file does that only if branch protection requires a code owner's review.
//!
//! GitHub reads the file top to bottom and the **last** matching pattern wins, so the file that
//! `capstan init` writes has three parts, in this order:
//!
//! ```text
//! * @admins                                       everything, unless a later line says otherwise
//! # capstan: workload owners ...
//! /clusters/mgmt/workload-clusters/dev/ @acme/dev one line per `capstan new cluster --owners`
//! # capstan: platform admins ...
//! /clusters/suspend.yaml @admins                  last, so no line above takes these paths
//! /clusters/*/*.yaml @admins                      each management cluster's own files
//! /clusters/*/*.yml @admins
//! /capstan-system/ @admins
//! /.github/ @admins
//! ```
//!
//! - A workload line names exactly one workload directory, so a team owns that directory and
//!   nothing else.
//! - The admins' block names no path inside a workload directory. `/clusters/mgmt/` would also
//!   match the workload directories and, being last, take them back from their teams.
//! - The admins' block uses `/clusters/*/*.yaml` rather than `/clusters/*/*`. GitHub documents
//!   `dir/*` as matching only files directly in `dir`, but gitignore matches a directory and
//!   everything below it. `*.yaml` means the same under both readings.
//!
//! [`owners_of`] answers "who owns this path" by GitHub's rules, so tests can check the file as
//! GitHub would read it.

use std::fmt;
use std::str::FromStr;

use crate::fleet::{CLUSTERS_DIR, WORKLOADS_DIR};

/// Where the file goes. GitHub looks there first, before `CODEOWNERS` and `docs/CODEOWNERS`.
pub const PATH: &str = ".github/CODEOWNERS";
/// The admins `capstan init` writes when `--admins` is not given.
pub const PLACEHOLDER: &str = "@OWNER/platform-admins";
/// The comment that opens the block of workload lines.
const WORKLOADS_MARK: &str = "# capstan: workload owners";
/// The comment that opens the admins' block, which must stay last.
const ADMINS_MARK: &str = "# capstan: platform admins";

/// A code owner: a GitHub user `@user` or a team `@org/team`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Owner(String);

/// Why a string is not an [`Owner`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{given}` is not a GitHub owner: {why}; use `@user` or `@org/team`")]
pub struct OwnerError {
    /// What was given.
    pub given: String,
    /// What is wrong with it.
    pub why: &'static str,
}

impl Owner {
    /// Parses `@user` or `@org/team`. E-mail addresses, which GitHub also accepts, are refused:
    /// they are easy to mistype, and a wrong one would protect nothing without any warning.
    pub fn parse(s: &str) -> Result<Owner, OwnerError> {
        let err = |why| OwnerError {
            given: s.to_string(),
            why,
        };
        let rest = s
            .strip_prefix('@')
            .ok_or_else(|| err("it does not start with `@`"))?;
        match rest.split_once('/') {
            None => login(rest).map_err(err)?,
            Some((org, team)) => {
                login(org).map_err(err)?;
                team_slug(team).map_err(err)?;
            }
        }
        Ok(Owner(s.to_string()))
    }

    /// [`PLACEHOLDER`].
    pub fn placeholder() -> Owner {
        Owner(PLACEHOLDER.to_string())
    }

    /// Whether this is [`PLACEHOLDER`].
    pub fn is_placeholder(&self) -> bool {
        self.0 == PLACEHOLDER
    }

    /// `@user` or `@org/team`.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for Owner {
    type Err = OwnerError;
    fn from_str(s: &str) -> Result<Owner, OwnerError> {
        Owner::parse(s)
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A GitHub user or organisation name.
fn login(s: &str) -> Result<(), &'static str> {
    if s.is_empty() {
        Err("the user or organisation name is empty")
    } else if s.len() > 39 {
        Err("a GitHub user or organisation name has at most 39 characters")
    } else if !s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
        Err("a GitHub user or organisation name has only letters, digits and `-`")
    } else if s.starts_with('-') || s.ends_with('-') {
        Err("a GitHub user or organisation name does not start or end with `-`")
    } else {
        Ok(())
    }
}

/// A team's slug (as in its URL).
fn team_slug(s: &str) -> Result<(), &'static str> {
    if s.is_empty() {
        Err("the team name is empty")
    } else if !s
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        Err("a team (its slug, as in the team's URL) has only letters, digits, `-` and `_`")
    } else {
        Ok(())
    }
}

fn joined(owners: &[Owner]) -> String {
    owners
        .iter()
        .map(Owner::as_str)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The file `capstan init` writes for management cluster `management`, owned by `admins` (not
/// empty). If `admins` holds [`PLACEHOLDER`], the file opens by saying to replace it.
pub fn render(management: &str, admins: &[Owner]) -> String {
    let a = joined(admins);
    let mut out = String::new();
    if admins.iter().any(Owner::is_placeholder) {
        out.push_str(&format!(
            "# REPLACE {PLACEHOLDER} below with your platform admins (`@user` or `@org/team`, with\n\
             # write access to this repository): until then this file protects nothing.\n\n"
        ));
    }
    out.push_str(&format!(
        "# Code owners of this capstan fleet, written by `capstan init` for management cluster {management}.\n\
         #\n\
         # The platform admins own everything: each management cluster's own files\n\
         # (clusters/<mgmt>/*.yaml, fleet.yaml), clusters/suspend.yaml, capstan-system/ (the agent's\n\
         # install manifests), CI workflows under .github/, this file, and the workload clusters'\n\
         # directories, except those that a line below gives to a team: such a line covers one\n\
         # directory, clusters/<mgmt>/workload-clusters/<name>/, and nothing else.\n\
         #\n\
         # This protects nothing unless the branch capstan follows is protected: require a pull request\n\
         # before merging, with review from Code Owners, and let no one bypass it. GitHub reads this\n\
         # file top to bottom, and the LAST pattern that matches a path decides who owns it.\n\
         \n\
         * {a}\n\
         \n\
         {WORKLOADS_MARK}: one line per workload directory, covering that directory only\n\
         # (`capstan new cluster <name> --owners @org/team` adds them here).\n\
         \n\
         {ADMINS_MARK}: keep this block last, so that no line above can take these paths\n\
         # from the admins. It names no path inside a workload directory.\n\
         /clusters/suspend.yaml {a}\n\
         /clusters/*/*.yaml {a}\n\
         /clusters/*/*.yml {a}\n\
         /capstan-system/ {a}\n\
         /.github/ {a}\n"
    ));
    out
}

/// Whether a CODEOWNERS file still names [`PLACEHOLDER`] in a rule.
pub fn has_placeholder(codeowners: &str) -> bool {
    codeowners
        .lines()
        .filter_map(rule)
        .any(|(_, owners)| owners.contains(&PLACEHOLDER))
}

/// `/clusters/<management>/workload-clusters/<name>/`: the pattern of one workload directory.
pub fn workload_pattern(management: &str, name: &str) -> String {
    format!("/{CLUSTERS_DIR}/{management}/{WORKLOADS_DIR}/{name}/")
}

/// What [`set_workload_owners`] changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edit {
    /// The new file.
    pub text: String,
    /// Lines removed because they already named this directory (left by a cluster of the
    /// same name that is gone): a new cluster never inherits an old team.
    pub removed: Vec<String>,
    /// The file has no admins' block, so the line went at its end. Being last, it wins for
    /// that directory, and it matches no path outside it.
    pub at_end: bool,
}

/// Gives the new workload directory `clusters/<management>/workload-clusters/<name>/` to
/// `owners`. The line goes at the end of the workload block, before the admins' block. Lines
/// already naming that directory are removed. With no `owners`, no line is added, and the
/// admins own the directory through `*`. Errors when a name could make the pattern match
/// anything but that one directory (these are DNS-1123 labels once the fleet validates).
pub fn set_workload_owners(
    codeowners: &str,
    management: &str,
    name: &str,
    owners: &[Owner],
) -> Result<Edit, String> {
    for n in [management, name] {
        let label = !n.is_empty()
            && n.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if !label {
            return Err(format!(
                "`{n}` cannot name a directory in {PATH}: only a-z, 0-9 and `-`"
            ));
        }
    }
    let dir = workload_pattern(management, name);
    let same_dir = |pattern: &str| {
        let p = pattern.trim_start_matches('/');
        let p = p.strip_suffix("/**").unwrap_or(p).trim_end_matches('/');
        p == dir.trim_matches('/')
    };
    let mut lines = Vec::new();
    let mut removed = Vec::new();
    for line in codeowners.lines() {
        match rule(line) {
            Some((pattern, _)) if same_dir(pattern) => removed.push(line.to_string()),
            _ => lines.push(line.to_string()),
        }
    }
    let mut at_end = false;
    if !owners.is_empty() {
        let new = format!("{dir} {}", joined(owners));
        match lines.iter().position(|l| l.starts_with(ADMINS_MARK)) {
            Some(mut at) => {
                while at > 0 && lines[at - 1].trim().is_empty() {
                    at -= 1;
                }
                lines.insert(at, new);
            }
            None => {
                at_end = true;
                lines.push(new);
            }
        }
    }
    let mut text = lines.join("\n");
    text.push('\n');
    Ok(Edit {
        text,
        removed,
        at_end,
    })
}

/// A rule line: its pattern and owners (none: the path has no owner). Comments and blank lines
/// are not rules.
fn rule(line: &str) -> Option<(&str, Vec<&str>)> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let mut words = line.split_whitespace();
    let pattern = words.next()?;
    Some((pattern, words.take_while(|w| !w.starts_with('#')).collect()))
}

/// Who owns `path` (a file, relative to the repository root), by GitHub's rules: the last rule
/// whose pattern matches decides, and a rule without owners means no owner (empty).
///
/// Patterns are read as GitHub documents them, gitignore style:
/// - a pattern with a `/` at its start or middle is anchored at the root; otherwise it matches
///   at any depth;
/// - `*` and `?` never match `/`, and `**` matches any number of directories;
/// - a pattern that matches a directory covers everything below it;
/// - but one ending in `/*` covers only the files directly in that directory (`docs/*`);
/// - one ending in `/` matches only directories.
///
/// Paths are case-sensitive. GitHub does not support `!` negation or `[]` ranges, so they are
/// not supported here either.
pub fn owners_of<'a>(codeowners: &'a str, path: &str) -> Vec<&'a str> {
    let path: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let mut owners = Vec::new();
    for (pattern, o) in codeowners.lines().filter_map(rule) {
        if matches(pattern, &path) {
            owners = o;
        }
    }
    owners
}

fn matches(pattern: &str, path: &[&str]) -> bool {
    let dir_only = pattern.ends_with('/');
    let trimmed = pattern.trim_end_matches('/');
    let anchored = trimmed.contains('/');
    let mut segs: Vec<&str> = trimmed.trim_start_matches('/').split('/').collect();
    if segs.iter().all(|s| s.is_empty()) {
        return false;
    }
    if !anchored {
        segs.insert(0, "**");
    }
    let direct_only = segs.last() == Some(&"*") && segs.len() > 1 && anchored;
    let mut ends = Vec::new();
    prefix_ends(&segs, path, 0, &mut ends);
    ends.into_iter().any(|k| {
        if k == path.len() {
            !dir_only
        } else {
            // `k` segments name a directory of `path`.
            k > 0 && !direct_only
        }
    })
}

/// Every `k` for which `segs` matches `path[..k]`, starting at `path[i]`.
fn prefix_ends(segs: &[&str], path: &[&str], i: usize, out: &mut Vec<usize>) {
    match segs.split_first() {
        None => out.push(i),
        Some((&"**", rest)) => {
            for j in i..=path.len() {
                prefix_ends(rest, path, j, out);
            }
        }
        Some((seg, rest)) => {
            if i < path.len() && glob(seg.as_bytes(), path[i].as_bytes()) {
                prefix_ends(rest, path, i + 1, out);
            }
        }
    }
}

/// `*` (any run) and `?` (one byte) within one path segment.
fn glob(p: &[u8], s: &[u8]) -> bool {
    match p.split_first() {
        None => s.is_empty(),
        Some((b'*', rest)) => (0..=s.len()).any(|k| glob(rest, &s[k..])),
        Some((b'?', rest)) => !s.is_empty() && glob(rest, &s[1..]),
        Some((c, rest)) => s.first() == Some(c) && glob(rest, &s[1..]),
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::*;
    use crate::scaffold::plan;
    use crate::tree::{Entry, Tree};

    fn owners(list: &[&str]) -> Vec<Owner> {
        list.iter().map(|s| Owner::parse(s).unwrap()).collect()
    }

    /// The file after `capstan init --admins @acme/platform` and `capstan new cluster dev
    /// --owners @acme/dev` (and `ops` with no `--owners`).
    fn fleet_file() -> String {
        let init = render("mgmt", &owners(&["@acme/platform"]));
        set_workload_owners(&init, "mgmt", "dev", &owners(&["@acme/dev", "@alice"]))
            .unwrap()
            .text
    }

    #[test]
    fn owners_parse_users_and_teams_and_refuse_the_rest() {
        for ok in [
            "@alice",
            "@a",
            "@acme/platform",
            "@Acme-1/team_x-2",
            PLACEHOLDER,
        ] {
            assert_eq!(Owner::parse(ok).unwrap().as_str(), ok);
        }
        for (bad, why) in [
            ("alice", "does not start with `@`"),
            ("alice@example.com", "does not start with `@`"),
            ("@", "empty"),
            ("@acme/", "team name is empty"),
            ("@/team", "organisation name is empty"),
            ("@-alice", "start or end with `-`"),
            ("@alice-", "start or end with `-`"),
            ("@acme/plat/form", "only letters, digits, `-` and `_`"),
            ("@al ice", "only letters, digits and `-`"),
            ("@acme/*", "only letters"),
            ("@a.b", "only letters"),
        ] {
            let e = Owner::parse(bad).unwrap_err();
            assert!(e.why.contains(why), "{bad}: {e}");
            assert!(e.to_string().contains("use `@user` or `@org/team`"), "{e}");
        }
        let long = format!("@{}", "a".repeat(40));
        assert!(Owner::parse(&long).unwrap_err().why.contains("39"));
    }

    #[test]
    fn the_file_says_what_it_protects_and_orders_its_blocks() {
        let text = render("mgmt", &owners(&["@acme/platform", "@bob"]));
        assert!(
            text.starts_with("# Code owners of this capstan fleet"),
            "{text}"
        );
        assert!(text.contains("management cluster mgmt"));
        assert!(text.contains("review from Code Owners"));
        assert!(text.contains("LAST pattern"));
        assert!(!text.contains("REPLACE"));
        let rules: Vec<String> = text
            .lines()
            .filter(|l| rule(l).is_some())
            .map(str::to_string)
            .collect();
        assert_eq!(
            rules,
            [
                "* @acme/platform @bob",
                "/clusters/suspend.yaml @acme/platform @bob",
                "/clusters/*/*.yaml @acme/platform @bob",
                "/clusters/*/*.yml @acme/platform @bob",
                "/capstan-system/ @acme/platform @bob",
                "/.github/ @acme/platform @bob",
            ]
        );
        let w = text.find(WORKLOADS_MARK).unwrap();
        let a = text.find(ADMINS_MARK).unwrap();
        assert!(text.find("\n* ").unwrap() < w && w < a);
        assert!(!has_placeholder(&text));
    }

    #[test]
    fn the_placeholder_is_announced_in_the_file() {
        let text = render("mgmt", &[Owner::placeholder()]);
        assert!(
            text.starts_with("# REPLACE @OWNER/platform-admins"),
            "{text}"
        );
        assert!(text.contains("protects nothing"));
        assert!(text.contains("\n* @OWNER/platform-admins\n"));
        assert!(has_placeholder(&text));
    }

    #[test]
    fn who_owns_what_in_the_generated_file() {
        let text = fleet_file();
        let admins = vec!["@acme/platform"];
        for path in [
            "clusters/mgmt/cluster.yaml",
            "clusters/mgmt/fleet.yaml",
            "clusters/mgmt/extra.yml",
            "clusters/mgmt/README.md",
            "clusters/suspend.yaml",
            "clusters/other/cluster.yaml",
            ".github/CODEOWNERS",
            ".github/workflows/ci.yaml",
            "capstan-system/mgmt.yaml",
            "README.md",
            "CODEOWNERS",
            "docs/runbook.md",
            // A workload directory without --owners: the admins, through `*`.
            "clusters/mgmt/workload-clusters/ops/cluster.yaml",
            // Next to dev's directory, not in it.
            "clusters/mgmt/workload-clusters/dev2/cluster.yaml",
            "clusters/mgmt/workload-clusters/dev.yaml",
            "clusters/mgmt/workload-clusters/README.md",
            "clusters/other/workload-clusters/dev/cluster.yaml",
        ] {
            assert_eq!(owners_of(&text, path), admins, "{path}");
        }
        // A workload directory with --owners: its team only, at any depth.
        for path in [
            "clusters/mgmt/workload-clusters/dev/cluster.yaml",
            "clusters/mgmt/workload-clusters/dev/suspend.yaml",
            "clusters/mgmt/workload-clusters/dev/addons/values.yaml",
        ] {
            assert_eq!(owners_of(&text, path), ["@acme/dev", "@alice"], "{path}");
        }
    }

    /// A broad line someone adds among the workload lines cannot take the admins' paths, since
    /// their block comes after it.
    #[test]
    fn the_admins_block_wins_over_a_broad_line_above_it() {
        let text = fleet_file().replace(
            "/clusters/mgmt/workload-clusters/dev/",
            "/clusters/ @mallory\n*.yaml @mallory\n/.github/workflows/ @mallory\n/clusters/mgmt/workload-clusters/dev/",
        );
        for path in [
            "clusters/mgmt/cluster.yaml",
            "clusters/mgmt/fleet.yaml",
            "clusters/suspend.yaml",
            ".github/CODEOWNERS",
            ".github/workflows/ci.yaml",
            "capstan-system/mgmt.yaml",
        ] {
            assert_eq!(owners_of(&text, path), ["@acme/platform"], "{path}");
        }
        assert_eq!(
            owners_of(&text, "clusters/mgmt/workload-clusters/dev/cluster.yaml"),
            ["@acme/dev", "@alice"]
        );
    }

    /// The examples of GitHub's documentation.
    #[test]
    fn owners_of_reads_patterns_as_github_documents_them() {
        let text = "\
*       @global-owner1 @global-owner2
*.js    @js-owner #This is an inline comment.
/build/logs/ @doctocat
docs/*  @docs
apps/ @octocat
**/logs @logs
/scripts/ @doctocat @octocat
/apps/ @octocat
/apps/github
";
        let case = |path: &str| owners_of(text, path);
        assert_eq!(case("README.md"), ["@global-owner1", "@global-owner2"]);
        assert_eq!(case("src/app.js"), ["@js-owner"]);
        assert_eq!(case("build/logs/a/b.txt"), ["@logs"]);
        assert_eq!(case("build/logs"), ["@logs"]);
        assert_eq!(case("docs/getting-started.md"), ["@docs"]);
        assert_eq!(
            case("docs/build-app/troubleshooting.md"),
            ["@global-owner1", "@global-owner2"]
        );
        assert_eq!(case("web/apps/x.txt"), ["@octocat"]);
        assert_eq!(case("deeply/nested/logs/x"), ["@logs"]);
        assert_eq!(case("scripts/run.sh"), ["@doctocat", "@octocat"]);
        assert_eq!(case("apps/github/x.rb"), Vec::<&str>::new());
        assert_eq!(case("apps/githubber/x.rb"), ["@octocat"]);
        // `apps/` is a directory pattern: a file named `apps` is not under it.
        assert_eq!(owners_of("apps/ @o", "apps"), Vec::<&str>::new());
        // Case-sensitive; no rule at all means no owner.
        assert_eq!(owners_of("/Docs/ @o", "docs/a"), Vec::<&str>::new());
        assert_eq!(owners_of("# only a comment\n", "a"), Vec::<&str>::new());
    }

    #[test]
    fn a_workload_line_goes_before_the_admins_block() {
        let init = render("mgmt", &owners(&["@acme/platform"]));
        let one = set_workload_owners(&init, "mgmt", "dev", &owners(&["@acme/dev"])).unwrap();
        let two = set_workload_owners(&one.text, "mgmt", "qa", &owners(&["@acme/qa"])).unwrap();
        assert!(!one.at_end && one.removed.is_empty());
        let t = &two.text;
        let dev = t
            .find("\n/clusters/mgmt/workload-clusters/dev/ @acme/dev\n")
            .unwrap();
        let qa = t
            .find("\n/clusters/mgmt/workload-clusters/qa/ @acme/qa\n")
            .unwrap();
        let w = t.find(WORKLOADS_MARK).unwrap();
        let a = t.find(ADMINS_MARK).unwrap();
        assert!(w < dev && dev < qa && qa < a, "{t}");
        // Nothing else changed.
        let back: Vec<&str> = t
            .lines()
            .filter(|l| !l.starts_with("/clusters/mgmt/workload-clusters/"))
            .collect();
        assert_eq!(back, init.lines().collect::<Vec<_>>());
    }

    #[test]
    fn without_owners_no_line_is_added() {
        let init = render("mgmt", &owners(&["@acme/platform"]));
        let e = set_workload_owners(&init, "mgmt", "dev", &[]).unwrap();
        assert_eq!(e.text, init);
        assert_eq!(
            owners_of(&e.text, "clusters/mgmt/workload-clusters/dev/cluster.yaml"),
            ["@acme/platform"]
        );
    }

    /// A line left by an earlier cluster of the same name is removed: the new cluster does not
    /// inherit the old team.
    #[test]
    fn a_stale_line_for_the_directory_is_removed() {
        let init = render("mgmt", &owners(&["@acme/platform"]));
        let old = set_workload_owners(&init, "mgmt", "dev", &owners(&["@old/team"]))
            .unwrap()
            .text
            .replace(
                "# (`capstan",
                "clusters/mgmt/workload-clusters/dev @old/other\n# (`capstan",
            );
        let e = set_workload_owners(&old, "mgmt", "dev", &owners(&["@new/team"])).unwrap();
        assert_eq!(
            e.removed,
            [
                "clusters/mgmt/workload-clusters/dev @old/other",
                "/clusters/mgmt/workload-clusters/dev/ @old/team"
            ]
        );
        assert!(!e.text.contains("@old"), "{}", e.text);
        assert_eq!(
            owners_of(&e.text, "clusters/mgmt/workload-clusters/dev/a.yaml"),
            ["@new/team"]
        );
        let e = set_workload_owners(&old, "mgmt", "dev", &[]).unwrap();
        assert_eq!(e.removed.len(), 2);
        assert_eq!(
            owners_of(&e.text, "clusters/mgmt/workload-clusters/dev/a.yaml"),
            ["@acme/platform"]
        );
    }

    #[test]
    fn a_file_without_capstan_blocks_gets_the_line_at_its_end() {
        let hand = "* @acme/platform\n/clusters/ @acme/platform";
        let e = set_workload_owners(hand, "mgmt", "dev", &owners(&["@acme/dev"])).unwrap();
        assert!(e.at_end);
        assert_eq!(
            e.text,
            "* @acme/platform\n/clusters/ @acme/platform\n/clusters/mgmt/workload-clusters/dev/ @acme/dev\n"
        );
        assert_eq!(
            owners_of(&e.text, "clusters/mgmt/cluster.yaml"),
            ["@acme/platform"]
        );
    }

    fn mgmt_request(admins: &[&str]) -> crate::scaffold::ClusterRequest {
        crate::scaffold::ClusterRequest {
            name: "mgmt".into(),
            provider: "docker".into(),
            pod_cidr: Some("192.168.0.0/16".into()),
            service_cidr: Some("10.96.0.0/12".into()),
            admins: owners(admins),
            ..Default::default()
        }
    }

    fn workload_request(name: &str, team: &[&str], i: u8) -> crate::scaffold::ClusterRequest {
        crate::scaffold::ClusterRequest {
            name: name.into(),
            management: Some("mgmt".into()),
            provider: "docker".into(),
            pod_cidr: Some(format!("172.{}.0.0/16", 16 + i)),
            service_cidr: Some(format!("10.{}.0.0/16", 112 + i)),
            owners: owners(team),
            ..Default::default()
        }
    }

    fn with(tree: &Tree, files: &[(PathBuf, String)]) -> Tree {
        let mut t = tree.clone();
        for (p, text) in files {
            t.insert(p.clone(), text.as_bytes().to_vec());
        }
        t
    }

    fn file(tree: &Tree) -> Option<String> {
        match tree.entries.get(Path::new(PATH)) {
            Some(Entry::File(b)) => Some(String::from_utf8(b.clone()).unwrap()),
            _ => None,
        }
    }

    /// The scaffolder: `init` writes the file, `new cluster --owners` changes it, and callers
    /// that give no admins (bootstrap, tests) get none.
    #[test]
    fn the_scaffolder_writes_and_updates_the_file() {
        let none = plan(&Tree::new(), &mgmt_request(&[])).unwrap();
        assert!(none.files.iter().all(|(p, _)| p != Path::new(PATH)));

        let init = plan(&Tree::new(), &mgmt_request(&["@acme/platform"])).unwrap();
        assert!(init.notes.is_empty(), "{:?}", init.notes);
        let tree = with(&Tree::new(), &init.files);
        assert_eq!(
            file(&tree).unwrap(),
            render("mgmt", &owners(&["@acme/platform"]))
        );

        let dev = plan(&tree, &workload_request("dev", &["@acme/dev"], 0)).unwrap();
        assert_eq!(dev.updated.len(), 1);
        let tree = with(&with(&tree, &dev.files), &dev.updated);
        let ops = plan(&tree, &workload_request("ops", &[], 1)).unwrap();
        assert!(ops.updated.is_empty() && ops.notes.is_empty());
        let text = file(&tree).unwrap();
        assert_eq!(
            owners_of(&text, "clusters/mgmt/workload-clusters/dev/cluster.yaml"),
            ["@acme/dev"]
        );
        assert_eq!(
            owners_of(&text, "clusters/mgmt/workload-clusters/ops/cluster.yaml"),
            ["@acme/platform"]
        );

        // A second `init` (another management cluster) keeps the file and says so.
        let mut other = mgmt_request(&["@acme/platform"]);
        other.name = "other".into();
        other.pod_cidr = Some("192.169.0.0/16".into());
        other.service_cidr = Some("10.80.0.0/12".into());
        let second = plan(&tree, &other).unwrap();
        assert!(second.files.iter().all(|(p, _)| p != Path::new(PATH)));
        assert!(
            second.notes[0].contains("left as it is"),
            "{:?}",
            second.notes
        );
        assert_eq!(
            owners_of(&text, "clusters/other/cluster.yaml"),
            ["@acme/platform"]
        );
    }

    #[test]
    fn the_scaffolder_tells_what_it_could_not_record() {
        let init = plan(&Tree::new(), &mgmt_request(&[PLACEHOLDER])).unwrap();
        assert!(init.notes[0].contains("placeholder"), "{:?}", init.notes);
        // --owners in a repository that has no CODEOWNERS: the cluster, and a note.
        let bare = plan(&Tree::new(), &mgmt_request(&[])).unwrap();
        let tree = with(&Tree::new(), &bare.files);
        let dev = plan(&tree, &workload_request("dev", &["@acme/dev"], 0)).unwrap();
        assert!(dev.updated.is_empty());
        assert!(
            dev.notes[0].contains("were not recorded"),
            "{:?}",
            dev.notes
        );
        // The placeholder is still there when a team is added.
        let tree = with(&Tree::new(), &init.files);
        let dev = plan(&tree, &workload_request("dev", &["@acme/dev"], 0)).unwrap();
        assert_eq!(dev.updated.len(), 1);
        assert!(dev.notes[0].contains("placeholder"), "{:?}", dev.notes);
    }

    #[test]
    fn a_name_that_is_not_a_label_is_refused() {
        let init = render("mgmt", &owners(&["@acme/platform"]));
        for (m, n) in [
            ("mgmt", "*"),
            ("mgmt", "a/b"),
            ("mgmt", ""),
            ("m gmt", "dev"),
        ] {
            assert!(
                set_workload_owners(&init, m, n, &owners(&["@t"])).is_err(),
                "{m} {n}"
            );
        }
    }
}
