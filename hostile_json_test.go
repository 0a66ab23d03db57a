package kinformer

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// Hostile JSON servers, for informers of client-go's dynamic client, whose
// watches kinformer decodes itself (internal/jsonwatch): as for protobuf
// (hostile_test.go), each case ends in an ERROR event that names the
// problem, with the informer carrying on at the backoff's pace and memory
// bounded.

func jsonEvent(typ, obj string) string { return `{"type":"` + typ + `","object":` + obj + "}\n" }

func jsonCM(rv string) string {
	return `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","resourceVersion":"` + rv + `"},"data":{"k":"v"}}`
}

// jsonListThen serves a good watch-list (a at 7, the end at 10), then
// then's stream to the first watch, and silence to the others.
func jsonListThen(then func(w http.ResponseWriter)) *hostileServer {
	var once sync.Once
	return &hostileServer{serve: func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		if r.URL.Query().Get("sendInitialEvents") == "true" {
			w.Write([]byte(jsonEvent("ADDED", jsonCM("7")) +
				jsonEvent("BOOKMARK", `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"10","annotations":{"k8s.io/initial-events-end":"true"}}}`)))
		} else {
			once.Do(func() { then(w) })
		}
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}}
}

type hostileJSONCase struct {
	name   string
	then   func(w http.ResponseWriter)
	says   string
	goesOn bool // to resourceVersion 12, past the garbage
	// maxEvent, if set, bounds the bytes of an event.
	maxEvent int64
}

// An event past its bound: the informer reads no further than that, says
// so, and holds nothing of it after. The bound is lowered to 4 MiB (the
// default, 64 MiB, is tested in internal/jsonwatch): under -race on a
// loaded machine, tokenizing 64 MiB takes longer than the test waits.
func TestHostileJSONHugeEvent(t *testing.T) {
	base := heapInUse()
	runHostileJSON(t, base, hostileJSONCase{
		name:     "an event of 6 MiB",
		maxEvent: 4 << 20,
		then: func(w http.ResponseWriter) {
			w.Write([]byte(jsonEvent("MODIFIED", jsonCM("11")) + `{"type":"MODIFIED","object":{"kind":"ConfigMap","data":{"x":"`))
			chunk := []byte(strings.Repeat("x", 1<<20))
			for range 6 {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		},
		says: "unreadable watch stream: event too large: more than 4194304 bytes",
	})
}

func TestHostileJSONServers(t *testing.T) {
	base := heapInUse()
	cases := []hostileJSONCase{
		{
			name: "an event cut short",
			then: func(w http.ResponseWriter) {
				ev := jsonEvent("MODIFIED", jsonCM("11"))
				w.Write([]byte(ev + ev[:len(ev)/2]))
				w.(http.Flusher).Flush()
				panic(http.ErrAbortHandler) // the connection cut mid-event
			},
			says: "truncated event",
		},
		{
			name: "a syntax error",
			then: func(w http.ResponseWriter) {
				w.Write([]byte(jsonEvent("MODIFIED", jsonCM("11")) + `{"type":"MODIFIED","object":{"kind":]}`))
			},
			says: "unreadable watch stream: jsontext: invalid character ']'",
		},
		{
			name: "an unknown event type",
			then: func(w http.ResponseWriter) {
				w.Write([]byte(jsonEvent("EXPLODED", jsonCM("11")) + jsonEvent("MODIFIED", jsonCM("12"))))
			},
			says:   `watch event: type "EXPLODED"`,
			goesOn: true,
		},
		{
			name: "a number beyond float64",
			then: func(w http.ResponseWriter) {
				w.Write([]byte(jsonEvent("MODIFIED", `{"kind":"ConfigMap","metadata":{"name":"a","resourceVersion":"11"},"data":{"n":[1e999]}}`) +
					jsonEvent("MODIFIED", jsonCM("12"))))
			},
			says:   "MODIFIED event: invalid value: number 1e999: value out of range",
			goesOn: true,
		},
		{
			name: "an object without a kind",
			then: func(w http.ResponseWriter) {
				w.Write([]byte(jsonEvent("MODIFIED", `{"metadata":{"name":"a","resourceVersion":"11"}}`) + jsonEvent("MODIFIED", jsonCM("12"))))
			},
			says:   "Object 'Kind' is missing",
			goesOn: true,
		},
		{
			name: "an ERROR Status mid-stream",
			then: func(w http.ResponseWriter) {
				w.Write([]byte(jsonEvent("MODIFIED", jsonCM("11")) +
					jsonEvent("ERROR", `{"kind":"Status","apiVersion":"v1","status":"Failure","code":500,"reason":"InternalError","message":"etcdserver: leader changed"}`)))
			},
			says: "etcdserver: leader changed",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			runHostileJSON(t, base, tc)
		})
	}
}

func runHostileJSON(t *testing.T, base uint64, tc hostileJSONCase) {
	srv := jsonListThen(tc.then)
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	dyn, err := dynamic.NewForConfig(&rest.Config{Host: hs.URL})
	if err != nil {
		t.Fatal(err)
	}
	opts := Options[*unstructured.Unstructured]{Backoff: hostileBackoff, WatchTimeout: time.Second, IdleMargin: 200 * time.Millisecond}
	inf := New[*unstructured.Unstructured](dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}).Namespace("ns"), &opts)
	if err := inf.reconfigure("the bound of a JSON event", false, func(c *config[*unstructured.Unstructured]) { c.maxJSONEvent = tc.maxEvent }); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var errs []string
	inf.AddHandler(func(e Event[*unstructured.Unstructured]) {
		if e.Type == Error {
			mu.Lock()
			errs = append(errs, e.Err.Error())
			mu.Unlock()
		}
	})
	inf.Start()
	t.Cleanup(inf.Stop)
	// Parallel cases tokenize megabytes under -race: on a busy 2-core
	// machine that has taken more than 10 s.
	eventuallyWithin(t, time.Minute, "an ERROR event saying "+tc.says, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range errs {
			if strings.Contains(e, tc.says) {
				return true
			}
		}
		return false
	})
	from := time.Now()
	time.Sleep(time.Second)
	if n, paced := srv.requests(from), int(time.Second/hostileBackoff.Initial); n > paced {
		t.Errorf("%d requests in a second after the error: a hot loop (at most %d)", n, paced)
	}
	if tc.goesOn {
		if rv := inf.ResourceVersion(); rv != "12" {
			t.Errorf("resourceVersion %s, want 12 from the event after the garbage", rv)
		}
	}
	inf.Stop()
	if h := heapInUse(); h > base+heapLimit {
		t.Errorf("heap %d MiB, was %d MiB before the hostile servers", h>>20, base>>20)
	}
}

// A paged list whose body is not JSON (a list read by kinformer itself,
// internal/direct) is an ERROR event wrapping ErrUnexpectedObject, and the
// list is retried at the backoff's pace.
func TestHostileJSONList(t *testing.T) {
	srv := &hostileServer{serve: func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":[}`))
	}}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	dyn, err := dynamic.NewForConfig(&rest.Config{Host: hs.URL})
	if err != nil {
		t.Fatal(err)
	}
	inf := New[*unstructured.Unstructured](dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}).Namespace("ns"),
		&Options[*unstructured.Unstructured]{Backoff: hostileBackoff, DisableStreamingList: true})
	errs := make(chan error, 16)
	inf.AddHandler(func(e Event[*unstructured.Unstructured]) {
		if e.Type == Error {
			select {
			case errs <- e.Err:
			default:
			}
		}
	})
	inf.Start()
	t.Cleanup(inf.Stop)
	select {
	case err := <-errs:
		if !errors.Is(err, ErrUnexpectedObject) || !strings.Contains(err.Error(), "unexpected object from the server: reading the list: jsontext: invalid character") {
			t.Fatalf("the ERROR event: %v; want ErrUnexpectedObject, reading the list", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("no ERROR event for a list that is not JSON")
	}
	from := time.Now()
	time.Sleep(time.Second)
	if n, paced := srv.requests(from), int(time.Second/hostileBackoff.Initial); n > paced {
		t.Errorf("%d requests in a second after the error: a hot loop (at most %d)", n, paced)
	}
}

// Small equal objects inside unstructured objects are shared between them,
// but not when a Transform runs: it may modify its object in place, and
// must not reach into another's.
func TestJSONSharingAndTransform(t *testing.T) {
	plainOnly(t)
	obj := func(name, rv string) string {
		return `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"` + name + `","namespace":"ns","resourceVersion":"` + rv + `"},"spec":{"size":"s","ports":[1,2]}}`
	}
	srv := &hostileServer{serve: func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		if r.URL.Query().Get("sendInitialEvents") == "true" {
			w.Write([]byte(jsonEvent("ADDED", obj("a", "7")) + jsonEvent("ADDED", obj("b", "8")) +
				jsonEvent("BOOKMARK", `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"10","annotations":{"k8s.io/initial-events-end":"true"}}}`)))
		}
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	dyn, err := dynamic.NewForConfig(&rest.Config{Host: hs.URL})
	if err != nil {
		t.Fatal(err)
	}
	res := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}).Namespace("ns")
	specOf := func(inf *Informer[*unstructured.Unstructured], name string) map[string]any {
		o, ok := inf.Cache().GetByKey("ns/" + name)
		if !ok {
			t.Fatalf("%s not cached", name)
		}
		return o.Object["spec"].(map[string]any)
	}
	for _, transform := range []bool{false, true} {
		opts := &Options[*unstructured.Unstructured]{}
		if transform {
			opts.Transform = func(u *unstructured.Unstructured) (*unstructured.Unstructured, error) {
				u.Object["spec"].(map[string]any)["owner"] = u.GetName() // in place
				return u, nil
			}
		}
		inf := New[*unstructured.Unstructured](res, opts)
		inf.Start()
		if err := inf.WaitForSync(t.Context()); err != nil {
			t.Fatal(err)
		}
		a, b := specOf(inf, "a"), specOf(inf, "b")
		same := reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
		switch {
		case !transform && !same:
			t.Error("without a Transform, equal small objects are not shared")
		case transform && (same || a["owner"] != "a" || b["owner"] != "b"):
			t.Errorf("with a Transform: shared %v, owners %v and %v", same, a["owner"], b["owner"])
		}
		inf.Stop()
	}
}
