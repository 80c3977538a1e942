package stats_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight/internal/stats"
)

// Names counts each policy name apart up to MaxNames, later names under
// OtherName, and the empty name nowhere.
func TestNames(t *testing.T) {
	var ns stats.Names
	if ns.Of("") != nil {
		t.Fatal("the empty name has counters")
	}
	c := ns.Of("users")
	if ns.Of("users") != c {
		t.Fatal("one name, two counters")
	}
	c.Queries.Add(2)
	c.NegHits.Add(1)
	c.OriginDuration.Observe(time.Millisecond)
	for i := len(ns.Snapshot()); i < stats.MaxNames; i++ {
		ns.Of(fmt.Sprint("name", i))
	}
	ns.Of("late").Misses.Add(1)
	ns.Of("later").Misses.Add(1)
	snap := ns.Snapshot()
	if len(snap) != stats.MaxNames+1 {
		t.Errorf("%d names counted, want %d and %q", len(snap), stats.MaxNames, stats.OtherName)
	}
	if u := snap["users"]; u.Queries != 2 || u.NegativeHits != 1 || u.OriginDuration.Count != 1 {
		t.Errorf("users: %+v", u)
	}
	if o := snap[stats.OtherName]; o.Misses != 2 {
		t.Errorf("%s: %+v", stats.OtherName, o)
	}
	if _, ok := snap["late"]; ok {
		t.Error("a name past MaxNames is counted apart")
	}
}
