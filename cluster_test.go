package kinformer

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
)

// testCA is a certificate authority that issues serving certificates for
// 127.0.0.1.
type testCA struct {
	cert *x509.Certificate
	der  []byte
	key  *ecdsa.PrivateKey
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, der: der, key: key}
}

// serving issues a serving certificate (a new key each time, as a
// re-issued one), presented with the CA's own if withRoot.
func (ca *testCA) serving(t *testing.T, serial int64, withRoot bool) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "kube-apiserver"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	chain := [][]byte{der}
	if withRoot {
		chain = append(chain, ca.der)
	}
	return tls.Certificate{Certificate: chain, PrivateKey: key}
}

// fingerprint serves cert and returns clusterOf a connection to it, made
// trusting roots (none: insecure-skip-tls-verify).
func fingerprint(t *testing.T, cert tls.Certificate, roots ...*testCA) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	defer srv.Close()
	cfg := &tls.Config{InsecureSkipVerify: len(roots) == 0} //nolint:gosec // the insecure-skip-tls-verify case
	if len(roots) > 0 {
		cfg.RootCAs = x509.NewCertPool()
		for _, r := range roots {
			cfg.RootCAs.AddCert(r.cert)
		}
	}
	conn, err := tls.Dial("tcp", srv.Listener.Addr().String(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return clusterOf(conn)
}

// A cluster is its certificate authority: the same through a re-issued
// serving certificate, presented with the root or without (servers of one
// cluster may differ), and another for another authority; without
// verification, still a fingerprint of what the server presents.
func TestClusterOfIsTheRootThatVerified(t *testing.T) {
	a, b := newTestCA(t, "cluster-a"), newTestCA(t, "cluster-b")
	alone := fingerprint(t, a.serving(t, 2, false), a)
	withRoot := fingerprint(t, a.serving(t, 3, true), a)
	if alone == "" || alone != withRoot {
		t.Errorf("one authority: %q with the serving certificate alone, %q with the root presented too; want one fingerprint", alone, withRoot)
	}
	if other := fingerprint(t, b.serving(t, 2, false), a, b); other == alone {
		t.Errorf("another authority: %q, the same as the first's", other)
	}
	if bare := fingerprint(t, a.serving(t, 4, false)); bare == "" {
		t.Error("insecure-skip-tls-verify: no fingerprint")
	}
	if got := clusterOf(&net.TCPConn{}); got != "" {
		t.Errorf("plain TCP: %q, want none", got)
	}
}

// TestOtherCluster is the judgement of a state file's cluster against the
// server's, files written before the uid was recorded included.
func TestOtherCluster(t *testing.T) {
	const caA, caB, uidA, uidB = "ca-sha256:aa", "ca-sha256:bb", "uid-a", "uid-b"
	for _, tc := range []struct {
		name      string
		file, now clusterID
		want      string // a part of the reason; "" for the same cluster
	}{
		{"same CA and uid", clusterID{caA, uidA}, clusterID{caA, uidA}, ""},
		{"one root, another uid", clusterID{caA, uidA}, clusterID{caA, uidB}, "kube-system uid uid-a, the server's is uid-b"},
		{"another uid and CA: the uid says it", clusterID{caA, uidA}, clusterID{caB, uidB}, "kube-system uid uid-a"},
		{"a file before the uid: the CA alone, same", clusterID{caA, ""}, clusterID{caA, uidB}, ""},
		{"a file before the uid: the CA alone, other", clusterID{caA, ""}, clusterID{caB, uidB}, "another certificate authority"},
		{"kube-system unreadable now: the CA alone", clusterID{caA, uidA}, clusterID{caA, ""}, ""},
		{"kube-system unreadable now, another CA", clusterID{caA, uidA}, clusterID{caB, ""}, "another certificate authority"},
		{"no cluster recorded", clusterID{}, clusterID{caA, uidA}, "does not say"},
		{"plain HTTP now", clusterID{caA, ""}, clusterID{}, ""},
	} {
		// Through the file's record, as written and read back.
		got := otherCluster(parseCluster(tc.file.String()), tc.now)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	if c := parseCluster(caA); c != (clusterID{ca: caA}) {
		t.Errorf("a record of the CA alone reads as %+v", c)
	}
}

// A running informer's trace notes another certificate authority on a
// new connection (the name moved to another cluster), and nothing for a
// re-issued serving certificate of the same one.
func TestTraceClusterNoticesAnotherAuthority(t *testing.T) {
	a, b := newTestCA(t, "cluster-a"), newTestCA(t, "cluster-b")
	serve := func(cert tls.Certificate) string {
		srv := httptest.NewUnstartedServer(http.NotFoundHandler())
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
		srv.StartTLS()
		t.Cleanup(srv.Close)
		return srv.URL
	}
	first, reissued, other := serve(a.serving(t, 2, false)), serve(a.serving(t, 3, true)), serve(b.serving(t, 2, false))
	roots := x509.NewCertPool()
	roots.AddCert(a.cert)
	roots.AddCert(b.cert)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}
	defer tr.CloseIdleConnections()
	l := &loop[*corev1.ConfigMap]{log: slog.New(slog.DiscardHandler)}
	get := func(url string) string {
		t.Helper()
		req, err := http.NewRequestWithContext(l.traceCluster(t.Context()), http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return l.rebound(t.Context())
	}
	if why := get(first); why != "" {
		t.Errorf("the first connection: %q", why)
	}
	if why := get(reissued); why != "" {
		t.Errorf("a re-issued certificate of the same authority: %q", why)
	}
	if why := get(other); !strings.Contains(why, "another certificate authority") {
		t.Errorf("another authority: %q, want it noticed", why)
	}
	if why := get(other); why != "" {
		t.Errorf("the same authority again: %q, want it said once", why)
	}
}

// A re-list that comes back below the cache's resourceVersion is another
// history (another cluster behind the name, etcd restored from a backup):
// said once, as ErrAnotherHistory, and the diff goes by uid as well as by
// resourceVersion, since another cluster's object may share both key and
// resourceVersion with the cached one.
func TestRelistBelowTheCacheIsAnotherHistory(t *testing.T) {
	s := newFakeServer()
	withUID := func(name, uid string) *corev1.ConfigMap {
		c := cm("ns", name)
		c.UID = types.UID(uid)
		return c
	}
	s.put(withUID("shared", "uid-a")) // resourceVersion 1
	s.put(withUID("gone", "uid-gone"))
	s.put(withUID("more", "uid-more")) // 3
	inf, rec := startInformer(t, s, nil)
	eventually(t, "watch open", func() bool { return s.openWatches() == 1 })
	rec.reset()

	// Another history: at 2, "shared" another object at A's version.
	s.mu.Lock()
	shared, onlyB := withUID("shared", "uid-b"), withUID("only-b", "uid-only-b")
	// At A's version: only the uid tells the two apart, or, in a compact
	// cache (which keeps no uids unsharded), the bytes (data differ).
	shared.ResourceVersion, onlyB.ResourceVersion = "1", "2"
	shared.Data = map[string]string{"from": "b"}
	s.rv, s.compacted, s.history = 2, 2, nil
	s.objs = map[string]*corev1.ConfigMap{"ns/shared": shared, "ns/only-b": onlyB}
	s.mu.Unlock()
	s.sendRaw(watch.Event{Type: watch.Error, Object: &apierrors.NewResourceExpired("too old resource version").ErrStatus})

	eventually(t, "the cache to be the other history's", func() bool {
		o, ok := inf.Cache().GetByKey("ns/shared")
		return ok && o.UID == "uid-b" && inf.Cache().Len() == 2
	})
	eventually(t, "the ERROR event", func() bool {
		return slices.ContainsFunc(rec.all(), func(e cmEvent) bool { return errors.Is(e.Err, ErrAnotherHistory) })
	})
	// The cache changes before the events are queued, and in the compact
	// run the shared object's Modified comes from a second, fresh list,
	// after the ERROR event: wait for the handler.
	want := []string{"ADDED ns/only-b", "DELETED ns/gone", "DELETED ns/more", "MODIFIED ns/shared"}
	eventually(t, "the events", func() bool { return len(rec.lines(true, Added, Modified, Deleted)) >= len(want) })
	if got := rec.lines(true, Added, Modified, Deleted); !slices.Equal(got, want) {
		t.Errorf("events %v, want %v", got, want)
	}
	n := 0
	for _, e := range rec.all() {
		if errors.Is(e.Err, ErrAnotherHistory) {
			n++
			if !strings.Contains(e.Err.Error(), "resourceVersion 2 is below the cache's 3") {
				t.Errorf("error %q does not say which versions", e.Err)
			}
		}
	}
	if n != 1 {
		t.Errorf("%d ErrAnotherHistory events, want 1", n)
	}
}

// A watch that finds another cluster behind a new connection (rebound:
// here the reason is planted, as a new certificate authority or
// kube-system uid would give it) re-lists fresh: an object of the other
// cluster at a cached key and resourceVersion is Modified, its content
// the new one's, not kept from the cache (a compact cache, which keeps no
// uids unsharded, tells it by its bytes).
func TestAnotherClusterBehindTheWatchIsListedFresh(t *testing.T) {
	s := newFakeServer()
	a := cm("ns", "shared")
	a.UID, a.Data = "uid-a", map[string]string{"from": "a"}
	s.put(a) // resourceVersion 1
	s.put(cm("ns", "other"))
	inf, rec := startInformer(t, s, nil)
	eventually(t, "watch open", func() bool { return s.openWatches() == 1 })
	rec.reset()

	s.mu.Lock()
	b := cm("ns", "shared")
	b.UID, b.Data, b.ResourceVersion = "uid-b", map[string]string{"from": "b"}, "1"
	s.objs["ns/shared"] = b
	s.mu.Unlock()
	why := "the server is another cluster: planted"
	inf.loop.moved.Store(&why)
	s.closeWatches()

	eventually(t, "the cache to hold the other cluster's object", func() bool {
		o, ok := inf.Cache().GetByKey("ns/shared")
		return ok && o.Data["from"] == "b"
	})
	eventually(t, "the ERROR event", func() bool {
		return slices.ContainsFunc(rec.all(), func(e cmEvent) bool { return errors.Is(e.Err, ErrAnotherHistory) })
	})
	// The cache changes before the event is queued: wait for the handler.
	want := []string{"MODIFIED ns/shared"}
	eventually(t, "the Modified event", func() bool { return len(rec.lines(true, Added, Modified, Deleted)) >= len(want) })
	if got := rec.lines(true, Added, Modified, Deleted); !slices.Equal(got, want) {
		t.Errorf("events %v, want %v", got, want)
	}
}
