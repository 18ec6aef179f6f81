//! Fuzzing parse → validate → render with structure-aware mutations of a valid fleet.
//!
//! The base is a valid fleet written by the scaffolder: a management cluster, a healthy docker
//! workload `ok`, and the workload under fuzz, `w` (docker or vSphere). Each case mutates `w`'s
//! files the way people and tools break them: on the documents (a key removed, renamed or added, a
//! value replaced by one of another type or an edge value — huge, negative, empty, unicode, a
//! version-like or CIDR-like string —, a list unwrapped or wrapped, a value nested hundreds deep, a
//! document dropped, duplicated or retyped) and on the text (a line dropped, duplicated or
//! re-indented, bytes inserted, the file truncated, a key repeated, an alias bomb). Then the whole
//! fleet is loaded, and:
//!
//! - nothing panics and every case finishes (a watchdog aborts on a case that takes minutes);
//! - every diagnostic carries its file, and a position (line and column from 1, inside the file)
//!   unless it is about the file as a whole;
//! - `w` renders exactly when it has no error; `mgmt` and `ok` render exactly what they render in
//!   the clean fleet (one broken cluster never touches another);
//! - memory stays bounded: the peak resident size after the run is printed and must stay under
//!   1 GiB.
//!
//! CI runs 300 cases. The documented run (figures in docs/reliability.md):
//! `CAPSTAN_FUZZ_CASES=100000 cargo test --release -p capstan-layout --test fuzz_fleet -- --nocapture`
//! (`PROPTEST_RNG_SEED` fixes the seed; a failure prints the minimal mutation).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use capstan_layout::scaffold::{self, ClusterRequest};
use capstan_layout::{Fleet, RenderCache, Tree, load_cached};
use capstan_templates::diag::Code;
use capstan_templates::yaml;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Value, json};

const W_DIR: &str = "clusters/mgmt/workload-clusters/w";

/// Codes whose diagnostics are about a file or directory as a whole (line 0).
const WHOLE_FILE: &[Code] = &[
    Code::Io,
    Code::FileTooLarge,
    Code::SymlinkEscapes,
    Code::SymlinkIntoGit,
    Code::InvalidPath,
    Code::CaseCollision,
    Code::TooManyEntries,
    Code::TooDeep,
    Code::NotAFleet,
    Code::UnexpectedEntry,
    Code::MissingCluster,
];

fn base(vsphere: bool) -> BTreeMap<String, String> {
    let mut tree = Tree::new();
    let mut out = BTreeMap::new();
    let reqs = [
        ClusterRequest {
            name: "mgmt".into(),
            provider: "docker".into(),
            kubernetes_version: Some("1.33".into()),
            pod_cidr: Some("192.168.0.0/16".into()),
            service_cidr: Some("10.96.0.0/12".into()),
            ..Default::default()
        },
        ClusterRequest {
            name: "ok".into(),
            management: Some("mgmt".into()),
            provider: "docker".into(),
            kubernetes_version: Some("1.33".into()),
            pod_cidr: Some("172.16.0.0/16".into()),
            service_cidr: Some("10.112.0.0/16".into()),
            worker_count: Some(2),
            ..Default::default()
        },
        ClusterRequest {
            name: "w".into(),
            management: Some("mgmt".into()),
            provider: if vsphere { "vsphere" } else { "docker" }.into(),
            kubernetes_version: Some("1.32".into()),
            pod_cidr: Some("172.17.0.0/16".into()),
            service_cidr: Some("10.113.0.0/16".into()),
            worker_count: Some(3),
            endpoint_host: vsphere.then(|| "10.20.0.10".to_string()),
            external_etcd: vsphere.then_some(3),
            values: vsphere.then(|| {
                json!({"vsphere": {
                    "server": "vc.example", "datacenter": "dc1", "network": "VM Network",
                    "datastore": "ds1", "resourcePool": "/dc1/host/c/Resources",
                    "template": "/dc1/vm/ubuntu", "sshAuthorizedKey": "ssh-ed25519 AAAA fuzz"
                }})
            }),
            ..Default::default()
        },
    ];
    for req in &reqs {
        let plan =
            scaffold::plan(&tree, req).unwrap_or_else(|e| panic!("scaffolding {}: {e}", req.name));
        for (p, t) in plan.files {
            tree.insert(p.clone(), t.clone());
            out.insert(p.display().to_string(), t);
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Mutations.

/// Which node of a document (by index among its nodes in document order).
type At = usize;

#[derive(Debug, Clone)]
enum Doc {
    Remove(At),
    Replace(At, Value),
    RenameKey(At, String),
    AddKey(At, String, Value),
    Wrap(At),
    Unwrap(At),
    NestDeep(At, usize),
    Drop,
    Duplicate,
    Retype(String, String),
}

#[derive(Debug, Clone)]
enum Text {
    DropLine(usize),
    DuplicateLine(usize),
    Indent(usize, usize),
    Dedent(usize),
    Insert(usize, Vec<u8>),
    Truncate(usize),
    RepeatKey(usize),
    AliasBomb(usize),
}

#[derive(Debug, Clone)]
struct Mutation {
    vsphere: bool,
    /// Which file of `w` (index among its files).
    file: usize,
    /// Which document of the file.
    doc: usize,
    docs: Vec<Doc>,
    text: Vec<Text>,
}

fn edge_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        prop_oneof![
            Just(0i64),
            Just(-1),
            Just(1),
            Just(2),
            Just(3),
            Just(i64::MAX),
            Just(i64::MIN)
        ]
        .prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        Just(json!(1.30)),
        "[a-z0-9-]{0,12}".prop_map(Value::String),
        "1\\.[0-9]{1,2}(\\.[0-9])?".prop_map(Value::String),
        "v0\\.[0-9]{1,2}\\.[0-9]".prop_map(Value::String),
        "[0-9]{1,3}\\.[0-9]{1,3}\\.[0-9]{1,3}\\.[0-9]{1,3}/[0-9]{1,2}".prop_map(Value::String),
        "\\PC{0,16}".prop_map(Value::String),
        (1usize..5000).prop_map(|n| Value::String("x".repeat(n))),
        Just(json!([])),
        Just(json!({})),
        Just(json!([{"name": "md-0", "count": 1}])),
        Just(json!({"name": "w"})),
    ]
}

fn doc_mutation() -> impl Strategy<Value = Doc> {
    prop_oneof![
        3 => any::<usize>().prop_map(Doc::Remove),
        5 => (any::<usize>(), edge_value()).prop_map(|(a, v)| Doc::Replace(a, v)),
        1 => (any::<usize>(), "[a-zA-Z]{1,20}").prop_map(|(a, k)| Doc::RenameKey(a, k)),
        2 => (
            any::<usize>(),
            prop_oneof!["[a-zA-Z]{1,20}", Just("name".to_string()), Just("count".to_string())],
            edge_value()
        )
            .prop_map(|(a, k, v)| Doc::AddKey(a, k, v)),
        1 => any::<usize>().prop_map(Doc::Wrap),
        1 => any::<usize>().prop_map(Doc::Unwrap),
        1 => (any::<usize>(), 1usize..300).prop_map(|(a, d)| Doc::NestDeep(a, d)),
        1 => Just(Doc::Drop),
        1 => Just(Doc::Duplicate),
        1 => (
            prop_oneof![
                Just("anywhere.eks.amazonaws.com/v1alpha1".to_string()),
                Just("v1".to_string()),
                Just("cluster.x-k8s.io/v1beta2".to_string()),
                "[a-z./0-9]{0,20}"
            ],
            prop_oneof![
                Just("Cluster".to_string()),
                Just("DockerDatacenterConfig".to_string()),
                Just("VSphereMachineConfig".to_string()),
                Just("Secret".to_string()),
                Just("ConfigMap".to_string()),
                "[A-Za-z]{0,16}"
            ]
        )
            .prop_map(|(a, k)| Doc::Retype(a, k)),
    ]
}

fn text_mutation() -> impl Strategy<Value = Text> {
    prop_oneof![
        any::<usize>().prop_map(Text::DropLine),
        any::<usize>().prop_map(Text::DuplicateLine),
        (any::<usize>(), 1usize..6).prop_map(|(l, n)| Text::Indent(l, n)),
        any::<usize>().prop_map(Text::Dedent),
        (
            any::<usize>(),
            prop_oneof![
                prop::collection::vec(any::<u8>(), 1..8),
                prop_oneof![
                    Just(b"\t".to_vec()),
                    Just(b": ".to_vec()),
                    Just(b"- ".to_vec()),
                    Just(b"&a ".to_vec()),
                    Just(b"*a".to_vec()),
                    Just(b"!!binary ".to_vec()),
                    Just(b"{".to_vec()),
                    Just(b"]".to_vec()),
                    Just(b"\"".to_vec()),
                    Just(b"\n---\n".to_vec()),
                    Just(b"\r\n".to_vec()),
                    Just(b"\0".to_vec()),
                    Just(b"\xef\xbb\xbf".to_vec()),
                    Just(b"<<: *a\n".to_vec()),
                ]
            ]
        )
            .prop_map(|(at, b)| Text::Insert(at, b)),
        any::<usize>().prop_map(Text::Truncate),
        any::<usize>().prop_map(Text::RepeatKey),
        (2usize..10).prop_map(Text::AliasBomb),
    ]
}

fn fleet_edit() -> impl Strategy<Value = Mutation> {
    (
        any::<bool>(),
        0usize..4,
        0usize..4,
        prop::collection::vec(doc_mutation(), 0..4),
        prop::collection::vec(text_mutation(), 0..3),
    )
        .prop_map(|(vsphere, file, doc, docs, text)| Mutation {
            vsphere,
            file,
            doc,
            docs,
            text,
        })
}

/// Paths to every node of `v` (document order), as JSON pointers.
fn nodes(v: &Value, at: String, out: &mut Vec<String>) {
    out.push(at.clone());
    match v {
        Value::Object(m) => {
            for (k, c) in m {
                nodes(
                    c,
                    format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")),
                    out,
                );
            }
        }
        Value::Array(a) => {
            for (i, c) in a.iter().enumerate() {
                nodes(c, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

fn pick(v: &Value, at: At) -> String {
    let mut all = Vec::new();
    nodes(v, String::new(), &mut all);
    all[at % all.len()].clone()
}

fn split(pointer: &str) -> Option<(String, String)> {
    let i = pointer.rfind('/')?;
    Some((
        pointer[..i].to_string(),
        pointer[i + 1..].replace("~1", "/").replace("~0", "~"),
    ))
}

fn apply_doc(docs: &mut Vec<Value>, which: usize, m: &Doc) {
    if docs.is_empty() {
        return;
    }
    let i = which % docs.len();
    match m {
        Doc::Drop => {
            docs.remove(i);
            return;
        }
        Doc::Duplicate => {
            let d = docs[i].clone();
            docs.insert(i, d);
            return;
        }
        _ => {}
    }
    let doc = &mut docs[i];
    match m {
        Doc::Remove(at) => {
            let p = pick(doc, *at);
            if let Some((parent, key)) = split(&p) {
                match doc.pointer_mut(&parent) {
                    Some(Value::Object(o)) => {
                        o.remove(&key);
                    }
                    Some(Value::Array(a)) => {
                        if let Ok(k) = key.parse::<usize>()
                            && k < a.len()
                        {
                            a.remove(k);
                        }
                    }
                    _ => {}
                }
            }
        }
        Doc::Replace(at, v) => {
            let p = pick(doc, *at);
            if let Some(slot) = doc.pointer_mut(&p) {
                *slot = v.clone();
            }
        }
        Doc::RenameKey(at, new) => {
            let p = pick(doc, *at);
            if let Some((parent, key)) = split(&p)
                && let Some(Value::Object(o)) = doc.pointer_mut(&parent)
                && let Some(v) = o.remove(&key)
            {
                o.insert(new.clone(), v);
            }
        }
        Doc::AddKey(at, k, v) => {
            let p = pick(doc, *at);
            if let Some(Value::Object(o)) = doc.pointer_mut(&p) {
                o.insert(k.clone(), v.clone());
            }
        }
        Doc::Wrap(at) => {
            let p = pick(doc, *at);
            if let Some(slot) = doc.pointer_mut(&p) {
                *slot = Value::Array(vec![slot.take()]);
            }
        }
        Doc::Unwrap(at) => {
            let p = pick(doc, *at);
            if let Some(slot) = doc.pointer_mut(&p)
                && let Value::Array(a) = slot
                && let Some(first) = a.first().cloned()
            {
                *slot = first;
            }
        }
        Doc::NestDeep(at, depth) => {
            let p = pick(doc, *at);
            if let Some(slot) = doc.pointer_mut(&p) {
                let mut v = slot.take();
                for i in 0..*depth {
                    v = if i % 2 == 0 {
                        Value::Array(vec![v])
                    } else {
                        json!({ "k": v })
                    };
                }
                *slot = v;
            }
        }
        Doc::Retype(api, kind) => {
            if let Value::Object(o) = doc {
                o.insert("apiVersion".into(), json!(api));
                o.insert("kind".into(), json!(kind));
            }
        }
        Doc::Drop | Doc::Duplicate => unreachable!("handled above"),
    }
}

fn apply_text(bytes: &mut Vec<u8>, m: &Text) {
    let text = String::from_utf8_lossy(bytes).into_owned();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    if lines.is_empty() {
        lines.push(String::new());
    }
    let n = lines.len();
    match m {
        Text::DropLine(l) => {
            lines.remove(l % n);
        }
        Text::DuplicateLine(l) => {
            let d = lines[l % n].clone();
            lines.insert(l % n, d);
        }
        Text::Indent(l, by) => lines[l % n].insert_str(0, &" ".repeat(*by)),
        Text::Dedent(l) => {
            let t = lines[l % n].trim_start().to_string();
            lines[l % n] = t;
        }
        Text::RepeatKey(l) => {
            let line = lines[l % n].clone();
            if line.contains(':') {
                lines.insert(l % n + 1, line);
            }
        }
        Text::AliasBomb(levels) => {
            lines.push("bomb:".into());
            lines.push("  l0: &l0 [x, x, x, x, x, x, x, x, x, x]".into());
            for i in 1..*levels {
                let refs = vec![format!("*l{}", i - 1); 10].join(", ");
                lines.push(format!("  l{i}: &l{i} [{refs}]"));
            }
        }
        Text::Insert(at, b) => {
            let at = at % (bytes.len() + 1);
            bytes.splice(at..at, b.iter().copied());
            return;
        }
        Text::Truncate(at) => {
            bytes.truncate(at % (bytes.len() + 1));
            return;
        }
    }
    *bytes = (lines.join("\n") + "\n").into_bytes();
}

// ---------------------------------------------------------------------------------------------

struct Bases {
    files: [BTreeMap<String, String>; 2],
    fleets: [Fleet; 2],
}

fn check(
    m: &Mutation,
    bases: &Bases,
    cache: &mut RenderCache,
    stats: &mut BTreeMap<String, u64>,
) -> Result<(), TestCaseError> {
    let k = usize::from(m.vsphere);
    let mut files: BTreeMap<String, Vec<u8>> = bases.files[k]
        .iter()
        .map(|(p, t)| (p.clone(), t.clone().into_bytes()))
        .collect();
    let w_files: Vec<String> = files
        .keys()
        .filter(|p| p.starts_with(W_DIR))
        .cloned()
        .collect();
    let target = w_files[m.file % w_files.len()].clone();
    let bytes = files.get_mut(&target).expect("picked from the files");
    if !m.docs.is_empty()
        && let Ok(mut docs) = yaml::parse_values(&String::from_utf8_lossy(bytes))
    {
        for d in &m.docs {
            apply_doc(&mut docs, m.doc, d);
        }
        *bytes = yaml::to_string_multi(docs.iter()).into_bytes();
    }
    for t in &m.text {
        apply_text(bytes, t);
    }
    let mutated_lines = String::from_utf8_lossy(bytes).lines().count();
    let mut tree = Tree::new();
    for (p, b) in &files {
        tree.insert(PathBuf::from(p), b.clone());
    }
    let fleet = load_cached(&tree, cache);

    for d in fleet.all_diagnostics() {
        *stats.entry(d.code.as_str().to_string()).or_default() += 1;
        let Some(file) = &d.file else {
            return Err(TestCaseError::fail(format!("no file: {d}")));
        };
        if WHOLE_FILE.contains(&d.code) && d.line == 0 {
            continue;
        }
        prop_assert!(d.line >= 1 && d.column >= 1, "no position: {}", d);
        if file == &PathBuf::from(&target) {
            prop_assert!(
                d.line <= mutated_lines + 1,
                "line {} past the end ({} lines): {}",
                d.line,
                mutated_lines,
                d
            );
        }
    }
    let w = fleet.cluster("w");
    if let Some(w) = w {
        let errors = w.diagnostics.iter().any(|d| d.is_error());
        prop_assert_eq!(
            w.objects.is_some(),
            !errors,
            "w renders iff it has no error; {}:\n{}\ndiagnostics: {:#?}",
            target,
            String::from_utf8_lossy(&files[&target]),
            w.diagnostics
        );
        *stats
            .entry(if errors { "w broken" } else { "w renders" }.into())
            .or_default() += 1;
    }
    for name in ["mgmt", "ok"] {
        let (Some(have), Some(want)) = (fleet.cluster(name), bases.fleets[k].cluster(name)) else {
            return Err(TestCaseError::fail(format!("{name} is missing")));
        };
        // Only a conflict with `w` itself (the same name, overlapping CIDRs) may touch them.
        let cross = [Code::DuplicateName, Code::CidrOverlap];
        if have.diagnostics.iter().any(|d| d.is_error()) {
            prop_assert!(
                have.diagnostics
                    .iter()
                    .filter(|d| d.is_error())
                    .all(|d| cross.contains(&d.code)),
                "{} became invalid: {:?}",
                name,
                have.diagnostics
            );
            continue;
        }
        prop_assert!(have.objects == want.objects, "{} renders differently", name);
    }
    prop_assert!(fleet.unreadable().is_none(), "the revision was refused");
    Ok(())
}

/// A 32-byte ChaCha seed from a number.
fn seed_bytes(seed: u64) -> [u8; 32] {
    let mut b = [0u8; 32];
    b[..8].copy_from_slice(&seed.to_le_bytes());
    b
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

#[test]
fn fleets_fuzzed_through_parse_validate_render() {
    let cases: u32 = std::env::var("CAPSTAN_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let files = [base(false), base(true)];
    let fleets = files.clone().map(|f| {
        let mut tree = Tree::new();
        for (p, t) in f {
            tree.insert(PathBuf::from(p), t);
        }
        capstan_layout::load(&tree)
    });
    for f in &fleets {
        assert!(
            !f.has_errors(),
            "the base fleet is valid: {:?}",
            f.all_diagnostics()
        );
    }
    let bases = Bases { files, fleets };

    // A case that runs for minutes is a hang: abort with the case number rather than wait.
    let started_case = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    {
        let (started_case, done) = (started_case.clone(), done.clone());
        std::thread::spawn(move || {
            let mut last = (u64::MAX, Instant::now());
            loop {
                std::thread::sleep(Duration::from_secs(1));
                let n = started_case.load(Ordering::Relaxed);
                if done.load(Ordering::Relaxed) == u64::MAX {
                    return;
                }
                if n != last.0 {
                    last = (n, Instant::now());
                } else if last.1.elapsed() > Duration::from_secs(120) {
                    eprintln!("fuzz case {n} has not finished after 120 s: a hang");
                    std::process::abort();
                }
            }
        });
    }
    let mut cache = RenderCache::default();
    let mut stats = BTreeMap::new();
    let mut slowest = Duration::ZERO;
    // Deterministic: the same cases every run (PROPTEST_RNG_SEED picks another sequence).
    let seed: u64 = std::env::var("PROPTEST_RNG_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(11);
    let mut runner = TestRunner::new_with_rng(
        Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        },
        proptest::test_runner::TestRng::from_seed(
            proptest::test_runner::RngAlgorithm::ChaCha,
            &seed_bytes(seed),
        ),
    );
    let cache_cell = std::cell::RefCell::new(&mut cache);
    let stats_cell = std::cell::RefCell::new(&mut stats);
    let slowest_cell = std::cell::RefCell::new(&mut slowest);
    let result = runner.run(&fleet_edit(), |m| {
        started_case.fetch_add(1, Ordering::Relaxed);
        let t = Instant::now();
        let r = check(
            &m,
            &bases,
            &mut cache_cell.borrow_mut(),
            &mut stats_cell.borrow_mut(),
        );
        let took = t.elapsed();
        let mut s = slowest_cell.borrow_mut();
        if took > **s {
            **s = took;
        }
        r
    });
    done.store(u64::MAX, Ordering::Relaxed);
    let (_, _, _) = (
        cache_cell.into_inner(),
        stats_cell.into_inner(),
        slowest_cell.into_inner(),
    );
    let peak = peak_rss_kib();
    println!(
        "fleet fuzz (seed {seed}): {} cases, slowest {:?}, peak RSS {} MiB; diagnostics by code: {:?}",
        started_case.load(Ordering::Relaxed),
        slowest,
        peak / 1024,
        stats
    );
    if let Err(e) = result {
        panic!("{e}");
    }
    assert!(peak < 1024 * 1024, "peak RSS {} MiB", peak / 1024);
}
