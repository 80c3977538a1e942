package sqlflight

import (
	"fmt"
	"sync"
	"testing"
)

// epochOf is the epoch of one table, for tests.
func (e *epochs) epochOf(table string) uint64 {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if te := e.tables[tableKey(table)]; te != nil {
		return te.any
	}
	return 0
}

// checkBumped fails t unless every table (or "all") shows at least n, the
// number the bump that just returned took, and no flight that started
// before it may be joined.
func checkBumped(t *testing.T, e *epochs, tables []string, known bool, n uint64) {
	if !known {
		if a := e.all.Load(); a < n {
			t.Errorf("all = %d after a write numbered %d returned", a, n)
		}
		if e.unchangedSince(n-1, []string{"x"}, true) {
			t.Errorf("a flight from before write %d (all) is still joinable", n)
		}
		return
	}
	for _, tb := range tables {
		if got := e.epochOf(tb); got < n {
			t.Errorf("epoch of %s = %d after a write numbered %d returned", tb, got, n)
		}
	}
	if e.unchangedSince(n-1, tables, true) {
		t.Errorf("a flight from before write %d to %v is still joinable", n, tables)
	}
}

// TestEpochsOnlyMoveForward bumps the same tables and "all" from many
// goroutines at once: however the stores interleave, after each bump the
// epochs it stamped are at least the number it took, and every epoch read
// by a watcher never goes down.
func TestEpochsOnlyMoveForward(t *testing.T) {
	var e epochs
	sets := [][]string{{"a"}, {"a", "b"}, {"B", "public.c"}, {"c", "a"}}
	const writers, rounds = 8, 3000
	stop, watch := watchEpochs(t, &e, "a", "b", "c")
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range rounds {
				if t.Failed() {
					return
				}
				tables, known := sets[(w+i)%len(sets)], (w+i)%5 != 0
				n := e.bump(tables, known)
				checkBumped(t, &e, tables, known, n)
			}
		})
	}
	wg.Wait()
	close(stop)
	watch.Wait()
	if got, want := e.now(), uint64(writers*rounds); !t.Failed() && got != want {
		t.Errorf("sequence = %d, want %d", got, want)
	}
}

// TestEpochsJoinability is the property the epochs exist for, under
// concurrent writes: a flight whose sequence was taken before a write
// numbered n is never joinable once that write returned, and one taken
// after every write returned is.
func TestEpochsJoinability(t *testing.T) {
	var e epochs
	tables := []string{"t"}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 2000 {
				before := e.now()
				n := e.bump(tables, true)
				if n <= before {
					t.Errorf("write took %d after the sequence was %d", n, before)
					return
				}
				if e.unchangedSince(before, tables, true) || e.unchangedSince(before, tables, false) {
					t.Errorf("flight at %d joinable after write %d returned", before, n)
					return
				}
			}
		})
	}
	wg.Wait()
	now := e.now()
	if !e.unchangedSince(now, tables, true) || !e.unchangedSince(now, tables, false) {
		t.Error("a flight started after every write is not joinable")
	}
	if e.unchangedSince(now-1, tables, true) {
		t.Error("the last write left its table's epoch behind")
	}
}

// TestInvalidationMessagesOnlyMoveEpochsForward applies other instances'
// invalidations (and resyncs) concurrently with local writes, through the
// Shield's message handler: every epoch is at least the number of the
// latest write or message that touched it.
func TestInvalidationMessagesOnlyMoveEpochsForward(t *testing.T) {
	clk := newFakeClock()
	tier := newMemTier(clk)
	s := New(Options{Clock: clk, InsecureTrustSharedTier: true}, Shared(tier)) // its messages carry no tags
	t.Cleanup(func() { _ = s.Close() })
	if s.tier == nil {
		t.Fatal("shared tier not attached")
	}
	stop, watch := watchEpochs(t, &s.epochs, "orders", "lines")
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			for i := range 1500 {
				if t.Failed() {
					return
				}
				inv := Invalidation{Source: fmt.Sprint("other-", w)}
				switch i % 7 {
				case 0:
					inv.All = true
				case 3:
					inv.Resync = true
				default:
					inv.Tables = []string{"orders", "lines"}[:1+i%2]
				}
				before := s.epochs.now()
				s.onInvalidation(inv)
				// The message's number is above before: the epochs it
				// stamped must be too.
				switch {
				case inv.All || inv.Resync:
					if s.epochs.unchangedSince(before, []string{"orders"}, true) {
						t.Errorf("all-tables message left a flight at %d joinable", before)
					}
				default:
					if s.epochs.unchangedSince(before, inv.Tables, true) {
						t.Errorf("message for %v left a flight at %d joinable", inv.Tables, before)
					}
				}
			}
		})
	}
	wg.Go(func() { // local writes meanwhile
		for range 1500 {
			before := s.epochs.now()
			s.epochs.bump([]string{"orders"}, true)
			if s.epochs.unchangedSince(before, []string{"orders"}, true) {
				t.Errorf("local write left a flight at %d joinable", before)
				return
			}
		}
	})
	wg.Wait()
	close(stop)
	watch.Wait()
	if got := s.tier.stats.received.Load(); got == 0 {
		t.Error("no message was applied")
	}
}

// watchEpochs watches the epochs of tables and of "all" from a goroutine of
// its own until stop is closed, failing t if one ever goes down; wait on
// the WaitGroup after closing stop.
func watchEpochs(t *testing.T, e *epochs, tables ...string) (chan struct{}, *sync.WaitGroup) {
	stop := make(chan struct{})
	watch := new(sync.WaitGroup)
	watch.Go(func() {
		last := make([]uint64, len(tables)+1)
		cur := make([]uint64, len(tables)+1)
		for {
			select {
			case <-stop:
				return
			default:
			}
			for i, tb := range tables {
				cur[i] = e.epochOf(tb)
			}
			cur[len(tables)] = e.all.Load()
			for i := range cur {
				if cur[i] < last[i] {
					t.Errorf("epoch %d went back from %d to %d", i, last[i], cur[i])
					return
				}
			}
			copy(last, cur)
		}
	})
	return stop, watch
}
