//! `spec.licenseToken`: the extended-support license of EKS Anywhere, checked for its form.
//!
//! EKS Anywhere wants a license token for a Kubernetes version past its end of standard support.
//! The token is a JWT signed by AWS, whose claims hold the licence's end (`endValidity`); EKS
//! Anywhere's CLI checks the signature with a public key built into its binaries (not in its
//! source), that the licence has not ended, and that no other cluster uses the same token. capstan
//! carries the token on the EKS Anywhere Cluster object as written and checks what it can
//! without that key and without a clock (validation is a pure function of the repository): the
//! token is a JWT, and its claims name an end of validity in RFC 3339. The token itself is never
//! repeated in a message.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Map, Value};

use super::At;
use crate::diag::Code;

const FIELD: &str = "spec.licenseToken";

/// Checks the token's form; errors are reported at `spec.licenseToken`.
pub(super) fn license_token(at: &mut At, token: Option<&String>) {
    let Some(token) = token else { return };
    if let Err(why) = claims(token).and_then(|c| end_of_validity(&c)) {
        at.err(Code::InvalidValue, FIELD, why);
    }
}

/// The claims of a JWT (`header.claims.signature`, each part base64url without padding), or why
/// the text is not one.
fn claims(token: &str) -> Result<Map<String, Value>, String> {
    let parts: Vec<&str> = token.trim().split('.').collect();
    let not_jwt = || {
        "licenseToken is not a license token: EKS Anywhere's tokens are signed JWTs (three base64url parts joined by dots), as AWS issues them".to_string()
    };
    let [header, claims, signature] = parts[..] else {
        return Err(not_jwt());
    };
    if signature.is_empty() {
        return Err(not_jwt());
    }
    let object = |part: &str| -> Option<Map<String, Value>> {
        let bytes = URL_SAFE_NO_PAD.decode(part).ok()?;
        match serde_json::from_slice(&bytes).ok()? {
            Value::Object(m) => Some(m),
            _ => None,
        }
    };
    let header = object(header).ok_or_else(not_jwt)?;
    if !header.get("alg").is_some_and(Value::is_string) {
        return Err(not_jwt());
    }
    object(claims).ok_or_else(not_jwt)
}

/// The licence's end, which EKS Anywhere reads from the `endValidity` claim (RFC 3339).
fn end_of_validity(claims: &Map<String, Value>) -> Result<jiff::Timestamp, String> {
    let Some(end) = claims.get("endValidity").and_then(Value::as_str) else {
        return Err("licenseToken has no endValidity claim, so it is not a valid license (EKS Anywhere refuses it too)".into());
    };
    end.parse::<jiff::Timestamp>().map_err(|_| {
        "licenseToken's endValidity claim is not an RFC 3339 time, so EKS Anywhere could not read the licence's end".into()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jwt(header: &str, claims: &str) -> String {
        format!(
            "{}.{}.c2lnbmF0dXJl",
            URL_SAFE_NO_PAD.encode(header),
            URL_SAFE_NO_PAD.encode(claims)
        )
    }

    const HEADER: &str = r#"{"alg":"RS256","typ":"JWT"}"#;

    #[test]
    fn a_token_of_the_right_form_is_taken_and_every_wrong_form_is_named() {
        let good = jwt(
            HEADER,
            r#"{"endValidity":"2027-06-30T00:00:00Z","sub":"c"}"#,
        );
        assert!(claims(&good).and_then(|c| end_of_validity(&c)).is_ok());
        let cases = [
            ("abc".to_string(), "not a license token"),
            (format!("{good}.x"), "not a license token"),
            (jwt(HEADER, "[1]"), "not a license token"),
            (jwt(r#"{"typ":"JWT"}"#, "{}"), "not a license token"),
            (
                good.rsplit_once('.').unwrap().0.to_string() + ".",
                "not a license token",
            ),
            (jwt(HEADER, r#"{"sub":"c"}"#), "no endValidity claim"),
            (
                jwt(HEADER, r#"{"endValidity":"next june"}"#),
                "not an RFC 3339 time",
            ),
        ];
        for (token, want) in cases {
            let err = claims(&token)
                .and_then(|c| end_of_validity(&c))
                .expect_err(&token);
            assert!(err.contains(want), "{token}: {err}");
            assert!(!err.contains(&token), "the token is repeated: {err}");
        }
    }
}
