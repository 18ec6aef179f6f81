//! `spec.notifications` of the fleet config: where phase changes of the fleet's clusters are
//! sent.
//!
//! ```yaml
//! spec:
//!   notifications:
//!     secretRef: capstan-system/capstan-notifications   # the webhook URLs and HMAC keys
//!     providers:                  # where to send: one per endpoint
//!     - name: platform-slack
//!       type: slack               # slack | teams | webhook
//!       urlKey: slack-url         # the Secret's key holding the URL (default: <name>-url)
//!     - name: audit
//!       type: webhook
//!       hmacKey: audit-hmac       # webhook: the Secret's key holding the HMAC-SHA256 key
//!     alerts:                     # what to send where
//!     - provider: platform-slack
//!       events: [Failed, Ready]   # Failed | Ready | Held | Conflict (default: all)
//!       clusters: [prod-1]        # by name, and/or
//!       matchLabels: {tier: prod} # by the labels of the EKS-A Cluster (neither: every cluster)
//!       perMinute: 20             # at most this many a minute to this provider (default 30)
//! ```
//!
//! Why split providers from alerts (as Flux splits Provider from Alert): an endpoint is written
//! once, and several alerts with their own filters send to it. Why a Secret: a Slack or Teams
//! webhook URL is a credential (whoever holds it posts into the channel), so the repository
//! names the Secret and its keys, never the URL; the agent reads them when it sends.

use std::collections::BTreeMap;

use capstan_templates::diag::{Code, Diagnostic};
use capstan_templates::spec::SourceDoc;
use serde::Deserialize;

/// `spec.notifications`, as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawNotifications {
    /// `namespace/name` of the Secret.
    pub secret_ref: String,
    /// Endpoints.
    #[serde(default)]
    pub providers: Vec<RawProvider>,
    /// Routes.
    #[serde(default)]
    pub alerts: Vec<RawAlert>,
}

/// `spec.notifications.providers[]`, as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawProvider {
    /// Its name, for alerts.
    pub name: String,
    /// `slack`, `teams` or `webhook`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The Secret's key holding the URL.
    #[serde(default)]
    pub url_key: Option<String>,
    /// The Secret's key holding the HMAC key (webhook).
    #[serde(default)]
    pub hmac_key: Option<String>,
}

/// `spec.notifications.alerts[]`, as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawAlert {
    /// A provider's name.
    pub provider: String,
    /// Which events.
    #[serde(default)]
    pub events: Vec<String>,
    /// Clusters by name.
    #[serde(default)]
    pub clusters: Vec<String>,
    /// Clusters by label.
    #[serde(default)]
    pub match_labels: BTreeMap<String, String>,
    /// Rate limit.
    #[serde(default)]
    pub per_minute: Option<u32>,
}

/// What kind of endpoint a provider is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ProviderKind {
    /// A Slack incoming webhook.
    Slack,
    /// A Microsoft Teams workflow webhook (an Adaptive Card message).
    Teams,
    /// Any HTTP endpoint: JSON signed with HMAC-SHA256.
    Webhook,
}

impl ProviderKind {
    /// As written, and as the metrics' `provider` label.
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::Slack => "slack",
            ProviderKind::Teams => "teams",
            ProviderKind::Webhook => "webhook",
        }
    }
}

/// A phase change worth a notification.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EventKind {
    /// The cluster went Failed.
    Failed,
    /// The cluster came Ready after an upgrade, a failure or a first rollout.
    Ready,
    /// Its upgrade is held by a wave, a maintenance window or maxUnavailable.
    Held,
    /// Another field manager fights over fields capstan owns.
    Conflict,
}

impl EventKind {
    /// Every kind.
    pub const ALL: [EventKind; 4] = [
        EventKind::Failed,
        EventKind::Ready,
        EventKind::Held,
        EventKind::Conflict,
    ];

    /// As written.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Failed => "Failed",
            EventKind::Ready => "Ready",
            EventKind::Held => "Held",
            EventKind::Conflict => "Conflict",
        }
    }
}

/// An endpoint, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provider {
    /// Its name.
    pub name: String,
    /// Its kind.
    pub kind: ProviderKind,
    /// The Secret's key holding the URL.
    pub url_key: String,
    /// The Secret's key holding the HMAC key (webhook only).
    pub hmac_key: Option<String>,
}

/// A route, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alert {
    /// Index of its provider in [`Notifications::providers`].
    pub provider: usize,
    /// Which events (never empty).
    pub events: Vec<EventKind>,
    /// Clusters by name.
    pub clusters: Vec<String>,
    /// Clusters by label.
    pub match_labels: BTreeMap<String, String>,
    /// At most this many notifications a minute.
    pub per_minute: u32,
}

impl Alert {
    /// Whether a cluster's event goes this way: the event chosen, and the cluster by name or by
    /// every label (neither written: every cluster).
    pub fn wants(&self, event: EventKind, name: &str, labels: &BTreeMap<String, String>) -> bool {
        self.events.contains(&event)
            && ((self.clusters.is_empty() && self.match_labels.is_empty())
                || self.clusters.iter().any(|c| c == name)
                || (!self.match_labels.is_empty()
                    && self
                        .match_labels
                        .iter()
                        .all(|(k, v)| labels.get(k) == Some(v))))
    }
}

/// `spec.notifications`, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notifications {
    /// The Secret's namespace.
    pub secret_namespace: String,
    /// The Secret's name.
    pub secret_name: String,
    /// Endpoints.
    pub providers: Vec<Provider>,
    /// Routes.
    pub alerts: Vec<Alert>,
}

/// The default rate limit of an alert, a minute.
pub const PER_MINUTE: u32 = 30;

fn dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn secret_key(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

pub(super) fn check(
    r: &RawNotifications,
    sd: &SourceDoc,
    diags: &mut Vec<Diagnostic>,
) -> Notifications {
    let mut err = |path: &str, msg: String| {
        diags.push(
            Diagnostic::error(Code::InvalidValue, msg)
                .in_file(&sd.file)
                .at(sd.doc.pos(path)),
        );
    };
    let p = "spec.notifications";
    let (ns, name) = r.secret_ref.split_once('/').unwrap_or(("", ""));
    if !dns_label(ns) || name.is_empty() || name.len() > 253 || name.contains('/') {
        err(
            &format!("{p}.secretRef"),
            format!(
                "secretRef `{}` must name a Secret as namespace/name (the webhook URLs stay out of Git)",
                r.secret_ref
            ),
        );
    }
    let mut providers: Vec<Provider> = Vec::new();
    for (i, raw) in r.providers.iter().enumerate() {
        let at = format!("{p}.providers[{i}]");
        if !dns_label(&raw.name) {
            err(
                &format!("{at}.name"),
                format!(
                    "provider name `{}` must be lowercase letters, digits and `-` (at most 63)",
                    raw.name
                ),
            );
        } else if providers.iter().any(|o| o.name == raw.name) {
            err(
                &format!("{at}.name"),
                format!("provider `{}` is named twice", raw.name),
            );
        }
        let kind = match raw.kind.as_str() {
            "slack" => Some(ProviderKind::Slack),
            "teams" => Some(ProviderKind::Teams),
            "webhook" => Some(ProviderKind::Webhook),
            other => {
                err(
                    &format!("{at}.type"),
                    format!("provider type `{other}` must be `slack`, `teams` or `webhook`"),
                );
                None
            }
        };
        let url_key = raw
            .url_key
            .clone()
            .unwrap_or_else(|| format!("{}-url", raw.name));
        if !secret_key(&url_key) {
            err(
                &format!("{at}.urlKey"),
                format!("urlKey `{url_key}` is not a Secret key (letters, digits, `-`, `_`, `.`)"),
            );
        }
        match (&raw.hmac_key, kind) {
            (Some(k), _) if !secret_key(k) => err(
                &format!("{at}.hmacKey"),
                format!("hmacKey `{k}` is not a Secret key (letters, digits, `-`, `_`, `.`)"),
            ),
            (Some(_), Some(ProviderKind::Slack | ProviderKind::Teams)) => err(
                &format!("{at}.hmacKey"),
                "hmacKey is for `type: webhook` only: Slack and Teams sign nothing".into(),
            ),
            (None, Some(ProviderKind::Webhook)) => err(
                &at,
                format!(
                    "provider `{}` of type webhook needs hmacKey: the Secret's key holding the HMAC-SHA256 key its requests are signed with",
                    raw.name
                ),
            ),
            _ => {}
        }
        if let Some(kind) = kind {
            providers.push(Provider {
                name: raw.name.clone(),
                kind,
                url_key,
                hmac_key: raw.hmac_key.clone(),
            });
        }
    }
    let mut alerts = Vec::new();
    for (i, raw) in r.alerts.iter().enumerate() {
        let at = format!("{p}.alerts[{i}]");
        let provider = providers.iter().position(|o| o.name == raw.provider);
        if provider.is_none() {
            err(
                &format!("{at}.provider"),
                format!(
                    "alert names provider `{}`, which spec.notifications.providers does not have",
                    raw.provider
                ),
            );
        }
        let mut events = Vec::new();
        for (j, e) in raw.events.iter().enumerate() {
            match EventKind::ALL.iter().find(|k| k.as_str() == e) {
                Some(k) if !events.contains(k) => events.push(*k),
                Some(_) => {}
                None => err(
                    &format!("{at}.events[{j}]"),
                    format!("event `{e}` must be one of Failed, Ready, Held, Conflict"),
                ),
            }
        }
        if raw.events.is_empty() {
            events = EventKind::ALL.to_vec();
        }
        let per_minute = raw.per_minute.unwrap_or(PER_MINUTE);
        if !(1..=600).contains(&per_minute) {
            err(
                &format!("{at}.perMinute"),
                format!("perMinute {per_minute} must be from 1 to 600"),
            );
        }
        if let Some(provider) = provider {
            alerts.push(Alert {
                provider,
                events,
                clusters: raw.clusters.clone(),
                match_labels: raw.match_labels.clone(),
                per_minute,
            });
        }
    }
    Notifications {
        secret_namespace: ns.to_string(),
        secret_name: name.to_string(),
        providers,
        alerts,
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::parse;

    const HEAD: &str =
        "apiVersion: capstan.dev/v1alpha1\nkind: FleetConfig\nspec:\n  notifications:\n";

    #[test]
    fn a_notifications_section_parses_with_its_defaults() {
        let text = format!(
            "{HEAD}    secretRef: capstan-system/hooks\n    providers:\n    - {{name: chat, type: slack}}\n    - {{name: audit, type: webhook, urlKey: audit.url, hmacKey: audit_key}}\n    alerts:\n    - provider: chat\n      events: [Failed, Ready]\n      matchLabels: {{tier: prod}}\n    - provider: audit\n      perMinute: 5\n"
        );
        let (c, d) = parse(Path::new("f.yaml"), &text);
        assert!(d.is_empty(), "{d:?}");
        let n = c.unwrap().notifications.unwrap();
        assert_eq!(
            (n.secret_namespace.as_str(), n.secret_name.as_str()),
            ("capstan-system", "hooks")
        );
        assert_eq!(n.providers[0].url_key, "chat-url");
        assert_eq!(n.providers[1].hmac_key.as_deref(), Some("audit_key"));
        assert_eq!(n.alerts[0].per_minute, PER_MINUTE);
        assert_eq!(n.alerts[1].events, EventKind::ALL.to_vec());
        let prod = BTreeMap::from([("tier".to_string(), "prod".to_string())]);
        assert!(n.alerts[0].wants(EventKind::Failed, "x", &prod));
        assert!(!n.alerts[0].wants(EventKind::Held, "x", &prod));
        assert!(!n.alerts[0].wants(EventKind::Failed, "x", &BTreeMap::new()));
        assert!(n.alerts[1].wants(EventKind::Conflict, "x", &BTreeMap::new()));
    }

    #[test]
    fn bad_notifications_are_located() {
        let text = format!(
            "{HEAD}    secretRef: hooks\n    providers:\n    - {{name: chat, type: discord}}\n    - {{name: audit, type: webhook}}\n    - {{name: team, type: teams, hmacKey: k}}\n    alerts:\n    - provider: nobody\n    - provider: audit\n      events: [Exploded]\n      perMinute: 0\n"
        );
        let (c, d) = parse(Path::new("clusters/m/fleet.yaml"), &text);
        assert!(c.is_none());
        let got: Vec<_> = d.iter().map(|d| (d.code, d.line)).collect();
        assert_eq!(
            got,
            vec![
                (Code::InvalidValue, 5),
                (Code::InvalidValue, 7),
                (Code::InvalidValue, 8),
                (Code::InvalidValue, 9),
                (Code::InvalidValue, 11),
                (Code::InvalidValue, 13),
                (Code::InvalidValue, 14),
            ],
            "{d:#?}"
        );
        assert!(d[2].message.contains("needs hmacKey"), "{}", d[2].message);
        // A URL in the repository is refused as an unknown field: it belongs in the Secret.
        let (c, d) = parse(
            Path::new("f.yaml"),
            &format!(
                "{HEAD}    secretRef: a/b\n    providers:\n    - {{name: chat, type: slack, url: https://hooks.slack.com/x}}\n"
            ),
        );
        assert!(c.is_none());
        assert_eq!(
            d.iter().map(|d| (d.code, d.line)).collect::<Vec<_>>(),
            vec![(Code::UnknownField, 7)]
        );
    }
}
