//! Benchmark (prints figures; not a test): what the dashboard costs the agent. The real agent,
//! `capstan run` as its own process, follows a fleet of N workload clusters (default 1,000;
//! `CAPSTAN_BENCH_CLUSTERS` overrides) on a private local control plane, which also holds five
//! Machines per cluster (what Cluster API would have made: the dashboard watches them, the
//! agent's own cache does not).
//!
//! A first agent applies the fleet. Then agents are started on the applied fleet in turn,
//! alternately without and with `--dashboard-addr` (`CAPSTAN_BENCH_ROUNDS` pairs, default 2):
//! each runs its first pass (every cluster planned, nothing to write), and one with the
//! dashboard is then asked for the fleet page, a filtered fleet page, the waves page and a
//! cluster's page ten times each with a bearer token (TokenReview and SubjectAccessReview per
//! request, as in production). Each agent's RSS (VmRSS) and peak (VmHWM) are printed at the end
//! of its turn, and the pages' times as the agent answered them.
//!
//! Target (the dashboard issue): no measurable change in the agent's RSS at 1,000 clusters: the
//! difference between the two modes within the spread of the runs of one mode.
//!
//! Run: `cargo bench -p capstan --bench dashboard_agent`.

mod support;

use std::time::{Duration, Instant};

use capstan_harness::ControlPlane;
use futures::StreamExt;
use kube::api::{Api, DynamicObject, PostParams};
use kube::discovery::ApiResource;
use serde_json::json;
use support::{Agent, RunArgs, free_port, http, vm, wait_reconciled, write_fleet};

/// Machines per workload cluster: three of its control plane, two of its worker group.
const MACHINES: usize = 5;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n = support::env_number("CAPSTAN_BENCH_CLUSTERS", 1000);
    let rounds = support::env_number("CAPSTAN_BENCH_ROUNDS", 2);
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("fleet");
    let fleet = write_fleet(&repo, n);
    let commit = fleet.commit.clone();
    drop(fleet);
    let cp = ControlPlane::start().await.expect("control plane");
    let kubeconfig = capstan::install::testing::agent_kubeconfig(&cp).await;
    let token = cp
        .service_account_token(
            capstan::status::NAMESPACE,
            capstan::install::manifests::NAME,
        )
        .await
        .unwrap();

    let mirror = tmp.path().join("mirror");
    let run = |log: &std::path::Path, extra: &[String]| {
        Agent::run_with(
            &RunArgs {
                repo: &repo,
                kubeconfig: &kubeconfig,
                cache: &mirror,
                log,
                hook: free_port(),
                metrics: free_port(),
                concurrency: "4",
            },
            extra,
        )
    };
    let started = Instant::now();
    {
        let log = tmp.path().join("apply.log");
        let _agent = run(&log, &[]);
        wait_reconciled(&log, 0, &commit, n + 1, Duration::from_secs(3600));
    }
    println!(
        "fleet of {n} workload clusters applied in {:.0}s",
        started.elapsed().as_secs_f64()
    );
    let made = machines(&cp, n).await;
    println!("{made} Machines created (as Cluster API would have)");

    let mut rss: [Vec<(f64, f64)>; 2] = [Vec::new(), Vec::new()];
    for round in 0..rounds {
        for with in [false, true] {
            let log = tmp.path().join(format!("agent-{round}-{with}.log"));
            let port = free_port();
            let extra = if with {
                vec!["--dashboard-addr".to_string(), format!("127.0.0.1:{port}")]
            } else {
                Vec::new()
            };
            let agent = run(&log, &extra);
            wait_reconciled(&log, 0, &commit, n + 1, Duration::from_secs(1800));
            let mut pages = Vec::new();
            if with {
                pages = serve_pages(port, &token, n);
            }
            let (now, peak) = (vm(agent.pid(), "VmRSS:"), vm(agent.pid(), "VmHWM:"));
            rss[with as usize].push((now, peak));
            println!(
                "round {round}, dashboard {}: agent RSS {now:.1} MiB, peak {peak:.1} MiB{}",
                if with { "on " } else { "off" },
                pages.join("")
            );
        }
    }
    // Spread and median of each mode, and the difference within each round (the agents of a
    // round run one after the other on the same fleet).
    let stats = |v: &[(f64, f64)], f: fn(&(f64, f64)) -> f64| {
        let mut xs: Vec<f64> = v.iter().map(f).collect();
        xs.sort_by(f64::total_cmp);
        (xs[0], xs[xs.len() - 1], xs[xs.len() / 2])
    };
    for (what, f) in [
        ("RSS", (|p: &(f64, f64)| p.0) as fn(&(f64, f64)) -> f64),
        ("peak", |p: &(f64, f64)| p.1),
    ] {
        let (off_lo, off_hi, off_mid) = stats(&rss[0], f);
        let (on_lo, on_hi, on_mid) = stats(&rss[1], f);
        let diffs: Vec<String> = rss[0]
            .iter()
            .zip(&rss[1])
            .map(|(off, on)| format!("{:+.1}", f(on) - f(off)))
            .collect();
        println!(
            "{what} at {n} clusters: dashboard off {off_lo:.1}–{off_hi:.1} MiB (median {off_mid:.1}), on {on_lo:.1}–{on_hi:.1} MiB (median {on_mid:.1}); on − off per round: {} MiB",
            diffs.join(", ")
        );
    }
}

/// Five Machines per workload cluster, labelled as Cluster API labels them (three of the
/// control plane, two of its MachineDeployment), created 16 at a time.
async fn machines(cp: &ControlPlane, n: usize) -> usize {
    let ar = ApiResource {
        group: "cluster.x-k8s.io".into(),
        version: "v1beta2".into(),
        api_version: "cluster.x-k8s.io/v1beta2".into(),
        kind: "Machine".into(),
        plural: "machines".into(),
    };
    let client = cp.client();
    let all = (0..n).flat_map(|i| (0..MACHINES).map(move |m| (i, m)));
    futures::stream::iter(all)
        .map(|(i, m)| {
            let (client, ar) = (client.clone(), ar.clone());
            async move {
                let cluster = format!("w{i:04}");
                let ns = format!("team-{}", i % 20);
                let name = format!("{cluster}-m-{m}");
                let mut labels = json!({"cluster.x-k8s.io/cluster-name": cluster});
                if m < 3 {
                    labels["cluster.x-k8s.io/control-plane-name"] = cluster.clone().into();
                    labels["cluster.x-k8s.io/control-plane"] = "".into();
                } else {
                    labels["cluster.x-k8s.io/deployment-name"] = format!("{cluster}-md-0").into();
                }
                let machine: DynamicObject = serde_json::from_value(json!({
                    "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
                    "metadata": {"name": name, "namespace": ns, "labels": labels},
                    "spec": {"clusterName": cluster, "version": "v1.34.1",
                        "bootstrap": {"dataSecretName": name},
                        "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerMachine", "name": name}}}))
                .unwrap();
                Api::<DynamicObject>::namespaced_with(client, &ns, &ar)
                    .create(&PostParams::default(), &machine)
                    .await
                    .unwrap_or_else(|e| panic!("creating Machine {ns}/{name}: {e}"));
            }
        })
        .buffer_unordered(16)
        .count()
        .await
}

/// Asks the dashboard for its pages (ten times each, with `token`) once it lists every cluster;
/// the median time of each, as text.
fn serve_pages(port: u16, token: &str, n: usize) -> Vec<String> {
    let get = |path: &str| {
        http(
            port,
            &format!(
                "GET {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
            ),
        )
    };
    // The dashboard's watches list on their own: wait until the fleet page counts every cluster.
    let deadline = Instant::now() + Duration::from_secs(300);
    let all = format!("{} clusters", n + 1);
    let probe = format!("w{:04}", 42.min(n - 1));
    loop {
        let (code, body) = get("/");
        if code == 200 && body.contains(&all) && body.contains(&probe) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the dashboard never listed {n} clusters: {code} {}",
            &body[..body.len().min(400)]
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let cluster = format!("/clusters/{probe}");
    let (_, page) = get(&cluster);
    for part in [&format!("{probe}-md-0"), &format!("{probe}-m-4"), "v1.34.1"] {
        assert!(page.contains(part), "the cluster page lacks {part}: {page}");
    }
    ["/", "/?phase=Ready", "/waves", &cluster]
        .iter()
        .map(|path| {
            let mut times: Vec<Duration> = (0..10)
                .map(|_| {
                    let t = Instant::now();
                    let (code, _) = get(path);
                    assert_eq!(code, 200, "{path}");
                    t.elapsed()
                })
                .collect();
            times.sort();
            format!(
                "; {path} {:.1} ms",
                times[times.len() / 2].as_secs_f64() * 1000.0
            )
        })
        .collect()
}
