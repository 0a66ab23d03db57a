package kinformer

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
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
