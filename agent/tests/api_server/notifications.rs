//! Notifications end to end: the real `capstan run` binary, as the agent's ServiceAccount, on
//! the real API server, with the fleet config's `notifications` naming a Secret that holds the
//! URLs of local stand-ins for Slack, Teams and two signed webhooks. A revision the API server
//! refuses makes a cluster Failed, and it stays Failed over several retried passes: each
//! stand-in receives that one Failed notification in its documented shape (Slack after a 500,
//! Teams after a 429 whose Retry-After is honoured; the webhook signed with the Secret's key),
//! while one endpoint never answers and the passes still complete. The revision fixed and
//! Cluster API's status written as its controllers would, the cluster comes Ready and that is
//! notified once.

use std::collections::VecDeque;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use serde_json::{Value, json};

use crate::source_support::agent::{fleet_with, value_in, wait_metrics, write_files};
use crate::source_support::free_port;

use crate::source_support::agent::Running as Agent;

#[derive(Clone, Copy)]
pub(crate) enum Answer {
    Status(u16),
    TooMany(u64),
    Hang,
}

/// A stand-in endpoint: answers as scripted (then 200), records (when, headers, raw body).
#[derive(Default)]
pub(crate) struct Stand {
    script: Mutex<VecDeque<Answer>>,
    pub(crate) got: Mutex<Vec<(Instant, HeaderMap, Bytes)>>,
}

impl Stand {
    fn bodies(&self) -> Vec<Value> {
        self.got
            .lock()
            .unwrap()
            .iter()
            .map(|(_, _, b)| serde_json::from_slice(b).expect("a JSON body"))
            .collect()
    }
}

/// The stand-in receiver: records the notification and answers as its script says.
async fn handle_notification(
    State(s): State<Arc<Stand>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    s.got.lock().unwrap().push((Instant::now(), headers, body));
    let next = s.script.lock().unwrap().pop_front();
    match next.unwrap_or(Answer::Status(200)) {
        Answer::Status(c) => StatusCode::from_u16(c).unwrap().into_response(),
        Answer::TooMany(after) => (
            StatusCode::TOO_MANY_REQUESTS,
            [("retry-after", after.to_string())],
        )
            .into_response(),
        Answer::Hang => std::future::pending().await,
    }
}

pub(crate) async fn stand_in(script: &[Answer]) -> (Arc<Stand>, String) {
    let s = Arc::new(Stand::default());
    s.script.lock().unwrap().extend(script.iter().copied());
    let app = Router::new()
        .route("/hook", axum::routing::post(handle_notification))
        .with_state(s.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (s, format!("http://{addr}/hook"))
}

async fn phase(client: &kube::Client, cluster: &str) -> Option<String> {
    let o = crate::source_support::agent::managed_cluster(client, cluster).await?;
    o.data["status"]["phase"].as_str().map(str::to_string)
}

pub(crate) async fn wait_until_phase(
    client: &kube::Client,
    cluster: &str,
    want: &str,
    log: &dyn Fn() -> String,
) {
    let start = Instant::now();
    while phase(client, cluster).await.as_deref() != Some(want) {
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "{cluster} never {want} (is {:?}):\n{}",
            phase(client, cluster).await,
            log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The API resource of a kind of `group` at version v1beta2.
fn v1beta2_resource(group: &str, kind: &str, plural: &str) -> ApiResource {
    capstan_harness::objects::resource(group, "v1beta2", kind, plural)
}

/// Writes what Cluster API's controllers report of a converged cluster: the Cluster Available,
/// its control plane and MachineDeployment observed and rolled out, the MachineSet of the
/// current template with every machine available.
async fn converge(client: &kube::Client, ns: &str, cluster: &str) {
    let pp = PatchParams::apply("capi-controller").force();
    let write = |r: ApiResource, name: String, status: Value| {
        let api = Api::<DynamicObject>::namespaced_with(client.clone(), ns, &r);
        let pp = pp.clone();
        async move {
            let generation = api.get(&name).await.unwrap().metadata.generation.unwrap();
            let mut status = status;
            status["observedGeneration"] = json!(generation);
            for c in status["conditions"].as_array_mut().into_iter().flatten() {
                c["observedGeneration"] = json!(generation);
                c["lastTransitionTime"] = json!("2026-11-28T00:00:00Z");
                c["message"] = json!("");
            }
            let body = json!({"apiVersion": r.api_version, "kind": r.kind, "status": status});
            api.patch_status(&name, &pp, &Patch::Apply(body))
                .await
                .unwrap();
        }
    };
    let rolled = |n: i64| {
        json!({"replicas": n, "upToDateReplicas": n, "availableReplicas": n, "readyReplicas": n,
            "conditions": [{"type": "RollingOut", "status": "False", "reason": "NotRollingOut"}]})
    };
    let kcp = v1beta2_resource(
        "controlplane.cluster.x-k8s.io",
        "KubeadmControlPlane",
        "kubeadmcontrolplanes",
    );
    let mds = v1beta2_resource(
        "cluster.x-k8s.io",
        "MachineDeployment",
        "machinedeployments",
    );
    let sets = v1beta2_resource("cluster.x-k8s.io", "MachineSet", "machinesets");
    let n_of = |r: &ApiResource, name: String| {
        let api = Api::<DynamicObject>::namespaced_with(client.clone(), ns, r);
        async move {
            api.get(&name).await.unwrap().data["spec"]["replicas"]
                .as_i64()
                .unwrap_or(1)
        }
    };
    let cp_n = n_of(&kcp, cluster.to_string()).await;
    write(kcp.clone(), cluster.to_string(), rolled(cp_n)).await;
    let md = format!("{cluster}-md-0");
    let md_api = Api::<DynamicObject>::namespaced_with(client.clone(), ns, &mds);
    let md_obj = md_api.get(&md).await.unwrap();
    let n = md_obj.data["spec"]["replicas"].as_i64().unwrap_or(1);
    let labels =
        json!({"cluster.x-k8s.io/cluster-name": cluster, "cluster.x-k8s.io/deployment-name": md});
    let set_api = Api::<DynamicObject>::namespaced_with(client.clone(), ns, &sets);
    let ms = json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineSet",
        "metadata": {"name": format!("{md}-x"), "namespace": ns, "labels": labels},
        "spec": {"clusterName": cluster, "replicas": n, "selector": {"matchLabels": labels},
                 "template": md_obj.data["spec"]["template"].clone()}});
    set_api
        .patch(&format!("{md}-x"), &pp, &Patch::Apply(ms))
        .await
        .unwrap();
    let ms_status = json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineSet",
        "status": {"replicas": n, "availableReplicas": n, "readyReplicas": n, "upToDateReplicas": n}});
    set_api
        .patch_status(&format!("{md}-x"), &pp, &Patch::Apply(ms_status))
        .await
        .unwrap();
    write(mds, md, rolled(n)).await;
    let capi = v1beta2_resource("cluster.x-k8s.io", "Cluster", "clusters");
    write(
        capi,
        cluster.to_string(),
        json!({"conditions": [{"type": "Available", "status": "True", "reason": "Available"}]}),
    )
    .await;
}

const FLEET: &str = "apiVersion: capstan.dev/v1alpha1
kind: FleetConfig
spec:
  notifications:
    secretRef: capstan-system/note-hooks
    providers:
    - {name: chat, type: slack}
    - {name: team, type: teams}
    - {name: audit, type: webhook, hmacKey: audit-hmac}
    - {name: dead, type: webhook, hmacKey: audit-hmac}
    alerts:
    - {provider: chat, events: [Failed, Ready]}
    - {provider: team, events: [Failed, Ready]}
    - {provider: audit, clusters: [a-note]}
    - {provider: dead}
";

#[tokio::test]
async fn failed_then_ready_is_notified_once_per_change_and_no_endpoint_holds_a_pass() {
    let cp = capstan_harness::shared().await;
    let admin = cp.client();
    let (slack, slack_url) = stand_in(&[Answer::Status(500)]).await;
    let (teams, teams_url) = stand_in(&[Answer::TooMany(2)]).await;
    let (audit, audit_url) = stand_in(&[]).await;
    let (dead, dead_url) = stand_in(&[Answer::Hang; 64]).await;

    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("fleet");
    write_files(&repo, fleet_with("note", &["a-note", "b-note"]));
    std::fs::write(repo.join("clusters/m-note/fleet.yaml"), FLEET).unwrap();
    // A data key the API server refuses (a ConfigMap's keys are [-._a-zA-Z0-9]+), so
    // a-note fails on every pass (retried with backoff) at the same revision.
    std::fs::write(
        repo.join("clusters/m-note/workload-clusters/a-note/broken.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a-note-broken\n  namespace: t-note\ndata:\n  \"not a key!\": field\n",
    )
    .unwrap();

    // The URLs live in a Secret only, never in the repository.
    let kubeconfig = capstan::install::testing::agent_kubeconfig(cp).await;
    let secret: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "note-hooks", "namespace": "capstan-system"},
        "stringData": {
            "chat-url": slack_url, "team-url": teams_url, "audit-url": audit_url,
            "dead-url": dead_url, "audit-hmac": "note-hmac-key",
        },
    }))
    .unwrap();
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), "capstan-system");
    let _ = secrets.delete("note-hooks", &Default::default()).await;
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();

    let log = tmp.path().join("agent.log");
    let metrics_port = free_port();
    let _agent = Agent(
        Command::new(env!("CARGO_BIN_EXE_capstan"))
            .args([
                "run",
                "--interval",
                "1h",
                "--watch",
                "--management",
                "m-note",
            ])
            .args(["--notify-retry-backoff", "1s"])
            .arg("--metrics-addr")
            .arg(format!("127.0.0.1:{metrics_port}"))
            .arg("--repo")
            .arg(&repo)
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let the_log = || std::fs::read_to_string(&log).unwrap_or_default();

    // Several failing passes of a-note, the notifications delivered (Slack after its 500, Teams
    // after its 429), the dead endpoint's request still open.
    let text = wait_metrics(metrics_port, Duration::from_secs(120), |t| {
        value_in(t, "capstan_retries_total") >= 3.0
            && value_in(
                t,
                "capstan_notifications_total{provider=\"slack\",result=\"sent\"}",
            ) >= 1.0
            && value_in(
                t,
                "capstan_notifications_total{provider=\"teams\",result=\"sent\"}",
            ) >= 1.0
            && value_in(
                t,
                "capstan_notifications_total{provider=\"webhook\",result=\"sent\"}",
            ) >= 1.0
    })
    .await;
    let n = |p: &str, r: &str| {
        value_in(
            &text,
            &format!("capstan_notifications_total{{provider=\"{p}\",result=\"{r}\"}}"),
        )
    };
    assert_eq!(n("slack", "retried"), 1.0, "the 500 retried once");
    assert_eq!(n("teams", "retried"), 1.0, "the 429 retried once");
    assert_eq!(phase(&admin, "a-note").await.as_deref(), Some("Failed"));
    // The passes completed while the dead endpoint holds its request: b-note's status written
    // by the agent, a-note's retried passes counted.
    assert!(
        phase(&admin, "b-note").await.is_some(),
        "b-note has a status:\n{}",
        the_log()
    );
    assert!(value_in(&text, "capstan_reconciles_total{result=\"failure\"}") >= 3.0);
    assert!(!dead.got.lock().unwrap().is_empty(), "its requests hang");

    // Exactly one Failed each, across the failing passes: a-note's.
    let slack_got = slack.bodies();
    assert_eq!(slack_got.len(), 2, "the 500, then the retry");
    assert_eq!(slack_got[0], slack_got[1]);
    let text0 = slack_got[1]["text"].as_str().unwrap();
    assert!(text0.contains("a-note is Failed at local"), "{text0}");
    assert!(
        slack_got[1]["blocks"]
            .as_array()
            .is_some_and(|b| !b.is_empty())
    );

    let teams_got = teams.bodies();
    assert_eq!(teams_got.len(), 2, "the 429, then the retry");
    let at = teams
        .got
        .lock()
        .unwrap()
        .iter()
        .map(|g| g.0)
        .collect::<Vec<_>>();
    assert!(
        at[1] - at[0] >= Duration::from_secs(2),
        "Retry-After: 2 honoured, not the 1 s backoff"
    );
    let card = &teams_got[1];
    assert_eq!(card["type"], "message");
    assert_eq!(
        card["attachments"][0]["contentType"],
        "application/vnd.microsoft.card.adaptive"
    );
    assert_eq!(card["attachments"][0]["content"]["type"], "AdaptiveCard");
    assert_eq!(card["attachments"][0]["content"]["version"], "1.4");

    let audit_got = audit.got.lock().unwrap().clone();
    assert_eq!(audit_got.len(), 1);
    let (_, headers, raw) = &audit_got[0];
    let v: Value = serde_json::from_slice(raw).unwrap();
    assert_eq!(v["event"]["event"], "Failed");
    assert_eq!(v["event"]["cluster"], "a-note");
    assert_eq!(v["event"]["management"], "m-note");
    let sig = headers["x-capstan-signature"].to_str().unwrap();
    let mut mac =
        <hmac::Hmac<sha2::Sha256> as hmac::KeyInit>::new_from_slice(b"note-hmac-key").unwrap();
    hmac::Mac::update(&mut mac, raw);
    hmac::Mac::verify_slice(
        mac,
        &hex::decode(sig.strip_prefix("sha256=").unwrap()).unwrap(),
    )
    .expect("signed with the Secret's key");

    // The revision fixed: a-note applies (Progressing: no Cluster API controller runs here), then
    // what the controllers would report (everything observed, rolled out, Available) makes it
    // Ready, and Ready is notified once where alerts want it.
    std::fs::remove_file(repo.join("clusters/m-note/workload-clusters/a-note/broken.yaml"))
        .unwrap();
    wait_until_phase(&admin, "a-note", "Progressing", &the_log).await;
    converge(&admin, "t-note", "a-note").await;
    wait_until_phase(&admin, "a-note", "Ready", &the_log).await;
    let text = wait_metrics(metrics_port, Duration::from_secs(60), |t| {
        ["slack", "teams", "webhook"].iter().all(|p| {
            value_in(
                t,
                &format!("capstan_notifications_total{{provider=\"{p}\",result=\"sent\"}}"),
            ) >= 2.0
        })
    })
    .await;
    // Slack's fallback text, the Teams card's title (its runs), the webhook's summary.
    let title = |v: &Value| -> Option<String> {
        let runs = v["attachments"][0]["content"]["body"][0]["inlines"].as_array()?;
        Some(runs.iter().filter_map(|r| r["text"].as_str()).collect())
    };
    let events = |s: &Stand| -> Vec<String> {
        s.bodies()
            .iter()
            .map(|v| {
                v["text"]
                    .as_str()
                    .map(str::to_string)
                    .or_else(|| title(v))
                    .or_else(|| v["summary"].as_str().map(str::to_string))
                    .unwrap()
            })
            .collect()
    };
    let slack_got = events(&slack);
    assert_eq!(slack_got.len(), 3, "{slack_got:?}");
    assert!(
        slack_got[2].contains("a-note is Ready at local"),
        "{slack_got:?}"
    );
    let teams_got = events(&teams);
    assert_eq!(teams_got.len(), 3, "{teams_got:?}");
    assert!(teams_got[2].contains("a-note Ready"), "{teams_got:?}");
    let audit_got = audit.bodies();
    assert_eq!(audit_got.len(), 2, "{audit_got:?}");
    assert_eq!(audit_got[1]["event"]["event"], "Ready");
    assert_eq!(audit_got[1]["event"]["phase"], "Ready");
    assert_eq!(
        value_in(
            &text,
            "capstan_notifications_total{provider=\"slack\",result=\"failed\"}"
        ),
        0.0
    );

    // The URLs are credentials: never in the agent's log.
    let l = the_log();
    for url in [&slack_url, &teams_url, &audit_url, &dead_url] {
        assert!(!l.contains(url.as_str()), "a URL in the log");
    }
    assert!(l.contains("notification sent"), "{l}");
}
