package main

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki names the files of the generated public key infrastructure. Everything
// is generated once and kept in <data-dir>/pki, so a restart on the same data
// dir keeps the same CA, serving certificate, service-account key and client
// certificates (old kubeconfigs stay valid).
type pki struct {
	dir string
}

func (p pki) path(name string) string { return filepath.Join(p.dir, name) }

func (p pki) CACert() string         { return p.path("ca.crt") }
func (p pki) CAKey() string          { return p.path("ca.key") }
func (p pki) ServingCert() string    { return p.path("apiserver.crt") }
func (p pki) ServingKey() string     { return p.path("apiserver.key") }
func (p pki) SAKey() string          { return p.path("sa.key") }
func (p pki) SAPub() string          { return p.path("sa.pub") }
func (p pki) AdminCert() string      { return p.path("admin.crt") }
func (p pki) AdminKey() string       { return p.path("admin.key") }
func (p pki) RestrictedCert() string { return p.path("restricted.crt") }
func (p pki) RestrictedKey() string  { return p.path("restricted.key") }

const (
	adminUser      = "kinformer-admin"
	restrictedUser = "restricted-user"
	certValidity   = 10 * 365 * 24 * time.Hour
)

// ensure generates every missing file. It is idempotent: existing files are
// kept. The marker file "complete" is written last, so an interrupted first
// run (e.g. SIGKILL) regenerates everything on the next start.
func (p pki) ensure() error {
	if _, err := os.Stat(p.path("complete")); err == nil {
		return nil
	}
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		return err
	}
	caKey, err := newKey()
	if err != nil {
		return err
	}
	now := time.Now().Add(-time.Hour)
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "kinformer-localapi-ca"},
		NotBefore:             now,
		NotAfter:              now.Add(certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	if err := writeCert(p.CACert(), caDER); err != nil {
		return err
	}
	if err := writeKey(p.CAKey(), caKey); err != nil {
		return err
	}

	issue := func(certPath, keyPath string, tmpl *x509.Certificate) error {
		key, err := newKey()
		if err != nil {
			return err
		}
		tmpl.SerialNumber = serial()
		tmpl.NotBefore = now
		tmpl.NotAfter = now.Add(certValidity)
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, key.Public(), caKey)
		if err != nil {
			return err
		}
		if err := writeCert(certPath, der); err != nil {
			return err
		}
		return writeKey(keyPath, key)
	}

	if err := issue(p.ServingCert(), p.ServingKey(), &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"localhost", "kubernetes", "kubernetes.default",
			"kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(serviceIP)},
	}); err != nil {
		return err
	}
	if err := issue(p.AdminCert(), p.AdminKey(), &x509.Certificate{
		Subject:     pkix.Name{CommonName: adminUser, Organization: []string{"system:masters"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return err
	}
	if err := issue(p.RestrictedCert(), p.RestrictedKey(), &x509.Certificate{
		Subject:     pkix.Name{CommonName: restrictedUser, Organization: []string{"kinformer:restricted"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return err
	}

	saKey, err := newKey()
	if err != nil {
		return err
	}
	if err := writeKey(p.SAKey(), saKey); err != nil {
		return err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return err
	}
	if err := writePEM(p.SAPub(), "PUBLIC KEY", pubDER, 0o600); err != nil {
		return err
	}
	return os.WriteFile(p.path("complete"), []byte("ok\n"), 0o600)
}

func newKey() (*ecdsa.PrivateKey, error) {
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		panic(err)
	}
	return n
}

func writeCert(path string, der []byte) error {
	return writePEM(path, "CERTIFICATE", der, 0o644)
}

func writeKey(path string, key crypto.Signer) error {
	k, ok := key.(*ecdsa.PrivateKey)
	if !ok {
		return errors.New("unsupported key type")
	}
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return err
	}
	return writePEM(path, "EC PRIVATE KEY", der, 0o600)
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	data := pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
	if err := writeFileAtomic(path, data, mode); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// writeFileAtomic writes data to a temporary file and renames it into place,
// so that a reader (or a restart after SIGKILL) never sees a partial file.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
