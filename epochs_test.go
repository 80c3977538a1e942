package sqlflight

// The epochs' own tests are internal/epoch's; these are the Shield's.

import (
	"fmt"
	"sync"
	"testing"

	"github.com/sqlflight/sqlflight/internal/epoch/epochtest"
)

// pinSet is the last write to a table that pinned exactly columns cols, as
// the in-memory tier (memTier) keeps it.
type pinSet struct {
	cols  []string // sorted
	epoch uint64
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
	stop, watch := epochtest.Watch(t, &s.epochs, "orders", "lines")
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
				before := s.epochs.Now()
				s.tier.Hear(inv)
				// The message's number is above before: the epochs it
				// stamped must be too.
				switch {
				case inv.All || inv.Resync:
					if s.epochs.UnchangedSince(before, []string{"orders"}, true) {
						t.Errorf("all-tables message left a flight at %d joinable", before)
					}
				default:
					if s.epochs.UnchangedSince(before, inv.Tables, true) {
						t.Errorf("message for %v left a flight at %d joinable", inv.Tables, before)
					}
				}
			}
		})
	}
	wg.Go(func() { // local writes meanwhile
		for range 1500 {
			before := s.epochs.Now()
			s.epochs.Bump([]string{"orders"}, true)
			if s.epochs.UnchangedSince(before, []string{"orders"}, true) {
				t.Errorf("local write left a flight at %d joinable", before)
				return
			}
		}
	})
	wg.Wait()
	close(stop)
	watch.Wait()
	if got := s.tier.Stats.Received.Load(); got == 0 {
		t.Error("no message was applied")
	}
}
