//! OpenPGP signatures (`gpg`'s, git's default format), checked against trusted public keys with
//! rPGP (the `pgp` crate).
//!
//! rPGP verifies signatures; what makes a key usable is policy, written here, as RFC 9580 and
//! gpg have it:
//!
//! - only **self-signatures** count (made by the primary key over its own user IDs, direct-key
//!   signatures, subkey bindings) and only those that verify; third-party certifications on a
//!   trusted key are ignored, not trusted;
//! - a key with a verifying **key revocation** signature is revoked, whatever its reason;
//! - a key **expires** at its creation time plus the key expiration time of its newest
//!   self-signature (a subkey: of its newest binding);
//! - a **signing subkey** needs a verifying binding with the sign flag and the embedded
//!   back-signature, and must be neither revoked nor expired, nor its primary key;
//! - a **primary key** signs only if its newest self-signature gives it the sign flag (or has no
//!   key flags at all, where RFC 9580 lets the algorithm decide): a key its owner made
//!   certify-only signs no commit, not even one it signed before;
//! - a key present **more than once** (a copy exported before its revocation beside one exported
//!   after, in one file or across the file and the Secret) is one key: its copies are merged as
//!   `gpg --import` merges them, the union of their user IDs, subkeys and signatures, so a
//!   revocation in any copy holds;
//! - a signature over a commit made with **MD5, SHA-1 or RIPEMD-160** is refused: a collision
//!   lets whoever prepared one document reuse its signature on another (SHA-1's chosen-prefix
//!   collisions, 2020), and gpg signs with SHA-256 or stronger by default. (Self-
//!   signatures and subkey bindings are not judged by their hash; gpg 2.2 refuses to make a
//!   SHA-1 subkey binding, `--cert-digest-algo SHA1`: "Invalid digest algorithm".)

use pgp::composed::{Deserializable, DetachedSignature, SignedPublicKey, SignedPublicSubKey};
use pgp::crypto::hash::HashAlgorithm;
use pgp::packet::{Signature, SignatureType, SubpacketData};
use pgp::types::{KeyDetails, Tag};

use super::{KeysError, Why, when};

/// A trusted OpenPGP key (a certificate: primary key, user IDs, subkeys).
#[derive(Debug, Clone)]
pub(super) struct TrustedKey {
    key: SignedPublicKey,
}

/// Parses armored (one block or several) or binary public keys.
pub(super) fn parse(origin: &str, bytes: &[u8]) -> Result<Vec<TrustedKey>, KeysError> {
    let err = |reason: String| KeysError::OpenPgp {
        origin: origin.to_string(),
        reason,
    };
    const BEGIN: &str = "-----BEGIN PGP PUBLIC KEY BLOCK-----";
    let mut keys = Vec::new();
    let text = String::from_utf8_lossy(bytes);
    if text.contains(BEGIN) {
        for block in text.split(BEGIN).skip(1) {
            let armored = format!("{BEGIN}{block}");
            let (parsed, _) = SignedPublicKey::from_string_many(&armored)
                .map_err(|e| err(format!("not an OpenPGP public key block: {e}")))?;
            for k in parsed {
                keys.push(k.map_err(|e| err(format!("unreadable public key: {e}")))?);
            }
        }
    } else {
        let parsed = SignedPublicKey::from_bytes_many(bytes).map_err(|e| {
            err(format!(
                "neither armored nor binary OpenPGP public keys: {e}"
            ))
        })?;
        for k in parsed {
            keys.push(k.map_err(|e| err(format!("unreadable public key: {e}")))?);
        }
    }
    let mut out = Vec::new();
    for key in keys {
        // A key none of whose user IDs the key itself certifies is not what `gpg --export` gives.
        if self_certifications(&key).next().is_none() {
            return Err(err(format!(
                "key {} has no valid self-signature",
                hex(&key.fingerprint())
            )));
        }
        out.push(TrustedKey { key });
    }
    Ok(merged(out))
}

/// `keys` with the copies of one key (by primary fingerprint) merged into the first, as
/// `gpg --import` merges them: the union of their signatures, user IDs and subkeys.
pub(super) fn merged(keys: Vec<TrustedKey>) -> Vec<TrustedKey> {
    let mut out: Vec<TrustedKey> = Vec::with_capacity(keys.len());
    for TrustedKey { key } in keys {
        match out
            .iter_mut()
            .find(|k| k.key.fingerprint() == key.fingerprint())
        {
            Some(first) => merge(&mut first.key, key),
            None => out.push(TrustedKey { key }),
        }
    }
    out
}

/// Adds `other`'s signatures, user IDs, user attributes and subkeys (the same primary key)
/// to `into`.
fn merge(into: &mut SignedPublicKey, other: SignedPublicKey) {
    fn union(into: &mut Vec<Signature>, other: Vec<Signature>) {
        for s in other {
            if !into.contains(&s) {
                into.push(s);
            }
        }
    }
    let (d, o) = (&mut into.details, other.details);
    union(&mut d.revocation_signatures, o.revocation_signatures);
    union(&mut d.direct_signatures, o.direct_signatures);
    for u in o.users {
        match d.users.iter_mut().find(|x| x.id == u.id) {
            Some(x) => union(&mut x.signatures, u.signatures),
            None => d.users.push(u),
        }
    }
    for a in o.user_attributes {
        match d.user_attributes.iter_mut().find(|x| x.attr == a.attr) {
            Some(x) => union(&mut x.signatures, a.signatures),
            None => d.user_attributes.push(a),
        }
    }
    for sub in other.public_subkeys {
        let fp = sub.key.fingerprint();
        match into
            .public_subkeys
            .iter_mut()
            .find(|x| x.key.fingerprint() == fp)
        {
            Some(x) => union(&mut x.signatures, sub.signatures),
            None => into.public_subkeys.push(sub),
        }
    }
}

/// The signature's hash, if it is one capstan refuses (MD5, SHA-1, RIPEMD-160).
fn weak_hash(sig: &Signature) -> Option<HashAlgorithm> {
    sig.hash_alg().filter(|h| {
        matches!(
            h,
            HashAlgorithm::Md5 | HashAlgorithm::Sha1 | HashAlgorithm::Ripemd160
        )
    })
}

/// Whether a self-signature carries a key flags subpacket at all.
fn has_key_flags(sig: &Signature) -> bool {
    sig.config().is_some_and(|c| {
        c.hashed_subpackets()
            .any(|p| matches!(p.data, SubpacketData::KeyFlags(_)))
    })
}

fn hex(fp: &pgp::types::Fingerprint) -> String {
    format!("{fp:X}")
}

fn issued_by(sig: &Signature, fp: &pgp::types::Fingerprint, id: &pgp::types::KeyId) -> bool {
    sig.issuer_fingerprint().contains(&fp) || sig.issuer_key_id().contains(&id)
}

/// The primary key's self-signatures that verify: user ID certifications and direct-key
/// signatures.
fn self_certifications(key: &SignedPublicKey) -> impl Iterator<Item = &Signature> {
    let primary = &key.primary_key;
    let users = key.details.users.iter().flat_map(move |u| {
        u.signatures.iter().filter(move |s| {
            s.typ() != Some(SignatureType::CertRevocation)
                && issued_by(s, &primary.fingerprint(), &primary.legacy_key_id())
                && s.verify_certification(primary, Tag::UserId, &u.id).is_ok()
        })
    });
    let direct = key
        .details
        .direct_signatures
        .iter()
        .filter(move |s| s.verify_key(primary).is_ok());
    users.chain(direct)
}

/// The newest of `sigs` (by creation time).
fn newest<'a>(sigs: impl Iterator<Item = &'a Signature>) -> Option<&'a Signature> {
    sigs.max_by_key(|s| s.created().map_or(0, |t| t.as_secs()))
}

/// When a key created at `created` expires by `sig` (None: never).
fn expiry(created: u32, sig: &Signature) -> Option<u64> {
    sig.key_expiration_time()
        .filter(|d| d.as_secs() != 0)
        .map(|d| u64::from(created) + u64::from(d.as_secs()))
}

/// The primary user ID, for messages.
fn user_id(key: &SignedPublicKey) -> String {
    key.details
        .users
        .iter()
        .find(|u| u.signatures.iter().any(|s| s.is_primary()))
        .or_else(|| key.details.users.first())
        .map(|u| String::from_utf8_lossy(u.id.id()).into_owned())
        .unwrap_or_else(|| "(no user ID)".into())
}

/// Whether the primary key, as of `now`, may sign: Err with why not.
fn primary_usable(key: &SignedPublicKey, now: u64) -> Result<(), (Why, String)> {
    let fp = hex(&key.fingerprint());
    let who = user_id(key);
    let revoked = key.details.revocation_signatures.iter().find(|s| {
        s.typ() == Some(SignatureType::KeyRevocation) && s.verify_key(&key.primary_key).is_ok()
    });
    if let Some(r) = revoked {
        let why = r
            .revocation_reason_string()
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .filter(|s| !s.is_empty())
            .map(|s| format!(": {s}"))
            .unwrap_or_default();
        return Err((
            Why::RevokedKey,
            format!("OpenPGP key {fp} ({who}) is revoked{why}"),
        ));
    }
    let created = key.primary_key.created_at().as_secs();
    if let Some(at) = newest(self_certifications(key)).and_then(|s| expiry(created, s))
        && now >= at
    {
        return Err((
            Why::ExpiredKey,
            format!("OpenPGP key {fp} ({who}) expired on {}", when(at)),
        ));
    }
    Ok(())
}

/// Whether the primary key itself may sign data: its newest self-signature gives it the sign
/// flag, or gives it no key flags at all.
fn primary_signs(key: &SignedPublicKey) -> Result<(), (Why, String)> {
    match newest(self_certifications(key)) {
        Some(s) if has_key_flags(s) && !s.key_flags().sign() => Err((
            Why::UntrustedKey,
            format!(
                "OpenPGP key {} ({}) is not a signing key: its self-signature does not give it the sign flag (sign with a key or subkey that has it)",
                hex(&key.fingerprint()),
                user_id(key)
            ),
        )),
        _ => Ok(()),
    }
}

/// Whether a subkey, as of `now`, may sign for its primary key.
fn subkey_usable(
    key: &SignedPublicKey,
    sub: &SignedPublicSubKey,
    now: u64,
) -> Result<(), (Why, String)> {
    let primary = &key.primary_key;
    let fp = hex(&sub.key.fingerprint());
    let who = user_id(key);
    let revoked = sub.signatures.iter().any(|s| {
        s.typ() == Some(SignatureType::SubkeyRevocation)
            && s.verify_subkey_binding(primary, &sub.key).is_ok()
    });
    if revoked {
        return Err((
            Why::RevokedKey,
            format!("OpenPGP subkey {fp} of {who} is revoked"),
        ));
    }
    let bindings = sub.signatures.iter().filter(|s| {
        s.typ() == Some(SignatureType::SubkeyBinding)
            && s.verify_subkey_binding(primary, &sub.key).is_ok()
    });
    let Some(binding) = newest(bindings) else {
        return Err((
            Why::UntrustedKey,
            format!("OpenPGP subkey {fp} of {who} has no valid binding to its primary key"),
        ));
    };
    let back = binding
        .embedded_signature()
        .is_some_and(|b| b.verify_primary_key_binding(&sub.key, primary).is_ok());
    if !binding.key_flags().sign() || !back {
        return Err((
            Why::UntrustedKey,
            format!("OpenPGP subkey {fp} of {who} is not bound as a signing key"),
        ));
    }
    if let Some(at) = expiry(sub.key.created_at().as_secs(), binding)
        && now >= at
    {
        return Err((
            Why::ExpiredKey,
            format!("OpenPGP subkey {fp} of {who} expired on {}", when(at)),
        ));
    }
    Ok(())
}

/// Verifies an armored OpenPGP signature over `signed`. Ok: (primary user ID, fingerprint of
/// the key that signed).
pub(super) fn verify(
    armored: &[u8],
    signed: &[u8],
    keys: &[TrustedKey],
    now: u64,
) -> Result<(String, String), (Why, String)> {
    let (sig, _) = DetachedSignature::from_armor_single(armored).map_err(|e| {
        (
            Why::BadSignature,
            format!("unreadable OpenPGP signature: {e}"),
        )
    })?;
    let sig = sig.signature;
    let issuer = sig
        .issuer_fingerprint()
        .first()
        .map(|f| hex(f))
        .or_else(|| {
            sig.issuer_key_id()
                .first()
                .map(|k| k.as_ref().iter().map(|b| format!("{b:02X}")).collect())
        })
        .unwrap_or_else(|| "(no issuer)".into());
    if !matches!(
        sig.typ(),
        Some(SignatureType::Binary) | Some(SignatureType::Text)
    ) {
        return Err((
            Why::BadSignature,
            format!(
                "the OpenPGP signature by {issuer} is not a data signature ({:?})",
                sig.typ()
            ),
        ));
    }
    if let Some(h) = weak_hash(&sig) {
        return Err((
            Why::Unsupported,
            format!(
                "the OpenPGP signature by {issuer} is made with {h}, which capstan does not accept (MD5, SHA-1 and RIPEMD-160 are broken for signatures): sign with SHA-256 or stronger (gpg's default; `personal-digest-preferences SHA512 SHA384 SHA256` in gpg.conf)"
            ),
        ));
    }
    for TrustedKey { key } in keys {
        let bad = |e: pgp::errors::Error, fp: String| {
            (
                Why::BadSignature,
                format!(
                    "the OpenPGP signature by {fp} ({}) does not match the commit's content ({e}): the commit was changed after it was signed",
                    user_id(key)
                ),
            )
        };
        let primary = &key.primary_key;
        if issued_by(&sig, &primary.fingerprint(), &primary.legacy_key_id()) {
            primary_usable(key, now)?;
            primary_signs(key)?;
            sig.verify(primary, signed)
                .map_err(|e| bad(e, hex(&key.fingerprint())))?;
            return Ok((user_id(key), hex(&key.fingerprint())));
        }
        for sub in &key.public_subkeys {
            if issued_by(&sig, &sub.key.fingerprint(), &sub.key.legacy_key_id()) {
                primary_usable(key, now)?;
                subkey_usable(key, sub, now)?;
                sig.verify(&sub.key, signed)
                    .map_err(|e| bad(e, hex(&sub.key.fingerprint())))?;
                return Ok((user_id(key), hex(&sub.key.fingerprint())));
            }
        }
    }
    Err((
        Why::UntrustedKey,
        format!("signed with OpenPGP key {issuer}, which is not a trusted key"),
    ))
}
