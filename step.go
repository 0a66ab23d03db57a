package kinformer

// The watch loop is a small state machine. Its state says what the
// informer needs next and how it gets it; each attempt ends with an outcome;
// step maps (state, outcome) to the next state and whether to back off
// first, and reported says which failures are reported. Which request
// comes next, and whether a wait comes before it, is decided there alone;
// run feeds them, making the shareGrew outcome itself when the share grew
// (with state.joinable saying whether the joined slots can be listed
// alone), marking an outcome gone (a 404 on the collection) and flapping
// (loop.noteCut), and waits out the backoffs step asks for. How long a
// wait lasts (the backoff, a lost connection's short resume, the probe of
// a server that is down, Retry-After, a CRD's return) is recovery.go's and
// internal/crdwait's. The rules:
//
//   - a list that worked → watch from its resourceVersion;
//   - a watch the server ended normally → watch again from the last
//     resourceVersion, at once, without re-listing;
//   - a watch closed as soon as it opened, with nothing on it → watch again
//     after a backoff (servers do this when shutting down);
//   - 410 Gone or "too large resource version" → re-list, at once if the
//     watch had made progress, else after a backoff;
//   - a paged list whose continue token expired → one unpaged list, at once;
//   - a server without watch-lists → page instead, at once and for good;
//   - a server or resource that refuses direct decoding → the client's
//     Watch, at once and for good;
//   - any other failure → the same phase again, after a backoff;
//   - a 404 on a list or watch of the collection (the resource is no
//     longer served) → a list, after the wait for its return;
//   - a watch that ended young while the way to the server flaps → resume
//     after a wait, not at once;
//   - resync due → re-list at once;
//   - the server turned out to be another cluster (another certificate
//     authority or kube-system uid on a new connection) → re-list at once,
//     diffed against the cache;
//   - the share of a sharded informer grew → list the slots that joined
//     alone, at the watch's resourceVersion, where the server filters and
//     the informer is synced and caught up; else re-list; a list of the
//     joined slots that fails → re-list at once;
//   - a cache loaded from its state file → a one-object list for the
//     server's current resourceVersion (the probe); once this client's
//     list has been authorized so, the loaded cache is restored, then
//     watch from the file's resourceVersion; synced once the watch
//     reaches the probe's. A sharded informer lists instead of watching,
//     diffed against the restored cache. A probe that fails (401, 403,
//     the server down) → the probe again after a backoff, with nothing
//     restored.
type phase uint8

const (
	phaseList        phase = iota // no usable resourceVersion: list, diff, replace
	phaseListUnpaged              // as phaseList, in one unpaged request
	phaseWatch                    // watch from the remembered resourceVersion
	phaseProbe                    // restoring: learn the server's resourceVersion, to catch up to
	phaseListJoined               // sharded: list the slots that joined the share, at the watch's resourceVersion
)

func (p phase) String() string {
	switch p {
	case phaseList:
		return "list"
	case phaseListUnpaged:
		return "list (unpaged)"
	case phaseProbe:
		return "probe"
	case phaseListJoined:
		return "list (joined slots)"
	}
	return "watch"
}

// state is where the loop is, and what it has learnt about the server.
type state struct {
	phase     phase
	watchList bool // list with a watch-list (sendInitialEvents), not pages
	// pageOnce: the last watch-list failed; this list is paged, and the
	// next one is a watch-list again.
	pageOnce bool
	direct   bool // decode watches directly (internal/protowatch, internal/jsonwatch)
	// joinable: when the share grows, the slots that joined can be listed
	// alone (caught up, synced, and the server filters by the share).
	joinable bool
}

type outcomeKind uint8

const (
	stopped          outcomeKind = iota // the context ended; the loop returns
	listed                              // a list replaced the cache
	listFailed                          // a list failed; err says why
	continueExpired                     // a paged list's continue token expired
	watchListRefused                    // the server does not do watch-lists; err says how we know
	watchListFailed                     // a watch-list was answered with an error; err says which
	watchEnded                          // the server closed a healthy watch
	watchClosedEarly                    // a watch closed as soon as it opened, with nothing on it
	watchFailed                         // a watch could not open, or ended in error; err says why
	directRefused                       // direct decoding is not possible here; err says why
	resyncDue                           // the resync period has passed
	probed                              // the probe learnt the resourceVersion to catch up to
	probedSharded                       // the probe authorized a sharded informer's restore: a list follows
	heldForeign                         // the state file was another cluster's (foreign): a list follows
	otherHistory                        // the server is another cluster than the cache's (loop.rebound); err says why
	resharded                           // the share of a sharded informer changed during a watch
	shareGrew                           // the share grew: objects may have joined
	reconfigured                        // a watch ended for a new configuration (loop.adopt)
)

type outcome struct {
	kind     outcomeKind
	err      error
	received bool // watchFailed: the watch delivered events before failing
	// healthy: a watch still delivered healthyWatch after it opened: the
	// server is well, and the backoff starts again from its first wait.
	healthy bool
	// connLost: watchFailed by its connection (cut, reset, found dead by
	// the probe or the idle deadline), not by the server's answer, after
	// the watch was live (liveWatch): the server was serving, the way to
	// it broke. The loop resumes after a short wait, whatever the backoff
	// had grown to (backoff.State.Resume).
	connLost bool
	// cutYoung: a watch failed by its connection, or ended (a reset
	// connection reads as an end), within healthyWatch of opening: what a
	// flapping way to the server does to every watch (loop.noteCut).
	cutYoung bool
	// flapping: the way to the server flaps (loop.noteCut, counted with
	// this outcome).
	flapping bool
	// gone: a list or watch of the collection answered 404: the server no
	// longer serves the resource (a namespace that does not exist answers
	// with an empty list, not 404).
	gone bool
}

// step is the transition function of the watch loop.
func step(s state, o outcome) (next state, backoff bool) {
	next, backoff = transition(s, o)
	if !backoff && o.cutYoung && o.flapping {
		// A watch that ended young on a flapping way (a reset reads as
		// an end): not resumed at once.
		backoff = true
	}
	if o.gone {
		next.phase = phaseList // whatever returns starts from a list
	}
	return next, backoff
}

// transition is step for an outcome of a way to the server that does not
// flap, of a resource still served.
func transition(s state, o outcome) (next state, backoff bool) {
	once := s.pageOnce
	s.pageOnce = false
	switch o.kind {
	case stopped, resharded, reconfigured:
		return s, false
	case listed, watchEnded, probed:
		s.phase = phaseWatch
		return s, false
	case resyncDue, probedSharded, heldForeign, otherHistory:
		s.phase = phaseList
		return s, false
	case continueExpired:
		// The token outlived etcd's compaction window. A paged list would
		// only expire again on a busy cluster: take it in one consistent
		// read.
		s.phase = phaseListUnpaged
		return s, false
	case watchListRefused:
		s.watchList = false
		return s, false
	case watchListFailed:
		// As client-go's reflector: a LIST at once, rather than retrying
		// a request that something between here and the data (a proxy,
		// a partial server, a fake) may never serve. The server may well
		// offer watch-lists: the next list tries one again.
		s.phase = phaseList
		s.pageOnce = true
		return s, false
	case directRefused:
		s.direct = false
		s.pageOnce = once // the same list again, decoded through the client
		return s, false
	case watchClosedEarly:
		return s, true
	case watchFailed:
		if needsRelist(o.err) {
			// At once after a watch that made progress; after a backoff
			// when the very first answer is 410/504, so that a server whose
			// watch cache lags cannot draw a storm of re-lists.
			s.phase = phaseList
			return s, !o.received
		}
		return s, true
	case shareGrew:
		switch {
		case s.joinable && (s.phase == phaseWatch || s.phase == phaseListJoined):
			// List the slots that joined at the watch's resourceVersion
			// (all of them, if it grew again before they were listed);
			// the watch then goes on from it.
			s.phase = phaseListJoined
		case s.phase != phaseListUnpaged:
			s.phase = phaseList
		}
		return s, false
	default: // listFailed
		if s.phase == phaseListJoined {
			// Compacted, or the server cannot list at that version:
			// re-list the whole share, at once.
			s.phase = phaseList
			return s, false
		}
		if s.phase != phaseProbe {
			s.phase = phaseList
		}
		return s, true
	}
}

// reported says whether the error an attempt ended with is reported (an
// Error event, and LastError if persistent): a failed list or watch,
// unless a list of the slots that joined the share, which a re-list of
// the whole share follows at once (step).
func reported(s state, o outcome) bool {
	return o.err != nil && (o.kind == listFailed || o.kind == watchFailed) && s.phase != phaseListJoined
}

// firstPhase is where a run starts: with a cache loaded from the state
// file and held until the server authorizes a list (held), with the
// resourceVersion it keeps (haveRV), whether it had synced, whether its
// share grew since (or a re-list for a growth did not finish), and
// whether it is sharded.
func firstPhase(held, haveRV, synced, shareGrew, sharded bool) phase {
	switch {
	case held:
		return phaseProbe // nothing restored before the server says this client may list
	case !haveRV:
		return phaseList
	case synced && !shareGrew:
		return phaseWatch // restarted: resume from the kept resourceVersion
	case synced:
		return phaseList // restarted with a share that grew
	case sharded:
		// Restored, sharded: the file may lack slots the replica did not
		// serve when it was written. List, diffed against the restored
		// cache.
		return phaseList
	}
	return phaseProbe // restored by the last run: catch up before saying synced
}
