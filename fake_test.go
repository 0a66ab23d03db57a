package kinformer

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kinformer/kinformer/internal/slots"
)

// fakeServer is a scripted stand-in for one resource of the API server, for
// the state-machine unit tests. It keeps objects with increasing
// resourceVersions and a history of changes that watches replay from any
// resourceVersion not yet compacted away. Behaviours users depend on are
// also shown against the real API server in the integration tests.
type fakeServer struct {
	mu        sync.Mutex // guards everything below
	rv        int64
	objs      map[string]*corev1.ConfigMap
	history   []change // in resourceVersion order
	compacted int64    // watches from an older resourceVersion get 410
	watchers  map[*fakeWatch]struct{}
	lists     []metav1.ListOptions // every List call's options
	watches   []metav1.ListOptions // every Watch call's options
	listErrs  []error              // returned by the next List calls, in turn
	listErr   error                // returned by every List call while set (after listErrs)
	watchErrs []error              // returned by the next Watch calls, in turn
	// expireContinue makes a List with a continue token fail with 410.
	expireContinue bool
	// streaming makes the server offer streaming lists (sendInitialEvents);
	// without it such a request is refused like by a server with the
	// WatchList feature off. Streaming requests are counted in streams, not
	// watches.
	streaming bool
	streams   []metav1.ListOptions
	// shardFilter makes List honour shardSelector and echo it in
	// shardInfo, as a server with ShardedListAndWatch does.
	shardFilter bool
}

var shardRangeRE = regexp.MustCompile(`'0x([0-9a-f]+)', '0x([0-9a-f]+)'`)

// inShardSelector reports whether uid's hash falls in one of sel's ranges.
func inShardSelector(sel, uid string) bool {
	h := slots.Hash(uid)
	for _, m := range shardRangeRE.FindAllStringSubmatch(sel, -1) {
		start, _ := strconv.ParseUint(m[1], 16, 64)
		end, err := strconv.ParseUint(m[2], 16, 64)
		if h >= start && (err != nil || h < end) { // err: 0x10000000000000000, the end of the space
			return true
		}
	}
	return false
}

type change struct {
	typ watch.EventType
	obj *corev1.ConfigMap
	old *corev1.ConfigMap // for Modified
	rv  int64
}

func newFakeServer() *fakeServer {
	return &fakeServer{objs: map[string]*corev1.ConfigMap{}, watchers: map[*fakeWatch]struct{}{}}
}

var cmResource = schema.GroupResource{Resource: "configmaps"}

func cm(ns, name string, kv ...string) *corev1.ConfigMap {
	c := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{}}, Data: map[string]string{}}
	for i := 0; i+1 < len(kv); i += 2 {
		c.Labels[kv[i]] = kv[i+1]
	}
	return c
}

// apply stores a change and sends it to the open watches; it returns the
// stored copy.
func (s *fakeServer) apply(typ watch.EventType, obj *corev1.ConfigMap) *corev1.ConfigMap {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rv++
	key := MetaNamespaceKey(obj)
	obj = obj.DeepCopy()
	obj.ResourceVersion = strconv.FormatInt(s.rv, 10)
	old := s.objs[key]
	switch typ {
	case watch.Deleted:
		if old == nil {
			panic("delete of missing " + key)
		}
		// The server sends the last state, with the deletion's version.
		obj = old.DeepCopy()
		obj.ResourceVersion = strconv.FormatInt(s.rv, 10)
		delete(s.objs, key)
	default:
		if old == nil {
			typ = watch.Added
		} else {
			typ = watch.Modified
		}
		s.objs[key] = obj
	}
	c := change{typ: typ, obj: obj, old: old, rv: s.rv}
	s.history = append(s.history, c)
	for w := range s.watchers {
		w.send(c)
	}
	return obj
}

func (s *fakeServer) put(obj *corev1.ConfigMap) *corev1.ConfigMap {
	return s.apply(watch.Modified, obj)
}

func (s *fakeServer) del(ns, name string) {
	s.apply(watch.Deleted, cm(ns, name))
}

// compact forgets all history: any watch from an older resourceVersion gets
// 410 Gone.
func (s *fakeServer) compact() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.compacted = s.rv
	s.history = nil
}

// closeWatches ends every open watch, as the server does at its timeout.
func (s *fakeServer) closeWatches() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for w := range s.watchers {
		w.Stop()
	}
}

// bookmark sends a bookmark at the current resourceVersion to every watch
// that asked for bookmarks.
func (s *fakeServer) bookmark() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	rv := strconv.FormatInt(s.rv, 10)
	for w := range s.watchers {
		if w.bookmarks {
			w.push(watch.Event{Type: watch.Bookmark, Object: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{ResourceVersion: rv}}})
		}
	}
	return rv
}

// sendRaw sends an arbitrary event to every open watch.
func (s *fakeServer) sendRaw(ev watch.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for w := range s.watchers {
		w.push(ev)
	}
}

func (s *fakeServer) state() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]string{}
	for k, o := range s.objs {
		out[k] = o.ResourceVersion
	}
	return out
}

func (s *fakeServer) counts() (lists, watches int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.lists), len(s.watches)
}

// calls returns copies of the options of every List and Watch call so far.
func (s *fakeServer) calls() (lists, watches []metav1.ListOptions) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]metav1.ListOptions(nil), s.lists...), append([]metav1.ListOptions(nil), s.watches...)
}

func (s *fakeServer) openWatches() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.watchers)
}

func (s *fakeServer) List(ctx context.Context, opts metav1.ListOptions) (*corev1.ConfigMapList, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lists = append(s.lists, opts)
	if len(s.listErrs) > 0 {
		err := s.listErrs[0]
		s.listErrs = s.listErrs[1:]
		if err != nil {
			return nil, err
		}
	}
	if s.listErr != nil {
		return nil, s.listErr
	}
	sel, err := labels.Parse(opts.LabelSelector)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	if opts.Continue != "" && opts.ResourceVersionMatch != "" {
		// As kube-apiserver: the continue token holds the resourceVersion.
		return nil, apierrors.NewBadRequest("resourceVersionMatch is forbidden when continue is provided")
	}
	if opts.Continue != "" && s.expireContinue {
		return nil, apierrors.NewResourceExpired("The provided continue parameter is too old")
	}
	keys := make([]string, 0, len(s.objs))
	for k, o := range s.objs {
		if sel.Matches(labels.Set(o.Labels)) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	start := 0
	if opts.Continue != "" {
		start, _ = strconv.Atoi(opts.Continue)
	}
	end := len(keys)
	list := &corev1.ConfigMapList{}
	list.ResourceVersion = strconv.FormatInt(s.rv, 10)
	if opts.Limit > 0 && start+int(opts.Limit) < end {
		rest := int64(end - start - int(opts.Limit))
		end = start + int(opts.Limit)
		list.Continue = strconv.Itoa(end)
		list.RemainingItemCount = &rest // as the server counts them
	}
	for _, k := range keys[start:end] {
		list.Items = append(list.Items, *s.objs[k].DeepCopy())
	}
	if s.shardFilter && opts.ShardSelector != "" {
		list.ShardInfo = &metav1.ShardInfo{Selector: opts.ShardSelector}
		kept := list.Items[:0]
		for _, o := range list.Items {
			if inShardSelector(opts.ShardSelector, string(o.UID)) {
				kept = append(kept, o)
			}
		}
		list.Items = kept
	}
	return list, nil
}

func (s *fakeServer) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if opts.SendInitialEvents != nil && *opts.SendInitialEvents {
		return s.streamList(ctx, opts)
	}
	s.watches = append(s.watches, opts)
	if len(s.watchErrs) > 0 {
		err := s.watchErrs[0]
		s.watchErrs = s.watchErrs[1:]
		if err != nil {
			return nil, err
		}
	}
	if s.listErr != nil {
		return nil, s.listErr
	}
	sel, err := labels.Parse(opts.LabelSelector)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	from, err := strconv.ParseInt(opts.ResourceVersion, 10, 64)
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("bad resourceVersion %q", opts.ResourceVersion))
	}
	w := &fakeWatch{sel: sel, bookmarks: opts.AllowWatchBookmarks, out: make(chan watch.Event), stop: make(chan struct{}), wake: make(chan struct{}, 1)}
	if from < s.compacted {
		w.push(watch.Event{Type: watch.Error, Object: &apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d)", from, s.compacted)).ErrStatus})
	} else {
		for _, c := range s.history {
			if c.rv > from {
				w.send(c)
			}
		}
	}
	s.start(ctx, w)
	return w, nil
}

// streamList serves a watch with sendInitialEvents: every matching object
// as ADDED, the end-marker bookmark, then live events. s.mu is held.
func (s *fakeServer) streamList(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	s.streams = append(s.streams, opts)
	if !s.streaming {
		return nil, apierrors.NewInvalid(schema.GroupKind{Group: "meta.k8s.io", Kind: "ListOptions"}, "",
			field.ErrorList{field.Forbidden(field.NewPath("sendInitialEvents"), "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled")})
	}
	if opts.ResourceVersionMatch != metav1.ResourceVersionMatchNotOlderThan || !opts.AllowWatchBookmarks {
		return nil, apierrors.NewBadRequest("sendInitialEvents needs resourceVersionMatch=NotOlderThan and bookmarks")
	}
	sel, err := labels.Parse(opts.LabelSelector)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	w := &fakeWatch{sel: sel, bookmarks: true, out: make(chan watch.Event), stop: make(chan struct{}), wake: make(chan struct{}, 1)}
	keys := make([]string, 0, len(s.objs))
	for k := range s.objs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if o := s.objs[k]; sel.Matches(labels.Set(o.Labels)) {
			w.push(watch.Event{Type: watch.Added, Object: o.DeepCopy()})
		}
	}
	end := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{ResourceVersion: strconv.FormatInt(s.rv, 10),
		Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
	w.push(watch.Event{Type: watch.Bookmark, Object: end})
	s.start(ctx, w)
	return w, nil
}

// start registers w for live events and runs its pump. s.mu is held.
func (s *fakeServer) start(ctx context.Context, w *fakeWatch) {
	s.watchers[w] = struct{}{}
	go w.pump(ctx, func() {
		s.mu.Lock()
		delete(s.watchers, w)
		s.mu.Unlock()
	})
}

// fakeWatch delivers its queue in order on out until stopped.
type fakeWatch struct {
	sel       labels.Selector
	bookmarks bool
	out       chan watch.Event
	stop      chan struct{}
	stopOnce  sync.Once
	wake      chan struct{}

	mu    sync.Mutex // guards queue
	queue []watch.Event
}

// send filters a change through the watch's selector, as the server does:
// an object leaving the selector is Deleted, one entering it Added.
func (w *fakeWatch) send(c change) {
	now := w.sel.Matches(labels.Set(c.obj.Labels))
	before := c.old != nil && w.sel.Matches(labels.Set(c.old.Labels))
	typ := c.typ
	switch {
	case c.typ == watch.Deleted && !now:
		return
	case c.typ == watch.Modified && now && !before:
		typ = watch.Added
	case c.typ == watch.Modified && !now && before:
		typ = watch.Deleted
	case !now:
		return
	}
	w.push(watch.Event{Type: typ, Object: c.obj.DeepCopy()})
}

func (w *fakeWatch) push(ev watch.Event) {
	w.mu.Lock()
	w.queue = append(w.queue, ev)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *fakeWatch) pump(ctx context.Context, done func()) {
	defer close(w.out)
	defer done()
	for {
		w.mu.Lock()
		var ev *watch.Event
		if len(w.queue) > 0 {
			ev = &w.queue[0]
			w.queue = w.queue[1:]
		}
		w.mu.Unlock()
		if ev == nil {
			select {
			case <-w.wake:
				continue
			case <-w.stop:
				return
			case <-ctx.Done():
				return
			}
		}
		select {
		case w.out <- *ev:
		case <-w.stop:
			return
		case <-ctx.Done():
			return
		}
	}
}

func (w *fakeWatch) Stop()                          { w.stopOnce.Do(func() { close(w.stop) }) }
func (w *fakeWatch) ResultChan() <-chan watch.Event { return w.out }
