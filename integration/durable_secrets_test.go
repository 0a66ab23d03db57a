package integration

import (
	"bytes"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/internal/testenv"
)

// Secrets at rest, against the real server, through a Factory (the way the
// adapters and the CLI keep state): without StateKeys a Secret informer
// writes no state file (a ConfigMap informer beside it does); with keys
// the file holds no byte of the Secret's value, a restart with the keys
// restores it, and a restart with another key restores nothing, says so,
// and lists.
func TestDurableSecretsAtRest(t *testing.T) {
	srv := testenv.Shared(t)
	admin := clientset(t, srv.Config())
	ns := testenv.NewNamespace(t, srv.Config())
	const value = "s3cr3t-only-in-this-secret-7f1c"
	ctx := bounded(t, callTimeout)
	if _, err := admin.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns}, Data: map[string][]byte{"password": []byte(value)}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, admin, configMap(ns, "plain", nil, "x"))
	key := func() []byte {
		k := make([]byte, 32)
		if _, err := rand.Read(k); err != nil {
			t.Fatal(err)
		}
		return k
	}
	files := func(dir string) []string {
		m, _ := filepath.Glob(filepath.Join(dir, "*.kinformer"))
		return m
	}
	// run starts a Factory's Secret (and, if cms, ConfigMap) informer on
	// dir and waits for it; stop stops the factory.
	run := func(dir string, keys [][]byte, cms bool) (secrets *kinformer.Informer[*corev1.Secret], log *recorder[*corev1.Secret], stop func()) {
		f := kinformer.NewFactory(srv.Config(), &kinformer.FactoryOptions{StateDir: dir, StateKeys: keys})
		secrets, err := kinformer.Shared[*corev1.Secret](f, ns, nil)
		if err != nil {
			t.Fatal(err)
		}
		log = &recorder[*corev1.Secret]{}
		reg := secrets.AddHandler(log.handle)
		if cms {
			if _, err := kinformer.Shared[*corev1.ConfigMap](f, ns, nil); err != nil {
				t.Fatal(err)
			}
		}
		f.Start()
		if err := f.WaitForSync(bounded(t, callTimeout)); err != nil {
			t.Fatal(err)
		}
		eventually(t, callTimeout, "the handler has the events up to the sync", reg.HasSynced)
		return secrets, log, f.Stop
	}

	t.Run("without keys", func(t *testing.T) {
		dir := t.TempDir()
		_, _, stop := run(dir, nil, true)
		stop()
		if got := files(dir); len(got) != 1 || strings.Contains(filepath.Base(got[0]), "secret") {
			t.Fatalf("state files %v: want the ConfigMaps' only", got)
		}
		for _, f := range files(dir) {
			if b, _ := os.ReadFile(f); bytes.Contains(b, []byte(value)) {
				t.Fatalf("%s holds the Secret's value", f)
			}
		}
	})

	t.Run("with keys", func(t *testing.T) {
		dir := t.TempDir()
		k1, k2 := key(), key()
		_, _, stop := run(dir, [][]byte{k1}, false)
		stop()
		got := files(dir)
		if len(got) != 1 {
			t.Fatalf("state files %v, want the Secrets'", got)
		}
		b, err := os.ReadFile(got[0])
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(value)) || bytes.Contains(b, []byte(value[:12])) {
			t.Fatalf("%s holds the Secret's value in the clear", got[0])
		}
		secrets, log, stop := run(dir, [][]byte{k1}, false)
		if s, ok := secrets.Cache().GetByKey(ns + "/db"); !ok || string(s.Data["password"]) != value || !restored(log, ns+"/db") {
			t.Fatalf("restart with the key: cached %v, restored %v; errors %v", ok, restored(log, ns+"/db"), log.errs())
		}
		stop()

		secrets, log, stop = run(dir, [][]byte{k2}, false)
		defer stop()
		if restored(log, ns+"/db") {
			t.Fatal("restored with another key")
		}
		errs := log.errs()
		if len(errs) != 1 || !errors.Is(errs[0], kinformer.ErrSnapshot) || !strings.Contains(errs[0].Error(), "state key not given") {
			t.Fatalf("errors with another key: %v", errs)
		}
		if s, ok := secrets.Cache().GetByKey(ns + "/db"); !ok || string(s.Data["password"]) != value {
			t.Fatal("not listed after the file could not be read")
		}
		t.Logf("with another key: %v", errs[0])
	})
}

// restored says whether log has an Added of key from the state file.
func restored(log *recorder[*corev1.Secret], key string) bool {
	return slices.Contains(log.causes(), "ADDED "+key+" restore")
}
