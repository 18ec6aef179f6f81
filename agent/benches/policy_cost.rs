//! Benchmark (prints figures; not a test): what the tenancy policy (the ValidatingAdmissionPolicy
//! `capstan install` puts on every write the agent makes as a fleet identity) costs, side by side
//! in one run: the cold apply of a scaffolded fleet of N workload clusters by the real agent
//! (`capstan run`, its own process, as its ServiceAccount) on a fresh local control plane, once
//! with the policy `capstan install` writes and once with that policy reduced to the one rule
//! the agent's start-up probe checks (it refuses to write without a policy that refuses a write
//! into `default`, so "no policy" is not a configuration it runs in).
//!
//! Prints, per fleet size and policy: the cold apply's time, and the CPU seconds the API server
//! and etcd spent meanwhile (`/proc/<pid>/stat`), then the difference.
//!
//! Run: `cargo bench -p capstan --bench policy_cost` (`CAPSTAN_BENCH_SIZES=100,1000`, the
//! default, sets the fleet sizes).

mod support;

use std::time::{Duration, Instant};

use capstan_harness::ControlPlane;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::discovery::ApiResource;
use serde_json::Value;
use support::{Agent, RunArgs, free_port, server_cpu, wait_reconciled, write_fleet};

/// The policy `capstan install` writes, with only the rule a write into a reserved namespace
/// breaks (what the agent's probe asks for).
fn probe_only_policy() -> Value {
    let mut policy = capstan::install::manifests::tenancy(&capstan::install::rbac::rules())
        .into_iter()
        .find(|o| o["kind"] == "ValidatingAdmissionPolicy")
        .expect("the policy");
    let kept: Vec<Value> = policy["spec"]["validations"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| {
            v["messageExpression"]
                .as_str()
                .is_some_and(|m| m.starts_with("'ReservedNamespace: "))
        })
        .cloned()
        .collect();
    assert_eq!(kept.len(), 1, "the reserved-namespace rule");
    policy["spec"]["validations"] = Value::Array(kept);
    policy
}

struct Figures {
    validations: usize,
    cold: Duration,
    server_cpu: f64,
}

async fn cold_apply(n: usize, full: bool) -> Figures {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("fleet");
    let fleet = write_fleet(&repo, n);
    let commit = fleet.commit.clone();
    drop(fleet);
    let cp = ControlPlane::start().await.expect("control plane");
    let kubeconfig = capstan::install::testing::agent_kubeconfig(&cp).await;
    let admin = cp.client();
    let vap = ApiResource {
        group: "admissionregistration.k8s.io".into(),
        version: "v1".into(),
        api_version: "admissionregistration.k8s.io/v1".into(),
        kind: "ValidatingAdmissionPolicy".into(),
        plural: "validatingadmissionpolicies".into(),
    };
    let policies: Api<DynamicObject> = Api::all_with(admin.clone(), &vap);
    if !full {
        let p = probe_only_policy();
        policies
            .patch(
                p["metadata"]["name"].as_str().unwrap(),
                &PatchParams::apply("bench").force(),
                &Patch::Apply(&p),
            )
            .await
            .unwrap();
    }
    capstan::k8s::tenancy::wait_enforced(&admin, Duration::from_secs(60))
        .await
        .unwrap();
    let live = policies.get(capstan::k8s::identity::POLICY).await.unwrap();
    let validations = live.data["spec"]["validations"]
        .as_array()
        .map_or(0, Vec::len);
    let (hook, metrics) = (free_port(), free_port());
    let log = tmp.path().join("agent.log");
    let cpu_before = server_cpu(&cp);
    let started = Instant::now();
    let agent = Agent::run(&RunArgs {
        repo: &repo,
        kubeconfig: &kubeconfig,
        cache: &tmp.path().join("mirror"),
        log: &log,
        hook,
        metrics,
        concurrency: "4",
    });
    wait_reconciled(&log, 0, &commit, n + 1, Duration::from_secs(3600));
    let cold = started.elapsed();
    let server_cpu = server_cpu(&cp) - cpu_before;
    drop(agent);
    Figures {
        validations,
        cold,
        server_cpu,
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let sizes: Vec<usize> = std::env::var("CAPSTAN_BENCH_SIZES")
        .unwrap_or_else(|_| "100,1000".into())
        .split(',')
        .map(|s| s.trim().parse().expect("CAPSTAN_BENCH_SIZES: numbers"))
        .collect();
    println!(
        "tenancy policy cost: cold apply by `capstan run` (concurrency 4), fresh control plane each"
    );
    println!(
        "{:>8}  {:<22} {:>11} {:>10} {:>16}",
        "clusters", "policy", "validations", "cold (s)", "server CPU (s)"
    );
    for n in sizes {
        let mut row = Vec::new();
        for full in [true, false] {
            let f = cold_apply(n, full).await;
            println!(
                "{n:>8}  {:<22} {:>11} {:>10.1} {:>16.1}",
                if full {
                    "capstan install's"
                } else {
                    "probe rule only"
                },
                f.validations,
                f.cold.as_secs_f64(),
                f.server_cpu
            );
            row.push(f);
        }
        let (with, without) = (&row[0], &row[1]);
        println!(
            "{n:>8}  the policy's cost: {:+.1} s cold apply ({:+.0} %), {:+.1} s server CPU ({:+.0} %)",
            with.cold.as_secs_f64() - without.cold.as_secs_f64(),
            100.0 * (with.cold.as_secs_f64() / without.cold.as_secs_f64() - 1.0),
            with.server_cpu - without.server_cpu,
            100.0 * (with.server_cpu / without.server_cpu - 1.0),
        );
    }
}
