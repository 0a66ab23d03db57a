package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kinformer/kinformer/internal/testenv"
)

// testCA is a certificate authority made for a test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

var serial struct {
	sync.Mutex
	n int64
}

func nextSerial() *big.Int {
	serial.Lock()
	defer serial.Unlock()
	serial.n++
	return big.NewInt(serial.n)
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: nextSerial(), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue makes a certificate of ca for cn: a server's for 127.0.0.1 and
// localhost, or a client's; it returns its PEM and its key's.
func (ca *testCA) issue(t *testing.T, cn string, server bool) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: nextSerial(), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.DNSNames, tmpl.IPAddresses = []string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

func writeFile(t *testing.T, path string, b []byte) string {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Over TLS with --client-ca-file, client-go reads through serve's
// --kube-api with a client certificate of that CA, or with the token;
// without either it gets 401 (a Status client-go understands); a
// certificate of another CA does not get through the handshake, plain
// HTTP is told to speak HTTPS. Against the real API server.
func TestServeTLSClientCertificates(t *testing.T) {
	t.Parallel()
	srv := testenv.Shared(t)
	ns := testenv.NewNamespace(t, srv.Config())
	real := kubernetes.NewForConfigOrDie(srv.Config())
	ctx := context.Background()
	for i := range 3 {
		if _, err := real.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	serverCA, clientCA, otherCA := newTestCA(t, "serving"), newTestCA(t, "clients"), newTestCA(t, "others")
	certPEM, keyPEM := serverCA.issue(t, "kinformer-serve", true)
	_, base := startServe(t, "configmaps", "-n", ns, "--kube-api", kubeconfigArg(srv),
		"--tls-cert-file", writeFile(t, filepath.Join(dir, "tls.crt"), certPEM),
		"--tls-private-key-file", writeFile(t, filepath.Join(dir, "tls.key"), keyPEM),
		"--client-ca-file", writeFile(t, filepath.Join(dir, "ca.crt"), clientCA.pem), "--client-cert-names", "reader,auditor",
		"--token-file", writeFile(t, filepath.Join(dir, "token"), []byte(testToken+"\n")))
	if !strings.HasPrefix(base, "https://") {
		t.Fatalf("serve says it serves on %s", base)
	}
	host := strings.TrimSuffix(base, "/")
	config := func(cert, key []byte, token string) *rest.Config {
		return &rest.Config{Host: host, BearerToken: token, Timeout: 30 * time.Second,
			TLSClientConfig: rest.TLSClientConfig{CAData: serverCA.pem, CertData: cert, KeyData: key}}
	}
	clientCert, clientKey := clientCA.issue(t, "reader", false)
	byCert := kubernetes.NewForConfigOrDie(config(clientCert, clientKey, ""))
	var list *corev1.ConfigMapList
	waitFor(t, "serve's cache ready over TLS", 60*time.Second, func() bool {
		var err error
		list, err = byCert.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
		return err == nil
	})
	if len(list.Items) != 3 {
		t.Fatalf("listed %d configmaps with a client certificate, want 3", len(list.Items))
	}
	w, err := byCert.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if _, err := real.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "new"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.ResultChan():
		if cm, ok := ev.Object.(*corev1.ConfigMap); ev.Type != watch.Added || !ok || cm.Name != "new" {
			t.Errorf("watching with a client certificate: %s %#v", ev.Type, ev.Object)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no event in 30 s watching with a client certificate")
	}

	// The token is enough; nothing is not.
	if l, err := kubernetes.NewForConfigOrDie(config(nil, nil, testToken)).CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{}); err != nil || len(l.Items) != 4 {
		t.Errorf("listing with the token: %v", err)
	}
	_, err = kubernetes.NewForConfigOrDie(config(nil, nil, "")).CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if !apierrors.IsUnauthorized(err) || !strings.Contains(err.Error(), "--client-ca-file") {
		t.Errorf("listing without a certificate or the token: %v; want 401 naming --client-ca-file", err)
	}
	// A certificate of the CA for another name is not enough.
	nodeCert, nodeKey := clientCA.issue(t, "system:node:worker-1", false)
	_, err = kubernetes.NewForConfigOrDie(config(nodeCert, nodeKey, "")).CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if !apierrors.IsUnauthorized(err) || !strings.Contains(err.Error(), "--client-cert-names") {
		t.Errorf("listing with a certificate of the CA for a name not in --client-cert-names: %v; want 401", err)
	}
	// A certificate of another CA fails the handshake.
	otherCert, otherKey := otherCA.issue(t, "stranger", false)
	if _, err = kubernetes.NewForConfigOrDie(config(otherCert, otherKey, "")).CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{}); err == nil || apierrors.IsUnauthorized(err) {
		t.Errorf("listing with a certificate of another CA: %v; want the handshake refused", err)
	}
	// The rest of serve too, by certificate.
	tc, _ := rest.TLSConfigFor(config(clientCert, clientKey, ""))
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get(base + "objects")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"new"`) {
		t.Errorf("/objects with a client certificate: %d %.200s", resp.StatusCode, body)
	}
	// Plain HTTP is told.
	resp, err = httpClient.Get("http://" + strings.TrimPrefix(base, "https://") + "healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(body), "HTTPS") {
		t.Errorf("plain HTTP to serve over TLS: %d %q", resp.StatusCode, body)
	}
}

// The TLS flags are checked before anything is loaded, each error naming
// its flag and file.
func TestServeTLSUsage(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := newTestCA(t, "ca")
	cert, key := ca.issue(t, "serve", true)
	certFile, keyFile := writeFile(t, filepath.Join(dir, "tls.crt"), cert), writeFile(t, filepath.Join(dir, "tls.key"), key)
	garbage := writeFile(t, filepath.Join(dir, "garbage"), []byte("not PEM\n"))
	for _, tt := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--tls-cert-file", certFile}, "serve: --tls-cert-file and --tls-private-key-file go together"},
		{[]string{"--tls-private-key-file", keyFile}, "serve: --tls-cert-file and --tls-private-key-file go together"},
		{[]string{"--client-ca-file", certFile}, "serve: --client-ca-file needs --tls-cert-file"},
		{[]string{"--client-cert-names", "reader"}, "serve: --client-cert-names needs --client-ca-file"},
		{[]string{"--tls-cert-file", certFile, "--tls-private-key-file", keyFile, "--client-ca-file", certFile, "--client-cert-names", "a,,b"}, "serve: --client-cert-names: an empty name"},
		{[]string{"--tls-cert-file", filepath.Join(dir, "nope"), "--tls-private-key-file", keyFile}, "serve: --tls-cert-file: stat " + filepath.Join(dir, "nope")},
		{[]string{"--tls-cert-file", certFile, "--tls-private-key-file", garbage}, "serve: --tls-cert-file " + certFile + ", --tls-private-key-file " + garbage},
		{[]string{"--tls-cert-file", certFile, "--tls-private-key-file", keyFile, "--client-ca-file", garbage}, "serve: --client-ca-file " + garbage + ": no PEM certificate in it"},
	} {
		args := append([]string{"serve", "configmaps"}, tt.args...)
		code, stdout, stderr := runCmd(t, nil, args...)
		first, _, _ := strings.Cut(stderr, "\n")
		if code != exitUsage || !strings.Contains(first, tt.msg) || stdout != "" {
			t.Errorf("kinformer %q: exit %d, stdout %q, stderr %q; want %d and %q first", args, code, stdout, stderr, exitUsage, tt.msg)
		}
	}
	// A client CA alone lets in whatever it signed: said, and not enough
	// to serve Secrets.
	caFile := writeFile(t, filepath.Join(dir, "ca.crt"), ca.pem)
	args := []string{"serve", "secrets", "--tls-cert-file", certFile, "--tls-private-key-file", keyFile, "--client-ca-file", caFile, kubeconfigArg(testenv.Shared(t))}
	code, stdout, stderr := runCmd(t, nil, args...)
	if code != exitUsage || stdout != "" || !strings.Contains(stderr, "without --client-cert-names: every certificate its CAs signed may read") ||
		!strings.Contains(stderr, "serve: serving secrets without --token-file") || !strings.Contains(stderr, "--client-ca-file with --client-cert-names") {
		t.Errorf("kinformer %q: exit %d, stderr %q; want a warning that the CA alone lets in whatever it signed, and Secrets refused", args, code, stderr)
	}
}

// A certificate renewed on disk is served from the next handshake after
// the files are checked again; a broken one keeps the last good one, with
// a warning.
func TestTLSFilesReload(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := newTestCA(t, "ca")
	cert, key := ca.issue(t, "first", true)
	f := tlsFlags{certFile: writeFile(t, filepath.Join(dir, "tls.crt"), cert), keyFile: writeFile(t, filepath.Join(dir, "tls.key"), key)}
	var mu sync.Mutex
	var warned []string
	warnings := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), warned...)
	}
	tf, err := loadTLS(f, func(s string) {
		mu.Lock()
		defer mu.Unlock()
		warned = append(warned, s)
	})
	if err != nil {
		t.Fatal(err)
	}
	tf.every = 0
	ln, err := tls.Listen("tcp", "127.0.0.1:0", tf.config())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				_ = c.(*tls.Conn).Handshake()
				c.Close()
			}()
		}
	}()
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	served := func() string {
		t.Helper()
		c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: pool, ServerName: "localhost"})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	if got := served(); got != "first" {
		t.Fatalf("served %q, want first", got)
	}
	// Renewed: key first, then certificate, as a renewal writes them (a
	// moment later: the files' times are what changes).
	time.Sleep(20 * time.Millisecond)
	cert, key = ca.issue(t, "second", true)
	writeFile(t, f.keyFile, key)
	writeFile(t, f.certFile, cert)
	if got := served(); got != "second" {
		t.Errorf("after renewal served %q, want second", got)
	}
	time.Sleep(20 * time.Millisecond)
	writeFile(t, f.certFile, []byte("truncated"))
	if got, w := served(), warnings(); got != "second" || len(w) != 1 || !strings.Contains(w[0], "serving the certificate loaded before") {
		t.Errorf("with a broken file: served %q, warnings %q", got, w)
	}
	served() // warned once for one version of the files
	if w := warnings(); len(w) != 1 {
		t.Errorf("warnings %q, want one", w)
	}
}
