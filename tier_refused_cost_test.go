package sqlflight

import (
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// TestRefusedTierConcurrentFirstReads: a scope's first reads, made at
// once while the tier refuses connections, each cost at most one call to
// the tier: the first refusal takes it down (once, with one warning), the
// calls already in flight fail on their own, and every read after them
// leaves the tier alone until the back-off ends.
func TestRefusedTierConcurrentFirstReads(t *testing.T) {
	logs := &logBuffer{}
	mt := newMemTier(newFakeClock())
	mt.fail.Store(true)
	f := fleetOn(t, 1, refusedTier{mt}, mt.clock, Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	const readers = 16
	var wg sync.WaitGroup
	for i := range readers {
		wg.Go(func() {
			var n int64
			if err := f[0].db.QueryRow(ttlQuery, 1000+i).Scan(&n); err != nil || n < 1 {
				t.Errorf("read %d: %v, %d", i, err, n) // not Fatal: another goroutine
			}
		})
	}
	wg.Wait()
	st := f[0].s.Stats()
	calls := mt.calls.Load()
	if calls < 1 || calls > readers || st.SharedErrors != uint64(calls) || st.SharedState != "down" || st.SharedTransitions != 1 {
		t.Fatalf("%d concurrent first reads: %d tier calls; %+v", readers, calls, st)
	}
	if n := strings.Count(logs.String(), "shared tier unavailable"); n != 1 {
		t.Fatalf("%d warnings that the tier is down, want 1:\n%s", n, logs.String())
	}
	// Down: the next reads (the clock stands still, the back-off never
	// ends) make no call at all.
	for i := range readers {
		readN(t, f[0].db, ttlQuery, 2000+i)
	}
	if c := mt.calls.Load(); c != calls {
		t.Fatalf("the tier was called %d more times while down", c-calls)
	}
}
