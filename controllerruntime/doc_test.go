package controllerruntime_test

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/cache"

	kcr "github.com/kinformer/kinformer/controllerruntime"
)

// The package's documentation names every field of cache.Options (what
// it honours, or how it differs), With's names every field of Options, and
// neither names an option that does not exist.
func TestDocNamesEveryOption(t *testing.T) {
	fset := token.NewFileSet()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	p, err := doc.NewFromFiles(fset, files, "github.com/kinformer/kinformer/controllerruntime")
	if err != nil {
		t.Fatal(err)
	}
	var with string
	for _, f := range p.Funcs {
		if f.Name == "With" {
			with = f.Doc
		}
	}
	for _, tc := range []struct {
		what, text string
		typ        reflect.Type
	}{
		{"the package doc", p.Doc, reflect.TypeFor[cache.Options]()},
		{"With's doc", with, reflect.TypeFor[kcr.Options]()},
	} {
		for f := range tc.typ.Fields() {
			if f.IsExported() && !strings.Contains(tc.text, f.Name) {
				t.Errorf("%s does not name %s.%s", tc.what, tc.typ, f.Name)
			}
		}
	}
	// Options names spelt as fields (Options.X) must be fields.
	for _, text := range []string{p.Doc, with} {
		for _, w := range strings.Fields(text) {
			name, ok := strings.CutPrefix(strings.Trim(w, ".,;:()"), "Options.")
			if !ok || !ast.IsExported(name) {
				continue
			}
			if _, ok := reflect.TypeFor[kcr.Options]().FieldByName(name); !ok {
				t.Errorf("the doc names Options.%s, which kcr.Options does not have", name)
			}
		}
	}
}
