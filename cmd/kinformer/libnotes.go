package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
)

// Without --verbose the library's log is discarded, but a few of its lines
// are for the user: noteHandler passes those on as warnings on stderr.
// They are matched by their message, as the library writes it (the
// tests that see them on stderr say when one changes).

// noteHandler is the library's logger without --verbose.
type noteHandler struct {
	warn  func(string)
	attrs []slog.Attr
	once  *sync.Map // what was said once: "many RESOURCE"
}

func newNoteLogger(warn func(string)) *slog.Logger {
	return slog.New(noteHandler{warn: warn, once: &sync.Map{}})
}

func (h noteHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h noteHandler) WithAttrs(as []slog.Attr) slog.Handler {
	h.attrs = append(h.attrs[:len(h.attrs):len(h.attrs)], as...)
	return h
}

func (h noteHandler) WithGroup(string) slog.Handler { return h }

func (h noteHandler) Handle(_ context.Context, r slog.Record) error {
	attr := func(key string) string {
		v := ""
		for _, a := range h.attrs {
			if a.Key == key {
				v = a.Value.String()
			}
		}
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == key {
				v = a.Value.String()
			}
			return true
		})
		return v
	}
	msg := strings.TrimPrefix(r.Message, "kinformer: ")
	switch {
	case strings.HasPrefix(msg, "a view over many namespaces"):
		// Once per resource (the library says it once per view).
		res := attr("resource")
		if _, said := h.once.LoadOrStore("many "+res, true); !said {
			h.warn(fmt.Sprintf("%s: --namespace-selector holds %s namespaces, with a list and a watch of %s in each (memory, goroutines and start-up grow with them); if their objects share a label, -A -l SELECTOR holds the same objects with one list and one watch",
				res, attr("namespaces"), res))
		}
	case strings.HasPrefix(msg, "may not list and watch"), strings.HasPrefix(msg, "may no longer list and watch"), strings.HasPrefix(msg, "may now list and watch"):
		// --skip-forbidden-namespaces: a namespace left out, or let in.
		line := msg + ": namespace " + attr("namespace")
		if why := attr("reason"); why != "" {
			line += " (" + why + ")"
		}
		h.warn(line)
	}
	return nil
}
