//! A minimal HTTP/1.1 server that runs `git http-backend` as a CGI program (smart HTTP), or serves
//! fixed documents ([`HttpGitServer::start_static_tls`]), and logs every request so tests can
//! assert what the client asked for. Plain http:// on loopback, or
//! https:// with a certificate for `localhost` from a CA of the test's own ([`HttpGitServer::start_tls`]).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// One served request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Logged {
    pub method: String,
    pub path: String,
    pub query: String,
    /// For protocol v2 POSTs: the `command=` of the request (`ls-refs`, `fetch`).
    pub command: Option<String>,
    pub status: u16,
}

impl Logged {
    /// Whether this request asked for a pack.
    pub fn is_fetch(&self) -> bool {
        self.method == "POST" && self.command.as_deref() != Some("ls-refs")
    }
}

/// Documents served by path, for a static server.
pub type Documents = Arc<Mutex<HashMap<String, Vec<u8>>>>;

/// The server; stops on drop.
pub struct HttpGitServer {
    pub port: u16,
    tls: bool,
    files: Option<Documents>,
    stop: Arc<AtomicBool>,
    log: Arc<Mutex<Vec<Logged>>>,
    thread: Option<JoinHandle<()>>,
}

impl HttpGitServer {
    /// Serves the repositories below `root` on a free loopback port (protocol v2 when asked).
    pub fn start(root: &Path) -> HttpGitServer {
        Self::start_with(root, true, None, None)
    }

    /// Serves https:// with this certificate chain and key (PEM).
    pub fn start_tls(root: &Path, cert_pem: &str, key_pem: &str) -> HttpGitServer {
        Self::start_tls_with(root, cert_pem, key_pem, None)
    }

    fn start_tls_with(
        root: &Path,
        cert_pem: &str,
        key_pem: &str,
        files: Option<Documents>,
    ) -> HttpGitServer {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        capstan_harness::install_crypto_provider();
        let certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(cert_pem.as_bytes())
                .collect::<Result<_, _>>()
                .expect("certificate PEM");
        let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).expect("key PEM");
        let config = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .expect("server config");
        Self::start_with(root, true, Some(Arc::new(config)), files)
    }

    /// Serves `files` (path → body; anything else is 404) over https with this certificate.
    pub fn start_static_tls(
        files: HashMap<String, Vec<u8>>,
        cert_pem: &str,
        key_pem: &str,
    ) -> HttpGitServer {
        let files = Arc::new(Mutex::new(files));
        Self::start_tls_with(Path::new("/nonexistent"), cert_pem, key_pem, Some(files))
    }

    /// Replaces (or adds) a document of a static server.
    pub fn set_file(&self, path: &str, body: &[u8]) {
        self.files
            .as_ref()
            .expect("a static server")
            .lock()
            .unwrap()
            .insert(path.to_string(), body.to_vec());
    }

    /// Like [`start`](Self::start), but drops the client's `Git-Protocol` header, so the server
    /// speaks protocol v0 like an old or minimal Git host.
    pub fn start_v0(root: &Path) -> HttpGitServer {
        Self::start_with(root, false, None, None)
    }

    fn start_with(
        root: &Path,
        v2: bool,
        tls: Option<Arc<rustls::ServerConfig>>,
        files: Option<Documents>,
    ) -> HttpGitServer {
        let is_tls = tls.is_some();
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let log = Arc::new(Mutex::new(Vec::new()));
        let thread = {
            let (stop, log, root) = (stop.clone(), log.clone(), root.to_path_buf());
            let files = files.clone();
            std::thread::spawn(move || {
                for conn in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(conn) = conn else { continue };
                    let (log, root, tls) = (log.clone(), root.clone(), tls.clone());
                    let files = files.clone();
                    std::thread::spawn(move || {
                        let served = match tls {
                            None => serve(conn, &root, &log, v2, files.as_ref())
                                .and_then(|c| c.shutdown(std::net::Shutdown::Both)),
                            Some(config) => {
                                let session = rustls::ServerConnection::new(config)
                                    .map_err(std::io::Error::other);
                                session
                                    .and_then(|s| {
                                        serve(
                                            rustls::StreamOwned::new(s, conn),
                                            &root,
                                            &log,
                                            v2,
                                            files.as_ref(),
                                        )
                                    })
                                    .map(|mut s| {
                                        s.conn.send_close_notify();
                                        let _ = s.flush();
                                        let _ = s.sock.shutdown(std::net::Shutdown::Both);
                                    })
                            }
                        };
                        if let Err(e) = served {
                            eprintln!("http test server: {e}");
                        }
                    });
                }
            })
        };
        HttpGitServer {
            port,
            tls: is_tls,
            files,
            stop,
            log,
            thread: Some(thread),
        }
    }

    pub fn url(&self, name: &str) -> String {
        if self.tls {
            format!("https://localhost:{}/{name}", self.port)
        } else {
            format!("http://127.0.0.1:{}/{name}", self.port)
        }
    }

    /// Everything served so far.
    pub fn log(&self) -> Vec<Logged> {
        self.log.lock().unwrap().clone()
    }

    /// Forgets the log.
    pub fn clear_log(&self) {
        self.log.lock().unwrap().clear();
    }
}

impl Drop for HttpGitServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Serves one request on `conn` and hands the connection back for closing.
fn serve<S: Read + Write>(
    conn: S,
    root: &PathBuf,
    log: &Mutex<Vec<Logged>>,
    v2: bool,
    files: Option<&Documents>,
) -> std::io::Result<S> {
    let mut reader = BufReader::new(conn);
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Ok(reader.into_inner());
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_string();
    let target = parts.next().unwrap_or_default().to_string();
    let mut headers: HashMap<String, String> = HashMap::new();
    loop {
        let mut h = String::new();
        reader.read_line(&mut h)?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let body = if let Some(len) = headers.get("content-length") {
        let mut b = vec![0; len.parse().unwrap_or(0)];
        reader.read_exact(&mut b)?;
        b
    } else if headers
        .get("transfer-encoding")
        .is_some_and(|t| t.eq_ignore_ascii_case("chunked"))
    {
        read_chunked(&mut reader)?
    } else {
        Vec::new()
    };
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    let command = find_command(&body);
    if let Some(files) = files {
        let doc = files.lock().unwrap().get(path).cloned();
        let status = if doc.is_some() { 200 } else { 404 };
        log.lock().unwrap().push(Logged {
            method,
            path: path.to_string(),
            query: query.to_string(),
            command,
            status,
        });
        let conn = reader.get_mut();
        let body = doc.unwrap_or_default();
        write!(
            conn,
            "HTTP/1.1 {status} {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            if status == 200 { "OK" } else { "Not Found" },
            body.len()
        )?;
        conn.write_all(&body)?;
        conn.flush()?;
        return Ok(reader.into_inner());
    }

    let mut cmd = Command::new("git");
    cmd.arg("http-backend")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_PROJECT_ROOT", root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("GATEWAY_INTERFACE", "CGI/1.1")
        .env("SERVER_PROTOCOL", "HTTP/1.1")
        .env("REMOTE_ADDR", "127.0.0.1")
        .env("REQUEST_METHOD", &method)
        .env("PATH_INFO", path)
        .env("QUERY_STRING", query)
        .env("CONTENT_LENGTH", body.len().to_string())
        .env(
            "CONTENT_TYPE",
            headers
                .get("content-type")
                .map(String::as_str)
                .unwrap_or(""),
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    for (k, v) in &headers {
        if k != "content-length" && k != "content-type" && (v2 || k != "git-protocol") {
            cmd.env(
                format!("HTTP_{}", k.to_ascii_uppercase().replace('-', "_")),
                v,
            );
        }
    }
    let mut child = cmd.spawn()?;
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&body);
    });
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut status = 200u16;
    let mut status_line = "200 OK".to_string();
    let mut response_headers = Vec::new();
    loop {
        let mut h = String::new();
        if out.read_line(&mut h)? == 0 {
            break;
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        match h.split_once(':') {
            Some((k, v)) if k.eq_ignore_ascii_case("status") => {
                status_line = v.trim().to_string();
                status = status_line
                    .split_whitespace()
                    .next()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(500);
            }
            _ => response_headers.push(h.to_string()),
        }
    }
    log.lock().unwrap().push(Logged {
        method,
        path: path.to_string(),
        query: query.to_string(),
        command,
        status,
    });
    let conn = reader.get_mut();
    write!(conn, "HTTP/1.1 {status_line}\r\n")?;
    for h in response_headers {
        write!(conn, "{h}\r\n")?;
    }
    write!(conn, "Connection: close\r\n\r\n")?;
    std::io::copy(&mut out, conn)?;
    conn.flush()?;
    let _ = writer.join();
    let _ = child.wait();
    Ok(reader.into_inner())
}

fn read_chunked(reader: &mut impl BufRead) -> std::io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let mut size = String::new();
        reader.read_line(&mut size)?;
        let size =
            usize::from_str_radix(size.trim().split(';').next().unwrap_or("0"), 16).unwrap_or(0);
        if size == 0 {
            // Trailers until the empty line.
            loop {
                let mut t = String::new();
                if reader.read_line(&mut t)? == 0 || t.trim().is_empty() {
                    break;
                }
            }
            return Ok(body);
        }
        let start = body.len();
        body.resize(start + size, 0);
        reader.read_exact(&mut body[start..])?;
        let mut crlf = [0u8; 2];
        reader.read_exact(&mut crlf)?;
    }
}

/// The `command=<name>` of a protocol v2 request body (pkt-lines, uncompressed).
fn find_command(body: &[u8]) -> Option<String> {
    let at = body.windows(8).position(|w| w == b"command=")?;
    let rest = &body[at + 8..];
    let end = rest
        .iter()
        .position(|b| *b == b'\n' || *b == 0 || !b.is_ascii_graphic())
        .unwrap_or(rest.len());
    Some(String::from_utf8_lossy(&rest[..end]).into_owned())
}
