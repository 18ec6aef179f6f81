// gotemplate-oracle parses templates with Go's text/template and Sprig's text function map, as
// the Cluster API add-on provider for Helm parses a HelmChartProxy's valuesTemplate, and prints
// what capstan's own parser (layout/src/gotemplate) must say of each: whether it parses, the line
// of the error, and every function it names (each identifier of the parse trees) with its byte
// offset. It is the oracle of capstan's differential test (tests/e2e/tests/corpus/go_template.rs).
//
// Input (stdin, JSON): {"name": "<top-level template name>", "templates": ["...", ...]}.
// Output (stdout, JSON): {"sprig": [every name of sprig.TxtFuncMap(), sorted], "results":
// [{"ok": true, "calls": [{"name": "env", "pos": 12}, ...]} or {"ok": false, "line": 3,
// "message": "..."}, ...]}.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"text/template"
	"text/template/parse"

	"github.com/Masterminds/sprig/v3"
)

type input struct {
	Name      string   `json:"name"`
	Templates []string `json:"templates"`
}

type call struct {
	Name string `json:"name"`
	Pos  int    `json:"pos"`
}

type result struct {
	OK      bool   `json:"ok"`
	Line    int    `json:"line,omitempty"`
	Message string `json:"message,omitempty"`
	Calls   []call `json:"calls,omitempty"`
}

// walk collects the identifiers under n.
func walk(n parse.Node, out *[]call) {
	switch n := n.(type) {
	case nil:
	case *parse.ListNode:
		if n == nil {
			return
		}
		for _, c := range n.Nodes {
			walk(c, out)
		}
	case *parse.ActionNode:
		walk(n.Pipe, out)
	case *parse.IfNode:
		walk(&n.BranchNode, out)
	case *parse.RangeNode:
		walk(&n.BranchNode, out)
	case *parse.WithNode:
		walk(&n.BranchNode, out)
	case *parse.BranchNode:
		walk(n.Pipe, out)
		walk(n.List, out)
		walk(n.ElseList, out)
	case *parse.TemplateNode:
		walk(n.Pipe, out)
	case *parse.PipeNode:
		if n == nil {
			return
		}
		for _, c := range n.Cmds {
			walk(c, out)
		}
	case *parse.CommandNode:
		for _, a := range n.Args {
			walk(a, out)
		}
	case *parse.ChainNode:
		walk(n.Node, out)
	case *parse.IdentifierNode:
		*out = append(*out, call{Name: n.Ident, Pos: int(n.Pos)})
	}
}

func main() {
	var in input
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		fmt.Fprintln(os.Stderr, "reading input:", err)
		os.Exit(2)
	}
	prefix := regexp.MustCompile(`^template: ` + regexp.QuoteMeta(in.Name) + `:(\d+): (?s)(.*)$`)
	funcs := sprig.TxtFuncMap()
	var names []string
	for name := range funcs {
		names = append(names, name)
	}
	sort.Strings(names)
	results := make([]result, 0, len(in.Templates))
	for _, text := range in.Templates {
		t, err := template.New(in.Name).Funcs(funcs).Parse(text)
		if err != nil {
			r := result{OK: false, Message: err.Error()}
			if m := prefix.FindStringSubmatch(err.Error()); m != nil {
				r.Line, _ = strconv.Atoi(m[1])
				r.Message = m[2]
			}
			results = append(results, r)
			continue
		}
		calls := []call{}
		for _, tmpl := range t.Templates() {
			if tmpl.Tree != nil {
				walk(tmpl.Tree.Root, &calls)
			}
		}
		sort.SliceStable(calls, func(i, j int) bool { return calls[i].Pos < calls[j].Pos })
		results = append(results, result{OK: true, Calls: calls})
	}
	out := json.NewEncoder(os.Stdout)
	if err := out.Encode(map[string]any{"sprig": names, "results": results}); err != nil {
		fmt.Fprintln(os.Stderr, "writing output:", err)
		os.Exit(2)
	}
}
