package kinformer

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kinformer/kinformer/internal/protowatch"
)

// Hostile and broken servers: what a real API server never sends, served
// by a fake one to informers built as users build them (a clientset on the
// server's URL, so watches are decoded directly; some also through the
// client's own Watch). Each case must end in an ERROR event that names the
// problem, with the informer carrying on: retrying at the backoff's pace,
// never in a hot loop, and holding no more memory than the bytes that came.

// hostileServer serves discovery, and answers every request for the
// configmaps of "ns" with serve; n counts those requests from 1.
type hostileServer struct {
	serve func(w http.ResponseWriter, r *http.Request, n int)
	mu    sync.Mutex
	times []time.Time // of the configmaps requests
}

func (s *hostileServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/api/v1":
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(metav1.APIResourceList{GroupVersion: "v1", APIResources: watchableConfigMaps()})
	case "/api/v1/namespaces/ns/configmaps":
		s.mu.Lock()
		s.times = append(s.times, time.Now())
		n := len(s.times)
		s.mu.Unlock()
		s.serve(w, r, n)
	default:
		http.NotFound(w, r)
	}
}

// requests counts the configmaps requests since t.
func (s *hostileServer) requests(since time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, at := range s.times {
		if !at.Before(since) {
			n++
		}
	}
	return n
}

// sendStream answers with a protobuf watch stream of parts, flushed.
func sendStream(w http.ResponseWriter, parts ...[]byte) {
	w.Header().Set("Content-Type", protowatch.MediaType)
	w.WriteHeader(http.StatusOK)
	for _, p := range parts {
		w.Write(p)
	}
	w.(http.Flusher).Flush()
}

// listThen serves a good watch-list (a at resourceVersion 7, the end at
// 10) to the first request, and then to every watch.
func listThen(t *testing.T, then func(w http.ResponseWriter, r *http.Request)) *hostileServer {
	list := bytes.Join([][]byte{wireEvent(t, "ADDED", managedCM("a")), wireEvent(t, "BOOKMARK", endMarker("10"))}, nil)
	return &hostileServer{serve: func(w http.ResponseWriter, r *http.Request, n int) {
		if r.URL.Query().Get("sendInitialEvents") == "true" {
			sendStream(w, list)
			<-r.Context().Done()
			return
		}
		then(w, r)
	}}
}

// modifiedAt is ConfigMap a at resourceVersion rv, as a MODIFIED frame.
func modifiedAt(t *testing.T, rv string) []byte {
	a := managedCM("a")
	a.ResourceVersion = rv
	return wireEvent(t, "MODIFIED", a)
}

// hostileBackoff: quick, but slow enough that a hot loop stands out.
var hostileBackoff = Backoff{Initial: 20 * time.Millisecond, Max: 100 * time.Millisecond, Factor: 2, Jitter: 0.1, ResetAfter: time.Minute}

// heapLimit is how much more heap than at the start the informers under
// test may hold: far less than the lengths the hostile frames claim.
const heapLimit = 32 << 20

func heapInUse() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

type hostileCase struct {
	name   string
	srv    func(t *testing.T) *hostileServer
	opts   Options[*corev1.ConfigMap]
	says   string        // what the ERROR event says
	paced  int           // at most this many requests in the window after the error; 0: window/Initial
	goesOn bool          // the stream goes on past the garbage, to resourceVersion 12
	window time.Duration // how long to watch the requests; 0: a second
	skip   string
}

func TestHostileServers(t *testing.T) {
	base := heapInUse()
	cases := []hostileCase{
		{
			name: "a frame of 2 GiB",
			srv: func(t *testing.T) *hostileServer {
				return listThen(t, func(w http.ResponseWriter, r *http.Request) {
					sendStream(w, modifiedAt(t, "11"), binary.BigEndian.AppendUint32(nil, 2<<30), []byte("and a little more"))
					<-r.Context().Done()
				})
			},
			says: "unreadable watch stream: frame too large: a frame of 2147483648 bytes, more than the 67108864 allowed",
		},
		{
			name: "a frame cut short",
			srv: func(t *testing.T) *hostileServer {
				return listThen(t, func(w http.ResponseWriter, r *http.Request) {
					m := modifiedAt(t, "11")
					sendStream(w, m, m[:len(m)-5]) // and the body ends
				})
			},
			says: "unreadable watch stream: truncated frame: the stream ended",
		},
		{
			name: "a length cut short",
			srv: func(t *testing.T) *hostileServer {
				return listThen(t, func(w http.ResponseWriter, r *http.Request) {
					sendStream(w, modifiedAt(t, "11"), []byte{0, 0})
				})
			},
			says: "truncated frame: the stream ended 2 bytes into a frame's 4-byte length",
		},
		{
			name: "a truncated varint",
			srv: func(t *testing.T) *hostileServer {
				return listThen(t, func(w http.ResponseWriter, r *http.Request) {
					sendStream(w, modifiedAt(t, "11"), []byte{0, 0, 0, 2, 0x12, 0xff}, modifiedAt(t, "12"))
					<-r.Context().Done()
				})
			},
			says:   "watch event: field 2 at byte 0 of 2: truncated: a varint or length runs past the end",
			paced:  1, // the stream goes on: no new watch
			goesOn: true,
		},
		{
			name: "an unknown event type",
			srv: func(t *testing.T) *hostileServer {
				return listThen(t, func(w http.ResponseWriter, r *http.Request) {
					sendStream(w, wireEvent(t, "EXPLODED", managedCM("a")), modifiedAt(t, "12"))
					<-r.Context().Done()
				})
			},
			says:   `event type "EXPLODED"`,
			paced:  1,
			goesOn: true,
		},
		{
			name: "an object without metadata",
			srv: func(t *testing.T) *hostileServer {
				return listThen(t, func(w http.ResponseWriter, r *http.Request) {
					sendStream(w, unknownFrame(t, "ADDED", "ConfigMap", nil), modifiedAt(t, "12"))
					<-r.Context().Done()
				})
			},
			says:   "an object without a name",
			paced:  1,
			goesOn: true,
		},
		{
			name: "an ERROR Status mid-stream",
			srv: func(t *testing.T) *hostileServer {
				st := &metav1.Status{Status: metav1.StatusFailure, Code: 500, Reason: metav1.StatusReasonInternalError, Message: "etcdserver: leader changed"}
				raw, err := st.Marshal()
				if err != nil {
					t.Fatal(err)
				}
				return listThen(t, func(w http.ResponseWriter, r *http.Request) {
					sendStream(w, modifiedAt(t, "11"), unknownFrame(t, "ERROR", "Status", raw))
					<-r.Context().Done()
				})
			},
			says: "etcdserver: leader changed",
		},
		{
			name: "a list that is not a list",
			srv: func(t *testing.T) *hostileServer {
				return &hostileServer{serve: func(w http.ResponseWriter, r *http.Request, n int) {
					w.Header().Set("Content-Type", "application/json")
					w.Write([]byte(`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","resourceVersion":"7"}}`))
				}}
			},
			opts: Options[*corev1.ConfigMap]{DisableStreamingList: true},
			says: "list:",
		},
		{
			name: "a list whose items are not a list",
			srv: func(t *testing.T) *hostileServer {
				return &hostileServer{serve: func(w http.ResponseWriter, r *http.Request, n int) {
					w.Header().Set("Content-Type", "application/json")
					w.Write([]byte(`{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":{"a":1}}`))
				}}
			},
			opts: Options[*corev1.ConfigMap]{DisableStreamingList: true},
			says: "list:",
		},
		{
			name: "accepts and closes at once",
			srv:  func(t *testing.T) *hostileServer { return &hostileServer{serve: hangUp} },
			says: "EOF",
		},
		{
			// client-go's Watch takes the EOF for an empty watch, and its
			// List retries a GET that met an EOF ten times, a second
			// apart, before the error comes back (after 10 s, too long
			// to wait for here): only the pace is checked.
			name:   "accepts and closes at once, through the client",
			srv:    func(t *testing.T) *hostileServer { return &hostileServer{serve: hangUp} },
			opts:   Options[*corev1.ConfigMap]{DisableDirectDecoding: true},
			window: 2 * time.Second,
			paced:  4,
		},
		{
			name: "a byte a second",
			srv: func(t *testing.T) *hostileServer {
				return listThen(t, func(w http.ResponseWriter, r *http.Request) {
					sendStream(w, binary.BigEndian.AppendUint32(nil, 64<<20))
					for tick := time.NewTicker(time.Second); ; {
						select {
						case <-r.Context().Done():
							tick.Stop()
							return
						case <-tick.C:
							w.Write([]byte{0x0a})
							w.(http.Flusher).Flush()
						}
					}
				})
			},
			says:   "watch idle for too long: nothing received for 1.2s",
			window: 1500 * time.Millisecond,
			paced:  3, // one watch per idle deadline (1.2 s), with slack
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if tc.skip != "" {
				t.Skip(tc.skip)
			}
			srv := tc.srv(t)
			opts := tc.opts
			opts.Backoff = hostileBackoff
			opts.WatchTimeout = time.Second
			opts.IdleMargin = 200 * time.Millisecond
			inf := New[*corev1.ConfigMap](clientFor(t, srv).CoreV1().ConfigMaps("ns"), &opts)
			rec := &recorder{}
			inf.AddHandler(rec.handle)
			inf.Start()
			t.Cleanup(inf.Stop)

			var said string
			if tc.says != "" {
				eventually(t, "an ERROR event saying "+tc.says, func() bool {
					for _, e := range rec.all() {
						if e.Type == Error && strings.Contains(e.Err.Error(), tc.says) {
							said = e.Err.Error()
							return true
						}
					}
					return false
				})
				t.Logf("ERROR event: %s", said)
			}

			window := tc.window
			if window == 0 {
				window = time.Second
			}
			paced := tc.paced
			if paced == 0 {
				paced = int(window / hostileBackoff.Initial)
			}
			from := time.Now()
			time.Sleep(window)
			n := srv.requests(from)
			t.Logf("%d requests in %s after the error (at most %d)", n, window, paced)
			if n > paced {
				t.Errorf("%d requests in %s after the error: a hot loop (at most %d at the backoff's pace)", n, window, paced)
			}
			if h := heapInUse(); h > base+heapLimit {
				t.Errorf("heap %d MiB, was %d MiB before the hostile servers", h>>20, base>>20)
			}
			if tc.goesOn {
				if rv := inf.ResourceVersion(); rv != "12" {
					t.Errorf("resourceVersion %s, want 12 from the event after the garbage", rv)
				}
			}
			inf.Stop()
		})
	}
}

// hangUp takes the connection and closes it without a word.
func hangUp(w http.ResponseWriter, r *http.Request, n int) {
	c, _, err := w.(http.Hijacker).Hijack()
	if err == nil {
		c.Close()
	}
}
