//! The shape of the product's code, checked on every CI run: no module circles in any crate, and
//! no function over [`MAX_FN_LINES`] lines outside tests.
//!
//! Why a test and not a review rule: the crates layer one way because Cargo refuses anything
//! else, but inside a crate nothing stops `reconcile` from reaching into `dashboard` while
//! `dashboard` reaches back. A circle makes the drawing in each `lib.rs` untrue and ties modules
//! that should change alone; a function of hundreds of lines hides decisions that belong in a
//! pure, table-tested function. Both creep in one line at a time, so a check fails on the first.
//!
//! What counts as a circle: at every level of a crate's module tree, the sibling modules (a
//! module together with everything below it) must depend on each other one way only. A
//! dependency is a path a file names — `use crate::a::b`, `super::x`, `self::y`, or a child
//! module's name — resolved to the module that defines it; a parent and its own children are
//! one unit at the parent's level (a child using its parent's items is not a circle). Code under
//! `#[cfg(test)]` is not product code and is left out of both checks.
//!
//! `cargo test -p capstan-structure -- --nocapture` prints the figures.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use syn::visit::Visit;

mod helpers;

/// The longest function allowed outside tests.
const MAX_FN_LINES: usize = 200;

/// The product's crates: (name, root file), relative to the workspace.
const CRATES: &[(&str, &str)] = &[
    ("capstan-templates", "templates/src/lib.rs"),
    ("capstan-layout", "layout/src/lib.rs"),
    ("capstan-plan", "plan/src/lib.rs"),
    ("capstan-source", "source/src/lib.rs"),
    ("capstan-client", "client/src/lib.rs"),
    ("capstan", "agent/src/lib.rs"),
    ("capstan-harness", "tests/harness/src/lib.rs"),
    ("capstan-e2e", "tests/e2e/src/lib.rs"),
];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A module path inside a crate: `[]` is the root, `["reconcile", "pass"]` a module below it.
type ModPath = Vec<String>;

/// One module of a crate: its file and the module paths it names.
struct Module {
    file: PathBuf,
    names: Vec<Named>,
}

/// A path a file names, made absolute; `child`: it began with a bare name, so it names a module
/// only if the first `child` segments of `path` are one (a child module of the file's).
struct Named {
    path: ModPath,
    shown: String,
    child: Option<usize>,
}

/// Whether an item carries `#[cfg(test)]` (alone or in an `all(...)`/`any(...)`).
fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.meta.require_list().is_ok_and(|l| {
                l.tokens
                    .to_string()
                    .split(|c: char| !c.is_alphanumeric() && c != '_')
                    .any(|w| w == "test")
            })
    })
}

/// A source text parsed, without what is under `#[cfg(test)]` (modules, impls, functions,
/// at any depth): the product code every check below reads.
fn product_code(text: &str) -> syn::File {
    struct Strip;
    impl syn::visit_mut::VisitMut for Strip {
        fn visit_file_mut(&mut self, f: &mut syn::File) {
            f.items.retain(|i| !item_is_test(i));
            syn::visit_mut::visit_file_mut(self, f);
        }
        fn visit_item_mod_mut(&mut self, m: &mut syn::ItemMod) {
            if let Some((_, items)) = &mut m.content {
                items.retain(|i| !item_is_test(i));
            }
            syn::visit_mut::visit_item_mod_mut(self, m);
        }
        fn visit_item_impl_mut(&mut self, i: &mut syn::ItemImpl) {
            i.items.retain(|item| match item {
                syn::ImplItem::Fn(f) => !is_test(&f.attrs),
                _ => true,
            });
            syn::visit_mut::visit_item_impl_mut(self, i);
        }
    }
    fn item_is_test(i: &syn::Item) -> bool {
        match i {
            syn::Item::Mod(m) => is_test(&m.attrs),
            syn::Item::Impl(m) => is_test(&m.attrs),
            syn::Item::Fn(m) => is_test(&m.attrs),
            syn::Item::Use(m) => is_test(&m.attrs),
            _ => false,
        }
    }
    let mut ast = syn::parse_file(text).unwrap();
    syn::visit_mut::VisitMut::visit_file_mut(&mut Strip, &mut ast);
    ast
}

/// Reads a crate's module tree from its root file, following `mod x;` declarations.
fn read_crate(root: &Path) -> BTreeMap<ModPath, Module> {
    let mut out = BTreeMap::new();
    let mut todo = vec![(Vec::<String>::new(), root.to_path_buf())];
    while let Some((path, file)) = todo.pop() {
        let text =
            std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let ast = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        // Where this module's `mod x;` files live: beside lib.rs/main.rs/mod.rs, else in a
        // folder named as the file.
        let dir = match file.file_name().and_then(|n| n.to_str()) {
            Some("lib.rs" | "main.rs" | "mod.rs") => file.parent().unwrap().to_path_buf(),
            _ => file.with_extension(""),
        };
        let mut inline = Vec::new();
        for item in &ast.items {
            if let syn::Item::Mod(m) = item
                && !is_test(&m.attrs)
            {
                let name = m.ident.to_string();
                let mut child = path.clone();
                child.push(name.clone());
                match &m.content {
                    None => {
                        let flat = dir.join(format!("{name}.rs"));
                        let nested = dir.join(&name).join("mod.rs");
                        let f = if flat.exists() { flat } else { nested };
                        todo.push((child, f));
                    }
                    Some(_) => inline.push(child),
                }
            }
        }
        let mut names = Vec::new();
        let mut v = Names {
            at: path.clone(),
            out: &mut names,
        };
        v.visit_file(&ast);
        for child in inline {
            // Inline modules (rare outside tests) are read as part of their file.
            out.entry(child).or_insert(Module {
                file: file.clone(),
                names: Vec::new(),
            });
        }
        out.insert(path, Module { file, names });
    }
    out
}

/// Collects the module paths a file names (`crate::`, `super::`, `self::`, or a first segment
/// that may be a child or sibling module), skipping `#[cfg(test)]` items.
struct Names<'a> {
    at: ModPath,
    out: &'a mut Vec<Named>,
}

impl Names<'_> {
    fn record(&mut self, segments: Vec<String>) {
        let mut base = self.at.clone();
        let mut rest = segments.as_slice();
        let mut child = None;
        match rest.first().map(String::as_str) {
            Some("crate") => {
                base.clear();
                rest = &rest[1..];
            }
            Some("self") => rest = &rest[1..],
            Some("super") => {
                while rest.first().map(String::as_str) == Some("super") {
                    base.pop();
                    rest = &rest[1..];
                }
            }
            // A bare first segment: a child module of this one, or anything else in scope (an
            // external crate, an item): it counts only if the child exists.
            _ => child = Some(base.len() + 1),
        }
        let mut path = base;
        path.extend(rest.iter().cloned());
        self.out.push(Named {
            path,
            shown: segments.join("::"),
            child,
        });
    }
}

fn use_paths(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            use_paths(&p.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) => {
            let mut p = prefix.clone();
            if n.ident != "self" {
                p.push(n.ident.to_string());
            }
            out.push(p);
        }
        syn::UseTree::Rename(r) => {
            let mut p = prefix.clone();
            p.push(r.ident.to_string());
            out.push(p);
        }
        syn::UseTree::Glob(_) => out.push(prefix.clone()),
        syn::UseTree::Group(g) => {
            for t in &g.items {
                use_paths(t, prefix, out);
            }
        }
    }
}

impl<'ast> Visit<'ast> for Names<'_> {
    fn visit_item(&mut self, i: &'ast syn::Item) {
        let attrs = match i {
            syn::Item::Fn(f) => &f.attrs,
            syn::Item::Mod(m) => {
                // Declared modules are files of their own, read on their own.
                if m.content.is_some() && !is_test(&m.attrs) {
                    syn::visit::visit_item(self, i);
                }
                return;
            }
            syn::Item::Impl(x) => &x.attrs,
            syn::Item::Use(x) => &x.attrs,
            syn::Item::Const(x) => &x.attrs,
            syn::Item::Static(x) => &x.attrs,
            syn::Item::Struct(x) => &x.attrs,
            syn::Item::Enum(x) => &x.attrs,
            syn::Item::Trait(x) => &x.attrs,
            syn::Item::Type(x) => &x.attrs,
            syn::Item::Macro(x) => &x.attrs,
            _ => return syn::visit::visit_item(self, i),
        };
        if !is_test(attrs) {
            syn::visit::visit_item(self, i);
        }
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if !is_test(&f.attrs) {
            syn::visit::visit_impl_item_fn(self, f);
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        let mut paths = Vec::new();
        use_paths(&u.tree, &mut Vec::new(), &mut paths);
        for p in paths {
            self.record(p);
        }
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        if p.segments.len() > 1 {
            self.record(p.segments.iter().map(|s| s.ident.to_string()).collect());
        }
        syn::visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        // Paths inside macro calls (`format!`, `json!`, `matches!`, …) as far as they parse as
        // expressions.
        if let Ok(args) = m.parse_body_with(
            syn::punctuated::Punctuated::<syn::Expr, syn::Token![,]>::parse_terminated,
        ) {
            for e in &args {
                self.visit_expr(e);
            }
        }
        syn::visit::visit_macro(self, m);
    }
}

/// The module of `modules` a named path lands in: its longest prefix that is a module.
fn resolve<'a>(path: &[String], modules: &'a BTreeMap<ModPath, Module>) -> Option<&'a ModPath> {
    (0..=path.len())
        .rev()
        .find_map(|n| modules.get_key_value(&path[..n]).map(|(k, _)| k))
}

/// A circle: the sibling modules (under `parent`) that depend on each other in a loop, and
/// what ties each edge (file → names).
struct Circle {
    krate: &'static str,
    parent: ModPath,
    members: Vec<String>,
    ties: Vec<String>,
}

/// Dependencies between sibling modules, per parent: `(from, to)` → the paths that tie them.
type Edges = BTreeMap<ModPath, BTreeMap<(String, String), BTreeSet<String>>>;

/// Edges between siblings, at every level: from the child of the common parent that holds the
/// naming module to the child that holds the named one.
fn edges(modules: &BTreeMap<ModPath, Module>) -> Edges {
    let mut edges: Edges = BTreeMap::new();
    for (from, m) in modules {
        for named in &m.names {
            if let Some(n) = named.child
                && (named.path.len() < n || !modules.contains_key(&named.path[..n]))
            {
                continue;
            }
            let shown = &named.shown;
            let Some(to) = resolve(&named.path, modules) else {
                continue;
            };
            let common = from
                .iter()
                .zip(to.iter())
                .take_while(|(a, b)| a == b)
                .count();
            if common == from.len() || common == to.len() {
                continue; // one is the other's ancestor: one unit at that level
            }
            let parent = from[..common].to_vec();
            let tie = format!(
                "{} -> {}",
                m.file
                    .strip_prefix(workspace())
                    .unwrap_or(&m.file)
                    .display(),
                shown
            );
            edges
                .entry(parent)
                .or_default()
                .entry((from[common].clone(), to[common].clone()))
                .or_default()
                .insert(tie);
        }
    }
    edges
}

fn circles(krate: &'static str, edges: &Edges) -> Vec<Circle> {
    let mut out = Vec::new();
    for (parent, level) in edges {
        let nodes: BTreeSet<&String> = level.keys().flat_map(|(a, b)| [a, b]).collect();
        for scc in strongly_connected(&nodes, level) {
            if scc.len() < 2 {
                continue;
            }
            let ties = level
                .iter()
                .filter(|((a, b), _)| scc.contains(a) && scc.contains(b))
                .flat_map(|(_, t)| t.iter().take(3).cloned())
                .collect();
            out.push(Circle {
                krate,
                parent: parent.clone(),
                members: scc.into_iter().collect(),
                ties,
            });
        }
    }
    out
}

/// Tarjan's strongly connected components of the sibling graph.
fn strongly_connected(
    nodes: &BTreeSet<&String>,
    edges: &BTreeMap<(String, String), BTreeSet<String>>,
) -> Vec<BTreeSet<String>> {
    struct State<'a> {
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        next: usize,
        out: Vec<BTreeSet<String>>,
    }
    fn visit<'a>(
        v: &'a str,
        edges: &'a BTreeMap<(String, String), BTreeSet<String>>,
        s: &mut State<'a>,
    ) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on.insert(v);
        for (a, b) in edges.keys() {
            if a != v {
                continue;
            }
            if !s.index.contains_key(b.as_str()) {
                visit(b, edges, s);
                let l = s.low[b.as_str()].min(s.low[v]);
                s.low.insert(v, l);
            } else if s.on.contains(b.as_str()) {
                let l = s.index[b.as_str()].min(s.low[v]);
                s.low.insert(v, l);
            }
        }
        if s.low[v] == s.index[v] {
            let mut scc = BTreeSet::new();
            while let Some(w) = s.stack.pop() {
                s.on.remove(w);
                scc.insert(w.to_string());
                if w == v {
                    break;
                }
            }
            s.out.push(scc);
        }
    }
    let mut s = State {
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for n in nodes {
        if !s.index.contains_key(n.as_str()) {
            visit(n, edges, &mut s);
        }
    }
    s.out
}

/// Functions (free, in impls, default trait methods) over the limit, outside tests.
struct Lengths<'a> {
    file: &'a Path,
    out: &'a mut Vec<(String, usize)>,
    all: &'a mut Vec<usize>,
}

impl Lengths<'_> {
    fn check(
        &mut self,
        attrs: &[syn::Attribute],
        name: &syn::Ident,
        start: proc_macro2::Span,
        block: &syn::Block,
    ) {
        if is_test(attrs) {
            return;
        }
        let lines = block.brace_token.span.close().end().line - start.start().line + 1;
        self.all.push(lines);
        if lines > MAX_FN_LINES {
            self.out.push((
                format!(
                    "{}:{} {name}",
                    self.file
                        .strip_prefix(workspace())
                        .unwrap_or(self.file)
                        .display(),
                    start.start().line
                ),
                lines,
            ));
        }
    }
}

impl<'ast> Visit<'ast> for Lengths<'_> {
    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        self.check(&f.attrs, &f.sig.ident, f.sig.fn_token.span, &f.block);
        syn::visit::visit_item_fn(self, f);
    }
    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        self.check(&f.attrs, &f.sig.ident, f.sig.fn_token.span, &f.block);
        syn::visit::visit_impl_item_fn(self, f);
    }
    fn visit_trait_item_fn(&mut self, f: &'ast syn::TraitItemFn) {
        if let Some(b) = &f.default {
            self.check(&f.attrs, &f.sig.ident, f.sig.fn_token.span, b);
        }
        syn::visit::visit_trait_item_fn(self, f);
    }
}

/// The agent crate's drawing in its lib.rs (`name → a, b`, lines in layer order), against the
/// code: each module's line lists exactly the modules it uses, all on lines below it.
#[test]
fn the_agents_drawing_is_its_code() {
    let lib = workspace().join("agent/src/lib.rs");
    let text = std::fs::read_to_string(&lib).unwrap();
    let mut drawn: Vec<(String, BTreeSet<String>)> = Vec::new();
    for line in text.lines().filter_map(|l| l.strip_prefix("//! ")) {
        let Some((name, uses)) = line.split_once('→') else {
            continue;
        };
        let uses = uses
            .split(',')
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .map(str::to_string)
            .collect();
        drawn.push((name.trim().to_string(), uses));
    }
    // main.rs is the binary, not a module of the library.
    drawn.retain(|(name, _)| name != "main");
    let modules = read_crate(&lib);
    let edges = edges(&modules);
    let mut real: BTreeMap<String, BTreeSet<String>> = modules
        .keys()
        .filter(|m| m.len() == 1)
        .map(|m| (m[0].clone(), BTreeSet::new()))
        .collect();
    for (a, b) in edges.get(&Vec::new()).into_iter().flat_map(|l| l.keys()) {
        real.entry(a.clone()).or_default().insert(b.clone());
    }
    let mut wrong = Vec::new();
    let order: BTreeMap<&str, usize> = drawn
        .iter()
        .enumerate()
        .map(|(i, (n, _))| (n.as_str(), i))
        .collect();
    for (i, (name, uses)) in drawn.iter().enumerate() {
        match real.get(name) {
            None => wrong.push(format!("{name}: drawn, but no module of the crate")),
            Some(r) if r != uses => {
                wrong.push(format!("{name}: drawn using {uses:?}, the code uses {r:?}"))
            }
            Some(_) => {}
        }
        for u in uses {
            if order.get(u.as_str()).is_none_or(|j| *j <= i) {
                wrong.push(format!("{name} uses {u}, which is not drawn below it"));
            }
        }
    }
    for name in real.keys().filter(|n| !order.contains_key(n.as_str())) {
        wrong.push(format!(
            "{name}: a module of the crate the drawing leaves out"
        ));
    }
    assert!(
        wrong.is_empty(),
        "agent/src/lib.rs's drawing:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn no_crate_has_a_module_circle_and_no_function_is_over_the_limit() {
    let root = workspace();
    let mut found = Vec::new();
    let mut long = Vec::new();
    let mut all = Vec::new();
    let mut files = 0;
    for (krate, lib) in CRATES {
        let modules = read_crate(&root.join(lib));
        files += modules
            .values()
            .map(|m| &m.file)
            .collect::<BTreeSet<_>>()
            .len();
        let edges = edges(&modules);
        found.extend(circles(krate, &edges));
        // `CAPSTAN_STRUCTURE_DRAW=<crate>` prints the crate's top level, one way, for its
        // lib.rs drawing.
        if std::env::var("CAPSTAN_STRUCTURE_DRAW").as_deref() == Ok(*krate) {
            for (a, b) in edges.get(&Vec::new()).into_iter().flat_map(|l| l.keys()) {
                println!("{krate}: {a} -> {b}");
            }
        }
        for file in modules.values().map(|m| &m.file).collect::<BTreeSet<_>>() {
            let ast = product_code(&std::fs::read_to_string(file).unwrap());
            Lengths {
                file,
                out: &mut long,
                all: &mut all,
            }
            .visit_file(&ast);
        }
    }
    all.sort_unstable();
    println!(
        "{files} files of {} crates: {} module circles; {} functions outside tests, the longest {} lines, {} over {MAX_FN_LINES}",
        CRATES.len(),
        found.len(),
        all.len(),
        all.last().copied().unwrap_or(0),
        long.len()
    );
    let mut report = String::new();
    for c in &found {
        report.push_str(&format!(
            "circle in {} under `{}`: {}\n",
            c.krate,
            if c.parent.is_empty() {
                "crate".to_string()
            } else {
                c.parent.join("::")
            },
            c.members.join(", ")
        ));
        for t in &c.ties {
            report.push_str(&format!("    {t}\n"));
        }
    }
    for (f, n) in &long {
        report.push_str(&format!(
            "function over {MAX_FN_LINES} lines: {f} ({n} lines)\n"
        ));
    }
    print!("{report}");
    assert!(
        found.is_empty() && long.is_empty(),
        "the module drawing is not one way, or a function is too long:\n{report}"
    );
}

/// The one file of the product that sends writes to an API server ([`the_door_is_the_only_writer`]).
const DOOR: &str = "client/src/write.rs";

/// The crates whose code talks to API servers (the pure crates cannot).
const TALKERS: &[&str] = &["client/src/lib.rs", "agent/src/lib.rs"];

/// kube's write requests, by the names a caller has to write to send one: the parameter types
/// of its write verbs and the patch body's type. No write can be sent without naming one
/// of them, except a verb handed `Default::default()` for its parameters, which is caught
/// by the verb's name.
const WRITE_TYPES: &[&str] = &["PatchParams", "PostParams", "DeleteParams", "Patch"];
const WRITE_VERBS: &[&str] = &[
    "create",
    "create_subresource",
    "patch",
    "patch_status",
    "patch_subresource",
    "patch_metadata",
    "patch_scale",
    "replace",
    "replace_status",
    "replace_subresource",
    "delete",
    "delete_collection",
];

/// Finds, outside tests, every place a file names a kube write ([`WRITE_TYPES`]) or calls a
/// write verb with default parameters.
struct Writes<'a> {
    file: &'a str,
    out: &'a mut Vec<String>,
}

impl Writes<'_> {
    fn found(&mut self, span: proc_macro2::Span, what: &str) {
        self.out
            .push(format!("{}:{} {what}", self.file, span.start().line));
    }
}

impl<'ast> Visit<'ast> for Writes<'_> {
    fn visit_path(&mut self, p: &'ast syn::Path) {
        // `Patch::Apply(..)`, `PatchParams::apply(..)`, `kube::api::DeleteParams`; not another
        // enum's variant called `Patch` (`Verb::Patch`).
        let segs: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
        for (i, seg) in p.segments.iter().enumerate() {
            let name = segs[i].as_str();
            let kubes =
                name != "Patch" || (i == 0 && segs.len() > 1) || (i > 0 && segs[i - 1] == "api");
            if WRITE_TYPES.contains(&name) && kubes {
                self.found(seg.ident.span(), name);
            }
        }
        syn::visit::visit_path(self, p);
    }
    fn visit_use_name(&mut self, u: &'ast syn::UseName) {
        let name = u.ident.to_string();
        if WRITE_TYPES.contains(&name.as_str()) {
            self.found(u.ident.span(), &format!("use of {name}"));
        }
    }
    fn visit_expr_method_call(&mut self, c: &'ast syn::ExprMethodCall) {
        let verb = c.method.to_string();
        let defaulted = c.args.iter().any(|a| {
            let text = quote_of(a);
            text.replace(' ', "").contains("Default::default()")
        });
        if WRITE_VERBS.contains(&verb.as_str()) && defaulted {
            self.found(
                c.method.span(),
                &format!(".{verb}(&Default::default(), ..)"),
            );
        }
        syn::visit::visit_expr_method_call(self, c);
    }
}

fn quote_of(e: &syn::Expr) -> String {
    use quote::ToTokens;
    e.to_token_stream().to_string()
}

/// Every write in a source text outside tests, as `file:line what`.
fn writes_in(file: &str, text: &str) -> Vec<String> {
    let ast = product_code(text);
    let mut out = Vec::new();
    Writes {
        file,
        out: &mut out,
    }
    .visit_file(&ast);
    out
}

/// One door for writes: apply, merge, create, delete and the review APIs' POSTs go through
/// `capstan_client::write`, where the field manager, validation, preconditions and the
/// answers callers branch on are set once (and which takes only clients that carry the
/// fence and the identity). A write anywhere else fails here, with its file and line.
#[test]
fn the_door_is_the_only_writer() {
    let root = workspace();
    let mut sites = Vec::new();
    let mut door = 0;
    for lib in TALKERS {
        for file in read_crate(&root.join(lib))
            .values()
            .map(|m| m.file.clone())
            .collect::<BTreeSet<_>>()
        {
            let shown = file
                .strip_prefix(&root)
                .unwrap_or(&file)
                .display()
                .to_string();
            let found = writes_in(&shown, &std::fs::read_to_string(&file).unwrap());
            if shown == DOOR {
                door = found.len();
            } else {
                sites.extend(found);
            }
        }
    }
    let files: BTreeSet<&str> = sites.iter().map(|s| s.split(':').next().unwrap()).collect();
    println!(
        "write sites outside the door: {} in {} files; in the door: {door}",
        sites.len(),
        files.len()
    );
    if std::env::var_os("CAPSTAN_STRUCTURE_WRITES").is_some() {
        println!("{}", sites.join("\n"));
    }
    assert!(door > 0, "{DOOR} names no write: is it still the door?");
    assert!(
        sites.is_empty(),
        "writes outside {DOOR}:\n{}",
        sites.join("\n")
    );
}

/// The check finds a write however it is spelled, and not what only looks like one.
#[test]
fn the_write_check_finds_what_it_must() {
    let text = r#"
        use kube::api::{Api, PatchParams};
        fn a(api: &Api<X>) { api.patch("n", &PatchParams::default(), &kube::api::Patch::Merge(1)); }
        fn b(api: &Api<X>) { api.create(&Default::default(), &x); }
        fn c(api: &Api<X>) { api.delete("n", &kube::api::DeleteParams::background()); }
        fn d(s: &str) -> String { s.replace('a', "b") }
        fn e(s: &Sessions) { s.create("user", None); }
        fn patch() {}
        fn f(v: Verb) -> bool { v == Verb::Patch }
        #[cfg(test)]
        mod tests { fn t(api: &Api<X>) { api.create(&PostParams::default(), &x); } }
    "#;
    let found: Vec<String> = writes_in("f.rs", text)
        .into_iter()
        .map(|s| s.split_once(' ').unwrap().1.to_string())
        .collect();
    assert_eq!(
        found,
        [
            "use of PatchParams",
            "PatchParams",
            "Patch",
            ".create(&Default::default(), ..)",
            "DeleteParams",
        ]
    );
}

/// Test helpers live once: no free function of the tests, benches, harness or e2e support is
/// defined by name in two files ([`helpers`]). One helper written twice moves to
/// `capstan-harness` (or `agent/benches/support`); two that share only a name get names that
/// say what each does.
#[test]
fn the_test_helpers_live_once() {
    let root = workspace();
    let code = helpers::test_code(&root);
    let twice = helpers::duplicates(code.iter().map(|(f, t)| (f.as_str(), t.as_str())));
    let report: Vec<String> = twice
        .iter()
        .map(|(name, files)| format!("{name}: {}", files.join(", ")))
        .collect();
    println!(
        "test code: {} files; helper names defined in more than one file: {}",
        code.len(),
        twice.len()
    );
    println!("{}", report.join("\n"));
    assert!(
        twice.is_empty(),
        "test helpers defined in more than one file (share one, or name each for what it does):\n{}",
        report.join("\n")
    );
}

/// The helper check finds a free function two files define, and not methods, tests, entry
/// points or `#[cfg(test)]` code that share a name.
#[test]
fn the_helper_check_finds_what_it_must() {
    let a = r#"
        fn kubectl(args: &[&str]) -> String { fn nested() {} String::new() }
        fn only_here() {}
        struct S;
        impl S { fn start() {} }
        #[test]
        fn a_test() {}
        fn main() {}
    "#;
    let b = r#"
        mod inner { pub fn kubectl() {} }
        fn start() {}
        #[tokio::test]
        async fn a_test() { fn nested() {} }
        #[cfg(test)]
        mod tests { fn only_here() {} }
        fn main() {}
    "#;
    let found = helpers::duplicates([("a.rs", a), ("b.rs", b)]);
    let names: Vec<&str> = found.keys().map(String::as_str).collect();
    assert_eq!(names, ["kubectl", "nested"]);
    assert_eq!(found["kubectl"], ["a.rs", "b.rs"]);
}
