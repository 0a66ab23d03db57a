package localapi

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// progress reads the output of `go build -v` (given to it as the command's
// stdout and stderr) and reports on the build, a line at a time: how long it
// has run, how many packages it has compiled (-v names each package as it
// compiles it, not those it finds in the build cache), of how many at most,
// and which one was last. What is not a package name (compiler errors,
// "go: downloading" lines aside) is kept for the error of a failed build.
type progress struct {
	log    io.Writer
	prefix string
	now    func() time.Time
	start  time.Time

	mu         sync.Mutex
	partial    []byte // an unfinished line
	compiled   int    // package names seen
	downloaded int    // "go: downloading" lines seen
	last       string // the last package name seen
	total      int    // packages the binary needs (std included); 0: not known yet
	other      bytes.Buffer
}

func newProgress(log io.Writer, prefix string, now func() time.Time) *progress {
	return &progress{log: log, prefix: prefix, now: now, start: now()}
}

func (p *progress) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.partial = append(p.partial, b...)
	for {
		i := bytes.IndexByte(p.partial, '\n')
		if i < 0 {
			break
		}
		p.line(string(p.partial[:i]))
		p.partial = p.partial[i+1:]
	}
	return len(b), nil
}

// line takes one line of go build's output; p.mu is held.
func (p *progress) line(s string) {
	s = strings.TrimRight(s, "\r")
	switch {
	case s == "":
	case strings.HasPrefix(s, "go: downloading "):
		p.downloaded++
	case isPackageLine(s):
		p.compiled++
		p.last = s
	default:
		p.other.WriteString(s)
		p.other.WriteByte('\n')
	}
}

// isPackageLine reports whether s is one of the import paths go build -v
// prints: one word, no "#" (the header of a package's errors) or "go:".
func isPackageLine(s string) bool {
	return !strings.ContainsAny(s, " \t:") && !strings.HasPrefix(s, "#")
}

func (p *progress) setTotal(n int) {
	p.mu.Lock()
	p.total = n
	p.mu.Unlock()
}

func (p *progress) elapsed() time.Duration {
	return p.now().Sub(p.start).Round(time.Second)
}

// report writes the line a minute.
func (p *progress) report() {
	p.mu.Lock()
	defer p.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "%s: still building, %v: %s compiled", p.prefix, p.elapsed(), plural(p.compiled, "package"))
	if p.total > 0 {
		fmt.Fprintf(&b, " of at most %d (those already in the build cache are not compiled again)", p.total)
	}
	if p.last != "" {
		fmt.Fprintf(&b, ", last %s", p.last)
	}
	if p.downloaded > 0 {
		fmt.Fprintf(&b, "; %s downloaded", plural(p.downloaded, "module"))
	}
	fmt.Fprintln(p.log, b.String())
}

// summary is the tail of the last line: the time and the packages compiled.
func (p *progress) summary() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return fmt.Sprintf("%v, %s compiled", p.elapsed(), plural(p.compiled, "package"))
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// output is what go build printed besides package names.
func (p *progress) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.other.String() + string(p.partial)
}
