package memo_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/sqlflight/sqlflight/internal/memo"
)

func key(i int) string { return fmt.Sprintf("SELECT %d", i) }

// store puts value i under key(i) and checks it comes back.
func store(t *testing.T, g *memo.Gen[string, int], i int) {
	t.Helper()
	if got := g.Store(key(i), i); got != i {
		t.Fatalf("Store(%d) returned %d", i, got)
	}
}

// A full generation becomes the previous one and stays readable; the one
// before it is dropped.
func TestGenRotatesAtItsEntryBound(t *testing.T) {
	g := memo.NewGen[string, int](4, 1<<20, nil)
	for i := range 8 { // fills generations 1 and 2: 1 is dropped
		store(t, g, i)
	}
	for i := range 4 {
		if _, ok := g.Load(key(i)); ok {
			t.Fatalf("entry %d outlived two rotations", i)
		}
	}
	for i := 4; i < 8; i++ {
		if v, ok := g.Load(key(i)); !ok || v != i {
			t.Fatalf("entry %d of the previous generation: %d, %v", i, v, ok)
		}
	}
}

// A hit in the previous generation is promoted: it survives the rotation
// that drops its generation.
func TestGenPromotesHitsOfThePreviousGeneration(t *testing.T) {
	g := memo.NewGen[string, int](4, 1<<20, nil)
	for i := range 4 {
		store(t, g, i)
	}
	if v, ok := g.Load(key(0)); !ok || v != 0 {
		t.Fatalf("Load(0) = %d, %v", v, ok)
	}
	for i := 4; i < 7; i++ { // with the promoted 0, fills generation 2: 1 is dropped
		store(t, g, i)
	}
	if v, ok := g.Load(key(0)); !ok || v != 0 {
		t.Fatalf("a promoted entry was dropped with its old generation: %d, %v", v, ok)
	}
	if _, ok := g.Load(key(1)); ok {
		t.Fatal("an entry never read again outlived two rotations")
	}
}

// The byte bound rotates a generation of few entries.
func TestGenRotatesAtItsByteBound(t *testing.T) {
	size := func(k string, _ int) int64 { return int64(len(k)) }
	g := memo.NewGen[string, int](1000, 32, size)
	big := func(c byte) string { return fmt.Sprintf("%032d", c) }
	g.Store(big('a'), 1) // 32 bytes: rotates
	g.Store(big('b'), 2) // rotates again, dropping 'a'
	if _, ok := g.Load(big('a')); ok {
		t.Fatal("an entry over the byte bound outlived two rotations")
	}
	if v, ok := g.Load(big('b')); !ok || v != 2 {
		t.Fatalf("the last entry: %d, %v", v, ok)
	}
	// Without a size the byte bound is unused.
	h := memo.NewGen[string, int](1000, 1, nil)
	for i := range 100 {
		store(t, h, i)
	}
	for i := range 100 {
		if _, ok := h.Load(key(i)); !ok {
			t.Fatalf("entry %d lost without a size function", i)
		}
	}
}

// Racing stores of one key return one value to all of them, and
// concurrent loads, stores and rotations are race-free.
func TestGenConcurrent(t *testing.T) {
	g := memo.NewGen[string, *int](64, 1<<20, nil)
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				k := key((i*7 + w) % 200)
				v, ok := g.Load(k)
				if !ok {
					n := (i*7 + w) % 200
					v = g.Store(k, &n)
				}
				if want := key(*v); want != k {
					t.Errorf("%s: got the value of %s", k, want)
					return
				}
			}
		}()
	}
	wg.Wait()
	shared := memo.NewGen[string, *int](1<<20, 1<<20, nil)
	got := make([]*int, 16)
	for w := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := w
			got[w] = shared.Store("one", &n)
		}()
	}
	wg.Wait()
	for _, p := range got {
		if p != got[0] {
			t.Fatal("racing stores of one key returned two values")
		}
	}
}
