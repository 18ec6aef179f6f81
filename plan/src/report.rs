//! A change to the fleet as a reviewer reads it: per cluster, what the change does to machines
//! ([`super::impact`]), the objects created, changed and deleted with their diffs, and the
//! errors that stop it, rendered as text (a terminal or a CI log), JSON (scripts) or markdown
//! (a pull-request comment or body).
//!
//! The same [`Report`] carries `capstan diff` (two revisions, no cluster) and the agent's live
//! PR plans (a revision against the management cluster); renderers only read it, so a new
//! section (the lead's upgrade stages) is a field and a few lines in each renderer.
//!
//! Markdown is written for GitHub's 65,536-character comment limit ([`COMMENT_LIMIT`]): the
//! summary of every cluster comes first, then the diffs in order, and the diffs that do not fit
//! are left out with an honest "N more objects" line, never cut mid-diff.

use std::fmt::Write as _;

use serde::Serialize;

use super::impact::Impact;
use super::{Action, Entry};

/// GitHub's limit on an issue comment or pull-request body, in characters.
pub const COMMENT_LIMIT: usize = 65_536;

/// One cluster's part of a change.
#[derive(Debug, Clone, Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ClusterReport {
    /// The cluster.
    pub name: String,
    /// Objects created, updated, pruned (unchanged ones are left out).
    pub entries: Vec<Entry>,
    /// What the change does to machines.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub impact: Option<Impact>,
    /// The upgrade stages it goes through (`stages: control plane → workers md-0 (parallel)`,
    /// `scale only: no waits`): [`super::stages::outline`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stages: Option<String>,
    /// Errors (`file:line:col: error[code]: message`) that keep the cluster from being applied.
    pub errors: Vec<String>,
    /// Notes: a tombstone, a suspension, a directory removed without one.
    pub notes: Vec<String>,
}

impl ClusterReport {
    /// Whether applying would write anything (or machines move).
    pub fn has_changes(&self) -> bool {
        self.entries
            .iter()
            .any(|e| matches!(e.action, Action::Create | Action::Update | Action::Prune))
            || self.impact.as_ref().is_some_and(|i| !i.is_empty())
    }

    /// Whether something keeps the change from applying (errors, or blocked fields).
    pub fn has_errors(&self) -> bool {
        !self.errors.is_empty() || self.impact.as_ref().is_some_and(Impact::is_blocked)
    }

    fn counts(&self) -> String {
        let mut parts = Vec::new();
        for (a, word) in [
            (Action::Create, "create"),
            (Action::Update, "update"),
            (Action::Prune, "delete"),
            (Action::Skip, "skip"),
        ] {
            let n = self.entries.iter().filter(|e| e.action == a).count();
            if n > 0 {
                parts.push(format!("{n} {word}"));
            }
        }
        if parts.is_empty() {
            "no object changes".into()
        } else {
            parts.join(", ")
        }
    }

    /// Every problem as one line: errors, then blocked fields.
    pub fn problems(&self) -> Vec<String> {
        let mut out = self.errors.clone();
        if let Some(i) = &self.impact {
            out.extend(i.blocked.iter().map(|b| format!("blocked: {b}")));
        }
        out
    }
}

/// A change to the fleet.
#[derive(Debug, Clone, Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// What is compared (`origin/main..HEAD`, `PR #12 at abc123`).
    pub title: String,
    /// Clusters with something to say, in repository order.
    pub clusters: Vec<ClusterReport>,
    /// Errors that belong to no single cluster.
    pub errors: Vec<String>,
    /// Files changed outside `clusters/` (nothing capstan applies).
    pub outside: Vec<String>,
}

impl Report {
    /// Whether anything would change.
    pub fn has_changes(&self) -> bool {
        self.clusters.iter().any(ClusterReport::has_changes)
    }

    /// Whether anything is in error (or blocked).
    pub fn has_errors(&self) -> bool {
        !self.errors.is_empty() || self.clusters.iter().any(ClusterReport::has_errors)
    }

    /// The first problem, for a one-line status.
    pub fn first_problem(&self) -> Option<String> {
        self.errors
            .first()
            .cloned()
            .or_else(|| self.clusters.iter().flat_map(|c| c.problems()).next())
    }

    /// The report as JSON, with `changes` and `errors` flags for scripts.
    pub fn json(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(self).expect("reports serialise");
        v["changes"] = self.has_changes().into();
        v["valid"] = (!self.has_errors()).into();
        v
    }

    /// Plain text; with `color`, diffs and problems in ANSI colours.
    pub fn text(&self, color: bool) -> String {
        let paint = |code: &str, s: &str| {
            if color {
                format!("\x1b[{code}m{s}\x1b[0m")
            } else {
                s.to_string()
            }
        };
        let mut out = String::new();
        let _ = writeln!(out, "{}", self.title);
        for e in &self.errors {
            let _ = writeln!(out, "{}", paint("31", e));
        }
        if self.clusters.is_empty() {
            let _ = writeln!(out, "no cluster changes");
        }
        for c in &self.clusters {
            let _ = writeln!(out, "\ncluster {}: {}", c.name, c.counts());
            for e in &c.errors {
                let _ = writeln!(out, "  {}", paint("31", e));
            }
            for n in &c.notes {
                let _ = writeln!(out, "  note: {n}");
            }
            if let Some(st) = &c.stages {
                let _ = writeln!(out, "  * {st}");
            }
            if let Some(i) = &c.impact {
                for l in i.lines() {
                    let l = if l.starts_with("BLOCKED") {
                        paint("31;1", &l)
                    } else {
                        l
                    };
                    let _ = writeln!(out, "  * {l}");
                }
            }
            for e in &c.entries {
                let reason = e
                    .reason
                    .as_deref()
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default();
                let _ = writeln!(
                    out,
                    "  {:9} {}{reason}",
                    label(e.action),
                    e.object.subject()
                );
                for line in e.diff.as_deref().unwrap_or("").lines() {
                    let line = match line.chars().next() {
                        _ if line.starts_with("+++") || line.starts_with("---") => paint("1", line),
                        Some('+') => paint("32", line),
                        Some('-') => paint("31", line),
                        Some('@') => paint("36", line),
                        _ => line.to_string(),
                    };
                    let _ = writeln!(out, "    {line}");
                }
            }
        }
        if !self.outside.is_empty() {
            let _ = writeln!(
                out,
                "\nfiles outside clusters/ changed (capstan applies nothing from them): {}",
                self.outside.join(", ")
            );
        }
        out
    }

    /// Markdown of at most `limit` characters.
    pub fn markdown(&self, limit: usize) -> String {
        let mut head = String::new();
        // Every block after the title starts with its own blank line.
        let _ = writeln!(head, "### {}", self.title);
        let changed: Vec<&ClusterReport> = self.clusters.iter().collect();
        if changed.is_empty() && self.errors.is_empty() {
            let _ = writeln!(head, "\nNo cluster changes.");
        }
        if self.has_errors() {
            let _ = writeln!(
                head,
                "\n**Errors:** a cluster with errors or blocked fields is not applied as it stands.\n"
            );
            for e in &self.errors {
                let _ = writeln!(head, "- :x: `{}`", code(e));
            }
        }
        if !self.outside.is_empty() {
            let _ = writeln!(
                head,
                "\n- :warning: files outside `clusters/` changed: {}",
                self.outside
                    .iter()
                    .map(|p| format!("`{}`", code(p)))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        let mut summaries = Vec::new();
        for c in &changed {
            let mut s = String::new();
            let _ = writeln!(s, "\n#### Cluster `{}`: {}\n", c.name, c.counts());
            for e in &c.errors {
                let _ = writeln!(s, "- :x: `{}`", code(e));
            }
            for n in &c.notes {
                let _ = writeln!(s, "- :information_source: {}", escape(n));
            }
            if let Some(st) = &c.stages {
                let _ = writeln!(s, "- :vertical_traffic_light: {}", escape(st));
            }
            if let Some(i) = &c.impact {
                for l in i.lines() {
                    let mark = if l.starts_with("BLOCKED") {
                        ":no_entry:"
                    } else if l.contains(" rolls") {
                        ":arrows_counterclockwise:"
                    } else {
                        ":small_blue_diamond:"
                    };
                    let _ = writeln!(s, "- {mark} {}", escape(&l));
                }
            }
            if !c.entries.is_empty() {
                let _ = writeln!(s, "\n| | object |\n|---|---|");
                for e in &c.entries {
                    let reason = e
                        .reason
                        .as_deref()
                        .map(|r| format!(" ({})", escape(r)))
                        .unwrap_or_default();
                    let _ = writeln!(
                        s,
                        "| {} | `{}`{reason} |",
                        label(e.action),
                        code(&e.object.subject()).replace('|', "\\|")
                    );
                }
            }
            summaries.push(s);
        }
        let diffs: Vec<(String, String)> = changed
            .iter()
            .flat_map(|c| {
                c.entries.iter().filter_map(|e| {
                    e.diff.as_ref().map(|d| {
                        (
                            format!(
                                "{} `{}` ({})",
                                label(e.action),
                                code(&e.object.subject()),
                                c.name
                            ),
                            d.clone(),
                        )
                    })
                })
            })
            .collect();
        let footer = |n: usize| {
            format!(
                "\n_{n} more objects not shown: the comment is limited to {COMMENT_LIMIT} characters. Run `capstan diff` to see every diff._\n"
            )
        };
        // Room for the longest footer.
        let budget = limit.saturating_sub(footer(diffs.len() + 99).len() + 64);
        let mut out = head;
        let mut summaries_left = summaries.len();
        for s in &summaries {
            if out.len() + s.len() > budget {
                break;
            }
            out.push_str(s);
            summaries_left -= 1;
        }
        if summaries_left > 0 {
            let _ = write!(
                out,
                "\n_{summaries_left} more clusters not shown: the comment is limited to {COMMENT_LIMIT} characters._\n"
            );
            return out;
        }
        let mut shown = 0;
        if !diffs.is_empty() {
            let open = "\n<details><summary>Diffs</summary>\n\n";
            let close = "</details>\n";
            if out.len() + open.len() + close.len() < budget {
                out.push_str(open);
                for (title, d) in &diffs {
                    let fence = if d.contains("```") { "~~~~" } else { "```" };
                    let block = format!("{title}\n\n{fence}diff\n{}\n{fence}\n\n", d.trim_end());
                    if out.len() + block.len() + close.len() > budget {
                        break;
                    }
                    out.push_str(&block);
                    shown += 1;
                }
                out.push_str(close);
            }
        }
        if shown < diffs.len() {
            out.push_str(&footer(diffs.len() - shown));
        }
        out
    }
}

/// How an action reads in a change report (a prune of a revision diff is a deletion).
fn label(a: Action) -> &'static str {
    match a {
        Action::Prune => "delete",
        Action::Create => "create",
        Action::Update => "update",
        Action::Unchanged => "unchanged",
        Action::Skip => "skip",
        Action::Deleting => "deleting",
        Action::Conflict => "conflict",
        Action::Held => "held",
    }
}

/// Text for an inline code span (backticks would end it).
fn code(s: &str) -> String {
    s.replace('`', "'")
}

/// Text for a markdown line or table cell.
fn escape(s: &str) -> String {
    s.replace('|', "\\|").replace('<', "&lt;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ObjectRef;
    use serde_json::json;

    fn entry(i: usize, action: Action, diff_lines: usize) -> Entry {
        let obj = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("cm-{i}"), "namespace": "ns"}});
        Entry {
            diff: (diff_lines > 0).then(|| {
                (0..diff_lines)
                    .map(|l| format!("+line {l} of object {i}\n"))
                    .collect()
            }),
            ..Entry::new(ObjectRef::of(&obj), action, None)
        }
    }

    fn report(objects: usize, diff_lines: usize) -> Report {
        Report {
            title: "capstan diff `main`..`pr`".into(),
            clusters: vec![ClusterReport {
                name: "dev".into(),
                entries: (0..objects)
                    .map(|i| entry(i, Action::Update, diff_lines))
                    .collect(),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn markdown_fits_the_comment_limit_and_says_how_many_objects_it_left_out() {
        let r = report(400, 40);
        let md = r.markdown(COMMENT_LIMIT);
        assert!(md.chars().count() <= COMMENT_LIMIT, "{}", md.len());
        let shown = md.matches("```diff").count();
        assert!(shown > 0 && shown < 400, "{shown}");
        assert!(
            md.contains(&format!("_{} more objects not shown", 400 - shown)),
            "{}",
            &md[md.len() - 300..]
        );
        // Every object is still listed in the summary table.
        assert_eq!(md.matches("| update | `ConfigMap/ns/cm-").count(), 400);
        // Whole diffs only: every shown diff ends with its last line.
        assert_eq!(md.matches("+line 39 of object").count(), shown);
    }

    #[test]
    fn a_small_report_is_whole() {
        let md = report(3, 2).markdown(COMMENT_LIMIT);
        assert_eq!(md.matches("```diff").count(), 3);
        assert!(!md.contains("more objects not shown"));
        assert!(md.contains("#### Cluster `dev`: 3 update"));
    }

    #[test]
    fn what_a_pull_request_writes_stays_inside_its_code_spans() {
        // A kind (a manifest's own text) that would close its code span and open an HTML
        // comment hiding the rest of the plan; a note quoting a refusal with markup.
        let obj = json!({"apiVersion": "x/v1", "kind": "Evil`<!--|", "metadata": {"name": "a", "namespace": "ns"}});
        let mut r = report(1, 1);
        r.clusters[0].entries.push(Entry {
            diff: Some("+x\n".into()),
            ..Entry::new(ObjectRef::of(&obj), Action::Create, None)
        });
        r.clusters[0]
            .notes
            .push("no live plan: refused <!-- | hidden".into());
        let md = r.markdown(COMMENT_LIMIT);
        assert!(md.contains("| create | `Evil'<!--\\|/ns/a` |"), "{md}");
        assert!(md.contains("create `Evil'<!--|/ns/a` (dev)"), "{md}");
        assert!(md.contains("refused &lt;!-- \\| hidden"), "{md}");
        // Every line keeps its code spans closed: an even count of backticks.
        for line in md.lines().filter(|l| !l.starts_with("```")) {
            assert_eq!(line.matches('`').count() % 2, 0, "{line}");
        }
    }

    #[test]
    fn text_colours_only_when_asked() {
        let r = report(1, 1);
        assert!(!r.text(false).contains('\x1b'));
        assert!(r.text(true).contains("\x1b[32m+line 0"));
        assert_eq!(r.json()["changes"], true);
    }
}
