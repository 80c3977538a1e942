package sqlflight

// The epochs' own tests are internal/epoch's; these are the Shield's.

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// pinSet is the last write to a table that pinned exactly columns cols, as
// the in-memory tier (memTier) keeps it.
type pinSet struct {
	cols  []string // sorted
	epoch uint64
}

// disjoint reports whether the sorted sets a and b share no element.
func disjoint(a, b []string) bool {
	for i, j := 0, 0; i < len(a) && j < len(b); {
		switch c := strings.Compare(a[i], b[j]); {
		case c == 0:
			return false
		case c < 0:
			i++
		default:
			j++
		}
	}
	return true
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
				before := s.epochs.Now()
				s.onInvalidation(inv)
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
				cur[i] = e.TableEpoch(tb)
			}
			cur[len(tables)] = e.AllEpoch()
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
