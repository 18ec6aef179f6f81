//! https:// remotes: gix's reqwest transport over TLS, against `git http-backend` behind a TLS
//! server whose certificate comes from a private CA, trusted through `--ca-file`
//! ([`SourceConfig::ca_file`]) as a self-hosted Git server needs. A server signed by any other CA
//! is refused before a single Git request reaches it.

use capstan::source::{GitRef, GitSource, SourceConfig, SyncOutcome};
use capstan_harness::certs::Pki;

use crate::source_support::Upstream;
use crate::source_support::http::HttpGitServer;

fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        out.push_str(": ");
        out.push_str(&s.to_string());
        cur = s.source();
    }
    out
}

#[test]
fn an_https_remote_signed_by_a_trusted_private_ca_is_followed_and_an_untrusted_one_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::generate().unwrap();
    let ca = tmp.path().join("ca.pem");
    std::fs::write(&ca, &pki.serving_ca_pem).unwrap();

    let up = Upstream::new(&[("clusters/mgmt/cluster.yaml", "kind: Cluster\n")]);
    let server = HttpGitServer::start_tls(&up.root, &pki.serving_cert_pem, &pki.serving_key_pem);
    let url = server.url("repo.git");
    assert!(url.starts_with("https://localhost:"));
    let config = |url: String, cache: &str| SourceConfig {
        url,
        reference: GitRef::Branch("main".into()),
        cache_dir: tmp.path().join(cache),
        ssh_key: None,
        known_hosts: None,
        shallow: true,
        ca_file: Some(ca.clone()),
    };

    let mut src = GitSource::open(config(url.clone(), "mirror")).unwrap();
    match src.sync().unwrap() {
        SyncOutcome::Updated { revision, .. } => assert_eq!(revision.commit, up.head()),
        other => panic!("{other:?}"),
    }
    let c2 = up.commit_and_push(
        &[(
            "clusters/mgmt/cluster.yaml",
            "kind: Cluster\nmetadata: {}\n",
        )],
        &[],
        "second",
    );
    match src.sync().unwrap() {
        SyncOutcome::Updated { revision, .. } => {
            assert_eq!(revision.commit, c2);
            assert!(
                String::from_utf8_lossy(
                    revision
                        .tree
                        .entries
                        .iter()
                        .find(|(p, _)| p.ends_with("cluster.yaml"))
                        .map(|(_, e)| match e {
                            capstan_layout::tree::Entry::File(b) => b.as_slice(),
                            _ => &[],
                        })
                        .unwrap()
                )
                .contains("metadata")
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(
        server.log().iter().any(|r| r.is_fetch()),
        "packs came over https: {:?}",
        server.log()
    );

    // Same repository, a certificate from a CA nobody trusts: refused at the handshake.
    let stranger = Pki::generate().unwrap();
    let untrusted = HttpGitServer::start_tls(
        &up.root,
        &stranger.serving_cert_pem,
        &stranger.serving_key_pem,
    );
    let mut src = GitSource::open(config(untrusted.url("repo.git"), "mirror-untrusted")).unwrap();
    let err = src
        .sync()
        .expect_err("an untrusted certificate must be refused");
    let message = chain(&err).to_lowercase();
    // (Both CAs carry the same name, so the verifier reports a bad signature rather than an unknown issuer.)
    assert!(message.contains("invalid peer certificate"), "{message}");
    assert!(
        untrusted.log().is_empty(),
        "no request got past the handshake: {:?}",
        untrusted.log()
    );
    assert!(src.last_good().is_none());

    // Without --ca-file the private CA is not trusted: the system roots alone refuse it.
    let mut src = GitSource::open(SourceConfig {
        ca_file: None,
        ..config(url, "mirror-no-ca")
    })
    .unwrap();
    let err = src
        .sync()
        .expect_err("a private CA is not trusted by default");
    assert!(
        chain(&err).contains("invalid peer certificate: UnknownIssuer"),
        "{}",
        chain(&err)
    );

    // A CA file that is not PEM is a configuration error at open, not a failure at the first fetch.
    let bad = tmp.path().join("bad.pem");
    std::fs::write(&bad, "not a certificate").unwrap();
    let err = GitSource::open(SourceConfig {
        ca_file: Some(bad.clone()),
        ..config(server.url("repo.git"), "mirror-bad")
    })
    .expect_err("a CA file without certificates is refused");
    assert!(err.to_string().contains("bad.pem"), "{err}");
}
