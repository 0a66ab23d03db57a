package main

import (
	"fmt"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kinformer/kinformer"
)

// goneNotice says once, on stderr, that a watched resource is no longer
// served (its CustomResourceDefinition deleted), rather than leaving it to
// be read from the DELETED lines ("cause":"gone") and the 404 of every
// attempt: at the first 404 since the resource was last served, again
// only after it has come back (any event but an error or a Deleted of
// its going) and gone again.
type goneNotice struct {
	res  resource
	said bool // a 404 has been said, and nothing since says the resource is back
}

// see returns the line to say for ev ("" for none).
func (g *goneNotice) see(ev kinformer.Event[*unstructured.Unstructured]) string {
	switch {
	case g.res.gvr.Resource == "":
	case ev.Type == kinformer.Error:
		if g.said || !apierrors.IsNotFound(ev.Err) {
			return "" // another failure says nothing of the resource's return
		}
		g.said = true
		if strings.Contains(g.res.gvr.Group, ".") { // a CRD's group has a dot
			return fmt.Sprintf("the definition of %s was deleted; its objects are gone (waiting for it to come back)", g.res)
		}
		return fmt.Sprintf("the server no longer serves %s (404); its objects are gone (waiting for it to come back)", g.res)
	case ev.Type == kinformer.Deleted && ev.Cause == kinformer.CauseGone:
	default:
		g.said = false // a list or watch that works: served again
	}
	return ""
}

// sayGone has serve say on stderr when src's resource goes (goneNotice),
// once src has synced (before, the 404 ends serve).
func sayGone(e *env, res resource, src watchSource) {
	var mu sync.Mutex // a view's informers call from their own goroutines
	g := &goneNotice{res: res}
	src.addHandler(func(ev kinformer.Event[*unstructured.Unstructured]) {
		if !src.hasSynced() {
			return
		}
		mu.Lock()
		line := g.see(ev)
		mu.Unlock()
		if line != "" {
			fmt.Fprintf(e.stderr, "%s: %s\n", e.prog, escapeTerminal(line))
		}
	})
}
