package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"golang.org/x/term"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/kinformer/kinformer"
)

// output writes events to stdout, progress and the summary to stderr.
type output struct {
	prog   string
	json   bool
	showNS bool // NAMESPACE column (table, -A on a namespaced resource)

	mu           sync.Mutex // guards everything below, and writes to stdout and stderr
	stdout       *bufio.Writer
	stderr       io.Writer
	enc          *json.Encoder // -o json: encodes into line
	line         bytes.Buffer  // one encoded event, before it is escaped onto stdout
	widths       []int         // table column widths, set once from the first rows (layout)
	header       bool          // table header printed
	window       [][]string    // the first rows, held until the header is laid out over them
	progressLine bool          // a progress line is on stderr, not yet ended by a newline
	counts       map[kinformer.EventType]int
	restored     int  // Added events of objects restored from the state file (counted in counts too)
	restoreSaid  bool // the restore line is printed (note): the progress line ends without its own
	gone         goneNotice
}

func newOutput(e *env, format string, showNS bool) *output {
	o := &output{
		prog:   e.prog,
		json:   format == "json",
		showNS: showNS,
		stdout: bufio.NewWriterSize(e.stdout, 64<<10),
		stderr: e.stderr,
		counts: map[kinformer.EventType]int{},
	}
	o.enc = json.NewEncoder(&o.line)
	o.enc.SetEscapeHTML(false)
	return o
}

// jsonEvent is one line of -o json. The field order is the documented one.
// Cause is only ever "restore" (an object restored from the state file,
// --state-dir), "join" or "leave" (a namespace that joined or left the
// watch, --namespace-selector) or "gone" (the resource is no longer
// served: its CRD deleted), so that the documented lines keep their exact
// shape.
type jsonEvent struct {
	Type            kinformer.EventType `json:"type"`
	Key             string              `json:"key,omitempty"`
	ResourceVersion string              `json:"resourceVersion,omitempty"`
	Cause           string              `json:"cause,omitempty"`
	Object          map[string]any      `json:"object,omitempty"`
	Error           string              `json:"error,omitempty"`
}

// newJSONEvent is ev as one line of -o json (and one event of serve's
// /events stream).
func newJSONEvent(ev kinformer.Event[*unstructured.Unstructured]) jsonEvent {
	je := jsonEvent{Type: ev.Type, ResourceVersion: ev.ResourceVersion}
	obj := ev.Object
	if obj != nil && ev.Type != kinformer.Bookmark {
		je.Key = kinformer.MetaNamespaceKey(obj)
		je.Object = obj.Object
	}
	switch ev.Cause {
	case kinformer.CauseRestore, kinformer.CauseJoin, kinformer.CauseLeave, kinformer.CauseGone:
		je.Cause = ev.Cause.String()
	}
	if ev.Err != nil {
		je.Error = ev.Err.Error()
	}
	return je
}

// count counts an event for the summary.
func (o *output) count(ev kinformer.Event[*unstructured.Unstructured]) {
	o.mu.Lock()
	o.counts[ev.Type]++
	if isRestored(ev) {
		o.restored++
	}
	o.mu.Unlock()
}

func isRestored(ev kinformer.Event[*unstructured.Unstructured]) bool {
	return ev.Type == kinformer.Added && ev.Cause == kinformer.CauseRestore
}

// event prints one event; flush says whether to flush stdout afterwards
// (false while more events are queued, to write them in one go).
func (o *output) event(ev kinformer.Event[*unstructured.Unstructured], flush bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.endProgress()
	if ev.Type == kinformer.Error && isStateError(ev.Err) {
		// Not a failure: the informer goes on without the file. Say so on
		// stderr in either format (-o json also has its ERROR line).
		o.flushStdout()
		fmt.Fprintf(o.stderr, "%s: warning: %s\n", o.prog, escapeTerminal(ev.Err.Error()))
		if !o.json {
			return
		}
	}
	if o.json {
		o.line.Reset()
		if err := o.enc.Encode(newJSONEvent(ev)); err != nil {
			fmt.Fprintf(o.stderr, "%s: encoding event: %v\n", o.prog, err)
		} else {
			o.stdout.Write(escapeJSONText(o.line.Bytes()))
		}
	} else {
		switch ev.Type {
		case kinformer.Bookmark:
		case kinformer.Error:
			o.flushStdout()
			fmt.Fprintf(o.stderr, "%s: %s (retrying)\n", o.prog, escapeTerminal(ev.Err.Error()))
		default:
			o.row(ev)
		}
	}
	if line := o.gone.see(ev); line != "" {
		o.flushStdout()
		fmt.Fprintf(o.stderr, "%s: %s\n", o.prog, escapeTerminal(line))
	}
	if flush {
		o.flushStdout()
	}
}

func (o *output) row(ev kinformer.Event[*unstructured.Unstructured]) {
	obj := ev.Object
	typ := string(ev.Type)
	switch {
	case isRestored(ev):
		typ = "RESTORED"
	case ev.Cause == kinformer.CauseJoin && ev.Type == kinformer.Added:
		typ = "JOINED"
	case ev.Cause == kinformer.CauseLeave && ev.Type == kinformer.Deleted:
		typ = "LEFT"
	case ev.Cause == kinformer.CauseGone && ev.Type == kinformer.Deleted:
		typ = "GONE"
	}
	cols := []string{typ}
	if o.showNS {
		cols = append(cols, obj.GetNamespace())
	}
	age := "<unknown>"
	if ts := obj.GetCreationTimestamp(); !ts.IsZero() {
		age = duration.HumanDuration(time.Since(ts.Time))
	}
	cols = append(cols, obj.GetName(), age, obj.GetResourceVersion())
	for i := range cols {
		// The server's text, on a terminal: cut if long, escaped.
		cols[i] = escapeTerminal(cutText(cols[i], maxNameBytes))
	}
	if o.header {
		o.writeRow(cols)
		return
	}
	o.window = append(o.window, cols)
	if len(o.window) >= tableWindow {
		o.layout()
	}
}

// The table's columns are laid out once, so that they do not move under
// the rows already printed: each as wide as the widest of its cells in
// the first rows (those that came before the first flush, the initial
// list's burst, tableWindow at most) and the header, at least its
// minimum (minColumnWidths), at most maxColumnWidth. A later, longer cell
// shifts the rest of its own row only.
const tableWindow = 500

// minColumnWidths are the columns' least widths, by header: room for
// every EVENT word (RESTORED, MODIFIED), most namespaces and names, and
// every AGE ("<unknown>", "<invalid>"). The last column is not padded.
var minColumnWidths = map[string]int{"EVENT": 8, "NAMESPACE": 20, "NAME": 40, "AGE": 9}

// maxColumnWidth is the widest a column is laid out: a longer cell
// shifts the rest of its own row only. Grown to the widest cell, one name
// of 400,000 characters padded every later row to as many.
const maxColumnWidth = 64

// layout sets the column widths from the header and the rows held in the
// window, and prints them. o.mu must be held.
func (o *output) layout() {
	h := []string{"EVENT"}
	if o.showNS {
		h = append(h, "NAMESPACE")
	}
	h = append(h, "NAME", "AGE", "RESOURCEVERSION")
	o.widths = make([]int, len(h))
	for i, name := range h {
		w := max(minColumnWidths[name], cellWidth(name))
		for _, row := range o.window {
			w = max(w, min(cellWidth(row[i]), maxColumnWidth))
		}
		o.widths[i] = w
	}
	o.header = true
	o.writeRow(h)
	for _, row := range o.window {
		o.writeRow(row)
	}
	o.window = nil
}

// flushStdout writes what waits for stdout: the rows held for the
// layout, if any, then the buffer. o.mu must be held.
func (o *output) flushStdout() {
	if len(o.window) > 0 {
		o.layout()
	}
	o.stdout.Flush()
}

// cellWidth is how many columns c takes on a terminal: one a character
// (escapeTerminal has made it printable).
func cellWidth(c string) int { return utf8.RuneCountInString(c) }

func (o *output) writeRow(cols []string) {
	var b strings.Builder
	for i, c := range cols {
		if i == len(cols)-1 {
			b.WriteString(c)
			break
		}
		b.WriteString(c)
		b.WriteString(strings.Repeat(" ", max(o.widths[i]-cellWidth(c), 0)+3))
	}
	b.WriteByte('\n')
	o.stdout.WriteString(b.String())
}

// restoreNote prints line (restoreLine) on stderr, in place of the
// progress line's own last word.
func (o *output) restoreNote(line string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.endProgress()
	fmt.Fprintln(o.stderr, line)
	o.restoreSaid = true
}

// endProgress ends the progress line on stderr so that other output starts
// on a clean line. o.mu must be held.
func (o *output) endProgress() {
	if o.progressLine {
		fmt.Fprint(o.stderr, "\r\033[K")
		o.progressLine = false
	}
}

// showProgress redraws a progress line on stderr (a terminal) until the
// informer has synced (the time arrives on synced), then says how long the
// sync took. cached is the number of objects in the cache.
func (o *output) showProgress(ctx context.Context, p *progress, cached func() int, synced <-chan time.Time, what string, start time.Time) {
	what = escapeTerminal(what) // from discovery
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			o.mu.Lock()
			o.endProgress()
			o.mu.Unlock()
			return
		case at := <-synced:
			n, d := p.listed.Load(), at.Sub(start)
			o.mu.Lock()
			o.endProgress()
			switch {
			case o.restoreSaid:
			case o.restored > 0:
				// Restored: the lists were at most a probe; say what the
				// cache holds now.
				fmt.Fprintf(o.stderr, "%s: synced %d %s in %v (restored from the state file, then caught up)\n", o.prog, cached(), what, d.Round(time.Millisecond))
			default:
				fmt.Fprintf(o.stderr, "%s: synced %d %s in %v (%.0f/s)\n", o.prog, n, what, d.Round(time.Millisecond), float64(n)/d.Seconds())
			}
			o.mu.Unlock()
			return
		case <-t.C:
		}
		n, d := p.listed.Load(), time.Since(start)
		o.mu.Lock()
		if o.restored > 0 {
			fmt.Fprintf(o.stderr, "\r\033[Krestored %d %s from the state file, catching up (%v)", o.restored, what, d.Round(100*time.Millisecond))
		} else {
			fmt.Fprintf(o.stderr, "\r\033[Klisting %s: %d objects so far (%.0f/s, %v)", what, n, float64(n)/d.Seconds(), d.Round(100*time.Millisecond))
		}
		o.progressLine = true
		o.mu.Unlock()
	}
}

// finish flushes stdout and, if summary, prints the summary line on
// stderr. Call it once the informer has stopped.
func (o *output) finish(d time.Duration, summary bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.endProgress()
	o.flushStdout()
	if !summary {
		return
	}
	total := 0
	var parts []string
	for _, t := range kinformer.EventTypes() {
		total += o.counts[t]
		part := fmt.Sprintf("%s %d", t, o.counts[t])
		if t == kinformer.Added && o.restored > 0 {
			part += fmt.Sprintf(" (%d restored)", o.restored)
		}
		parts = append(parts, part)
	}
	fmt.Fprintf(o.stderr, "%s: %d events in %v: %s\n", o.prog, total, d.Round(100*time.Millisecond), strings.Join(parts, ", "))
}

// maxNameBytes is the longest name shown whole in a summary (the table's
// cells, the feed's names): 253, the longest DNS subdomain name, so that
// every name the API server accepts for most kinds shows whole. Some
// kinds (Roles, for one) take names of any length: one of 200 KB made
// every event of the feed, and every table row after it, 200 KB long.
const maxNameBytes = 253

// cutText returns s if it is at most max bytes long; else its start, cut
// at a character, then its length and the start of its SHA-256, visibly:
// "name…[200000 bytes, sha256:0a1b2c3d4e5f]", limit bytes at most. Two
// long names that start alike still read apart.
func cutText(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	mark := fmt.Sprintf("…[%d bytes, sha256:%x]", len(s), sum[:6])
	keep := max(limit-len(mark), 0)
	for keep > 0 && !utf8.RuneStart(s[keep]) {
		keep--
	}
	return s[:keep] + mark
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// escapeTerminal makes s safe to print on a terminal: every character that
// is not printable (control characters such as ESC, CR and LF, C1 controls,
// format characters such as bidi overrides, invalid UTF-8) is written as a
// Go escape (\x1b, \n, \u202e), so that text from the server (names, error
// messages) can neither move the cursor, rewrite the screen or the title,
// nor forge a row (kubectl's CVE-2021-25743). Backslashes are left alone:
// readable paths matter more than an unambiguous round trip.
func escapeTerminal(s string) string {
	i := strings.IndexFunc(s, func(r rune) bool { return r == utf8.RuneError || !unicode.IsPrint(r) })
	if i < 0 {
		return s
	}
	var b strings.Builder
	b.WriteString(s[:i])
	for s = s[i:]; s != ""; {
		r, size := utf8.DecodeRuneInString(s)
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[0])
		case unicode.IsPrint(r):
			b.WriteString(s[:size])
		default:
			q := strconv.QuoteRune(r) // '\x1b', '\n', '\u202e'
			b.WriteString(q[1 : len(q)-1])
		}
		s = s[size:]
	}
	return b.String()
}

// escapeJSONText rewrites encoded JSON so that every character a terminal
// would not print as itself is a \u escape, as escapeTerminal does for the
// table: DEL, C1 controls, bidi overrides (U+202E), zero-width and other
// format characters. encoding/json escapes only the C0 controls (and
// U+2028, U+2029), so an object's text could otherwise reorder or hide
// what a terminal shows. JSON's structure is ASCII, so these characters
// are inside strings, where the escape stands for the same character: the
// line decodes to the same value. b is returned as is when it holds none.
func escapeJSONText(b []byte) []byte {
	escape := func(r rune) bool { return r == 0x7f || r >= utf8.RuneSelf && !unicode.IsPrint(r) }
	i := bytes.IndexFunc(b, escape)
	if i < 0 {
		return b
	}
	out := make([]byte, 0, len(b)+16)
	out = append(out, b[:i]...)
	for b = b[i:]; len(b) > 0; {
		r, size := utf8.DecodeRune(b)
		if !escape(r) {
			out = append(out, b[:size]...)
		} else if r1, r2 := utf16.EncodeRune(r); r1 != utf8.RuneError {
			out = fmt.Appendf(out, `\u%04x\u%04x`, r1, r2) // beyond U+FFFF: a surrogate pair
		} else {
			out = fmt.Appendf(out, `\u%04x`, r)
		}
		b = b[size:]
	}
	return out
}
