package kinformer

import (
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/kinformer/kinformer/internal/persist"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
)

var stateFileName = regexp.MustCompile(`^[A-Za-z0-9._-]*-[0-9a-f]{16}\.kinformer$`)

// FuzzKeys: the key and index functions never panic on any namespace and
// name; a key splits back into them (with client-go's split, kinformer
// having none) wherever neither holds a "/", as no server allows; and an
// object cached under its key is found by it, by GetNamespaced and by the
// namespace index, whatever the strings. A state file's path stays in its
// directory whatever the name.
func FuzzKeys(f *testing.F) {
	for _, s := range [][2]string{{"ns", "name"}, {"", "node-1"}, {"a/b", "c"}, {"a", "b/c"}, {"", ""}, {"x", ""}, {"..", "../../etc"}, {"ns", "\x00\xff/"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, ns, name string) {
		obj := cm(ns, name)
		key := MetaNamespaceKey(obj)
		if !strings.Contains(ns, "/") && !strings.Contains(name, "/") {
			gotNS, gotName, err := cache.SplitMetaNamespaceKey(key)
			if err != nil || gotNS != ns || gotName != name {
				t.Fatalf("key %q of %q/%q splits into %q, %q, %v", key, ns, name, gotNS, gotName, err)
			}
		}
		c := newCache[*corev1.ConfigMap](nil, nil)
		if idx := c.Indexers()[IndexNamespace](obj); len(idx) != 1 || idx[0] != ns {
			t.Fatalf("namespace index of %q: %q", ns, idx)
		}

		w, _ := newTestWriter(c)
		w.apply(Added, arrivalOf(obj), w.prepare)
		if got, ok := c.GetByKey(key); !ok || got.Name != name || got.Namespace != ns {
			t.Fatalf("GetByKey(%q): %v %v", key, got, ok)
		}
		if got, ok := c.GetNamespaced(ns, name); !ok || got.Name != name || got.Namespace != ns {
			t.Fatalf("GetNamespaced(%q, %q): %v %v", ns, name, got, ok)
		}
		if keys, err := c.IndexKeys(IndexNamespace, ns); err != nil || !slices.Equal(keys, []string{key}) {
			t.Fatalf("IndexKeys(namespace, %q): %q, %v", ns, keys, err)
		}
		w.apply(Deleted, arrivalOf(obj), w.prepare)
		if c.Len() != 0 {
			t.Fatalf("%d objects after deleting the only one", c.Len())
		}

		dir := filepath.Join("state", "dir")
		p := persist.Path(dir, name, []byte("key"), ns)
		if filepath.Dir(p) != dir || !stateFileName.MatchString(filepath.Base(p)) {
			t.Fatalf("state file of %q: %q", name, p)
		}
	})
}
