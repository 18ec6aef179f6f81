//! Release documents over https: what a fleet config's `release.manifest` names, fetched,
//! checked and cached for the layout.
//!
//! ```text
//!   layout::load_fetched(tree, fetched) ──▶ Fleet { missing_documents }
//!        ▲                                          │ https GET (or the disk cache)
//!        └──────────── fetched.docs ◀───────────────┘   at most MAX_ROUNDS rounds
//! ```
//!
//! The layout stays pure: it says which documents it needs (the manifest, then the Bundles of
//! the releases the fleet uses, then their EKS-D releases) and checks them against the pins of
//! the fleet config; this module only moves bytes. Documents are cached on disk by URL
//! (`<cache>/release-documents/<sha256 of the URL>`) and in memory for the life of the agent, so
//! a restart or an unreachable server does not stop a fleet whose documents were fetched once. A
//! cached document that no longer matches its pin (the pin was updated) is fetched again.
//!
//! Blocking (reqwest's blocking client, like the Git source): the daemon calls
//! [`ReleaseFetcher::fetch`] inside `spawn_blocking`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use capstan_layout::{Fetched, Fleet, RenderCache, Tree, load_fetched};
use capstan_templates::release::{Location, sha256_hex};

/// Rounds of fetching: the manifest, the Bundles, the EKS-D releases.
pub const MAX_ROUNDS: usize = 3;
/// The largest document fetched (published Bundles manifests are a few hundred KiB).
pub const MAX_DOCUMENT: u64 = 16 * 1024 * 1024;
/// Environment variable naming a PEM file of extra trusted CAs (besides `--ca-file`).
pub const CA_FILE_ENV: &str = "CAPSTAN_CA_FILE";

/// Why the fetcher could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ReleaseFetchError {
    /// The CA file is unreadable or holds no certificate.
    #[error("CA file {path}: {message}")]
    CaFile {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The HTTP client could not be built.
    #[error("building the https client: {0}")]
    Client(#[source] reqwest::Error),
}

/// Fetches and caches the release documents fleets ask for.
pub struct ReleaseFetcher {
    cache_dir: PathBuf,
    client: reqwest::blocking::Client,
    /// What the layout reads.
    pub fetched: Fetched,
    /// Requests made over the network (tests count them).
    pub requests: usize,
}

impl ReleaseFetcher {
    /// A fetcher caching under `cache_dir/release-documents`, trusting the system's roots and
    /// the certificates of `ca_file` (or of `$CAPSTAN_CA_FILE`). Must not be called on a tokio
    /// runtime thread (reqwest's blocking client).
    pub fn new(cache_dir: &Path, ca_file: Option<&Path>) -> Result<Self, ReleaseFetchError> {
        let env_ca = std::env::var_os(CA_FILE_ENV).map(PathBuf::from);
        let mut builder = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(60))
            .connect_timeout(Duration::from_secs(10))
            .user_agent(concat!("capstan/", env!("CARGO_PKG_VERSION")))
            .https_only(true);
        for path in ca_file.map(Path::to_path_buf).into_iter().chain(env_ca) {
            let err = |message: String| ReleaseFetchError::CaFile {
                path: path.clone(),
                message,
            };
            let pem = std::fs::read(&path).map_err(|e| err(e.to_string()))?;
            let certs =
                reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| err(e.to_string()))?;
            if certs.is_empty() {
                return Err(err("holds no PEM certificate".into()));
            }
            for c in certs {
                builder = builder.add_root_certificate(c);
            }
        }
        Ok(ReleaseFetcher {
            cache_dir: cache_dir.join("release-documents"),
            client: builder.build().map_err(ReleaseFetchError::Client)?,
            fetched: Fetched::default(),
            requests: 0,
        })
    }

    /// The default cache: `$CAPSTAN_CACHE_DIR`, else `~/.cache/capstan`.
    pub fn default_cache_dir() -> PathBuf {
        if let Some(d) = std::env::var_os("CAPSTAN_CACHE_DIR").filter(|d| !d.is_empty()) {
            return PathBuf::from(d);
        }
        let home = std::env::var_os("HOME").unwrap_or_else(|| "/tmp".into());
        PathBuf::from(home).join(".cache/capstan")
    }

    /// The documents to fetch before the next load of `fleet`, with their pins: what it
    /// misses, and what it holds that no longer matches its pin (dropped from memory here).
    pub fn wanted(&mut self, fleet: &Fleet) -> Vec<(Location, Option<String>)> {
        let pins: BTreeMap<&Location, &String> = fleet
            .configs
            .values()
            .filter_map(|c| c.release.as_ref())
            .flat_map(|r| r.pins.iter())
            .collect();
        let mut out: Vec<(Location, Option<String>)> = fleet
            .missing_documents
            .iter()
            .map(|l| (l.clone(), pins.get(l).map(|p| (*p).clone())))
            .collect();
        for (loc, pin) in &pins {
            if let Some(text) = self.fetched.docs.get(*loc)
                && sha256_hex(text.as_bytes()) != **pin
            {
                self.fetched.docs.remove(*loc);
                out.push(((*loc).clone(), Some((*pin).clone())));
            }
        }
        out
    }

    /// Fetches documents (from the disk cache when it holds a copy that fits the pin).
    pub fn fetch(&mut self, wanted: Vec<(Location, Option<String>)>) {
        for (loc, pin) in wanted {
            match self.get(&loc, pin.as_deref()) {
                Ok(text) => {
                    self.fetched.failures.remove(&loc);
                    self.fetched.docs.insert(loc, text);
                }
                Err(e) => {
                    self.fetched.failures.insert(loc, e);
                }
            }
        }
    }

    /// Loads the fleet of `tree`, fetching the release documents it asks for. Blocking.
    pub fn load(&mut self, tree: &Tree, renders: &mut RenderCache) -> Fleet {
        // A failure of an earlier pass is retried.
        self.fetched.failures.clear();
        let mut fleet = load_fetched(tree, &self.fetched, renders);
        for _ in 0..MAX_ROUNDS {
            let wanted = self.wanted(&fleet);
            if wanted.is_empty() {
                break;
            }
            self.fetch(wanted);
            fleet = load_fetched(tree, &self.fetched, renders);
        }
        fleet
    }

    fn cache_path(&self, loc: &Location) -> PathBuf {
        self.cache_dir.join(sha256_hex(loc.as_str().as_bytes()))
    }

    fn get(&mut self, loc: &Location, pin: Option<&str>) -> Result<String, String> {
        let path = self.cache_path(loc);
        if let Ok(text) = std::fs::read_to_string(&path)
            && pin.is_none_or(|p| sha256_hex(text.as_bytes()) == p)
        {
            return Ok(text);
        }
        self.requests += 1;
        let resp = self
            .client
            .get(loc.as_str())
            .send()
            .map_err(|e| super::describe(&e))?;
        let status = resp.status();
        if !status.is_success() {
            return Err(format!("HTTP {status}"));
        }
        if resp.content_length().is_some_and(|n| n > MAX_DOCUMENT) {
            return Err(format!("larger than {MAX_DOCUMENT} bytes"));
        }
        let bytes = resp.bytes().map_err(|e| super::describe(&e))?;
        if bytes.len() as u64 > MAX_DOCUMENT {
            return Err(format!("larger than {MAX_DOCUMENT} bytes"));
        }
        let text = String::from_utf8(bytes.to_vec()).map_err(|_| "not UTF-8 text".to_string())?;
        // Cache what fits its pin (the layout reports a mismatch; nothing wrong is kept).
        if pin.is_none_or(|p| sha256_hex(text.as_bytes()) == p) {
            let _ = std::fs::create_dir_all(&self.cache_dir);
            let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
            if std::fs::write(&tmp, &text).is_ok() {
                let _ = std::fs::rename(&tmp, &path);
            }
        }
        Ok(text)
    }
}
