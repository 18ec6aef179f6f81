//! Hostile text in every field others write (cluster, management, revision, message), against
//! each body: no Slack mention or link, no Teams Markdown, a webhook body that stays plain, and
//! each value still shown as it was written. The checks read the bodies as each service's
//! documentation says it renders them ([`super::payload`]'s overview).

use serde_json::Value;

use super::payload::{Event, slack, teams, webhook};

/// Every string carries `EVIL`, so where it lands can be found.
pub(super) const HOSTILE: &[&str] = &[
    "<!channel> EVIL",
    "<!here|here> EVIL",
    "<!everyone> EVIL",
    "<@U0123ABCD> EVIL",
    "<@W0123ABCD|admin> EVIL",
    "<!subteam^S0123ABCD> EVIL",
    "<#C0123ABCD|general> EVIL",
    "<https://evil.example/EVIL|click here>",
    "<https://evil.example/EVIL>",
    "<mailto:it@evil.example|EVIL support>",
    "<!date^1392734382^{date}|EVIL>",
    "@channel @here @everyone EVIL",
    "https://evil.example/EVIL and www.evil.example",
    "[click here](https://evil.example/EVIL)",
    "![img](https://evil.example/EVIL.png)",
    "*EVIL* _EVIL_ ~EVIL~ **EVIL**",
    "`EVIL` ```EVIL```",
    "EVIL`<!channel>`",
    "```\n<!channel>\n``` EVIL",
    "> quoted EVIL\n> <!here>",
    "&lt;!channel&gt; EVIL",
    "&amp;lt;@U0123ABCD&amp;gt; EVIL",
    "<at>General</at> EVIL",
    "EVIL\r\n- item\r\n1. item\n\n# heading",
    "{{DATE(2017-02-14T06:08:00Z, SHORT)}} EVIL",
    "<script>alert(1)</script> EVIL",
    "\\<!channel\\> EVIL",
    "EVIL\u{202e}deliaF\u{0}\u{7}",
];

/// An event with `hostile` in `field` (`cluster`, `management`, `revision`, `message`).
pub(super) fn event(field: &str, hostile: &str) -> Event {
    let mut e = Event {
        event: "Failed",
        cluster: "dev".into(),
        management: "mgmt".into(),
        phase: "Failed",
        reason: None,
        revision: "0123456789abcdef0123456789abcdef01234567".into(),
        message: "an error".into(),
    };
    let slot = match field {
        "cluster" => &mut e.cluster,
        "management" => &mut e.management,
        "revision" => &mut e.revision,
        _ => &mut e.message,
    };
    *slot = hostile.to_string();
    e
}

/// Every object in `v`, depth first.
fn objects(v: &Value) -> Vec<&serde_json::Map<String, Value>> {
    let mut out = Vec::new();
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        match v {
            Value::Object(o) => {
                out.push(o);
                stack.extend(o.values());
            }
            Value::Array(a) => stack.extend(a.iter()),
            _ => {}
        }
    }
    out
}

/// Slack's three entities decoded.
fn decoded(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// Text Slack parses for control sequences: no raw `<` or `>` (no `<…>` mention, link, date or
/// quote), and every `&` one of the three entities.
fn no_control(text: &str) -> Result<(), String> {
    if text.contains(['<', '>']) {
        return Err(format!("a raw < or > in {text:?}"));
    }
    for (i, _) in text.match_indices('&') {
        let rest = &text[i..];
        if !["&amp;", "&lt;", "&gt;"]
            .iter()
            .any(|e| rest.starts_with(e))
        {
            return Err(format!("a bare & in {text:?}"));
        }
    }
    Ok(())
}

/// What a Slack body shows of `hostile` (in `field`): Err when a mention, a link or formatting
/// could form.
pub(super) fn check_slack(v: &Value, field: &str, hostile: &str) -> Result<(), String> {
    // The fallback text: no formatting, no automatic parsing, no link made of a URL, no unfurl.
    for (k, want) in [
        ("mrkdwn", Value::Bool(false)),
        ("parse", Value::from("none")),
        ("unfurl_links", Value::Bool(false)),
        ("unfurl_media", Value::Bool(false)),
    ] {
        if v[k] != want {
            return Err(format!("{k} is {}, not {want}", v[k]));
        }
    }
    if v.get("link_names").is_some() {
        return Err("link_names is set".into());
    }
    let text = v["text"].as_str().ok_or("no text")?;
    no_control(text)?;
    // The summary shows the cluster, the message and a revision's first 12 characters.
    if field != "management"
        && !decoded(text).contains(&hostile.chars().take(12).collect::<String>())
    {
        return Err(format!(
            "the fallback text does not show the value: {text:?}"
        ));
    }
    // Every mrkdwn object: verbatim, no control sequence, the value only in code spans.
    let shown = literal(hostile);
    let mut seen = false;
    for o in objects(v) {
        if o.get("type").and_then(Value::as_str) != Some("mrkdwn") {
            continue;
        }
        let t = o["text"].as_str().ok_or("a mrkdwn object without text")?;
        if o.get("verbatim") != Some(&Value::Bool(true)) {
            return Err(format!("not verbatim: {t:?}"));
        }
        no_control(t)?;
        let parts: Vec<&str> = t.split('`').collect();
        if parts.len().is_multiple_of(2) {
            return Err(format!("an unclosed code span in {t:?}"));
        }
        for (i, part) in parts.iter().enumerate() {
            if i.is_multiple_of(2) && part.contains("EVIL") {
                return Err(format!("the value outside a code span in {t:?}"));
            }
            if !i.is_multiple_of(2) && decoded(part) == shown {
                seen = true;
            }
        }
    }
    if !seen {
        return Err(format!("no code span shows {shown:?}: {v}"));
    }
    Ok(())
}

/// `hostile` as a Slack code span shows it.
fn literal(hostile: &str) -> String {
    hostile
        .chars()
        .map(|c| match c {
            '`' => 'ˋ',
            c if c.is_control() => ' ',
            c => c,
        })
        .collect()
}

/// What a Teams body shows of `hostile`: Err when Markdown, a mention or an action could
/// apply to it.
pub(super) fn check_teams(v: &Value, hostile: &str) -> Result<(), String> {
    let mut seen = false;
    for o in objects(v) {
        for k in ["msteams", "actions", "selectAction"] {
            if o.contains_key(k) {
                return Err(format!("{k} in {}", Value::Object(o.clone())));
            }
        }
        match o.get("type").and_then(Value::as_str) {
            // Markdown in Teams: capstan's words only.
            Some("TextBlock") | Some("FactSet") => {
                let s = Value::Object(o.clone()).to_string();
                if s.contains("EVIL") {
                    return Err(format!("the value in Markdown: {s}"));
                }
            }
            Some("TextRun") if o["text"] == hostile => seen = true,
            _ => {}
        }
    }
    if !seen {
        return Err(format!("no TextRun shows {hostile:?}: {v}"));
    }
    Ok(())
}

/// A generic webhook body: the value as written.
pub(super) fn check_webhook(v: &Value, field: &str, hostile: &str) -> Result<(), String> {
    if v["event"][field] != hostile {
        return Err(format!("event.{field} is {}", v["event"][field]));
    }
    Ok(())
}

#[test]
fn hostile_text_in_every_field_is_shown_literally_by_each_provider() {
    let mut cases = 0;
    for field in ["cluster", "management", "revision", "message"] {
        for h in HOSTILE {
            let e = event(field, h);
            let ctx = |p: &str, r: Result<(), String>| {
                r.unwrap_or_else(|err| panic!("{p}, {field} = {h:?}: {err}"))
            };
            ctx("slack", check_slack(&slack(&e), field, h));
            ctx("teams", check_teams(&teams(&e), h));
            ctx("webhook", check_webhook(&webhook(&e), field, h));
            cases += 1;
        }
    }
    assert_eq!(cases, 4 * HOSTILE.len());
}

#[test]
fn a_long_message_is_cut_to_fit_each_service() {
    // Slack refuses a text object over 3,000 characters (a field over 2,000), Teams a message
    // over 28 KB: a tenant must not silence a notification with a long refusal text.
    let e = event("message", &"<!channel> &".repeat(5_000));
    let v = slack(&e);
    for o in objects(&v) {
        if o.get("type").and_then(Value::as_str) == Some("mrkdwn") {
            let n = o["text"].as_str().unwrap_or_default().chars().count();
            assert!(n <= 2000, "{n} characters");
            no_control(o["text"].as_str().unwrap_or_default()).unwrap();
        }
    }
    let n = v["text"].as_str().unwrap_or_default().chars().count();
    assert!(n <= 3000, "{n} characters");
    let t = serde_json::to_vec(&teams(&e)).unwrap();
    assert!(t.len() < 28 * 1024, "{} bytes", t.len());
}
