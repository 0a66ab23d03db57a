package kinformer

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// These tests feed the direct decoder what a real server never sends:
// corrupt frames, foreign kinds, broken objects. That it decodes what a real
// server does send, equal to client-go's decoding, is shown against
// kube-apiserver in integration/direct_test.go.

func managedCM(name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "ns", ResourceVersion: "7", UID: types.UID("u-" + name),
			Labels:      map[string]string{"app": "x"},
			Annotations: map[string]string{"a": strings.Repeat("v", 300)},
			ManagedFields: []metav1.ManagedFieldsEntry{
				{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply, APIVersion: "v1",
					FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:data":{"f:k":{}}}`)}},
				{Manager: "other", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1"},
			},
			Finalizers: []string{"f"},
		},
		Data:       map[string]string{"k": strings.Repeat("d", 200), "k2": "v2"},
		BinaryData: map[string][]byte{"b": {0, 1, 2}},
	}
}

func strip(f *frameDecoder[*corev1.ConfigMap], b []byte) []byte {
	out, _, _ := f.rewriteMeta(b)
	return out
}

func TestWithoutManagedFields(t *testing.T) {
	meta, managed, labels, annotations := metaLayout(reflect.TypeFor[corev1.ConfigMap]())
	if meta != 1 || managed != 17 || labels != 11 || annotations != 12 {
		t.Fatalf("layout of ConfigMap: metadata %d, managedFields %d, labels %d, annotations %d; want 1, 17, 11, 12", meta, managed, labels, annotations)
	}
	if m, _, _, _ := metaLayout(reflect.TypeFor[struct{ X int }]()); m != 0 {
		t.Fatalf("a type without ObjectMeta has layout %d", m)
	}
	src := &directSource[*corev1.ConfigMap]{metaField: meta, managedField: managed, labelsField: labels, annotationsField: annotations, strip: true}
	f := &frameDecoder[*corev1.ConfigMap]{src: src}

	in := managedCM("a")
	raw, err := in.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	stripped := strip(f, raw)
	if len(stripped) >= len(raw) {
		t.Fatalf("stripped %d bytes from %d: nothing cut", len(stripped), len(raw))
	}
	var out corev1.ConfigMap
	if err := out.Unmarshal(stripped); err != nil {
		t.Fatalf("stripped bytes do not decode: %v", err)
	}
	want := in.DeepCopy()
	want.ManagedFields = nil
	if !reflect.DeepEqual(&out, want) {
		t.Fatalf("stripped object differs:\n got %+v\nwant %+v", &out, want)
	}

	// No managedFields: the bytes are used as they are.
	want.ResourceVersion = "8"
	plain, _ := want.Marshal()
	if got := strip(f, plain); &got[0] != &plain[0] {
		t.Fatal("an object without managedFields was copied")
	}
	// Garbage is passed on for Unmarshal to reject.
	junk := []byte{0x0a, 0xff, 0xff, 0xff}
	if got := strip(f, junk); !bytes.Equal(got, junk) {
		t.Fatal("garbage was rewritten")
	}
}

// wireEvent encodes ev as kube-apiserver does on a protobuf watch: the
// object as "k8s\0" + runtime.Unknown, inside a metav1.WatchEvent, behind
// a 4-byte length.
func wireEvent(t *testing.T, typ string, obj runtime.Object) []byte {
	t.Helper()
	var buf bytes.Buffer
	ser := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)
	if err := scheme.Codecs.EncoderForVersion(ser, corev1.SchemeGroupVersion).Encode(obj, &buf); err != nil {
		t.Fatal(err)
	}
	return frame(t, typ, buf.Bytes())
}

func frame(t *testing.T, typ string, raw []byte) []byte {
	t.Helper()
	ev := metav1.WatchEvent{Type: typ, Object: runtime.RawExtension{Raw: raw}}
	b, err := ev.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...)
}

// unknownFrame wraps arbitrary object bytes of the given kind.
func unknownFrame(t *testing.T, typ, kind string, objBytes []byte) []byte {
	t.Helper()
	u := runtime.Unknown{TypeMeta: runtime.TypeMeta{APIVersion: "v1", Kind: kind}, Raw: objBytes}
	b, err := u.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return frame(t, typ, append([]byte("k8s\x00"), b...))
}

// protoServer serves discovery and scripted protobuf watches.
type protoServer struct {
	t         *testing.T
	resources []metav1.APIResource
	mu        sync.Mutex
	scripts   [][]byte // one per watch, in order; the last repeats
	requests  []*http.Request
}

func (s *protoServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/api/v1":
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(metav1.APIResourceList{GroupVersion: "v1", APIResources: s.resources})
	case "/api/v1/namespaces/ns/configmaps":
		s.mu.Lock()
		s.requests = append(s.requests, r)
		script := s.scripts[0]
		if len(s.scripts) > 1 {
			s.scripts = s.scripts[1:]
		}
		s.mu.Unlock()
		w.Header().Set("Content-Type", protobufWatch)
		w.WriteHeader(http.StatusOK)
		w.Write(script)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	default:
		http.NotFound(w, r)
	}
}

func (s *protoServer) seen() []*http.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*http.Request(nil), s.requests...)
}

func watchableConfigMaps() []metav1.APIResource {
	return []metav1.APIResource{
		{Name: "configmaps", Kind: "ConfigMap", Namespaced: true, Verbs: []string{"list", "watch"}},
		{Name: "configmaps/status", Kind: "ConfigMap", Namespaced: true, Verbs: []string{"get"}},
	}
}

func endMarker(rv string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{ResourceVersion: rv,
		Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
}

func clientFor(t *testing.T, h http.Handler) kubernetes.Interface {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func TestDirectDecodingReportsGarbageAndGoesOn(t *testing.T) {
	a := managedCM("a")
	a2 := managedCM("a")
	a2.ResourceVersion, a2.Data["k2"] = "11", "changed"
	a3 := a2.DeepCopy()
	a3.ResourceVersion = "12"

	var first bytes.Buffer
	first.Write(wireEvent(t, "ADDED", a))
	first.Write(unknownFrame(t, "ADDED", "ConfigMap", []byte{0x0a, 0xff, 0xff})) // truncated metadata
	first.Write(unknownFrame(t, "ADDED", "Secret", []byte{}))                    // a foreign kind
	first.Write(frame(t, "ADDED", []byte("{\"kind\":\"ConfigMap\"}")))           // JSON in a protobuf stream
	first.Write(wireEvent(t, "BOOKMARK", endMarker("10")))
	var second bytes.Buffer
	second.Write(wireEvent(t, "MODIFIED", a2))
	second.Write(binary.BigEndian.AppendUint32(nil, maxFrame+1)) // a frame no server sends
	srv := &protoServer{t: t, resources: watchableConfigMaps(),
		scripts: [][]byte{first.Bytes(), second.Bytes(), wireEvent(t, "MODIFIED", a3)}}

	cs := clientFor(t, srv)
	inf, rec := startInformer(t, cs.CoreV1().ConfigMaps("ns"), nil)
	eventually(t, "the event after the broken frame", func() bool {
		o, ok := inf.Cache().GetByKey("ns/a")
		return ok && o.ResourceVersion == "12"
	})
	got, _ := inf.Cache().GetByKey("ns/a")
	if got.ManagedFields != nil || got.Data["k2"] != "changed" || !bytes.Equal(got.BinaryData["b"], []byte{0, 1, 2}) {
		t.Fatalf("cached object: %+v", got)
	}
	if n := inf.Cache().Len(); n != 1 {
		t.Fatalf("cache holds %d objects, want 1", n)
	}

	var errs []string
	for _, e := range rec.all() {
		if e.Type == Error {
			errs = append(errs, e.Err.Error())
			if !strings.Contains(e.Err.Error(), "unreadable watch stream") && !errors.Is(e.Err, ErrUnexpectedObject) {
				t.Errorf("garbage reported without ErrUnexpectedObject: %v", e.Err)
			}
		}
	}
	for _, want := range []string{"ADDED event: ConfigMap:", `kind "Secret", want "ConfigMap"`, "not a protobuf-encoded", "unreadable watch stream"} {
		found := false
		for _, e := range errs {
			found = found || strings.Contains(e, want)
		}
		if !found {
			t.Errorf("no error event says %q; got %q", want, errs)
		}
	}

	reqs := srv.seen()
	if len(reqs) < 3 {
		t.Fatalf("%d watch requests, want a streaming list, a watch, and another after the broken stream", len(reqs))
	}
	q := reqs[0].URL.Query()
	if q.Get("sendInitialEvents") != "true" || q.Get("watch") != "true" || reqs[0].Header.Get("Accept") != protobufWatch {
		t.Errorf("first watch: %s, Accept %q", reqs[0].URL.RawQuery, reqs[0].Header.Get("Accept"))
	}
	for i, want := range []string{"10", "11"} {
		if rv := reqs[i+1].URL.Query().Get("resourceVersion"); rv != want || reqs[i+1].URL.Query().Has("sendInitialEvents") {
			t.Errorf("watch %d: %s, want a plain watch from %s", i+2, reqs[i+1].URL.RawQuery, want)
		}
	}
}

func TestDirectDecodingFallsBackWithoutDiscovery(t *testing.T) {
	a := managedCM("a")
	var script bytes.Buffer
	script.Write(wireEvent(t, "ADDED", a))
	script.Write(wireEvent(t, "BOOKMARK", endMarker("10")))
	// Discovery lists no watchable configmaps: kinformer cannot name the
	// resource itself and uses the client's Watch.
	srv := &protoServer{t: t, resources: watchableConfigMaps()[1:], scripts: [][]byte{script.Bytes()}}
	cs := clientFor(t, srv)
	inf, _ := startInformer(t, cs.CoreV1().ConfigMaps("ns"), nil)
	if _, ok := inf.Cache().GetByKey("ns/a"); !ok {
		t.Fatal("not synced through the client's Watch")
	}
	if inf.direct != nil {
		t.Fatal("direct decoding still on after discovery found no resource")
	}
	if accept := srv.seen()[0].Header.Get("Accept"); accept == protobufWatch {
		t.Fatalf("the watch was opened by kinformer (Accept %q), not by the client", accept)
	}
}

func TestDirectDecodingOnlyForTypedClients(t *testing.T) {
	if d := newDirectSource[*corev1.ConfigMap](&fakeServer{}, false, true); d != nil {
		t.Fatal("direct decoding for a client without a REST client")
	}
	cs := clientFor(t, http.NotFoundHandler())
	if d := newDirectSource[*corev1.ConfigMap](cs.CoreV1().ConfigMaps("ns"), true, false); d == nil || d.strip || d.share {
		t.Fatalf("typed client: %+v", d)
	}
	if d := newDirectSource[*corev1.ConfigMap](cs.CoreV1().ConfigMaps("ns"), false, true); d == nil || !d.strip || !d.share || d.kind != "ConfigMap" {
		t.Fatalf("typed client: %+v", d)
	}
}

func TestInternSharesStrings(t *testing.T) {
	a, b := managedCM("a"), managedCM("b")
	// Give b copies of its own, as a decoder would.
	b.Namespace = strings.Clone(a.Namespace)
	b.Labels = map[string]string{strings.Clone("app"): strings.Clone("x")}
	b.Data = map[string]string{strings.Clone("k"): "other"}
	var sh sharer
	sh.internObject(a, false)
	sh.internObject(b, false)
	same := func(what, x, y string) {
		t.Helper()
		if x != y || unsafe.StringData(x) != unsafe.StringData(y) {
			t.Errorf("%s: %q and %q not shared", what, x, y)
		}
	}
	same("namespace", a.Namespace, b.Namespace)
	same("label value", a.Labels["app"], b.Labels["app"])
	key := func(m map[string]string) string {
		for k := range m {
			if k == "app" || k == "k" {
				return k
			}
		}
		return ""
	}
	same("label key", key(a.Labels), key(b.Labels))
	same("data key", key(a.Data), key(b.Data))
	if a.Data["k"] == b.Data["k"] {
		t.Fatal("test data broken")
	}
	long := a.Annotations["a"]
	if sh.intern(long) != long || unsafe.StringData(sh.intern(strings.Clone(long))) == unsafe.StringData(long) {
		t.Error("a long string was interned")
	}
}

// Equal labels and annotations are found by their wire bytes and shared
// without being decoded again; different ones are not; values are intact.
func TestDecoderSharesMapsByWireBytes(t *testing.T) {
	meta, managed, labels, annotations := metaLayout(reflect.TypeFor[corev1.ConfigMap]())
	src := &directSource[*corev1.ConfigMap]{kind: "ConfigMap", newObj: func() *corev1.ConfigMap { return &corev1.ConfigMap{} },
		metaField: meta, managedField: managed, labelsField: labels, annotationsField: annotations, strip: true, share: true}
	f := &frameDecoder[*corev1.ConfigMap]{src: src}
	decode := func(cm *corev1.ConfigMap) *corev1.ConfigMap {
		t.Helper()
		ev := f.decode(wireEvent(t, "ADDED", cm)[4:])
		got, ok := ev.Object.(*corev1.ConfigMap)
		if !ok {
			t.Fatalf("decoded %#v", ev.Object)
		}
		want := cm.DeepCopy()
		want.ManagedFields = nil
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("decoded\n %+v\nwant %+v", got, want)
		}
		return got
	}
	a, b := decode(managedCM("a")), decode(managedCM("b"))
	other := managedCM("c")
	other.Labels = map[string]string{"app": "y"}
	c := decode(other)
	if !sameMap(a.Labels, b.Labels) || !sameMap(a.Annotations, b.Annotations) {
		t.Error("equal maps not shared")
	}
	if sameMap(a.Labels, c.Labels) || !sameMap(a.Annotations, c.Annotations) {
		t.Error("labels: different ones shared, or equal annotations not")
	}
	noLabels := managedCM("d")
	noLabels.Labels = nil
	if d := decode(noLabels); d.Labels != nil {
		t.Errorf("labels appeared: %v", d.Labels)
	}
}

// A direct stream is read on the loop's goroutine; its deadlines (idle,
// resync) close the body under the blocked read, and Stop ends it.
func TestDirectStreamDeadlines(t *testing.T) {
	list := func() []byte {
		var b bytes.Buffer
		b.Write(wireEvent(t, "ADDED", managedCM("a")))
		b.Write(wireEvent(t, "BOOKMARK", endMarker("10")))
		return b.Bytes()
	}
	countStreams := func(reqs []*http.Request) (streams, watches int) {
		for _, r := range reqs {
			if r.URL.Query().Get("sendInitialEvents") == "true" {
				streams++
			} else {
				watches++
			}
		}
		return streams, watches
	}

	t.Run("idle", func(t *testing.T) {
		// After the list, watches that never send anything.
		srv := &protoServer{t: t, resources: watchableConfigMaps(), scripts: [][]byte{list(), {}}}
		inf, rec := startInformer(t, clientFor(t, srv).CoreV1().ConfigMaps("ns"),
			&Options[*corev1.ConfigMap]{WatchTimeout: time.Second, IdleMargin: 50 * time.Millisecond})
		eventually(t, "an idle watch dropped and reopened", func() bool {
			_, w := countStreams(srv.seen())
			return w >= 2
		})
		idle := false
		for _, e := range rec.all() {
			idle = idle || (e.Type == Error && errors.Is(e.Err, ErrIdle))
		}
		if !idle {
			t.Fatal("no ErrIdle event")
		}
		if _, w := countStreams(srv.seen()); w > 3 {
			t.Fatalf("%d watches: reopened faster than the idle deadline", w)
		}
		if inf.ResourceVersion() != "10" {
			t.Fatalf("resourceVersion %s", inf.ResourceVersion())
		}
	})

	t.Run("resync", func(t *testing.T) {
		srv := &protoServer{t: t, resources: watchableConfigMaps(), scripts: [][]byte{list()}}
		startInformer(t, clientFor(t, srv).CoreV1().ConfigMaps("ns"), &Options[*corev1.ConfigMap]{ResyncPeriod: 200 * time.Millisecond})
		// Every script is the list; the plain watch gets it too and takes
		// the ADDED as a change. What counts here is that a blocked read is
		// cut by the resync and a new streaming list starts.
		eventually(t, "two resyncs", func() bool { s, _ := countStreams(srv.seen()); return s >= 3 })
	})

	t.Run("stop", func(t *testing.T) {
		srv := &protoServer{t: t, resources: watchableConfigMaps(), scripts: [][]byte{list(), {}}}
		inf, _ := startInformer(t, clientFor(t, srv).CoreV1().ConfigMaps("ns"), nil)
		eventually(t, "the plain watch", func() bool { _, w := countStreams(srv.seen()); return w == 1 })
		done := make(chan struct{})
		go func() { inf.Stop(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("Stop blocked on a direct stream's read")
		}
	})
}
