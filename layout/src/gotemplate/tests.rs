//! The parser on Go's corner cases (each case's verdict is Go's: the differential test in
//! `tests/e2e/tests/corpus/go_template.rs` runs these templates through Go's own parser too).

use super::*;

fn names(t: &str) -> Vec<String> {
    match parse("values", t) {
        Ok(calls) => calls.into_iter().map(|c| c.name).collect(),
        Err(e) => panic!("{t:?}: {e}"),
    }
}

fn error(t: &str) -> SyntaxError {
    match parse("values", t) {
        Ok(calls) => panic!("{t:?} parsed: {calls:?}"),
        Err(e) => e,
    }
}

#[test]
fn calls_hidden_behind_a_quoted_right_delimiter_are_found() {
    for (t, want) in [
        (r#"{{ "}}" }}{{ env "X" }}"#, vec!["env"]),
        (r#"{{ print "}}" | env }}"#, vec!["print", "env"]),
        (
            r#"{{ print "}}{{" }}{{ expandenv "$HOME" }}"#,
            vec!["print", "expandenv"],
        ),
        ("{{ `}}` | env }}", vec!["env"]),
        (
            "{{ print `\n}}\n` }}{{ getHostByName \"x\" }}",
            vec!["print", "getHostByName"],
        ),
        (r#"{{ print '}' }}{{ env "A" }}"#, vec!["print", "env"]),
        (r#"{{ print "\"}}" | env }}"#, vec!["print", "env"]),
        (r#"{{ (env "A").x }}"#, vec!["env"]),
        (r#"{{ env.X }}"#, vec!["env"]),
        ("{{/* }} */}}{{ env \"A\" }}", vec!["env"]),
        ("{{- env \"A\" -}}", vec!["env"]),
        ("{{if 1}}{{else if env \"A\"}}{{end}}", vec!["env"]),
        (
            "{{range $i, $v := list 1}}{{env $v}}{{end}}",
            vec!["list", "env"],
        ),
        ("{{define \"x\"}}{{env \"A\"}}{{end}}", vec!["env"]),
        ("{{block \"x\" .}}{{env \"A\"}}{{end}}", vec!["env"]),
        ("{{template \"x\" env \"A\"}}", vec!["env"]),
    ] {
        assert_eq!(names(t), want, "{t:?}");
    }
}

#[test]
fn fields_variables_and_literals_call_nothing() {
    for t in [
        "env: {{ .Cluster.spec.env }}",
        "{{ $env := .X }}{{ $env }}",
        "{{ .env.expandenv }}",
        "{{ \"env\" }}{{ `getHostByName` }}{{ 'e' }}",
        "{{/* env */}}",
        "env expandenv getHostByName",
        "{{ nil }}{{ true }}{{ 1.5e3 }}{{ 0x1F }}{{ 1+2i }}",
    ] {
        assert_eq!(names(t), Vec::<String>::new(), "{t:?}");
    }
}

#[test]
fn templates_go_refuses_are_refused_at_the_line_go_gives() {
    for (t, line, message) in [
        ("{{ toYaml . }}", 1, "function \"toYaml\" not defined"),
        ("a\n{{ if . }}", 2, "unexpected EOF"),
        ("{{ end }}", 1, "unexpected {{end}}"),
        ("{{ else }}", 1, "unexpected {{else}}"),
        ("{{ $x }}", 1, "undefined variable \"$x\""),
        ("{{ break }}", 1, "{{break}} outside {{range}}"),
        (
            "{{ . | 3 }}",
            1,
            "non executable command in pipeline stage 2",
        ),
        ("{{ }}", 1, "missing value for command"),
        ("{{ \"a\".b }}", 1, "unexpected . after term \"\\\"a\\\"\""),
        ("{{ 08 }}", 1, "integer overflow: \"08\""),
        ("{{ \"\\q\" }}", 1, "invalid syntax"),
        ("{{ 'ab' }}", 1, "malformed character constant: 'ab'"),
        (
            "{{ define \"a\" }}x{{ end }}{{ define \"a\" }}y{{ end }}",
            1,
            "template: multiple definition of template \"a\"",
        ),
        (
            "{{ if . }}\n{{ define \"a\" }}{{ end }}{{ end }}",
            2,
            "unexpected <define> in command",
        ),
        (
            "{{ range $a, $b, $c := . }}{{ end }}",
            1,
            "too many declarations in range",
        ),
        (
            "{{ with $a, $b := . }}{{ end }}",
            1,
            "too many declarations in with",
        ),
        (
            "{{ range $a, 3 }}{{ end }}",
            1,
            "range can only initialize variables",
        ),
        ("{{ template . }}", 1, "unexpected <.> in template clause"),
        ("{{ print (1 }}", 1, "unclosed left paren"),
        ("{{ \"x\n\" }}", 1, "unterminated quoted string"),
        ("{{ x", 1, "function \"x\" not defined"),
        ("{{ print", 1, "unclosed action"),
        ("{{ print\n", 2, "unclosed action started at line 1"),
    ] {
        let e = error(t);
        assert_eq!((e.line, e.message.as_str()), (line, message), "{t:?}");
    }
}

#[test]
fn what_go_accepts_is_accepted() {
    for t in [
        "{{.|}}",
        "{{ $x := 1 }}{{ $x = 2 }}{{ $x }}",
        "{{ range $i, $v := . }}{{ $i }}{{ break }}{{ continue }}{{ end }}",
        "{{ with $x := . }}{{ $x }}{{ else with .y }}{{ end }}",
        "{{ if . }}{{ else if .a }}{{ else }}{{ end }}",
        "{{ define \"a\" }} {{ end }}{{ define \"a\" }}y{{ end }}",
        "{{ template \"a\" }}{{ template `b` . }}",
        "{{ block \"b\" . }}{{ .x }}{{ end }}",
        "{{- /* a comment */ -}}",
        "{{ printf \"%d\" (len (list 1 2)) | quote }}",
        "{{ $ }}{{ $.x }}{{ (.).x }}{{ (list 1).x }}",
        "{{ -3 }}{{ .5 }}{{ 0b1 }}{{ 0o7 }}{{ 1_000 }}{{ 'x' }}{{ '\\n' }}{{ 1e-400 }}",
    ] {
        if let Err(e) = parse("values", t) {
            panic!("{t:?}: {e}");
        }
    }
}

#[test]
fn nesting_is_bounded() {
    let parens = |n: usize| format!("{{{{ {}1{} }}}}", "(".repeat(n), ")".repeat(n));
    assert!(parse("values", &parens(MAX_DEPTH)).is_ok());
    let e = error(&parens(MAX_DEPTH + 1));
    assert!(e.message.contains("nested more than"), "{e}");
    let ifs = |n: usize| format!("{}{}", "{{if .}}".repeat(n), "{{end}}".repeat(n));
    assert!(parse("values", &ifs(MAX_DEPTH)).is_ok());
    assert!(parse("values", &ifs(100_000)).is_err());
}

#[test]
fn the_check_allows_pure_functions_only() {
    let refused = |t: &str| -> Vec<(String, Class)> {
        check("values", t)
            .into_iter()
            .map(|f| match f {
                Finding::Refused { call, class } => (call.name, class),
                Finding::Syntax(e) => panic!("{t:?}: {e}"),
            })
            .collect()
    };
    assert_eq!(
        refused("{{ .Cluster.metadata.name | upper | quote }}{{ dict \"a\" 1 | toJson }}"),
        []
    );
    assert_eq!(
        refused("{{ \"}}\" }}{{ env \"X\" }}{{ now }}{{ randAlpha 5 }}"),
        [
            ("env".to_string(), Class::Environment),
            ("now".to_string(), Class::Unstable),
            ("randAlpha".to_string(), Class::Unstable),
        ]
    );
    assert!(matches!(
        check("values", "{{ include \"x\" . }}")[..],
        [Finding::Syntax(_)]
    ));
    assert_eq!(column("ab\ncdé{{", 7), 4);
}
