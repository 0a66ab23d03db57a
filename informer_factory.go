package kinformer

import (
	"fmt"
	"time"
)

// What a Factory needs of an informer it shares (factory_share.go's
// merge): whether it has started, and a new resync period before then.

// isStarted reports whether the informer has ever run.
func (inf *Informer[T]) isStarted() bool {
	inf.runMu.Lock()
	defer inf.runMu.Unlock()
	return inf.started
}

// setResync changes the resync period of an informer that has never run:
// its loop reads the period only once running.
func (inf *Informer[T]) setResync(d time.Duration) error {
	inf.runMu.Lock()
	defer inf.runMu.Unlock()
	if inf.started {
		return fmt.Errorf("%w: the resync period can only change before the informer starts", ErrRunning)
	}
	inf.loop.opts.ResyncPeriod = d
	return nil
}
