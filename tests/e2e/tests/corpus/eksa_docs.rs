//! The cluster specs of EKS Anywhere's own documentation validate and render unchanged.
//!
//! The documentation ships in EKS Anywhere's Go module (`docs/content/en/docs/`), which the test
//! control plane already downloads for its CRDs; the specs are read from the module cache at test
//! time, never copied here. Every complete spec (a Cluster with its datacenter config) of the
//! getting-started and cluster-spec reference pages is extracted from its Markdown code block or
//! HTML `<pre>` block and given to capstan as written. A spec either validates and renders, or is
//! refused for a reason this test names: bottlerocket, which upstream Cluster API cannot
//! bootstrap, or a rule of EKS Anywhere's own validation the reference spec breaks (the vSphere
//! reference page, a catalogue of fields, taints its only worker group NoSchedule, which EKS-A
//! refuses for a management cluster too); nothing else.

use std::path::{Path, PathBuf};

use capstan_templates::diag::Code;
use capstan_templates::release::{ReleaseManifest, Sample};
use capstan_templates::spec::{SourceDoc, parse_cluster};
use capstan_templates::{render, yaml};

/// Pages holding complete cluster specs.
const PAGES: &[&str] = &[
    "getting-started/docker/_index.md",
    "getting-started/vsphere/vsphere-spec.md",
    "getting-started/vsphere/vsphere-getstarted.md",
];

/// Code blocks (fenced, dedented by their fence) and `<pre>` blocks (tags stripped) of a page.
fn blocks(page: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut lines = page.lines();
    while let Some(l) = lines.next() {
        let trimmed = l.trim_start();
        if let Some(lang) = trimmed.strip_prefix("```") {
            if !(lang.is_empty() || lang.starts_with("yaml") || lang.starts_with("yml")) {
                // Another language: skip to its closing fence.
                for b in lines.by_ref() {
                    if b.trim_start().starts_with("```") {
                        break;
                    }
                }
                continue;
            }
            let indent = l.len() - trimmed.len();
            let mut block = String::new();
            for b in lines.by_ref() {
                if b.trim_start().starts_with("```") {
                    break;
                }
                block.push_str(
                    b.get(indent.min(b.len() - b.trim_start().len())..)
                        .unwrap_or(""),
                );
                block.push('\n');
            }
            out.push(block);
        } else if let Some(start) = l.find("<pre>") {
            let mut block = format!("{}\n", &l[start + 5..]);
            for b in lines.by_ref() {
                if let Some(end) = b.find("</pre>") {
                    block.push_str(&b[..end]);
                    break;
                }
                block.push_str(b);
                block.push('\n');
            }
            out.push(strip_html(&block));
        }
    }
    out
}

/// Removes HTML tags and the explanatory links after each line, decodes entities.
fn strip_html(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        // Everything from a link on is an annotation of the line.
        let line = line.split("<a ").next().unwrap_or(line);
        let mut clean = String::new();
        let mut in_tag = false;
        for c in line.chars() {
            match c {
                '<' => in_tag = true,
                '>' if in_tag => in_tag = false,
                c if !in_tag => clean.push(c),
                _ => {}
            }
        }
        let clean = clean
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", "\"")
            .replace("&amp;", "&");
        out.push_str(clean.trim_end());
        out.push('\n');
    }
    out
}

fn docs_dir() -> PathBuf {
    let dirs = capstan_harness::crds::module_dirs().expect("EKS Anywhere's module");
    let (_, dir) = &dirs["github.com/aws/eks-anywhere"];
    dir.join("docs/content/en/docs")
}

#[test]
fn eks_anywhere_documentation_specs_validate_and_render_unchanged() {
    let dir = docs_dir();
    let mut rendered = Vec::new();
    let mut refused = Vec::new();
    for page in PAGES {
        let text = std::fs::read_to_string(dir.join(page)).unwrap();
        for (i, block) in blocks(&text).into_iter().enumerate() {
            // A complete spec: the Cluster and its datacenter config.
            if !block.contains("kind: Cluster\n")
                || !(block.contains("kind: DockerDatacenterConfig\n")
                    || block.contains("kind: VSphereDatacenterConfig\n"))
            {
                continue;
            }
            let name = format!("{page}#{i}");
            let docs: Vec<SourceDoc> = yaml::parse(&block)
                .unwrap_or_else(|e| panic!("{name}: {e}\n{block}"))
                .into_iter()
                .map(|doc| SourceDoc {
                    file: Path::new(page).to_path_buf(),
                    doc,
                })
                .collect();
            let (cluster, diags) = parse_cluster(&docs);
            let errors: Vec<_> = diags.iter().filter(|d| d.is_error()).collect();
            match cluster {
                Some(c) => {
                    let resolved = ReleaseManifest::embedded().resolve(&Sample, &c, None);
                    let release = resolved
                        .release
                        .unwrap_or_else(|| panic!("{name}: {:#?}", resolved.diagnostics));
                    let objects = render::render(&c, &release).unwrap();
                    assert!(objects.iter().any(|o| o["kind"] == "KubeadmControlPlane"));
                    rendered.push(name);
                }
                None => {
                    // Refused only for what capstan documents it cannot do, or what EKS-A refuses.
                    for e in &errors {
                        assert!(
                            e.code == Code::InvalidValue
                                && (e.message.contains("bottlerocket")
                                    || e.message
                                        .contains("without NoSchedule or NoExecute taints")),
                            "{name} refused for an undocumented reason: {e}\n{block}"
                        );
                    }
                    assert!(!errors.is_empty(), "{name}");
                    refused.push(name);
                }
            }
        }
    }
    eprintln!("documentation specs rendered: {rendered:?}; refused: {refused:?}");
    assert!(
        rendered
            .iter()
            .any(|n| n.starts_with("getting-started/docker/")),
        "the docker getting-started spec renders: {rendered:?}"
    );
    assert!(
        refused
            .iter()
            .any(|n| n.starts_with("getting-started/vsphere/vsphere-spec")),
        "the vSphere reference spec is read (and refused for bottlerocket): {refused:?}"
    );
}

#[test]
fn documentation_blocks_are_extracted_as_written() {
    let page = "```sh\nls\n```\ntext\n   ```yaml\n   kind: Cluster\n   spec:\n     a: 1\n   ```\n<pre>\nkind: <span>\"X\"</span>    <a href=\"#k\"># note</a>\n</pre>\n";
    assert_eq!(
        blocks(page),
        vec![
            "kind: Cluster\nspec:\n  a: 1\n".to_string(),
            "\nkind: \"X\"\n".to_string()
        ]
    );
}
