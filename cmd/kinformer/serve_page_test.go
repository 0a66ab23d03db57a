package main

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kinformer/kinformer/internal/testenv"
)

// The page's tests drive headless Chromium (see cdp_test.go).

func needChromium(t *testing.T) string {
	t.Helper()
	chromium := findChromium()
	if chromium == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("chromium is not installed (CI is set: install Debian's chromium package)")
		}
		t.Skip("chromium is not installed (apt-get install chromium); set CI to make this a failure")
	}
	return chromium
}

func findChromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// Hostile strings: were any of them parsed as HTML, an element would
// appear or window.pwned be set.
const (
	hostileScript = `</pre><script>window.pwned="script"</script>`
	hostileImg    = `<img src=x onerror="window.pwned='img'">`
)

// noMarkup is true in the page when no hostile string became markup.
const noMarkup = `window.pwned === undefined && document.images.length === 0 && document.scripts.length === 1 &&
	[...document.querySelectorAll("#feed td, #f-resource, #o-resource, #o-status, #o-body")].every((e) =>
		e.querySelectorAll(":not(option)").length === 0)`

// feedRow is a feed row as the page shows it.
type feedRow struct {
	Seq                                  int
	Age, Type, Resource, Namespace, Name string
	ResourceVersion                      string
	Visible                              bool
}

const feedRowsJS = `[...document.querySelectorAll("#feed tr.ev")].map((r) => ({
	seq: Number(r.dataset.seq), age: r.cells[0].textContent, type: r.cells[1].textContent,
	resource: r.cells[2].textContent, namespace: r.cells[3].textContent, name: r.cells[4].textContent,
	resourceVersion: r.cells[5].textContent, visible: r.getClientRects().length > 0,
}))`

// The live page, against the real API server: counts; a ConfigMap's
// ADDED, MODIFIED and DELETED in the feed, in order; the namespace filter;
// a cached object's YAML and JSON, hostile content shown as text.
func TestServePageChromium(t *testing.T) {
	t.Parallel()
	chromium := needChromium(t)
	srv := testenv.Shared(t)
	ns := testenv.NewNamespace(t, srv.Config())
	other := testenv.NewNamespace(t, srv.Config())
	c := kubernetes.NewForConfigOrDie(srv.Config())
	ctx := context.Background()
	label := map[string]string{"page": ns} // only this test's objects
	create := func(ns, name string, annotations, data map[string]string) *corev1.ConfigMap {
		t.Helper()
		cm, err := c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: label, Annotations: annotations},
			Data:       data,
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return cm
	}
	for _, n := range []string{"one", "two", "three"} {
		create(ns, n, nil, nil)
	}
	create(other, "elsewhere", nil, map[string]string{"k": "v"})
	// Names and label values cannot hold markup; annotations and data can.
	create(ns, "hostile", map[string]string{"note": hostileImg}, map[string]string{"script": hostileScript, "img": hostileImg})

	_, base := startServe(t, "configmaps", "-A", "-l", "page="+ns, kubeconfigArg(srv))
	waitReady(t, base)
	b := openBrowser(t, chromium, 1280, 1200)
	b.navigate(base)
	b.waitFor(`$("count-configmaps") && $("count-configmaps").textContent === "5" && $("status").textContent === "ready"`, 30*time.Second)

	// The feed replays what happened before the page opened: the first
	// list's ADDED.
	b.waitFor(`document.querySelectorAll("#feed tr.ev").length === 5`, 30*time.Second)

	// A create, an update and a delete, live.
	cm := create(ns, "live", nil, nil)
	cm.Data = map[string]string{"x": "1"}
	if _, err := c.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.CoreV1().ConfigMaps(ns).Delete(ctx, "live", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	b.waitFor(`[...document.querySelectorAll("#feed tr.ev")].filter((r) => r.dataset.name === "live").length === 3`, 30*time.Second)
	var rows []feedRow
	b.must(feedRowsJS, &rows)
	var live []feedRow
	for _, r := range rows {
		if r.Name == "live" {
			live = append(live, r)
		}
	}
	slices.Reverse(live) // newest first on the page
	var prev int64
	for i, want := range []string{"ADDED", "MODIFIED", "DELETED"} {
		r := live[i]
		var rv int64
		_, err := fmt.Sscan(r.ResourceVersion, &rv)
		if r.Type != want || r.Namespace != ns || r.Resource != "configmaps" || err != nil || rv <= prev ||
			!strings.HasSuffix(r.Age, "s") || !r.Visible || (i > 0 && r.Seq <= live[i-1].Seq) {
			t.Errorf("feed row %d: %+v; want %s of %s/live, after rv %d", i, r, want, ns, prev)
		}
		prev = rv
	}

	// The namespace filter hides the other namespace's events.
	b.must(`$("f-namespace").value = `+jsString(ns)+`, $("f-namespace").dispatchEvent(new Event("input"))`, nil)
	b.must(feedRowsJS, &rows)
	shown, hidden := 0, 0
	for _, r := range rows {
		switch {
		case r.Namespace == other && r.Visible:
			t.Errorf("filtered on %s, yet shows %+v", ns, r)
		case r.Namespace == other:
			hidden++
		case r.Namespace == ns && r.Visible:
			shown++
		}
	}
	if hidden != 1 || shown != 7 {
		t.Errorf("filtered on namespace %s: %d rows shown, %d of %s hidden; want 7 and 1", ns, shown, hidden, other)
	}

	// Click an event: the object's YAML, hostile content as text.
	b.must(`document.querySelector('#feed tr.ev[data-name="hostile"]').click()`, nil)
	b.waitFor(`$("o-body").textContent.includes("name: hostile")`, 30*time.Second)
	var yaml string
	b.must(`$("o-body").textContent`, &yaml)
	for _, want := range []string{"kind: ConfigMap", "namespace: " + ns, hostileImg, hostileScript} {
		if !strings.Contains(yaml, want) {
			t.Errorf("the object view lacks %q; shows:\n%s", want, yaml)
		}
	}
	var ok bool
	if b.must(noMarkup, &ok); !ok {
		t.Errorf("hostile content became markup")
	}

	// Look one up by name, as JSON.
	b.must(`$("o-resource").value = "configmaps", $("o-namespace").value = `+jsString(other)+
		`, $("o-name").value = "elsewhere", $("o-format").value = "json", $("lookup").requestSubmit()`, nil)
	b.waitFor(`$("o-body").textContent.includes('"name": "elsewhere"')`, 30*time.Second)
	b.must(`$("o-name").value = "nope", $("lookup").requestSubmit()`, nil)
	b.waitFor(`$("o-status").textContent.includes('not found') && $("o-body").textContent === ""`, 30*time.Second)
	if b.must(noMarkup, &ok); !ok {
		t.Errorf("hostile content became markup")
	}
}

// Every field of the feed, and an error message naming them, is shown as
// text, also what the API server would not accept (markup in names).
func TestServePageEscapes(t *testing.T) {
	t.Parallel()
	chromium := needChromium(t)
	s := mustNewServer(t, 8, 16)
	s.recent.add(feedEvent{
		Time: time.Now(), Resource: "<b>configmaps</b>", Type: "ADDED", Cause: "watch",
		Namespace: hostileScript, Name: hostileImg, ResourceVersion: "<i>1</i>",
	})
	s.recent.add(feedEvent{Time: time.Now(), Resource: "<b>configmaps</b>", Type: "ERROR", Cause: "watch", Error: hostileImg})
	hs := httptest.NewServer(s.handler())
	t.Cleanup(hs.Close)
	t.Cleanup(s.close) // before hs.Close: ends the feed

	b := openBrowser(t, chromium, 1000, 800)
	b.navigate(hs.URL + "/")
	b.waitFor(`document.querySelectorAll("#feed tr.ev").length === 2`, 30*time.Second)
	var rows []feedRow
	b.must(feedRowsJS, &rows)
	want := []feedRow{
		{Seq: 2, Type: "ERROR", Resource: "<b>configmaps</b>", Name: "error: " + hostileImg, Visible: true},
		{Seq: 1, Type: "ADDED", Resource: "<b>configmaps</b>", Namespace: hostileScript, Name: hostileImg, ResourceVersion: "<i>1</i>", Visible: true},
	}
	for i := range rows {
		rows[i].Age = ""
	}
	if !slices.Equal(rows, want) {
		t.Errorf("feed rows:\n%+v\nwant\n%+v", rows, want)
	}
	// The filter matches the namespace as text.
	b.must(`$("f-namespace").value = `+jsString(hostileScript)+`, $("f-namespace").dispatchEvent(new Event("input"))`, nil)
	b.must(feedRowsJS, &rows)
	if len(rows) != 2 || !rows[1].Visible || rows[0].Visible {
		t.Errorf("filtered on the hostile namespace: %+v", rows)
	}
	// Clicking asks for a resource not served: the error names it, as text.
	b.must(`document.querySelector("#feed tr.ev[data-seq='1']").click()`, nil)
	b.waitFor(`$("o-status").textContent.includes("is not served")`, 30*time.Second)
	var status string
	b.must(`$("o-status").textContent`, &status)
	if !strings.Contains(status, `"<b>configmaps</b>"`) {
		t.Errorf("status %q", status)
	}
	var ok bool
	if b.must(noMarkup, &ok); !ok {
		t.Errorf("hostile content became markup")
	}
}

// With KINFORMER_SCREENSHOT=FILE, a screenshot of the page with some
// traffic, for docs/cli.md (docs/serve.png):
//
//	KINFORMER_SCREENSHOT=$PWD/docs/serve.png go -C cmd/kinformer test -run TestServeScreenshot .
//
// (from the repository's root; cmd/kinformer is its own module).
func TestServeScreenshot(t *testing.T) {
	out := os.Getenv("KINFORMER_SCREENSHOT")
	if out == "" {
		t.Skip("KINFORMER_SCREENSHOT is not set")
	}
	chromium := needChromium(t)
	srv := testenv.Shared(t)
	traffic := start(t, nil, "demo-traffic", "--namespaces", "3", "--interval", "150ms", kubeconfigArg(srv))
	t.Cleanup(func() { traffic.interrupt() })
	_, base := startServe(t, "configmaps", "namespaces", "-A", kubeconfigArg(srv))
	waitReady(t, base)
	b := openBrowser(t, chromium, 1280, 1000)
	b.navigate(base)
	time.Sleep(40 * time.Second)
	// Show a changing object (one the traffic has not deleted meanwhile).
	for shown := false; !shown; time.Sleep(time.Second) {
		b.must(`document.querySelector('#feed tr.ev[data-type="MODIFIED"][data-resource="configmaps"]').click()`, nil)
		time.Sleep(time.Second)
		b.must(`$("o-body").textContent.includes("kind: ConfigMap") && !$("o-body").classList.contains("stale")`, &shown)
	}
	if err := os.WriteFile(out, b.screenshot(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// The page says which resource fails, and why, as text.
func TestServePageFailing(t *testing.T) {
	t.Parallel()
	chromium := needChromium(t)
	lw, hs := revocableServer(t, hostileImg)
	b := openBrowser(t, chromium, 1000, 800)
	b.navigate(hs.URL + "/")
	b.waitFor(`$("status").textContent === "ready" && document.querySelector(".card .synced").textContent === "✓ synced"`, 30*time.Second)
	lw.denied.Store(true)
	lw.CloseWatches()
	b.waitFor(`$("status").textContent === "failing" && $("status").classList.contains("bad")`, 30*time.Second)
	var shown string
	b.must(`document.querySelector(".card .synced.bad").textContent`, &shown)
	if !strings.HasPrefix(shown, "✗ ") || !strings.Contains(shown, "forbidden") || !strings.Contains(shown, hostileImg) {
		t.Errorf("card: %q", shown)
	}
	var ok bool
	if b.must(noMarkup, &ok); !ok {
		t.Errorf("hostile content became markup")
	}
	lw.denied.Store(false)
	b.waitFor(`$("status").textContent === "ready"`, 30*time.Second)
}
