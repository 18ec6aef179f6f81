//! Headless Chromium (Debian's `chromium-headless-shell`) driven over the Chrome DevTools
//! Protocol: the dashboard's pages loaded, read and screenshotted the way a user's browser sees
//! them (scripts run, server-sent events followed), and checked for accessibility with axe-core
//! (from npm, [`axe_core`]).
//!
//! Only what the tests use: one page (a target attached in flat mode), extra request headers,
//! navigation, evaluating a script (awaiting its promise, so a test waits in the page for an
//! element or a change instead of sleeping), PNG screenshots and an axe-core run. Shared by the
//! agent's browser tests (against the API server) and the dashboard's test on the real Cluster
//! API controllers.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use rustix::process::{Pid, Signal, kill_process_group};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// The browser binary.
pub const CHROMIUM: &str = "chromium-headless-shell";

/// A browser with one page; killed when dropped, with every process it started (renderers,
/// zygote: its own process group).
pub struct Browser {
    _child: Group,
    ws: Socket,
    session: String,
    next: u64,
    _profile: tempfile::TempDir,
    /// Where screenshots go.
    pub shots: PathBuf,
}

impl Browser {
    /// Starts the browser (a phone-sized window when `mobile`) and opens a blank page.
    pub async fn start(shots: &Path) -> Browser {
        let profile = tempfile::tempdir().unwrap();
        let mut cmd = Command::new(CHROMIUM);
        cmd.args([
            "--remote-debugging-port=0",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--window-size=1280,900",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("about:blank")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
        cmd.process_group(0).stdin(Stdio::null());
        let mut child = Group(cmd.spawn().unwrap_or_else(|e| {
            panic!("cannot start {CHROMIUM} (Debian package chromium-headless-shell): {e}")
        }));
        // It says where its DevTools listen on stderr; the rest of stderr is drained.
        let stderr = child.0.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(url) = line.split("DevTools listening on ").nth(1)
                    && let Some(tx) = tx.take()
                {
                    let _ = tx.send(url.trim().to_string());
                }
            }
        });
        let url = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("chromium announces its DevTools endpoint");
        let (ws, _) = tokio_tungstenite::connect_async(url.as_str())
            .await
            .unwrap();
        std::fs::create_dir_all(shots).unwrap();
        let mut b = Browser {
            _child: child,
            ws,
            session: String::new(),
            next: 0,
            _profile: profile,
            shots: shots.to_path_buf(),
        };
        let target = b
            .call(None, "Target.createTarget", json!({"url": "about:blank"}))
            .await["targetId"]
            .as_str()
            .unwrap()
            .to_string();
        b.session = b
            .call(
                None,
                "Target.attachToTarget",
                json!({"targetId": target, "flatten": true}),
            )
            .await["sessionId"]
            .as_str()
            .unwrap()
            .to_string();
        b.page("Page.enable", json!({})).await;
        b.page("Network.enable", json!({})).await;
        b
    }

    /// One command; its result (events in between are skipped).
    async fn call(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        self.try_call(session, method, params)
            .await
            .unwrap_or_else(|e| panic!("{method}: {e}"))
    }

    /// One command; its result or the browser's error.
    async fn try_call(
        &mut self,
        session: Option<&str>,
        method: &str,
        params: Value,
    ) -> Result<Value, Value> {
        self.next += 1;
        let id = self.next;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            msg["sessionId"] = s.into();
        }
        self.ws
            .send(Message::Text(msg.to_string().into()))
            .await
            .unwrap();
        loop {
            let v = self.receive(method).await;
            if v["id"].as_u64() == Some(id) {
                return match v.get("error") {
                    Some(e) => Err(e.clone()),
                    None => Ok(v["result"].clone()),
                };
            }
        }
    }

    /// The next message from the browser.
    async fn receive(&mut self, waiting_for: &str) -> Value {
        loop {
            let m = tokio::time::timeout(Duration::from_secs(120), self.ws.next())
                .await
                .unwrap_or_else(|_| {
                    panic!("nothing from the browser while waiting for {waiting_for}")
                })
                .expect("the DevTools connection stays open")
                .unwrap();
            if let Message::Text(t) = m {
                return serde_json::from_str(&t).unwrap();
            }
        }
    }

    async fn page(&mut self, method: &str, params: Value) -> Value {
        let s = self.session.clone();
        self.call(Some(&s), method, params).await
    }

    /// Headers sent with every request of the page from now on.
    pub async fn headers(&mut self, headers: HashMap<&str, String>) {
        self.page("Network.setExtraHTTPHeaders", json!({"headers": headers}))
            .await;
    }

    /// Loads `url` and waits for its `load` event.
    pub async fn goto(&mut self, url: &str) {
        self.page("Page.navigate", json!({"url": url})).await;
        loop {
            let v = self.receive("Page.loadEventFired").await;
            if v["method"] == "Page.loadEventFired" {
                return;
            }
        }
    }

    /// The value of a script (a promise is awaited).
    pub async fn eval(&mut self, script: &str) -> Value {
        self.try_eval(script)
            .await
            .unwrap_or_else(|e| panic!("{script}: {e}"))
    }

    /// The value of a script, or why not (the page navigated away while it ran).
    async fn try_eval(&mut self, script: &str) -> Result<Value, Value> {
        let s = self.session.clone();
        let r = self
            .try_call(
                Some(&s),
                "Runtime.evaluate",
                json!({"expression": script, "awaitPromise": true, "returnByValue": true}),
            )
            .await?;
        match r.get("exceptionDetails") {
            Some(e) => Err(e.clone()),
            None => Ok(r["result"]["value"].clone()),
        }
    }

    /// Waits in the page (re-checking on every DOM change, up to `secs`) until `condition`, a
    /// JavaScript expression, is true; false if it never was. A navigation meanwhile (a form
    /// sent, a redirect) starts the wait again on the new page.
    pub async fn until(&mut self, condition: &str, secs: u64) -> bool {
        let deadline = std::time::Instant::now() + Duration::from_secs(secs);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let script = format!(
                "new Promise(resolve => {{
                    const check = () => {{ try {{ return !!({condition}); }} catch (e) {{ return false; }} }};
                    if (check()) return resolve(true);
                    const o = new MutationObserver(() => {{ if (check()) {{ o.disconnect(); resolve(true); }} }});
                    o.observe(document, {{subtree: true, childList: true, attributes: true, characterData: true}});
                    setTimeout(() => {{ o.disconnect(); resolve(check()); }}, {ms});
                }})",
                ms = left.as_millis()
            );
            match self.try_eval(&script).await {
                Ok(v) => return v == Value::Bool(true),
                Err(_) if !left.is_zero() => {
                    // Navigated: wait for the new page's load before looking again.
                    let _ = tokio::time::timeout(left, async {
                        loop {
                            if self.receive("Page.loadEventFired").await["method"]
                                == "Page.loadEventFired"
                            {
                                break;
                            }
                        }
                    })
                    .await;
                }
                Err(_) => return false,
            }
        }
    }

    /// The page's text.
    pub async fn text(&mut self) -> String {
        self.eval("document.body.innerText")
            .await
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// The cookies the browser would send to `url`, as the DevTools protocol reports them
    /// (`name`, `value`, `path`, `expires`, `httpOnly`, `secure`, `sameSite`, `session`, …):
    /// what a page's scripts cannot see.
    pub async fn cookies(&mut self, url: &str) -> Vec<Value> {
        self.page("Network.getCookies", json!({"urls": [url]}))
            .await["cookies"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// A PNG of the page as it is now, kept as `<shots>/<name>.png`; its path.
    pub async fn screenshot(&mut self, name: &str) -> PathBuf {
        let r = self
            .page("Page.captureScreenshot", json!({"format": "png"}))
            .await;
        let png = base64::Engine::decode(
            &base64::engine::general_purpose::STANDARD,
            r["data"].as_str().unwrap(),
        )
        .unwrap();
        assert!(png.starts_with(b"\x89PNG"), "a PNG");
        let path = self.shots.join(format!("{name}.png"));
        std::fs::write(&path, png).unwrap();
        path
    }

    /// A phone's viewport from now on.
    pub async fn phone(&mut self) {
        self.page(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": 390, "height": 844, "deviceScaleFactor": 2, "mobile": true}),
        )
        .await;
    }

    /// Presses Tab `n` times; the focused element's text then.
    pub async fn tab(&mut self, n: usize) -> String {
        for _ in 0..n {
            for kind in ["keyDown", "keyUp"] {
                self.page(
                    "Input.dispatchKeyEvent",
                    json!({"type": kind, "key": "Tab", "code": "Tab", "windowsVirtualKeyCode": 9}),
                )
                .await;
            }
        }
        self.eval("document.activeElement ? document.activeElement.textContent.trim() : ''")
            .await
            .as_str()
            .unwrap_or_default()
            .to_string()
    }
}

/// The browser's process group: every process it started (zygote, renderers) is killed with it.
struct Group(Child);

impl Drop for Group {
    fn drop(&mut self) {
        if let Some(pid) = i32::try_from(self.0.id()).ok().and_then(Pid::from_raw) {
            let _ = kill_process_group(pid, Signal::KILL);
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Browser {
    /// Runs axe-core in the page as it is now (WCAG 2 A and AA rules); the violations of
    /// serious or critical impact, each as `rule: impact: the elements' selectors`.
    pub async fn accessibility(&mut self) -> Vec<String> {
        let axe = axe_core();
        self.eval(&axe).await;
        let found = self
            .eval(
                "axe.run(document, {runOnly: {type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa']}})
                    .then(r => ({
                        rules: r.passes.length + r.violations.length + r.incomplete.length,
                        serious: r.violations
                            .filter(v => v.impact === 'serious' || v.impact === 'critical')
                            .map(v => v.id + ': ' + v.impact + ': ' + v.nodes.map(n => n.target.join(' ')).join(', ')),
                    }))",
            )
            .await;
        // A run that checked nothing proves nothing.
        assert!(
            found["rules"].as_u64().unwrap_or(0) > 0,
            "axe-core checked no rule: {found}"
        );
        found["serious"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// axe-core's script, at the version `tests/control-plane/versions.env` pins
/// (`AXE_CORE_VERSION`), installed from npm into `~/.cache/capstan/axe-core/<version>` on first
/// use and read from there afterwards.
pub fn axe_core() -> String {
    let version = crate::versions::versions_env()
        .get("AXE_CORE_VERSION")
        .cloned()
        .expect("AXE_CORE_VERSION in tests/control-plane/versions.env");
    let dir = crate::binaries::cache_root()
        .expect("a cache directory")
        .join("axe-core")
        .join(&version);
    let script = dir.join("node_modules/axe-core/axe.min.js");
    if !script.is_file() {
        // Installed beside, then renamed into place: tests running at once never see half of it.
        let tmp = dir.with_extension(format!("tmp-{}", std::process::id()));
        std::fs::create_dir_all(&tmp).unwrap();
        let out = Command::new("npm")
            .args([
                "install",
                "--no-save",
                "--no-audit",
                "--no-fund",
                "--prefix",
            ])
            .arg(&tmp)
            .arg(format!("axe-core@{version}"))
            .output()
            .unwrap_or_else(|e| panic!("npm (Debian package npm) is needed for axe-core: {e}"));
        assert!(
            out.status.success(),
            "npm install axe-core@{version}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        if std::fs::rename(&tmp, &dir).is_err() {
            let _ = std::fs::remove_dir_all(&tmp);
        }
        assert!(script.is_file(), "{} after npm install", script.display());
    }
    std::fs::read_to_string(&script).unwrap()
}
