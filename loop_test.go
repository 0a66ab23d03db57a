package kinformer

import (
	"errors"
	"testing"
)

// TestStep is the whole recovery table of the watch loop.
func TestStep(t *testing.T) {
	expired := errors.Join(ErrExpired, errors.New("410"))
	tooLarge := errors.Join(ErrTooLargeResourceVersion, errors.New("504"))
	other := errors.New("connection reset")
	// The states the loop can be in: what it does next, and how.
	list := state{phase: phaseList, watchList: true, direct: true}
	paged := state{phase: phaseList, direct: true}
	unpaged := state{phase: phaseListUnpaged, direct: true}
	watching := state{phase: phaseWatch, watchList: true, direct: true}
	viaClient := state{phase: phaseWatch, watchList: true}
	listViaClient := state{phase: phaseList, watchList: true}
	probing := state{phase: phaseProbe, watchList: true, direct: true}
	joinable := state{phase: phaseWatch, watchList: true, direct: true, joinable: true}
	joining := state{phase: phaseListJoined, watchList: true, direct: true, joinable: true}
	for _, tc := range []struct {
		name        string
		from        state
		o           outcome
		want        state
		wantBackoff bool
	}{
		{"stopped → stay", watching, outcome{kind: stopped}, watching, false},
		{"list ok → watch", list, outcome{kind: listed}, watching, false},
		{"paged list ok → watch", paged, outcome{kind: listed}, state{phase: phaseWatch, direct: true}, false},
		{"unpaged list ok → watch", unpaged, outcome{kind: listed}, state{phase: phaseWatch, direct: true}, false},
		{"list failed → list again after backoff", list, outcome{kind: listFailed, err: other}, list, true},
		{"list expired → list again after backoff", list, outcome{kind: listFailed, err: expired}, list, true},
		{"unpaged list failed → paged list again after backoff", unpaged, outcome{kind: listFailed, err: other}, paged, true},
		{"watch-list cut mid-list → watch-list again after backoff", list, outcome{kind: listFailed, err: other}, list, true},
		{"continue token expired → one unpaged list at once", paged, outcome{kind: continueExpired, err: expired}, unpaged, false},
		{"watch-list refused → page at once, for good", list, outcome{kind: watchListRefused, err: other}, paged, false},
		{"watch-list failed → page at once, this time", list, outcome{kind: watchListFailed, err: other}, state{phase: phaseList, watchList: true, direct: true, pageOnce: true}, false},
		{"paged after a failed watch-list, failed → watch-list again after backoff", state{phase: phaseList, watchList: true, direct: true, pageOnce: true}, outcome{kind: listFailed, err: other}, list, true},
		{"paged after a failed watch-list, ok → watch", state{phase: phaseList, watchList: true, direct: true, pageOnce: true}, outcome{kind: listed}, watching, false},
		{"paged after a failed watch-list, direct refused → page again via the client", state{phase: phaseList, watchList: true, direct: true, pageOnce: true}, outcome{kind: directRefused, err: other}, state{phase: phaseList, watchList: true, pageOnce: true}, false},
		{"direct decoding refused while listing → list through the client at once", list, outcome{kind: directRefused, err: other}, listViaClient, false},
		{"direct decoding refused while watching → watch through the client at once", watching, outcome{kind: directRefused, err: other}, viaClient, false},
		{"watch ended → resume at once", watching, outcome{kind: watchEnded}, watching, false},
		{"restored, probe ok → watch from the file's resourceVersion at once", probing, outcome{kind: probed}, watching, false},
		{"restoring, probe failed → probe again after backoff, nothing restored", probing, outcome{kind: listFailed, err: other}, probing, true},
		{"restoring, sharded, probe ok → list, diffed against the restored cache", probing, outcome{kind: probedSharded}, list, false},
		{"watch closed at once → resume after backoff", watching, outcome{kind: watchClosedEarly}, watching, true},
		{"watch 410 after progress → re-list at once", watching, outcome{kind: watchFailed, err: expired, received: true}, list, false},
		{"watch too large rv after progress → re-list at once", watching, outcome{kind: watchFailed, err: tooLarge, received: true}, list, false},
		{"watch 410 as first answer → re-list after backoff", watching, outcome{kind: watchFailed, err: expired}, list, true},
		{"watch too large rv as first answer → re-list after backoff", watching, outcome{kind: watchFailed, err: tooLarge}, list, true},
		{"watch error → resume after backoff", watching, outcome{kind: watchFailed, err: other}, watching, true},
		{"watch error after progress → resume after backoff", watching, outcome{kind: watchFailed, err: other, received: true}, watching, true},
		{"idle → resume after backoff", watching, outcome{kind: watchFailed, err: ErrIdle}, watching, true},
		{"resync → re-list at once", watching, outcome{kind: resyncDue}, list, false},
		{"another cluster behind the watch's new connection → re-list at once", watching, outcome{kind: otherHistory, err: ErrAnotherHistory}, list, false},
		{"another cluster behind a restored cache's probe → re-list at once", probing, outcome{kind: otherHistory, err: ErrAnotherHistory}, list, false},
		{"resync on a pager → paged re-list at once", state{phase: phaseWatch}, outcome{kind: resyncDue}, state{phase: phaseList}, false},
		{"share changed during a watch → applied, then the same phase", watching, outcome{kind: resharded}, watching, false},
		{"a watch ended for a new configuration → the same phase (loop.adopt takes it)", watching, outcome{kind: reconfigured}, watching, false},
		{"share grew while watching, server filters → list the joined slots at once", joinable, outcome{kind: shareGrew}, joining, false},
		{"share grew while watching, joined slots not listable alone → re-list at once", watching, outcome{kind: shareGrew}, list, false},
		{"share grew while listing → list", list, outcome{kind: shareGrew}, list, false},
		{"share grew before an unpaged list → that list", unpaged, outcome{kind: shareGrew}, unpaged, false},
		{"share grew while catching up → re-list", probing, outcome{kind: shareGrew}, list, false},
		{"joined slots listed → watch on from the same resourceVersion", joining, outcome{kind: listed}, joinable, false},
		{"share grew again before the joined slots were listed → list them all", joining, outcome{kind: shareGrew}, joining, false},
		{"share grew again, not listable alone → re-list", state{phase: phaseListJoined, watchList: true, direct: true}, outcome{kind: shareGrew}, list, false},
		{"watch 404 (resource gone) → list, after the wait for its return", watching, outcome{kind: watchFailed, err: other, gone: true}, list, true},
		{"probe 404 (resource gone) → list, after the wait", probing, outcome{kind: listFailed, err: other, gone: true}, list, true},
		{"watch ended young, the way flapping → resume after a wait", watching, outcome{kind: watchEnded, cutYoung: true, flapping: true}, watching, true},
		{"watch ended young, the way not flapping → resume at once", watching, outcome{kind: watchEnded, cutYoung: true}, watching, false},
		{"watch ended old while flapping → resume at once", watching, outcome{kind: watchEnded, flapping: true}, watching, false},
		{"joined slots' list failed → re-list the whole share at once", joining, outcome{kind: listFailed, err: expired}, state{phase: phaseList, watchList: true, direct: true, joinable: true}, false},
	} {
		got, backoff := step(tc.from, tc.o)
		if got != tc.want || backoff != tc.wantBackoff {
			t.Errorf("%s: step = %+v, backoff %v; want %+v, %v", tc.name, got, backoff, tc.want, tc.wantBackoff)
		}
	}
}

// TestFirstPhase: where a run starts.
func TestFirstPhase(t *testing.T) {
	for _, tc := range []struct {
		name                                string
		held, haveRV, synced, grew, sharded bool
		want                                phase
	}{
		{"new", false, false, false, false, false, phaseList},
		{"new, sharded", false, false, false, false, true, phaseList},
		{"restarted", false, true, true, false, false, phaseWatch},
		{"restarted, sharded, same share", false, true, true, false, true, phaseWatch},
		{"restarted, the share grew", false, true, true, true, true, phaseList},
		{"loaded from a state file: probe before restoring", true, false, false, false, false, phaseProbe},
		{"loaded, sharded: probe before restoring", true, false, false, false, true, phaseProbe},
		{"restored by the last run, not caught up", false, true, false, false, false, phaseProbe},
		{"restored by the last run, sharded", false, true, false, false, true, phaseList},
	} {
		if got := firstPhase(tc.held, tc.haveRV, tc.synced, tc.grew, tc.sharded); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

// Which failures are reported: a failed list or watch, but not a list of
// the slots that joined the share, which a re-list follows at once.
func TestReported(t *testing.T) {
	err := errors.New("boom")
	for _, tc := range []struct {
		phase phase
		o     outcome
		want  bool
	}{
		{phaseList, outcome{kind: listFailed, err: err}, true},
		{phaseWatch, outcome{kind: watchFailed, err: err}, true},
		{phaseProbe, outcome{kind: listFailed, err: err}, true},
		{phaseListJoined, outcome{kind: listFailed, err: err}, false},
		{phaseList, outcome{kind: watchListRefused, err: err}, false},
		{phaseList, outcome{kind: watchListFailed, err: err}, false},
		{phaseList, outcome{kind: directRefused, err: err}, false},
		{phaseList, outcome{kind: continueExpired, err: err}, false},
		{phaseWatch, outcome{kind: watchEnded}, false},
	} {
		if got := reported(state{phase: tc.phase}, tc.o); got != tc.want {
			t.Errorf("%s, outcome %d: reported %v, want %v", tc.phase, tc.o.kind, got, tc.want)
		}
	}
}
