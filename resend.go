package kinformer

import (
	"context"
	"sync"
	"time"
)

// ResendEvery makes the informer Resend its cache to reg every period,
// from each run's first sync until the run ends: client-go's per-handler
// resync. It lasts until reg is removed, or ResendEvery is called again
// for reg (a period of 0 or less stops it). The informer's own run drives
// it, so whoever runs the informer (its Factory, for a shared one) runs
// the schedule too, and a registration added while the informer runs
// starts at once.
//
// A registration of another informer, or one removed, is ignored.
func (inf *Informer[T]) ResendEvery(reg *Registration, period time.Duration) {
	if reg == nil || (period > 0 && !inf.disp.registered(reg)) {
		return
	}
	inf.resends.set(reg, period)
}

// resender keeps the ResendEvery schedules and runs them for the
// informer's current run.
type resender struct {
	resend func(*Registration)    // Informer.Resend
	synced func() <-chan struct{} // Informer.Synced

	mu      sync.Mutex // guards everything below
	periods map[*Registration]time.Duration
	stops   map[*Registration]context.CancelFunc // the current run's tickers
	ctx     context.Context                      // the current run's; nil when not running
	wg      sync.WaitGroup                       // the current run's tickers
}

// set schedules reg every period (none if period <= 0), replacing its
// schedule; while a run is on, the new schedule starts at once.
func (r *resender) set(reg *Registration, period time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if stop := r.stops[reg]; stop != nil {
		stop()
		delete(r.stops, reg)
	}
	if period <= 0 {
		delete(r.periods, reg)
		return
	}
	if r.periods == nil {
		r.periods = map[*Registration]time.Duration{}
	}
	r.periods[reg] = period
	if r.ctx != nil {
		r.tickLocked(reg, period)
	}
}

// start runs every schedule until stop, for a run whose context is ctx.
func (r *resender) start(ctx context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ctx = ctx
	for reg, period := range r.periods {
		r.tickLocked(reg, period)
	}
}

// stop ends the run's schedules and waits for their goroutines; they are
// kept for the next run.
func (r *resender) stop() {
	r.mu.Lock()
	for _, stop := range r.stops {
		stop()
	}
	r.stops, r.ctx = nil, nil
	r.mu.Unlock()
	r.wg.Wait()
}

// tickLocked starts reg's ticker for the current run: the first resend a
// period after the informer has synced. r.mu must be held.
func (r *resender) tickLocked(reg *Registration, period time.Duration) {
	ctx, cancel := context.WithCancel(r.ctx)
	if r.stops == nil {
		r.stops = map[*Registration]context.CancelFunc{}
	}
	r.stops[reg] = cancel
	synced := r.synced()
	r.wg.Go(func() {
		select {
		case <-ctx.Done():
			return
		case <-synced:
		}
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				r.resend(reg)
			}
		}
	})
}
