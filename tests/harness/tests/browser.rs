//! The browser the dashboard's tests drive, checked on pages whose answer is known: axe-core
//! reports a page with an unlabelled image and form field, and passes the same page fixed. So an
//! empty report on the dashboard means its pages passed, not that nothing ran.

use capstan_harness::browser::Browser;

#[tokio::test]
async fn axe_core_reports_what_is_wrong_and_passes_what_is_right() {
    let shots = tempfile::tempdir().unwrap();
    let mut b = Browser::start(shots.path()).await;
    let page = |body: &str| {
        format!(
            "data:text/html,<!doctype html><html lang=en><head><title>t</title></head><body><main>{body}</main></body></html>"
        )
    };
    b.goto(&page("<img src=x.png><input type=text>")).await;
    let found = b.accessibility().await;
    assert!(
        found.iter().any(|v| v.starts_with("image-alt: critical")),
        "{found:#?}"
    );
    assert!(found.iter().any(|v| v.starts_with("label: ")), "{found:#?}");
    b.goto(&page(
        "<img src=x.png alt=logo><label>Name <input type=text></label>",
    ))
    .await;
    assert_eq!(b.accessibility().await, Vec::<String>::new());
    let shot = b.screenshot("probe").await;
    assert!(shot.is_file());
}
