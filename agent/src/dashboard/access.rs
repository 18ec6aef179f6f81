//! Who gets in, served either way: the agent's dashboard (`capstan run --dashboard-addr`) lets in
//! whoever brings a Kubernetes bearer token the API server allows ([`super::auth`]), pasted once
//! into the sign-in form; `capstan dashboard` on a user's machine lets in whoever brings the
//! secret of this run, a random token in the URL it prints, as Jupyter does — anyone else on the
//! machine (another user, a web page by DNS rebinding) could otherwise read what the user's
//! kubeconfig can.
//!
//! Either way a browser then holds only a session's id ([`super::session`]); the request guards
//! ([`super::guard`]) run first: a state-changing request from another origin, and for `capstan
//! dashboard` a `Host` that is not its own, are refused before anything else.
//!
//! | request | agent | `capstan dashboard` |
//! |---|---|---|
//! | `Authorization: Bearer <t>` | `t` reviewed | `t` the run's secret |
//! | session cookie | the session's token reviewed again | the session live |
//! | `?token=<t>` on any page | — | `t` the secret: a session, its cookie, and the page again without the token |
//! | `POST /login` (form) | the token reviewed: a session, its cookie | not served |
//! | `POST /logout` | the session deleted, the cookie cleared | the same |

use std::net::SocketAddr;

use sha2::{Digest, Sha256};

use super::auth::Reviewer;
use super::guard::Hosts;
use super::session::{Cookie, random_hex};

/// How a dashboard lets people in.
pub enum Access {
    /// The agent's: Kubernetes bearer tokens, reviewed by the API server. `https`: users reach
    /// it over HTTPS (TLS ends in front of the agent, `--dashboard-behind-tls`), so its cookie
    /// is `Secure` with the `__Host-` prefix.
    Reviewed {
        /// Asks the API server.
        reviewer: Box<Reviewer>,
        /// Reached over HTTPS.
        https: bool,
    },
    /// `capstan dashboard`'s: the run's secret, on the addresses it listens on.
    Local(Local),
}

/// `capstan dashboard`'s secret and addresses.
pub struct Local {
    /// The secret's SHA-256 (compared by hash: no timing tells a guess's common prefix).
    secret: [u8; 32],
    hosts: Hosts,
    port: u16,
}

impl Local {
    /// A new secret for a dashboard listening on `addr` (its actual port); the secret, to
    /// print in its URL.
    pub fn new(addr: SocketAddr) -> Result<(Local, String), getrandom::Error> {
        let token = random_hex::<32>()?;
        Ok((Local::with_token(addr, &token), token))
    }

    /// The dashboard on `addr` with secret `token`.
    pub fn with_token(addr: SocketAddr, token: &str) -> Local {
        Local {
            secret: Sha256::digest(token.as_bytes()).into(),
            hosts: Hosts::new(addr),
            port: addr.port(),
        }
    }

    pub(super) fn admits(&self, token: &str) -> bool {
        <[u8; 32]>::from(Sha256::digest(token.as_bytes())) == self.secret
    }

    /// The `Host`s it answers.
    pub fn hosts(&self) -> &Hosts {
        &self.hosts
    }
}

impl Access {
    /// The session cookie of this dashboard.
    pub fn cookie(&self) -> Cookie {
        match self {
            Access::Reviewed { https, .. } => Cookie::agent(*https),
            Access::Local(l) => Cookie::local(l.port),
        }
    }
}

/// Who a request let in was made by.
#[derive(Clone)]
pub struct Who {
    /// The name pages show ("Signed in as"), when the API server gave one.
    pub user: Option<String>,
    /// Whose streams these are, for their bound ([`super::streams`]).
    pub key: String,
    /// The session it came with, if any.
    pub session: Option<String>,
    /// The bearer token it came with (its own or its session's), reviewed again while an
    /// event stream stays open.
    pub token: Option<String>,
}

impl Who {
    /// Nobody signed in (the sign-in page).
    pub fn nobody() -> Who {
        Who {
            user: None,
            key: String::new(),
            session: None,
            token: None,
        }
    }
}

/// What the sign-in form says of a token the API server did not accept.
pub const TOKEN_REFUSED: &str = "That token was not accepted by the API server.";
/// What it says when the session a cookie named is over.
pub const SESSION_OVER: &str =
    "Your session is over (signed out, expired, or its token no longer accepted): sign in again.";
/// The user `capstan dashboard`'s sessions belong to.
pub(super) const LOCAL_USER: &str = "capstan dashboard";
