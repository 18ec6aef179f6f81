//! `capstan dashboard`: the dashboard over the user's own kubeconfig, on their machine, until
//! interrupted.
//!
//! It shows whatever that kubeconfig can read, so it lets in only whoever brings this run's
//! secret ([`crate::dashboard::access::Local`]): printed in its URL, never written on a command
//! line — every local user can read command lines (`/proc/<pid>/cmdline`), so the browser is
//! opened on a file only the user can read, which sends it on to the URL (as Jupyter does). A
//! listener on another address than loopback is warned about loudly: it serves plain HTTP to
//! whoever can reach it and learns the link.

use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;

use anyhow::Context;

use crate::cli::KubeArgs;
use crate::dashboard::access::Local;

/// Runs it on `addr`, opening a browser when `open`.
pub fn run(
    addr: SocketAddr,
    repo: Option<String>,
    open: bool,
    kube: &KubeArgs,
) -> anyhow::Result<ExitCode> {
    super::runtime()?.block_on(async {
        let conn = crate::k8s::connect(kube.kubeconfig.as_deref(), kube.context.as_deref()).await?;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("listening on {addr}"))?;
        let bound = listener.local_addr()?;
        let (local, token) = Local::new(bound).context("making the dashboard's secret")?;
        if !bound.ip().is_loopback() {
            eprintln!("{}", exposed(bound));
        }
        let url = format!("http://{}/?token={token}", shown(bound));
        println!("capstan dashboard for {} at {url}", conn.source);
        let _ = std::io::stdout().flush();
        let _opener = if open { open_browser(&url) } else { None };
        crate::dashboard::routes::serve_local(&conn.client, repo, listener, local, async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .context("serving the dashboard")?;
        anyhow::Ok(ExitCode::SUCCESS)
    })
}

/// The address a browser on this machine reaches `bound` at.
fn shown(bound: SocketAddr) -> String {
    if bound.ip().is_unspecified() {
        format!("localhost:{}", bound.port())
    } else {
        bound.to_string()
    }
}

/// The warning for a listener that is not on loopback.
fn exposed(bound: SocketAddr) -> String {
    format!(
        "WARNING: capstan dashboard listens on {bound}, not on loopback. Anyone who can reach \
         that address and learns the link below reads everything your kubeconfig can read, \
         and the link, the cookie and the pages cross the network as plain HTTP. Use the \
         default 127.0.0.1 unless you mean this."
    )
}

/// Opens `url` in the user's browser without its secret on a command line: writes a page only
/// the user can read that sends the browser on to `url`, and opens that (`$BROWSER` names the
/// browser; else `xdg-open`, where there is a display). The page's directory, kept while the
/// dashboard runs; none when no browser was opened.
fn open_browser(url: &str) -> Option<tempfile::TempDir> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let graphical = ["DISPLAY", "WAYLAND_DISPLAY"]
        .iter()
        .any(|v| std::env::var_os(v).is_some());
    let program = std::env::var_os("BROWSER")
        .filter(|b| !b.is_empty())
        .or_else(|| graphical.then(|| "xdg-open".into()))?;
    // A directory of its own, 0700 (tempfile's default follows the umask), and the page in it
    // 0600, created new (no one's link followed).
    let dir = tempfile::Builder::new()
        .prefix("capstan-dashboard-")
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir()
        .ok()?;
    let page = dir.path().join("open.html");
    let escaped = url
        .replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;");
    let html = format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"0; url={escaped}\"><title>capstan dashboard</title></head>\
         <body><a href=\"{escaped}\">Open the capstan dashboard</a></body></html>\n"
    );
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&page)
        .ok()?;
    f.write_all(html.as_bytes()).ok()?;
    drop(f);
    let spawned = std::process::Command::new(&program)
        .arg(&page)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    if let Err(e) = spawned {
        eprintln!(
            "could not open a browser ({}): {e}; open the link above",
            program.to_string_lossy()
        );
        return None;
    }
    Some(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_printed_address_is_one_a_local_browser_reaches() {
        assert_eq!(shown("127.0.0.1:8480".parse().unwrap()), "127.0.0.1:8480");
        assert_eq!(shown("[::1]:8480".parse().unwrap()), "[::1]:8480");
        assert_eq!(shown("0.0.0.0:8480".parse().unwrap()), "localhost:8480");
        assert!(exposed("0.0.0.0:8480".parse().unwrap()).starts_with("WARNING"));
    }
}
