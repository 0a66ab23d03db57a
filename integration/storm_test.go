package integration

import (
	"testing"
	"time"
)

// stormDeadline is issue 44's target for the storm: every round converges
// within 8 s of its fault's end, with default options (issue 32's was
// 15 s).
const stormDeadline = 8 * time.Second

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

// After a long outage (the API server down 12 s) or a long refusal (the
// informer's permission revoked 12 s), the backoff has grown to 6-13 s;
// the informer must not wait it out once the cause is gone: back within
// seconds of the server's return (a probe that finds it serving) and of
// the permission's (the wait after 401 and 403 is capped), with default
// options.
func TestBackSoonAfterALongFault(t *testing.T) {
	sum := &chaosSummary{deadline: 4 * time.Second}
	t.Cleanup(func() { sum.log(t) })
	c := newChaosWith(t, "long", sum, nil) // default options
	c.deadline = 4 * time.Second           // the server serves again: within a probe's period and the spread
	c.round(faultKillLong)
	c.deadline = 6 * time.Second // within the capped wait
	c.round(faultRBACLong)
}
