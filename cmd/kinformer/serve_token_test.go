package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kinformer/kinformer/internal/testenv"
)

const testToken = "s3cret-token-of-the-test-0123456789"

// tokenServer serves one configmap behind testToken.
func tokenServer(t *testing.T) (*server, *httptest.Server) {
	t.Helper()
	s := syncedServer(t, false, configMap("a", "1"))
	s.token = mustToken(t, testToken, 0o600)
	hs := httptest.NewServer(s.handler())
	t.Cleanup(hs.Close)
	return s, hs
}

func mustToken(t *testing.T, tok string, mode os.FileMode) *accessToken {
	t.Helper()
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte(tok+"\n"), mode); err != nil {
		t.Fatal(err)
	}
	a, err := readTokenFile(path, func(string) {})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// do sends a GET of path with the header (name: value) if name is set,
// following no redirect.
func do(t *testing.T, base, path, name, value string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if name != "" {
		req.Header.Set(name, value)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// With --token-file, every endpoint but /healthz needs the token, as a
// bearer header or as the cookie the page gets from /?token=; /readyz
// without it says whether, not why; a wrong token is refused.
func TestServeToken(t *testing.T) {
	t.Parallel()
	s, hs := tokenServer(t)
	for _, path := range []string{"/", "/objects", "/objects/cm/default/a", "/events/recent", "/events", "/events/feed", "/stats", "/metrics"} {
		resp, body := do(t, hs.URL, path, "", "")
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "--token-file") || resp.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s without the token: %d %q, want 401 saying how", path, resp.StatusCode, body)
		}
		if resp, _ := do(t, hs.URL, path, "Authorization", "Bearer wrong-"+testToken); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s with a wrong token: %d, want 401", path, resp.StatusCode)
		}
	}
	if resp, body := do(t, hs.URL, "/objects", "Authorization", "Bearer "+testToken); resp.StatusCode != http.StatusOK || !strings.Contains(body, `"a"`) {
		t.Fatalf("/objects with the token: %d %q", resp.StatusCode, body)
	}
	if resp, _ := do(t, hs.URL, "/healthz", "", ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz without the token: %d, want 200", resp.StatusCode)
	}

	s.notReady = func() []string { return []string{"cm: forbidden: the secret reason"} }
	if resp, body := do(t, hs.URL, "/readyz", "", ""); resp.StatusCode != http.StatusServiceUnavailable || strings.Contains(body, "secret reason") {
		t.Fatalf("/readyz without the token, not ready: %d %q; want 503 without the reason", resp.StatusCode, body)
	}
	if resp, body := do(t, hs.URL, "/readyz", "Authorization", "Bearer "+testToken); resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "secret reason") {
		t.Fatalf("/readyz with the token, not ready: %d %q; want 503 with the reason", resp.StatusCode, body)
	}
	s.notReady = func() []string { return nil }
	if resp, body := do(t, hs.URL, "/readyz", "", ""); resp.StatusCode != http.StatusOK || body != "ok\n" {
		t.Fatalf("/readyz without the token, ready: %d %q", resp.StatusCode, body)
	}

	// The page: ?token= sets the cookie and sends the browser on without
	// the token in its address; the cookie then opens everything.
	if resp, _ := do(t, hs.URL, "/?token=wrong-"+testToken, "", ""); resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) > 0 {
		t.Fatalf("/?token=wrong: %d, cookies %v; want 401 and none", resp.StatusCode, resp.Cookies())
	}
	resp, _ := do(t, hs.URL, "/?token="+testToken, "", "")
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == tokenCookie {
			cookie = c
		}
	}
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" || cookie == nil ||
		!cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode {
		t.Fatalf("/?token=: %d to %q, cookie %+v; want 303 to / and an HttpOnly SameSite=Strict cookie", resp.StatusCode, resp.Header.Get("Location"), cookie)
	}
	for _, path := range []string{"/", "/objects", "/events/recent"} {
		if resp, body := do(t, hs.URL, path, "Cookie", cookie.Name+"="+cookie.Value); resp.StatusCode != http.StatusOK {
			t.Errorf("%s with the cookie: %d %q", path, resp.StatusCode, body)
		}
	}
	if resp, _ := do(t, hs.URL, "/objects", "Cookie", tokenCookie+"=wrong"); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("/objects with a wrong cookie: %d, want 401", resp.StatusCode)
	}
}

// The token file: its first line, trimmed, at least minTokenLen long; a
// file others may read is said.
func TestReadTokenFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	var warned []string
	warn := func(s string) { warned = append(warned, s) }
	a, err := readTokenFile(write("ok", "  "+testToken+"  \nsecond line\n", 0o600), warn)
	if err != nil || !a.matches(testToken) || a.matches(testToken+"x") || a.matches("") || len(warned) != 0 {
		t.Fatalf("a good file: %v, %v; warnings %v", a, err, warned)
	}
	if _, err := readTokenFile(write("short", "abc\n", 0o600), warn); err == nil || !strings.Contains(err.Error(), "at least 16") {
		t.Fatalf("a short token: %v", err)
	}
	if _, err := readTokenFile(dir, warn); err == nil {
		t.Fatal("a directory: no error")
	}
	if _, err := readTokenFile(write("open", testToken, 0o644), warn); err != nil || len(warned) != 1 || !strings.Contains(warned[0], "chmod go-r") {
		t.Fatalf("a file others may read: %v, warnings %v", err, warned)
	}
}

// Against the real server: serve secrets needs a token (or the flag that
// says it goes without), and with one it serves them to the token only.
func TestServeSecretsNeedAToken(t *testing.T) {
	t.Parallel()
	srv := testenv.Shared(t)
	ns := testenv.NewNamespace(t, srv.Config())
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(testToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, base := startServe(t, "secrets", "-n", ns, "--token-file", tokenFile, kubeconfigArg(srv))
	base = strings.TrimSuffix(base, "/")
	if resp, _ := do(t, base, "/objects", "", ""); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("secrets without the token: %d, want 401", resp.StatusCode)
	}
	if resp, body := do(t, base, "/objects", "Authorization", "Bearer "+testToken); resp.StatusCode != http.StatusOK {
		t.Fatalf("secrets with the token: %d %q", resp.StatusCode, body)
	}
}
