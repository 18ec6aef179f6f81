//! A TCP proxy that can blackhole: the network partition of a fencing test.
//!
//! Between a replica and the API server. While it forwards, bytes go both ways unchanged (TLS
//! passes through: the API server's certificate names 127.0.0.1, whatever the port). Once
//! [`Blackhole::cut`], every connection open then is dead for good (what each side sends is
//! read and dropped, nothing is answered, nothing is closed: a partition, not a refusal), and
//! connections made during the cut are accepted and treated the same. [`Blackhole::heal`]
//! forwards new connections again, as a partition that heals does; the dead ones stay dead
//! (their state is gone on the far side) and the client must connect again.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The proxy; stops accepting when dropped.
pub struct Blackhole {
    /// The port it listens on (127.0.0.1).
    pub port: u16,
    cut: Arc<AtomicBool>,
    /// Connections accepted.
    accepted: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Blackhole {
    /// Listens on a free loopback port and forwards to `target` (`host:port`).
    pub async fn start(target: String) -> Blackhole {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(AtomicBool::new(false));
        let accepted = Arc::new(AtomicU64::new(0));
        let task = tokio::spawn({
            let (cut, accepted) = (cut.clone(), accepted.clone());
            async move {
                while let Ok((client, _)) = listener.accept().await {
                    accepted.fetch_add(1, Ordering::Relaxed);
                    let dead = Arc::new(AtomicBool::new(cut.load(Ordering::Acquire)));
                    let (cut, target) = (cut.clone(), target.clone());
                    tokio::spawn(async move {
                        let server = if dead.load(Ordering::Acquire) {
                            None
                        } else {
                            TcpStream::connect(&target).await.ok()
                        };
                        let (cr, cw) = client.into_split();
                        match server {
                            Some(server) => {
                                let (sr, sw) = server.into_split();
                                let up = pipe(cr, sw, cut.clone(), dead.clone());
                                let down = pipe(sr, cw, cut, dead);
                                let _ = tokio::join!(up, down);
                            }
                            // Accepted during the cut: swallow, never answer.
                            None => swallow(cr, cw).await,
                        }
                    });
                }
            }
        });
        Blackhole {
            port,
            cut,
            accepted,
            task,
        }
    }

    /// Cuts every connection, open and new.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::Release);
    }

    /// Forwards new connections again.
    pub fn heal(&self) {
        self.cut.store(false, Ordering::Release);
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }
}

impl Drop for Blackhole {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Copies one direction until either side closes; from the cut on, drops what it reads.
async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    cut: Arc<AtomicBool>,
    dead: Arc<AtomicBool>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if cut.load(Ordering::Acquire) {
            dead.store(true, Ordering::Release);
        }
        if dead.load(Ordering::Acquire) {
            continue;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    // A dead connection is never closed towards the client: a partition sends no FIN.
    if dead.load(Ordering::Acquire) {
        std::future::pending::<()>().await;
    }
}

/// Reads and drops everything a connection accepted during the cut sends, keeping it open.
async fn swallow(mut from: tokio::net::tcp::OwnedReadHalf, _to: tokio::net::tcp::OwnedWriteHalf) {
    let mut buf = vec![0u8; 64 * 1024];
    while let Ok(n) = from.read(&mut buf).await {
        if n == 0 {
            break;
        }
    }
    std::future::pending::<()>().await;
}
