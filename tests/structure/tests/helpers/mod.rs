//! Test helpers written once: the free functions of the test and bench code (integration tests,
//! benches, the harness and the e2e support crate) by name, and the names that more than one
//! file defines ([`the_test_helpers_live_once`](super::the_test_helpers_live_once)).
//!
//! A helper is a free function (at a file's top level, in an inline module, or inside another
//! function), not a method, not a `#[test]`, and not under `#[cfg(test)]`. A name two files
//! define is either one helper written twice (it belongs in `capstan-harness` or
//! `agent/benches/support`) or two helpers that do different things under one name (one of
//! them should say what it does).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use syn::visit::Visit;

use super::is_test;

/// The folders of test code, relative to the workspace: every crate's `tests/` and `benches/`,
/// and the sources of the crates that exist for tests.
const TEST_CODE: &[&str] = &[
    "agent/tests",
    "agent/benches",
    "client/tests",
    "client/benches",
    "layout/tests",
    "layout/benches",
    "plan/tests",
    "plan/benches",
    "templates/tests",
    "templates/benches",
    "tests/harness/src",
    "tests/harness/tests",
    "tests/harness/examples",
    "tests/e2e/src",
    "tests/e2e/tests",
    "tests/structure/src",
    "tests/structure/tests",
];

/// Names several files may define: entry points, one per binary, that no test calls.
const NOT_HELPERS: &[&str] = &["main"];

/// Names more than one file may define, each with why it cannot be shared: none today (a
/// helper that only shares its name with another is renamed for what it does).
const ALLOWED: &[(&str, &str)] = &[];

/// Whether an item is a test function (`#[test]`, `#[tokio::test]`, `#[…::test(…)]`).
fn is_test_fn(attrs: &[syn::Attribute]) -> bool {
    attrs
        .iter()
        .any(|a| a.path().segments.last().is_some_and(|s| s.ident == "test"))
}

/// Collects the names of the free functions of one file.
struct FreeFns<'a> {
    out: &'a mut BTreeSet<String>,
}

impl<'ast> Visit<'ast> for FreeFns<'_> {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if !is_test(&m.attrs) {
            syn::visit::visit_item_mod(self, m);
        }
    }
    // Methods are not free functions; functions nested in them are left out with them.
    fn visit_item_impl(&mut self, _: &'ast syn::ItemImpl) {}
    fn visit_item_trait(&mut self, _: &'ast syn::ItemTrait) {}
    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        if is_test(&f.attrs) {
            return;
        }
        let name = f.sig.ident.to_string();
        if !is_test_fn(&f.attrs) && !NOT_HELPERS.contains(&name.as_str()) {
            self.out.insert(name);
        }
        syn::visit::visit_item_fn(self, f);
    }
}

/// The free functions a source text defines, by name.
pub fn free_fns(text: &str) -> BTreeSet<String> {
    let ast = syn::parse_file(text).unwrap_or_else(|e| panic!("{e}"));
    let mut out = BTreeSet::new();
    FreeFns { out: &mut out }.visit_file(&ast);
    out
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<PathBuf> = entries.map(|e| e.unwrap().path()).collect();
    paths.sort();
    for p in paths {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The names (not in [`ALLOWED`]) that more than one of `files` (shown name, text) defines,
/// with the files that define each.
pub fn duplicates<'a>(
    files: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> BTreeMap<String, Vec<String>> {
    let mut by_name: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (file, text) in files {
        for name in free_fns(text) {
            by_name.entry(name).or_default().push(file.to_string());
        }
    }
    by_name.retain(|name, files| files.len() > 1 && !ALLOWED.iter().any(|(a, _)| a == name));
    by_name
}

/// The test code of the workspace at `root`: (path relative to `root`, text).
pub fn test_code(root: &Path) -> Vec<(String, String)> {
    let mut files = Vec::new();
    for dir in TEST_CODE {
        rust_files(&root.join(dir), &mut files);
    }
    files
        .into_iter()
        .map(|f| {
            let text =
                std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            let shown = f.strip_prefix(root).unwrap_or(&f).display().to_string();
            (shown, text)
        })
        .collect()
}
