package kinformer

import (
	"errors"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the Prometheus metrics of informers. Create one per
// Registerer with NewMetrics and give it to every informer through
// Options.Metrics (a Factory does this for its informers); Options.Name is
// each informer's resource label. Nothing is registered anywhere else.
//
// Names start with kinformer_, and every label is bounded: resource (the
// informer's Name), event type, verb, result and cause; never an object's
// name or namespace.
//
//	kinformer_events_total{resource,type}               events queued for handlers
//	kinformer_requests_total{resource,verb,result}      list, watchlist and watch requests
//	kinformer_relists_total{resource,cause}             re-lists: expired, too_large, another_history, resync, reconfigure, reshard, error
//	kinformer_backoff_waits_total{resource}             waits before a retry
//	kinformer_backoff_seconds_total{resource}           time spent in them
//	kinformer_objects{resource}                         objects cached
//	kinformer_synced{resource}                          1 once synced
//	kinformer_handler_queue_depth{resource}             events queued for handlers, all registrations
//	kinformer_handler_oldest_event_seconds{resource}    the oldest of them, its age
//	kinformer_last_event_age_seconds{resource}          since the last event from the server
//	kinformer_persistent_error{resource}                1 while lists or watches fail persistently (403, 404, …)
//	kinformer_state_commits_total{resource,result}      commits to the state file (Options.StateDir): ok, error
//	kinformer_state_commit_seconds_total{resource}      time spent encoding and committing them
//	kinformer_state_objects_written_total{resource}     objects written or deleted by them
//	kinformer_state_restored_objects_total{resource}    objects restored from the state file
//	kinformer_shard_slots{resource}                     slots of a sharded informer's share (Options.Sharding)
//	kinformer_shard_server_side{resource}               1 if the API server filters its lists and watches by the share, 0 if the informer does
//	kinformer_cache_mutations_total{resource}           cached objects found modified in place (Options.DetectMutations; only while it is on)
//	kinformer_dead_connections_total{resource}          watches ended because their connection did not answer a probe (Options.ProbeAfter)
//
// The shard group's own metrics (kinformer_sharding_*) are package
// sharding's Metrics.
//
// Several informers with the same Name (other namespaces or selectors)
// add up: counters and depths sum, ages take the worst.
type Metrics struct {
	events, requests, relists *prometheus.CounterVec
	waits, waited             *prometheus.CounterVec
	commits                   *prometheus.CounterVec
	commitTime, written       *prometheus.CounterVec
	restored                  *prometheus.CounterVec
	shardSlots, shardServer   *prometheus.GaugeVec
	mutations                 *prometheus.CounterVec
	deadConns                 *prometheus.CounterVec

	mu      sync.Mutex // guards sources
	sources map[*metricSource]struct{}
}

var (
	descObjects   = prometheus.NewDesc("kinformer_objects", "Objects in the informer's cache.", []string{"resource"}, nil)
	descSynced    = prometheus.NewDesc("kinformer_synced", "1 once the informer's cache has been filled by a complete list.", []string{"resource"}, nil)
	descDepth     = prometheus.NewDesc("kinformer_handler_queue_depth", "Events queued for handlers, summed over registrations.", []string{"resource"}, nil)
	descOldest    = prometheus.NewDesc("kinformer_handler_oldest_event_seconds", "How long the oldest event queued for a handler has waited.", []string{"resource"}, nil)
	descLast      = prometheus.NewDesc("kinformer_last_event_age_seconds", "Seconds since the informer last received anything from the server (event, bookmark or list).", []string{"resource"}, nil)
	descStartList = prometheus.NewDesc("kinformer_startup_list_seconds", "Time from the informer's first start to its first complete list (so far, while it is not complete).", []string{"resource"}, nil)
	descStartHdl  = prometheus.NewDesc("kinformer_startup_handlers_seconds", "Time from the informer's first start until every handler had handled its initial pass (so far, while one has not).", []string{"resource"}, nil)
	descStartBusy = prometheus.NewDesc("kinformer_startup_handler_busy_seconds", "Time spent inside the handlers during their initial passes, summed over handlers.", []string{"resource"}, nil)
	descStartDone = prometheus.NewDesc("kinformer_startup_done", "1 once the informer's first list is complete and every handler has handled its initial pass.", []string{"resource"}, nil)
	descFailing   = prometheus.NewDesc("kinformer_persistent_error", "1 while the informer's lists or watches fail with a persistent error (403, 404, ...).", []string{"resource"}, nil)
)

// NewMetrics creates the metrics and registers them on reg. It fails if
// they are already registered there: use one Metrics per Registerer.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kinformer_events_total",
			Help: "Events queued for the informer's handlers, by type."}, []string{"resource", "type"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kinformer_requests_total",
			Help: "List, watch-list and watch requests, by result."}, []string{"resource", "verb", "result"}),
		relists: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kinformer_relists_total",
			Help: "Re-lists after the first list, by cause: expired (410), too_large (504), another_history (another cluster behind the connection), resync, reconfigure (a consumer asked for more fields), reshard, error."}, []string{"resource", "cause"}),
		waits: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kinformer_backoff_waits_total",
			Help: "Waits before retrying a failed list or watch."}, []string{"resource"}),
		waited: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kinformer_backoff_seconds_total",
			Help: "Seconds spent waiting before retries."}, []string{"resource"}),
		commits: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kinformer_state_commits_total",
			Help: "Commits of changes to the informer's state file, by result: ok, error."}, []string{"resource", "result"}),
		commitTime: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kinformer_state_commit_seconds_total",
			Help: "Seconds spent encoding and committing changes to the state file."}, []string{"resource"}),
		written: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kinformer_state_objects_written_total",
			Help: "Objects written to or deleted from the state file."}, []string{"resource"}),
		restored: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kinformer_state_restored_objects_total",
			Help: "Objects restored from the state file as the informer started."}, []string{"resource"}),
		shardSlots: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kinformer_shard_slots",
			Help: "Slots of the hash space a sharded informer holds (Options.Sharding)."}, []string{"resource"}),
		shardServer: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kinformer_shard_server_side",
			Help: "1 if the API server filters a sharded informer's lists and watches by its share (ShardedListAndWatch), 0 if the informer filters alone."}, []string{"resource"}),
		mutations: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kinformer_cache_mutations_total",
			Help: "Cached objects found modified in place by the mutation detector (Options.DetectMutations)."}, []string{"resource"}),
		deadConns: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kinformer_dead_connections_total",
			Help: "Watches ended because their connection was silent and did not answer a probe (Options.ProbeAfter)."}, []string{"resource"}),
		sources: map[*metricSource]struct{}{},
	}
	for _, c := range []prometheus.Collector{m.events, m.requests, m.relists, m.waits, m.waited, m.commits, m.commitTime, m.written, m.restored, m.shardSlots, m.shardServer, m.mutations, m.deadConns, m} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("kinformer: registering metrics: %w", err)
		}
	}
	return m, nil
}

// metricSource is one informer as the gauges see it.
type metricSource struct {
	name    string
	objects func() int
	synced  func() bool
	depth   func() (events int, oldest time.Duration)
	last    func() time.Time
	failing func() bool
	// startup: the informer's start (Informer.Startup) and the time its
	// handlers spent inside during their initial passes; nil: none.
	startup func() (Startup, time.Duration)
}

// Describe implements prometheus.Collector for the gauges.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descObjects, descSynced, descDepth, descOldest, descLast, descFailing, descStartList, descStartHdl, descStartBusy, descStartDone} {
		ch <- d
	}
}

// Collect implements prometheus.Collector for the gauges, read from the
// informers at scrape time.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	type agg struct {
		objects, depth    float64
		synced            float64
		oldest, lastAge   float64
		failing, haveLast bool
		// startup: the slowest of the informers of the name, busy summed
		startList, startHdl, startBusy float64
		startDone, haveStart           bool
	}
	byName := map[string]*agg{}
	m.mu.Lock()
	now := time.Now()
	for s := range m.sources {
		a := byName[s.name]
		if a == nil {
			a = &agg{synced: 1}
			byName[s.name] = a
		}
		a.objects += float64(s.objects())
		if !s.synced() {
			a.synced = 0
		}
		d, o := s.depth()
		a.depth += float64(d)
		a.oldest = max(a.oldest, o.Seconds())
		if t := s.last(); !t.IsZero() {
			a.lastAge, a.haveLast = max(a.lastAge, now.Sub(t).Seconds()), true
		}
		a.failing = a.failing || s.failing()
		if s.startup != nil {
			if st, busy := s.startup(); st.Started {
				if !a.haveStart {
					a.haveStart, a.startDone = true, true
				}
				a.startList = max(a.startList, st.ListTook.Seconds())
				a.startHdl = max(a.startHdl, st.HandlersTook.Seconds())
				a.startBusy += busy.Seconds()
				a.startDone = a.startDone && st.Synced && st.HandlersDone
			}
		}
	}
	m.mu.Unlock()
	for name, a := range byName {
		ch <- prometheus.MustNewConstMetric(descObjects, prometheus.GaugeValue, a.objects, name)
		ch <- prometheus.MustNewConstMetric(descSynced, prometheus.GaugeValue, a.synced, name)
		ch <- prometheus.MustNewConstMetric(descDepth, prometheus.GaugeValue, a.depth, name)
		ch <- prometheus.MustNewConstMetric(descOldest, prometheus.GaugeValue, a.oldest, name)
		if a.haveLast {
			ch <- prometheus.MustNewConstMetric(descLast, prometheus.GaugeValue, a.lastAge, name)
		}
		failing := 0.0
		if a.failing {
			failing = 1
		}
		ch <- prometheus.MustNewConstMetric(descFailing, prometheus.GaugeValue, failing, name)
		if a.haveStart {
			done := 0.0
			if a.startDone {
				done = 1
			}
			ch <- prometheus.MustNewConstMetric(descStartList, prometheus.GaugeValue, a.startList, name)
			ch <- prometheus.MustNewConstMetric(descStartHdl, prometheus.GaugeValue, a.startHdl, name)
			ch <- prometheus.MustNewConstMetric(descStartBusy, prometheus.GaugeValue, a.startBusy, name)
			ch <- prometheus.MustNewConstMetric(descStartDone, prometheus.GaugeValue, done, name)
		}
	}
}

func (m *Metrics) add(s *metricSource) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sources[s] = struct{}{}
}

func (m *Metrics) remove(s *metricSource) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.sources, s)
}

// observer is one informer's handle on its Metrics: counters bound to its
// resource label once, so that counting an event is one atomic add. A nil
// observer counts nothing.
type observer struct {
	m       *Metrics
	name    string
	events  [len(eventTypes)]prometheus.Counter
	waits   prometheus.Counter
	waited  prometheus.Counter
	source  *metricSource
	results sync.Map // verb+"/"+result -> prometheus.Counter
	// mutations counts the mutation detector's findings; set (at 0) once
	// the detector is on, so that the series exists only then.
	mutations prometheus.Counter
}

func newObserver(m *Metrics, name string) *observer {
	o := &observer{m: m, name: name, waits: m.waits.WithLabelValues(name), waited: m.waited.WithLabelValues(name)}
	for i, t := range eventTypes {
		o.events[i] = m.events.WithLabelValues(name, string(t))
	}
	return o
}

func (o *observer) event(t EventType) {
	if o == nil {
		return
	}
	for i, et := range eventTypes {
		if et == t {
			o.events[i].Inc()
			return
		}
	}
}

// request counts a list, watchlist or watch request by its result.
func (o *observer) request(verb string, err error) {
	if o == nil {
		return
	}
	key := verb + "/" + resultOf(err)
	c, ok := o.results.Load(key)
	if !ok {
		c, _ = o.results.LoadOrStore(key, o.m.requests.WithLabelValues(o.name, verb, resultOf(err)))
	}
	c.(prometheus.Counter).Inc()
}

func (o *observer) relist(cause string) {
	if o != nil {
		o.m.relists.WithLabelValues(o.name, cause).Inc()
	}
}

// shard records a sharded informer's share and who filters it ("server",
// "client", or "" before it is known).
func (o *observer) shard(slots int, mode string) {
	if o == nil {
		return
	}
	o.m.shardSlots.WithLabelValues(o.name).Set(float64(slots))
	if mode != "" {
		v := 0.0
		if mode == "server" {
			v = 1
		}
		o.m.shardServer.WithLabelValues(o.name).Set(v)
	}
}

func (o *observer) backoff(d time.Duration) {
	if o != nil {
		o.waits.Inc()
		o.waited.Add(d.Seconds())
	}
}

// commit counts a commit to the state file of n objects that took d.
func (o *observer) commit(n int, d time.Duration, err error) {
	if o == nil {
		return
	}
	result := "ok"
	if err != nil {
		result = "error"
	} else {
		o.m.written.WithLabelValues(o.name).Add(float64(n))
	}
	o.m.commits.WithLabelValues(o.name, result).Inc()
	o.m.commitTime.WithLabelValues(o.name).Add(d.Seconds())
}

// detecting makes the mutation counter's series, at 0: the detector is on.
func (o *observer) detecting() {
	if o != nil && o.mutations == nil {
		o.mutations = o.m.mutations.WithLabelValues(o.name)
	}
}

// mutation counts a cached object found modified in place.
func (o *observer) mutation() {
	if o != nil && o.mutations != nil {
		o.mutations.Inc()
	}
}

// deadConn counts a watch ended because its connection did not answer a
// probe.
func (o *observer) deadConn() {
	if o != nil {
		o.m.deadConns.WithLabelValues(o.name).Inc()
	}
}

func (o *observer) restore(n int) {
	if o != nil {
		o.m.restored.WithLabelValues(o.name).Add(float64(n))
	}
}

// resultOf names an error by a bounded set of results.
func resultOf(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrExpired):
		return "expired"
	case errors.Is(err, ErrTooLargeResourceVersion):
		return "too_large"
	case apierrors.IsForbidden(err):
		return "forbidden"
	case apierrors.IsUnauthorized(err):
		return "unauthorized"
	case apierrors.IsNotFound(err):
		return "not_found"
	case apierrors.IsBadRequest(err), apierrors.IsInvalid(err):
		return "invalid"
	case apierrors.IsTooManyRequests(err):
		return "throttled"
	case apierrors.IsTimeout(err), apierrors.IsServerTimeout(err):
		return "timeout"
	case apierrors.IsInternalError(err), apierrors.IsServiceUnavailable(err):
		return "server_error"
	}
	return "error"
}

// dropMetrics takes the informer out of its Metrics' gauges (a Factory
// forgetting a stopped informer); its counters stay, as counters do.
func (inf *Informer[T]) dropMetrics() {
	if inf.obs != nil {
		inf.obs.m.remove(inf.obs.source)
	}
}
