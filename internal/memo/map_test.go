package memo_test

import (
	"sync"
	"testing"

	"github.com/sqlflight/sqlflight/internal/memo"
)

// entries returns how many entries m's generation holds.
func entries[V any](m *memo.Map[string, V]) (n int) {
	m.Range(func(string, V) bool { n++; return true })
	return n
}

// A Map of 4 entries holds 4; the fifth new entry drops them and is the
// first of the next generation, which then holds five (the first one
// uncounted) before it is dropped in turn.
func TestMapDropsEverythingPastItsEntryBound(t *testing.T) {
	m := memo.NewMap[string, int](4, 1<<20, nil)
	for i := range 4 {
		if v, loaded := m.LoadOrStore(key(i), i); loaded || v != i {
			t.Fatalf("LoadOrStore(%d) = %d, %v", i, v, loaded)
		}
	}
	if n := entries(m); n != 4 {
		t.Fatalf("%d entries, want 4", n)
	}
	m.LoadOrStore(key(4), 4)
	if _, ok := m.Load(key(0)); ok {
		t.Fatal("an entry outlived the generation past its bound")
	}
	if v, ok := m.Load(key(4)); !ok || v != 4 || entries(m) != 1 {
		t.Fatalf("the entry past the bound: %d, %v; %d entries", v, ok, entries(m))
	}
	for i := 5; i < 9; i++ {
		m.LoadOrStore(key(i), i)
	}
	if n := entries(m); n != 5 {
		t.Fatalf("%d entries in the second generation, want 5", n)
	}
	m.LoadOrStore(key(9), 9)
	if n := entries(m); n != 1 {
		t.Fatalf("%d entries after the second drop, want 1", n)
	}
}

// The byte bound drops the generation too; CompareAndSwap replaces only
// the value it was given and counts nothing.
func TestMapBytesAndCompareAndSwap(t *testing.T) {
	size := func(k string, _ *int) int64 { return int64(len(k)) }
	m := memo.NewMap[string, *int](1000, 20, size)
	one, two := 1, 2
	m.LoadOrStore("0123456789", &one) // 10 bytes
	m.LoadOrStore("abcdefghij", &two) // 20: at the bound, kept
	if entries(m) != 2 {
		t.Fatalf("%d entries at the byte bound, want 2", entries(m))
	}
	if m.CompareAndSwap("abcdefghij", &one, &one) {
		t.Fatal("CompareAndSwap replaced a value it was not given")
	}
	for range 100 {
		if !m.CompareAndSwap("abcdefghij", &two, &two) {
			t.Fatal("CompareAndSwap did not replace the value it was given")
		}
	}
	if entries(m) != 2 {
		t.Fatal("CompareAndSwap counted against the bound")
	}
	m.LoadOrStore("k", &one) // 21: past it
	if _, ok := m.Load("0123456789"); ok || entries(m) != 1 {
		t.Fatalf("the byte bound did not drop the generation: %d entries", entries(m))
	}
}

// Racing LoadOrStores of one key share one value; concurrent use with
// drops is race-free.
func TestMapConcurrent(t *testing.T) {
	m := memo.NewMap[string, *int](64, 1<<20, nil)
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				n := (i*7 + w) % 200
				v, ok := m.Load(key(n))
				if !ok {
					v, _ = m.LoadOrStore(key(n), &n)
				}
				if *v != n {
					t.Errorf("%s: got the value of %d", key(n), *v)
					return
				}
			}
		}()
	}
	wg.Wait()
	shared := memo.NewMap[string, *int](1<<20, 1<<20, nil)
	got := make([]*int, 16)
	for w := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := w
			got[w], _ = shared.LoadOrStore("one", &n)
		}()
	}
	wg.Wait()
	for _, p := range got {
		if p != got[0] {
			t.Fatal("racing stores of one key returned two values")
		}
	}
}
