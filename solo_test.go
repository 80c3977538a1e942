package sqlflight

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// A leader alone in a flight that caches nothing reads the parent's rows
// itself, as a pass-through would: nothing is read ahead of its Next, the
// bytes it gets are its own, and a caller that comes while it still reads
// runs a flight of its own rather than wait for rows that are not recorded.
// A herd on a flight shares one origin as before.
func TestLoneLeaderReadsTheParentsRows(t *testing.T) {
	var nexts atomic.Int64
	d := &fakeDriver{onQuery: func(_ context.Context, _ string, args []driver.NamedValue) (driver.Rows, error) {
		id := args[0].Value.(int64)
		buf := []byte{byte('a' + id), 'x'} // reused for every row, as pgx does
		i := 0
		return &fakeRows{cols: []string{"v"}, next: func(dest []driver.Value) error {
			nexts.Add(1)
			if i == 3 {
				return io.EOF
			}
			i++
			buf[1] = byte('0' + i)
			dest[0] = buf
			return nil
		}}, nil
	}}
	db, s := openFake(t, d)
	ctx := context.Background()
	const q = "SELECT v FROM solo_t WHERE id = $1"

	rows, err := db.QueryContext(ctx, q, int64(1))
	if err != nil {
		t.Fatal(err)
	}
	if n := nexts.Load(); n != 0 {
		t.Fatalf("the parent's rows were read %d times before the caller asked for one", n)
	}
	// Another caller of the same key while the leader reads: its own flight.
	got, err := db.QueryContext(ctx, q, int64(1))
	if err != nil {
		t.Fatal(err)
	}
	other := byteRows(t, got)
	mine := byteRows(t, rows)
	want := []string{"b1", "b2", "b3"}
	for _, g := range [][]string{mine, other} {
		if len(g) != len(want) || g[0] != want[0] || g[1] != want[1] || g[2] != want[2] {
			t.Fatalf("rows %q, want %q", g, want)
		}
	}
	st := s.Stats()
	if q := d.queries.Load(); q != 2 || st.Flights != 2 || st.OriginExecutions != 2 {
		t.Fatalf("%d queries, %d flights, %d origins; want 2 each", q, st.Flights, st.OriginExecutions)
	}
	if st.InFlight != 0 {
		t.Fatalf("%d origins still in flight", st.InFlight)
	}
}

// byteRows reads rows of one []byte column to the end and closes them.
func byteRows(t *testing.T, rows *sql.Rows) []string {
	t.Helper()
	var out []string
	for rows.Next() {
		var v []byte
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		out = append(out, string(v))
	}
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

// A herd of callers that join before the origin's rows come back shares
// them: one origin, every caller its own copy.
func TestHerdStillSharesTheOrigin(t *testing.T) {
	const callers = 20
	var joined sync.WaitGroup
	joined.Add(callers - 1)
	release := make(chan struct{})
	d := &fakeDriver{onQuery: func(ctx context.Context, _ string, _ []driver.NamedValue) (driver.Rows, error) {
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return &fakeRows{cols: []string{"v"}, rows: [][]driver.Value{{[]byte("shared")}}}, nil
	}}
	db, s := openFake(t, d)
	ctx := context.Background()
	errs := make(chan error, callers)
	var wg sync.WaitGroup
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var v []byte
			err := db.QueryRowContext(ctx, "SELECT v FROM solo_herd_t WHERE id = $1", 7).Scan(&v)
			if err == nil && string(v) != "shared" {
				err = io.ErrUnexpectedEOF
			}
			errs <- err
		}()
	}
	for s.Stats().Followers < callers-1 {
		runtime.Gosched()
	}
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if q := d.queries.Load(); q != 1 {
		t.Fatalf("%d queries for a herd of %d, want 1", q, callers)
	}
}

// Rows that went to a lone leader end with its context, as a
// pass-through's do: a read blocked on the server returns once the caller's
// context is cancelled, and Close does not wait for the rest of the rows.
func TestLoneLeadersRowsEndWithItsContext(t *testing.T) {
	served := make(chan struct{})
	d := &fakeDriver{onQuery: func(octx context.Context, _ string, _ []driver.NamedValue) (driver.Rows, error) {
		first := true
		return &fakeRows{cols: []string{"v"}, next: func(dest []driver.Value) error {
			if first {
				first = false
				dest[0] = int64(1)
				return nil
			}
			close(served)
			<-octx.Done() // the rest never comes unless the origin's context ends
			return context.Cause(octx)
		}}, nil
	}}
	db, _ := openFake(t, d)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rows, err := db.QueryContext(ctx, "SELECT v FROM solo_cancel_t WHERE id = $1", 1)
	if err != nil {
		t.Fatal(err)
	}
	if !rows.Next() {
		t.Fatal(rows.Err())
	}
	go func() {
		<-served
		cancel()
	}()
	if rows.Next() {
		t.Fatal("a second row, none was sent")
	}
	if err := rows.Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("rows ended with %v, want context.Canceled", err)
	}
	_ = rows.Close()
}
