//! Decrypting what the repository keeps encrypted with SOPS, in memory, with the age
//! identities of a Secret the admin names on the management cluster (never from Git): the
//! add-ons of a workload cluster ([`super::addons`]), and the Secrets of a cluster's own
//! directory ([`capstan_layout::fleet::sealed`]) just before the cluster is planned.
//!
//! A sealed Secret's rendered object holds its ciphertext; [`open_sealed`] swaps in the
//! decrypted values, and gives the object a content hash keyed by the file's data key
//! ([`capstan_layout::sops::Opened::hash`]): the hash recorded on the object and in the
//! inventory says nothing of a value, and stays the same when the file is re-encrypted for new
//! recipients, so a key rotation writes nothing. Whatever fails (no Secret, a key that is not a
//! recipient, a MAC that does not match) refuses the cluster's revision, naming the file:
//! nothing of it is applied, the other clusters go on.

use std::collections::HashMap;

use capstan_layout::fleet::sealed::SealedObject;
use capstan_layout::{Objects, Rendered};
use kube::Client;
use kube::api::Api;

/// The Secret of the age identities encrypted Secrets are decrypted with, unless one is named
/// (in [`crate::status::NAMESPACE`]).
pub const SOPS_AGE_SECRET: &str = "capstan-sops-age";

/// The identities' Secret of a pass (`--sops-age-secret`, else [`SOPS_AGE_SECRET`]).
pub(crate) fn sops_secret(opts: &super::Options) -> (String, String) {
    opts.sops_age_secret.clone().unwrap_or_else(|| {
        (
            crate::status::NAMESPACE.to_string(),
            SOPS_AGE_SECRET.to_string(),
        )
    })
}

/// The age identities of the Secret `ns/name` on the management cluster: every key ending in
/// `.agekey` (as Flux names them), one identity per line, comments and blank lines aside.
pub(crate) async fn sops_identities(
    mgmt: &Client,
    (ns, name): &(String, String),
) -> Result<Vec<age::x25519::Identity>, String> {
    use k8s_openapi::api::core::v1::Secret;
    let api: Api<Secret> = Api::namespaced(mgmt.clone(), ns);
    let secret = api
        .get_opt(name)
        .await
        .map_err(|e| format!("reading Secret {ns}/{name}, the SOPS identities: {e}"))?
        .ok_or_else(|| {
            format!("some add-ons are encrypted with SOPS, and Secret {ns}/{name} (the fleet's age identity, a key ending in .agekey) does not exist")
        })?;
    let mut out = Vec::new();
    for (key, value) in secret.data.unwrap_or_default() {
        if !key.ends_with(".agekey") {
            continue;
        }
        let text = String::from_utf8(value.0)
            .map_err(|_| format!("Secret {ns}/{name}: key {key} is not text"))?;
        for (i, line) in text.lines().map(str::trim).enumerate() {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            // The error of a bad line says which line, never what it holds.
            out.push(line.parse::<age::x25519::Identity>().map_err(|_| {
                format!("Secret {ns}/{name}: line {} of key {key} is not an age identity (AGE-SECRET-KEY-1…)", i + 1)
            })?);
        }
    }
    if out.is_empty() {
        return Err(format!(
            "Secret {ns}/{name} holds no age identity (a key ending in .agekey, one AGE-SECRET-KEY-1… per line)"
        ));
    }
    Ok(out)
}

/// `objects` with every sealed Secret of `sealed` decrypted; the first that does not decrypt
/// is the error, named by its file and line (never a value).
pub(crate) async fn open_sealed(
    mgmt: &Client,
    secret: &(String, String),
    sealed: &[SealedObject],
    objects: Objects,
) -> Result<Objects, String> {
    if sealed.is_empty() {
        return Ok(objects);
    }
    let ids = sops_identities(mgmt, secret).await?;
    open_with(&ids, sealed, objects)
}

/// [`open_sealed`] with the identities in hand.
pub(crate) fn open_with(
    ids: &[age::x25519::Identity],
    sealed: &[SealedObject],
    objects: Objects,
) -> Result<Objects, String> {
    let mut files: HashMap<*const str, capstan_layout::sops::Opened> = HashMap::new();
    let mut out: Vec<Rendered> = objects.iter().cloned().collect();
    for s in sealed {
        // Not rendered (a version step's objects): nothing of it is applied either.
        let Some(at) = out.iter().position(|o| {
            o.kind() == "Secret"
                && o.api_version() == "v1"
                && o.namespace() == s.namespace
                && o.name() == s.name
        }) else {
            continue;
        };
        let opened = match files.entry(std::sync::Arc::as_ptr(&s.sealed.text)) {
            std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => v.insert(
                capstan_layout::sops::decrypt_keyed(&s.sealed.text, ids).map_err(|e| {
                    format!(
                        "Secret {}/{} ({}): SOPS: {e}",
                        s.namespace,
                        s.name,
                        s.place()
                    )
                })?,
            ),
        };
        let doc = opened.documents.get(s.sealed.doc).ok_or_else(|| {
            format!(
                "Secret {}/{} ({}): SOPS: the document is missing",
                s.namespace,
                s.name,
                s.place()
            )
        })?;
        // The rendered object with the plain values: everything else of it (its identity, its
        // labels and type) is what was validated, and the MAC covers it.
        let mut v = out[at].value();
        for key in ["data", "stringData"] {
            match doc.get(key) {
                Some(plain) => v[key] = plain.clone(),
                None => {
                    if let Some(m) = v.as_object_mut() {
                        m.remove(key);
                    }
                }
            }
        }
        let text = capstan_templates::JsonText::capture(&v).1;
        out[at] = Rendered::with_hash(&v, opened.hash(&text));
    }
    Ok(out.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn sealed_objects(text: &str, names: &[&str]) -> Vec<SealedObject> {
        let text: std::sync::Arc<str> = text.into();
        names
            .iter()
            .enumerate()
            .map(|(i, n)| SealedObject {
                namespace: "ns".into(),
                name: n.to_string(),
                sealed: capstan_layout::addons::Sealed {
                    text: text.clone(),
                    doc: i,
                },
                file: "clusters/m/c.yaml".into(),
                line: 3,
            })
            .collect()
    }

    fn secret(name: &str, data: Value) -> Value {
        serde_json::json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": "ns", "annotations": {"capstan.dev/encrypted-for": "m:m"}},
            "type": "Opaque", "data": data})
    }

    /// The file as the layout sees it: encrypted, then its documents without `sops`.
    fn fixture(key: &age::x25519::Identity, plain: &[Value]) -> (String, Objects) {
        let yaml: String = plain
            .iter()
            .map(|v| format!("---\n{}", serde_json::to_string(v).unwrap()))
            .collect::<Vec<_>>()
            .join("\n");
        let text = capstan_layout::sops::encrypt(
            &yaml,
            &[key.to_public()],
            capstan_layout::sops::DATA_ONLY,
            "2026-12-03T00:00:00Z",
        )
        .unwrap();
        let docs = capstan_templates::yaml::parse(&text).unwrap();
        let rendered: Objects = docs
            .into_iter()
            .map(|d| {
                let mut v = d.value;
                v.as_object_mut().unwrap().remove("sops");
                Rendered::new(&v)
            })
            .collect();
        (text, rendered)
    }

    #[test]
    fn sealed_secrets_are_opened_with_a_keyed_hash_that_survives_re_encryption() {
        let key = age::x25519::Identity::generate();
        let a = secret(
            "c-vsphere-credentials",
            serde_json::json!({"password": "aHVudGVyMg=="}),
        );
        let b = secret("c-other", serde_json::json!({"token": "dG9rZW4="}));
        let (text, rendered) = fixture(&key, &[a.clone(), b.clone()]);
        assert!(rendered.iter().all(|o| o.json().contains("ENC[AES256_GCM")));
        let sealed = sealed_objects(&text, &["c-vsphere-credentials", "c-other"]);
        let opened = open_with(std::slice::from_ref(&key), &sealed, rendered.clone()).unwrap();
        let values: Vec<Value> = opened.iter().map(Rendered::value).collect();
        assert_eq!(values[0]["data"], a["data"]);
        assert_eq!(values[1]["data"], b["data"]);
        // Not the plain content hash: nothing to test a guessed value against.
        let plain_hash =
            capstan_templates::identity::hash_json(&opened.iter().next().unwrap().json());
        assert_ne!(opened.iter().next().unwrap().hash(), plain_hash);
        // Re-encrypted for another key with the same data key (what `sops updatekeys` does) is
        // out of reach here; a new encryption (new data key) changes the hash, a second
        // opening of the same file does not.
        let again = open_with(std::slice::from_ref(&key), &sealed, rendered).unwrap();
        let hashes = |o: &Objects| o.iter().map(|r| r.hash().to_string()).collect::<Vec<_>>();
        assert_eq!(hashes(&opened), hashes(&again));
    }

    #[test]
    fn a_foreign_key_or_a_changed_file_names_the_file_and_shows_no_value() {
        let key = age::x25519::Identity::generate();
        let a = secret("c-creds", serde_json::json!({"password": "aHVudGVyMg=="}));
        let (text, rendered) = fixture(&key, std::slice::from_ref(&a));
        let sealed = sealed_objects(&text, &["c-creds"]);
        let other = age::x25519::Identity::generate();
        let e = open_with(&[other], &sealed, rendered.clone()).unwrap_err();
        assert!(
            e.contains("clusters/m/c.yaml:3") && e.contains("Secret ns/c-creds"),
            "{e}"
        );
        let tampered = text.replace("c-creds", "c-crees");
        let sealed = sealed_objects(&tampered, &["c-creds"]);
        let e = open_with(&[key], &sealed, rendered).unwrap_err();
        assert!(
            e.contains("MAC") || e.contains("tampered") || e.contains("SOPS"),
            "{e}"
        );
        assert!(!e.contains("aHVudGVyMg==") && !e.contains("hunter2"), "{e}");
    }
}
