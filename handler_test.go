package kinformer

import (
	"sync"
	"testing"
)

// curGoroutineID tells goroutines apart, and one goroutine from itself: a
// handler that removes itself or stops its informer depends on it. It
// would read 0 everywhere if the runtime's stack format changed.
func TestHandlerGoroutineID(t *testing.T) {
	me := curGoroutineID()
	if me == 0 || curGoroutineID() != me {
		t.Fatalf("curGoroutineID = %d, then %d: want one id, not 0", me, curGoroutineID())
	}
	ids := make([]int64, 8)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Go(func() { ids[i] = curGoroutineID() })
	}
	wg.Wait()
	seen := map[int64]bool{me: true}
	for _, id := range ids {
		if id == 0 || seen[id] {
			t.Fatalf("ids %v (this goroutine %d): want distinct ids, none 0", ids, me)
		}
		seen[id] = true
	}
}
