//! What each provider receives: the body of a Slack incoming webhook, of a Microsoft Teams
//! workflow webhook (an Adaptive Card in a message), and of a generic webhook with its
//! HMAC-SHA256 signature. Pure, so each shape is checked against the services' documented form
//! without a network; [`super`] sends them.
//!
//! Most of an event is written by someone else: the status message quotes an API server's
//! refusal or a tenant's unknown field, and cluster names and revisions come from the fleet
//! repository. Posted as markup, `<!channel>` would page a whole channel and `<https://…|click
//! here>` or `[x](https://…)` would put a link under capstan's name. So every value is shown
//! literally, by each service's documented rules:
//!
//! - **Slack**: `&`, `<` and `>` become `&amp;`, `&lt;`, `&gt;` (Slack's control characters: no
//!   `<…>` mention, link or date can form), each value sits in an inline code span (no bold,
//!   italic, strike or quote inside one; its backticks become `ˋ` and line breaks spaces, either
//!   would end it), every `mrkdwn` text object is `verbatim` (no bare URL turned into a link, no
//!   `@here` parsed), and the fallback `text` is sent with `mrkdwn: false`, `parse: none`, no
//!   `link_names`, and no unfurling (Slack's servers fetch no URL for a preview).
//! - **Teams**: values go only into `TextRun`s of `RichTextBlock`s, which Adaptive Cards render
//!   without Markdown; `TextBlock`s and `FactSet`s (Markdown in Teams) hold only capstan's own
//!   words; no `msteams` mention entities, no actions.
//! - **webhook**: the values as they are, in JSON: a receiver that renders them escapes them.
//!
//! Values are cut (with `…`) to fit Slack's limits on a text object and Teams' on a message: a
//! long message must not get the notification refused.

use hmac::{Hmac, KeyInit, Mac};
use serde::Serialize;
use serde_json::{Value, json};
use sha2::Sha256;

use capstan_layout::config::notifications::ProviderKind;

/// The header a generic webhook's signature travels in: `sha256=<hex>` of the body.
pub const SIGNATURE_HEADER: &str = "X-Capstan-Signature";

/// One phase change of one cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    /// `Failed`, `Ready`, `Held`, `Conflict`.
    pub event: &'static str,
    /// The cluster.
    pub cluster: String,
    /// Its management cluster.
    pub management: String,
    /// Its phase after the pass.
    pub phase: &'static str,
    /// Why (a hold's or conflict's reason), when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'static str>,
    /// The revision reconciled.
    pub revision: String,
    /// The status message.
    pub message: String,
}

impl Event {
    /// One line for a human: `dev is Failed at 1a2b3c4d: <message>`.
    pub fn summary(&self) -> String {
        self.summary_with(str::to_string)
    }

    /// [`Event::summary`] with the values others wrote (cluster, revision, message) passed
    /// through `value`.
    fn summary_with(&self, value: impl Fn(&str) -> String) -> String {
        let rev: String = self.revision.chars().take(12).collect();
        let what = match (self.event, self.reason) {
            ("Held", Some(r)) => format!("upgrade held ({r})"),
            ("Conflict", _) => "conflict: another field manager changes its fields".to_string(),
            _ => format!("is {}", self.phase),
        };
        let mut s = format!("{} {what} at {}", value(&self.cluster), value(&rev));
        if !self.message.is_empty() {
            s.push_str(": ");
            s.push_str(&value(&self.message));
        }
        s
    }

    fn emoji(&self) -> &'static str {
        match self.event {
            "Failed" => ":x:",
            "Ready" => ":white_check_mark:",
            "Held" => ":hourglass_flowing_sand:",
            _ => ":warning:",
        }
    }
}

/// Slack's limit on a section field's text (a text object's is 3,000).
const SLACK_FIELD: usize = 2000;
/// The longest value shown (in characters, as sent): a field's label and value fit
/// [`SLACK_FIELD`], the message in the context block fits a text object.
const SLACK_VALUE: usize = SLACK_FIELD - 100;
/// The longest value in a Teams card: Teams refuses a message over 28 KB.
const TEAMS_VALUE: usize = 4000;

/// `s` shown literally in Slack `mrkdwn`: an inline code span of its text with Slack's control
/// characters escaped, its backticks as `ˋ` and control characters (line breaks) as spaces, at
/// most `limit` characters with the backticks (cut with `…`).
fn slack_literal(s: &str, limit: usize) -> String {
    if s.is_empty() {
        // An empty span would show its two backticks.
        return "-".into();
    }
    let mut out = String::from("`");
    out.push_str(&slack_escaped(s, limit.saturating_sub(2), true));
    out.push('`');
    out
}

/// `s` with `&`, `<`, `>` as Slack's entities (and, for a code span, backticks and control
/// characters replaced), at most `limit` characters as sent (cut with `…`, never inside an
/// entity).
fn slack_escaped(s: &str, limit: usize, code: bool) -> String {
    let mut out = String::new();
    let mut used = 0;
    let room = limit.saturating_sub(1);
    let mut buf = [0u8; 4];
    for c in s.chars() {
        let piece: &str = match c {
            '&' => "&amp;",
            '<' => "&lt;",
            '>' => "&gt;",
            '`' if code => "ˋ",
            c if code && c.is_control() => " ",
            c => c.encode_utf8(&mut buf),
        };
        let n = piece.chars().count();
        if used + n > room {
            out.push('…');
            return out;
        }
        used += n;
        out.push_str(piece);
    }
    out
}

/// `s` cut to `limit` characters (with `…`); `-` for nothing (a TextRun has text).
fn cut(s: &str, limit: usize) -> String {
    if s.is_empty() {
        return "-".into();
    }
    if s.chars().count() <= limit {
        return s.to_string();
    }
    let mut out: String = s.chars().take(limit.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// A Slack incoming webhook body: `text` (the notification's fallback) and Block Kit `blocks`.
pub fn slack(e: &Event) -> Value {
    let value = |s: &str| slack_literal(s, SLACK_VALUE);
    let mrkdwn = |text: String| json!({"type": "mrkdwn", "verbatim": true, "text": text});
    let mut fields = vec![
        mrkdwn(format!("*Cluster*\n{}", value(&e.cluster))),
        mrkdwn(format!("*Phase*\n{}", value(e.phase))),
        mrkdwn(format!("*Revision*\n{}", value(&e.revision))),
        mrkdwn(format!("*Management*\n{}", value(&e.management))),
    ];
    if let Some(r) = e.reason {
        fields.push(mrkdwn(format!("*Reason*\n{}", value(r))));
    }
    let message = if e.message.is_empty() {
        e.phase
    } else {
        &e.message
    };
    json!({
        "text": format!("capstan: {}", e.summary_with(|s| slack_escaped(s, SLACK_VALUE, false))),
        "mrkdwn": false,
        "parse": "none",
        "unfurl_links": false,
        "unfurl_media": false,
        "blocks": [
            {"type": "section", "text": mrkdwn(format!("{} *capstan: {} {}*", e.emoji(), value(&e.cluster), e.event))},
            {"type": "section", "fields": fields},
            {"type": "context", "elements": [mrkdwn(value(message))]},
        ],
    })
}

/// A Teams workflow webhook body: a message carrying one Adaptive Card (version 1.4). Every
/// value is a `TextRun` (no Markdown); each fact a `RichTextBlock` of its title and value.
pub fn teams(e: &Event) -> Value {
    let run = |s: &str| json!({"type": "TextRun", "text": cut(s, TEAMS_VALUE)});
    let fact = |title: &str, value: &str| {
        json!({"type": "RichTextBlock", "inlines": [
            {"type": "TextRun", "text": format!("{title}: "), "weight": "Bolder"},
            run(value),
        ]})
    };
    let mut facts = vec![
        fact("Cluster", &e.cluster),
        fact("Phase", e.phase),
        fact("Revision", &e.revision),
        fact("Management", &e.management),
    ];
    if let Some(r) = e.reason {
        facts.push(fact("Reason", r));
    }
    let color = match e.event {
        "Failed" => "Attention",
        "Ready" => "Good",
        _ => "Warning",
    };
    let title = |s: &str| json!({"type": "TextRun", "text": cut(s, TEAMS_VALUE), "size": "Medium", "weight": "Bolder", "color": color});
    let mut body = vec![json!({"type": "RichTextBlock", "inlines": [
        title("capstan: "),
        title(&e.cluster),
        title(&format!(" {}", e.event)),
    ]})];
    body.extend(facts);
    let message = if e.message.is_empty() {
        e.phase
    } else {
        &e.message
    };
    body.push(json!({"type": "RichTextBlock", "separator": true, "inlines": [run(message)]}));
    json!({
        "type": "message",
        "attachments": [{
            "contentType": "application/vnd.microsoft.card.adaptive",
            "contentUrl": null,
            "content": {
                "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
                "type": "AdaptiveCard",
                "version": "1.4",
                "body": body,
            },
        }],
    })
}

/// A generic webhook body: the event as JSON.
pub fn webhook(e: &Event) -> Value {
    json!({"source": "capstan", "summary": e.summary(), "event": e})
}

/// The body for a provider of `kind`.
pub fn body(kind: ProviderKind, e: &Event) -> Vec<u8> {
    let v = match kind {
        ProviderKind::Slack => slack(e),
        ProviderKind::Teams => teams(e),
        ProviderKind::Webhook => webhook(e),
    };
    serde_json::to_vec(&v).expect("JSON values serialise")
}

/// `sha256=<hex HMAC-SHA256 of body under key>`, the [`SIGNATURE_HEADER`] value.
pub fn signature(key: &[u8], body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes keys of any length");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event() -> Event {
        Event {
            event: "Held",
            cluster: "prod-1".into(),
            management: "mgmt".into(),
            phase: "Progressing",
            reason: Some("OutsideMaintenanceWindow"),
            revision: "0123456789abcdef0123456789abcdef01234567".into(),
            message: "waits for the window Sat 02:00".into(),
        }
    }

    #[test]
    fn slack_gets_text_and_blocks() {
        let v = slack(&event());
        assert_eq!(
            v["text"],
            "capstan: prod-1 upgrade held (OutsideMaintenanceWindow) at 0123456789ab: waits for the window Sat 02:00"
        );
        let blocks = v["blocks"].as_array().unwrap();
        assert!(blocks.iter().all(|b| b["type"].is_string()));
        assert_eq!(blocks[1]["fields"].as_array().unwrap().len(), 5);
    }

    #[test]
    fn teams_gets_an_adaptive_card_message() {
        let v = teams(&event());
        assert_eq!(v["type"], "message");
        let a = &v["attachments"][0];
        assert_eq!(a["contentType"], "application/vnd.microsoft.card.adaptive");
        assert_eq!(a["content"]["type"], "AdaptiveCard");
        assert_eq!(a["content"]["version"], "1.4");
        let body = a["content"]["body"].as_array().unwrap();
        // The title, five facts, the message: each a RichTextBlock of TextRuns.
        assert_eq!(body.len(), 7);
        assert!(body.iter().all(|b| b["type"] == "RichTextBlock"), "{v}");
        assert_eq!(body[1]["inlines"][0]["text"], "Cluster: ");
        assert_eq!(body[1]["inlines"][1]["text"], "prod-1");
        assert_eq!(
            body[6]["inlines"][0]["text"],
            "waits for the window Sat 02:00"
        );
    }

    #[test]
    fn values_are_cut_to_fit_and_never_inside_an_entity() {
        assert_eq!(slack_literal("a`b\nc", 100), "`aˋb c`");
        assert_eq!(slack_escaped("a<b", 100, false), "a&lt;b");
        // Room for `a` and the ellipsis only: `&lt;` is not split.
        assert_eq!(slack_escaped("a<b", 3, false), "a…");
        assert_eq!(slack_escaped("<<<<", 10, false), "&lt;&lt;…");
        let long = "&".repeat(10_000);
        let v = slack_literal(&long, SLACK_VALUE);
        assert!(v.chars().count() <= SLACK_VALUE, "{}", v.chars().count());
        assert!(v.ends_with("&amp;…`"), "{v}");
        assert_eq!(
            (slack_literal("", 10), cut("", 10)),
            ("-".into(), "-".into())
        );
        assert_eq!(cut("abc", 3), "abc");
        assert_eq!(cut("abcd", 3), "ab…");
    }

    #[test]
    fn the_webhook_body_is_signed() {
        let b = body(ProviderKind::Webhook, &event());
        let v: Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v["event"]["reason"], "OutsideMaintenanceWindow");
        assert_eq!(v["event"]["cluster"], "prod-1");
        // RFC 4231 test case 2.
        assert_eq!(
            signature(b"Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
