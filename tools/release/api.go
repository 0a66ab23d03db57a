package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/importer"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// The API files, as Go's own api/*.txt: one line per exported feature of
// every public package (not internal/, not a command), sorted:
//
//	pkg github.com/kinformer/kinformer, func New[T Object](ListerWatcher, *Options[T]) *Informer[T]
//	pkg github.com/kinformer/kinformer, type Options[T Object] struct, Compact bool
//	pkg github.com/kinformer/kinformer, method (*Informer[T]) Start(context.Context) error
//
// A feature missing from the code is an incompatible change (a removal, or
// a changed signature or type, which is a removal and an addition), as is
// a method added to an interface that existed (implementations outside
// break). A new feature is compatible but must be recorded too, so that
// the API grows on purpose. Either way the check fails until `make api`
// rewrites the file in the same commit, which shows the change in review.
const apiHeader = "# The exported API of module %s\n" +
	"# (its public packages), one line per feature. Written by `make api`;\n" +
	"# `make test` fails when the code differs.\n" +
	"# An incompatible change needs a CHANGELOG.md entry (see docs/development.md, \"Versions\").\n"

func apiCommand(root string, write bool) error {
	var failed []string
	for _, m := range modules {
		if m.api == "" {
			continue
		}
		got, err := moduleAPI(filepath.Join(root, m.dir), m.dir != ".")
		if err != nil {
			return fmt.Errorf("%s: %w", m.path, err)
		}
		file := filepath.Join(root, "api", m.api)
		if write {
			if err := writeAPI(file, m.path, got); err != nil {
				return err
			}
			fmt.Printf("wrote %s: %d features\n", filepath.Join("api", m.api), len(got))
			continue
		}
		want, err := readAPI(file)
		if err != nil {
			return fmt.Errorf("%w (run `make api` to write it)", err)
		}
		removed, added, broken := compareAPI(want, got)
		if len(removed)+len(added) == 0 {
			fmt.Printf("api/%s: %d features, as recorded\n", m.api, len(got))
			continue
		}
		report(os.Stderr, m.api, removed, added, broken)
		failed = append(failed, m.api)
	}
	if len(failed) > 0 {
		return fmt.Errorf("the exported API differs from api/%s; if the change is meant, run `make api` and commit the file with it (and, for an incompatible change, a CHANGELOG.md entry)", strings.Join(failed, ", api/"))
	}
	return nil
}

func report(w io.Writer, file string, removed, added []string, broken map[string]bool) {
	if len(removed) > 0 || len(broken) > 0 {
		fmt.Fprintf(w, "api/%s: INCOMPATIBLE changes (code a user compiled against the recorded API may not build):\n", file)
		for _, f := range removed {
			fmt.Fprintf(w, "  - %s\n", f)
		}
		for _, f := range added {
			if broken[f] {
				fmt.Fprintf(w, "  + %s (a method added to an interface)\n", f)
			}
		}
	}
	if len(added) > len(broken) {
		fmt.Fprintf(w, "api/%s: new API, not recorded:\n", file)
		for _, f := range added {
			if !broken[f] {
				fmt.Fprintf(w, "  + %s\n", f)
			}
		}
	}
}

// compareAPI returns the recorded features the code lacks, the code's
// features not recorded, and which of those added break users: methods of
// an interface that was recorded.
func compareAPI(want, got []string) (removed, added []string, broken map[string]bool) {
	wantSet := map[string]bool{}
	for _, f := range want {
		wantSet[f] = true
	}
	gotSet := map[string]bool{}
	for _, f := range got {
		gotSet[f] = true
		if !wantSet[f] {
			added = append(added, f)
		}
	}
	for _, f := range want {
		if !gotSet[f] {
			removed = append(removed, f)
		}
	}
	broken = map[string]bool{}
	for _, f := range added {
		// "pkg P, type X[...] interface, M(...)": X's recorded line is
		// "pkg P, type X[...] interface".
		if i := strings.Index(f, " interface, "); i >= 0 && wantSet[f[:i+len(" interface")]] {
			broken[f] = true
		}
	}
	return removed, added, broken
}

func readAPI(file string) ([]string, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if l := sc.Text(); l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	return lines, sc.Err()
}

func writeAPI(file, modPath string, features []string) error {
	var b strings.Builder
	fmt.Fprintf(&b, apiHeader, modPath)
	for _, f := range features {
		b.WriteString(f)
		b.WriteByte('\n')
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	return os.WriteFile(file, []byte(b.String()), 0o644)
}

// listed is what `go list -json` says of a package.
type listed struct {
	ImportPath string
	Name       string
	Export     string
	GoFiles    []string
	DepOnly    bool
	Standard   bool
	Error      *struct{ Err string }
}

// moduleAPI loads the public packages of the module in dir from the
// compiler's export data (`go list -export`: type-checked exactly as a
// build would) and returns their features, sorted. A sub-module is loaded
// in the workspace (it requires the library at the version being
// prepared, which only the workspace provides before the tag); the
// library alone, as a user's build gets it.
func moduleAPI(dir string, workspace bool) ([]string, error) {
	cmd := exec.Command("go", "list", "-export", "-deps", "-e", "-json=ImportPath,Name,Export,GoFiles,DepOnly,Standard,Error", "./...")
	cmd.Dir = dir
	gowork := "GOWORK=off"
	if workspace {
		gowork = "GOWORK=" // the go command finds go.work
	}
	cmd.Env = append(os.Environ(), gowork)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -export: %w\n%s", err, stderr.String())
	}
	exports := map[string]string{}
	var public []string
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listed
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, err
		}
		if p.Error != nil {
			return nil, fmt.Errorf("%s: %s", p.ImportPath, p.Error.Err)
		}
		exports[p.ImportPath] = p.Export
		// Not a dependency, a command, internal, or a directory of tests
		// only (integration/).
		if !p.DepOnly && !p.Standard && p.Name != "main" && len(p.GoFiles) > 0 && !isInternal(p.ImportPath) {
			public = append(public, p.ImportPath)
		}
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		f, ok := exports[path]
		if !ok || f == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(f)
	})
	var features []string
	for _, path := range public {
		pkg, err := imp.Import(path)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		features = append(features, packageFeatures(pkg)...)
	}
	slices.Sort(features)
	return slices.Compact(features), nil
}

func isInternal(path string) bool {
	return strings.HasSuffix(path, "/internal") || strings.Contains(path, "/internal/")
}

// packageFeatures lists pkg's exported features, one string each.
func packageFeatures(pkg *types.Package) []string {
	qual := types.RelativeTo(pkg)
	ts := func(t types.Type) string { return typeString(t, qual) }
	prefix := "pkg " + pkg.Path() + ", "
	var out []string
	add := func(format string, args ...any) { out = append(out, prefix+fmt.Sprintf(format, args...)) }
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		switch o := obj.(type) {
		case *types.Const:
			add("const %s %s = %s", name, ts(o.Type()), o.Val().ExactString())
		case *types.Var:
			add("var %s %s", name, ts(o.Type()))
		case *types.Func:
			add("func %s%s", name, signature(o.Type().(*types.Signature), qual))
		case *types.TypeName:
			if o.IsAlias() {
				add("type %s = %s", name, ts(types.Unalias(o.Type())))
				continue
			}
			named, ok := o.Type().(*types.Named)
			if !ok {
				add("type %s %s", name, ts(o.Type()))
				continue
			}
			out = append(out, typeFeatures(prefix, name, named, qual)...)
		}
	}
	return out
}

func typeFeatures(prefix, name string, named *types.Named, qual types.Qualifier) []string {
	ts := func(t types.Type) string { return typeString(t, qual) }
	var out []string
	add := func(format string, args ...any) { out = append(out, prefix+fmt.Sprintf(format, args...)) }
	decl := name + typeParams(named.TypeParams(), qual, true)
	switch u := named.Underlying().(type) {
	case *types.Struct:
		add("type %s struct", decl)
		for i := range u.NumFields() {
			f := u.Field(i)
			switch {
			case f.Embedded() && f.Exported():
				add("type %s struct, embedded %s", decl, ts(f.Type()))
			case f.Exported():
				add("type %s struct, %s %s", decl, f.Name(), ts(f.Type()))
			}
		}
	case *types.Interface:
		add("type %s interface", decl)
		if !u.IsMethodSet() {
			add("type %s interface, type set %s", decl, ts(u))
		}
		for i := range u.NumMethods() {
			m := u.Method(i)
			if m.Exported() {
				add("type %s interface, %s%s", decl, m.Name(), signature(m.Type().(*types.Signature), qual))
			} else {
				add("type %s interface, unexported methods", decl)
			}
		}
	default:
		add("type %s %s", decl, ts(u))
	}
	recvParams := typeParams(named.TypeParams(), qual, false)
	for i := range named.NumMethods() {
		m := named.Method(i)
		if !m.Exported() {
			continue
		}
		sig := m.Type().(*types.Signature)
		recv := name + recvParams
		if _, ptr := sig.Recv().Type().(*types.Pointer); ptr {
			recv = "*" + recv
		}
		add("method (%s) %s%s", recv, m.Name(), signature(sig, qual))
	}
	return out
}

// signature is sig as written after a function's name: type parameters,
// parameters (types only: names are not part of the API) and results.
func signature(sig *types.Signature, qual types.Qualifier) string {
	var b strings.Builder
	b.WriteString(typeParams(sig.TypeParams(), qual, true))
	b.WriteString(tuple(sig.Params(), sig.Variadic(), qual))
	switch r := sig.Results(); r.Len() {
	case 0:
	case 1:
		b.WriteString(" " + typeString(r.At(0).Type(), qual))
	default:
		b.WriteString(" " + tuple(r, false, qual))
	}
	return b.String()
}

func tuple(t *types.Tuple, variadic bool, qual types.Qualifier) string {
	parts := make([]string, t.Len())
	for i := range t.Len() {
		typ := t.At(i).Type()
		if variadic && i == t.Len()-1 {
			parts[i] = "..." + typeString(typ.(*types.Slice).Elem(), qual)
			continue
		}
		parts[i] = typeString(typ, qual)
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// typeParams is "[T C, U D]" (withConstraints) or "[T, U]"; "" for none.
func typeParams(tps *types.TypeParamList, qual types.Qualifier, withConstraints bool) string {
	if tps.Len() == 0 {
		return ""
	}
	parts := make([]string, tps.Len())
	for i := range tps.Len() {
		tp := tps.At(i)
		parts[i] = tp.Obj().Name()
		if withConstraints {
			parts[i] += " " + typeString(tp.Constraint(), qual)
		}
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// typeString is types.TypeString without parameter names in function
// types, which are not part of the API: func(client kubernetes.Interface)
// and func(c kubernetes.Interface) are one type.
func typeString(t types.Type, qual types.Qualifier) string {
	switch t := t.(type) {
	case *types.Signature:
		return "func" + signature(t, qual)
	case *types.Pointer:
		return "*" + typeString(t.Elem(), qual)
	case *types.Slice:
		return "[]" + typeString(t.Elem(), qual)
	case *types.Array:
		return fmt.Sprintf("[%d]%s", t.Len(), typeString(t.Elem(), qual))
	case *types.Map:
		return "map[" + typeString(t.Key(), qual) + "]" + typeString(t.Elem(), qual)
	case *types.Chan:
		switch t.Dir() {
		case types.SendOnly:
			return "chan<- " + typeString(t.Elem(), qual)
		case types.RecvOnly:
			return "<-chan " + typeString(t.Elem(), qual)
		}
		if c, ok := t.Elem().(*types.Chan); ok && c.Dir() == types.RecvOnly {
			return "chan (" + typeString(t.Elem(), qual) + ")"
		}
		return "chan " + typeString(t.Elem(), qual)
	}
	return types.TypeString(t, qual)
}
