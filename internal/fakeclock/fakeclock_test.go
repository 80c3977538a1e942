package fakeclock_test

import (
	"sync"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight/internal/fakeclock"
)

// TestClockMovesOnlyWhenMoved: Now stays until Add or Set, concurrently.
func TestClockMovesOnlyWhenMoved(t *testing.T) {
	c := fakeclock.New()
	if !c.Now().Equal(fakeclock.Start) {
		t.Fatalf("New starts at %v", c.Now())
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				c.Add(time.Millisecond)
				_ = c.Now()
			}
		}()
	}
	wg.Wait()
	if got := c.Now().Sub(fakeclock.Start); got != 800*time.Millisecond {
		t.Fatalf("moved %v, want 800ms", got)
	}
	at := time.Unix(1e9, 0)
	c.Set(at)
	if !c.Now().Equal(at) || !fakeclock.At(at).Now().Equal(at) {
		t.Fatal("Set or At does not put the clock there")
	}
}
