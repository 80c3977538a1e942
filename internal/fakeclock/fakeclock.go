// Package fakeclock is a clock for tests: its time moves only when a test
// moves it (Add, Set), so that what depends on time is tested without
// waiting and without asserting on the wall clock. It is safe for
// concurrent use.
package fakeclock

import (
	"sync"
	"time"
)

// Clock is a clock whose time moves only with Add and Set.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// Start is the time a Clock from New starts at.
var Start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// New returns a Clock at Start.
func New() *Clock { return At(Start) }

// At returns a Clock at t.
func At(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Add moves the clock by d (backwards for a negative d).
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// Set puts the clock at t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}
