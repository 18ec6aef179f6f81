//! Talking to the remote: listing one ref (cheap) and fetching it (a pack).
//!
//! The two are deliberately separate operations. The agent polls; most polls find that nothing
//! moved, and for those we only want the handshake and, with protocol v2, one `ls-refs` request
//! filtered to the single ref we follow (`ref-prefix`), never a pack negotiation. Only when the
//! advertised value differs from the mirror's tracking ref does [`fetch`] open a second
//! connection and download what is missing.
//!
//! Every fetch uses an anonymous remote with exactly one force refspec
//! (`+refs/heads/<b>:refs/capstan/branches/<b>` and alike), no tag following, so a force-pushed
//! branch simply moves the tracking ref, and nothing else of the remote is stored.
//!
//! A pinned commit is wanted by object id (`+<hex>:refs/capstan/commits/<hex>`): protocol v2
//! servers (git ≥ 2.18 with v2, GitHub, GitLab) accept any object they have. Servers that refuse
//! (protocol v0 without `uploadpack.allowReachableSHA1InWant`) get a second try: fetch all branches
//! and tags, then look for the commit locally.
//!
//! Shallow fetches (depth 1) are only asked for when the server announced the `shallow`
//! capability over protocol v2; otherwise (no capability, or a v0/v1 server, see
//! [`shallow_capability`]) we fetch the full history instead of failing.

use std::sync::atomic::AtomicBool;

use gix::ObjectId;
use gix::protocol::handshake::Ref;
use gix::remote::Direction;
use gix::remote::fetch::{Shallow, Tags};

use super::GitRef;
use super::mirror::Mirror;

/// Errors of the network side, each naming the URL and the reference.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// Connecting, the handshake or listing refs failed (remote down, auth, unknown repo, ...).
    #[error("cannot list {reference} at {url}: {cause}")]
    List {
        /// The (credential-free) remote URL.
        url: String,
        /// The reference, e.g. `branch main`.
        reference: String,
        /// What failed.
        cause: String,
    },
    /// The remote does not have the branch or tag.
    #[error("{reference} does not exist at {url}")]
    RefNotFound {
        /// The (credential-free) remote URL.
        url: String,
        /// The reference.
        reference: String,
    },
    /// Downloading the objects failed.
    #[error("cannot fetch {reference} from {url}: {cause}")]
    Fetch {
        /// The (credential-free) remote URL.
        url: String,
        /// The reference.
        reference: String,
        /// What failed.
        cause: String,
    },
    /// A pinned commit is neither fetchable by id nor reachable from any branch or tag.
    #[error(
        "commit {commit} is not available from {url} (not fetchable by id and not reachable from any branch or tag)"
    )]
    CommitNotFound {
        /// The (credential-free) remote URL.
        url: String,
        /// The pinned commit.
        commit: String,
    },
    /// The fetch succeeded but did not produce the tracking ref (should not happen).
    #[error("fetching {reference} from {url} did not update {tracking}")]
    NoTrackingRef {
        /// The (credential-free) remote URL.
        url: String,
        /// The reference.
        reference: String,
        /// The local tracking ref.
        tracking: String,
    },
}

/// What the remote advertises for the followed ref.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Advertised {
    /// The ref's value (a tag object for annotated tags).
    pub target: ObjectId,
    /// The commit the ref peels to, when the server said so.
    pub peeled: Option<ObjectId>,
    /// Whether the server can serve shallow fetches.
    pub shallow_supported: bool,
}

/// The remote side of a refspec: `refs/heads/<b>`, `refs/tags/<t>` or the commit id.
pub(crate) fn remote_name(reference: &GitRef) -> String {
    match reference {
        GitRef::Branch(b) => format!("refs/heads/{b}"),
        GitRef::Tag(t) => format!("refs/tags/{t}"),
        GitRef::Commit(c) => c.clone(),
        GitRef::Pull(n) => format!("refs/pull/{n}/head"),
    }
}

fn refspec(reference: &GitRef, tracking: &str) -> String {
    format!("+{}:{tracking}", remote_name(reference))
}

fn remote<'r>(mirror: &'r Mirror, url: &str, specs: &[String]) -> gix::Result<gix::Remote<'r>> {
    mirror
        .repo
        .remote_at(url)?
        .with_fetch_tags(Tags::None)
        .with_refspecs(specs.iter().map(String::as_str), Direction::Fetch)
}

/// Connects for fetching; with extra CA certificates, the https client trusts them too (gix's
/// reqwest backend is configured through its backend options, as gix intends for TLS settings).
fn connect<'a, 'r>(
    mirror: &Mirror,
    url: &str,
    remote: &'a gix::Remote<'r>,
) -> gix::Result<
    gix::remote::Connection<
        'a,
        'a,
        'r,
        Box<dyn gix::protocol::transport::client::blocking_io::Transport + Send>,
    >,
> {
    let connection = remote.connect(Direction::Fetch)?;
    if mirror.roots.is_empty() || !url.starts_with("https://") {
        return Ok(connection);
    }
    use gix::protocol::transport::client::blocking_io::http;
    let mut options = mirror
        .repo
        .transport_options(url, None)?
        .and_then(|o| o.downcast::<http::Options>().ok())
        .map(|o| *o)
        .unwrap_or_default();
    let roots = mirror.roots.clone();
    let backend = http::reqwest::Options {
        configure_client: Some(Box::new(
            move |mut builder: reqwest::blocking::ClientBuilder| {
                for root in &roots {
                    builder = builder.add_root_certificate(root.clone());
                }
                Ok(builder)
            },
        )),
        configure_request: None,
    };
    options.backend = Some(std::sync::Arc::new(std::sync::Mutex::new(backend)));
    Ok(connection.with_transport_options(Box::new(options)))
}

/// Whether a depth-1 fetch from this server really yields a shallow mirror.
///
/// Protocol v2: the `fetch` command lists `shallow`. Protocol v0/v1: gix 0.90 echoes every
/// capability the server offers in its first `want` line, `deepen-relative` included, which makes
/// upload-pack read `deepen 1` relative to a shallow boundary the client does not have: it sends
/// the full history and no `shallow` lines. So against v0/v1 servers that offer `deepen-relative`
/// (every git since 2.11) we fetch the full history on purpose instead of asking for depth 1.
fn shallow_capability(handshake: &gix::protocol::Handshake) -> bool {
    let caps = &handshake.capabilities;
    match handshake.server_protocol_version {
        gix::protocol::transport::Protocol::V2 => caps
            .capability("fetch")
            .and_then(|c| c.supports("shallow"))
            .unwrap_or(false),
        _ => caps.contains("shallow") && !caps.contains("deepen-relative"),
    }
}

/// Lists the followed branch or tag: handshake plus (v2) one filtered `ls-refs`. No pack.
pub(crate) fn list(
    mirror: &Mirror,
    url: &str,
    reference: &GitRef,
    tracking: &str,
) -> Result<Advertised, RemoteError> {
    let err = |e: &(dyn std::error::Error + 'static)| RemoteError::List {
        url: mirror.display_url.clone(),
        reference: reference.to_string(),
        cause: mirror.cause(e),
    };
    let spec = refspec(reference, tracking);
    let remote = remote(mirror, url, std::slice::from_ref(&spec)).map_err(|e| err(&e))?;
    let connection = connect(mirror, url, &remote).map_err(|e| err(&e))?;
    let (ref_map, handshake) = connection
        .ref_map(gix::progress::Discard, Default::default())
        .map_err(|e| err(&e))?;
    let wanted = remote_name(reference);
    let found = ref_map.mappings.iter().find_map(|m| match &m.remote {
        gix::remote::fetch::refmap::Source::Ref(r) if r.unpack().0 == wanted.as_str() => {
            Some(r.clone())
        }
        _ => None,
    });
    let Some(r) = found else {
        return Err(RemoteError::RefNotFound {
            url: mirror.display_url.clone(),
            reference: reference.to_string(),
        });
    };
    let (target, peeled) = match r {
        Ref::Direct { object, .. } => (object, None),
        Ref::Peeled { tag, object, .. } => (tag, Some(object)),
        Ref::Symbolic { tag, object, .. } => (tag.unwrap_or(object), tag.map(|_| object)),
        Ref::Unborn { .. } => {
            return Err(RemoteError::RefNotFound {
                url: mirror.display_url.clone(),
                reference: reference.to_string(),
            });
        }
    };
    Ok(Advertised {
        target,
        peeled,
        shallow_supported: shallow_capability(&handshake),
    })
}

/// The depth setting for the next fetch into `mirror`.
pub(crate) fn shallow_setting(
    mirror: &Mirror,
    want_shallow: bool,
    server_supports: bool,
) -> Shallow {
    if want_shallow && server_supports {
        Shallow::DepthAtRemote(1.try_into().expect("non-zero"))
    } else if mirror.is_shallow() && !want_shallow {
        // The configuration changed from shallow to full: complete the history.
        Shallow::undo()
    } else {
        Shallow::NoChange
    }
}

/// Fetches `specs` into the mirror.
fn fetch_specs(mirror: &Mirror, url: &str, specs: &[String], shallow: Shallow) -> gix::Result<()> {
    let interrupt = AtomicBool::new(false);
    let remote = remote(mirror, url, specs)?;
    let connection = connect(mirror, url, &remote)?;
    let prepare = connection.prepare_fetch(gix::progress::Discard, Default::default())?;
    let outcome = prepare
        .with_shallow(shallow)
        .receive(gix::progress::Discard, &interrupt)?;
    tracing::debug!(status = ?std::mem::discriminant(&outcome.status), "fetch done");
    Ok(())
}

/// Fetches the followed branch or tag into its tracking ref and returns the ref's new value.
pub(crate) fn fetch(
    mirror: &Mirror,
    url: &str,
    reference: &GitRef,
    tracking: &str,
    shallow: Shallow,
) -> Result<ObjectId, RemoteError> {
    let spec = refspec(reference, tracking);
    fetch_specs(mirror, url, std::slice::from_ref(&spec), shallow).map_err(|e| {
        RemoteError::Fetch {
            url: mirror.display_url.clone(),
            reference: reference.to_string(),
            cause: mirror.cause(&e),
        }
    })?;
    let target = mirror.tracking_target(tracking).ok().flatten();
    target.ok_or_else(|| RemoteError::NoTrackingRef {
        url: mirror.display_url.clone(),
        reference: reference.to_string(),
        tracking: tracking.to_string(),
    })
}

/// Makes a pinned commit available locally: by id first, then through all branches and tags.
pub(crate) fn fetch_commit(
    mirror: &Mirror,
    url: &str,
    commit: ObjectId,
    tracking: &str,
    shallow: Shallow,
) -> Result<(), RemoteError> {
    let reference = GitRef::Commit(commit.to_string());
    let by_id = fetch_specs(
        mirror,
        url,
        &[refspec(&reference, tracking)],
        shallow.clone(),
    );
    if by_id.is_ok() && mirror.has_commit(commit) {
        return Ok(());
    }
    if let Err(e) = &by_id {
        tracing::info!(url = %mirror.display_url, %commit, error = %mirror.cause(e), "fetching the pinned commit by id failed; fetching all branches and tags");
    }
    let specs = [
        "+refs/heads/*:refs/capstan/all/heads/*".to_string(),
        "+refs/tags/*:refs/capstan/all/tags/*".to_string(),
    ];
    // A full history: the commit may be anywhere.
    let full = if mirror.is_shallow() {
        Shallow::undo()
    } else {
        Shallow::NoChange
    };
    fetch_specs(mirror, url, &specs, full).map_err(|e| RemoteError::Fetch {
        url: mirror.display_url.clone(),
        reference: reference.to_string(),
        cause: mirror.cause(&e),
    })?;
    if !mirror.has_commit(commit) {
        return Err(RemoteError::CommitNotFound {
            url: mirror.display_url.clone(),
            commit: commit.to_string(),
        });
    }
    mirror
        .set_tracking(tracking, commit)
        .map_err(|e| RemoteError::Fetch {
            url: mirror.display_url.clone(),
            reference: reference.to_string(),
            cause: e.to_string(),
        })
}
