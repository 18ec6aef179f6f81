//! Fuzzing the webhook endpoint: structure-aware requests (headers, bodies, signatures) built
//! from a valid GitHub push delivery and mutated, sent through the real router in process.
//!
//! Each case is a request that is valid or almost valid: a signature that is right, missing,
//! malformed, made with the wrong secret or over a different body; an event that is `push`,
//! `ping`, another event, missing or garbage; a delivery id fresh or repeated; a body that is the
//! push payload (its `pushed_at` a small number, so a body comes again under another id as a
//! replay does), the payload with one field mutated (wrong type, other branch, deleted, junk),
//! truncated, random bytes or over the size limit; a declared length that matches, lies, or is
//! junk. For every case the oracle computes what the endpoint must answer, and checks:
//!
//! - no panic, an answer for every request;
//! - the status code is the one the oracle expects;
//! - a trigger is fired exactly for an authenticated push to the followed branch with a new
//!   delivery id and a new body, carrying the pushed commit — never for anything else;
//! - `capstan_webhook_requests_total{outcome}` counts every request under the oracle's outcome.
//!
//! CI runs 2,000 cases. The documented run (figures in docs/reliability.md):
//! `CAPSTAN_FUZZ_CASES=100000 cargo test -p capstan --test offline -- fuzz_webhook:: --nocapture`
//! (`PROPTEST_RNG_SEED` fixes the seed; a failure prints its minimal request).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use capstan::serve::webhook::{
    DELIVERY_HEADER, DELIVERY_LOG_SIZE, EVENT_HEADER, SIGNATURE_HEADER, sign,
};
use capstan::serve::{
    Metrics, ReadyFlag, ServerConfig, ServerState, Trigger, TriggerReceiver, WebhookOutcome,
    channel, webhook_router,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Value, json};
use tower::ServiceExt;

const SECRET: &[u8] = b"fuzz-secret";
const LIMIT: usize = 4096;
/// The body [`Sig::OtherBody`] signs.
const OTHER_BODY: &[u8] = b"{}";

#[derive(Debug, Clone)]
enum Sig {
    Right,
    Missing,
    /// Not `sha256=<hex>`.
    Malformed(String),
    WrongSecret,
    /// A right signature of another body.
    OtherBody,
    /// The right hex with one character flipped.
    Flipped(usize),
}

#[derive(Debug, Clone)]
enum Event {
    Push,
    Ping,
    Other(String),
    Missing,
}

#[derive(Debug, Clone)]
enum BodyShape {
    /// The push payload pushed at this time, with these mutations.
    Push(u16, Vec<Mutation>),
    /// The first n bytes of the push payload.
    Truncated(usize),
    Bytes(Vec<u8>),
    /// Valid, padded over the limit.
    Oversized,
}

#[derive(Debug, Clone)]
enum Mutation {
    Ref(String),
    Deleted(bool),
    After(Value),
    DropRef,
    RefType(Value),
    Extra(String, Value),
    NotAnObject(Value),
}

#[derive(Debug, Clone)]
enum Length {
    Right,
    Absent,
    Lie(u64),
    Junk(String),
}

#[derive(Debug, Clone)]
struct Case {
    sig: Sig,
    event: Event,
    /// None: no delivery header; Some(n): id `d-<n>` (small n repeats).
    delivery: Option<u16>,
    body: BodyShape,
    length: Length,
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        ".{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z]{1,6}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A strategy for one change to a valid webhook delivery.
fn webhook_mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        prop_oneof![
            Just("refs/heads/main".to_string()),
            Just("refs/heads/dev".to_string()),
            Just("refs/tags/v1".to_string()),
            Just("main".to_string()),
            "refs/heads/[a-z]{0,8}",
            ".{0,20}",
        ]
        .prop_map(Mutation::Ref),
        any::<bool>().prop_map(Mutation::Deleted),
        json_value().prop_map(Mutation::After),
        Just(Mutation::DropRef),
        json_value().prop_map(Mutation::RefType),
        ("[a-z_]{1,10}", json_value()).prop_map(|(k, v)| Mutation::Extra(k, v)),
        json_value().prop_map(Mutation::NotAnObject),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    let sig = prop_oneof![
        6 => Just(Sig::Right),
        1 => Just(Sig::Missing),
        1 => prop_oneof![
            Just("sha1=abc".to_string()),
            Just("sha256".to_string()),
            Just(String::new()),
            "sha256=[0-9a-f]{0,70}",
            "[ -~]{0,40}",
        ]
        .prop_map(Sig::Malformed),
        1 => Just(Sig::WrongSecret),
        1 => Just(Sig::OtherBody),
        1 => (0usize..64).prop_map(Sig::Flipped),
    ];
    let event = prop_oneof![
        6 => Just(Event::Push),
        1 => Just(Event::Ping),
        1 => prop_oneof![
            Just("pull_request".to_string()),
            Just("PUSH".to_string()),
            "[a-z_]{0,12}",
        ]
        .prop_map(Event::Other),
        1 => Just(Event::Missing),
    ];
    let body = prop_oneof![
        6 => (0u16..3000, prop::collection::vec(webhook_mutation(), 0..3))
            .prop_map(|(at, m)| BodyShape::Push(at, m)),
        1 => (0usize..120).prop_map(BodyShape::Truncated),
        1 => prop::collection::vec(any::<u8>(), 0..200).prop_map(BodyShape::Bytes),
        1 => Just(BodyShape::Oversized),
    ];
    let length = prop_oneof![
        6 => Just(Length::Right),
        2 => Just(Length::Absent),
        1 => (0u64..10_000).prop_map(Length::Lie),
        1 => "[ -~]{0,8}".prop_map(Length::Junk),
    ];
    (
        sig,
        event,
        proptest::option::weighted(0.9, 0u16..2000),
        body,
        length,
    )
        .prop_map(|(sig, event, delivery, body, length)| Case {
            sig,
            event,
            delivery,
            body,
            length,
        })
}

fn push_value(pushed_at: u16) -> Value {
    json!({
        "ref": "refs/heads/main",
        "before": "0".repeat(40),
        "after": "a".repeat(40),
        "deleted": false,
        "repository": {"full_name": "acme/fleet", "pushed_at": pushed_at},
    })
}

fn body_bytes(shape: &BodyShape) -> Vec<u8> {
    match shape {
        BodyShape::Push(at, muts) => {
            let mut v = push_value(*at);
            // A field of a payload that is still an object (after NotAnObject it may not be).
            fn set(v: &mut Value, k: &str, x: Value) {
                if let Some(o) = v.as_object_mut() {
                    o.insert(k.to_string(), x);
                }
            }
            for m in muts {
                match m {
                    Mutation::Ref(r) => set(&mut v, "ref", json!(r)),
                    Mutation::Deleted(d) => set(&mut v, "deleted", json!(d)),
                    Mutation::After(a) => set(&mut v, "after", a.clone()),
                    Mutation::DropRef => {
                        if let Some(o) = v.as_object_mut() {
                            o.remove("ref");
                        }
                    }
                    Mutation::RefType(t) => set(&mut v, "ref", t.clone()),
                    Mutation::Extra(k, x) => {
                        if let Some(o) = v.as_object_mut() {
                            o.insert(k.clone(), x.clone());
                        }
                    }
                    Mutation::NotAnObject(x) => v = x.clone(),
                }
            }
            serde_json::to_vec(&v).unwrap()
        }
        BodyShape::Truncated(n) => {
            let full = serde_json::to_vec(&push_value(0)).unwrap();
            full[..(*n).min(full.len())].to_vec()
        }
        BodyShape::Bytes(b) => b.clone(),
        BodyShape::Oversized => {
            let mut v = push_value(0);
            v["padding"] = json!("x".repeat(LIMIT));
            serde_json::to_vec(&v).unwrap()
        }
    }
}

/// What the endpoint must answer: status, counted outcome, and the commit a trigger carries.
#[derive(Debug, PartialEq)]
struct Expected {
    status: StatusCode,
    outcome: WebhookOutcome,
    fires: Option<Option<String>>,
}

/// What the endpoint remembers: the last [`DELIVERY_LOG_SIZE`] delivery ids and the last
/// [`DELIVERY_LOG_SIZE`] bodies, each oldest out first.
#[derive(Default)]
struct Remembered {
    ids: Recent<u16>,
    bodies: Recent<Vec<u8>>,
}

impl Remembered {
    /// Whether a delivery is new (neither its id nor its body remembered); a new one is
    /// remembered.
    fn insert(&mut self, id: Option<u16>, body: &[u8]) -> bool {
        if id.is_some_and(|i| self.ids.seen.contains(&i)) || self.bodies.seen.contains(body) {
            return false;
        }
        if let Some(i) = id {
            self.ids.push(i);
        }
        self.bodies.push(body.to_vec());
        true
    }
}

struct Recent<T> {
    order: std::collections::VecDeque<T>,
    seen: std::collections::HashSet<T>,
}

impl<T> Default for Recent<T> {
    fn default() -> Self {
        Recent {
            order: Default::default(),
            seen: Default::default(),
        }
    }
}

impl<T: Clone + Eq + std::hash::Hash> Recent<T> {
    fn push(&mut self, v: T) {
        self.seen.insert(v.clone());
        self.order.push_back(v);
        if self.order.len() > DELIVERY_LOG_SIZE
            && let Some(old) = self.order.pop_front()
        {
            self.seen.remove(&old);
        }
    }
}

/// Whether serde reads the payload (an object, or a sequence in field order: ref, after,
/// deleted) and what it says.
fn payload(v: &Value) -> Option<(String, Option<String>, bool)> {
    let (git_ref, after, deleted) = match v {
        Value::Object(o) => (o.get("ref")?, o.get("after"), o.get("deleted")),
        Value::Array(a) if (1..=3).contains(&a.len()) => (&a[0], a.get(1), a.get(2)),
        _ => return None,
    };
    let git_ref = git_ref.as_str()?.to_string();
    let after = match after {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return None,
    };
    let deleted = match deleted {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return None,
    };
    Some((git_ref, after, deleted))
}

/// The oracle: the order of checks in the module docs of `capstan::serve::webhook`.
fn expected(c: &Case, body: &[u8], declared: Option<u64>, seen: &mut Remembered) -> Expected {
    let refuse = |status, outcome| Expected {
        status,
        outcome,
        fires: None,
    };
    if matches!(c.sig, Sig::Missing) {
        return refuse(StatusCode::UNAUTHORIZED, WebhookOutcome::Unauthorized);
    }
    let malformed = match &c.sig {
        Sig::Malformed(s) => !s.starts_with("sha256="),
        _ => false,
    };
    if malformed {
        return refuse(StatusCode::UNAUTHORIZED, WebhookOutcome::Unauthorized);
    }
    // In process the body arrives whole whatever the header says (framing is hyper's job on a
    // real connection); only a declared length over the limit is refused up front.
    if body.len() > LIMIT || declared.is_some_and(|n| n > LIMIT as u64) {
        return refuse(StatusCode::PAYLOAD_TOO_LARGE, WebhookOutcome::TooLarge);
    }
    // Another body's signature is right when the bodies are the same.
    let right = match &c.sig {
        Sig::Right => true,
        Sig::OtherBody => body == OTHER_BODY,
        _ => false,
    };
    if !right {
        return refuse(StatusCode::UNAUTHORIZED, WebhookOutcome::Unauthorized);
    }
    let event = match &c.event {
        Event::Missing => return refuse(StatusCode::BAD_REQUEST, WebhookOutcome::Ignored),
        Event::Push => "push".to_string(),
        Event::Ping => "ping".to_string(),
        Event::Other(e) => e.clone(),
    };
    if !seen.insert(c.delivery, body) {
        return refuse(StatusCode::ACCEPTED, WebhookOutcome::Duplicate);
    }
    match event.as_str() {
        "ping" => return refuse(StatusCode::OK, WebhookOutcome::Ignored),
        "push" => {}
        _ => return refuse(StatusCode::ACCEPTED, WebhookOutcome::Ignored),
    }
    let Some((git_ref, after, deleted)) = serde_json::from_slice::<Value>(body)
        .ok()
        .as_ref()
        .and_then(payload)
    else {
        return refuse(StatusCode::BAD_REQUEST, WebhookOutcome::Ignored);
    };
    if git_ref != "refs/heads/main" || deleted {
        return refuse(StatusCode::ACCEPTED, WebhookOutcome::Ignored);
    }
    Expected {
        status: StatusCode::ACCEPTED,
        outcome: WebhookOutcome::Accepted,
        fires: Some(after),
    }
}

/// The request, and the length it declares (as the endpoint reads the header).
fn build_request(c: &Case, body: &[u8]) -> (Request<Body>, Option<u64>) {
    let mut r = Request::builder()
        .method("POST")
        .uri("/hook/github")
        .header("content-type", "application/json");
    let right = sign(SECRET, body);
    match &c.sig {
        Sig::Right => r = r.header(SIGNATURE_HEADER, right),
        Sig::Missing => {}
        Sig::Malformed(s) => r = r.header(SIGNATURE_HEADER, s.as_str()),
        Sig::WrongSecret => r = r.header(SIGNATURE_HEADER, sign(b"another-secret", body)),
        Sig::OtherBody => r = r.header(SIGNATURE_HEADER, sign(SECRET, OTHER_BODY)),
        Sig::Flipped(i) => {
            let mut s = right.into_bytes();
            let at = 7 + i % (s.len() - 7);
            s[at] = if s[at] == b'0' { b'1' } else { b'0' };
            r = r.header(SIGNATURE_HEADER, String::from_utf8(s).unwrap());
        }
    }
    match &c.event {
        Event::Push => r = r.header(EVENT_HEADER, "push"),
        Event::Ping => r = r.header(EVENT_HEADER, "ping"),
        Event::Other(e) => r = r.header(EVENT_HEADER, e.as_str()),
        Event::Missing => {}
    }
    if let Some(d) = c.delivery {
        r = r.header(DELIVERY_HEADER, format!("d-{d}"));
    }
    let header = match &c.length {
        Length::Right => Some(body.len().to_string()),
        Length::Absent => None,
        Length::Lie(n) => Some(n.to_string()),
        Length::Junk(s) => Some(s.clone()),
    };
    if let Some(h) = &header {
        r = r.header("content-length", h.as_str());
    }
    let declared = header.and_then(|h| h.trim().parse::<u64>().ok());
    (r.body(Body::from(body.to_vec())).unwrap(), declared)
}

fn drain(rx: &mut TriggerReceiver) -> Vec<Trigger> {
    let mut out = Vec::new();
    while let Some(batch) = rx.try_next() {
        out.extend(batch);
    }
    out
}

#[test]
fn webhook_requests_fuzzed() {
    let cases: u32 = std::env::var("CAPSTAN_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (tx, rx) = channel();
    let rx = std::cell::RefCell::new(rx);
    let metrics = Arc::new(Metrics::new());
    let state = ServerState::new(
        ServerConfig::new("main")
            .with_webhook_secret(SECRET)
            .with_body_limit(LIMIT),
        tx,
        metrics.clone(),
        ReadyFlag::new(),
    );
    let router = webhook_router(state);
    let seen = std::cell::RefCell::new(Remembered::default());
    let count = AtomicU64::new(0);
    let mut counted: std::collections::BTreeMap<&'static str, u64> = Default::default();
    let counted = std::cell::RefCell::new(&mut counted);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&case(), |c| {
        let body = body_bytes(&c.body);
        let (req, declared) = build_request(&c, &body);
        // The oracle's delivery log lives as long as the endpoint's, across cases.
        let want = expected(&c, &body, declared, &mut seen.borrow_mut());
        let before = metrics.webhook_requests(want.outcome);
        let resp = rt
            .block_on(router.clone().oneshot(req))
            .expect("the router answers");
        let fired = drain(&mut rx.borrow_mut());
        count.fetch_add(1, Ordering::Relaxed);
        *counted
            .borrow_mut()
            .entry(want.outcome.as_str())
            .or_default() += 1;
        prop_assert_eq!(resp.status(), want.status, "case {:?}", c);
        prop_assert_eq!(
            metrics.webhook_requests(want.outcome),
            before + 1,
            "counted under {:?}",
            want.outcome
        );
        match &want.fires {
            None => prop_assert!(fired.is_empty(), "fired {:?} for {:?}", fired, c),
            Some(after) => prop_assert_eq!(
                fired,
                vec![Trigger::Webhook {
                    after: after.clone(),
                    delivery: c.delivery.map(|d| format!("d-{d}")),
                }]
            ),
        }
        Ok(())
    });
    println!(
        "webhook fuzz: {} requests, by outcome {:?}",
        count.load(Ordering::Relaxed),
        counted.borrow()
    );
    if let Err(e) = result {
        panic!("{e}");
    }
}
