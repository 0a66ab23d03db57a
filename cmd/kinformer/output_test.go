package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/internal/testenv"
)

func TestEscapeTerminal(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ in, want string }{
		{"web-1", "web-1"},
		{"a b", "a b"},
		{"héllo, 世界", "héllo, 世界"},
		{`C:\path "quoted"`, `C:\path "quoted"`},
		{"a\x1b[2Jb", `a\x1b[2Jb`},
		{"x\nFAKE ROW", `x\nFAKE ROW`},
		{"x\r\ty", `x\r\ty`},
		{"bell\a", `bell\a`},
		{"del\x7f", `del\x7f`},
		{"csi\u009b2J", `csi\u009b2J`},
		{"rtl\u202eevil", `rtl\u202eevil`},
		{"bad\xffutf8", `bad\xffutf8`},
	} {
		if got := escapeTerminal(tt.in); got != tt.want {
			t.Errorf("escapeTerminal(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// hasControl reports whether s holds a control character other than the
// newlines that end lines.
func hasControl(s string) bool {
	return strings.ContainsFunc(s, func(r rune) bool {
		return r != '\n' && (r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0)
	})
}

// What a real server never sends (it validates names), a fake can: the
// table shows names, namespaces and versions escaped, one row each, and
// error texts on one line without terminal escapes (kubectl's
// CVE-2021-25743).
func TestTableEscapes(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	o := newOutput(&env{prog: "kinformer", stdout: &stdout, stderr: &stderr}, "table", true)
	obj := &unstructured.Unstructured{}
	obj.SetNamespace("ns\x1b]0;pwned\a")
	obj.SetName("a\x1b[2Jb\nMODIFIED   x   FAKE ROW")
	obj.SetResourceVersion("1\r2")
	o.event(kinformer.Event[*unstructured.Unstructured]{Type: kinformer.Added, Object: obj}, true)
	o.event(kinformer.Event[*unstructured.Unstructured]{Type: kinformer.Error, Err: errors.New("boom\x1b[31m\nkinformer: FAKE")}, true)
	o.finish(0, true)

	lines := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
	if len(lines) != 2 || hasControl(stdout.String()) {
		t.Errorf("stdout: want a header and one row, no control characters:\n%q", stdout.String())
	}
	if len(lines) == 2 && (!strings.Contains(lines[1], `a\x1b[2Jb\nMODIFIED   x   FAKE ROW`) || !strings.Contains(lines[1], `ns\x1b]0;pwned\a`) || !strings.HasSuffix(lines[1], `1\r2`)) {
		t.Errorf("row %q: want the name, namespace and version escaped", lines[1])
	}
	errLines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
	if hasControl(stderr.String()) || len(errLines) != 2 || !strings.Contains(errLines[0], `boom\x1b[31m\nkinformer: FAKE (retrying)`) {
		t.Errorf("stderr: want the error on one line, escaped, then the summary:\n%q", stderr.String())
	}
}

// The real server echoes a field selector it cannot parse in its error
// message, raw: the message is printed escaped, on one line.
func TestWatchEscapesServerError(t *testing.T) {
	t.Parallel()
	srv := testenv.Shared(t)
	code, stdout, stderr := runCmd(t, nil, "watch", "cm", kubeconfigArg(srv), "--field-selector", "metadata.name\x1b[2J\nkinformer: FAKE")
	if code != exitBadSelector || stdout != "" || hasControl(stderr) || strings.Count(stderr, "\n") != 1 ||
		!strings.Contains(stderr, `metadata.name\x1b[2J\nkinformer: FAKE`) {
		t.Errorf("exit %d, stdout %q, stderr %q; want %d, the message escaped on one line", code, stdout, stderr, exitBadSelector)
	}
}

// -o json escapes what the table escapes: an object's bidi overrides,
// zero-width and other format characters, C1 controls and DEL are \u
// escapes, so that its text cannot reorder or hide what a terminal shows.
// The line still decodes to the same object.
func TestJSONEscapes(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	o := newOutput(&env{prog: "kinformer", stdout: &stdout, stderr: &stderr}, "json", true)
	obj := &unstructured.Unstructured{}
	obj.SetAPIVersion("v1")
	obj.SetKind("ConfigMap")
	obj.SetNamespace("ns")
	obj.SetName("invoice\u202efdp.exe")
	obj.SetLabels(map[string]string{"k\u200b": "v\u2066x\u2069"})
	_ = unstructured.SetNestedField(obj.Object, "del\x7f nel\u0085 csi\u009b2J tag\U000E0041 nbsp\u00a0 bom\ufeff", "data", "hidden")
	_ = unstructured.SetNestedField(obj.Object, "héllo, 世界 😀 \"q\" \\ <&>", "data", "shown")
	o.event(kinformer.Event[*unstructured.Unstructured]{Type: kinformer.Added, Object: obj, ResourceVersion: "7"}, true)
	o.finish(0, false)

	line := stdout.String()
	if strings.ContainsFunc(strings.TrimSuffix(line, "\n"), func(r rune) bool { return !unicode.IsPrint(r) }) {
		t.Errorf("the line holds characters a terminal does not print as themselves:\n%q", line)
	}
	for _, want := range []string{`invoice\u202efdp.exe`, `k\u200b`, `v\u2066x\u2069`, `del\u007f`, `nel\u0085`, `csi\u009b2J`, `tag\udb40\udc41`, `nbsp\u00a0`, `bom\ufeff`, `"héllo, 世界 😀 \"q\" \\ <&>"`} {
		if !strings.Contains(line, want) {
			t.Errorf("the line lacks %s:\n%s", want, line)
		}
	}
	var got struct {
		Type   string         `json:"type"`
		Key    string         `json:"key"`
		Object map[string]any `json:"object"`
	}
	if err := json.Unmarshal([]byte(line), &got); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, line)
	}
	if got.Key != "ns/invoice\u202efdp.exe" || !reflect.DeepEqual(got.Object, obj.Object) {
		t.Errorf("decoded: key %q, object %v; want %v", got.Key, got.Object, obj.Object)
	}
	if want := []byte(`{"a":"b"}`); &escapeJSONText(want)[0] != &want[0] {
		t.Errorf("a line with nothing to escape is copied")
	}
}

// Why an object came or went shows: the table's EVENT column says JOINED,
// LEFT (a namespace that joined or left, --namespace-selector) and GONE
// (its CRD deleted); -o json carries the cause; a plain event has none.
func TestCausesShown(t *testing.T) {
	t.Parallel()
	obj := &unstructured.Unstructured{}
	obj.SetNamespace("ns")
	obj.SetName("o")
	obj.SetResourceVersion("7")
	events := []kinformer.Event[*unstructured.Unstructured]{
		{Type: kinformer.Added, Object: obj, Cause: kinformer.CauseWatch},
		{Type: kinformer.Added, Object: obj, Cause: kinformer.CauseJoin},
		{Type: kinformer.Deleted, Object: obj, Cause: kinformer.CauseLeave},
		{Type: kinformer.Deleted, Object: obj, Cause: kinformer.CauseGone},
		{Type: kinformer.Deleted, Object: obj, Cause: kinformer.CauseRelist},
	}
	var stdout, stderr bytes.Buffer
	o := newOutput(&env{prog: "kinformer", stdout: &stdout, stderr: &stderr}, "table", true)
	for _, e := range events {
		o.event(e, true)
	}
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(stdout.String()), "\n")[1:] {
		got = append(got, strings.Fields(l)[0])
	}
	if want := []string{"ADDED", "JOINED", "LEFT", "GONE", "DELETED"}; !reflect.DeepEqual(got, want) {
		t.Errorf("EVENT column %v, want %v", got, want)
	}
	var causes []string
	for _, e := range events {
		causes = append(causes, newJSONEvent(e).Cause)
	}
	if want := []string{"", "join", "leave", "gone", ""}; !reflect.DeepEqual(causes, want) {
		t.Errorf("-o json causes %q, want %q", causes, want)
	}
}

// fieldStarts returns where each space-separated field of a table line
// starts.
func fieldStarts(l string) []int {
	var out []int
	for i, r := range l {
		if r != ' ' && (i == 0 || l[i-1] == ' ') {
			out = append(out, i)
		}
	}
	return out
}

// The table's columns do not move once printed: laid out over the first
// rows (the burst before the first flush) with minimums that fit every
// AGE and EVENT word, then kept; a longer cell later shifts only the rest
// of its own row.
func TestTableColumnsStable(t *testing.T) {
	t.Parallel()
	obj := func(name string, aged bool) *unstructured.Unstructured {
		o := &unstructured.Unstructured{}
		o.SetNamespace("ns")
		o.SetName(name)
		o.SetResourceVersion("12345")
		if aged {
			o.SetCreationTimestamp(metav1.NewTime(time.Now().Add(-90 * time.Minute)))
		}
		return o
	}
	long := strings.Repeat("l", 50)
	for _, tt := range []struct {
		name   string
		burst  int // events written before the first flush
		events []kinformer.Event[*unstructured.Unstructured]
		moved  map[int]bool // rows (1: the first after the header) allowed to shift
	}{
		{
			// One at a time: no AGE (<unknown>) after one with an age,
			// RESTORED after ADDED, a longer name: only its row shifts.
			name: "streamed", burst: 1,
			events: []kinformer.Event[*unstructured.Unstructured]{
				{Type: kinformer.Added, Object: obj("a", true)},
				{Type: kinformer.Added, Object: obj("b", false), Cause: kinformer.CauseRestore},
				{Type: kinformer.Modified, Object: obj(long, true)},
				{Type: kinformer.Deleted, Object: obj("c", false)},
			},
			moved: map[int]bool{3: true},
		},
		{
			// A burst: laid out over all of it, the long name included.
			name: "burst", burst: 3,
			events: []kinformer.Event[*unstructured.Unstructured]{
				{Type: kinformer.Added, Object: obj("a", true)},
				{Type: kinformer.Added, Object: obj(long, false)},
				{Type: kinformer.Added, Object: obj("b", true)},
				{Type: kinformer.Modified, Object: obj("c", false)},
			},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			o := newOutput(&env{prog: "kinformer", stdout: &stdout, stderr: &stderr}, "table", false)
			for i, ev := range tt.events {
				o.event(ev, i+1 >= tt.burst)
			}
			o.finish(0, false)
			lines := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
			if len(lines) != len(tt.events)+1 {
				t.Fatalf("want a header and %d rows:\n%s", len(tt.events), stdout.String())
			}
			header := fieldStarts(lines[0])
			for i, l := range lines[1:] {
				if got := fieldStarts(l); !tt.moved[i+1] && !slices.Equal(got, header) {
					t.Errorf("row %d: columns at %v, the header's at %v:\n%s", i+1, got, header, stdout.String())
				}
			}
		})
	}
}
