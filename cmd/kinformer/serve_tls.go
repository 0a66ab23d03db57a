package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/spf13/pflag"
)

// serve over TLS (--tls-cert-file, --tls-private-key-file), and who may
// read it by a client certificate (--client-ca-file), as kube-apiserver
// names them. The files are read again when they change (checked at most
// every tlsReloadEvery, at a handshake), so that a certificate renewed on
// disk (cert-manager, kubelet's) is served without a restart; a file that
// does not load then keeps the last good one, with a warning.

// tlsReloadEvery is how often, at most, the files are checked for a
// change.
const tlsReloadEvery = 10 * time.Second

type tlsFlags struct {
	certFile, keyFile, clientCAFile string
	clientNames                     []string
}

func (f *tlsFlags) bind(fs *pflag.FlagSet) {
	fs.StringVar(&f.certFile, "tls-cert-file", "", "serve HTTPS with this certificate (PEM; the server's first, then its chain), read again when it changes")
	fs.StringVar(&f.keyFile, "tls-private-key-file", "", "the private key of --tls-cert-file (PEM)")
	fs.StringVar(&f.clientCAFile, "client-ca-file", "", "with --tls-cert-file: a client certificate signed by one of these CAs (PEM) may read, as --token-file's token may (either is enough)")
	fs.StringSliceVar(&f.clientNames, "client-cert-names", nil, "with --client-ca-file: only client certificates whose Common Name is one of these `NAME`s, comma-separated (without it, every certificate the CAs signed: with the cluster's CA, every node and component)")
}

// check checks the flags' combinations.
func (f *tlsFlags) check() error {
	switch {
	case (f.certFile == "") != (f.keyFile == ""):
		return usageErrorf("serve: --tls-cert-file and --tls-private-key-file go together")
	case f.clientCAFile != "" && f.certFile == "":
		return usageErrorf("serve: --client-ca-file needs --tls-cert-file and --tls-private-key-file (client certificates are sent over TLS only)")
	case f.clientNames != nil && f.clientCAFile == "":
		return usageErrorf("serve: --client-cert-names needs --client-ca-file")
	case slices.Contains(f.clientNames, ""):
		return usageErrorf("serve: --client-cert-names: an empty name")
	}
	return nil
}

// clientCertsGuard reports whether client certificates restrict who
// reads as a token does: a CA and the names it may have signed for. A CA
// alone lets in whatever it signed (the cluster's: every kubelet).
func (f *tlsFlags) clientCertsGuard() bool { return f.clientCAFile != "" && len(f.clientNames) > 0 }

// tlsFiles are serve's certificate, key and client CAs, as last loaded.
type tlsFiles struct {
	flags tlsFlags
	every time.Duration
	warn  func(string)

	mu      sync.Mutex
	checked time.Time // when the files were last looked at
	stamp   string    // their sizes and modification times then
	cert    *tls.Certificate
	pool    *x509.CertPool // nil without --client-ca-file
}

// loadTLS loads the files of f; nil, nil without --tls-cert-file.
func loadTLS(f tlsFlags, warn func(string)) (*tlsFiles, error) {
	if f.certFile == "" {
		return nil, nil
	}
	t := &tlsFiles{flags: f, every: tlsReloadEvery, warn: warn}
	stamp, err := t.fileStamp()
	if err != nil {
		return nil, usageErrorf("serve: %v", err)
	}
	if err := t.load(stamp); err != nil {
		return nil, usageErrorf("serve: %v", err)
	}
	if fi, err := os.Stat(f.keyFile); err == nil && fi.Mode().Perm()&0o044 != 0 {
		warn(fmt.Sprintf("--tls-private-key-file %s (mode %#o) may be read by group or others (chmod go-r)", f.keyFile, fi.Mode().Perm()))
	}
	return t, nil
}

// fileStamp is the files' sizes and modification times: what changes
// when one is written or replaced.
func (t *tlsFiles) fileStamp() (string, error) {
	var b bytes.Buffer
	for _, p := range []struct{ flag, path string }{
		{"--tls-cert-file", t.flags.certFile}, {"--tls-private-key-file", t.flags.keyFile}, {"--client-ca-file", t.flags.clientCAFile},
	} {
		if p.path == "" {
			continue
		}
		fi, err := os.Stat(p.path)
		if err != nil {
			return "", fmt.Errorf("%s: %w", p.flag, err)
		}
		fmt.Fprintf(&b, "%d %d;", fi.Size(), fi.ModTime().UnixNano())
	}
	return b.String(), nil
}

// load reads the files, keeping what it read only if all of it is good.
func (t *tlsFiles) load(stamp string) error {
	cert, err := tls.LoadX509KeyPair(t.flags.certFile, t.flags.keyFile)
	if err != nil {
		return fmt.Errorf("--tls-cert-file %s, --tls-private-key-file %s: %w", t.flags.certFile, t.flags.keyFile, err)
	}
	var pool *x509.CertPool
	if t.flags.clientCAFile != "" {
		pem, err := os.ReadFile(t.flags.clientCAFile)
		if err != nil {
			return fmt.Errorf("--client-ca-file: %w", err)
		}
		pool = x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("--client-ca-file %s: no PEM certificate in it", t.flags.clientCAFile)
		}
	}
	t.cert, t.pool, t.stamp = &cert, pool, stamp
	return nil
}

// current returns the certificate and the client CAs, read again first if
// the files changed since they were last looked at (at most every t.every).
func (t *tlsFiles) current() (*tls.Certificate, *x509.CertPool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if now := time.Now(); now.Sub(t.checked) >= t.every {
		t.checked = now
		stamp, err := t.fileStamp()
		switch {
		case err != nil:
			t.warn(fmt.Sprintf("%v; serving the certificate loaded before", err))
		case stamp != t.stamp:
			if err := t.load(stamp); err != nil {
				t.warn(fmt.Sprintf("%v; serving the certificate loaded before", err))
				t.stamp = stamp // warned once for this version of the files
			}
		}
	}
	return t.cert, t.pool
}

// config is serve's TLS configuration: HTTP/1.1 (each watch on its own
// connection, as without TLS: the connection cap and the write deadlines
// hold as they are tested), TLS 1.2 at least, and a client certificate
// asked for, verified if given, with --client-ca-file.
func (t *tlsFiles) config() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			cert, pool := t.current()
			c := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}, Certificates: []tls.Certificate{*cert}}
			if pool != nil {
				c.ClientCAs, c.ClientAuth = pool, tls.VerifyClientCertIfGiven
			}
			return c, nil
		},
	}
}

// verifiedClient reports whether req came with a client certificate that
// --client-ca-file's CAs verified, whose Common Name is one of names (any,
// if names is empty).
func verifiedClient(req *http.Request, names []string) bool {
	if req.TLS == nil || len(req.TLS.VerifiedChains) == 0 || len(req.TLS.VerifiedChains[0]) == 0 {
		return false
	}
	return len(names) == 0 || slices.Contains(names, req.TLS.VerifiedChains[0][0].Subject.CommonName)
}
