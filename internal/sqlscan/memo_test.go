package sqlscan

import (
	"fmt"
	"sync"
	"testing"
)

func TestScanMemoizes(t *testing.T) {
	sql := "SELECT * FROM memo_test WHERE id = $1"
	a, b := Scan(sql), Scan(sql)
	if a != b {
		t.Fatal("Scan returned two Results for one text")
	}
	if a.Verdict != Shareable || a.Tables[0] != "memo_test" {
		t.Fatalf("unexpected result %+v", a)
	}
	long := "SELECT 1" + fmt.Sprintf("%*s", memoMaxSQL, "")
	if Scan(long) == Scan(long) {
		t.Error("texts over the size limit must not be memoized")
	}
}

func TestMemoGenerations(t *testing.T) {
	m := newMemo(4, 1<<20)
	key := func(i int) string { return fmt.Sprintf("SELECT %d", i) }
	first := m.scan(key(0))
	for i := 1; i < 4; i++ { // fills generation 1: rotates
		m.scan(key(i))
	}
	if m.scan(key(0)) != first {
		t.Fatal("entry of the previous generation was lost")
	}
	// key(0) was promoted into the current generation; fill it and the next one.
	for i := 4; i < 12; i++ {
		m.scan(key(i))
	}
	if m.scan(key(1)) == nil {
		t.Fatal("nil result")
	}
	if _, ok := m.cur.Load().m.Load(key(1)); !ok {
		t.Error("re-scanned entry not in the current generation")
	}
	count := func(g *generation) (n int) {
		g.m.Range(func(_, _ any) bool { n++; return true })
		return n
	}
	if c, p := count(m.cur.Load()), count(m.prev.Load()); c > 4 || p > 4 {
		t.Errorf("generations hold %d and %d entries, bound is 4", c, p)
	}
	// Byte bound.
	m = newMemo(1000, 64)
	m.scan("SELECT 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'")
	m.scan("SELECT 'bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb'")
	if count(m.prev.Load()) == 0 {
		t.Error("byte bound did not rotate")
	}
}

func TestMemoConcurrent(t *testing.T) {
	m := newMemo(64, 1<<20)
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				sql := fmt.Sprintf("SELECT * FROM t%d WHERE id = $1", (i*7+g)%200)
				r := m.scan(sql)
				want := fmt.Sprintf("t%d", (i*7+g)%200)
				if len(r.Tables) != 1 || r.Tables[0] != want {
					t.Errorf("%s: tables %q", sql, r.Tables)
					return
				}
			}
		}()
	}
	wg.Wait()
}
