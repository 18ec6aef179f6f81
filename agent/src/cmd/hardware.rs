//! `capstan hardware import`: EKS Anywhere's hardware CSV into a management cluster's directory
//! ([`capstan_layout::hardware`]): the Hardware and Rufio Machines in one file, the BMC
//! credentials in a second one encrypted with SOPS for the fleet's age recipients before
//! anything is written (bound to the management directory, `<mgmt>:<mgmt>`). Refuses a CSV with
//! any problem (each named with its line), a hostname already in the directory, and files that
//! exist; writes nothing then.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, bail};
use capstan_layout::addons::ENCRYPTED_FOR;
use capstan_layout::hardware;
use capstan_layout::sops;
use serde_json::Value;

use crate::cli::HardwareImportArgs;

/// The Hardware already in the management directory's plain files, by name.
fn existing(dir: &Path) -> anyhow::Result<Vec<String>> {
    let mut objects = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        let yaml = path.extension().is_some_and(|e| e == "yaml" || e == "yml");
        if !yaml || !path.is_file() {
            continue;
        }
        let text = std::fs::read_to_string(&path)?;
        if sops::is_sops(&text) {
            continue;
        }
        // A file that does not parse is validate's to report.
        if let Ok(docs) = capstan_templates::yaml::parse_values(&text) {
            objects.extend(docs);
        }
    }
    Ok(hardware::inventory(&objects).into_keys().collect())
}

pub(super) fn import(args: &HardwareImportArgs) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(&args.file)
        .with_context(|| format!("reading {}", args.file.display()))?;
    let machines = match hardware::read_csv(&text) {
        Ok(m) => m,
        Err(problems) => {
            for p in &problems {
                eprintln!("{}:{}: {}", args.file.display(), p.line, p.message);
            }
            eprintln!(
                "{}: {} problem(s); nothing written",
                args.file.display(),
                problems.len()
            );
            return Ok(ExitCode::FAILURE);
        }
    };
    let dir = args.repo.join("clusters").join(&args.management);
    if !dir.join(capstan_layout::config::FILE).is_file() {
        bail!(
            "{} is not a management cluster's directory (no {})",
            dir.display(),
            capstan_layout::config::FILE
        );
    }
    let name = match &args.name {
        Some(n) => n.clone(),
        None => args
            .file
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("inventory")
            .to_string(),
    };
    let plain_file = dir.join(format!("hardware-{name}.yaml"));
    let sealed_file = dir.join(format!("hardware-{name}-bmc.sops.yaml"));
    for f in [&plain_file, &sealed_file] {
        if f.exists() {
            bail!(
                "{} exists: import under another --name, or edit it",
                f.display()
            );
        }
    }
    let known = existing(&dir)?;
    let again: Vec<&str> = hardware::hostnames(&machines)
        .into_iter()
        .filter(|h| known.iter().any(|k| k == h))
        .collect();
    if !again.is_empty() {
        bail!(
            "{} already hold Hardware {}: a machine is imported once",
            dir.display(),
            again.join(", ")
        );
    }
    let mut objects: Vec<Value> = Vec::new();
    let mut secrets: Vec<Value> = Vec::new();
    let scope = sops::management_scope(&args.management, &args.management);
    for m in &machines {
        objects.push(hardware::hardware(
            m,
            &args.namespace,
            args.cluster.as_deref(),
        ));
        objects.extend(hardware::bmc_machine(m, &args.namespace));
        if let Some(mut s) = hardware::bmc_secret(m, &args.namespace) {
            s["metadata"]["annotations"] = serde_json::json!({ENCRYPTED_FOR: scope});
            secrets.push(s);
        }
    }
    let sealed = if secrets.is_empty() {
        None
    } else {
        let recipients = if args.recipients.is_empty() {
            super::secret::fleet_recipients(&args.repo, &args.management)?
        } else {
            args.recipients.clone()
        };
        let plain = capstan_templates::yaml::to_string_multi(&secrets);
        let sealed = sops::encrypt(
            &plain,
            &recipients,
            sops::DATA_ONLY,
            &sops::rfc3339(std::time::SystemTime::now()),
        )
        .map_err(|e| anyhow::anyhow!("{}: {e}", sealed_file.display()))?;
        sops::check(&sealed).map_err(|e| anyhow::anyhow!("{}: {e}", sealed_file.display()))?;
        Some((sealed, recipients.len()))
    };
    let header = format!(
        "# Imported by `capstan hardware import` from {}: {} machine(s){}.\n",
        args.file
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default(),
        machines.len(),
        args.cluster
            .as_ref()
            .map(|c| format!(", labelled for cluster {c}"))
            .unwrap_or_default()
    );
    std::fs::write(
        &plain_file,
        format!(
            "{header}{}",
            capstan_templates::yaml::to_string_multi(&objects)
        ),
    )
    .with_context(|| format!("writing {}", plain_file.display()))?;
    eprintln!(
        "{}: {} Hardware, {} BMC machine(s)",
        plain_file.display(),
        machines.len(),
        objects.len() - machines.len()
    );
    if let Some((sealed, n)) = sealed {
        std::fs::write(&sealed_file, sealed)
            .with_context(|| format!("writing {}", sealed_file.display()))?;
        eprintln!(
            "{}: {} BMC credentials Secret(s), encrypted for {n} recipient(s), {ENCRYPTED_FOR}: {scope}",
            sealed_file.display(),
            secrets.len()
        );
    }
    eprintln!(
        "the management identity writes these kinds once the agent is installed with `capstan install --allow hardware.tinkerbell.org --allow machines.bmc.tinkerbell.org`"
    );
    Ok(ExitCode::SUCCESS)
}
