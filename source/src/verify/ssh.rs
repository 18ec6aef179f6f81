//! SSH signatures (`git -c gpg.format=ssh`): the allowed_signers file of ssh-keygen(1) and the
//! `sshsig` check in namespace `git`.
//!
//! No crate parses allowed_signers, so this does, as ssh-keygen's ALLOWED SIGNERS section has
//! it: `principals [options] keytype base64 [comment]`, principals and options possibly quoted.
//! Options: `namespaces="git,…"` (patterns with `*` and `?`), `valid-after=` and
//! `valid-before=` (`YYYYMMDD[HHMM[SS]][Z]`, read as UTC). `cert-authority` is refused with an
//! error: certificate signatures are not verified here. As `git` does (`ssh-keygen -Y
//! find-principals`), any principal whose key signed is the signer; the principal is reported,
//! not matched against the committer.

use ssh_key::{HashAlg, PublicKey, SshSig};

use super::{KeysError, Why, when};

/// One line of an allowed_signers file.
#[derive(Debug, Clone)]
pub(super) struct AllowedSigner {
    principals: String,
    namespaces: Option<Vec<String>>,
    valid_after: Option<u64>,
    valid_before: Option<u64>,
    key: PublicKey,
    /// Where it was read, `file:line`.
    at: String,
}

/// Splits off the first token of `s` (whitespace-delimited; double quotes keep spaces and
/// commas), returning it and the rest.
fn token(s: &str) -> (&str, &str) {
    let s = s.trim_start();
    let mut quoted = false;
    for (i, c) in s.char_indices() {
        match c {
            '"' => quoted = !quoted,
            c if c.is_whitespace() && !quoted => return (&s[..i], &s[i..]),
            _ => {}
        }
    }
    (s, "")
}

/// Splits `s` at commas outside double quotes.
fn split_commas(s: &str) -> Vec<&str> {
    let (mut out, mut start, mut quoted) = (Vec::new(), 0, false);
    for (i, c) in s.char_indices() {
        match c {
            '"' => quoted = !quoted,
            ',' if !quoted => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn unquote(s: &str) -> &str {
    s.strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'))
        .unwrap_or(s)
}

/// `YYYYMMDD`, `YYYYMMDDHHMM` or `YYYYMMDDHHMMSS`, with an optional `Z`; read as UTC.
fn parse_time(s: &str) -> Option<u64> {
    let digits = s.strip_suffix(['Z', 'z']).unwrap_or(s);
    if !digits.bytes().all(|b| b.is_ascii_digit()) || ![8, 12, 14].contains(&digits.len()) {
        return None;
    }
    let n = |r: std::ops::Range<usize>| digits.get(r).map_or(Some(0), |d| d.parse::<i8>().ok());
    let year: i16 = digits[..4].parse().ok()?;
    let dt = jiff::civil::DateTime::new(
        year,
        n(4..6)?,
        n(6..8)?,
        n(8..10)?,
        n(10..12)?,
        n(12..14)?,
        0,
    )
    .ok()?;
    let t = dt.to_zoned(jiff::tz::TimeZone::UTC).ok()?;
    u64::try_from(t.timestamp().as_second()).ok()
}

/// Parses an allowed_signers text; `origin` names it in errors.
pub(super) fn parse(origin: &str, text: &str) -> Result<Vec<AllowedSigner>, KeysError> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let err = |reason: String| KeysError::AllowedSigners {
            origin: origin.to_string(),
            line: n + 1,
            reason,
        };
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (principals, rest) = token(line);
        let principals = unquote(principals).to_string();
        // Options come before the key when the next token is not a key (ssh-keygen's rule).
        let (key, options) = match PublicKey::from_openssh(rest.trim()) {
            Ok(key) => (key, ""),
            Err(_) => {
                let (options, rest) = token(rest);
                let key = PublicKey::from_openssh(rest.trim()).map_err(|e| {
                    err(format!(
                        "expected `principals [options] keytype base64-key`: {e}"
                    ))
                })?;
                (key, options)
            }
        };
        let mut signer = AllowedSigner {
            principals,
            namespaces: None,
            valid_after: None,
            valid_before: None,
            key,
            at: format!("{origin}:{}", n + 1),
        };
        for opt in split_commas(options).into_iter().filter(|o| !o.is_empty()) {
            let (name, value) = opt.split_once('=').unwrap_or((opt, ""));
            let value = unquote(value);
            let time = || {
                parse_time(value).ok_or_else(|| {
                    err(format!(
                        "{name}={value}: not a time (YYYYMMDD[HHMM[SS]][Z])"
                    ))
                })
            };
            match name.to_ascii_lowercase().as_str() {
                "namespaces" => {
                    signer.namespaces = Some(value.split(',').map(str::to_string).collect())
                }
                "valid-after" => signer.valid_after = Some(time()?),
                "valid-before" => signer.valid_before = Some(time()?),
                "cert-authority" => {
                    return Err(err(
                        "cert-authority is not supported: list the signers' own keys".into(),
                    ));
                }
                other => return Err(err(format!("unknown option `{other}`"))),
            }
        }
        out.push(signer);
    }
    Ok(out)
}

/// `*` and `?` patterns, as ssh's match_pattern.
fn glob(pattern: &str, s: &str) -> bool {
    fn go(p: &[u8], s: &[u8]) -> bool {
        match (p.first(), s.first()) {
            (None, None) => true,
            (Some(b'*'), _) => go(&p[1..], s) || (!s.is_empty() && go(p, &s[1..])),
            (Some(b'?'), Some(_)) => go(&p[1..], &s[1..]),
            (Some(a), Some(b)) if a == b => go(&p[1..], &s[1..]),
            _ => false,
        }
    }
    go(pattern.as_bytes(), s.as_bytes())
}

/// Whether the entry allows namespace `git` (negated patterns, `!ns`, deny).
fn allows_git(namespaces: &[String]) -> bool {
    let mut allowed = false;
    for p in namespaces {
        match p.strip_prefix('!') {
            Some(neg) if glob(neg, "git") => return false,
            Some(_) => {}
            None if glob(p, "git") => allowed = true,
            None => {}
        }
    }
    allowed
}

/// Verifies an armored SSH signature over `signed` in namespace `git`. Ok: (principals,
/// fingerprint).
pub(super) fn verify(
    armored: &[u8],
    signed: &[u8],
    signers: &[AllowedSigner],
    now: u64,
) -> Result<(String, String), (Why, String)> {
    let sig = SshSig::from_pem(armored)
        .map_err(|e| (Why::BadSignature, format!("unreadable SSH signature: {e}")))?;
    let fingerprint = sig.public_key().fingerprint(HashAlg::Sha256).to_string();
    let key = PublicKey::from(sig.public_key().clone());
    let candidates: Vec<&AllowedSigner> = signers
        .iter()
        .filter(|s| s.key.key_data() == sig.public_key())
        .collect();
    if candidates.is_empty() {
        return Err((
            Why::UntrustedKey,
            format!("signed with SSH key {fingerprint}, which is not an allowed signer"),
        ));
    }
    if let Err(e) = key.verify("git", signed, &sig) {
        let detail = match e {
            ssh_key::Error::Namespace => format!(
                "the SSH signature by {fingerprint} is for namespace `{}`, not `git`",
                sig.namespace()
            ),
            e => format!(
                "the SSH signature by {fingerprint} does not match the commit's content ({e}): the commit was changed after it was signed"
            ),
        };
        return Err((Why::BadSignature, detail));
    }
    // The key is trusted by at least one entry; it must allow `git` now.
    let mut refusal = None;
    for s in candidates {
        if let Some(ns) = &s.namespaces
            && !allows_git(ns)
        {
            refusal.get_or_insert((
                Why::UntrustedKey,
                format!(
                    "SSH key {fingerprint} ({}) is allowed only for namespaces {} ({}), not git",
                    s.principals,
                    ns.join(","),
                    s.at
                ),
            ));
            continue;
        }
        if let Some(before) = s.valid_before
            && now >= before
        {
            refusal = Some((
                Why::ExpiredKey,
                format!(
                    "SSH key {fingerprint} ({}) expired: valid before {} ({})",
                    s.principals,
                    when(before),
                    s.at
                ),
            ));
            continue;
        }
        if let Some(after) = s.valid_after
            && now < after
        {
            refusal = Some((
                Why::ExpiredKey,
                format!(
                    "SSH key {fingerprint} ({}) is not valid yet: valid after {} ({})",
                    s.principals,
                    when(after),
                    s.at
                ),
            ));
            continue;
        }
        return Ok((s.principals.clone(), fingerprint));
    }
    Err(refusal.expect("at least one candidate, refused"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str =
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGnL0cm9luuSeuyEiv8BEKqEN0nfW9gtVDY+cA/VaA9+";

    #[test]
    fn allowed_signers_lines_with_options_quotes_and_comments_parse() {
        let text = format!(
            "# the platform team\n\nalice@example.com {KEY} alice's laptop\n\"bob@example.com,carol@*\" namespaces=\"git,file\",valid-after=20260101,valid-before=\"20270101120000Z\" {KEY}\n"
        );
        let s = parse("allowed_signers", &text).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].principals, "alice@example.com");
        assert!(s[0].namespaces.is_none() && s[0].valid_before.is_none());
        assert_eq!(s[1].principals, "bob@example.com,carol@*");
        assert_eq!(
            s[1].namespaces.as_deref(),
            Some(&["git".to_string(), "file".to_string()][..])
        );
        assert_eq!(s[1].valid_after, Some(1_767_225_600));
        assert_eq!(s[1].valid_before, Some(1_798_804_800));
        assert_eq!(s[1].at, "allowed_signers:4");
    }

    #[test]
    fn bad_lines_are_refused_with_their_file_and_line() {
        for (line, expect) in [
            (
                format!("a@b cert-authority {KEY}"),
                "allowed_signers:2: cert-authority is not supported",
            ),
            (
                format!("a@b valid-before=2026 {KEY}"),
                "allowed_signers:2: valid-before=2026: not a time",
            ),
            (
                format!("a@b no-touch-required {KEY}"),
                "allowed_signers:2: unknown option `no-touch-required`",
            ),
            (
                "a@b ssh-ed25519 AAAAnot-base64".to_string(),
                "allowed_signers:2: expected `principals [options] keytype base64-key`",
            ),
        ] {
            let e = parse("allowed_signers", &format!("# ok\n{line}\n"))
                .unwrap_err()
                .to_string();
            assert!(e.starts_with(expect), "{line}: {e}");
        }
    }

    #[test]
    fn namespace_patterns_allow_and_deny_git() {
        let ns = |s: &[&str]| s.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(allows_git(&ns(&["git"])));
        assert!(allows_git(&ns(&["file", "g*"])));
        assert!(allows_git(&ns(&["g?t"])));
        assert!(!allows_git(&ns(&["file"])));
        assert!(!allows_git(&ns(&["*", "!git"])));
        assert!(!allows_git(&ns(&[])));
    }

    #[test]
    fn times_are_read_as_utc() {
        assert_eq!(parse_time("19700101"), Some(0));
        assert_eq!(parse_time("197001010001"), Some(60));
        assert_eq!(parse_time("19700101000001Z"), Some(1));
        assert_eq!(parse_time("2026013"), None);
        assert_eq!(parse_time("20261301"), None, "month 13");
    }
}
