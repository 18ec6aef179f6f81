//! `capstan secret encrypt`: a Secret's data encrypted with SOPS for the fleet's age recipients
//! ([`capstan_layout::sops::encrypt`]), bound to its place in the repository (the annotation
//! [`capstan_layout::addons::ENCRYPTED_FOR`], from the file's path), checked as `validate` will
//! check it before anything is printed or written. Needs public keys only. A file in a cluster's
//! own directory (applied on the management cluster) is bound to `<management>:<cluster>`, one
//! in add-ons to the cluster (or `<management>/<set>`).

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, bail};
use capstan_layout::addons::{ENCRYPTED_FOR, place_of};
use capstan_layout::sops;
use serde_json::Value;

use crate::cli::SecretEncryptArgs;

/// The recipients of `clusters/<mgmt>/fleet.yaml` under `root`.
pub(super) fn fleet_recipients(
    root: &Path,
    mgmt: &str,
) -> anyhow::Result<Vec<age::x25519::Recipient>> {
    let file = root.join("clusters").join(mgmt).join("fleet.yaml");
    let text = std::fs::read_to_string(&file).with_context(|| {
        format!(
            "reading {} (its spec.sops.ageRecipients; or give --age)",
            file.display()
        )
    })?;
    let (config, diags) = capstan_layout::config::parse(Path::new("fleet.yaml"), &text);
    let Some(config) = config else {
        bail!(
            "{} has errors: {}",
            file.display(),
            diags
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        );
    };
    if config.sops_recipients.is_empty() {
        bail!(
            "{} lists no spec.sops.ageRecipients: add the fleet's age public keys there (or give --age)",
            file.display()
        );
    }
    config
        .sops_recipients
        .iter()
        .map(|r| r.parse().map_err(|e| anyhow::anyhow!("{r}: {e}")))
        .collect()
}

pub(super) fn encrypt(args: &SecretEncryptArgs) -> anyhow::Result<ExitCode> {
    let file = &args.file;
    let absolute = std::path::absolute(file)?;
    let Some((root, mgmt, scope)) = place_of(&absolute) else {
        bail!(
            "{} is not in a cluster's directory, its addons/ or a shared set's directory (clusters/<mgmt>/, clusters/<mgmt>/workload-clusters/<name>/, …/addons/, clusters/<mgmt>/addons/<set>/): encrypted Secrets are read there only",
            file.display()
        );
    };
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    if sops::is_sops(&text) {
        bail!(
            "{} is encrypted already (edit it with `sops`)",
            file.display()
        );
    }
    let mut docs = capstan_templates::yaml::parse_values(&text)
        .map_err(|e| anyhow::anyhow!("{}:{}: {}", file.display(), e.pos.line, e.message))?;
    for (i, d) in docs.iter_mut().enumerate() {
        let kind = d.get("kind").and_then(Value::as_str).unwrap_or("");
        let api = d.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        if kind != "Secret" || api != "v1" {
            bail!(
                "{}: document {} is a {kind:?}, not a v1 Secret: only Secrets are kept encrypted",
                file.display(),
                i + 1
            );
        }
        let annotations = &mut d["metadata"]["annotations"];
        if !annotations.is_object() {
            *annotations = Value::Object(Default::default());
        }
        match annotations.get(ENCRYPTED_FOR).and_then(Value::as_str) {
            Some(s) if s != scope => bail!(
                "{}: document {} says {ENCRYPTED_FOR}: {s}, but where the file is says {scope}",
                file.display(),
                i + 1
            ),
            _ => annotations[ENCRYPTED_FOR] = Value::String(scope.clone()),
        }
    }
    let recipients = if args.recipients.is_empty() {
        fleet_recipients(&root, &mgmt)?
    } else {
        args.recipients.clone()
    };
    let plain = capstan_templates::yaml::to_string_multi(&docs);
    let sealed = sops::encrypt(
        &plain,
        &recipients,
        sops::DATA_ONLY,
        &sops::rfc3339(std::time::SystemTime::now()),
    )
    .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    // What validate will ask of it.
    sops::check(&sealed).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    if args.in_place {
        std::fs::write(file, &sealed).with_context(|| format!("writing {}", file.display()))?;
        eprintln!(
            "{}: encrypted for {} recipient(s), {ENCRYPTED_FOR}: {scope}",
            file.display(),
            recipients.len()
        );
    } else {
        print!("{sealed}");
    }
    Ok(ExitCode::SUCCESS)
}
