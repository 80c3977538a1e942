package stats_test

import (
	"sync"
	"testing"

	"github.com/sqlflight/sqlflight/internal/stats"
)

// Bypasses counts each reason apart and all of them in Total.
func TestBypasses(t *testing.T) {
	var b stats.Bypasses
	if r := b.Reasons(); r == nil || len(r) != 0 || b.Total() != 0 {
		t.Fatalf("empty: %v, %d", r, b.Total())
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				b.Add("exec")
				b.Add("write")
			}
		})
	}
	wg.Wait()
	b.Add("policy")
	if r := b.Reasons(); r["exec"] != 800 || r["write"] != 800 || r["policy"] != 1 || len(r) != 3 || b.Total() != 1601 {
		t.Errorf("reasons %v, total %d", r, b.Total())
	}
}
