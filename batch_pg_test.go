package sqlflight

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/sqlflight/sqlflight/internal/fakeclock"
)

// batchFixture is a table of n rows (id, v = 'v'||id, n = id*7) in the test
// database, dropped when the test ends, and a Shield's db over it.
type batchFixture struct {
	db    *sql.DB
	s     *Shield
	raw   *sql.DB
	table string
}

func newBatchFixture(t *testing.T, rows int, opts Options) *batchFixture {
	t.Helper()
	dsn := postgresDSN(t)
	raw, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	f := &batchFixture{raw: raw, table: fmt.Sprintf("batch_%d", time.Now().UnixNano())}
	t.Cleanup(func() {
		_, _ = raw.Exec("DROP TABLE IF EXISTS " + f.table)
		_ = raw.Close()
	})
	for _, q := range []string{
		"CREATE TABLE " + f.table + " (id int PRIMARY KEY, v text, n int, g int, s text UNIQUE)",
		fmt.Sprintf("INSERT INTO %s SELECT i, 'v'||i, i*7, i %% 10, 's'||i FROM generate_series(1, %d) i", f.table, rows),
	} {
		if _, err := raw.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	f.s = New(opts)
	c, err := f.s.Wrap(stdlib.GetDefaultDriver()).(driver.DriverContext).OpenConnector(dsn)
	if err != nil {
		t.Fatal(err)
	}
	f.db = sql.OpenDB(c)
	t.Cleanup(func() { _ = f.db.Close(); _ = f.s.Close() })
	return f
}

// read reads the rows of id through q.
func (f *batchFixture) read(ctx context.Context, q string, args ...any) ([][3]any, error) {
	rows, err := f.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out [][3]any
	for rows.Next() {
		var id, n int64
		var v string
		if err := rows.Scan(&id, &v, &n); err != nil {
			return nil, err
		}
		out = append(out, [3]any{id, v, n})
	}
	return out, rows.Err()
}

func TestBatchSmoke(t *testing.T) {
	f := newBatchFixture(t, 2000, Options{})
	q := "SELECT id, v, n FROM " + f.table + " WHERE id = $1"
	ctx := context.Background()
	if _, err := f.read(ctx, q, 1); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, 1000)
	for i := 1; i <= 1000; i++ {
		wg.Add(1)
		go func(id int) {
			defer wg.Done()
			<-start
			rows, err := f.read(ctx, q, id)
			switch {
			case err != nil:
				errs <- err
			case len(rows) != 1 || rows[0] != [3]any{int64(id), fmt.Sprintf("v%d", id), int64(id * 7)}:
				errs <- fmt.Errorf("id %d: %v", id, rows)
			}
		}(i)
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	st := f.s.Stats()
	t.Logf("origin %d batches %d batched %d largest %d alone %d flights %d", st.OriginExecutions, st.Batches, st.BatchedReads, st.BatchLargest, st.BatchAlone, st.Flights)
}

// TestBatchAloneAllocations: a miss of a batchable statement that finds
// nothing of its statement in flight runs alone, at once; what asking its
// batch group costs it is a few allocations (its group's key, the group: 3 when written),
// measured against the same read under nobatch.
func TestBatchAloneAllocations(t *testing.T) {
	f := newBatchFixture(t, 100, Options{})
	ctx := context.Background()
	q := "SELECT id, v, n FROM " + f.table + " WHERE id = $1"
	measure := func(q string) float64 {
		var id, n int64
		var v string
		i := int64(0)
		read := func() {
			i = i%100 + 1
			if err := f.db.QueryRowContext(ctx, q, i).Scan(&id, &v, &n); err != nil || id != i {
				t.Fatalf("id %d: %d, %v", i, id, err)
			}
		}
		read()
		return testing.AllocsPerRun(200, read)
	}
	batched, alone := measure(q), measure("/* sqlflight: nobatch */ "+q)
	t.Logf("a lone miss: %.1f allocations, %.1f under nobatch", batched, alone)
	if st := f.s.Stats(); st.Batches != 0 {
		t.Fatalf("%d batches of sequential reads", st.Batches)
	}
	if batched > alone+5 {
		t.Fatalf("a lone miss of a batchable statement allocates %.1f times, %.1f under nobatch: want at most 5 more", batched, alone)
	}
}

// TestBatchRefreshes: the stale hits of many keys start a background
// refresh each; the first runs alone, and the others, which come while it
// runs (here: it waits for a lock another session holds), refresh their
// entries in one statement. Every entry is fresh again afterwards.
func TestBatchRefreshes(t *testing.T) {
	clock := fakeclock.New()
	f := newBatchFixture(t, 100, Options{Clock: clock})
	ctx := context.Background()
	q := "/* sqlflight: soft=1s hard=1h jitter=0% beta=0 */ SELECT id, v, n FROM " + f.table + " WHERE id = $1"
	const keys = 50
	for id := 1; id <= keys; id++ {
		if rows, err := f.read(ctx, q, id); err != nil || len(rows) != 1 {
			t.Fatalf("id %d: %v %v", id, rows, err)
		}
	}
	clock.Add(2 * time.Second) // every entry stale
	lock, err := f.raw.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lock.Rollback() }()
	if _, err := lock.ExecContext(ctx, "LOCK TABLE "+f.table+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	before := f.s.Stats()
	for id := 1; id <= keys; id++ { // stale hits: served at once, each starts a refresh
		if rows, err := f.read(ctx, q, id); err != nil || len(rows) != 1 {
			t.Fatalf("id %d: %v %v", id, rows, err)
		}
	}
	if st := f.s.Stats(); st.StaleHits-before.StaleHits != keys || st.Refreshes-before.Refreshes != keys {
		t.Fatalf("%d stale hits, %d refreshes; want %d each", st.StaleHits-before.StaleHits, st.Refreshes-before.Refreshes, keys)
	}
	if err := lock.Rollback(); err != nil {
		t.Fatal(err)
	}
	for f.s.Stats().Fills-before.Fills < keys {
		time.Sleep(time.Millisecond)
	}
	st := f.s.Stats()
	if execs := st.OriginExecutions - before.OriginExecutions; execs != 2 || st.Batches-before.Batches != 1 ||
		st.BatchedReads-before.BatchedReads != keys-1 {
		t.Fatalf("%d origin executions, %d batches answering %d refreshes; want 2, 1 answering %d",
			execs, st.Batches-before.Batches, st.BatchedReads-before.BatchedReads, keys-1)
	}
	fresh := st.FreshHits
	for id := 1; id <= keys; id++ {
		rows, err := f.read(ctx, q, id)
		if err != nil || len(rows) != 1 || rows[0] != [3]any{int64(id), fmt.Sprintf("v%d", id), int64(id * 7)} {
			t.Fatalf("id %d after its refresh: %v %v", id, rows, err)
		}
	}
	if got := f.s.Stats().FreshHits - fresh; got != keys {
		t.Fatalf("%d fresh hits after the refreshes, want %d", got, keys)
	}
}
