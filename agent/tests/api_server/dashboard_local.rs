//! `capstan dashboard` on the user's machine, the real binary against the real API server, in
//! headless Chromium: it prints a link with its per-run secret and opens the browser on a file
//! only the user can read (never the secret on a command line, which every local user can
//! read); the browser follows it, the secret is exchanged for a session cookie and leaves the
//! address bar, the fleet shows. A browser without the link, and a request for another `Host`
//! (DNS rebinding), are refused. Screenshots under `$CARGO_TARGET_DIR/dashboard-screenshots/`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use capstan_harness::browser::Browser;

use crate::source_support::agent::Running;

/// `GET /` of `port` with `Host: host` and more headers: the status code and the answer.
fn get_with_host(port: u16, host: &str, more: &str) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "GET / HTTP/1.1\r\nHost: {host}\r\n{more}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let code = out
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, out)
}

#[tokio::test]
async fn capstan_dashboard_lets_in_the_browser_that_followed_its_link() {
    let cp = capstan_harness::shared().await;
    let tmp = tempfile::tempdir().unwrap();
    // The browser `capstan dashboard` opens ($BROWSER): it writes down what it was given.
    let opened = tmp.path().join("opened");
    let browser = tmp.path().join("browser.sh");
    std::fs::write(
        &browser,
        format!(
            "#!/bin/sh\nprintf '%s' \"$*\" > {0}.tmp && mv {0}.tmp {0}\n",
            opened.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&browser, std::fs::Permissions::from_mode(0o755)).unwrap();
    let log = tmp.path().join("dashboard.log");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(["dashboard", "--addr", "127.0.0.1:0", "--kubeconfig"])
        .arg(cp.kubeconfig_path())
        .env("BROWSER", &browser)
        .env_remove("DISPLAY")
        .env_remove("WAYLAND_DISPLAY")
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let _dashboard = Running(child);
    let logs = || std::fs::read_to_string(&log).unwrap_or_default();
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    let url = line
        .trim()
        .rsplit(" at ")
        .next()
        .unwrap_or_default()
        .to_string();
    let (base, token) = url
        .split_once("/?token=")
        .unwrap_or_else(|| panic!("a link with its token: {line:?}\n{}", logs()));
    assert_eq!(token.len(), 64, "256 random bits: {token}");
    assert!(base.starts_with("http://127.0.0.1:"), "{base}");
    let port: u16 = base.rsplit(':').next().unwrap().parse().unwrap();
    assert!(
        !logs().contains("WARNING"),
        "no warning on loopback: {}",
        logs()
    );

    // What the browser was given: a page only this user can read, not the link itself.
    let mut given = String::new();
    for _ in 0..600 {
        if let Ok(g) = std::fs::read_to_string(&opened) {
            given = g;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!given.is_empty(), "the browser was opened: {}", logs());
    assert!(
        !given.contains(token),
        "the secret on a command line: {given}"
    );
    let page = std::path::PathBuf::from(&given);
    let mode = std::fs::metadata(&page).unwrap().permissions().mode();
    assert_eq!(mode & 0o077, 0, "only the user reads {given}: {mode:o}");
    let dir_mode = std::fs::metadata(page.parent().unwrap())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(dir_mode & 0o077, 0, "{dir_mode:o}");
    assert!(std::fs::read_to_string(&page).unwrap().contains(token));

    // Without the link: refused. For another Host (DNS rebinding), even with it: refused.
    let host = format!("127.0.0.1:{port}");
    let (code, answer) = get_with_host(port, &host, "");
    assert_eq!(code, 401, "{answer}");
    let bearer = format!("Authorization: Bearer {token}\r\n");
    assert_eq!(get_with_host(port, &host, &bearer).0, 200);
    let rebound = format!("rebound.example:{port}");
    assert_eq!(get_with_host(port, &rebound, &bearer).0, 403);

    // The browser follows what it was given: the secret is exchanged for a cookie and leaves
    // the address, the fleet shows.
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"));
    let shots = target.join("dashboard-screenshots");
    let mut b = Browser::start(&shots).await;
    b.goto(&format!("file://{given}")).await;
    let home = format!("{base}/");
    let arrived = format!(
        "location.href === {} && document.querySelector('h1') && document.querySelector('h1').textContent === 'Fleet'",
        serde_json::json!(home)
    );
    assert!(
        b.until(&arrived, 60).await,
        "{}\n{}\n{}",
        b.eval("location.href").await,
        b.text().await,
        logs()
    );
    b.screenshot("local-fleet").await;
    let cookies = b.cookies(&home).await;
    assert_eq!(cookies.len(), 1, "{cookies:#?}");
    let c = &cookies[0];
    assert_eq!(c["name"], format!("capstan_local_{port}"));
    assert_eq!(c["httpOnly"], true);
    assert_eq!(c["sameSite"], "Strict");
    assert_eq!(c["path"], "/");
    assert_eq!(c["secure"], false);
    let id = c["value"].as_str().unwrap();
    assert_ne!(id, token, "the cookie holds a session, not the secret");
    assert_eq!(b.eval("document.cookie").await, serde_json::json!(""));
    // The page stays reachable by the cookie alone; a reload keeps it.
    b.goto(&format!("{base}/waves")).await;
    assert!(
        b.until(
            "document.querySelector('h1') && document.querySelector('h1').textContent === 'Waves'",
            30
        )
        .await,
        "{}",
        b.text().await
    );

    // Another browser, without the link: the locked page.
    let mut other = Browser::start(&shots).await;
    other.goto(&home).await;
    assert!(
        other
            .until(
                "document.body.innerText.includes('Open the printed link')",
                30
            )
            .await,
        "{}",
        other.text().await
    );
    other.screenshot("local-locked").await;
    let serious = other.accessibility().await;
    assert!(
        serious.is_empty(),
        "axe-core on the locked page: {serious:#?}"
    );
}
