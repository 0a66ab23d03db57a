package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
)

// state is persisted in <data-dir>/localapi.json so that a restart on the
// same data dir reuses the same ports when they are still free: clients that
// hold the old kubeconfig or server URL keep working across a restart.
type state struct {
	Port           int `json:"port"`
	AdminPort      int `json:"adminPort"`
	EtcdClientPort int `json:"etcdClientPort"`
	EtcdPeerPort   int `json:"etcdPeerPort"`
}

const stateFile = "localapi.json"

func loadState(dataDir string) (state, error) {
	var s state
	data, err := os.ReadFile(filepath.Join(dataDir, stateFile))
	if errors.Is(err, fs.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal(data, &s); err != nil {
		// A corrupt state file only costs us the port reuse.
		return state{}, nil
	}
	return s, nil
}

func saveState(dataDir string, s state) error {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	if err := writeFileAtomic(filepath.Join(dataDir, stateFile), append(data, '\n'), 0o644); err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(dataDir, "admin-port"), []byte(strconv.Itoa(s.AdminPort)+"\n"), 0o644)
}

// choosePort returns want if it is non-zero (the caller insists on it), else
// previous if that loopback port is currently free, else a fresh free port.
// exclude lists ports already chosen for other listeners of this process.
func choosePort(want, previous int, exclude ...int) (int, error) {
	if want != 0 {
		return want, nil
	}
	if previous != 0 && !contains(exclude, previous) && portFree(previous) {
		return previous, nil
	}
	for range 100 {
		p, err := freePort()
		if err != nil {
			return 0, err
		}
		if !contains(exclude, p) {
			return p, nil
		}
	}
	return 0, fmt.Errorf("could not find a free loopback port")
}

func contains(list []int, v int) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

func portFree(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
