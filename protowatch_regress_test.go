package kinformer

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"net/http/httptest"
)

func shareDecoder() *frameDecoder[*corev1.ConfigMap] {
	meta, managed, labels, annotations := metaLayout(reflect.TypeFor[corev1.ConfigMap]())
	src := &directSource[*corev1.ConfigMap]{kind: "ConfigMap", newObj: func() *corev1.ConfigMap { return &corev1.ConfigMap{} },
		metaField: meta, managedField: managed, labelsField: labels, annotationsField: annotations, strip: true, share: true}
	return &frameDecoder[*corev1.ConfigMap]{src: src}
}

// A metadata field that occurs twice is merged by Unmarshal (as client-go
// does), but rewriteMeta keys the decoded labels by the first occurrence
// only: the merged map is then handed to other objects.
func TestDecoderDuplicateMetadataIsNotShared(t *testing.T) {
	f := shareDecoder()
	first, _ := (&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", Labels: map[string]string{"app": "x"}}}).Marshal()
	extra, _ := (&metav1.ObjectMeta{Labels: map[string]string{"evil": "1"}}).Marshal()
	dup := protowire.AppendBytes(protowire.AppendTag(first, 1, protowire.BytesType), extra)

	var ref corev1.ConfigMap // what client-go decodes
	if err := ref.Unmarshal(dup); err != nil {
		t.Fatal(err)
	}
	got := f.decode(unknownFrame(t, "ADDED", "ConfigMap", dup)[4:]).Object.(*corev1.ConfigMap)
	if !reflect.DeepEqual(got.Labels, ref.Labels) {
		t.Fatalf("first object: %v, client-go %v", got.Labels, ref.Labels)
	}
	b := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "ns", Labels: map[string]string{"app": "x"}}}
	gotB := f.decode(wireEvent(t, "ADDED", b)[4:]).Object.(*corev1.ConfigMap)
	if !reflect.DeepEqual(gotB.Labels, b.Labels) {
		t.Fatalf("object b decoded with labels %v, sent %v", gotB.Labels, b.Labels)
	}
}

// Frame bytes must not be retained by decoded objects.
func TestDecodedObjectsDoNotAliasBuffers(t *testing.T) {
	f := shareDecoder()
	in := managedCM("a")
	in.Labels = map[string]string{"app": "x", "z": string(make([]byte, 2000))} // not shareable
	fr := wireEvent(t, "ADDED", in)[4:]
	got := f.decode(fr).Object.(*corev1.ConfigMap)
	want := got.DeepCopy()
	for i := range fr {
		fr[i] = 0xAA
	}
	for i := range f.scratch[:cap(f.scratch)] {
		f.scratch[:cap(f.scratch)][i] = 0xAA
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatal("decoded object changed with the frame")
	}
}

// A 503 from discovery (a server starting) does not turn direct decoding
// off for good: the next watch tries again.
func TestTransientDiscoveryFailureIsRetried(t *testing.T) {
	var script bytes.Buffer
	script.Write(wireEvent(t, "ADDED", managedCM("a")))
	script.Write(wireEvent(t, "BOOKMARK", endMarker("10")))
	srv := &protoServer{t: t, resources: watchableConfigMaps(), scripts: [][]byte{script.Bytes()}}
	var n atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/v1" && n.Add(1) == 1 {
			http.Error(w, "apiserver is starting", http.StatusServiceUnavailable)
			return
		}
		srv.ServeHTTP(w, r)
	})
	cs := clientFor(t, h)
	inf, _ := startInformer(t, cs.CoreV1().ConfigMaps("ns"), nil)
	if _, ok := inf.Cache().GetByKey("ns/a"); !ok {
		t.Fatal("not synced")
	}
	for _, r := range srv.seen() {
		if r.Header.Get("Accept") == protobufWatch {
			return
		}
	}
	t.Fatalf("after one 503 from discovery, no watch is ever decoded directly (%d discovery calls)", n.Load())
}

type countingLimiter struct{ waits atomic.Int32 }

func (c *countingLimiter) TryAccept() bool                { c.waits.Add(1); return true }
func (c *countingLimiter) Accept()                        { c.waits.Add(1) }
func (c *countingLimiter) Stop()                          {}
func (c *countingLimiter) QPS() float32                   { return 5 }
func (c *countingLimiter) Wait(ctx context.Context) error { c.waits.Add(1); return nil }

// client-go never rate-limits watches; neither does the direct path.
func TestDirectWatchIsNotRateLimited(t *testing.T) {
	srv := &protoServer{t: t, resources: watchableConfigMaps(), scripts: [][]byte{wireEvent(t, "ADDED", managedCM("a"))}}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	lim := &countingLimiter{}
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: hs.URL, RateLimiter: lim})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := cs.CoreV1().ConfigMaps("ns").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w.Stop()
	viaClient := lim.waits.Load()
	d := newDirectSource[*corev1.ConfigMap](cs.CoreV1().ConfigMaps("ns"), false, true)
	if err := d.resolve(ctx); err != nil {
		t.Fatal(err)
	}
	before := lim.waits.Load()
	dw, err := d.watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dw.close()
	t.Logf("client Watch: %d limiter calls; direct watch: %d", viaClient, lim.waits.Load()-before)
	if lim.waits.Load() != before {
		t.Fatalf("direct watch open went through the client rate limiter (client-go's Watch does not: %d calls)", viaClient)
	}
}

// A 200 answer that is not a protobuf stream (a proxy that ignores Accept)
// costs one error event; then watches go through the client, which decodes
// what it gets.
func TestNonProtobufAnswerFallsBackToClient(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/v1":
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(metav1.APIResourceList{GroupVersion: "v1", APIResources: watchableConfigMaps()})
		case "/api/v1/namespaces/ns/configmaps":
			w.Header().Set("Content-Type", "application/json")
			if r.URL.Query().Get("watch") != "true" {
				json.NewEncoder(w).Encode(corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: "10"}, Items: []corev1.ConfigMap{*managedCM("a")}})
				return
			}
			if r.URL.Query().Get("sendInitialEvents") == "true" {
				http.Error(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Invalid","code":422,"message":"sendInitialEvents forbidden"}`, 422)
				return
			}
			enc := json.NewEncoder(w)
			enc.Encode(metav1.WatchEvent{Type: string(watch.Bookmark), Object: runtimeRaw(`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"11"}}`)})
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		default:
			http.NotFound(w, r)
		}
	})
	cs := clientFor(t, h)
	inf := New[*corev1.ConfigMap](cs.CoreV1().ConfigMaps("ns"), &Options[*corev1.ConfigMap]{Backoff: fastBackoff})
	rec := &recorder{}
	inf.AddHandler(rec.handle)
	inf.Start()
	defer inf.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := inf.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the bookmark through the client's Watch", func() bool { return inf.ResourceVersion() == "11" })
	time.Sleep(200 * time.Millisecond)
	errs := 0
	for _, e := range rec.all() {
		if e.Type == Error {
			errs++
			if !strings.Contains(e.Err.Error(), "not a protobuf watch stream") {
				t.Errorf("error event: %v", e.Err)
			}
		}
	}
	if errs != 1 {
		t.Fatalf("%d error events, want the one for the first, unreadable stream", errs)
	}
}

func runtimeRaw(s string) runtime.RawExtension { return runtime.RawExtension{Raw: []byte(s)} }

// A meta field protowire rejects but gogo accepts (a 10-byte varint) makes
// rewriteMeta bail out with lkey holding only the labels seen so far.
func TestDecoderPartialLabelsAreNotShared(t *testing.T) {
	f := shareDecoder()
	var meta []byte
	meta = protowire.AppendBytes(protowire.AppendTag(meta, 3, protowire.BytesType), []byte("a")) // name
	entry := func(k, v string) []byte {
		var e []byte
		e = protowire.AppendBytes(protowire.AppendTag(e, 1, protowire.BytesType), []byte(k))
		return protowire.AppendBytes(protowire.AppendTag(e, 2, protowire.BytesType), []byte(v))
	}
	meta = protowire.AppendBytes(protowire.AppendTag(meta, 11, protowire.BytesType), entry("app", "x"))
	meta = protowire.AppendTag(meta, 7, protowire.VarintType) // generation: 10-byte varint, last byte 0x7f
	meta = append(meta, 0x81, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x7f)
	meta = protowire.AppendBytes(protowire.AppendTag(meta, 11, protowire.BytesType), entry("evil", "1"))
	obj := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), meta)
	var ref corev1.ConfigMap
	if err := ref.Unmarshal(obj); err != nil {
		t.Fatalf("gogo rejects it too: %v", err)
	}
	f.decode(unknownFrame(t, "ADDED", "ConfigMap", obj)[4:])
	b := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "b", Labels: map[string]string{"app": "x"}}}
	gotB := f.decode(wireEvent(t, "ADDED", b)[4:]).Object.(*corev1.ConfigMap)
	if !reflect.DeepEqual(gotB.Labels, b.Labels) {
		t.Fatalf("object b decoded with labels %v, sent %v", gotB.Labels, b.Labels)
	}
}
