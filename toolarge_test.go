package sqlflight

import (
	"context"
	"database/sql/driver"
	"runtime"
	"strings"
	"testing"
)

// The too-large memo keeps digests, not keys: 100 reads whose keys are a
// megabyte each (their argument) and whose results are too large to share
// leave the memo holding a few kilobytes, not 100 MiB. (Under a TTL: a
// lone leader of a read that caches nothing reads its rows itself, and
// learns nothing of their size.)
func TestTooLargeMemoKeepsNoKeys(t *testing.T) {
	d := &fakeDriver{onQuery: func(context.Context, string, []driver.NamedValue) (driver.Rows, error) {
		return &fakeRows{cols: []string{"v"}, rows: [][]driver.Value{{int64(1)}, {int64(2)}}}, nil
	}}
	db, s := openFake(t, d, Options{MaxResultRows: 1})
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	read := func(i int) {
		arg := strings.Repeat("k", 1<<20-4096) + string(rune('a'+i%26)) + strings.Repeat("x", i/26)
		rows, err := db.QueryContext(ctx, "/* sqlflight: ttl=1m */ SELECT v FROM toolarge_memo_t WHERE k = $1", arg)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
		}
		if err := rows.Close(); err != nil {
			t.Fatal(err)
		}
	}
	read(0)
	heap := func() uint64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	const reads = 100
	for i := 1; i <= reads; i++ {
		read(i)
	}
	retained := int64(heap()) - int64(before)
	if got := s.Stats().TooLarge; got != reads+1 {
		t.Fatalf("TooLarge = %d, want %d (%v)", got, reads+1, s.Stats().BypassReasons)
	}
	if n := s.tooLarge.Len(); n != reads+1 {
		t.Fatalf("the memo holds %d keys, want %d", n, reads+1)
	}
	t.Logf("%d reads with 1 MiB keys retained %d bytes", reads, retained)
	if retained > 8<<20 {
		t.Errorf("%d reads with 1 MiB keys retained %d bytes, want at most 8 MiB", reads, retained)
	}
	runtime.KeepAlive(db)
}

// The too-large memo follows the limits in force: a result of 20 rows
// under maxrows=10 goes unshared, and the same key read at once under
// maxrows=100 forms a flight again (and a tighter limit still skips). Under
// a TTL, so that the lone leader's result is recorded.
func TestTooLargeMemoFollowsLimits(t *testing.T) {
	rows := make([][]driver.Value, 20)
	for i := range rows {
		rows[i] = []driver.Value{int64(i)}
	}
	d := &fakeDriver{onQuery: func(context.Context, string, []driver.NamedValue) (driver.Rows, error) {
		return &fakeRows{cols: []string{"v"}, rows: rows}, nil
	}}
	db, s := openFake(t, d)
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	read := func(maxrows string) {
		t.Helper()
		r, err := db.QueryContext(ctx, "/* sqlflight: ttl=1m maxrows="+maxrows+" */ SELECT v FROM toolarge_limits_t WHERE k = $1", 7)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for r.Next() {
			n++
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		if n != 20 {
			t.Fatalf("maxrows=%s: %d rows, want 20", maxrows, n)
		}
	}
	read("10")
	st := s.Stats()
	if st.TooLarge != 1 || st.Flights != 1 {
		t.Fatalf("after maxrows=10: TooLarge %d, Flights %d; want 1, 1", st.TooLarge, st.Flights)
	}
	read("5") // tighter: still too large, skips sharing
	st = s.Stats()
	if got := st.BypassReasons[bypassTooLarge]; got != 1 || st.Flights != 1 {
		t.Fatalf("after maxrows=5: too-large bypasses %d, Flights %d; want 1, 1", got, st.Flights)
	}
	read("100")
	st = s.Stats()
	if got := st.BypassReasons[bypassTooLarge]; got != 1 || st.Flights != 2 || st.TooLarge != 1 {
		t.Fatalf("after maxrows=100: too-large bypasses %d, Flights %d, TooLarge %d; want 1, 2, 1 (the raised limit was not followed)",
			got, st.Flights, st.TooLarge)
	}
	// Shared now: two more reads under maxrows=100 are flights, never bypasses.
	read("100")
	if got := s.Stats().BypassReasons[bypassTooLarge]; got != 1 {
		t.Fatalf("too-large bypasses %d after a shared result, want 1", got)
	}
}
