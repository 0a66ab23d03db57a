package main

import (
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"slices"
	"strings"
	"testing"
)

// features type-checks src as package example.com/p and lists its features.
func features(t *testing.T, src string) []string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	conf := types.Config{Importer: importer.Default()}
	pkg, err := conf.Check("example.com/p", fset, []*ast.File{f}, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := packageFeatures(pkg)
	slices.Sort(out)
	return out
}

const base = `package p

import "context"

type Object interface{ GetName() string }

type Informer[T Object] struct {
	Name string
	hidden int
}

func New[T Object](ctx context.Context, names ...string) *Informer[T] { return nil }

func (i *Informer[T]) Start() error { return nil }
func (i Informer[T]) Len() int      { return 0 }
func (i *Informer[T]) stop()        {}

type Sealed interface{ seal() }

const Version = "v1"

var ErrStopped error

func ForFactory(newInformer func(name string, n int) *Informer[Object]) {}
`

func TestFeatures(t *testing.T) {
	got := features(t, base)
	want := []string{
		`pkg example.com/p, const Version untyped string = "v1"`,
		`pkg example.com/p, func ForFactory(func(string, int) *Informer[Object])`,
		`pkg example.com/p, func New[T Object](context.Context, ...string) *Informer[T]`,
		`pkg example.com/p, method (*Informer[T]) Start() error`,
		`pkg example.com/p, method (Informer[T]) Len() int`,
		`pkg example.com/p, type Informer[T Object] struct`,
		`pkg example.com/p, type Informer[T Object] struct, Name string`,
		`pkg example.com/p, type Object interface`,
		`pkg example.com/p, type Object interface, GetName() string`,
		`pkg example.com/p, type Sealed interface`,
		`pkg example.com/p, type Sealed interface, unexported methods`,
		`pkg example.com/p, var ErrStopped error`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("features:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestCompare: each kind of change is found and classified.
func TestCompare(t *testing.T) {
	old := features(t, base)
	for _, tc := range []struct {
		name         string
		from, to     string
		incompatible bool
	}{
		{"method removed", "func (i Informer[T]) Len() int      { return 0 }", "", true},
		{"variable removed", "var ErrStopped error", "", true},
		{"parameter added", "func New[T Object](ctx context.Context, names ...string)", "func New[T Object](ctx context.Context, n int, names ...string)", true},
		{"parameter renamed", "ctx context.Context, names ...string", "c context.Context, ns ...string", false},
		{"function type's parameter renamed", "func(name string, n int)", "func(s string, count int)", false},
		{"result changed", "func (i Informer[T]) Len() int ", "func (i Informer[T]) Len() int64 ", true},
		{"receiver made pointer", "func (i Informer[T]) Len()", "func (i *Informer[T]) Len()", true},
		{"interface method added", "type Object interface{ GetName() string }", "type Object interface{ GetName() string; GetUID() string }", true},
		{"field added", "Name string\n", "Name string\n\tUID string\n", false},
		{"field type changed", "Name string\n", "Name []byte\n", true},
		{"constant changed", `"v1"`, `"v2"`, true},
		{"function added", "var ErrStopped error", "var ErrStopped error\nfunc Stop() {}", false},
		{"unexported change", "hidden int", "hidden string", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := strings.Replace(base, tc.from, tc.to, 1)
			if src == base {
				t.Fatalf("%q not in the source", tc.from)
			}
			removed, added, broken := compareAPI(old, features(t, src))
			incompatible := len(removed) > 0 || len(broken) > 0
			if incompatible != tc.incompatible {
				t.Errorf("incompatible = %v, want %v (removed %q, added %q)", incompatible, tc.incompatible, removed, added)
			}
			if !tc.incompatible && !strings.Contains(tc.name, "added") {
				if len(removed)+len(added) != 0 {
					t.Errorf("a change outside the API reported: removed %q, added %q", removed, added)
				}
			} else if len(removed)+len(added) == 0 {
				t.Error("change not reported")
			}
		})
	}
}
