//! What each provider receives: the body of a Slack incoming webhook, of a Microsoft Teams
//! workflow webhook (an Adaptive Card in a message), and of a generic webhook with its
//! HMAC-SHA256 signature. Pure, so each shape is checked against the services' documented form
//! without a network; [`super`] sends them.

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
        let rev: String = self.revision.chars().take(12).collect();
        let what = match (self.event, self.reason) {
            ("Held", Some(r)) => format!("upgrade held ({r})"),
            ("Conflict", _) => "conflict: another field manager changes its fields".to_string(),
            _ => format!("is {}", self.phase),
        };
        let mut s = format!("{} {what} at {rev}", self.cluster);
        if !self.message.is_empty() {
            s.push_str(": ");
            s.push_str(&self.message);
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

/// A Slack incoming webhook body: `text` (the notification's fallback) and Block Kit `blocks`.
pub fn slack(e: &Event) -> Value {
    let mut fields = vec![
        json!({"type": "mrkdwn", "text": format!("*Cluster*\n{}", e.cluster)}),
        json!({"type": "mrkdwn", "text": format!("*Phase*\n{}", e.phase)}),
        json!({"type": "mrkdwn", "text": format!("*Revision*\n`{}`", e.revision)}),
        json!({"type": "mrkdwn", "text": format!("*Management*\n{}", e.management)}),
    ];
    if let Some(r) = e.reason {
        fields.push(json!({"type": "mrkdwn", "text": format!("*Reason*\n{r}")}));
    }
    json!({
        "text": format!("capstan: {}", e.summary()),
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": format!("{} *capstan: {} {}*", e.emoji(), e.cluster, e.event)}},
            {"type": "section", "fields": fields},
            {"type": "context", "elements": [{"type": "mrkdwn", "text": if e.message.is_empty() { e.phase.to_string() } else { e.message.clone() }}]},
        ],
    })
}

/// A Teams workflow webhook body: a message carrying one Adaptive Card (version 1.4).
pub fn teams(e: &Event) -> Value {
    let mut facts = vec![
        json!({"title": "Cluster", "value": e.cluster}),
        json!({"title": "Phase", "value": e.phase}),
        json!({"title": "Revision", "value": e.revision}),
        json!({"title": "Management", "value": e.management}),
    ];
    if let Some(r) = e.reason {
        facts.push(json!({"title": "Reason", "value": r}));
    }
    let color = match e.event {
        "Failed" => "Attention",
        "Ready" => "Good",
        _ => "Warning",
    };
    json!({
        "type": "message",
        "attachments": [{
            "contentType": "application/vnd.microsoft.card.adaptive",
            "contentUrl": null,
            "content": {
                "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
                "type": "AdaptiveCard",
                "version": "1.4",
                "body": [
                    {"type": "TextBlock", "size": "Medium", "weight": "Bolder", "color": color, "wrap": true,
                     "text": format!("capstan: {} {}", e.cluster, e.event)},
                    {"type": "FactSet", "facts": facts},
                    {"type": "TextBlock", "wrap": true, "text": if e.message.is_empty() { e.phase.to_string() } else { e.message.clone() }},
                ],
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
        assert_eq!(a["content"]["body"][1]["type"], "FactSet");
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
