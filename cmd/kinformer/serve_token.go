package main

import (
	"bufio"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// serve's access token (--token-file): without it, anyone who can reach
// the address reads what it serves, which on loopback is every process
// and user of the machine. With it, every request but /healthz must
// carry the token: "Authorization: Bearer TOKEN", or the cookie the page
// gets by opening /?token=TOKEN once (an EventSource cannot send a
// header). Compared in constant time (of their SHA-256, so that not even
// the length shows).

const (
	// tokenCookie carries the token for the page and its event streams.
	tokenCookie = "kinformer-token"
	// minTokenLen is the shortest token accepted: 16 bytes of text.
	minTokenLen = 16
	// maxTokenFile caps what is read of the token file.
	maxTokenFile = 4 << 10
)

// accessToken is the token serve requires; nil: none.
type accessToken struct {
	sum [sha256.Size]byte
}

// readTokenFile reads the token: the file's first line, without the
// spaces around it. warn is told if group or others may read the file.
func readTokenFile(path string, warn func(string)) (*accessToken, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--token-file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("--token-file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("--token-file %s: not a regular file", path)
	}
	if fi.Mode().Perm()&0o044 != 0 {
		warn(fmt.Sprintf("--token-file %s (mode %#o) may be read by group or others, who can then read what serve serves (chmod go-r)", path, fi.Mode().Perm()))
	}
	line, err := bufio.NewReader(io.LimitReader(f, maxTokenFile)).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("--token-file %s: %w", path, err)
	}
	tok := strings.TrimSpace(line)
	if len(tok) < minTokenLen {
		return nil, fmt.Errorf("--token-file %s: the token (its first line) must be at least %d characters; make one with: head -c 32 /dev/urandom | base64 > %s", path, minTokenLen, path)
	}
	return &accessToken{sum: sha256.Sum256([]byte(tok))}, nil
}

// matches reports, in constant time, whether tok is the token.
func (a *accessToken) matches(tok string) bool {
	sum := sha256.Sum256([]byte(tok))
	return subtle.ConstantTimeCompare(sum[:], a.sum[:]) == 1
}

// presented returns the token req carries (header, then cookie); "" if
// none.
func presented(req *http.Request) string {
	if h := req.Header.Get("Authorization"); h != "" {
		scheme, tok, ok := strings.Cut(h, " ")
		if ok && strings.EqualFold(scheme, "Bearer") {
			return strings.TrimSpace(tok)
		}
		return ""
	}
	if c, err := req.Cookie(tokenCookie); err == nil {
		return c.Value
	}
	return ""
}

// check lets req through (true) if it carries the token, or, with certs
// (--client-ca-file), a verified client certificate (of one of certNames,
// if any: --client-cert-names); or answers it:
// /healthz always; /readyz without details; the page opened with
// ?token= sets the cookie and sends the browser to the page without it
// in its address; anything else 401. With neither a token nor certs,
// everything goes through.
func (a *accessToken) check(w http.ResponseWriter, req *http.Request, ready func() bool, certs bool, certNames []string) bool {
	if a == nil && !certs || req.URL.Path == "/healthz" {
		return true
	}
	if certs && verifiedClient(req, certNames) {
		return true
	}
	if tok := presented(req); a != nil && tok != "" && a.matches(tok) {
		return true
	}
	if a != nil && req.URL.Path == "/" && req.URL.Query().Has("token") {
		if !a.matches(req.URL.Query().Get("token")) {
			writeError(w, http.StatusUnauthorized, "wrong token")
			return false
		}
		http.SetCookie(w, &http.Cookie{
			Name: tokenCookie, Value: req.URL.Query().Get("token"), Path: "/",
			HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: req.TLS != nil,
		})
		http.Redirect(w, req, "/", http.StatusSeeOther)
		return false
	}
	if req.URL.Path == "/readyz" {
		// Probes without the token learn whether it is ready, not why.
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if ready() {
			fmt.Fprintln(w, "ok")
			return false
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, "not ready (the reasons need the token)")
		return false
	}
	var msg string
	switch {
	case a != nil && certs:
		msg = "this server requires its token (--token-file) or a client certificate of its --client-ca-file (and --client-cert-names): send \"Authorization: Bearer TOKEN\", or open /?token=TOKEN once in a browser"
	case a != nil:
		msg = "this server requires its token (--token-file): send \"Authorization: Bearer TOKEN\", or open /?token=TOKEN once in a browser"
	default:
		msg = "this server requires a client certificate signed by a CA of its --client-ca-file (and, with --client-cert-names, of one of those Common Names)"
	}
	if a != nil {
		w.Header().Set("WWW-Authenticate", `Bearer realm="kinformer serve"`)
	}
	if isKubePath(req.URL.Path) {
		kubeStatus(w, apierrors.NewUnauthorized(msg), msg)
		return false
	}
	writeError(w, http.StatusUnauthorized, "%s", msg)
	return false
}
