//! Two replicas of `capstan run --leader-elect` against the real API server, each as its own
//! ServiceAccount bound to capstan's roles (so the audit log tells their requests apart): exactly
//! one reconciles and writes; a push announced to the follower is forwarded and applied by the
//! leader; SIGKILL of the leader hands the Lease over within the lease duration (measured from
//! the Lease's own timestamps and printed); SIGTERM releases it; a leader whose Lease another
//! holder takes exits.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use capstan_harness::ControlPlane;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use serde_json::json;

use crate::source_support::agent::{Served, get, post, push_body, scrape, value_in, wait_metrics};
use crate::source_support::free_port;
use capstan_harness::objects::service_account_user;

const SECRET: &str = "s3cret-for-tests";
const LEASE: &str = "capstan-leader-test";
const LEASE_SECONDS: u64 = 6;
const NS: &str = "capstan-system";

/// A second ServiceAccount with capstan's roles, so each replica has its own user in the audit
/// log.
async fn replica_account(cp: &ControlPlane, name: &str) -> std::path::PathBuf {
    capstan::install::testing::agent_kubeconfig(cp).await;
    let client = cp.client();
    let subject = json!([{"kind": "ServiceAccount", "name": name, "namespace": NS}]);
    let objects = [
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": NS}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "capstan"}, "subjects": subject}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": name, "namespace": NS},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "capstan"}, "subjects": subject}),
    ];
    let resolver = capstan::k8s::Resolver::new(client.clone()).await.unwrap();
    for o in &objects {
        capstan::k8s::apply::apply_as(&client, &resolver, o, "capstan-test", false)
            .await
            .unwrap();
    }
    cp.service_account_kubeconfig(NS, name).await.unwrap()
}

struct Replica {
    child: Child,
    hook: u16,
    metrics: u16,
    log: std::path::PathBuf,
}

impl Replica {
    fn start(
        name: &str,
        repo: &str,
        kubeconfig: &std::path::Path,
        dir: &std::path::Path,
    ) -> Replica {
        Replica::of(name, repo, kubeconfig, dir, LEASE, "m-lead")
    }

    fn of(
        name: &str,
        repo: &str,
        kubeconfig: &std::path::Path,
        dir: &std::path::Path,
        lease: &str,
        management: &str,
    ) -> Replica {
        let (hook, metrics) = (free_port(), free_port());
        let log = dir.join(format!("{name}.log"));
        let child = Command::new(env!("CARGO_BIN_EXE_capstan"))
            .args([
                "run",
                "--repo",
                repo,
                "--branch",
                "main",
                "--interval",
                "1h",
                "--management",
                management,
            ])
            .args([
                "--leader-elect",
                "--lease-name",
                lease,
                "--lease-namespace",
                NS,
            ])
            .args(["--lease-duration", &format!("{LEASE_SECONDS}s")])
            .arg("--webhook-addr")
            .arg(format!("127.0.0.1:{hook}"))
            .arg("--metrics-addr")
            .arg(format!("127.0.0.1:{metrics}"))
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--cache-dir")
            .arg(dir.join(format!("{name}-mirror")))
            .env("POD_NAME", name)
            .env("CAPSTAN_WEBHOOK_SECRET", SECRET)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Replica {
            child,
            hook,
            metrics,
            log,
        }
    }

    fn leader(&self) -> f64 {
        value_in(&scrape(self.metrics), "capstan_leader")
    }

    fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn push(&self, commit: &str) {
        let body = push_body(commit);
        let sig = capstan::serve::webhook::sign(SECRET.as_bytes(), body.as_bytes());
        assert_eq!(post(self.hook, &body, Some(&sig)), 202, "{}", self.logs());
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(ok.success());
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Writes since `mark` by a replica's user, leaving out its Lease requests.
fn writes_by(cp: &ControlPlane, mark: capstan_harness::AuditMark, name: &str) -> Vec<String> {
    cp.audit()
        .events_since(mark)
        .unwrap()
        .into_iter()
        .filter(|e| {
            e.is_write()
                && e.user.username == service_account_user(NS, name)
                && e.resource() != Some("leases")
        })
        .map(|e| format!("{} {}", e.verb, e.request_uri))
        .collect()
}

async fn applied(client: &kube::Client, cluster: &str, rev: &str, limit: Duration) -> bool {
    let api = capstan::status::api(client);
    let start = Instant::now();
    while start.elapsed() < limit {
        if let Ok(Some(o)) = api.get_opt(cluster).await
            && o.status.is_some_and(|s| s.last_applied_revision == rev)
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[tokio::test]
async fn one_replica_leads_a_killed_leader_is_replaced_and_sigterm_releases() {
    let cp = capstan_harness::shared().await;
    let client = cp.client();
    let fleet = Served::new("lead", &["w-lead"]);
    let up = &fleet.up;
    let tmp = tempfile::tempdir().unwrap();
    let (ka, kb) = (
        replica_account(cp, "replica-a").await,
        replica_account(cp, "replica-b").await,
    );
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    let mark = cp.audit().mark();

    // a starts first and leads; b joins as a follower and is ready all the same.
    let a = Replica::start("replica-a", &fleet.url(), &ka, tmp.path());
    wait_metrics(a.metrics, Duration::from_secs(60), |t| {
        value_in(t, "capstan_leader") == 1.0
    })
    .await;
    let b = Replica::start("replica-b", &fleet.url(), &kb, tmp.path());
    wait_metrics(b.metrics, Duration::from_secs(60), |t| {
        value_in(t, "capstan_leader") == 0.0
    })
    .await;
    let c1 = up.head();
    assert!(
        applied(&client, "w-lead", &c1, Duration::from_secs(90)).await,
        "{}",
        a.logs()
    );
    assert_eq!(b.leader(), 0.0);
    // The follower serves its probes and metrics like the leader.
    for r in [&a, &b] {
        assert_eq!(get(r.metrics, "/healthz"), 200, "{}", r.logs());
        assert_eq!(get(r.metrics, "/readyz"), 200, "{}", r.logs());
    }

    // A push announced to the follower: forwarded, and applied by the leader.
    let c2 = fleet.scale("w-lead", 3, "scale");
    b.push(&c2);
    assert!(
        applied(&client, "w-lead", &c2, Duration::from_secs(60)).await,
        "follower's push not applied:\n{}\n{}",
        b.logs(),
        a.logs()
    );
    cp.audit()
        .sync(&cp.client(), Duration::from_secs(10))
        .await
        .unwrap();
    let (wa, wb) = (
        writes_by(cp, mark, "replica-a"),
        writes_by(cp, mark, "replica-b"),
    );
    assert!(!wa.is_empty(), "the leader writes");
    assert!(wb.is_empty(), "the follower wrote: {wb:#?}");
    assert!(
        b.logs().contains("push forwarded to the leader"),
        "{}",
        b.logs()
    );

    // SIGKILL of the leader: b takes over within the lease duration.
    let before = leases.get(LEASE).await.unwrap().spec.unwrap();
    assert_eq!(before.holder_identity.as_deref(), Some("replica-a"));
    let killed = Instant::now();
    a.signal("-KILL");
    wait_metrics(b.metrics, Duration::from_secs(60), |t| {
        value_in(t, "capstan_leader") == 1.0
    })
    .await;
    let took = killed.elapsed();
    let after = leases.get(LEASE).await.unwrap().spec.unwrap();
    assert_eq!(after.holder_identity.as_deref(), Some("replica-b"));
    // From the Lease itself: b acquired it a lease duration after it saw a's last renewal, never
    // sooner (the follower counts the duration from when it saw the record, by its own clock), and
    // not much later: it looks once per retry period (0.8 s with a 6 s lease), and a's last
    // renewal may have come up to one period after `before` was read.
    let renewed = before.renew_time.unwrap().0;
    let acquired = after.acquire_time.unwrap().0;
    let gap = acquired.duration_since(renewed);
    assert!(
        gap.as_secs_f64() >= LEASE_SECONDS as f64 - 0.5,
        "hand-over {gap:?} after the last renewal, lease {LEASE_SECONDS}s: too soon"
    );
    assert!(
        gap.as_secs_f64() <= LEASE_SECONDS as f64 + 3.0,
        "hand-over {gap:?} after the last renewal, lease {LEASE_SECONDS}s"
    );
    println!(
        "leader hand-over after SIGKILL: {:.1}s from the kill to the follower leading ({:.1}s after the last renewal; lease duration {LEASE_SECONDS}s)",
        took.as_secs_f64(),
        gap.as_secs_f64()
    );
    // The new leader reconciles: a push to it is applied, written by b.
    let mark = cp.audit().mark();
    let c3 = fleet.scale("w-lead", 4, "scale again");
    b.push(&c3);
    assert!(
        applied(&client, "w-lead", &c3, Duration::from_secs(60)).await,
        "{}",
        b.logs()
    );
    cp.audit()
        .sync(&cp.client(), Duration::from_secs(10))
        .await
        .unwrap();
    assert!(!writes_by(cp, mark, "replica-b").is_empty());

    // SIGTERM: b releases the Lease before it exits.
    let mut b = b;
    b.signal("-TERM");
    let status = b.child.wait().unwrap();
    assert!(status.success(), "{status}: {}", b.logs());
    let released = leases.get(LEASE).await.unwrap().spec.unwrap();
    assert!(
        released.holder_identity.as_deref().unwrap_or("").is_empty(),
        "after SIGTERM: {released:?}"
    );

    // A leader whose Lease another holder takes (a network partition healed the wrong way, a
    // replica with a clock ahead) stops at once and exits with an error, instead of
    // reconciling beside the new holder.
    let kc = replica_account(cp, "replica-c").await;
    let mut c = Replica::start("replica-c", &fleet.url(), &kc, tmp.path());
    wait_metrics(c.metrics, Duration::from_secs(60), |t| {
        value_in(t, "capstan_leader") == 1.0
    })
    .await;
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
        k8s_openapi::jiff::Timestamp::now(),
    );
    let stolen = json!({"spec": {"holderIdentity": "intruder", "acquireTime": now, "renewTime": now,
        "leaseDurationSeconds": 3600}});
    leases
        .patch(
            LEASE,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&stolen),
        )
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = c.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "still running with its Lease taken:\n{}",
            c.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(!status.success(), "{status}: {}", c.logs());
    assert!(c.logs().contains("lost the leader Lease"), "{}", c.logs());
    assert_eq!(
        leases
            .get(LEASE)
            .await
            .unwrap()
            .spec
            .unwrap()
            .holder_identity
            .as_deref(),
        Some("intruder")
    );
}

/// The `requestReceivedTimestamp` of an audit event.
fn received(e: &capstan_harness::AuditEvent) -> k8s_openapi::jiff::Timestamp {
    e.raw["requestReceivedTimestamp"]
        .as_str()
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no requestReceivedTimestamp in {}", e.raw))
}

/// The fenced leader. Replica a talks to the API server through a TCP proxy; the proxy
/// blackholes it (a partition: nothing answered, nothing refused) while a push waits. a cannot
/// renew; at its renew deadline (two thirds of the 6 s lease) it stops writing and exits. b, which
/// counts the lease duration from when it last saw a's renewal, takes the Lease only after that,
/// and applies the newest commit. Then the partition heals. From the audit log: a's last
/// renewal, then no request of a's at all (before or after the heal), b's acquisition later than
/// a's deadline, and every write of the new revision by b.
#[tokio::test]
async fn a_leader_cut_off_from_the_api_server_stops_writing_before_another_leads() {
    const FENCE_LEASE: &str = "capstan-fence-test";
    let cp = capstan_harness::shared().await;
    let client = cp.client();
    let fleet = Served::new("fence", &["w-fence"]);
    let up = &fleet.up;
    let tmp = tempfile::tempdir().unwrap();
    let (ka, kb) = (
        replica_account(cp, "fence-a").await,
        replica_account(cp, "fence-b").await,
    );
    // a's way to the API server goes through the proxy.
    let target = cp.server_url().trim_start_matches("https://").to_string();
    let proxy = crate::source_support::blackhole::Blackhole::start(target).await;
    let ka_proxied = tmp.path().join("fence-a-proxied.kubeconfig");
    std::fs::write(
        &ka_proxied,
        std::fs::read_to_string(&ka).unwrap().replace(
            cp.server_url(),
            &format!("https://127.0.0.1:{}", proxy.port),
        ),
    )
    .unwrap();
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    let repo = fleet.url();
    let start = |name: &str, kc: &std::path::Path| {
        Replica::of(name, &repo, kc, tmp.path(), FENCE_LEASE, "m-fence")
    };

    let begin = cp.audit().mark();
    let mut a = start("fence-a", &ka_proxied);
    wait_metrics(a.metrics, Duration::from_secs(60), |t| {
        value_in(t, "capstan_leader") == 1.0
    })
    .await;
    let b = start("fence-b", &kb);
    wait_metrics(b.metrics, Duration::from_secs(60), |t| {
        value_in(t, "capstan_leader") == 0.0
    })
    .await;
    let c1 = up.head();
    assert!(
        applied(&client, "w-fence", &c1, Duration::from_secs(90)).await,
        "{}",
        a.logs()
    );
    assert!(proxy.accepted() > 0, "a talks through the proxy");
    // a leads and renews right now: a renewal seen after the first revision was applied.
    let renewed = |l: &Lease| {
        let spec = l.spec.clone().unwrap_or_default();
        (spec.holder_identity, spec.renew_time)
    };
    let first = renewed(&leases.get(FENCE_LEASE).await.unwrap());
    let limit = Instant::now() + Duration::from_secs(30);
    loop {
        let now = renewed(&leases.get(FENCE_LEASE).await.unwrap());
        assert_eq!(
            now.0.as_deref(),
            Some("fence-a"),
            "a lost the Lease before the cut:\n{}",
            a.logs()
        );
        if now.1 != first.1 {
            break;
        }
        assert!(Instant::now() < limit, "a does not renew:\n{}", a.logs());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The partition, then a push: to b, which forwards it (to nobody reachable yet).
    let mark = cp.audit().mark();
    proxy.cut();
    let c2 = fleet.scale("w-fence", 3, "scale during the partition");
    b.push(&c2);

    // a exits on its own, with the deadline's reason.
    let limit = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = a.child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < limit, "a still runs:\n{}", a.logs());
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(!status.success(), "{status}: {}", a.logs());
    assert!(
        a.logs().contains("not renewed within the renew deadline"),
        "{}",
        a.logs()
    );
    wait_metrics(b.metrics, Duration::from_secs(60), |t| {
        value_in(t, "capstan_leader") == 1.0
    })
    .await;
    assert!(
        applied(&client, "w-fence", &c2, Duration::from_secs(60)).await,
        "the newest revision, by the new leader:\n{}",
        b.logs()
    );
    let healed = proxy.accepted();
    proxy.heal();
    // After the heal b reconciles once more (a manual trigger through its webhook): nothing of a's
    // arrives meanwhile, its process is gone.
    let c3 = fleet.scale("w-fence", 4, "after the heal");
    b.push(&c3);
    assert!(
        applied(&client, "w-fence", &c3, Duration::from_secs(60)).await,
        "{}",
        b.logs()
    );
    assert_eq!(
        proxy.accepted(),
        healed,
        "a made no connection after its exit"
    );

    cp.audit()
        .sync(&cp.client(), Duration::from_secs(10))
        .await
        .unwrap();
    let of_a: Vec<_> = cp
        .audit()
        .events_since(begin)
        .unwrap()
        .into_iter()
        .filter(|e| e.user.username == service_account_user(NS, "fence-a"))
        .collect();
    let last_renewal = of_a
        .iter()
        .filter(|e| e.verb == "patch" && e.resource() == Some("leases"))
        .map(received)
        .max()
        .unwrap_or_else(|| {
            let seen: Vec<_> = of_a
                .iter()
                .map(|e| format!("{} {} {:?}", e.verb, e.request_uri, e.response_status.code))
                .collect();
            panic!(
                "no renewal of a's in the audit log: {seen:#?}\n{}",
                a.logs()
            )
        });
    let deadline = Duration::from_secs(LEASE_SECONDS * 2 / 3);
    let late: Vec<_> = of_a
        .iter()
        .filter(|e| e.is_write() && received(e) >= last_renewal + deadline)
        .map(|e| format!("{} {}", e.verb, e.request_uri))
        .collect();
    assert!(late.is_empty(), "a's writes after its deadline: {late:#?}");
    let lease = leases.get(FENCE_LEASE).await.unwrap().spec.unwrap();
    assert_eq!(lease.holder_identity.as_deref(), Some("fence-b"));
    let acquired = lease.acquire_time.unwrap().0;
    let gap = acquired.duration_since(last_renewal);
    assert!(
        gap.as_secs_f64() >= LEASE_SECONDS as f64 - 0.5,
        "b led {gap:?} after a's last renewal: before a's deadline ({deadline:?}) could have passed safely"
    );
    let writes_a = writes_by(cp, mark, "fence-a");
    let writes_b = writes_by(cp, mark, "fence-b");
    assert!(writes_a.is_empty(), "{writes_a:#?}");
    assert!(!writes_b.is_empty());
    println!(
        "fencing timeline: a's last renewal {last_renewal}; a's deadline {deadline:?} later; b took the Lease {:.1}s after a's last renewal (lease {LEASE_SECONDS}s); a exited: {status}; {} writes by b since the cut, 0 by a",
        gap.as_secs_f64(),
        writes_b.len()
    );
}
