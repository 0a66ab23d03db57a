package kinformertest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kinformer/kinformer"
)

// Server is an in-memory API server for one resource: a
// kinformer.ListerWatcher that tests write to. It keeps what the informer
// relies on from a real server:
//
//   - every write gets a new, increasing resourceVersion (integers; the
//     empty server is at 1), and a Deleted carries the object's last state
//     with the deletion's resourceVersion;
//   - List returns the current state at its resourceVersion, in one page,
//     filtered by the label selector and the metadata.name and
//     metadata.namespace field selectors;
//   - Watch replays every change after the resourceVersion asked for (410
//     Gone if [Server.Compact] forgot it), then streams live ones; an
//     object that stops matching the selector is Deleted, one that starts
//     matching Added;
//   - watch-lists (sendInitialEvents): Added for every object, then the
//     bookmark that ends the initial events, as kube-apiserver sends them.
//
// Objects are copied on the way in and on the way out, so neither the test
// nor the informer can change what the server holds. Namespaces are keys
// only: one Server holds one resource in every namespace.
//
// A Server is safe for concurrent use. Create it with NewServer or New.
type Server[T kinformer.Object] struct {
	resource schema.GroupResource // names the resource in errors

	mu        sync.Mutex   // guards everything below
	rv        uint64       // of the last write
	objs      map[string]T // key -> stored object; never modified nor handed out
	history   []change[T]  // every write and bookmark after compacted, in order
	compacted uint64       // a watch from an older resourceVersion gets 410 Gone
	watchers  map[*watcher[T]]struct{}
	requests  Requests
}

// Requests counts the requests a [Server] has received, so that a test can
// tell how the informer listed and whether it opened another watch: after
// [Server.CloseWatches] or [Server.Compact], for instance. Failed requests
// (400, 410 Gone) count too.
type Requests struct {
	Lists      int // List calls
	WatchLists int // Watch calls with sendInitialEvents (watch-lists)
	Watches    int // other Watch calls
}

// change is one write or bookmark, as watches replay it.
type change[T kinformer.Object] struct {
	typ watch.EventType
	obj T // the new state; Deleted: the last state, at rv; zero for Bookmark
	old T // the previous state; zero for Added and Bookmark
	rv  uint64
}

// NewServer returns a server holding objs, written in order. It panics if
// one has no name or two have the same key: the test's setup is wrong.
func NewServer[T kinformer.Object](objs ...T) *Server[T] {
	s := &Server[T]{
		resource: schema.GroupResource{Resource: typeName[T]()},
		rv:       1,
		objs:     map[string]T{},
		watchers: map[*watcher[T]]struct{}{},
	}
	for _, o := range objs {
		if _, err := s.Add(o); err != nil {
			panic("kinformertest.NewServer: " + err.Error())
		}
	}
	return s
}

// New returns an informer with default options over a new server holding
// objs, and the server. For other options, use NewServer and
// kinformer.New(srv, opts): a short Options.Backoff, for instance, when the
// test uses Compact or CloseWatches, after which the informer may back off
// before it lists or watches again (800 ms by default).
func New[T kinformer.Object](objs ...T) (*kinformer.Informer[T], *Server[T]) {
	s := NewServer(objs...)
	return kinformer.New[T](s, nil), s
}

// Add creates obj, like a client's Create: AlreadyExists if its key is
// taken. It returns the stored object, with its resourceVersion and a UID
// if obj had none.
func (s *Server[T]) Add(obj T) (T, error) { return s.write(watch.Added, obj) }

// Update replaces the object with obj's key, like a client's Update:
// NotFound if there is none, Conflict if obj has a resourceVersion and it
// is not the current one (optimistic concurrency, as controllers use it),
// or a UID and it is not the stored object's. It returns the stored object.
func (s *Server[T]) Update(obj T) (T, error) { return s.write(watch.Modified, obj) }

// Delete deletes the object with obj's namespace and name: NotFound if
// there is none.
func (s *Server[T]) Delete(obj T) error {
	_, err := s.write(watch.Deleted, obj)
	return err
}

// Get returns a copy of the object stored under key ("namespace/name", or
// "name" for cluster-scoped objects), so that a test can check what a
// controller wrote.
func (s *Server[T]) Get(key string) (T, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.objs[key]
	if !ok {
		var zero T
		return zero, false
	}
	return copyOf(o), true
}

// Requests returns the requests received so far. A watch is counted in the
// step that opens it, so a watch counted here is one that a later
// [Server.CloseWatches] closes, if it is still open (a watch from a
// compacted resourceVersion carries its 410 error and ends by itself).
func (s *Server[T]) Requests() Requests {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

// ResourceVersion returns the resourceVersion of the last write.
func (s *Server[T]) ResourceVersion() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return format(s.rv)
}

// DetectMutations returns true: informers over a Server have the cache
// mutation detector on (kinformer.Options.DetectMutations), so that a
// handler under test that changes an object it was given, instead of a
// copy, is reported (an Error event wrapping kinformer.ErrMutated, and an
// error log line) instead of corrupting the cache unnoticed.
func (s *Server[T]) DetectMutations() bool { return true }

func (s *Server[T]) write(op watch.EventType, obj T) (T, error) {
	var zero T
	if isNil(obj) {
		return zero, apierrors.NewBadRequest("kinformertest: nil object")
	}
	if obj.GetName() == "" {
		return zero, apierrors.NewBadRequest("kinformertest: object without a name")
	}
	key := kinformer.MetaNamespaceKey(obj)
	s.mu.Lock()
	defer s.mu.Unlock()
	old, exists := s.objs[key]
	switch {
	case op == watch.Added && exists:
		return zero, apierrors.NewAlreadyExists(s.resource, obj.GetName())
	case op != watch.Added && !exists:
		return zero, apierrors.NewNotFound(s.resource, obj.GetName())
	case op == watch.Modified && obj.GetResourceVersion() != "" && obj.GetResourceVersion() != old.GetResourceVersion():
		return zero, apierrors.NewConflict(s.resource, obj.GetName(),
			errors.New("the object has been modified; please apply your changes to the latest version and try again"))
	case op == watch.Modified && obj.GetUID() != "" && obj.GetUID() != old.GetUID():
		// Another object of the same name: it was deleted and created again.
		return zero, apierrors.NewConflict(s.resource, obj.GetName(),
			fmt.Errorf("precondition failed: UID in precondition: %v, UID in object meta: %v", old.GetUID(), obj.GetUID()))
	}
	s.rv++
	var stored T
	if op == watch.Deleted {
		stored = copyOf(old)
		delete(s.objs, key)
	} else {
		stored = copyOf(obj)
		switch {
		case exists:
			stored.SetUID(old.GetUID())
		case stored.GetUID() == "":
			// A new UID per creation, so that a controller can tell an
			// object deleted and created again from the one it knew.
			stored.SetUID(types.UID("kinformertest-" + format(s.rv)))
		}
		s.objs[key] = stored
	}
	stored.SetResourceVersion(format(s.rv))
	c := change[T]{typ: op, obj: stored, old: old, rv: s.rv}
	s.history = append(s.history, c)
	for w := range s.watchers {
		w.send(c)
	}
	return copyOf(stored), nil
}

// Compact forgets every change so far, as etcd compacts its history: a
// watch from an older resourceVersion then gets 410 Gone, and the informer
// re-lists. Open watches are not affected; stop and start the informer, or
// call CloseWatches, to make it come back with its old resourceVersion.
func (s *Server[T]) Compact() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.compacted = s.rv
	s.history = nil
}

// CloseWatches ends every open watch, as the server does at a watch's
// timeout or when it restarts; the informer resumes from the last
// resourceVersion it saw. It returns once the watches are closed. A watch
// is opened in the step that counts it in [Server.Requests], under the lock
// CloseWatches takes, so every watch counted before CloseWatches is one it
// closes; a Watch call still on its way opens its watch after, as a request
// arriving after a restart does.
func (s *Server[T]) CloseWatches() {
	s.mu.Lock()
	ws := make([]*watcher[T], 0, len(s.watchers))
	for w := range s.watchers {
		ws = append(ws, w)
	}
	s.mu.Unlock()
	for _, w := range ws {
		w.Stop()
	}
}

// Bookmark sends a bookmark at the current resourceVersion on every watch
// that asked for bookmarks, as a real server does about once a minute, and
// returns that resourceVersion. It is kept in the history like a write, so
// that a watch opened later from an older resourceVersion receives it too:
// a test need not know whether the informer's watch is open yet.
func (s *Server[T]) Bookmark() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := change[T]{typ: watch.Bookmark, rv: s.rv}
	s.history = append(s.history, c)
	for w := range s.watchers {
		w.send(c)
	}
	return format(s.rv)
}

// List returns every object matching opts' selectors and the current
// resourceVersion. It ignores opts.Limit: one page holds all, as a server
// may answer.
func (s *Server[T]) List(ctx context.Context, opts metav1.ListOptions) (*List[T], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests.Lists++
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	sel, err := parseSelector(opts)
	if err != nil {
		return nil, err
	}
	list := &List[T]{Items: []T{}}
	list.ResourceVersion = format(s.rv)
	for _, o := range s.sorted() {
		if sel.matches(o) {
			list.Items = append(list.Items, copyOf(o))
		}
	}
	return list, nil
}

// Watch streams the changes after opts.ResourceVersion, as an API server
// does. With "" or "0", it first sends Added for every object (the state
// the watch starts from); with sendInitialEvents, it also ends those with
// the bookmark annotated k8s.io/initial-events-end. A resourceVersion older
// than the last Compact gets an ERROR event with 410 Gone, and the watch
// ends. The watch ends when stopped, when ctx ends, or after
// opts.TimeoutSeconds.
func (s *Server[T]) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	initial := opts.SendInitialEvents != nil && *opts.SendInitialEvents
	// One critical section from the count to the registration in
	// s.watchers: CloseWatches, which takes s.mu too, then sees every watch
	// counted so far open, never one counted and still being opened.
	s.mu.Lock()
	defer s.mu.Unlock()
	if initial {
		s.requests.WatchLists++
	} else {
		s.requests.Watches++
	}
	sel, err := parseSelector(opts)
	if err != nil {
		return nil, err
	}
	if initial && (!opts.AllowWatchBookmarks || opts.ResourceVersionMatch != metav1.ResourceVersionMatchNotOlderThan) {
		// As kube-apiserver validates a watch-list request.
		return nil, apierrors.NewBadRequest("sendInitialEvents requires allowWatchBookmarks=true and resourceVersionMatch=NotOlderThan")
	}
	fromState := initial || opts.ResourceVersion == "" || opts.ResourceVersion == "0"
	var from uint64
	if !fromState {
		if from, err = strconv.ParseUint(opts.ResourceVersion, 10, 64); err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("invalid resourceVersion %q", opts.ResourceVersion))
		}
	}
	var timeout time.Duration
	if opts.TimeoutSeconds != nil && *opts.TimeoutSeconds > 0 {
		timeout = time.Duration(*opts.TimeoutSeconds) * time.Second
	}

	w := newWatcher[T](sel, opts.AllowWatchBookmarks)
	switch {
	case fromState:
		for _, o := range s.sorted() {
			if sel.matches(o) {
				w.push(watch.Event{Type: watch.Added, Object: copyOf(o)})
			}
		}
		if initial {
			w.push(watch.Event{Type: watch.Bookmark, Object: bookmark[T](format(s.rv), true)})
		}
	case from < s.compacted:
		// As the watch cache answers: a 200 whose only event is the error.
		gone := apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d)", from, s.compacted))
		w.push(watch.Event{Type: watch.Error, Object: &gone.ErrStatus})
		w.final = true
		go w.run(ctx, timeout, func() {})
		return w, nil
	default:
		for _, c := range s.history {
			if c.rv > from {
				w.send(c)
			}
		}
	}
	s.watchers[w] = struct{}{}
	go w.run(ctx, timeout, func() {
		s.mu.Lock()
		delete(s.watchers, w)
		s.mu.Unlock()
	})
	return w, nil
}

// sorted returns the stored objects in key order, so that lists and
// initial events come in the same order every time. s.mu is held.
func (s *Server[T]) sorted() []T {
	keys := make([]string, 0, len(s.objs))
	for k := range s.objs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]T, len(keys))
	for i, k := range keys {
		out[i] = s.objs[k]
	}
	return out
}

// selector is a request's label and field selectors.
type selector struct {
	labels labels.Selector
	fields fields.Selector
}

// parseSelector parses opts' selectors; a bad one, or a field selector on
// a field other than metadata.name and metadata.namespace (the fields every
// resource supports), is a 400, as from a real server.
func parseSelector(opts metav1.ListOptions) (selector, error) {
	ls, err := labels.Parse(opts.LabelSelector)
	if err != nil {
		return selector{}, apierrors.NewBadRequest(fmt.Sprintf("unable to parse requirement: %v", err))
	}
	fs, err := fields.ParseSelector(opts.FieldSelector)
	if err != nil {
		return selector{}, apierrors.NewBadRequest(err.Error())
	}
	for _, r := range fs.Requirements() {
		if r.Field != "metadata.name" && r.Field != "metadata.namespace" {
			return selector{}, apierrors.NewBadRequest(fmt.Sprintf("field label not supported: %s", r.Field))
		}
	}
	return selector{labels: ls, fields: fs}, nil
}

func (sel selector) matches(o metav1.Object) bool {
	return sel.labels.Matches(labels.Set(o.GetLabels())) &&
		sel.fields.Matches(fields.Set{"metadata.name": o.GetName(), "metadata.namespace": o.GetNamespace()})
}

func format(rv uint64) string { return strconv.FormatUint(rv, 10) }

func copyOf[T kinformer.Object](o T) T { return o.DeepCopyObject().(T) }

func isNil[T kinformer.Object](o T) bool {
	v := reflect.ValueOf(o)
	return !v.IsValid() || (v.Kind() == reflect.Pointer && v.IsNil())
}

func typeName[T kinformer.Object]() string {
	t := reflect.TypeFor[T]()
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Name()
}

// bookmark returns a bookmark's object: an empty T (a PartialObjectMetadata
// if T is not a pointer to a struct) with only a resourceVersion, and the
// annotation that ends a watch-list's initial events if end is set.
func bookmark[T kinformer.Object](rv string, end bool) kinformer.Object {
	var o kinformer.Object = &metav1.PartialObjectMetadata{}
	if t := reflect.TypeFor[T](); t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct {
		o = reflect.New(t.Elem()).Interface().(kinformer.Object)
	}
	o.SetResourceVersion(rv)
	if end {
		o.SetAnnotations(map[string]string{metav1.InitialEventsAnnotationKey: "true"})
	}
	return o
}
