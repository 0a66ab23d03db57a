package sharding

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the Prometheus metrics of a process's shard group
// memberships. Create one per Registerer with NewMetrics and give it to
// every Sharding of the process through Options.Metrics; Options.Group is
// each one's group label. (An informer's own metrics, kinformer_shard_*
// among them, are kinformer.Metrics.)
//
//	kinformer_sharding_members{group}                   live members of a shard group, as this replica last read them
//	kinformer_sharding_slots{group}                     slots this replica serves
//	kinformer_sharding_fenced{group}                    1 while it cannot renew its Lease in time and serves nothing
//	kinformer_sharding_renewals_total{group,result}     renewals of its Lease: ok, error
//	kinformer_sharding_share_changes_total{group}       changes of the share it serves
//	kinformer_sharding_members_not_serving{group}       live members claiming slots they have not synced past Options.NotServingGrace
//	kinformer_sharding_leases_ignored{group}            Leases of the group Options.Members refused, as last read
type Metrics struct {
	members, slots, fenced *prometheus.GaugeVec
	notServing, ignored    *prometheus.GaugeVec
	renewals, changes      *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them on reg. It fails if
// they are already registered there: use one Metrics per Registerer.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		members: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kinformer_sharding_members",
			Help: "Live members of the shard group, as this replica last read its Leases."}, []string{"group"}),
		slots: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kinformer_sharding_slots",
			Help: "Slots of the hash space this replica serves."}, []string{"group"}),
		fenced: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kinformer_sharding_fenced",
			Help: "1 while this replica could not renew its Lease in time and serves nothing."}, []string{"group"}),
		notServing: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kinformer_sharding_members_not_serving",
			Help: "Live members of the shard group that claim slots they have not synced for longer than the grace: no replica caches those slots."}, []string{"group"}),
		ignored: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kinformer_sharding_leases_ignored",
			Help: "Leases labelled with the shard group whose holder is not an allowed member, as this replica last read them."}, []string{"group"}),
		renewals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kinformer_sharding_renewals_total",
			Help: "Renewals of this replica's Lease, by result: ok, error."}, []string{"group", "result"}),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kinformer_sharding_share_changes_total",
			Help: "Changes of the share this replica serves."}, []string{"group"}),
	}
	for _, c := range []prometheus.Collector{m.members, m.slots, m.fenced, m.notServing, m.ignored, m.renewals, m.changes} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("kinformer: sharding: registering metrics: %w", err)
		}
	}
	return m, nil
}

// observer returns the metrics of group; nil (no metrics) on nil.
func (m *Metrics) observer(group string) *observer {
	if m == nil {
		return nil
	}
	return &observer{
		members: m.members.WithLabelValues(group), slots: m.slots.WithLabelValues(group),
		fenced: m.fenced.WithLabelValues(group), changes: m.changes.WithLabelValues(group),
		notServing: m.notServing.WithLabelValues(group), ignored: m.ignored.WithLabelValues(group),
		renewOK: m.renewals.WithLabelValues(group, "ok"), renewErr: m.renewals.WithLabelValues(group, "error"),
	}
}

// observer holds a Sharding's metrics; its methods do nothing on nil.
type observer struct {
	members, slots, fenced prometheus.Gauge
	notServing, ignored    prometheus.Gauge
	changes                prometheus.Counter
	renewOK, renewErr      prometheus.Counter
}

func (o *observer) setMembers(n int) {
	if o != nil {
		o.members.Set(float64(n))
	}
}

// leasesRead records, after a read of the group, the members not
// serving their claims and the Leases ignored.
func (o *observer) leasesRead(notServing, ignored int) {
	if o != nil {
		o.notServing.Set(float64(notServing))
		o.ignored.Set(float64(ignored))
	}
}

func (o *observer) share(n int) {
	if o != nil {
		o.slots.Set(float64(n))
		o.changes.Inc()
	}
}

func (o *observer) fence(on bool) {
	if o != nil {
		v := 0.0
		if on {
			v = 1
		}
		o.fenced.Set(v)
	}
}

func (o *observer) renewed(err error) {
	if o == nil {
		return
	}
	if err != nil {
		o.renewErr.Inc()
	} else {
		o.renewOK.Inc()
	}
}
