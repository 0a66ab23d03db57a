package integration

import (
	"testing"
	"time"
)

// stormDeadline is issue 32's target for the storm: every round converges
// within 15 s of its fault's end, with default options.
const stormDeadline = 15 * time.Second

// stormKinds are the storm's faults, back to back: each kind twice but
// compaction, nine in all, about two minutes. The writer churns beside.
var stormKinds = []chaosKind{faultKill, faultCut, faultCompact, faultRBAC, faultBlackHoleStuck, faultKill, faultCut, faultRBAC, faultBlackHoleStuck}

// TestChaosStorm is the chaos soak's faults one after another without a
// pause, against an informer with default options (no short watch timeout
// or idle margin: a silent connection is found by the probe). The watches
// between faults live a few seconds, less than healthyWatch: before the
// backoff told a connection lost from a sick server, each fault's wait
// grew from the last (a kill's refused reconnects, an RBAC round's 403s),
// and later rounds took 13-35 s. Each round must converge within
// stormDeadline of its fault's end, with no difference and no storm of
// requests (chaos.round).
func TestChaosStorm(t *testing.T) {
	sum := &chaosSummary{deadline: stormDeadline}
	t.Cleanup(func() { sum.log(t) })
	c := newChaosWith(t, "storm", sum, nil) // default options
	c.deadline = stormDeadline
	for _, k := range stormKinds {
		c.round(k)
	}
}
