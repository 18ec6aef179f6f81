//! What a request must show before anything else looks at it: that a browser sent it from the
//! dashboard's own pages, and (for `capstan dashboard`) that it was addressed to this machine.
//!
//! **Cross-origin requests.** `SameSite=Strict` keeps other *sites* from sending the session
//! cookie, but another port of the same host is the same site: a page on `127.0.0.1:9000` (a
//! tenant's application an admin port-forwards) could post a form to the dashboard on
//! `127.0.0.1:8480` with its cookie. So every request that changes something (anything but GET
//! and HEAD: signing in and out) must come from the dashboard's own origin ([`same_origin`]):
//! the browser's `Sec-Fetch-Site` says `same-origin` (or `none`, the user's own action), or,
//! from a browser that sends no such header, `Origin` — else `Referer` — names the host and port
//! the request was addressed to (`Host`). A request with none of them is refused: every browser
//! sends one on a POST, and a client that is no browser carries no cookie to abuse and
//! authenticates with `Authorization: Bearer`. A GET from another origin is let through only as
//! a top-level navigation (a link followed), never as an embedded or scripted fetch
//! ([`fetched_fairly`]): another page may not hold the dashboard's event streams open in the
//! user's name. Refusals answer 403.
//!
//! **DNS rebinding** (`capstan dashboard`). A web page on a name its owner controls can make that
//! name resolve to `127.0.0.1` and then read `http://name:8480/` as its own origin. The request
//! then carries that name in `Host`: [`Hosts`] admits only the addresses the dashboard listens on
//! (`localhost`, `127.0.0.1`, `[::1]` on a loopback listener; the address itself on another),
//! with the listener's port, and IP literals on a wildcard listener — never another name. The
//! agent's dashboard needs no such check: a rebound name carries none of the user's cookies for
//! the real host, and every request must bring a session or a token.

use std::net::{IpAddr, SocketAddr};

use axum::http::{HeaderMap, Method, Uri, header};

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// A request that changes something, not from the dashboard's own pages.
    #[error("cross-origin request refused: {0}")]
    CrossOrigin(String),
    /// Addressed to a name that is not this dashboard's.
    #[error("this dashboard does not answer for Host {0:?}")]
    ForeignHost(String),
}

/// The headers' value, as text, when present and readable.
fn text<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Whether a request of `method` with `headers` may go on: a GET or HEAD as
/// [`fetched_fairly`] says, anything else only from the same origin.
pub fn check(method: &Method, headers: &HeaderMap) -> Result<(), Refused> {
    if method == Method::GET || method == Method::HEAD {
        fetched_fairly(headers)
    } else {
        same_origin(headers)
    }
}

/// A request that changes something: from the dashboard's own origin, by `Sec-Fetch-Site`,
/// else `Origin`, else `Referer`, compared with `Host`.
pub fn same_origin(headers: &HeaderMap) -> Result<(), Refused> {
    let refuse = |why: String| Err(Refused::CrossOrigin(why));
    if let Some(site) = text(headers, "sec-fetch-site") {
        // The browser's own word on where the request came from; no page can forge it.
        return match site {
            "same-origin" | "none" => Ok(()),
            other => refuse(format!("Sec-Fetch-Site: {other}")),
        };
    }
    let host = text(headers, header::HOST.as_str());
    let (what, from) = match (
        text(headers, header::ORIGIN.as_str()),
        text(headers, header::REFERER.as_str()),
    ) {
        (Some(origin), _) => ("Origin", origin),
        (None, Some(referer)) => ("Referer", referer),
        (None, None) => return refuse("no Origin, Referer or Sec-Fetch-Site".into()),
    };
    match (authority_of(from), host) {
        (Some(a), Some(h)) if same_authority(&a, h) => Ok(()),
        _ => refuse(format!(
            "{what} {from:?} is not Host {:?}",
            host.unwrap_or("")
        )),
    }
}

/// A GET or HEAD: from anywhere when the browser says nothing (an old browser, no browser), from
/// the dashboard's own origin or the user's own action, or from another origin only as a
/// top-level navigation to a page.
pub fn fetched_fairly(headers: &HeaderMap) -> Result<(), Refused> {
    let Some(site) = text(headers, "sec-fetch-site") else {
        return Ok(());
    };
    if matches!(site, "same-origin" | "none") {
        return Ok(());
    }
    let mode = text(headers, "sec-fetch-mode").unwrap_or("");
    let dest = text(headers, "sec-fetch-dest").unwrap_or("document");
    if mode == "navigate" && dest == "document" {
        return Ok(());
    }
    Err(Refused::CrossOrigin(format!(
        "Sec-Fetch-Site: {site}, Sec-Fetch-Mode: {mode}, Sec-Fetch-Dest: {dest}"
    )))
}

/// `scheme://host[:port]`'s scheme, lower-cased host and port (the scheme's default when none),
/// from an `Origin` or a `Referer`; none for `null` or what is not such a URL.
fn authority_of(url: &str) -> Option<(String, u16)> {
    let uri: Uri = url.parse().ok()?;
    let scheme = uri.scheme_str()?;
    let a = uri.authority()?;
    let port = a.port_u16().or(match scheme {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    })?;
    Some((a.host().to_ascii_lowercase(), port))
}

/// Whether `Host` names the same host and port as `(host, port)`.
fn same_authority((host, port): &(String, u16), host_header: &str) -> bool {
    match split_host(host_header) {
        Some((h, p)) => {
            h == *host && p.unwrap_or(*port) == *port && (p.is_some() || matches!(port, 80 | 443))
        }
        None => false,
    }
}

/// `Host`'s host (lower-cased, an IPv6 literal in brackets) and port, if it is well formed.
fn split_host(host: &str) -> Option<(String, Option<u16>)> {
    let a: axum::http::uri::Authority = host.parse().ok()?;
    if a.as_str().contains('@') {
        return None;
    }
    Some((a.host().to_ascii_lowercase(), a.port_u16()))
}

/// The `Host`s `capstan dashboard` answers: those of the address it listens on.
#[derive(Debug, Clone)]
pub struct Hosts {
    addr: SocketAddr,
}

impl Hosts {
    /// The hosts of listener address `addr` (its actual port, not 0).
    pub fn new(addr: SocketAddr) -> Hosts {
        Hosts { addr }
    }

    /// Whether a request addressed to `host` (its `Host` header) is this dashboard's: the
    /// listener's port, and `localhost`, `127.0.0.1` or `[::1]` when it listens on loopback, its
    /// own address, or any IP address when it listens on all. Never another name.
    pub fn allows(&self, host: &str) -> bool {
        let Some((name, port)) = split_host(host) else {
            return false;
        };
        if port.unwrap_or(80) != self.addr.port() {
            return false;
        }
        let ip = self.addr.ip();
        let loopback = ip.is_loopback() || ip.is_unspecified();
        if name == "localhost" {
            return loopback;
        }
        let literal = name.trim_start_matches('[').trim_end_matches(']');
        let Ok(asked) = literal.parse::<IpAddr>() else {
            return false;
        };
        if name.contains(':') != name.starts_with('[') {
            return false;
        }
        ip.is_unspecified() || asked == ip || (ip.is_loopback() && asked.is_loopback())
    }

    /// Checks a request's `Host` header (and the authority of an absolute request target).
    pub fn check(&self, uri: &Uri, headers: &HeaderMap) -> Result<(), Refused> {
        let host = text(headers, header::HOST.as_str()).unwrap_or("");
        if !self.allows(host) {
            return Err(Refused::ForeignHost(host.to_string()));
        }
        match uri.authority() {
            Some(a) if !self.allows(a.as_str()) => Err(Refused::ForeignHost(a.to_string())),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    const HOST: (&str, &str) = ("host", "127.0.0.1:8480");

    /// What a case is: its name, a request's headers, whether it passes.
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], bool);

    /// Requests that change something, each as a browser (or a forger) sends it, and whether
    /// the dashboard lets it through.
    #[test]
    fn a_state_changing_request_must_come_from_the_dashboards_own_origin() {
        let cases: &[Case] = &[
            (
                "own form, modern browser",
                &[
                    HOST,
                    ("sec-fetch-site", "same-origin"),
                    ("origin", "http://127.0.0.1:8480"),
                ],
                true,
            ),
            // Referrer-Policy no-referrer made browsers send `Origin: null` on a same-origin POST:
            // the browser's Sec-Fetch-Site is what counts.
            (
                "own form, Origin null",
                &[HOST, ("sec-fetch-site", "same-origin"), ("origin", "null")],
                true,
            ),
            (
                "the user's own action",
                &[HOST, ("sec-fetch-site", "none")],
                true,
            ),
            (
                "own form, no fetch metadata",
                &[HOST, ("origin", "http://127.0.0.1:8480")],
                true,
            ),
            (
                "own form, Origin upper case",
                &[HOST, ("origin", "HTTP://127.0.0.1:8480")],
                true,
            ),
            (
                "behind TLS, default port",
                &[
                    ("host", "dash.example.com"),
                    ("origin", "https://dash.example.com"),
                ],
                true,
            ),
            (
                "only a Referer",
                &[HOST, ("referer", "http://127.0.0.1:8480/login")],
                true,
            ),
            // Hostile.
            (
                "another port of the same host",
                &[
                    HOST,
                    ("sec-fetch-site", "same-site"),
                    ("origin", "http://127.0.0.1:9000"),
                ],
                false,
            ),
            (
                "another site",
                &[
                    HOST,
                    ("sec-fetch-site", "cross-site"),
                    ("origin", "https://evil.example"),
                ],
                false,
            ),
            (
                "another port, no fetch metadata",
                &[HOST, ("origin", "http://127.0.0.1:9000")],
                false,
            ),
            (
                "another site, no fetch metadata",
                &[HOST, ("origin", "https://evil.example")],
                false,
            ),
            (
                "a sandboxed frame or a file",
                &[HOST, ("origin", "null")],
                false,
            ),
            (
                "Origin a prefix of Host",
                &[HOST, ("origin", "http://127.0.0.1:8480.evil.example")],
                false,
            ),
            (
                "Origin without a port",
                &[HOST, ("origin", "http://127.0.0.1")],
                false,
            ),
            (
                "https Origin, http port",
                &[("host", "127.0.0.1:80"), ("origin", "https://127.0.0.1")],
                false,
            ),
            (
                "Referer from another port",
                &[HOST, ("referer", "http://127.0.0.1:9000/attack")],
                false,
            ),
            (
                "Referer with credentials",
                &[HOST, ("referer", "http://127.0.0.1:8480@evil.example/")],
                false,
            ),
            (
                "Origin not a URL",
                &[HOST, ("origin", "127.0.0.1:8480")],
                false,
            ),
            (
                "Origin good, no Host",
                &[("origin", "http://127.0.0.1:8480")],
                false,
            ),
            (
                "Host with credentials",
                &[
                    ("host", "x@127.0.0.1:8480"),
                    ("origin", "http://127.0.0.1:8480"),
                ],
                false,
            ),
            ("nothing at all", &[HOST], false),
            (
                "unknown Sec-Fetch-Site",
                &[
                    HOST,
                    ("sec-fetch-site", "same-origin, cross-site"),
                    ("origin", "http://127.0.0.1:8480"),
                ],
                false,
            ),
        ];
        for (what, h, ok) in cases {
            let got = check(&Method::POST, &headers(h));
            assert_eq!(got.is_ok(), *ok, "{what}: {got:?}");
        }
    }

    #[test]
    fn another_origin_may_only_navigate_to_a_page() {
        let cases: &[Case] = &[
            ("no fetch metadata", &[HOST], true),
            (
                "own page's fetch",
                &[
                    HOST,
                    ("sec-fetch-site", "same-origin"),
                    ("sec-fetch-mode", "cors"),
                    ("sec-fetch-dest", "empty"),
                ],
                true,
            ),
            (
                "typed into the address bar",
                &[
                    HOST,
                    ("sec-fetch-site", "none"),
                    ("sec-fetch-mode", "navigate"),
                ],
                true,
            ),
            (
                "a link from another site",
                &[
                    HOST,
                    ("sec-fetch-site", "cross-site"),
                    ("sec-fetch-mode", "navigate"),
                    ("sec-fetch-dest", "document"),
                ],
                true,
            ),
            // Hostile.
            (
                "an image on another port holding /events open",
                &[
                    HOST,
                    ("sec-fetch-site", "same-site"),
                    ("sec-fetch-mode", "no-cors"),
                    ("sec-fetch-dest", "image"),
                ],
                false,
            ),
            (
                "another port's EventSource",
                &[
                    HOST,
                    ("sec-fetch-site", "same-site"),
                    ("sec-fetch-mode", "cors"),
                    ("sec-fetch-dest", "empty"),
                ],
                false,
            ),
            (
                "a frame",
                &[
                    HOST,
                    ("sec-fetch-site", "cross-site"),
                    ("sec-fetch-mode", "navigate"),
                    ("sec-fetch-dest", "iframe"),
                ],
                false,
            ),
            (
                "a script tag",
                &[
                    HOST,
                    ("sec-fetch-site", "cross-site"),
                    ("sec-fetch-mode", "no-cors"),
                    ("sec-fetch-dest", "script"),
                ],
                false,
            ),
        ];
        for (what, h, ok) in cases {
            let got = check(&Method::GET, &headers(h));
            assert_eq!(got.is_ok(), *ok, "{what}: {got:?}");
        }
    }

    #[test]
    fn capstan_dashboard_answers_only_for_its_own_addresses() {
        let loopback = Hosts::new("127.0.0.1:8480".parse().unwrap());
        for host in [
            "127.0.0.1:8480",
            "localhost:8480",
            "LOCALHOST:8480",
            "[::1]:8480",
        ] {
            assert!(loopback.allows(host), "{host}");
        }
        for host in [
            // DNS rebinding: a name whose owner points it at 127.0.0.1.
            "evil.example:8480",
            "127.0.0.1.nip.io:8480",
            "localhost.:8480",
            "x.localhost:8480",
            // Another port, no port, a malformed Host.
            "127.0.0.1:8481",
            "127.0.0.1",
            "",
            "127.0.0.1:8480:8480",
            "user@127.0.0.1:8480",
            "::1:8480",
            // Not this machine's loopback, or not an IP literal Rust reads.
            "10.0.0.5:8480",
            "2130706433:8480",
            "0x7f.1:8480",
        ] {
            assert!(!loopback.allows(host), "{host}");
        }
        let port80 = Hosts::new("127.0.0.1:80".parse().unwrap());
        assert!(port80.allows("127.0.0.1") && port80.allows("localhost"));
        // On one address of another interface: that address only.
        let lan = Hosts::new("192.168.1.5:8480".parse().unwrap());
        assert!(lan.allows("192.168.1.5:8480"));
        for host in ["localhost:8480", "127.0.0.1:8480", "evil.example:8480"] {
            assert!(!lan.allows(host), "{host}");
        }
        // On all: any IP address (a rebound name is never an IP literal), never a name.
        let all = Hosts::new("0.0.0.0:8480".parse().unwrap());
        for host in ["192.168.1.5:8480", "localhost:8480", "127.0.0.1:8480"] {
            assert!(all.allows(host), "{host}");
        }
        assert!(!all.allows("evil.example:8480"));
        // An absolute request target is checked as well as Host.
        let uri: Uri = "http://evil.example:8480/".parse().unwrap();
        assert!(loopback.check(&uri, &headers(&[HOST])).is_err());
        assert!(
            loopback
                .check(&Uri::from_static("/"), &headers(&[HOST]))
                .is_ok()
        );
    }
}
