package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/rest"
)

// What a test reads of a running Server: its clients' configs, its address
// and files, and etcd's revision (Compact, Revision).

// Config returns a new admin (system:masters) client config (QPS 100,
// Burst 200). It stays valid across Kill and Restart.
func (s *Server) Config() *rest.Config {
	s.mu.Lock()
	defer s.mu.Unlock()
	return rest.CopyConfig(s.admin)
}

// RestrictedConfig returns a new client config for RestrictedUser, who may
// only get/list/watch configmaps and pods in AllowedNamespace.
func (s *Server) RestrictedConfig() *rest.Config {
	s.mu.Lock()
	defer s.mu.Unlock()
	return rest.CopyConfig(s.restricted)
}

// Host returns the server URL, https://127.0.0.1:PORT.
func (s *Server) Host() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.host
}

// Kubeconfig returns the path of the kubeconfig file (contexts "admin",
// the current one, and "restricted"). It is removed by Stop.
func (s *Server) Kubeconfig() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.kubeconfig
}

// DataDir returns the server's data dir (etcd data, certificates, state).
func (s *Server) DataDir() string { return s.data }

// LogPath returns the file that collects the server's stderr across restarts.
func (s *Server) LogPath() string { return filepath.Join(s.root, "localapi.log") }

// LogTail returns the last n lines of the server log.
func (s *Server) LogTail(n int) string {
	data, err := os.ReadFile(s.LogPath())
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Compact compacts etcd to its current revision, waits until the compaction
// has been applied, and returns that revision. Afterwards a watch or list
// from an older resourceVersion that reaches etcd fails with 410 Gone. With
// the watch cache on (the default), the apiserver may still serve a watch
// from an old resourceVersion out of its cache; to get 410 reliably either
// use WithWatchCache(false), or call Restart after Compact (the watch cache
// is then rebuilt from the compacted etcd and only knows newer revisions).
func (s *Server) Compact() (int64, error) {
	return s.adminRevision(http.MethodPost, "/compact")
}

// Revision returns etcd's current revision (the newest resourceVersion).
func (s *Server) Revision() (int64, error) {
	return s.adminRevision(http.MethodGet, "/revision")
}

func (s *Server) adminRevision(method, path string) (int64, error) {
	s.mu.Lock()
	u := s.adminURL
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, u+path, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("testenv: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("testenv: %s %s: %s: %s", method, path, resp.Status, body)
	}
	var out struct {
		Revision int64 `json:"revision"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		return 0, fmt.Errorf("testenv: %s %s: %w", method, path, err)
	}
	return out.Revision, nil
}
