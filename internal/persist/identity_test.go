package persist

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
)

// Whom a config impersonates is part of whom it acts as: the user, and
// also the UID, each group and each extra alone. A state file written as
// one of them is never restored as another (the server may let one read
// what the other may not).
func TestUserImpersonation(t *testing.T) {
	as := func(imp rest.ImpersonationConfig) *rest.Config {
		return &rest.Config{Host: "https://k8s.example", BearerToken: "token", Impersonate: imp}
	}
	configs := []struct {
		name string
		cfg  *rest.Config
	}{
		{"no one", as(rest.ImpersonationConfig{})},
		{"bob", as(rest.ImpersonationConfig{UserName: "bob"})},
		{"bob, uid 1", as(rest.ImpersonationConfig{UserName: "bob", UID: "1"})},
		{"bob in dev", as(rest.ImpersonationConfig{UserName: "bob", Groups: []string{"dev"}})},
		{"bob in admins", as(rest.ImpersonationConfig{UserName: "bob", Groups: []string{"admins"}})},
		{"bob in dev and admins", as(rest.ImpersonationConfig{UserName: "bob", Groups: []string{"dev", "admins"}})},
		{"no user, in admins", as(rest.ImpersonationConfig{Groups: []string{"admins"}})},
		{"bob, scope a", as(rest.ImpersonationConfig{UserName: "bob", Extra: map[string][]string{"scope": {"a"}}})},
		{"bob, scope b", as(rest.ImpersonationConfig{UserName: "bob", Extra: map[string][]string{"scope": {"b"}}})},
	}
	seen := map[string]string{}
	for _, c := range configs {
		u := User(c.cfg)
		if other, ok := seen[u]; ok {
			t.Errorf("%q and %q are one user (%s): a state file of one would be restored as the other", c.name, other, u)
		}
		seen[u] = c.name
	}

	// A state file written impersonating group dev is not restored
	// impersonating group admins.
	dir := t.TempDir()
	asGroup := func(cfg *rest.Config) *Persister[*corev1.ConfigMap] {
		p, _ := testPersister(t, dir)
		p.cfg.Identity.Source = "https://k8s.example configmaps user=" + User(cfg)
		return p
	}
	dev := asGroup(configs[3].cfg)
	openPersister(t, dev)
	dev.Record("a/one", labelled("a", "one", "1"), false, "1")
	dev.Start()
	dev.Stop()
	admins := asGroup(configs[4].cfg)
	items, rv := openPersister(t, admins)
	admins.Start()
	admins.Stop()
	if len(items) != 0 || rv != "" {
		t.Errorf("impersonating group admins restored %d objects at %q from the file written impersonating group dev (%s)", len(items), rv, dev.Path())
	}

	// One config, one user, whatever the order of its extras' keys.
	extras := func() *rest.Config {
		return as(rest.ImpersonationConfig{UserName: "bob", Extra: map[string][]string{"a": {"1"}, "b": {"2"}, "c": {"3"}, "d": {"4"}}})
	}
	if first := User(extras()); first != User(extras()) {
		t.Error("one config, two users")
	}
}
