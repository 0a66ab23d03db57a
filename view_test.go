package kinformer

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
	"weak"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

func names2(objs []*corev1.ConfigMap) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.Namespace+"/"+o.Name)
	}
	sort.Strings(out)
	return out
}

func TestSelectGetNamespacedAndView(t *testing.T) {
	a, b := newFakeServer(), newFakeServer()
	a.put(cm("a", "web-1", "app", "web"))
	a.put(cm("a", "db-1", "app", "db"))
	b.put(cm("b", "web-2", "app", "web"))
	infA, _ := startInformer(t, a, nil)
	infB, _ := startInformer(t, b, &Options[*corev1.ConfigMap]{KeyFunc: func(o *corev1.ConfigMap) string { return "k:" + o.Name }})
	web := labels.SelectorFromSet(labels.Set{"app": "web"})

	if got := names2(infA.Cache().Select("a", web)); len(got) != 1 || got[0] != "a/web-1" {
		t.Fatalf("Select(a, app=web) = %v", got)
	}
	if got := names2(infA.Cache().Select("", nil)); len(got) != 2 {
		t.Fatalf("Select(all) = %v", got)
	}
	if got := infA.Cache().Select("b", nil); len(got) != 0 {
		t.Fatalf("Select(b) on a = %v", got)
	}
	if o, ok := infB.Cache().GetNamespaced("b", "web-2"); !ok || o.Name != "web-2" {
		t.Fatal("GetNamespaced with a custom KeyFunc")
	}
	if _, ok := infA.Cache().GetNamespaced("b", "web-1"); ok {
		t.Fatal("GetNamespaced found an object in another namespace")
	}

	v := NewView(infA, infB)
	if !v.HasSynced() {
		t.Fatal("view not synced")
	}
	if got := names2(v.Select("", web)); len(got) != 2 || got[0] != "a/web-1" || got[1] != "b/web-2" {
		t.Fatalf("view Select(app=web) = %v", got)
	}
	if _, ok := v.GetNamespaced("b", "web-2"); !ok {
		t.Fatal("view GetNamespaced")
	}
	if _, ok := v.GetByKey("a/db-1"); !ok {
		t.Fatal("view GetByKey")
	}
	seen := make(chan string, 10)
	v.AddHandlerFuncs(HandlerFuncs[*corev1.ConfigMap]{Added: func(e cmEvent) { seen <- e.Object.Namespace + "/" + e.Object.Name }})
	got := map[string]bool{}
	ctx := bounded(t)
	for range 3 {
		select {
		case k := <-seen:
			got[k] = true
		case <-ctx.Done():
			t.Fatalf("view handler replay: %v", got)
		}
	}
	if !got["a/web-1"] || !got["a/db-1"] || !got["b/web-2"] {
		t.Fatalf("view handler replay: %v", got)
	}
}

// viewLog folds a view handler's events per key, and fails on an event
// that does not fit what the handler was told before (Added of an object
// it has, Modified or Deleted of one it has not), or one from an informer
// after its leave.
type viewLog struct {
	mu    sync.Mutex
	have  map[string]string // key -> resourceVersion
	bad   []string
	cause map[Cause]int
}

func (l *viewLog) handle(e cmEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.have == nil {
		l.have, l.cause = map[string]string{}, map[Cause]int{}
	}
	l.cause[e.Cause]++
	_, ok := l.have[e.Key]
	switch e.Type {
	case Added:
		if ok {
			l.bad = append(l.bad, "Added of a known "+e.Key+" ("+e.Cause.String()+")")
		}
		l.have[e.Key] = e.Object.ResourceVersion
	case Modified:
		if !ok {
			l.bad = append(l.bad, "Modified of an unknown "+e.Key)
		}
		l.have[e.Key] = e.Object.ResourceVersion
	case Deleted:
		if !ok {
			l.bad = append(l.bad, "Deleted of an unknown "+e.Key+" ("+e.Cause.String()+")")
		}
		delete(l.have, e.Key)
	}
	time.Sleep(50 * time.Microsecond) // a handler slower than the writer: events queue up
}

func (l *viewLog) state() (map[string]string, []string, map[Cause]int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.have), slices.Clone(l.bad), maps.Clone(l.cause)
}

// An informer that leaves a view while its objects change gives the view's
// handler, in order after what it had queued, Deleted (CauseLeave) for
// exactly the objects the handler was told of; joining again, Added
// (CauseJoin) for exactly those the cache has. Removing the handler while a
// leave is being handled ends the leave, and the view can take the
// informer back at once.
func TestViewLeaveAndJoinWhileChanging(t *testing.T) {
	s := newFakeServer()
	for i := range 50 {
		s.put(cm("a", fmt.Sprint("o", i), "v", "0"))
	}
	inf, _ := startInformer(t, s, nil)
	v := NewView(inf)
	var log viewLog
	v.AddHandlerFuncs(HandlerFuncs[*corev1.ConfigMap]{Added: log.handle, Modified: log.handle, Deleted: log.handle})

	for round := range 5 {
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() { // a writer: updates, creations, deletions
			exists := map[string]bool{}
			for k := range s.state() {
				exists[k] = true
			}
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				name := fmt.Sprint("o", i%80)
				if i%7 == 0 && exists["a/"+name] {
					s.del("a", name)
					delete(exists, "a/"+name)
				} else {
					s.put(cm("a", name, "v", fmt.Sprint(round, "-", i)))
					exists["a/"+name] = true
				}
				if i%50 == 0 {
					time.Sleep(time.Millisecond)
				}
			}
		})
		time.Sleep(20 * time.Millisecond)
		left := v.Remove(inf)
		select {
		case <-left:
		case <-bounded(t).Done():
			t.Fatal("the leave was never handled")
		}
		if have, bad, _ := log.state(); len(have) != 0 || len(bad) != 0 {
			close(stop)
			wg.Wait()
			t.Fatalf("round %d: after the leave the handler still holds %d objects; wrong events: %v", round, len(have), bad)
		}
		if len(v.Informers()) != 0 || len(v.Select("", nil)) != 0 {
			t.Fatal("the view still reads the informer that left")
		}
		time.Sleep(10 * time.Millisecond) // changes the view's handler must not see
		v.Add(inf)
		close(stop)
		wg.Wait()
		eventually(t, "the handler to hold what the cache holds", func() bool {
			have, _, _ := log.state()
			return equalMaps(have, valuesOf(inf.Cache())) && equalMaps(have, s.state())
		})
		if _, bad, causes := log.state(); len(bad) != 0 || causes[CauseLeave] == 0 || causes[CauseJoin] == 0 {
			t.Fatalf("round %d: wrong events %v, causes %v", round, bad, causes)
		}
	}

	// A handler removed while it handles a leave: the leave ends, and the
	// informer can join again at once.
	block := make(chan struct{})
	var once sync.Once
	entered := make(chan struct{})
	vr := v.AddHandlerFuncs(HandlerFuncs[*corev1.ConfigMap]{Deleted: func(cmEvent) {
		once.Do(func() { close(entered) })
		<-block
	}})
	left := v.Remove(inf)
	<-entered
	removed := make(chan struct{})
	go func() { v.RemoveHandler(vr); close(removed) }()
	time.Sleep(10 * time.Millisecond)
	close(block)
	<-removed
	select {
	case <-left:
	case <-bounded(t).Done():
		t.Fatal("a leave whose handler was removed never ended")
	}
	v.Add(inf)
	if !vr.HasSynced() || len(v.Informers()) != 1 {
		t.Fatal("the view did not take the informer back")
	}
}

func valuesOf(c *Cache[*corev1.ConfigMap]) map[string]string {
	out := map[string]string{}
	for _, o := range c.List() {
		out[o.Namespace+"/"+o.Name] = o.ResourceVersion
	}
	return out
}

// Removing a handler while informers it was on are leaving the view is
// safe (the leaves' ends change what it iterates) and ends those leaves:
// the view can take the informers back at once.
func TestViewRemoveHandlerDuringLeaves(t *testing.T) {
	var infs []*Informer[*corev1.ConfigMap]
	for i := range 3 {
		s := newFakeServer()
		for j := range 20 {
			s.put(cm(fmt.Sprint("ns", i), fmt.Sprint("o", j)))
		}
		inf, _ := startInformer(t, s, nil)
		infs = append(infs, inf)
	}
	for i := range 200 {
		v := NewView(infs...)
		vr := v.AddHandlerFuncs(HandlerFuncs[*corev1.ConfigMap]{Deleted: func(cmEvent) {
			if i%2 == 0 {
				time.Sleep(time.Microsecond)
			}
		}})
		var left []<-chan struct{}
		for _, inf := range infs {
			left = append(left, v.Remove(inf))
		}
		v.RemoveHandler(vr)
		for _, ch := range left {
			select {
			case <-ch:
			case <-bounded(t).Done():
				t.Fatal("a leave whose handler was removed never ended")
			}
		}
		for _, inf := range infs {
			v.Add(inf)
		}
		if len(v.Informers()) != 3 {
			t.Fatal("the view did not take the informers back")
		}
	}
}

// An informer removed and added back at once joins only after the view's
// handlers have handled its leave: a slow handler gets every Deleted of
// the leave before any Added of the join.
func TestViewJoinWaitsForTheLeave(t *testing.T) {
	s := newFakeServer()
	for i := range 40 {
		s.put(cm("a", fmt.Sprint("o", i)))
	}
	inf, _ := startInformer(t, s, nil)
	v := NewView(inf)
	var log viewLog
	v.AddHandlerFuncs(HandlerFuncs[*corev1.ConfigMap]{Added: log.handle, Modified: log.handle, Deleted: log.handle})
	eventually(t, "the handler to hold the informer's objects", func() bool {
		have, _, _ := log.state()
		return len(have) == 40
	})
	for round := range 3 {
		v.Remove(inf)
		v.Add(inf) // at once: must wait for the leave
		eventually(t, "the join's Added", func() bool {
			_, _, causes := log.state()
			return causes[CauseJoin] == 40*(round+1)
		})
		have, bad, causes := log.state()
		if len(bad) != 0 || len(have) != 40 || causes[CauseLeave] != 40*(round+1) {
			t.Fatalf("round %d: %d objects held, causes %v, out of order: %v", round, len(have), causes, bad)
		}
	}
}

// A view forgets an informer once its leave has been handled: nothing of
// the view keeps that informer, or its cache, alive. (A namespace flipped
// in and out of a selector's view kept every cache it ever had.)
func TestViewForgetsInformersThatLeft(t *testing.T) {
	v := NewView[*corev1.ConfigMap]()
	var log viewLog
	v.AddHandlerFuncs(HandlerFuncs[*corev1.ConfigMap]{Added: log.handle, Deleted: log.handle})
	var left []weak.Pointer[Informer[*corev1.ConfigMap]]
	for i := range 4 {
		s := newFakeServer()
		s.put(cm("a", fmt.Sprint("o", i)))
		inf := New[*corev1.ConfigMap](s, &Options[*corev1.ConfigMap]{Backoff: fastBackoff})
		inf.Start()
		v.Add(inf)
		eventually(t, "the join", func() bool {
			have, _, _ := log.state()
			return len(have) == 1
		})
		select {
		case <-v.Remove(inf):
		case <-bounded(t).Done():
			t.Fatal("the leave was never handled")
		}
		inf.Stop()
		left = append(left, weak.Make(inf))
	}
	if _, bad, causes := log.state(); len(bad) != 0 || causes[CauseLeave] != 4 {
		t.Fatalf("causes %v, wrong events %v", causes, bad)
	}
	eventuallyCollected(t, "the informers that left to be collected", left)
	if len(v.Informers()) != 0 { // and the view itself is still alive
		t.Fatal("the view still holds an informer")
	}
}

// A view that reaches manyNamespaces warns once, naming the resource and
// the cheaper form; fewer namespaces, or more after the first warning,
// say nothing more.
func TestViewOfManyNamespacesWarnsOnce(t *testing.T) {
	defer func(n int) { manyNamespaces = n }(manyNamespaces)
	manyNamespaces = 3
	log := &syncBuffer{}
	f := NewFactory(nil, &FactoryOptions{Logger: slog.New(slog.NewTextHandler(log, nil))})
	defer f.Stop()
	f.Start()
	acquire := fakeAcquire(f)
	v, err := newNamespacedView(f, Namespaces{}, corev1.SchemeGroupVersion.WithResource("configmaps"), acquire)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	const warning = "a view over many namespaces"
	for i, ns := range []string{"a", "b", "c", "d", "e"} {
		if err := v.AddNamespace(ns); err != nil {
			t.Fatal(err)
		}
		want := 0
		if i+1 >= manyNamespaces {
			want = 1
		}
		if got := strings.Count(log.String(), warning); got != want {
			t.Fatalf("after %d namespaces: %d warnings, want %d; log:\n%s", i+1, got, want, log)
		}
	}
	if l := log.String(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, "resource=configmaps") || !strings.Contains(l, "namespaces=3") || !strings.Contains(l, "-A -l") {
		t.Errorf("the warning does not name the level, resource, count and the cheaper form:\n%s", l)
	}
}

// fakeAcquire is a namespaced view's acquire on f: each namespace's
// ConfigMap informer the factory's, on an in-memory server holding the
// ConfigMaps named.
func fakeAcquire(f *Factory, names ...string) func(string) (*Informer[*corev1.ConfigMap], error) {
	return func(namespace string) (*Informer[*corev1.ConfigMap], error) {
		k := cmKey
		k.namespace = namespace
		return share(f, k, Options[*corev1.ConfigMap]{Name: "configmaps", Backoff: fastBackoff}, nil,
			func(o *Options[*corev1.ConfigMap]) (*Informer[*corev1.ConfigMap], error) {
				s := newFakeServer()
				for _, name := range names {
					s.put(cm(namespace, name))
				}
				return New[*corev1.ConfigMap](s, o), nil
			})
	}
}
