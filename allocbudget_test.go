package sqlflight

import (
	"testing"
	"time"
)

// The allocation budget of a read, database/sql's own included: what the
// hit and the miss of one row cost in allocations, counted by
// testing.AllocsPerRun on a parent that replays one row. A change that
// adds an allocation to either path fails here, not in a benchmark nobody
// reads (BenchmarkHitFloor and BenchmarkMissAlone time them).
func TestReadAllocationBudget(t *testing.T) {
	const (
		hitQuery  = "/* sqlflight: ttl=1h */ " + pointQuery
		missQuery = "/* sqlflight: ttl=1s */ " + pointQuery
		offQuery  = "/* sqlflight: off */ " + pointQuery
	)
	for _, c := range contexts {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := c.ctx()
			defer cancel()
			clock := newFakeClock()
			db, s := openFake(t, replayOne(), Options{Clock: clock})
			t.Cleanup(func() { _ = s.Close() })
			read := func(q string) func() {
				return func() {
					if err := readOne(ctx, db, q); err != nil {
						t.Fatal(err)
					}
				}
			}
			miss := func() {
				clock.Add(2 * time.Second) // past soft and hard: the next read misses
				read(missQuery)()
			}
			for _, q := range []string{hitQuery, missQuery, offQuery, pointQuery} {
				read(q)() // verdicts, connections, the first fill
			}
			got := map[string]float64{
				"pass-through":          testing.AllocsPerRun(200, read(offQuery)),
				"hit":                   testing.AllocsPerRun(200, read(hitQuery)),
				"miss, ttl":             testing.AllocsPerRun(200, miss),
				"miss, coalescing only": testing.AllocsPerRun(200, read(pointQuery)),
			}
			t.Logf("allocations per read: %v", got)
			// What sqlflight adds to a pass-through of the same statement
			// (whose own allocations are database/sql's and the wrapper's).
			// The counts vary a little from run to run: a timer or a worker
			// made anew after the GC emptied a pool, and, under a
			// cancellable context, database/sql's watcher goroutine, which
			// allocates on its own schedule.
			slack := 1.0
			if c.name == "ctx=cancel" {
				slack = 2
			}
			budgets := map[string]float64{
				"hit":                   1,
				"miss, coalescing only": 7,
				"miss, ttl":             17,
			}
			if c.name == "ctx=cancel" {
				// A lone leader's rows are tied to the caller's context
				// (context.AfterFunc), as a pass-through's are.
				budgets["miss, coalescing only"] = 10
			}
			for what, budget := range budgets {
				if extra := got[what] - got["pass-through"]; extra > budget+slack {
					t.Errorf("a %s allocates %.0f times more than a pass-through, budget %.0f", what, extra, budget)
				}
			}
		})
	}
}
