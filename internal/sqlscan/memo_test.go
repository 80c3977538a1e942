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

// The scan memo is two generations of 4 texts here: a text scanned again
// while its generation is current or previous is the same Result (and is
// promoted); one not scanned for two rotations is parsed anew. Its byte
// bound counts the SQL and its normalized text.
func TestMemoGenerations(t *testing.T) {
	m := newMemo(4, 1<<20)
	key := func(i int) string { return fmt.Sprintf("SELECT %d", i) }
	first, second := m.scan(key(0)), m.scan(key(1))
	for i := 2; i < 4; i++ { // fills generation 1: rotates
		m.scan(key(i))
	}
	if m.scan(key(0)) != first {
		t.Fatal("entry of the previous generation was lost")
	}
	// key(0) was promoted into the current generation; fill it: generation 1 goes.
	for i := 4; i < 7; i++ {
		m.scan(key(i))
	}
	if m.scan(key(0)) != first {
		t.Fatal("a promoted entry was lost")
	}
	if m.scan(key(1)) == second {
		t.Fatal("an entry outlived two rotations")
	}
	// Byte bound: each of these counts 2×37 bytes, over 64.
	m = newMemo(1000, 64)
	a := m.scan("SELECT 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'")
	m.scan("SELECT 'bbbbbbbbbbbbbbbbbbbbbbbbbbbbbb'")
	if m.scan("SELECT 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'") == a {
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
