//! Status writes carry the resourceVersion the pass read as a precondition, and the fence in front
//! of a replica's client refuses every write once it is shut: a stale writer's status write
//! fails at the API server (409) or never leaves the process, while the leader writing over a
//! record that changed since its watch saw it still succeeds. Checked with the real API server,
//! the outcome read back with a raw client and from the audit log.

use capstan::k8s::Fence;
use capstan::status::{self, ManagedClusterStatus, Phase};

/// The status object of `name` as a raw client reads it: `status.phase` and resourceVersion.
async fn read(client: &kube::Client, name: &str) -> (String, String) {
    let ar = kube::discovery::ApiResource {
        group: "capstan.dev".into(),
        version: "v1alpha1".into(),
        api_version: "capstan.dev/v1alpha1".into(),
        kind: "ManagedCluster".into(),
        plural: "managedclusters".into(),
    };
    let api: kube::Api<kube::api::DynamicObject> =
        kube::Api::namespaced_with(client.clone(), status::NAMESPACE, &ar);
    let o = api.get(name).await.unwrap();
    (
        o.data["status"]["phase"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        o.metadata.resource_version.unwrap(),
    )
}

#[tokio::test]
async fn a_stale_status_write_is_refused_and_the_leaders_goes_over_a_newer_record() {
    let cp = capstan_harness::shared().await;
    let agent = capstan::install::testing::agent_client(cp).await;
    let admin = cp.client();
    let name = "fence-status";
    let st = |phase: Phase, message: &str| ManagedClusterStatus {
        phase: Some(phase),
        message: message.into(),
        last_applied_revision: "r1".into(),
        ..Default::default()
    };
    let _ = status::remove(&admin, name).await;
    let first = status::write(
        &agent,
        name,
        "m-fence",
        "clusters/m-fence",
        &st(Phase::Ready, "one"),
        None,
    )
    .await
    .unwrap()
    .expect("a new record is written");
    assert!(first.resource_version.is_some());

    // Someone else writes the object after the pass read it (an operator, the old leader).
    let patch = serde_json::json!({"metadata": {"labels": {"touched": "yes"}}});
    status::api(&admin)
        .patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .unwrap();
    let (_, newer) = read(&admin, name).await;
    assert_ne!(Some(&newer), first.resource_version.as_ref());

    // A replica whose fence is shut: the write never reaches the API server.
    let mark = cp.audit().mark();
    let fence = Fence::shut();
    let stale = status::write(
        &fence.guard(&agent),
        name,
        "m-fence",
        "clusters/m-fence",
        &st(Phase::Failed, "stale"),
        Some(&first),
    )
    .await
    .expect_err("a fenced write fails");
    assert!(
        format!("{stale:#}").contains("does not hold the leader Lease")
            || std::error::Error::source(&stale)
                .is_some_and(|s| s.to_string().contains("does not hold the leader Lease")),
        "{stale:?}"
    );
    assert_eq!(
        read(&admin, name).await,
        ("Ready".to_string(), newer.clone())
    );

    // The stale record's precondition alone: the API server answers 409 to it. An open fence
    // lets the leader read the object again and write over it once.
    fence.open_until(std::time::Instant::now() + std::time::Duration::from_secs(60));
    let written = status::write(
        &fence.guard(&agent),
        name,
        "m-fence",
        "clusters/m-fence",
        &st(Phase::Progressing, "leader"),
        Some(&first),
    )
    .await
    .unwrap()
    .expect("written");
    let (phase, rv) = read(&admin, name).await;
    assert_eq!(phase, "Progressing");
    assert_eq!(written.resource_version.as_deref(), Some(rv.as_str()));
    cp.audit()
        .sync(&admin, std::time::Duration::from_secs(10))
        .await
        .unwrap();
    let codes: Vec<(String, Option<i32>)> = cp
        .audit()
        .events_since(mark)
        .unwrap()
        .into_iter()
        .filter(|e| {
            e.object_ref.as_ref().and_then(|o| o.name.as_deref()) == Some(name)
                && e.resource() == Some("managedclusters")
                && e.user.username != "system:apiserver"
                && e.user
                    .username
                    .starts_with("system:serviceaccount:capstan-system:")
        })
        .map(|e| (e.verb.clone(), e.response_status.code))
        .collect();
    assert_eq!(
        codes,
        vec![
            ("patch".to_string(), Some(409)),
            ("get".to_string(), Some(200)),
            ("patch".to_string(), Some(200))
        ],
        "the fenced write sent nothing; the leader's stale precondition was refused, then read and written"
    );
    status::remove(&admin, name).await.unwrap();
}
