package flight_test

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sqlflight/sqlflight/internal/flight"
)

// conn is a caller's connection as the group sees it.
type conn struct {
	owes atomic.Pointer[flight.Flight[string, struct{}]]
	heir uint64
}

func (c *conn) Owed() *atomic.Pointer[flight.Flight[string, struct{}]] { return &c.owes }
func (c *conn) Heir() uint64                                           { return c.heir }

// A leader and a follower share one flight; the leader runs the origin and
// finishes the flight, and both take its result.
func ExampleGroup() {
	var writes atomic.Uint64 // the sequence of the last write
	g := &flight.Group[string, struct{}]{Now: time.Now, Seq: writes.Load}
	unchanged := func(seq uint64) bool { return seq >= writes.Load() }
	noCache := func() bool { return false }

	leader, follower := new(conn), new(conn)
	f, lead := g.JoinOrLead("SELECT 1", unchanged, false, noCache, leader)
	g2, lead2 := g.JoinOrLead("SELECT 1", unchanged, false, noCache, follower)
	fmt.Println(lead, lead2, f == g2)

	res := "one"
	g.Finish(f, &res, nil, nil) // the leader's origin returned
	for _, lead := range []bool{true, false} {
		<-f.Done()
		r, err := f.Outcome(lead)
		fmt.Println(*r, err)
	}
	g.Release(leader)
	g.Release(follower)
	// Output:
	// true false true
	// one <nil>
	// one <nil>
}
