//! Scaffold templates: the files `capstan init` and `capstan new cluster` write.
//!
//! Like the provider templates these are files under `templates/scaffold/`, rendered with strict
//! undefined variables. What values they receive, and the validation of the result before
//! anything is written, belong to the layout crate's scaffolder.

use std::sync::OnceLock;

use minijinja::{Environment, UndefinedBehavior};
use serde::Serialize;

/// Errors of scaffold rendering.
#[derive(Debug, thiserror::Error)]
pub enum ScaffoldError {
    /// A template failed.
    #[error("scaffold template {template}: {message}")]
    Template {
        /// Template file.
        template: String,
        /// What went wrong.
        message: String,
    },
}

const TEMPLATES: &[(&str, &str)] = &[
    (
        "scaffold/cluster.yaml.j2",
        include_str!("../scaffold/cluster.yaml.j2"),
    ),
    (
        "scaffold/vsphere.yaml.j2",
        include_str!("../scaffold/vsphere.yaml.j2"),
    ),
    (
        "scaffold/nutanix.yaml.j2",
        include_str!("../scaffold/nutanix.yaml.j2"),
    ),
    (
        "scaffold/tinkerbell.yaml.j2",
        include_str!("../scaffold/tinkerbell.yaml.j2"),
    ),
    (
        "scaffold/README.md.j2",
        include_str!("../scaffold/README.md.j2"),
    ),
];

fn environment() -> &'static Environment<'static> {
    static ENV: OnceLock<Environment<'static>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = Environment::new();
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        // Values are quoted explicitly with `tojson`; no implicit escaping by file extension.
        env.set_auto_escape_callback(|_| minijinja::AutoEscape::None);
        let syntax = minijinja::syntax::SyntaxConfig::builder()
            .keep_trailing_newline(true)
            .build()
            .expect("default syntax");
        env.set_syntax(syntax);
        for (name, src) in TEMPLATES {
            env.add_template(name, src)
                .expect("embedded scaffold templates compile; checked by tests");
        }
        env
    })
}

/// Renders `scaffold/<name>` with the values as `v`.
pub fn render_scaffold<T: Serialize>(name: &str, values: &T) -> Result<String, ScaffoldError> {
    let template = format!("scaffold/{name}");
    let err = |e: minijinja::Error| {
        // Include the causes (an error inside an included template is reported as its cause).
        let mut message = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            message.push_str(&format!(": {s}"));
            source = s.source();
        }
        ScaffoldError::Template {
            template: template.clone(),
            message,
        }
    };
    let ctx = minijinja::context! { v => minijinja::Value::from(minijinja::value::Serde(values)) };
    environment()
        .get_template(&template)
        .map_err(err)?
        .render(ctx)
        .map_err(err)
}
