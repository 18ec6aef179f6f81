//! The differential test of capstan's Go template parser (`capstan_layout::gotemplate`): every
//! template of a corpus goes to capstan's parser and to Go's own `text/template` with Sprig's
//! function map (`tests/gotemplate-oracle`, as the Cluster API add-on provider for Helm parses a
//! values template), and the two must agree on whether it parses, on the line of the error
//! when it does not, and on every function it names, with its byte offset, when it does.
//!
//! The corpus: templates written for the lexer's and the parser's corner cases (quoted, raw and
//! character literals that hold delimiters, escapes, comments, trim markers, nested pipelines,
//! fields, variables and declarations, control structures, `define`/`template`/`block`, numbers
//! of every base, every error Go reports), and templates generated from fragments that cut
//! across those (a fixed seed, so a failure is reproducible). The one difference by design:
//! capstan refuses nesting deeper than `gotemplate::MAX_DEPTH`, which Go accepts.

use std::collections::BTreeSet;
use std::io::Write;
use std::process::{Command, Stdio};

use capstan_layout::gotemplate::{self, MAX_DEPTH, funcs};
use serde_json::{Value, json};

/// The top-level template's name (CAAPH names it `<chartName>-<cluster>`).
const NAME: &str = "cilium-dev";

/// Templates for the corner cases, by hand.
const CORPUS: &[&str] = &[
    // A right delimiter inside literals ends nothing.
    r#"{{ "}}" }}{{ env "X" }}"#,
    r#"{{ print "}}" | env }}"#,
    r#"{{ print "}}{{" }}{{ expandenv "$HOME" }}"#,
    "{{ `}}` | env }}",
    "{{ print `\n}}\n` }}{{ getHostByName \"x\" }}",
    "{{ print '}' }}{{ env \"A\" }}",
    r#"{{ print "\"}}" | env }}"#,
    r#"{{ print "\\" }}{{ env "A" }}"#,
    r#"{{ print "a\"b" "}}" }} {{ env "C" }}"#,
    "{{ print `a\"b` \"}}\" }}{{ env \"D\" }}",
    "{{ print \"{{\" }}{{ env \"E\" }}",
    "{{ print '\"' }}{{ env \"F\" }}",
    "{{ print '\\'' }}{{ env \"G\" }}",
    "{{ print '`' `'` }}{{ env \"H\" }}",
    // Comments.
    "{{/* }} */}}{{ env \"A\" }}",
    "{{/* {{ env \"A\" }} */}}",
    "{{- /* x */ -}} {{ env \"A\" }}",
    "{{/* x */ }}",
    "{{ /* x */ }}",
    "{{/* x",
    "{{/* x */-}}",
    "{{- /* a\nb */}}\n{{ env \"A\" }}",
    // Trim markers.
    "a  {{- env \"A\" -}}  b",
    "{{-3}}",
    "{{- 3 -}}",
    "{{3 -}}",
    "{{ 3-}}",
    "{{ -3 }}",
    "{{- -3 -}}",
    "{{\t-\t3\t-\t}}",
    "{{-\n.\n-}}",
    // Fields, variables, chains.
    "{{ .Cluster.metadata.name }}",
    "{{ .env }}{{ .Cluster.env.expandenv }}",
    "{{ $env := .X }}{{ $env }}{{ $env.y }}",
    "{{ $ }}{{ $.x }}{{ (.).x }}{{ (list 1).x }}{{ (env \"A\").x }}",
    "{{ env.X }}",
    "{{ ..x }}",
    "{{ .x.  }}",
    "{{ .x .y }}",
    "{{ $x }}",
    "{{ $x := 1 }}{{ $x = 2 }}{{ $x }}",
    "{{ $y = 2 }}",
    "{{ if $x := . }}{{ $x }}{{ else }}{{ $x }}{{ end }}{{ $x }}",
    "{{ range $i, $v := . }}{{ $i }}{{ $v }}{{ end }}",
    "{{ range $i, $v, $w := . }}{{ end }}",
    "{{ range $i, }}{{ end }}",
    "{{ range $i, 3 }}{{ end }}",
    "{{ with $a, $b := . }}{{ end }}",
    "{{ $x := 1 | print }}",
    "{{ print $x := 1 }}",
    "{{ \"a\".b }}",
    "{{ 1.b }}",
    "{{ nil.b }}",
    "{{ true.b }}",
    "{{ (1).b }}",
    "{{ $.a.b.c }}",
    "{{ .a|.b }}",
    "{{ .a | \"x\" }}",
    "{{ .a | 3 }}",
    "{{ .a | nil }}",
    "{{ .a | . }}",
    "{{ .a | true }}",
    "{{ .a | (print) }}",
    "{{.|}}",
    "{{ | }}",
    "{{ }}",
    "{{}}",
    "{{ ( ) }}",
    "{{ print () }}",
    "{{ print (1 }}",
    "{{ print 1) }}",
    "{{ print (((1))) }}",
    "{{ printf \"%d\" (len (list 1 2)) | quote }}",
    "{{ print (print (print (env \"A\"))) }}",
    "{{ print \"a\"\"b\" }}",
    "{{ print \"a\",\"b\" }}",
    "{{ print, }}",
    "{{ print : }}",
    "{{ print :x }}",
    "{{ a:b }}",
    "{{ print = }}",
    // Control structures.
    "{{ if . }}a{{ else if .b }}b{{ else }}c{{ end }}",
    "{{ if . }}{{ else if env \"A\" }}{{ end }}",
    "{{ if . }}{{ else }}{{ else }}{{ end }}",
    "{{ if . }}",
    "{{ if }}{{ end }}",
    "{{ end }}",
    "{{ else }}",
    "{{ if . }}{{ end }}{{ end }}",
    "{{ range . }}{{ break }}{{ continue }}{{ end }}",
    "{{ break }}",
    "{{ continue }}",
    "{{ range . }}{{ break 1 }}{{ end }}",
    "{{ if . }}{{ break }}{{ end }}",
    "{{ range . }}{{ if . }}{{ break }}{{ end }}{{ end }}",
    "{{ range . }}{{ else }}{{ end }}",
    "{{ range . }}{{ else if . }}{{ end }}{{ end }}",
    "{{ with . }}{{ else with .x }}{{ else }}{{ end }}",
    "{{ with . }}{{ else if .x }}{{ end }}{{ end }}",
    "{{ range 10 }}{{ . }}{{ end }}",
    "{{ range $i := 10 }}{{ $i }}{{ end }}",
    // define, template, block.
    "{{ define \"a\" }}{{ env \"A\" }}{{ end }}{{ template \"a\" }}",
    "{{ define `a` }}x{{ end }}",
    "{{ define a }}x{{ end }}",
    "{{ define \"a\" }}x",
    "{{ define \"a\" }}x{{ else }}{{ end }}",
    "{{ define \"a\" }}x{{ end }}{{ define \"a\" }}y{{ end }}",
    "{{ define \"a\" }} {{ end }}{{ define \"a\" }}y{{ end }}",
    "{{ define \"a\" }}x{{ end }}{{ define \"a\" }} {{ end }}",
    "{{ define \"cilium-dev\" }}x{{ end }}y",
    "{{ define \"cilium-dev\" }}x{{ end }} ",
    "{{ if . }}{{ define \"a\" }}{{ end }}{{ end }}",
    "{{ template \"a\" }}{{ template `b` . }}{{ template \"c\" env \"A\" }}",
    "{{ template . }}",
    "{{ template \"a\" | print }}",
    "{{ block \"b\" . }}{{ env \"A\" }}{{ end }}",
    "{{ block \"b\" }}x{{ end }}",
    "{{ block \"b\" . }}x{{ else }}{{ end }}",
    "{{ block \"b\" . }}x{{ end }}{{ define \"b\" }}y{{ end }}",
    "{{ block \"b\" . }}{{ break }}{{ end }}",
    "{{ range . }}{{ block \"b\" . }}{{ break }}{{ end }}{{ end }}",
    "{{ define \"a\" }}{{ $x }}{{ end }}",
    "{{ $x := 1 }}{{ define \"a\" }}{{ $x }}{{ end }}",
    "{{ define \"\\x41\" }}x{{ end }}{{ define \"A\" }}y{{ end }}",
    "{{ define \"a\\q\" }}x{{ end }}",
    // Functions: defined or not.
    "{{ toYaml . }}",
    "{{ include \"x\" . }}",
    "{{ tpl . . }}",
    "{{ lookup \"v1\" \"Secret\" \"ns\" \"name\" }}",
    "{{ now }}{{ date \"2006\" now }}{{ randAlpha 3 }}{{ uuidv4 }}",
    "{{ call .f }}{{ html . }}{{ js . }}{{ urlquery . }}{{ slice . 1 }}",
    "{{ and 1 2 | or 3 | not }}",
    "{{ eq 1 2 }}{{ ne 1 2 }}{{ lt 1 2 }}{{ le 1 2 }}{{ gt 1 2 }}{{ ge 1 2 }}",
    "{{ index . 1 }}{{ len . }}{{ print }}{{ printf \"\" }}{{ println }}",
    // Literals.
    "{{ \"\\q\" }}",
    "{{ \"\\x4\" }}",
    "{{ \"\\x41\\u00e9\\U0001F600\\101\\a\\b\\f\\n\\r\\t\\v\\\\\\\"\" }}",
    "{{ \"\\'\" }}",
    "{{ \"\\400\" }}",
    "{{ \"\\uD800\" }}",
    "{{ \"\\U00110000\" }}",
    "{{ \"x\n\" }}",
    "{{ \"x\\\n\" }}",
    "{{ `a\nb` }}",
    "{{ `a\r\nb` }}",
    "{{ `a",
    "{{ 'a' }}{{ '\\n' }}{{ '\\'' }}{{ '\\x41' }}{{ 'é' }}{{ '\\u00e9' }}",
    "{{ '' }}",
    "{{ 'ab' }}",
    "{{ '\\\"' }}",
    "{{ 'a }}",
    "{{ '\n' }}",
    "{{ 0 }}{{ -0 }}{{ +7 }}{{ 0777 }}{{ 0x1F }}{{ 0X1f }}{{ 0o17 }}{{ 0O17 }}{{ 0b101 }}{{ 0B1 }}",
    "{{ 1_000 }}{{ 0x_1F }}{{ 0_7 }}{{ 1.5 }}{{ .5 }}{{ 1. }}{{ 1e3 }}{{ 1E+3 }}{{ 1_0.5 }}",
    "{{ 0x1p-2 }}{{ 0x1.8P3 }}{{ 2i }}{{ 1.5e3i }}{{ 01i }}{{ 1e-400 }}",
    "{{ 18446744073709551615 }}{{ -9223372036854775808 }}{{ 9223372036854775807 }}",
    "{{ 08 }}",
    "{{ 09.5 }}",
    "{{ 18446744073709551616 }}",
    "{{ -9223372036854775809 }}",
    "{{ 1__0 }}",
    "{{ 1_ }}",
    "{{ 0x }}",
    "{{ 0b }}",
    "{{ 0b2 }}",
    "{{ 0o8 }}",
    "{{ 0x1.8 }}",
    "{{ 0x1g }}",
    "{{ 1e400 }}",
    "{{ 0x1p2000 }}",
    "{{ 0x1.fffffffffffffp1023 }}",
    "{{ 0x1.fffffffffffff8p1023 }}",
    "{{ 0x1p1023 }}{{ 0x1p-2000 }}",
    "{{ 1e }}",
    "{{ 1e+ }}",
    "{{ 1e_5 }}",
    "{{ 1._5 }}",
    "{{ 1_.5 }}",
    "{{ 0x1p }}",
    "{{ 0x_1p4 }}",
    "{{ 0b1i }}",
    "{{ 0x1i }}",
    "{{ 0o7i }}",
    "{{ 1+2i }}{{ -1.5e3-2i }}{{ 0x1p3+1i }}{{ 1_0+2i }}{{ 1+2e3i }}",
    "{{ 1+2 }}",
    "{{ 0b1+2i }}",
    "{{ 0x1+2i }}",
    "{{ 1+0x1p1i }}",
    "{{ 1+0b1i }}",
    "{{ 1i+2i }}",
    "{{ 3x }}",
    "{{ 3.x }}",
    "{{ . }}",
    "{{ .5.x }}",
    "{{ true }}{{ false }}{{ nil }}",
    "{{ truex }}",
    // Unicode.
    "{{ .é }}{{ .日本 }}{{ $变量 := 1 }}{{ $变量 }}",
    "{{ .x٣ }}",
    "{{ .xⅠ }}",
    "{{ é }}",
    "{{ \u{7f} }}",
    "{{ … }}",
    "{{ print \"é\" }}é{{ env \"A\" }}",
    // Lines of errors.
    "a\n{{ if . }}",
    "a\n\n{{ print\n\n",
    "{{ print\n(1\n}}",
    "{{ define \"a\" }}\n\n{{ end }}{{ if }}\n",
    "{{ block \"b\" . }}\n{{ else }}\n{{ end }}",
    "line1\n{{/* a\nb */}}\n{{ env }}\n{{ if }}",
    "{{ print \"a\" }}\n{{ print `\n\n` }}\n{{ nosuch }}",
    "{{- \n\n- }}",
    "{{ if .\n}}\n{{ else }}\n{{ nosuch }}{{ end }}",
    // Plain text only.
    "",
    "plain text",
    "{",
    "}}",
    "a { {",
    "{{{ env \"A\" }}}",
    "{{{{ env \"A\" }}}}",
];

/// A small deterministic generator (xorshift64*), so the generated corpus is the same each run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[(self.next() % from.len() as u64) as usize]
    }
}

/// Fragments that cut across tokens: delimiters with and without trim markers, quotes of each
/// kind, escapes, comment markers, operators, names (defined and not), numbers and spaces.
const FRAGMENTS: &[&str] = &[
    "{{",
    "}}",
    "{{- ",
    " -}}",
    "{{-",
    "-}}",
    "{{/*",
    "*/}}",
    "/*",
    "*/",
    "\"",
    "\\\"",
    "`",
    "'",
    "\\",
    "(",
    ")",
    "|",
    ",",
    ":=",
    "=",
    "$",
    "$x",
    "$x := ",
    ".",
    ".a",
    ".b.c",
    "env",
    "expandenv",
    "getHostByName",
    "print",
    "list",
    "quote",
    "upper",
    "nosuch",
    "if",
    "else",
    "end",
    "range",
    "with",
    "define",
    "template",
    "block",
    "break",
    "continue",
    "nil",
    "true",
    " ",
    "  ",
    "\n",
    "\t",
    "x",
    "1",
    "-1",
    "0x1F",
    "1.5",
    "1e3",
    "1+2i",
    "'a'",
    "'}'",
    "\"}}\"",
    "`}}`",
    "\"a\"",
    "\"{{\"",
    "é",
    "}",
    "{",
    ":",
    "-",
];

fn generated(count: usize) -> Vec<String> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    (0..count)
        .map(|_| {
            let n = 1 + (rng.next() % 10) as usize;
            (0..n).map(|_| rng.pick(FRAGMENTS)).collect()
        })
        .collect()
}

/// Templates built to parse: an action around a generated inside, so that more of the
/// generated corpus reaches the parser's rules rather than stopping at the lexer.
fn generated_actions(count: usize) -> Vec<String> {
    const INSIDE: &[&str] = &[
        "env \"A\"",
        "print",
        " ",
        "\"}}\"",
        "`}}`",
        "'}'",
        "(",
        ")",
        "|",
        ".a",
        "$",
        "$x",
        "list 1",
        "quote",
        "1",
        "nil",
        "true",
        ",",
        "$y := 1",
        "nosuch",
    ];
    let mut rng = Rng(0x0123_4567_89ab_cdef);
    (0..count)
        .map(|_| {
            let n = 1 + (rng.next() % 5) as usize;
            let inside: String = (0..n).map(|_| format!("{} ", rng.pick(INSIDE))).collect();
            format!("{{{{ {inside}}}}}{{{{ env \"Z\" }}}}")
        })
        .collect()
}

/// Go's answer for each template, and Sprig's function names.
fn oracle(templates: &[String]) -> (Vec<Value>, BTreeSet<String>) {
    let oracle =
        capstan_harness::ensure_gotemplate_oracle().expect("building the Go template oracle");
    let mut child = Command::new(&oracle)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting the oracle");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(
            json!({"name": NAME, "templates": templates})
                .to_string()
                .as_bytes(),
        )
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "oracle failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let sprig = v["sprig"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap().to_string())
        .collect();
    (v["results"].as_array().unwrap().clone(), sprig)
}

/// Capstan's answer in the oracle's shape.
fn capstan_calls(template: &str) -> Value {
    match gotemplate::parse(NAME, template) {
        Ok(calls) => {
            json!({"ok": true, "calls": calls.iter().map(|c| json!({"name": c.name, "pos": c.pos})).collect::<Vec<_>>()})
        }
        Err(e) => json!({"ok": false, "line": e.line, "message": e.message}),
    }
}

/// Whether two answers agree: both parse with the same calls, or both fail at one line.
fn agree(go: &Value, ours: &Value) -> bool {
    let calls = |v: &Value| v["calls"].as_array().cloned().unwrap_or_default();
    match (go["ok"].as_bool(), ours["ok"].as_bool()) {
        (Some(true), Some(true)) => calls(go) == calls(ours),
        (Some(false), Some(false)) => go["line"] == ours["line"],
        _ => false,
    }
}

#[test]
fn capstan_parses_values_templates_as_go_does() {
    let mut templates: Vec<String> = CORPUS.iter().map(|t| t.to_string()).collect();
    let handwritten = templates.len();
    templates.extend(generated(20000));
    templates.extend(generated_actions(5000));
    let (go, _) = oracle(&templates);
    assert_eq!(go.len(), templates.len());
    let mut disagreements = Vec::new();
    let (mut parsed, mut calls) = (0, 0);
    for (t, g) in templates.iter().zip(&go) {
        let ours = capstan_calls(t);
        if g["ok"] == true {
            parsed += 1;
            calls += g["calls"].as_array().map_or(0, Vec::len);
        }
        if !agree(g, &ours) {
            disagreements.push(format!("{t:?}\n  go:      {g}\n  capstan: {ours}"));
        }
    }
    println!(
        "{} templates ({handwritten} by hand): {parsed} parse (naming {calls} functions), {} refused; {} disagreements",
        templates.len(),
        templates.len() - parsed,
        disagreements.len()
    );
    assert!(
        disagreements.is_empty(),
        "capstan and Go disagree on {} templates:\n{}",
        disagreements.len(),
        disagreements.join("\n")
    );
    // The corpus reaches both sides of every rule: many templates parse and many do not.
    assert!(parsed > 500 && templates.len() - parsed > 500, "{parsed}");
}

#[test]
fn nesting_beyond_capstans_limit_is_the_one_difference_by_design() {
    let parens = |n: usize| format!("{{{{ {}1{} }}}}", "(".repeat(n), ")".repeat(n));
    let ifs = |n: usize| format!("{}{}", "{{ if . }}".repeat(n), "{{ end }}".repeat(n));
    let templates = vec![
        parens(MAX_DEPTH),
        ifs(MAX_DEPTH),
        parens(MAX_DEPTH + 1),
        ifs(MAX_DEPTH + 1),
    ];
    let (go, _) = oracle(&templates);
    for (t, g) in templates.iter().zip(&go) {
        assert_eq!(g["ok"], true, "Go accepts {t}");
    }
    assert!(agree(&go[0], &capstan_calls(&templates[0])));
    assert!(agree(&go[1], &capstan_calls(&templates[1])));
    for t in &templates[2..] {
        let e = gotemplate::parse(NAME, t).expect_err("capstan refuses it");
        assert!(e.message.contains("nested more than"), "{e}");
    }
}

#[test]
fn capstans_function_classes_cover_exactly_sprigs_functions() {
    let (_, sprig) = oracle(&[]);
    let ours: BTreeSet<String> = funcs::sprig_names().map(str::to_string).collect();
    assert_eq!(
        ours.symmetric_difference(&sprig).collect::<Vec<_>>(),
        Vec::<&String>::new(),
        "capstan's classes and Sprig's function map differ"
    );
}
