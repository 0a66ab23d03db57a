package kinformertest

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/watch"

	"github.com/kinformer/kinformer"
)

// watcher is one open watch. Writes queue events for it without blocking
// (the queue is unbounded, so a test that writes while nothing reads cannot
// deadlock), and its own goroutine delivers them in order on out.
type watcher[T kinformer.Object] struct {
	sel       selector
	bookmarks bool
	out       chan watch.Event
	wake      chan struct{} // capacity 1: "the queue may be non-empty"
	stop      chan struct{} // closed by Stop
	stopOnce  sync.Once
	done      chan struct{} // closed when run has returned

	mu    sync.Mutex // guards queue and final
	queue []watch.Event
	final bool // end the watch once the queue is delivered
}

func newWatcher[T kinformer.Object](sel selector, bookmarks bool) *watcher[T] {
	return &watcher[T]{
		sel:       sel,
		bookmarks: bookmarks,
		out:       make(chan watch.Event),
		wake:      make(chan struct{}, 1),
		stop:      make(chan struct{}),
		done:      make(chan struct{}),
	}
}

// ResultChan returns the events; it is closed when the watch ends.
func (w *watcher[T]) ResultChan() <-chan watch.Event { return w.out }

// Stop ends the watch and returns once its goroutine has, so that a
// stopped informer leaves nothing running behind. Safe to call more than
// once.
func (w *watcher[T]) Stop() {
	w.stopOnce.Do(func() { close(w.stop) })
	<-w.done
}

// send queues change c (a bookmark only if the watch asked for them) as
// this watch's selector sees it, as the API
// server's watch cache does: an object that leaves the selector is Deleted
// (its previous state, at the change's resourceVersion), one that enters
// it Added.
func (w *watcher[T]) send(c change[T]) {
	if c.typ == watch.Bookmark {
		if w.bookmarks {
			w.push(watch.Event{Type: watch.Bookmark, Object: bookmark[T](format(c.rv), false)})
		}
		return
	}
	now := w.sel.matches(c.obj)
	before := c.typ == watch.Modified && w.sel.matches(c.old)
	var ev watch.Event
	switch {
	case c.typ == watch.Modified && now && !before:
		ev = watch.Event{Type: watch.Added, Object: copyOf(c.obj)}
	case c.typ == watch.Modified && !now && before:
		gone := copyOf(c.old)
		gone.SetResourceVersion(c.obj.GetResourceVersion())
		ev = watch.Event{Type: watch.Deleted, Object: gone}
	case now:
		ev = watch.Event{Type: c.typ, Object: copyOf(c.obj)}
	default:
		return
	}
	w.push(ev)
}

// push queues ev; it never blocks.
func (w *watcher[T]) push(ev watch.Event) {
	w.mu.Lock()
	w.queue = append(w.queue, ev)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// run delivers the queue until the watch is stopped, ctx ends, the
// timeout (if positive) passes, or a final queue is delivered; then it
// calls unregister and closes out.
func (w *watcher[T]) run(ctx context.Context, timeout time.Duration, unregister func()) {
	defer close(w.done)
	defer close(w.out)
	defer unregister()
	var expired <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expired = t.C
	}
	for {
		w.mu.Lock()
		batch, final := w.queue, w.final
		w.queue = nil
		w.mu.Unlock()
		for _, ev := range batch {
			select {
			case w.out <- ev:
			case <-w.stop:
				return
			case <-ctx.Done():
				return
			case <-expired:
				return
			}
		}
		if final {
			return
		}
		select {
		case <-w.wake:
		case <-w.stop:
			return
		case <-ctx.Done():
			return
		case <-expired:
			return
		}
	}
}
