package sqlflight

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
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
	f := newBatchFixture(t, 100, Options{Clock: clock, BatchMaxWait: -1})
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

// faultyParent is pgx's stdlib driver whose connections fail a batched
// statement of the table named by fault.table as fault.how says: "panic",
// "goexit" or "badconn".
type faultyParent struct{ fault *batchFault }

type batchFault struct {
	table string
	how   atomic.Value // string
}

func (d faultyParent) Open(name string) (driver.Conn, error) {
	c, err := stdlib.GetDefaultDriver().Open(name)
	if err != nil {
		return nil, err
	}
	return &faultyConn{Conn: c.(*stdlib.Conn), fault: d.fault}, nil
}

type faultyConn struct {
	*stdlib.Conn
	fault *batchFault
}

func (c *faultyConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	if how, _ := c.fault.how.Load().(string); strings.Contains(q, "= ANY($") && strings.Contains(q, c.fault.table) {
		switch how {
		case "panic":
			panic("the parent panicked")
		case "goexit":
			runtime.Goexit()
		case "badconn":
			return nil, driver.ErrBadConn
		}
	}
	return c.Conn.QueryContext(ctx, q, args)
}

// gatherBehindLock runs first, then, once its statement waits for the
// lock on table held by another session, rest(i) for i < n, each on a
// goroutine of its own; it releases the lock once pending reads wait in
// s's batches, and waits for every read.
func gatherBehindLock(t *testing.T, raw *sql.DB, s *Shield, table string, pending int64, first func(), rest func(i int), n int) {
	t.Helper()
	ctx := context.Background()
	lock, err := raw.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lock.Rollback() }()
	if _, err := lock.ExecContext(ctx, "LOCK TABLE "+table+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(first)
	for lockWaiters(t, raw, table) < 1 {
		time.Sleep(time.Millisecond)
	}
	for i := range n {
		wg.Go(func() { rest(i) })
	}
	for s.Stats().BatchPending < pending {
		time.Sleep(time.Millisecond)
	}
	if err := lock.Rollback(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
}

// lockWaiters returns how many statements naming table wait for a lock.
func lockWaiters(t *testing.T, raw *sql.DB, table string) int {
	t.Helper()
	var n int
	if err := raw.QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'
		AND query LIKE '%'||$1||'%' AND query NOT LIKE '%pg_stat_activity%'`, table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestBatchFaults: a batch whose statement panics, calls runtime.Goexit or
// breaks its (spare) connection leaves nothing behind. A panic or a Goexit
// fails every member with ErrOriginPanicked, as it fails an origin's
// callers, and the next reads of the statement run (the group's turn came
// back); a broken connection sends each member to run alone on its own
// connection (driver.ErrBadConn would make database/sql throw the member's
// healthy connection away, and close a sql.Conn).
func TestBatchFaults(t *testing.T) {
	for _, how := range []string{"panic", "goexit", "badconn"} {
		t.Run(how, func(t *testing.T) {
			dsn := postgresDSN(t)
			raw, err := sql.Open("pgx", dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer raw.Close()
			table := fmt.Sprintf("batchfault_%d", time.Now().UnixNano())
			if _, err := raw.Exec("CREATE TABLE " + table + " (id int PRIMARY KEY, v text)"); err != nil {
				t.Fatal(err)
			}
			defer raw.Exec("DROP TABLE " + table)
			if _, err := raw.Exec("INSERT INTO " + table + " SELECT i, 'v'||i FROM generate_series(1, 50) i"); err != nil {
				t.Fatal(err)
			}
			fault := &batchFault{table: table}
			s := New(Options{BatchMaxWait: -1})
			defer s.Close()
			name := "sqlflight-fault-" + table
			sql.Register(name, s.Wrap(faultyParent{fault}))
			db, err := sql.Open(name, dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			ctx := context.Background()
			q := "SELECT v FROM " + table + " WHERE id = $1"
			var v string
			if err := db.QueryRowContext(ctx, q, 1).Scan(&v); err != nil {
				t.Fatal(err)
			}
			fault.how.Store(how)
			const members = 3
			conns := make([]*sql.Conn, members)
			for i := range conns {
				if conns[i], err = db.Conn(ctx); err != nil {
					t.Fatal(err)
				}
				defer conns[i].Close()
			}
			errs := make([]error, members)
			vals := make([]string, members)
			gatherBehindLock(t, raw, s, table, members, func() {
				var v string
				if err := db.QueryRowContext(ctx, q, 1).Scan(&v); err != nil {
					t.Errorf("the read alone: %v", err)
				}
			}, func(i int) { errs[i] = conns[i].QueryRowContext(ctx, q, 10+i).Scan(&vals[i]) }, members)
			for i, err := range errs {
				switch how {
				case "badconn":
					if err != nil || vals[i] != fmt.Sprintf("v%d", 10+i) {
						t.Errorf("member %d: %q, %v; want its row, read alone", i, vals[i], err)
					}
				default:
					if !errors.Is(err, ErrOriginPanicked) {
						t.Errorf("member %d: %v, want ErrOriginPanicked", i, err)
					}
				}
				// The member's own connection is still good.
				if err := conns[i].QueryRowContext(ctx, "SELECT 'x'").Scan(&v); err != nil {
					t.Errorf("member %d's connection afterwards: %v", i, err)
				}
			}
			fault.how.Store("")
			if err := db.QueryRowContext(ctx, q, 20).Scan(&v); err != nil || v != "v20" {
				t.Fatalf("a later read of the statement: %q, %v", v, err)
			}
			if st := s.Stats(); st.BatchPending != 0 || st.InFlight != 0 {
				t.Fatalf("left behind: %d pending, %d in flight", st.BatchPending, st.InFlight)
			}
		})
	}
}

// TestBatchScopedSessions: reads on sessions changed under a context's
// scope (SET search_path) never batch: a batch runs on a spare connection,
// which is not such a session, and would read another schema's table.
func TestBatchScopedSessions(t *testing.T) {
	f := newBatchFixture(t, 50, Options{})
	ctx := WithScope(context.Background(), "tenant")
	schema := f.table + "_s"
	for _, q := range []string{"CREATE SCHEMA " + schema, "CREATE TABLE " + schema + "." + f.table + " (id int PRIMARY KEY, v text, n int)",
		"INSERT INTO " + schema + "." + f.table + " SELECT i, 'tenant'||i, i FROM generate_series(1, 50) i"} {
		if _, err := f.raw.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	defer f.raw.Exec("DROP SCHEMA " + schema + " CASCADE")
	const members = 5
	conns := make([]*sql.Conn, members+1)
	for i := range conns {
		var err error
		if conns[i], err = f.db.Conn(ctx); err != nil {
			t.Fatal(err)
		}
		defer conns[i].Close()
		if _, err := conns[i].ExecContext(ctx, "SET search_path = "+schema+", public"); err != nil {
			t.Fatal(err)
		}
	}
	q := "/* sqlflight: ttl=1m */ SELECT v FROM " + f.table + " WHERE id = $1"
	read := func(c *sql.Conn, id int) error {
		var v string
		if err := c.QueryRowContext(ctx, q, id).Scan(&v); err != nil {
			return err
		}
		if want := fmt.Sprintf("tenant%d", id); v != want {
			return fmt.Errorf("id %d: %q, want %q (the session's schema)", id, v, want)
		}
		return nil
	}
	if err := read(conns[0], 1); err != nil {
		t.Fatal(err)
	}
	errs := make([]error, members)
	// Nothing gathers: each read waits for the lock itself.
	lock, err := f.raw.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lock.Exec("LOCK TABLE " + schema + "." + f.table + " IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range members {
		wg.Go(func() { errs[i] = read(conns[i+1], 10+i) })
	}
	for lockWaiters(t, f.raw, f.table) < members {
		if p := f.s.Stats().BatchPending; p > 0 {
			t.Errorf("%d reads of scoped sessions wait in a batch", p)
			break
		}
		time.Sleep(time.Millisecond)
	}
	_ = lock.Rollback()
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	for i := range members { // and what was cached is the session's
		if err := read(conns[0], 10+i); err != nil {
			t.Error(err)
		}
	}
	if st := f.s.Stats(); st.Batches != 0 || st.BatchPending != 0 {
		t.Fatalf("%d batches of reads on scoped sessions", st.Batches)
	}
}

// TestBatchMaxWait: a batch waits for the statement in flight at most
// BatchMaxWait, then starts beside it: a read of one key that runs long
// (here: it waits for a lock) holds up the others' by no more. (No time
// is measured: the test sees the batch reach the server while the first
// read still waits there.)
func TestBatchMaxWait(t *testing.T) {
	f := newBatchFixture(t, 50, Options{BatchMaxWait: time.Millisecond})
	ctx := context.Background()
	q := "SELECT id, v, n FROM " + f.table + " WHERE id = $1"
	if _, err := f.read(ctx, q, 1); err != nil {
		t.Fatal(err)
	}
	lock, err := f.raw.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lock.Rollback() }()
	if _, err := lock.ExecContext(ctx, "LOCK TABLE "+f.table+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	waiting := func(want int) {
		t.Helper()
		for lockWaiters(t, f.raw, f.table) < want {
			time.Sleep(time.Millisecond)
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	wg.Go(func() { _, errs[0] = f.read(ctx, q, 1) })
	waiting(1)
	for i := 1; i < 4; i++ {
		wg.Go(func() {
			rows, err := f.read(ctx, q, 10+i)
			if err == nil && (len(rows) != 1 || rows[0][0] != int64(10+i)) {
				err = fmt.Errorf("id %d: %v", 10+i, rows)
			}
			errs[i] = err
		})
	}
	waiting(2) // the batch, beside the first read, both behind the lock
	if err := lock.Rollback(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if st := f.s.Stats(); st.Batches < 1 || st.BatchPending != 0 {
		t.Fatalf("%d batches, %d pending", st.Batches, st.BatchPending)
	}
}

// TestBatchStatementStats: the statement's statistics count a batch as one
// origin execution (the database's), with the rows of all its members.
func TestBatchStatementStats(t *testing.T) {
	f := newBatchFixture(t, 50, Options{BatchMaxWait: -1})
	ctx := context.Background()
	q := "/* sqlflight: name=batched */ SELECT id, v, n FROM " + f.table + " WHERE id = $1"
	if _, err := f.read(ctx, q, 1); err != nil {
		t.Fatal(err)
	}
	before := f.s.Stats().Names["batched"].OriginExecutions
	const members = 10
	errs := make([]error, members)
	gatherBehindLock(t, f.raw, f.s, f.table, members, func() {
		if _, err := f.read(ctx, q, 1); err != nil {
			t.Error(err)
		}
	}, func(i int) { _, errs[i] = f.read(ctx, q, 10+i) }, members)
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := f.s.Stats().Names["batched"].OriginExecutions - before; got != 2 {
		t.Fatalf("the name counts %d origin executions, want 2 (the read alone and the batch)", got)
	}
	found := false
	for _, st := range f.s.Statements() {
		if !strings.Contains(st.SQL, f.table) {
			continue
		}
		found = true
		if st.OriginExecutions != 3 {
			t.Fatalf("the statement counts %d origin executions, want 3 (the first read, the read alone, the batch)", st.OriginExecutions)
		}
	}
	if !found {
		t.Fatal("the statement is not counted")
	}
}
