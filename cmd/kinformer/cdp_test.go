package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// browser is headless Chromium driven over the DevTools protocol, through
// the pipe of --remote-debugging-pipe (requests on its fd 3, replies and
// events on its fd 4, each message a JSON object ended by a NUL byte): a
// live page can be watched and clicked while the test makes changes, with
// no dependency beyond the Chromium binary.
type browser struct {
	t       *testing.T
	w       *os.File
	session string // the page's, once attached
	done    chan struct{}

	mu      sync.Mutex // guards the fields below
	id      int64
	pending map[int64]chan cdpMessage
	log     []string // the page's console messages and exceptions
}

type cdpMessage struct {
	ID        int64           `json:"id,omitempty"`
	Method    string          `json:"method,omitempty"`
	Params    json.RawMessage `json:"params,omitempty"`
	SessionID string          `json:"sessionId,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	Error     *struct {
		Message string `json:"message"`
	} `json:"error,omitempty"`
}

// openBrowser starts Chromium and opens a page of width×height CSS
// pixels; it is stopped at the end of the test.
func openBrowser(t *testing.T, chromium string, width, height int) *browser {
	t.Helper()
	toChrome, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r, fromChrome, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
		"--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--hide-scrollbars", "--user-data-dir="+t.TempDir(),
		"--remote-debugging-pipe", "about:blank")
	var stderr syncBuffer
	cmd.Stderr = &stderr
	cmd.ExtraFiles = []*os.File{toChrome, fromChrome} // its fds 3 and 4
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	toChrome.Close()
	fromChrome.Close()
	b := &browser{t: t, w: w, done: make(chan struct{}), pending: map[int64]chan cdpMessage{}}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	go b.read(r)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = b.call(ctx, "", "Browser.close", nil, nil)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		w.Close()
		<-b.done
		r.Close()
		if t.Failed() {
			t.Logf("page console:\n%s", strings.Join(b.consoleLog(), "\n"))
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var target struct{ TargetID string }
	if err := b.call(ctx, "", "Target.createTarget", map[string]any{"url": "about:blank"}, &target); err != nil {
		t.Fatalf("chromium: %v; stderr:\n%s", err, stderr.String())
	}
	var att struct{ SessionID string }
	if err := b.call(ctx, "", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}, &att); err != nil {
		t.Fatal(err)
	}
	b.session = att.SessionID
	for _, c := range []struct {
		method string
		params any
	}{
		{"Runtime.enable", nil},
		{"Page.enable", nil},
		{"Emulation.setDeviceMetricsOverride", map[string]any{"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false}},
	} {
		if err := b.call(ctx, b.session, c.method, c.params, nil); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// read dispatches Chromium's messages until the pipe closes.
func (b *browser) read(r *os.File) {
	defer close(b.done)
	br := bufio.NewReader(r)
	for {
		raw, err := br.ReadBytes(0)
		if err != nil {
			b.mu.Lock()
			for id, ch := range b.pending {
				close(ch)
				delete(b.pending, id)
			}
			b.mu.Unlock()
			return
		}
		var m cdpMessage
		if json.Unmarshal(raw[:len(raw)-1], &m) != nil {
			continue
		}
		b.mu.Lock()
		switch {
		case m.ID != 0:
			if ch := b.pending[m.ID]; ch != nil {
				ch <- m
				delete(b.pending, m.ID)
			}
		case m.Method == "Runtime.consoleAPICalled" || m.Method == "Runtime.exceptionThrown":
			b.log = append(b.log, m.Method+" "+string(m.Params))
		}
		b.mu.Unlock()
	}
}

func (b *browser) consoleLog() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.log...)
}

// call sends one command and decodes its result into result (if not nil).
func (b *browser) call(ctx context.Context, session, method string, params, result any) error {
	ch := make(chan cdpMessage, 1)
	b.mu.Lock()
	b.id++
	id := b.id
	b.pending[id] = ch
	b.mu.Unlock()
	msg, err := json.Marshal(struct {
		ID        int64  `json:"id"`
		Method    string `json:"method"`
		Params    any    `json:"params,omitempty"`
		SessionID string `json:"sessionId,omitempty"`
	}{id, method, params, session})
	if err != nil {
		return err
	}
	if _, err := b.w.Write(append(msg, 0)); err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	select {
	case m, ok := <-ch:
		switch {
		case !ok:
			return fmt.Errorf("%s: chromium closed the pipe", method)
		case m.Error != nil:
			return fmt.Errorf("%s: %s", method, m.Error.Message)
		case result != nil:
			return json.Unmarshal(m.Result, result)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s: %w", method, ctx.Err())
	}
}

// navigate loads url in the page and waits for it to have loaded.
func (b *browser) navigate(url string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.call(ctx, b.session, "Page.navigate", map[string]any{"url": url}, nil); err != nil {
		b.t.Fatal(err)
	}
	b.waitFor(`document.readyState === "complete" && location.href === `+jsString(url), 30*time.Second)
}

// eval evaluates the JavaScript expression expr in the page (awaiting it
// if it is a promise) and decodes its value, as JSON, into v (if not nil).
func (b *browser) eval(expr string, v any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var res struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	err := b.call(ctx, b.session, "Runtime.evaluate",
		map[string]any{"expression": expr, "returnByValue": true, "awaitPromise": true}, &res)
	switch {
	case err != nil:
		return err
	case res.ExceptionDetails != nil:
		return fmt.Errorf("%s: %s %s", expr, res.ExceptionDetails.Text, res.ExceptionDetails.Exception.Description)
	case v != nil && len(res.Result.Value) > 0:
		return json.Unmarshal(res.Result.Value, v)
	}
	return nil
}

// must is eval that fails the test on an error.
func (b *browser) must(expr string, v any) {
	b.t.Helper()
	if err := b.eval(expr, v); err != nil {
		b.t.Fatal(err)
	}
}

// waitFor waits until the expression expr is truthy in the page.
func (b *browser) waitFor(expr string, timeout time.Duration) {
	b.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var ok bool
		err := b.eval("!!("+expr+")", &ok)
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			var dom string
			_ = b.eval("document.body ? document.body.innerText : ''", &dom)
			b.t.Fatalf("after %v, still not %s (last error: %v); page text:\n%s", timeout, expr, err, dom)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// screenshot returns a PNG of the page as laid out, the whole of it.
func (b *browser) screenshot() []byte {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var res struct{ Data string }
	if err := b.call(ctx, b.session, "Page.captureScreenshot", map[string]any{"format": "png", "captureBeyondViewport": true}, &res); err != nil {
		b.t.Fatal(err)
	}
	png, err := base64.StdEncoding.DecodeString(res.Data)
	if err != nil {
		b.t.Fatal(err)
	}
	return png
}

// jsString is s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
