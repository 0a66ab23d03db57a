package main

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kinformer/kinformer"
)

// The server of kinformer serve: the resources it serves, each with what
// it keeps of its events (counts, rates, the recent ones), and the
// readiness it reports. Its HTTP handlers are in serve_http.go, its event
// streams in serve_events.go.

// served is one resource being served: its informer and what the server
// keeps about its events.
type served struct {
	name        string // resolved: configmaps, deployments.apps
	res         resource
	scope       string // the namespace watched, "" for all (or cluster-scoped, or chosen by --namespace-selector)
	src         watchSource
	shardStatus func() kinformer.ShardStatus // src's; replaced in tests
	hub         *hub
	rate        rateRing
	counts      []atomic.Int64 // events by type, in the order of eventTypes
	restored    atomic.Int64   // Added events of objects restored from the state file
	sseDropped  atomic.Int64
	kube        *kubeRing // --kube-api's history of its events; nil without
	// protoLossy: an object of it had fields serve's Go types lack: it is
	// answered in JSON to --kube-api clients that take JSON.
	protoLossy   atomic.Bool
	protoChecked protoChecked // its objects found to lose nothing in protobuf
}

// eventTypes are the event types, in the library's order.
var eventTypes = kinformer.EventTypes()

// server holds the served resources and answers HTTP requests.
type server struct {
	resources []*served
	byName    map[string]*served // by argument and by resolved name
	sseBuffer int
	recent    *eventRing    // the feed: every resource's last events
	closing   chan struct{} // closed on shutdown: ends event streams
	closeOnce sync.Once
	now       func() time.Time
	notReady  func() []string // readiness: why not, one line a resource; replaced in tests
	shard     *shardInfo      // the shard group; nil when not sharded
	token     *accessToken    // --token-file; nil: none
	// clientCerts: a client certificate verified by --client-ca-file's CAs
	// may read, as the token may.
	clientCerts     bool
	clientCertNames []string // --client-cert-names: the Common Names let in; nil: any
	registry        *prometheus.Registry
	metrics         *kinformer.Metrics // the informers', on registry

	// Set before serving (setHostCheck; tests change the others).
	hostAllowed    func(host string) bool // nil: any Host
	writeTimeout   time.Duration          // for each write of a streamed answer
	streamLifetime time.Duration          // how long an event stream is served before it asks its client to reconnect
	objectRequests limiter                // /objects in flight
	yamlRenders    limiter                // ?format=yaml answers being made
	sseClients     limiter                // /events clients
	feedClients    limiter                // /events/feed clients: the page's, apart from /events'
	kubeWatches    limiter                // --kube-api watches

	// kubeHistory is --kube-api's history of each resource, in bytes (0:
	// --kube-api is off). Set before adding resources.
	kubeHistory int
}

func newServer(sseBuffer, recent int) (*server, error) {
	s := &server{
		byName: map[string]*served{}, sseBuffer: sseBuffer, recent: newEventRing(recent),
		closing: make(chan struct{}), now: time.Now, registry: prometheus.NewRegistry(),
		writeTimeout: defaultWriteTimeout, streamLifetime: defaultStreamLifetime,
	}
	s.objectRequests.max = defaultObjectRequests
	s.yamlRenders.max = maxYAMLRenders
	s.sseClients.max = defaultSSEClients
	s.feedClients.max = defaultSSEClients
	s.kubeWatches.max = defaultSSEClients
	s.notReady = s.health
	s.registry.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		(*metricsCollector)(s),
	)
	var err error
	if s.metrics, err = kinformer.NewMetrics(s.registry); err != nil {
		return nil, err
	}
	return s, nil
}

// add serves inf under the names arg and res.String(). Call it before
// running inf, so that the server's handler sees every event.
func (s *server) add(arg string, res resource, scope string, inf *kinformer.Informer[*unstructured.Unstructured]) *served {
	return s.addSource(arg, res, scope, informerSource{inf})
}

// addSource is add for any source: an informer, or a view.
func (s *server) addSource(arg string, res resource, scope string, src watchSource) *served {
	r := &served{name: res.String(), res: res, scope: scope, src: src, shardStatus: src.shardStatus, counts: make([]atomic.Int64, len(eventTypes))}
	r.hub = newHub(s.sseBuffer, func() { r.sseDropped.Add(1) })
	if s.kubeHistory > 0 {
		r.kube = newKubeRing(s.kubeHistory)
	}
	src.addHandler(func(ev kinformer.Event[*unstructured.Unstructured]) {
		if i := slices.Index(eventTypes, ev.Type); i >= 0 {
			r.counts[i].Add(1)
		}
		if isRestored(ev) {
			r.restored.Add(1)
		}
		if ev.Type != kinformer.Bookmark {
			now := s.now()
			r.rate.add(now)
			s.recent.add(newFeedEvent(r.name, now, ev))
		}
		r.hub.publish(ev)
		if r.kube != nil {
			r.kube.record(ev)
		}
	})
	s.resources = append(s.resources, r)
	s.byName[arg] = r
	s.byName[r.name] = r
	if _, taken := s.byName[res.gvr.Resource]; !taken {
		s.byName[res.gvr.Resource] = r // deployments for deployments.apps
	}
	return r
}

func (s *server) names() string {
	out := ""
	for i, r := range s.resources {
		if i > 0 {
			out += ", "
		}
		out += r.name
		if r.scope != "" {
			out += " in namespace " + r.scope
		}
	}
	return out
}

// health says why the server is not ready, one line for each resource
// whose informer fails persistently (403, 404, …: its cache, if synced, is
// frozen) or has not synced yet; nil when ready.
func (s *server) health() []string {
	var out []string
	if s.shard != nil {
		if msg := s.shard.problem(); msg != "" {
			out = append(out, msg)
		}
	}
	for _, r := range s.resources {
		if msg := r.problem(s.now()); msg != "" {
			out = append(out, r.name+": "+msg)
		}
	}
	return out
}

// notes are what /readyz adds under "ok": a line for each resource that is
// ready but reconnecting (lagging).
func (s *server) notes() []string {
	var out []string
	if s.shard != nil {
		out = append(out, s.shard.notes()...)
	}
	for _, r := range s.resources {
		if msg := r.lag(s.now()); msg != "" {
			out = append(out, r.name+": "+msg)
		}
	}
	return out
}

// lag says, of a ready r, that it is reconnecting and so may be behind
// the server; "" if it is not.
func (r *served) lag(now time.Time) string {
	if rec, since := r.src.reconnecting(); rec {
		return fmt.Sprintf("reconnecting (since %v): served as it was, may be behind the server", now.Sub(since).Round(time.Second))
	}
	return ""
}

// problem says why r is not ready, "" if it is.
func (r *served) problem(now time.Time) string {
	if err, since := r.src.lastError(); err != nil {
		return fmt.Sprintf("%v (since %v)", err, now.Sub(since).Round(time.Second))
	}
	if !r.src.hasSynced() {
		if r.restored.Load() > 0 {
			return "not synced: restored, catching up"
		}
		if st := r.shardStatus(); st.Sharded && st.Slots == 0 {
			return "not synced: waiting for a share of the shard group"
		}
		return "not synced"
	}
	return ""
}

func (s *server) close() { s.closeOnce.Do(func() { close(s.closing) }) }

// rateRing counts events in one-second buckets over the last minute.
type rateRing struct {
	mu      sync.Mutex
	sec     int64 // the unix second of the newest bucket
	buckets [64]int64
}

const rateSeconds = 60

func (r *rateRing) advance(sec int64) {
	if sec <= r.sec {
		return
	}
	if sec-r.sec >= int64(len(r.buckets)) {
		r.buckets = [len(r.buckets)]int64{}
	} else {
		for t := r.sec + 1; t <= sec; t++ {
			r.buckets[t%int64(len(r.buckets))] = 0
		}
	}
	r.sec = sec
}

func (r *rateRing) add(now time.Time) {
	sec := now.Unix()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.advance(sec)
	if sec > r.sec-int64(len(r.buckets)) {
		r.buckets[sec%int64(len(r.buckets))]++
	}
}

// last returns the event counts of the rateSeconds complete seconds before
// now, oldest first.
func (r *rateRing) last(now time.Time) []int64 {
	sec := now.Unix()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.advance(sec)
	out := make([]int64, 0, rateSeconds)
	for t := sec - rateSeconds; t < sec; t++ {
		out = append(out, r.buckets[t%int64(len(r.buckets))])
	}
	return out
}

// errServeStopped is what an event stream ends with on shutdown.
var errServeStopped = errors.New("server shutting down")
