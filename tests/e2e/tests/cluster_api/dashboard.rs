//! The dashboard in a real browser (Debian's headless Chromium) while the real Cluster API
//! controllers act: two clusters created, then upgraded canary first, then the canary given a
//! revision EKS Anywhere refuses. Each state shows on the page as the API server has it, and
//! reaches the open page without a reload (server-sent events):
//!
//! - created: the rows appear while the clusters come up, then read Ready;
//! - upgraded stage by stage: the canary's open cluster page shows it waiting for the control
//!   plane, then for the workers (recorded in the page as they show), and its stage history;
//! - held by a wave: while the canary upgrades, the waves page shows the other cluster held by
//!   its wave;
//! - failed: the canary's page shows the refusal with its `cluster.yaml:<line>`, the message
//!   the API server has.
//!
//! axe-core checks every page (no serious or critical violation); the screenshots are kept under
//! `$CARGO_TARGET_DIR/dashboard-screenshots/capi-*.png`. The dashboard is `capstan dashboard`'s
//! (the test's admin credentials; each browser opens the link with its per-run secret first, as
//! a user opens the printed one; the checks of who gets in are the agent's dashboard tests').

use capstan::status::Phase;
use capstan_e2e::capi::*;
use capstan_harness::browser::Browser;
use serde_json::{Value, json};

const WAVES: &str = "apiVersion: capstan.dev/v1alpha1
kind: FleetConfig
spec:
  rollout:
    waves:
    - name: canary
      clusters: [w-dbcan]
    healthGate: true
";

/// Records, in the page, every stage its "why changes wait" section names, in order: states
/// that come and go while the test looks elsewhere are not lost.
const RECORD_STAGES: &str = "(() => {
    window.__stages = window.__stages || [];
    const rec = () => {
        const s = document.querySelector('[data-held-by=\"stage\"] strong');
        const t = s ? s.textContent : '';
        if (t && window.__stages[window.__stages.length - 1] !== t) window.__stages.push(t);
    };
    new MutationObserver(rec).observe(document, {subtree: true, childList: true, characterData: true});
    rec();
    return true;
})()";

fn phase_of(cluster: &str) -> String {
    managed_cluster_json(cluster)
        .and_then(|m| {
            m.pointer("/status/phase")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .unwrap_or_default()
}

async fn checked(b: &mut Browser, page: &str) {
    b.screenshot(&format!("capi-{page}")).await;
    let serious = b.accessibility().await;
    assert!(serious.is_empty(), "axe-core on {page}: {serious:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_follows_clusters_created_upgraded_held_and_failed() {
    let cp = capstan_harness::shared_with_controllers().await;
    let _logs =
        cp.logs_on_failure("the_dashboard_follows_clusters_created_upgraded_held_and_failed");
    let group = json!([{"name": "md-0", "count": 1}]);
    let mut repo = Repo::new("dboard", &[("w-dbcan", group.clone()), ("w-dbrest", group)]);
    std::fs::write(repo.dir(&repo.mgmt).join("fleet.yaml"), WAVES).unwrap();

    // `capstan dashboard`, over the test's admin client, with its per-run secret.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let base = format!("http://{addr}");
    let (local, token) = capstan::dashboard::access::Local::new(addr).unwrap();
    let client = cp.client();
    let _server = tokio::spawn(async move {
        capstan::dashboard::routes::serve_local(
            &client,
            None,
            listener,
            local,
            std::future::pending(),
        )
        .await
        .unwrap()
    });
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target")
        });
    let mut b = Browser::start(&target.join("dashboard-screenshots")).await;
    let row = |name: &str, cond: &str| {
        format!("(r => !!r && ({cond}))(document.querySelector('tr[data-cluster=\"{name}\"]'))")
    };

    // 1. Created: the rows appear while the clusters come up, then read Ready. The printed
    // link's secret is exchanged for the session cookie the later pages are read with.
    b.goto(&format!("{base}/?name=w-db&token={token}")).await;
    let creating = repo.converge_in_background(None);
    assert!(
        b.until(
            &row(
                "w-dbcan",
                "['Applying', 'Progressing'].includes(r.dataset.phase)"
            ),
            120
        )
        .await,
        "{}",
        b.text().await
    );
    checked(&mut b, "fleet-creating").await;
    let out = creating.await.unwrap();
    assert!(out.last().settled(), "{}", history(&out));
    let ready = format!(
        "{} && {}",
        row("w-dbcan", "r.dataset.phase === 'Ready'"),
        row("w-dbrest", "r.dataset.phase === 'Ready'")
    );
    assert!(b.until(&ready, 60).await, "{}", b.text().await);
    assert_eq!(
        (phase_of("w-dbcan"), phase_of("w-dbrest")),
        ("Ready".into(), "Ready".into())
    );
    checked(&mut b, "fleet-ready").await;

    // 2. Upgraded, canary first: its page shows each stage as it goes; meanwhile the other
    //    cluster is held by its wave.
    b.goto(&format!("{base}/clusters/w-dbcan")).await;
    b.eval(RECORD_STAGES).await;
    b.eval("window.__same_page = true").await;
    for c in ["w-dbcan", "w-dbrest"] {
        repo.edit(
            c,
            "kubernetesVersion: \"1.33\"",
            "kubernetesVersion: \"1.34\"",
        );
    }
    let upgrading = repo.converge_in_background(None);
    assert!(
        b.until("(window.__stages || []).includes('ControlPlane')", 180)
            .await,
        "{}",
        b.text().await
    );
    checked(&mut b, "cluster-upgrading").await;
    let mut waves = Browser::start(&target.join("dashboard-screenshots")).await;
    waves.goto(&format!("{base}/waves?token={token}")).await;
    let held = "[...document.querySelectorAll('ul.wave li')].some(li => li.textContent.includes('w-dbrest') && li.textContent.includes('held by wave'))";
    assert!(waves.until(held, 120).await, "{}", waves.text().await);
    checked(&mut waves, "waves-held").await;
    drop(waves);
    let out = upgrading.await.unwrap();
    assert!(out.last().settled(), "{}", history(&out));
    let done =
        "document.body.innerText.includes('1.34') && !document.querySelector('[data-held-by]')";
    assert!(b.until(done, 120).await, "{}", b.text().await);
    // The stages the open page showed as they came, and the history it lists, are the API
    // server's: the control plane first, the workers last.
    let shown: Vec<String> = serde_json::from_value(b.eval("window.__stages").await).unwrap();
    assert_eq!(b.eval("window.__same_page === true").await, json!(true));
    let recorded: Vec<String> = managed_cluster_json("w-dbcan").unwrap()["status"]["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_string())
        .collect();
    for stages in [&shown, &recorded] {
        assert!(
            stages.first().map(String::as_str) == Some("ControlPlane")
                && stages.last().map(String::as_str) == Some("Workers"),
            "shown live: {shown:?}, recorded: {recorded:?}"
        );
    }
    let text = b.text().await;
    assert!(
        text.find("ControlPlane").unwrap() < text.rfind("Workers").unwrap(),
        "{text}"
    );
    checked(&mut b, "cluster-upgraded").await;

    // 3. Failed: a pod CIDR change EKS Anywhere refuses on a live cluster.
    repo.edit("w-dbcan", "172.16.0.0/16", "172.30.0.0/16");
    let failing = repo.converge_in_background(Some("w-dbcan"));
    let out = failing.await.unwrap();
    let c = out
        .last()
        .clusters
        .iter()
        .find(|c| c.name == "w-dbcan")
        .unwrap();
    assert_eq!(c.phase, Phase::Failed, "{}", c.message);
    let message = managed_cluster_json("w-dbcan").unwrap()["status"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(message.contains("cluster.yaml:"), "{message}");
    let shown = format!(
        "(e => !!e && e.textContent === {})(document.querySelector('section.error pre'))",
        json!(message)
    );
    assert!(
        b.until(&shown, 60).await,
        "{}\nwanted: {message}",
        b.text().await
    );
    assert_eq!(b.eval("window.__same_page === true").await, json!(true));
    checked(&mut b, "cluster-failed").await;
    assert_eq!(
        phase_of("w-dbrest"),
        "Ready",
        "the other cluster is untouched"
    );
}
