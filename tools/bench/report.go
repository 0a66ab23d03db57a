package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"
)

type machine struct {
	NProc            int
	CPU, Mem, Kernel string
	GoVersion        string
	LoadStart        string
	LoadEnd          string // when set: the load at the end of the run
	Date             string
}

func describeMachine() machine {
	m := machine{NProc: runtime.NumCPU(), Date: time.Now().UTC().Format("2006-01-02 15:04 MST")}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "model name"); ok {
				m.CPU = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "MemTotal:"); ok {
				var kb float64
				fmt.Sscanf(strings.TrimSpace(v), "%f", &kb)
				m.Mem = fmt.Sprintf("%.1f GiB", kb/(1<<20))
			}
		}
	}
	var u syscall.Utsname
	if syscall.Uname(&u) == nil {
		var b []byte
		for _, c := range u.Release {
			if c == 0 {
				break
			}
			b = append(b, byte(c))
		}
		m.Kernel = "Linux " + string(b)
	}
	if out, err := exec.Command("go", "version").Output(); err == nil {
		m.GoVersion = strings.TrimSpace(string(out))
	} else {
		m.GoVersion = runtime.Version()
	}
	m.LoadStart = loadavg()
	return m
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "?"
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func cmpF(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// saveResults writes v, a run's figures, as JSON into path ("" for
// nowhere), to make the report from later (-replay; the shard benchmark's -from).
func saveResults(path string, v any) error {
	if path == "" {
		return nil
	}
	b, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return err
	}
	logf("results in %s (the report can be made from them again: -replay, or -from for shard)", path)
	return nil
}

// readResults reads what saveResults wrote into v.
func readResults(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// replaceSection puts text (markers included) in place of the begin/end
// section of the file at path, or at its end after a blank line.
func replaceSection(path, begin, end, text string) error {
	old, err := os.ReadFile(path)
	if err != nil {
		old = []byte("# Benchmarks: kinformer vs client-go\n")
	}
	var doc string
	if i, j := bytes.Index(old, []byte(begin)), bytes.Index(old, []byte(end)); i >= 0 && j > i {
		doc = string(old[:i]) + text + strings.TrimPrefix(string(old[j+len(end):]), "\n")
	} else {
		doc = string(old) + "\n" + text
	}
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		return err
	}
	logf("updated %s", path)
	return nil
}

// benchCommand is the command line that reproduces a subcommand's run.
func benchCommand(sub string, args []string) string {
	cmd := "cd tools/bench && go run ."
	if sub != "" {
		cmd += " " + sub
	}
	for _, a := range args {
		if a == "" || strings.ContainsAny(a, " '\"$") {
			a = "'" + a + "'"
		}
		cmd += " " + a
	}
	return cmd
}
