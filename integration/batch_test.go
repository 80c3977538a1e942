package integration

import (
	"context"
	"crypto/md5"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/lib/pq"

	"github.com/sqlflight/sqlflight"
)

// Batches of many keys (batch.go): while a read of a single-table SELECT
// keyed by one equality is in flight, the reads of the same statement with
// other keys that miss gather, and run as one statement (= ANY of the keys)
// once the one in flight is done. The tests hold the first read in flight
// on the server itself — another session holds an ACCESS EXCLUSIVE lock on
// the test's table (pg_stat_activity shows the read waiting) — start the
// other readers, wait until the Shield counts their flights, release the
// lock, and count in pg_stat_statements the statements the server ran on
// the table. To hold a batch that already started, MaxInflight is 1 and
// the slot goes first to a read of another table, held by that table's
// lock. No assertion depends on time.

// batchParent is a PostgreSQL driver (and mode) the tests run through.
type batchParent struct {
	name string
	// mode is pgx's default_query_exec_mode ("" leaves pgx's default).
	mode string
	pq   bool // lib/pq instead of pgx v5
}

var batchParents = []batchParent{
	{name: "pgx5"},
	{name: "pgx5_simple_protocol", mode: "simple_protocol"},
	{name: "libpq", pq: true},
}

// batchRow is a row of the test table's reads: id, v, n.
type batchRow struct {
	ID int64
	V  string
	N  int64
}

// batchEnv is one subtest's table, its Shield over one parent, and the
// sessions the test watches the server with.
type batchEnv struct {
	t     *testing.T
	ctx   context.Context
	admin *sql.DB // pgx v5 without sqlflight: setup, locks, pg_stat_*
	raw   *sql.DB // the parent without sqlflight: what an unbatched read gets
	db    *sql.DB
	sh    *sqlflight.Shield
	table string
	// dealloc is pg_stat_statements' count of evictions when statements
	// last read the count: an eviction since makes the count unreliable.
	dealloc int64

	// What the test's end undoes, in this order: the locks still held
	// roll back, then the goroutines still running are waited for.
	mu    sync.Mutex
	locks []interface{ Rollback() error }
	goes  []chan struct{}
}

// forEachBatchParent runs f as a subtest for pgx v5 (default mode and the
// simple protocol) and lib/pq, each on a table of its own and a Shield of
// its own made with opts.
func forEachBatchParent(t *testing.T, opts []sqlflight.Option, f func(t *testing.T, bx *batchEnv)) {
	t.Helper()
	dsn := postgresDSN(t)
	admin := openRaw(t, dsn)
	requireStatementStats(t, admin)
	for _, p := range batchParents {
		t.Run(p.name, func(t *testing.T) {
			f(t, newBatchEnv(t, admin, dsn, p, opts...))
		})
	}
}

// newBatchEnv creates the subtest's table: id -3 and 1..41, v = 'v'||id,
// n = id*7, g = (id-1)/3+1 (three rows a group, 14 holds 40 and 41, 0
// holds -3), s = 's'||id and u = md5(id::text)::uuid.
func newBatchEnv(t *testing.T, admin *sql.DB, dsn string, p batchParent, opts ...sqlflight.Option) *batchEnv {
	t.Helper()
	opts = holdBatches(opts)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	bx := &batchEnv{t: t, ctx: ctx, admin: admin, table: "batch_" + uniqueID(t)}
	mustExec(t, admin,
		fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, v text NOT NULL, n int NOT NULL, g int NOT NULL, s text UNIQUE, u uuid UNIQUE)`, bx.table),
		fmt.Sprintf(`INSERT INTO %s SELECT i, 'v' || i, i * 7, CASE WHEN i > 0 THEN (i - 1) / 3 + 1 ELSE 0 END, 's' || i, md5(i::text)::uuid
			FROM generate_series(1, 41) i UNION ALL SELECT -3, 'v-3', -21, 0, 's-3', md5('-3')::uuid`, bx.table))
	cleanupExec(t, admin, "DROP TABLE IF EXISTS "+bx.table)
	switch {
	case p.pq:
		bx.db, bx.sh = openParent(t, "libpq", dsn, opts...)
		c, err := pq.NewConnector(dsn)
		if err != nil {
			t.Fatal(err)
		}
		bx.raw = sql.OpenDB(c)
		t.Cleanup(func() { _ = bx.raw.Close() })
	default:
		d := dsn
		if p.mode != "" {
			d = withDSNParams(t, dsn, "default_query_exec_mode", p.mode)
		}
		bx.db, bx.sh = openFlight(t, d, opts...)
		bx.raw = openRaw(t, d)
	}
	// Before the Shield closes: a test that failed while readers waited
	// on the lock lets them go, and no goroutine outlives it.
	t.Cleanup(func() {
		bx.mu.Lock()
		locks, goes := bx.locks, bx.goes
		bx.mu.Unlock()
		for _, l := range locks {
			_ = l.Rollback()
		}
		cancel()
		for _, g := range goes {
			<-g
		}
	})
	return bx
}

// held registers a transaction to roll back, if still open, when the test
// ends.
func (bx *batchEnv) held(tx interface{ Rollback() error }) {
	bx.mu.Lock()
	defer bx.mu.Unlock()
	bx.locks = append(bx.locks, tx)
}

// goroutine runs f in a goroutine the test's end waits for.
func (bx *batchEnv) goroutine(f func()) <-chan struct{} {
	done := make(chan struct{})
	bx.mu.Lock()
	bx.goes = append(bx.goes, done)
	bx.mu.Unlock()
	go func() {
		defer close(done)
		f()
	}()
	return done
}

// requireStatementStats makes sure pg_stat_statements can be read: its
// statement counts are what the tests check. Without it they skip, or fail
// under SQLFLIGHT_REQUIRE_INTEGRATION=1.
func requireStatementStats(t *testing.T, admin *sql.DB) {
	t.Helper()
	ctx := testContext(t, time.Minute)
	if _, err := admin.ExecContext(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		// Another session may be creating it at the same moment.
		if st := batchSQLState(err); st != "23505" && st != "42710" {
			t.Logf("CREATE EXTENSION pg_stat_statements: %v", err)
		}
	}
	var n int64
	if err := admin.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_statements`).Scan(&n); err != nil {
		if requireIntegration() {
			t.Fatalf("pg_stat_statements is required (%s=1) but cannot be read: %v", envRequire, err)
		}
		t.Skipf("pg_stat_statements cannot be read (it must be in shared_preload_libraries): %v", err)
	}
}

// batchSQLState is the SQLSTATE of a server error, from pgx or lib/pq; ""
// if err is not one.
func batchSQLState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	var qe *pq.Error
	if errors.As(err, &qe) {
		return string(qe.Code)
	}
	return ""
}

// statements returns how many SELECTs of the table the server completed,
// summed over pg_stat_statements (never reset: other tests run beside).
// The texts the test itself sends to watch the server carry the table's
// name as an argument, so pg_stat_statements shows them without it. (A
// statement the Shield once prepared to learn its parameters' types is
// shown under the text of that PREPARE.)
func (bx *batchEnv) statements() int64 {
	bx.t.Helper()
	bx.dealloc = bx.evictions()
	var n int64
	err := bx.admin.QueryRowContext(bx.ctx, `SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements
		WHERE strpos(query, $1) > 0 AND query ~* '^\s*(/\*[^*]*\*/\s*)*(prepare\s+\S+\s+as\s+)?select\s'`, bx.table).Scan(&n)
	if err != nil {
		bx.t.Fatalf("pg_stat_statements: %v", err)
	}
	return n
}

// serverStatements lists the table's SELECTs in pg_stat_statements, for
// failure messages.
func (bx *batchEnv) serverStatements() string {
	rows, err := bx.admin.QueryContext(bx.ctx, `SELECT calls, query FROM pg_stat_statements
		WHERE strpos(query, $1) > 0 ORDER BY query`, bx.table)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var calls int64
		var q string
		if err := rows.Scan(&calls, &q); err != nil {
			return err.Error()
		}
		fmt.Fprintf(&b, "\n\t%d× %s", calls, abbrev(q))
	}
	var dealloc int64
	if err := bx.admin.QueryRowContext(bx.ctx, `SELECT dealloc FROM pg_stat_statements_info`).Scan(&dealloc); err == nil {
		fmt.Fprintf(&b, "\n\t(pg_stat_statements evictions so far: %d)", dealloc)
	}
	return b.String()
}

// otherTable creates a table of its own for the subtest, of one row
// (1, 'other', 0), whose read can hold the Shield's only origin slot
// (MaxInflight 1) while its lock is held: a batch that started then waits
// for the slot.
func (bx *batchEnv) otherTable() string {
	t := bx.t
	t.Helper()
	other := "batchother_" + uniqueID(t)
	mustExec(t, bx.admin, fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, v text NOT NULL, n int NOT NULL)`, other),
		fmt.Sprintf(`INSERT INTO %s VALUES (1, 'other', 0)`, other))
	cleanupExec(t, bx.admin, "DROP TABLE IF EXISTS "+other)
	return other
}

// evictions returns pg_stat_statements' count of entries it evicted.
func (bx *batchEnv) evictions() int64 {
	var n int64
	if err := bx.admin.QueryRowContext(bx.ctx, `SELECT dealloc FROM pg_stat_statements_info`).Scan(&n); err != nil {
		bx.t.Fatalf("pg_stat_statements_info: %v", err)
	}
	return n
}

// wantStatements fails the test unless the server ran want SELECTs of the
// table since before. If pg_stat_statements evicted entries meanwhile (the
// other packages' tests fill it too), its count is not the server's any
// more: the test says so and goes on with the Shield's counts, which every
// test checks as well (.ci/run sizes pg_stat_statements so that a run
// evicts nothing).
func (bx *batchEnv) wantStatements(before, want int64, what string) {
	bx.t.Helper()
	dealloc := bx.dealloc
	got := bx.statements() - before
	if bx.dealloc != dealloc {
		bx.t.Logf("%s: pg_stat_statements evicted entries meanwhile; its count (%d, want %d) is not checked", what, got, want)
		return
	}
	if got != want {
		bx.t.Errorf("%s: the server ran %d statements on the table, want %d; %s; pg_stat_statements:%s",
			what, got, want, batchStats(bx.sh.Stats()), bx.serverStatements())
	}
}

// batchStats formats a Stats snapshot with its batch counters.
func batchStats(s sqlflight.Stats) string {
	return fmt.Sprintf("%s batches=%d batchedReads=%d batchLargest=%d batchAlone=%d fresh=%d negative=%d fills=%d",
		statsString(s), s.Batches, s.BatchedReads, s.BatchLargest, s.BatchAlone, s.FreshHits, s.NegativeHits, s.Fills)
}

// batchRead runs q through db and returns its rows (id, v, n).
func batchRead(ctx context.Context, db *sql.DB, q string, args ...any) ([]batchRow, error) {
	rows, _, err := batchReadColumns(ctx, db, q, args...)
	return rows, err
}

// batchReadColumns is batchRead that also returns the result's columns,
// each as name:type as the driver names it. A panic of the call is
// returned as an error (errBatchPanic): one broken read fails its test,
// not the whole run.
func batchReadColumns(ctx context.Context, db *sql.DB, q string, args ...any) (_ []batchRow, _ []string, err error) {
	defer batchRecover(&err)
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	cts, err := rows.ColumnTypes()
	if err != nil {
		return nil, nil, err
	}
	var cols []string
	for _, ct := range cts {
		cols = append(cols, ct.Name()+":"+ct.DatabaseTypeName())
	}
	var out []batchRow
	for rows.Next() {
		var r batchRow
		if err := rows.Scan(&r.ID, &r.V, &r.N); err != nil {
			return nil, nil, err
		}
		out = append(out, r)
	}
	return out, cols, rows.Err()
}

// errBatchPanic is the error of a call that panicked.
var errBatchPanic = errors.New("panic")

// batchRecover turns a panic into *err (wrapping errBatchPanic).
func batchRecover(err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("%w: %v", errBatchPanic, r)
	}
}

// explain is sqlflight.ExplainDB on the Shield's db, a panic returned as
// an error.
func (bx *batchEnv) explain(q string) (x sqlflight.Explanation, err error) {
	defer batchRecover(&err)
	return sqlflight.ExplainDB(bx.ctx, bx.db, q)
}

// readAlone reads q with args through the Shield on a connection of its
// own, as database/sql would (the driver's QueryContext), but through
// (*sql.Conn).Raw: if the call panics, database/sql discards the
// connection instead of keeping it checked out for good, and the panic is
// returned as an error.
func (bx *batchEnv) readAlone(q string, args ...any) (out []batchRow, err error) {
	defer batchRecover(&err)
	c, err := bx.db.Conn(bx.ctx)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	named := make([]driver.NamedValue, len(args))
	for i, a := range args {
		named[i] = driver.NamedValue{Ordinal: i + 1, Value: a}
	}
	err = c.Raw(func(dc any) error {
		qc, ok := dc.(driver.QueryerContext)
		if !ok {
			return fmt.Errorf("%T is no driver.QueryerContext", dc)
		}
		rows, err := qc.QueryContext(bx.ctx, q, named)
		if err != nil {
			return err
		}
		defer rows.Close()
		dest := make([]driver.Value, len(rows.Columns()))
		for {
			if err := rows.Next(dest); err == io.EOF {
				return nil
			} else if err != nil {
				return err
			}
			var r batchRow
			if err := convertAssignRow(dest, &r); err != nil {
				return err
			}
			out = append(out, r)
		}
	})
	return out, err
}

// convertAssignRow reads a row of driver values (id, v, n) as the drivers
// return them.
func convertAssignRow(dest []driver.Value, r *batchRow) error {
	if len(dest) != 3 {
		return fmt.Errorf("%d columns, want 3", len(dest))
	}
	id, ok1 := dest[0].(int64)
	n, ok2 := dest[2].(int64)
	var v string
	switch x := dest[1].(type) {
	case string:
		v = x
	case []byte:
		v = string(x)
	default:
		return fmt.Errorf("v is a %T", dest[1])
	}
	if !ok1 || !ok2 {
		return fmt.Errorf("id and n are %T and %T", dest[0], dest[2])
	}
	*r = batchRow{ID: id, V: v, N: n}
	return nil
}

// oracle is what the parent driver gets for q without sqlflight.
func (bx *batchEnv) oracle(q string, args ...any) ([]batchRow, error) {
	return batchRead(bx.ctx, bx.raw, q, args...)
}

// mustOracle is oracle, failing the test on an error.
func (bx *batchEnv) mustOracle(q string, args ...any) []batchRow {
	bx.t.Helper()
	rows, err := bx.oracle(q, args...)
	if err != nil {
		bx.t.Fatalf("%s %v without sqlflight: %v", abbrev(q), args, err)
	}
	return rows
}

// warm has the Shield learn the server's verdict of q's shape (until then
// its reads run unshared) and checks that q batches on col ("" to check
// nothing); then it reads q with args once through the Shield, as a shared
// read of its own.
func (bx *batchEnv) warm(q, col string, args ...any) {
	bx.t.Helper()
	x, err := bx.explain(q)
	if err != nil {
		bx.t.Fatalf("ExplainDB %s: %v", abbrev(q), err)
	}
	if !x.Verified || !x.Shared {
		bx.t.Fatalf("ExplainDB %s: verified %v shared %v (%s %s)", abbrev(q), x.Verified, x.Shared, x.Reason, x.Provisional)
	}
	if col != "" && x.Batch != col {
		bx.t.Fatalf("ExplainDB %s: Batch %q (%s), want %q", abbrev(q), x.Batch, x.BatchReason, col)
	}
	before := bx.sh.Stats().Flights
	if _, err := batchRead(bx.ctx, bx.db, q, args...); err != nil {
		bx.t.Fatalf("warm-up read %s %v: %v", abbrev(q), args, err)
	}
	if after := bx.sh.Stats(); after.Flights != before+1 {
		bx.t.Fatalf("warm-up read %s %v was not a shared read of its own: %s", abbrev(q), args, batchStats(after))
	}
}

// lock begins a transaction on a raw session that holds the table in
// ACCESS EXCLUSIVE mode: every statement of the table waits on the server
// until it ends. It rolls back when the test ends, if still open.
func (bx *batchEnv) lock() *sql.Tx {
	bx.t.Helper()
	return bx.lockTable(bx.table)
}

// lockTable is lock for another table.
func (bx *batchEnv) lockTable(table string) *sql.Tx {
	bx.t.Helper()
	tx, err := bx.admin.BeginTx(bx.ctx, nil)
	if err != nil {
		bx.t.Fatal(err)
	}
	bx.held(tx)
	bx.t.Cleanup(func() { _ = tx.Rollback() }) // a subtest that fails lets the next ones read
	if _, err := tx.ExecContext(bx.ctx, "LOCK TABLE "+table+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		bx.t.Fatal(err)
	}
	return tx
}

// Kinds of statements waiting on the table's lock (waitLocked).
const (
	waitRead  = "read"  // a read as its caller wrote it
	waitBatch = "batch" // a batch: = ANY(…)
)

// waitLocked waits until exactly n statements of kind wait on a lock of
// the table on the server.
func (bx *batchEnv) waitLocked(kind string, n int) {
	bx.t.Helper()
	bx.waitLockedOn(bx.table, kind, n)
}

// waitLockedOn is waitLocked for another table.
func (bx *batchEnv) waitLockedOn(table, kind string, n int) {
	bx.t.Helper()
	var got int
	count := func() bool {
		err := bx.admin.QueryRowContext(bx.ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND pid <> pg_backend_pid() AND strpos(query, $1) > 0 AND CASE $2::text
				WHEN 'read' THEN query ~* '^\s*(/\*[^*]*\*/\s*)*select\s' AND strpos(query, 'ANY(') = 0
				WHEN 'batch' THEN query ~* '^\s*(/\*[^*]*\*/\s*)*select\s' AND strpos(query, 'ANY(') > 0
				END`, table, kind).Scan(&got)
		if err != nil {
			bx.t.Fatalf("pg_stat_activity: %v", err)
		}
		return got == n
	}
	waitUntil(bx.t, 30*time.Second, func() string {
		return fmt.Sprintf("%d statements (%s) waiting on the table's lock, want %d; %s", got, kind, n, batchStats(bx.sh.Stats()))
	}, count)
}

// waitPending waits until, since base, the Shield started flights flights
// (one for each distinct key that arrived: a member of a batch leads its
// key's flight) and followers callers joined one; waiting >= 0 also wants
// that many callers waiting on a flight (the read in flight and the
// followers: a member waits on its batch, not on a flight). A flight is
// counted as it starts, a moment before its read joins the pending batch;
// what follows (releasing the lock, a round trip, then the server's and
// the driver's work on the read in flight) is what gives it that moment.
func (bx *batchEnv) waitPending(base sqlflight.Stats, flights, followers uint64, waiting int64) {
	bx.t.Helper()
	var st sqlflight.Stats
	waitUntil(bx.t, 30*time.Second, func() string {
		return fmt.Sprintf("%d flights, %d followers, %d waiting since the start, want %d, %d, %d; %s",
			st.Flights-base.Flights, st.Followers-base.Followers, st.Waiting, flights, followers, waiting, batchStats(st))
	}, func() bool {
		st = bx.sh.Stats()
		if st.Flights-base.Flights > flights || st.Followers-base.Followers > followers {
			bx.t.Fatalf("more flights or followers than callers: %d flights, %d followers, want %d, %d; %s",
				st.Flights-base.Flights, st.Followers-base.Followers, flights, followers, batchStats(st))
		}
		return st.Flights-base.Flights == flights && st.Followers-base.Followers == followers &&
			(waiting < 0 || st.Waiting == waiting)
	})
}

// batchCall is one caller's read, run in a goroutine of its own.
type batchCall struct {
	q    string
	args []any
	done <-chan struct{}
	rows []batchRow
	cols []string // name:type of each column
	err  error
}

// start runs q with args through the Shield in a goroutine, on ctx (nil:
// the test's).
func (bx *batchEnv) start(ctx context.Context, q string, args ...any) *batchCall {
	if ctx == nil {
		ctx = bx.ctx
	}
	c := &batchCall{q: q, args: args}
	c.done = bx.goroutine(func() { c.rows, c.cols, c.err = batchReadColumns(ctx, bx.db, q, args...) })
	return c
}

// wait waits for c's outcome.
func (c *batchCall) wait(t *testing.T) {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s %v did not return", abbrev(c.q), c.args)
	}
}

// want fails the test unless c returned exactly rows.
func (c *batchCall) want(t *testing.T, rows []batchRow) {
	t.Helper()
	c.wait(t)
	if c.err != nil {
		t.Errorf("%v: %v, want %v", c.args, c.err, rows)
	} else if !slices.Equal(c.rows, rows) {
		t.Errorf("%v: rows %v, want %v", c.args, c.rows, rows)
	}
}

// wantLike fails the test unless c returned what the parent without
// sqlflight returns for the same read: the same rows, or an error too (of
// the same SQLSTATE when the server's).
func (bx *batchEnv) wantLike(c *batchCall) {
	bx.t.Helper()
	c.wait(bx.t)
	rows, err := bx.oracle(c.q, c.args...)
	switch {
	case err == nil && c.err == nil:
		if !slices.Equal(c.rows, rows) {
			bx.t.Errorf("%q: rows %v, want %v as without sqlflight", c.args, c.rows, rows)
		}
	case err == nil || c.err == nil:
		bx.t.Errorf("%q: rows %v, error %v; without sqlflight rows %v, error %v", c.args, c.rows, c.err, rows, err)
	case batchSQLState(err) != batchSQLState(c.err):
		bx.t.Errorf("%q: error %v (SQLSTATE %q); without sqlflight %v (SQLSTATE %q)",
			c.args, c.err, batchSQLState(c.err), err, batchSQLState(err))
	}
}

// wantBatches checks the Shield's batch counters since base.
func (bx *batchEnv) wantBatches(base sqlflight.Stats, batches, reads, alone uint64) {
	bx.t.Helper()
	st := bx.sh.Stats()
	if st.Batches-base.Batches != batches || st.BatchedReads-base.BatchedReads != reads || st.BatchAlone-base.BatchAlone != alone {
		bx.t.Errorf("%d batches answering %d reads, %d sent alone, want %d, %d, %d; %s",
			st.Batches-base.Batches, st.BatchedReads-base.BatchedReads, st.BatchAlone-base.BatchAlone,
			batches, reads, alone, batchStats(st))
	}
}

// batchRowOf is the table's row of id, as the fixture made it.
func batchRowOf(id int64) batchRow {
	return batchRow{ID: id, V: fmt.Sprintf("v%d", id), N: id * 7}
}

// TestBatchGathersWhileInFlight: while the read of id 1 is in flight, the
// reads of five other ids gather; once it is done they run as one
// statement, and each caller gets exactly its own row. Two statements in
// all; under MaxInflight 1 nobody is shed (a batch takes one slot).
func TestBatchGathersWhileInFlight(t *testing.T) {
	forEachBatchParent(t, []sqlflight.Option{sqlflight.Options{MaxInflight: 1}}, func(t *testing.T, bx *batchEnv) {
		q := fmt.Sprintf(`SELECT id, v, n FROM %s WHERE id = $1`, bx.table)
		bx.warm(q, "id", 41)
		base, before := bx.sh.Stats(), bx.statements()

		lk := bx.lock()
		first := bx.start(nil, q, 1)
		bx.waitLocked(waitRead, 1)
		ids := []int64{2, 3, 5, 8, -3}
		calls := make([]*batchCall, len(ids))
		for i, id := range ids {
			calls[i] = bx.start(nil, q, id)
		}
		bx.waitPending(base, uint64(1+len(ids)), 0, 1)
		if err := lk.Rollback(); err != nil {
			t.Fatal(err)
		}

		first.want(t, []batchRow{batchRowOf(1)})
		for i, c := range calls {
			c.want(t, []batchRow{batchRowOf(ids[i])})
			// The columns are the statement's, not the batch's (which
			// appends its key).
			if !slices.Equal(c.cols, first.cols) || len(c.cols) != 3 {
				t.Errorf("%d: columns %q, want %q as the read alone", ids[i], c.cols, first.cols)
			}
		}
		bx.wantStatements(before, 2, "one read in flight, five gathered")
		bx.wantBatches(base, 1, uint64(len(ids)), 0)
		if st := bx.sh.Stats(); st.Shed != base.Shed || st.BatchLargest != uint64(len(ids)) {
			t.Errorf("shed %d, largest batch %d, want 0 and %d", st.Shed-base.Shed, st.BatchLargest, len(ids))
		}
	})
}

// TestBatchStartsAfterEveryMemberBegan: a batch runs only reads whose
// calls began before it started. Under MaxInflight 1 the first batch is
// held after it started: the one slot goes first to a read of another
// table, queued before it and held on the server by that table's lock.
// The reads that arrive meanwhile gather into a second batch, which runs
// once the first is done: three statements in all. The rows of one key
// come in the statement's order (ORDER BY n DESC).
func TestBatchStartsAfterEveryMemberBegan(t *testing.T) {
	opts := []sqlflight.Option{sqlflight.Options{MaxInflight: 1, QueueTimeout: time.Minute}}
	forEachBatchParent(t, opts, func(t *testing.T, bx *batchEnv) {
		other := bx.otherTable()
		q := fmt.Sprintf(`SELECT id, v, n FROM %s WHERE g = $1 ORDER BY n DESC`, bx.table)
		qo := fmt.Sprintf(`SELECT id, v, n FROM %s WHERE id = $1`, other)
		bx.warm(q, "g", int64(13))
		bx.warm(qo, "id", int64(2))
		early, late := []int64{2, 3}, []int64{4, 14, 0}
		wants := map[int64][]batchRow{}
		for _, g := range append(append([]int64{1}, early...), late...) {
			wants[g] = bx.mustOracle(q, g)
		}
		base, before := bx.sh.Stats(), bx.statements()

		lkOther := bx.lockTable(other)
		lk := bx.lock()
		first := bx.start(nil, q, int64(1)) // takes the slot
		bx.waitLocked(waitRead, 1)
		xo := bx.start(nil, qo, int64(1)) // waits for the slot
		bx.waitPending(base, 2, 0, -1)
		var calls []*batchCall
		for _, g := range early {
			calls = append(calls, bx.start(nil, q, g))
		}
		bx.waitPending(base, 4, 0, -1)
		if err := lk.Rollback(); err != nil {
			t.Fatal(err)
		}
		first.want(t, wants[1])
		// The other table's read has the slot, on the server; the first
		// batch started and waits for the slot.
		bx.waitLockedOn(other, waitRead, 1)
		var st sqlflight.Stats
		waitUntil(t, 30*time.Second, func() string { return "the first batch to start: " + batchStats(st) }, func() bool {
			st = bx.sh.Stats()
			return st.InFlight == 2
		})

		for _, g := range late {
			calls = append(calls, bx.start(nil, q, g))
		}
		bx.waitPending(base, 7, 0, -1)
		if err := lkOther.Rollback(); err != nil {
			t.Fatal(err)
		}

		xo.want(t, []batchRow{{ID: 1, V: "other", N: 0}})
		for i, g := range append(early, late...) {
			calls[i].want(t, wants[g])
		}
		bx.wantStatements(before, 3, "one read in flight, a batch of two, then a batch of three")
		bx.wantBatches(base, 2, 5, 0)
		if st := bx.sh.Stats(); st.BatchLargest != 3 || st.Shed != base.Shed {
			t.Errorf("largest batch %d, %d shed, want 3 and none; %s", st.BatchLargest, st.Shed-base.Shed, batchStats(st))
		}
	})
}

// TestBatchDuplicateKeys: callers of one key follow one flight; keys that
// are equal as the server compares them (3, "3", "03") are members of
// their own that share one value of the batch's array. Each caller gets
// the row of its key, in one batch.
func TestBatchDuplicateKeys(t *testing.T) {
	forEachBatchParent(t, nil, func(t *testing.T, bx *batchEnv) {
		q := fmt.Sprintf(`SELECT id, v, n FROM %s WHERE id = $1`, bx.table)
		bx.warm(q, "id", 41)
		base, before := bx.sh.Stats(), bx.statements()

		lk := bx.lock()
		first := bx.start(nil, q, 1)
		bx.waitLocked(waitRead, 1)
		keys := []any{2, 2, 2, 3, "3", "03", 4, int64(4)}
		calls := make([]*batchCall, len(keys))
		for i, k := range keys {
			calls[i] = bx.start(nil, q, k)
		}
		// Each caller leads its key's flight or follows it; how the
		// arguments' Go types split them into flights is the key's.
		var st sqlflight.Stats
		waitUntil(t, 30*time.Second, func() string {
			return fmt.Sprintf("%d callers in flights, want %d; %s",
				st.Flights-base.Flights+st.Followers-base.Followers, 1+len(keys), batchStats(st))
		}, func() bool {
			st = bx.sh.Stats()
			return st.Flights-base.Flights+st.Followers-base.Followers == uint64(1+len(keys)) &&
				st.Waiting == 1+int64(st.Followers-base.Followers)
		})
		members := st.Flights - base.Flights - 1
		if err := lk.Rollback(); err != nil {
			t.Fatal(err)
		}

		first.want(t, []batchRow{batchRowOf(1)})
		for i, k := range keys {
			id := map[any]int64{2: 2, 3: 3, "3": 3, "03": 3, 4: 4, int64(4): 4}[k]
			calls[i].want(t, []batchRow{batchRowOf(id)})
		}
		bx.wantStatements(before, 2, "one read in flight, three keys gathered")
		bx.wantBatches(base, 1, members, 0)
		if st := bx.sh.Stats(); st.Followers-base.Followers < 2 {
			t.Errorf("%d followers, want at least the two other callers of 2; %s", st.Followers-base.Followers, batchStats(st))
		}
	})
}

// TestBatchAbsentKeys: keys no row has get no rows, and, under a TTL, each
// is cached as an empty result of its own, as each present key is cached
// with its row: read again, none reaches the server. (Keys are int64
// throughout: pgx takes an int and an int64 as they are, and the cache
// keys them apart.)
func TestBatchAbsentKeys(t *testing.T) {
	forEachBatchParent(t, nil, func(t *testing.T, bx *batchEnv) {
		q := fmt.Sprintf(`/* sqlflight: ttl=1m jitter=0%% */ SELECT id, v, n FROM %s WHERE id = $1`, bx.table)
		bx.warm(q, "id", int64(41))
		base, before := bx.sh.Stats(), bx.statements()

		lk := bx.lock()
		first := bx.start(nil, q, int64(1))
		bx.waitLocked(waitRead, 1)
		ids := []int64{2, 1000, 3, 1001, -1}
		calls := make([]*batchCall, len(ids))
		for i, id := range ids {
			calls[i] = bx.start(nil, q, id)
		}
		bx.waitPending(base, uint64(1+len(ids)), 0, 1)
		if err := lk.Rollback(); err != nil {
			t.Fatal(err)
		}
		want := func(id int64) []batchRow {
			if id >= 1 && id <= 41 || id == -3 {
				return []batchRow{batchRowOf(id)}
			}
			return nil
		}
		first.want(t, want(1))
		for i, c := range calls {
			c.want(t, want(ids[i]))
		}
		bx.wantStatements(before, 2, "one read in flight, five keys gathered (three absent)")
		bx.wantBatches(base, 1, uint64(len(ids)), 0)

		// Each key is its own entry: read again, from the cache.
		mid, midCount := bx.sh.Stats(), bx.statements()
		for _, id := range append([]int64{1}, ids...) {
			rows, err := batchRead(bx.ctx, bx.db, q, id)
			if err != nil || !slices.Equal(rows, want(id)) {
				t.Errorf("id %d read again: rows %v, error %v, want %v", id, rows, err, want(id))
			}
		}
		bx.wantStatements(midCount, 0, "the keys of the batch read again")
		if st := bx.sh.Stats(); st.NegativeHits-mid.NegativeHits != 3 || st.FreshHits-mid.FreshHits != 3 {
			t.Errorf("read again: %d empty and %d other cached results served, want 3 and 3; %s",
				st.NegativeHits-mid.NegativeHits, st.FreshHits-mid.FreshHits, batchStats(st))
		}

		// An insert through the Shield ends the empty entry of its key.
		if _, err := bx.db.ExecContext(bx.ctx, "INSERT INTO "+bx.table+" (id, v, n, g) VALUES ($1, $2, $3, $4)",
			int64(1000), "v1000", int64(7000), int64(1000)); err != nil {
			t.Fatal(err)
		}
		if rows, err := batchRead(bx.ctx, bx.db, q, int64(1000)); err != nil || !slices.Equal(rows, []batchRow{batchRowOf(1000)}) {
			t.Errorf("1000 after its insert: rows %v, error %v, want %v", rows, err, batchRowOf(1000))
		}
		mustExec(t, bx.db, fmt.Sprintf(`INSERT INTO %s (id, v, n, g) VALUES (1001, 'v1001', 7007, 1001)`, bx.table))
		if rows, err := batchRead(bx.ctx, bx.db, q, int64(1001)); err != nil || !slices.Equal(rows, []batchRow{batchRowOf(1001)}) {
			t.Errorf("1001 after its insert: rows %v, error %v, want %v", rows, err, batchRowOf(1001))
		}
	})
}

// TestBatchEntriesEndByTheirRows: each member's entry depends on its own
// key's rows. Batched reads by g (under a TTL): a write by g ends that g's
// entry alone; a write by id ends the entry of the g its row is in (the
// Shield cannot know which: others may end too, but never that one).
func TestBatchEntriesEndByTheirRows(t *testing.T) {
	forEachBatchParent(t, nil, func(t *testing.T, bx *batchEnv) {
		q := fmt.Sprintf(`/* sqlflight: ttl=1m jitter=0%% */ SELECT id, v, n FROM %s WHERE g = $1 ORDER BY id`, bx.table)
		bx.warm(q, "g", int64(13))
		groups := []int64{2, 3, 4, 14}
		base, before := bx.sh.Stats(), bx.statements()
		lk := bx.lock()
		first := bx.start(nil, q, int64(1))
		bx.waitLocked(waitRead, 1)
		calls := make([]*batchCall, len(groups))
		for i, g := range groups {
			calls[i] = bx.start(nil, q, g)
		}
		bx.waitPending(base, uint64(1+len(groups)), 0, 1)
		if err := lk.Rollback(); err != nil {
			t.Fatal(err)
		}
		first.wait(t)
		for _, c := range calls {
			c.wait(t)
			if c.err != nil || len(c.rows) == 0 {
				t.Fatalf("%v: rows %v, error %v", c.args, c.rows, c.err)
			}
		}
		bx.wantStatements(before, 2, "one read in flight, four gathered")
		// What each g reads now, from the database.
		check := func(what string) {
			t.Helper()
			for _, g := range append([]int64{1}, groups...) {
				want := bx.mustOracle(q, g)
				if rows, err := batchRead(bx.ctx, bx.db, q, g); err != nil || !slices.Equal(rows, want) {
					t.Errorf("%s: g %d: rows %v, error %v, want %v", what, g, rows, err, want)
				}
			}
		}
		check("after the batch")
		mid, midCount := bx.sh.Stats(), bx.statements()
		if _, err := bx.db.ExecContext(bx.ctx, "UPDATE "+bx.table+" SET v = $1 WHERE g = $2", "by-g", int64(3)); err != nil {
			t.Fatal(err)
		}
		for _, g := range []int64{2, 3, 4} {
			want := bx.mustOracle(q, g)
			if rows, err := batchRead(bx.ctx, bx.db, q, g); err != nil || !slices.Equal(rows, want) {
				t.Errorf("after a write to g 3: g %d: rows %v, error %v, want %v", g, rows, err, want)
			}
		}
		// 3 from the database, 2 and 4 cached (the oracle's three reads
		// count too).
		bx.wantStatements(midCount, 1+3, "g 2, 3 and 4 after a write to g 3")
		if st := bx.sh.Stats(); st.FreshHits-mid.FreshHits != 2 {
			t.Errorf("after a write to g 3: %d cached results served, want 2; %s", st.FreshHits-mid.FreshHits, batchStats(st))
		}
		if _, err := bx.db.ExecContext(bx.ctx, "UPDATE "+bx.table+" SET v = $1 WHERE id = $2", "by-id", int64(40)); err != nil {
			t.Fatal(err)
		}
		check("after a write to id 40 (g 14)")
		if _, err := bx.db.ExecContext(bx.ctx, "UPDATE "+bx.table+" SET g = $1 WHERE id = $2", int64(4), int64(5)); err != nil {
			t.Fatal(err)
		}
		check("after id 5 moved from g 2 to g 4")
	})
}

// TestBatchMemberBadArgument: a read whose argument the batch cannot carry
// ('7x' or 3000000000 for an int4 key) runs alone and gets what it gets
// without sqlflight (the server's error), while the others gather and get
// their rows.
func TestBatchMemberBadArgument(t *testing.T) {
	forEachBatchParent(t, nil, func(t *testing.T, bx *batchEnv) {
		q := fmt.Sprintf(`SELECT id, v, n FROM %s WHERE id = $1`, bx.table)
		bx.warm(q, "id", 41)
		bad := []any{"7x", int64(3000000000), "-2147483649"}
		// What the parent makes of them alone (before the count: the
		// oracle's statements are the server's too).
		ran := int64(0)
		for _, k := range bad {
			rows, err := bx.oracle(q, k)
			t.Logf("%q without sqlflight: rows %v, error %v (SQLSTATE %q)", k, rows, err, batchSQLState(err))
			if err == nil {
				ran++ // it completes: the server counts it
			}
		}
		if _, err := bx.oracle(q, "7x"); batchSQLState(err) != "22P02" {
			t.Fatalf("'7x' for an int4 without sqlflight: %v, want the server's 22P02", err)
		}
		base, before := bx.sh.Stats(), bx.statements()

		lk := bx.lock()
		first := bx.start(nil, q, 1)
		bx.waitLocked(waitRead, 1)
		good := []int64{2, 3, 4}
		var calls []*batchCall
		for i, id := range good {
			calls = append(calls, bx.start(nil, q, id))
			calls = append(calls, bx.start(nil, q, bad[i]))
		}
		// The bad ones lead flights of their own, and run at once (on the
		// server they wait for the lock, or fail already).
		bx.waitPending(base, uint64(1+len(good)+len(bad)), 0, -1)
		if err := lk.Rollback(); err != nil {
			t.Fatal(err)
		}

		first.want(t, []batchRow{batchRowOf(1)})
		for i := range good {
			calls[2*i].want(t, []batchRow{batchRowOf(good[i])})
			bx.wantLike(calls[2*i+1])
		}
		if c := calls[1]; c.err == nil || batchSQLState(c.err) != "22P02" {
			t.Errorf("'7x': rows %v, error %v, want the server's 22P02", c.rows, c.err)
		}
		bx.wantStatements(before, 2+ran, "one read in flight, three keys gathered, the bad ones alone")
		bx.wantBatches(base, 1, uint64(len(good)), 0)
	})
}

// TestBatchWriteBetweenArrivalAndBatch: the transaction that holds the
// lock writes key 5 through the Shield while the reads of 2, 3 and 5 wait
// for their batch. The caller of 5 who arrived before the write gets the
// old or the new value; the cache never serves the old one after; the
// write ends the entry of 5 alone (2 and 3 stay cached).
func TestBatchWriteBetweenArrivalAndBatch(t *testing.T) {
	forEachBatchParent(t, nil, func(t *testing.T, bx *batchEnv) {
		q := fmt.Sprintf(`/* sqlflight: ttl=1m jitter=0%% */ SELECT id, v, n FROM %s WHERE id = $1`, bx.table)
		bx.warm(q, "id", int64(41))
		base, before := bx.sh.Stats(), bx.statements()

		tx, err := bx.db.BeginTx(bx.ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		bx.held(tx)
		if _, err := tx.ExecContext(bx.ctx, "LOCK TABLE "+bx.table+" IN ACCESS EXCLUSIVE MODE"); err != nil {
			t.Fatal(err)
		}
		first := bx.start(nil, q, int64(1))
		bx.waitLocked(waitRead, 1)
		b, c, k := bx.start(nil, q, int64(2)), bx.start(nil, q, int64(3)), bx.start(nil, q, int64(5))
		bx.waitPending(base, 4, 0, 1)
		if _, err := tx.ExecContext(bx.ctx, "UPDATE "+bx.table+" SET v = $1 WHERE id = $2", "new5", int64(5)); err != nil {
			t.Fatal(err)
		}
		// One more caller of 5, after the write (before its commit): it
		// follows the flight of 5 or leads one of its own.
		k2 := bx.start(nil, q, int64(5))
		var st sqlflight.Stats
		waitUntil(t, 30*time.Second, func() string { return "the caller after the write: " + batchStats(st) }, func() bool {
			st = bx.sh.Stats()
			return st.Flights-base.Flights+st.Followers-base.Followers == 5
		})
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}

		first.want(t, []batchRow{batchRowOf(1)})
		b.want(t, []batchRow{batchRowOf(2)})
		c.want(t, []batchRow{batchRowOf(3)})
		new5 := []batchRow{{ID: 5, V: "new5", N: 35}}
		for _, call := range []*batchCall{k, k2} {
			call.wait(t)
			if call.err != nil || !slices.Equal(call.rows, new5) && !slices.Equal(call.rows, []batchRow{batchRowOf(5)}) {
				t.Errorf("caller of 5 around the write: rows %v, error %v, want %v or %v", call.rows, call.err, batchRowOf(5), new5)
			}
		}
		bx.wantStatements(before, 2, "one read in flight, a batch of 2, 3, 5")
		bx.wantBatches(base, 1, st.Flights-base.Flights-1, 0)

		// After the write, 5 is never its old value.
		for range 3 {
			if rows, err := batchRead(bx.ctx, bx.db, q, int64(5)); err != nil || !slices.Equal(rows, new5) {
				t.Fatalf("5 after its write: rows %v, error %v, want %v; %s", rows, err, new5, batchStats(bx.sh.Stats()))
			}
		}
		// 2 and 3 stayed cached: the write was to 5's row.
		mid, midCount := bx.sh.Stats(), bx.statements()
		for _, id := range []int64{2, 3, 5} {
			want := []batchRow{batchRowOf(id)}
			if id == 5 {
				want = new5
			}
			if rows, err := batchRead(bx.ctx, bx.db, q, id); err != nil || !slices.Equal(rows, want) {
				t.Errorf("%d read again: rows %v, error %v, want %v", id, rows, err, want)
			}
		}
		bx.wantStatements(midCount, 0, "2, 3 and 5 read again")
		if st := bx.sh.Stats(); st.FreshHits-mid.FreshHits != 3 {
			t.Errorf("read again: %d cached results served, want 3; %s", st.FreshHits-mid.FreshHits, batchStats(st))
		}

		// A write outside a transaction ends its own key's entry, not the
		// others'.
		if _, err := bx.db.ExecContext(bx.ctx, "UPDATE "+bx.table+" SET v = $1 WHERE id = $2", "new3", int64(3)); err != nil {
			t.Fatal(err)
		}
		mid, midCount = bx.sh.Stats(), bx.statements()
		if rows, err := batchRead(bx.ctx, bx.db, q, int64(3)); err != nil || !slices.Equal(rows, []batchRow{{ID: 3, V: "new3", N: 21}}) {
			t.Errorf("3 after its write: rows %v, error %v, want new3", rows, err)
		}
		if rows, err := batchRead(bx.ctx, bx.db, q, int64(2)); err != nil || !slices.Equal(rows, []batchRow{batchRowOf(2)}) {
			t.Errorf("2 after the write to 3: rows %v, error %v", rows, err)
		}
		bx.wantStatements(midCount, 1, "3 after its write, and 2")
		if st := bx.sh.Stats(); st.FreshHits-mid.FreshHits != 1 {
			t.Errorf("after the write to 3: %d cached results served, want 1 (2's); %s", st.FreshHits-mid.FreshHits, batchStats(st))
		}
	})
}

// TestBatchWriteAfterBatchStarted: a batch that started before a write
// answers no caller who arrived after it. The batch of 2 and 5 is held
// after it started (waiting for the one slot of MaxInflight 1, as in
// TestBatchStartsAfterEveryMemberBegan) while 5 is written through the
// Shield; a caller of 5 after the write leads a flight of its own, in the
// next batch, and gets the new value, as every read of 5 after does.
func TestBatchWriteAfterBatchStarted(t *testing.T) {
	opts := []sqlflight.Option{sqlflight.Options{MaxInflight: 1, QueueTimeout: time.Minute}}
	forEachBatchParent(t, opts, func(t *testing.T, bx *batchEnv) {
		other := bx.otherTable()
		q := fmt.Sprintf(`/* sqlflight: ttl=1m jitter=0%% */ SELECT id, v, n FROM %s WHERE id = $1`, bx.table)
		qo := fmt.Sprintf(`SELECT id, v, n FROM %s WHERE id = $1`, other)
		bx.warm(q, "id", int64(41))
		bx.warm(qo, "id", int64(2))
		base, before := bx.sh.Stats(), bx.statements()

		lkOther := bx.lockTable(other)
		lk := bx.lock()
		first := bx.start(nil, q, int64(1))
		bx.waitLocked(waitRead, 1)
		xo := bx.start(nil, qo, int64(1))
		bx.waitPending(base, 2, 0, -1)
		b, k := bx.start(nil, q, int64(2)), bx.start(nil, q, int64(5))
		bx.waitPending(base, 4, 0, -1)
		if err := lk.Rollback(); err != nil {
			t.Fatal(err)
		}
		first.want(t, []batchRow{batchRowOf(1)})
		bx.waitLockedOn(other, waitRead, 1)
		var st sqlflight.Stats
		waitUntil(t, 30*time.Second, func() string { return "the batch to start: " + batchStats(st) }, func() bool {
			st = bx.sh.Stats()
			return st.InFlight == 2
		})

		if _, err := bx.db.ExecContext(bx.ctx, "UPDATE "+bx.table+" SET v = $1 WHERE id = $2", "new5", int64(5)); err != nil {
			t.Fatal(err)
		}
		k2 := bx.start(nil, q, int64(5))
		bx.waitPending(base, 5, 0, -1) // a flight of its own, not the started batch's
		if err := lkOther.Rollback(); err != nil {
			t.Fatal(err)
		}

		new5 := []batchRow{{ID: 5, V: "new5", N: 35}}
		xo.want(t, []batchRow{{ID: 1, V: "other", N: 0}})
		b.want(t, []batchRow{batchRowOf(2)})
		k.wait(t)
		if k.err != nil || !slices.Equal(k.rows, new5) && !slices.Equal(k.rows, []batchRow{batchRowOf(5)}) {
			t.Errorf("the caller of 5 before the write: rows %v, error %v, want %v or %v", k.rows, k.err, batchRowOf(5), new5)
		}
		k2.want(t, new5)
		bx.wantStatements(before, 3, "one read in flight, the batch of 2 and 5, then the batch of 5 after the write")
		bx.wantBatches(base, 2, 3, 0)
		for range 2 {
			if rows, err := batchRead(bx.ctx, bx.db, q, int64(5)); err != nil || !slices.Equal(rows, new5) {
				t.Errorf("5 after its write: rows %v, error %v, want %v", rows, err, new5)
			}
		}
	})
}

// TestBatchCancelOneMember: a member whose context ends before its batch
// starts gets context.Canceled at once; a follower of its key starts over
// and joins the batch; the others get their rows from the one batch.
func TestBatchCancelOneMember(t *testing.T) {
	forEachBatchParent(t, nil, func(t *testing.T, bx *batchEnv) {
		q := fmt.Sprintf(`SELECT id, v, n FROM %s WHERE id = $1`, bx.table)
		bx.warm(q, "id", 41)
		base, before := bx.sh.Stats(), bx.statements()

		lk := bx.lock()
		first := bx.start(nil, q, 1)
		bx.waitLocked(waitRead, 1)
		b, c := bx.start(nil, q, 2), bx.start(nil, q, 3)
		kctx, cancel := context.WithCancel(bx.ctx)
		defer cancel()
		k := bx.start(kctx, q, 5)
		bx.waitPending(base, 4, 0, 1)
		k2 := bx.start(nil, q, 5) // follows the flight of 5
		bx.waitPending(base, 4, 1, 2)

		cancel()
		k.wait(t)
		if !errors.Is(k.err, context.Canceled) {
			t.Errorf("the cancelled member: rows %v, error %v, want context.Canceled", k.rows, k.err)
		}
		// Its follower leads the flight of 5 now, as a member of the batch.
		bx.waitPending(base, 5, 1, 1)
		if err := lk.Rollback(); err != nil {
			t.Fatal(err)
		}

		first.want(t, []batchRow{batchRowOf(1)})
		b.want(t, []batchRow{batchRowOf(2)})
		c.want(t, []batchRow{batchRowOf(3)})
		k2.want(t, []batchRow{batchRowOf(5)})
		bx.wantStatements(before, 2, "one read in flight, a batch of 2, 3, 5")
		bx.wantBatches(base, 1, 3, 0)
	})
}

// TestBatchCancelAfterStart: a member whose context ends once its batch
// started (held, as in TestBatchStartsAfterEveryMemberBegan, waiting for
// the one slot of MaxInflight 1) gets context.Canceled at once; the batch
// still runs, once, and answers the others.
func TestBatchCancelAfterStart(t *testing.T) {
	opts := []sqlflight.Option{sqlflight.Options{MaxInflight: 1, QueueTimeout: time.Minute}}
	forEachBatchParent(t, opts, func(t *testing.T, bx *batchEnv) {
		other := bx.otherTable()
		q := fmt.Sprintf(`SELECT id, v, n FROM %s WHERE id = $1`, bx.table)
		qo := fmt.Sprintf(`SELECT id, v, n FROM %s WHERE id = $1`, other)
		bx.warm(q, "id", int64(41))
		bx.warm(qo, "id", int64(2))
		base, before := bx.sh.Stats(), bx.statements()

		lkOther := bx.lockTable(other)
		lk := bx.lock()
		first := bx.start(nil, q, int64(1))
		bx.waitLocked(waitRead, 1)
		xo := bx.start(nil, qo, int64(1))
		bx.waitPending(base, 2, 0, -1)
		kctx, cancel := context.WithCancel(bx.ctx)
		defer cancel()
		b, c, k := bx.start(nil, q, int64(2)), bx.start(nil, q, int64(3)), bx.start(kctx, q, int64(5))
		bx.waitPending(base, 5, 0, -1)
		if err := lk.Rollback(); err != nil {
			t.Fatal(err)
		}
		first.want(t, []batchRow{batchRowOf(1)})
		bx.waitLockedOn(other, waitRead, 1)
		var st sqlflight.Stats
		waitUntil(t, 30*time.Second, func() string { return "the batch to start: " + batchStats(st) }, func() bool {
			st = bx.sh.Stats()
			return st.InFlight == 2
		})

		cancel()
		k.wait(t)
		if !errors.Is(k.err, context.Canceled) {
			t.Errorf("the member cancelled after its batch started: rows %v, error %v, want context.Canceled", k.rows, k.err)
		}
		select {
		case <-b.done:
			t.Errorf("a member returned before its batch ran: rows %v, error %v", b.rows, b.err)
		default:
		}
		if err := lkOther.Rollback(); err != nil {
			t.Fatal(err)
		}
		xo.want(t, []batchRow{{ID: 1, V: "other", N: 0}})
		b.want(t, []batchRow{batchRowOf(2)})
		c.want(t, []batchRow{batchRowOf(3)})
		bx.wantStatements(before, 2, "one read in flight, then its batch")
		if st := bx.sh.Stats(); st.Batches-base.Batches != 1 || st.BatchAlone != base.BatchAlone {
			t.Errorf("%d batches, %d reads alone, want 1 and 0; %s", st.Batches-base.Batches, st.BatchAlone-base.BatchAlone, batchStats(st))
		}
	})
}

// TestBatchLimitsPerMember: maxrows= applies to each member's result: a
// key of 3 rows under maxrows=2 runs alone and its caller still gets its
// 3 rows (as the first read, too large to share, does); the keys within
// the limit get theirs from the batch. maxbytes= likewise.
func TestBatchLimitsPerMember(t *testing.T) {
	forEachBatchParent(t, nil, func(t *testing.T, bx *batchEnv) {
		q := fmt.Sprintf(`/* sqlflight: maxrows=2 */ SELECT id, v, n FROM %s WHERE g = $1 ORDER BY id`, bx.table)
		bx.warm(q, "g", 14)
		groups := []int64{14, 0, 3, 99} // 2 rows, 1, 3 (over the limit), none
		wants := map[int64][]batchRow{}
		for _, g := range append([]int64{1}, groups...) {
			wants[g] = bx.mustOracle(q, g)
		}
		want := func(g int64) []batchRow { return wants[g] }
		base, before := bx.sh.Stats(), bx.statements()

		lk := bx.lock()
		first := bx.start(nil, q, int64(1)) // 3 rows: too large to share
		bx.waitLocked(waitRead, 1)
		calls := make([]*batchCall, len(groups))
		for i, g := range groups {
			calls[i] = bx.start(nil, q, g)
		}
		bx.waitPending(base, uint64(1+len(groups)), 0, 1)
		if err := lk.Rollback(); err != nil {
			t.Fatal(err)
		}

		first.want(t, want(1))
		for i, g := range groups {
			calls[i].want(t, want(g))
		}
		if len(calls[2].rows) != 3 {
			t.Errorf("g 3: %d rows, want its 3", len(calls[2].rows))
		}
		bx.wantStatements(before, 3, "one read in flight, a batch, the member over its limit alone")
		bx.wantBatches(base, 1, 3, 1)

		// maxbytes= too: the row of 20 is over 2 KiB.
		mustExec(t, bx.admin, fmt.Sprintf(`UPDATE %s SET v = repeat('x', 5000) WHERE id = 20`, bx.table))
		qb := fmt.Sprintf(`/* sqlflight: maxbytes=2KiB */ SELECT id, v, n FROM %s WHERE id = $1`, bx.table)
		bx.warm(qb, "id", int64(41))
		ids := []int64{2, 20, 3}
		wants = map[int64][]batchRow{}
		for _, id := range append([]int64{1}, ids...) {
			wants[id] = bx.mustOracle(qb, id)
		}
		base, before = bx.sh.Stats(), bx.statements()
		lk = bx.lock()
		first = bx.start(nil, qb, int64(1))
		bx.waitLocked(waitRead, 1)
		calls = make([]*batchCall, len(ids))
		for i, id := range ids {
			calls[i] = bx.start(nil, qb, id)
		}
		bx.waitPending(base, uint64(1+len(ids)), 0, 1)
		if err := lk.Rollback(); err != nil {
			t.Fatal(err)
		}
		first.want(t, wants[1])
		for i, id := range ids {
			calls[i].want(t, wants[id])
		}
		if r := calls[1].rows; len(r) != 1 || len(r[0].V) != 5000 {
			t.Errorf("20: %d rows, want its one of 5000 bytes", len(r))
		}
		bx.wantStatements(before, 3, "one read in flight, a batch, the member over maxbytes alone")
		bx.wantBatches(base, 1, 2, 1)
	})
}

// batchHostile are text keys whose characters mean something to SQL, to
// PostgreSQL's array literals or to the drivers.
var batchHostile = []string{
	`it's`, `back\slash`, `a,b`, `{braces}`, ` spaced `, `NULL`, `"dq"`, `日本語 ✓`, ``, `\"}{,'`, "tab\tnewline\n", `null`,
}

// TestBatchHostileTextKeys: text keys with quotes, backslashes, commas,
// braces, spaces, "NULL", unicode and the empty string gather into one
// batch, and each caller gets the row of its own key; a key with a NUL
// byte, which the server refuses, runs alone and gets what it gets without
// sqlflight.
func TestBatchHostileTextKeys(t *testing.T) {
	forEachBatchParent(t, nil, func(t *testing.T, bx *batchEnv) {
		for i, s := range batchHostile {
			mustExec(t, bx.admin, fmt.Sprintf(`UPDATE %s SET s = %s WHERE id = %d`, bx.table, batchQuote(s), 10+i))
		}
		q := fmt.Sprintf(`SELECT id, v, n FROM %s WHERE s = $1`, bx.table)
		bx.warm(q, "s", "s41")
		base, before := bx.sh.Stats(), bx.statements()

		lk := bx.lock()
		first := bx.start(nil, q, "s1")
		bx.waitLocked(waitRead, 1)
		keys := append(append([]string(nil), batchHostile...), `{"absent"}`)
		calls := make([]*batchCall, len(keys))
		for i, s := range keys {
			calls[i] = bx.start(nil, q, s)
		}
		nul := bx.start(nil, q, "s2\x00")
		bx.waitPending(base, uint64(2+len(keys)), 0, -1)
		if err := lk.Rollback(); err != nil {
			t.Fatal(err)
		}

		first.want(t, []batchRow{batchRowOf(1)})
		for i, c := range calls {
			var want []batchRow
			if i < len(batchHostile) {
				want = []batchRow{batchRowOf(int64(10 + i))}
			}
			c.want(t, want)
		}
		bx.wantLike(nul)
		if nul.err == nil {
			t.Errorf("a NUL byte in a text key: rows %v, want an error", nul.rows)
		}
		bx.wantStatements(before, 2, "one read in flight, the hostile keys gathered")
		bx.wantBatches(base, 1, uint64(len(keys)), 0)
	})
}

// batchQuote writes s as a standard SQL string literal.
func batchQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// batchUUID is the u of id in the test table (md5(id::text)::uuid).
func batchUUID(id int64) string {
	h := fmt.Sprintf("%x", md5.Sum([]byte(strconv.FormatInt(id, 10))))
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// TestBatchUUIDKeys: uuid keys in the spellings PostgreSQL reads (upper
// case, braces, no hyphens, a hyphen after any group of four digits)
// gather, those of one value sharing its place in the batch; each caller
// gets what the same read gets without sqlflight, the row of its key or
// the driver's or the server's error.
func TestBatchUUIDKeys(t *testing.T) {
	forEachBatchParent(t, nil, func(t *testing.T, bx *batchEnv) {
		q := fmt.Sprintf(`SELECT id, v, n FROM %s WHERE u = $1`, bx.table)
		bx.warm(q, "u", batchUUID(41))
		plain := func(id int64) string { return strings.ReplaceAll(batchUUID(id), "-", "") }
		keys := []string{
			batchUUID(2),
			strings.ToUpper(batchUUID(2)),
			"{" + batchUUID(3) + "}",
			plain(4),
			"{" + plain(5) + "}",
			plain(6)[0:4] + "-" + plain(6)[4:8] + "-" + plain(6)[8:12] + "-" + plain(6)[12:16] + "-" +
				plain(6)[16:20] + "-" + plain(6)[20:24] + "-" + plain(6)[24:28] + "-" + plain(6)[28:32],
			strings.ToUpper(plain(7)),
			batchUUID(1000), // absent
			"not-a-uuid",
		}
		oracle := make([]struct {
			rows []batchRow
			err  error
		}, len(keys))
		batched := 0
		for i, k := range keys {
			oracle[i].rows, oracle[i].err = bx.oracle(q, k)
			t.Logf("%q without sqlflight: rows %v, error %v", k, oracle[i].rows, oracle[i].err)
			if oracle[i].err == nil {
				batched++
			}
		}
		base, before := bx.sh.Stats(), bx.statements()
		lk := bx.lock()
		first := bx.start(nil, q, batchUUID(1))
		bx.waitLocked(waitRead, 1)
		calls := make([]*batchCall, len(keys))
		for i, k := range keys {
			calls[i] = bx.start(nil, q, k)
		}
		bx.waitPending(base, uint64(1+len(keys)), 0, -1)
		if err := lk.Rollback(); err != nil {
			t.Fatal(err)
		}
		first.want(t, []batchRow{batchRowOf(1)})
		for i, c := range calls {
			c.wait(t)
			o := oracle[i]
			switch {
			case o.err != nil && c.err == nil:
				t.Errorf("%q: rows %v, want an error as without sqlflight (%v)", keys[i], c.rows, o.err)
			case o.err == nil && c.err != nil:
				t.Errorf("%q: error %v, want rows %v as without sqlflight", keys[i], c.err, o.rows)
			case o.err == nil && !slices.Equal(c.rows, o.rows):
				t.Errorf("%q: rows %v, want %v as without sqlflight", keys[i], c.rows, o.rows)
			case o.err != nil && batchSQLState(c.err) != batchSQLState(o.err):
				t.Errorf("%q: error %v, want %v as without sqlflight", keys[i], c.err, o.err)
			}
		}
		bx.wantStatements(before, 2, "one read in flight, the uuid keys gathered")
		bx.wantBatches(base, 1, uint64(batched), 0)
	})
}

// TestBatchInlinedLiterals: bun inlines its values (WHERE ("t"."id" = 42),
// WHERE ("t"."s" = 'x')): the texts of one statement that differ in the
// value batch as the reads of one $1 do, negative numbers and quoted
// strings included. (A negative number, or a string with a newline, is a
// shape of its own: the server's verdict on it is had first, outside the
// lock. A text whose batch form ExplainDB refuses runs alone.)
func TestBatchInlinedLiterals(t *testing.T) {
	forEachBatchParent(t, nil, func(t *testing.T, bx *batchEnv) {
		byID := func(id int64) string {
			return fmt.Sprintf(`SELECT "t"."id", "t"."v", "t"."n" FROM %s AS "t" WHERE ("t"."id" = %d)`, bx.table, id)
		}
		ids := []int64{2, 3, -3, 40, 1000}
		var texts []string
		for _, id := range ids {
			texts = append(texts, byID(id))
		}
		bx.gatherTexts(byID(41), byID(1), "id", texts, func(i int) []batchRow { return bx.mustOracle(texts[i]) })

		// Inlined strings, as bun quotes them.
		for i, s := range batchHostile {
			mustExec(t, bx.admin, fmt.Sprintf(`UPDATE %s SET s = %s WHERE id = %d`, bx.table, batchQuote(s), 10+i))
		}
		byS := func(s string) string {
			return fmt.Sprintf(`SELECT "t"."id", "t"."v", "t"."n" FROM %s AS "t" WHERE ("t"."s" = %s)`, bx.table, batchQuote(s))
		}
		texts = texts[:0]
		for _, s := range batchHostile {
			texts = append(texts, byS(s))
		}
		bx.gatherTexts(byS("s41"), byS("s1"), "s", texts, func(i int) []batchRow { return []batchRow{batchRowOf(int64(10 + i))} })
	})
}

// gatherTexts warms the statement with warm, holds the read of first in
// flight, and has the reads of texts (each without arguments) gather
// meanwhile: each gets want(i), one batch answers those ExplainDB says
// batch on col, and each of the others runs alone.
func (bx *batchEnv) gatherTexts(warm, first, col string, texts []string, want func(int) []batchRow) {
	t := bx.t
	t.Helper()
	bx.warm(warm, col)
	wants := make([][]batchRow, len(texts))
	alone := 0
	for i, q := range texts {
		wants[i] = want(i)
		x, err := bx.explain(q) // the verdict of its shape, outside the lock
		if err != nil {
			t.Fatal(err)
		}
		if !x.Verified || !x.Shared {
			t.Fatalf("%s: verified %v shared %v (%s)", abbrev(q), x.Verified, x.Shared, x.Reason)
		}
		if x.Batch != col {
			t.Logf("%s: does not batch (%s)", abbrev(q), x.BatchReason)
			alone++
		}
	}
	wantFirst := bx.mustOracle(first)
	base, before := bx.sh.Stats(), bx.statements()
	lk := bx.lock()
	fc := bx.start(nil, first)
	bx.waitLocked(waitRead, 1)
	calls := make([]*batchCall, len(texts))
	for i, q := range texts {
		calls[i] = bx.start(nil, q)
	}
	bx.waitPending(base, uint64(1+len(texts)), 0, int64(1+alone))
	if err := lk.Rollback(); err != nil {
		t.Fatal(err)
	}
	fc.want(t, wantFirst)
	for i, c := range calls {
		c.want(t, wants[i])
	}
	bx.wantStatements(before, int64(2+alone), fmt.Sprintf("one inlined read in flight, %d gathered, %d alone", len(texts)-alone, alone))
	bx.wantBatches(base, 1, uint64(len(texts)-alone), 0)
}

// TestBatchOff: with the nobatch annotation, or Options.NoBatch, the reads
// of other keys do not gather: each runs its own statement at once.
func TestBatchOff(t *testing.T) {
	for _, c := range []struct {
		name string
		opts []sqlflight.Option
		q    string
	}{
		{"nobatch", nil, `/* sqlflight: nobatch */ SELECT id, v, n FROM %s WHERE id = $1`},
		{"Options.NoBatch", []sqlflight.Option{sqlflight.Options{NoBatch: true}}, `SELECT id, v, n FROM %s WHERE id = $1`},
	} {
		t.Run(c.name, func(t *testing.T) {
			forEachBatchParent(t, c.opts, func(t *testing.T, bx *batchEnv) {
				q := fmt.Sprintf(c.q, bx.table)
				bx.warm(q, "", 41)
				base, before := bx.sh.Stats(), bx.statements()

				lk := bx.lock()
				ids := []int64{1, 2, 3, 4}
				calls := make([]*batchCall, len(ids))
				for i, id := range ids {
					calls[i] = bx.start(nil, q, id)
				}
				bx.waitLocked(waitRead, len(ids)) // every one on the server
				bx.waitPending(base, uint64(len(ids)), 0, int64(len(ids)))
				if err := lk.Rollback(); err != nil {
					t.Fatal(err)
				}
				for i, call := range calls {
					call.want(t, []batchRow{batchRowOf(ids[i])})
				}
				bx.wantStatements(before, int64(len(ids)), "batching off")
				bx.wantBatches(base, 0, 0, 0)
			})
		})
	}
}

// TestBatchMaxKeys: a batch of BatchMaxKeys keys does not wait for the
// statement in flight: under 2, four keys make two batches, running beside
// the first read.
func TestBatchMaxKeys(t *testing.T) {
	forEachBatchParent(t, []sqlflight.Option{sqlflight.Options{BatchMaxKeys: 2}}, func(t *testing.T, bx *batchEnv) {
		q := fmt.Sprintf(`SELECT id, v, n FROM %s WHERE id = $1`, bx.table)
		bx.warm(q, "id", 41)
		base, before := bx.sh.Stats(), bx.statements()

		lk := bx.lock()
		first := bx.start(nil, q, 1)
		bx.waitLocked(waitRead, 1)
		ids := []int64{2, 3, 4, 5}
		calls := make([]*batchCall, len(ids))
		for i, id := range ids {
			calls[i] = bx.start(nil, q, id)
		}
		bx.waitLocked(waitBatch, 2) // both full batches on the server already
		if err := lk.Rollback(); err != nil {
			t.Fatal(err)
		}
		first.want(t, []batchRow{batchRowOf(1)})
		for i, c := range calls {
			c.want(t, []batchRow{batchRowOf(ids[i])})
		}
		bx.wantStatements(before, 3, "one read in flight, two full batches")
		bx.wantBatches(base, 2, 4, 0)
		if st := bx.sh.Stats(); st.BatchLargest != 2 {
			t.Errorf("largest batch %d, want 2", st.BatchLargest)
		}
	})
}

// TestBatchRefusedFormRunsAlone: when the server refuses the batched
// text itself (SQLSTATE class 42: here the key column appended to the
// select list as "sqlflight.key" makes an ORDER BY of an output column of
// that name ambiguous), every member
// runs alone and gets its rows, and the statement batches no more:
// ExplainDB says why, and the next reads that miss together each run
// their own statement at once.
func TestBatchRefusedFormRunsAlone(t *testing.T) {
	forEachBatchParent(t, nil, func(t *testing.T, bx *batchEnv) {
		// The batched form appends the key as "sqlflight.key": an ORDER BY of
		// an output column of that very name is ambiguous there (42702).
		q := fmt.Sprintf(`SELECT n AS "sqlflight.key", v, n FROM %s WHERE id = $1 ORDER BY "sqlflight.key"`, bx.table)
		bx.warm(q, "id", int64(41))
		want := func(id int64) []batchRow { return []batchRow{{ID: id * 7, V: fmt.Sprintf("v%d", id), N: id * 7}} }
		base, before := bx.sh.Stats(), bx.statements()

		lk := bx.lock()
		first := bx.start(nil, q, int64(1))
		bx.waitLocked(waitRead, 1)
		ids := []int64{2, 3, 4}
		calls := make([]*batchCall, len(ids))
		for i, id := range ids {
			calls[i] = bx.start(nil, q, id)
		}
		bx.waitPending(base, uint64(1+len(ids)), 0, 1)
		if err := lk.Rollback(); err != nil {
			t.Fatal(err)
		}
		first.want(t, want(1))
		for i, c := range calls {
			c.want(t, want(ids[i]))
		}
		bx.wantStatements(before, int64(1+len(ids)), "one read in flight, then each member alone (the refused batch is not counted)")
		bx.wantBatches(base, 0, 0, uint64(len(ids)))
		x, err := bx.explain(q)
		if err != nil {
			t.Fatal(err)
		}
		if x.Batch != "" || x.BatchReason == "" {
			t.Errorf("ExplainDB after the server refused the batch: Batch %q, BatchReason %q, want a reason", x.Batch, x.BatchReason)
		}

		// It batches no more: the reads go to the server each at once.
		base, before = bx.sh.Stats(), bx.statements()
		lk = bx.lock()
		ids = []int64{5, 6, 7, 8}
		calls = make([]*batchCall, len(ids))
		for i, id := range ids {
			calls[i] = bx.start(nil, q, id)
		}
		bx.waitLocked(waitRead, len(ids))
		if err := lk.Rollback(); err != nil {
			t.Fatal(err)
		}
		for i, c := range calls {
			c.want(t, want(ids[i]))
		}
		bx.wantStatements(before, int64(len(ids)), "the reads of a shape that batches no more")
		bx.wantBatches(base, 0, 0, 0)
	})
}

// TestBatchTextForms: the forms ORMs and people write a keyed read in
// (comments, line breaks, lower case, aliases, a schema, the value first,
// another condition beside the key) read their rows alone, batch, and each
// caller gets exactly the rows of the same read without sqlflight.
func TestBatchTextForms(t *testing.T) {
	forEachBatchParent(t, nil, func(t *testing.T, bx *batchEnv) {
		param := func(q string) func(string, int64) (string, []any) {
			return func(table string, key int64) (string, []any) { return fmt.Sprintf(q, table), []any{key} }
		}
		for _, c := range []struct {
			name string
			text func(table string, key int64) (string, []any)
		}{
			{"line comment", param("SELECT id, v, n -- the columns\nFROM %s\nWHERE id = $1")},
			{"block comments", param("SELECT /* a */ id, v, n /* b */ FROM %s /* c */ WHERE /* d */ id = $1 /* e */")},
			{"tabs and a trailing comment", param("SELECT id, v, n\n\tFROM %s\n\tWHERE id = $1 -- trailing")},
			{"lower case", param("select id, v, n from %s where id=$1")},
			{"alias", param(`SELECT t1.id, t1.v, t1.n FROM %s t1 WHERE t1.id = $1`)},
			{"schema", param(`SELECT id, v, n FROM public.%s WHERE id = $1`)},
			{"value first", param(`SELECT id, v, n FROM %s WHERE $1 = id`)},
			{"parenthesized", param(`SELECT id, v, n FROM %s WHERE (id = $1)`)},
			{"order by", param(`SELECT id, v, n FROM %s WHERE g = $1 ORDER BY v DESC NULLS LAST`)},
			// The last condition keys the batch; the others' values are
			// the batch's (g 1 holds ids 1 to 3: the other keys get none).
			{"another condition first", func(table string, key int64) (string, []any) {
				return fmt.Sprintf(`SELECT id, v, n FROM %s WHERE g = $1 AND id = $2`, table), []any{int64(1), key}
			}},
			{"another condition inlined", param(`SELECT id, v, n FROM %s WHERE g = 1 AND id = $1`)},
		} {
			t.Run(c.name, func(t *testing.T) {
				bx.t = t
				bx.gatherForm(c.text)
			})
		}
	})
}

// gatherForm reads a form of keyed read (text makes its text and arguments
// for a key) alone, then holds the read of key 1 in flight while the reads
// of other keys gather: one batch answers them, each with the rows the
// same read gets without sqlflight.
func (bx *batchEnv) gatherForm(text func(table string, key int64) (string, []any)) {
	t := bx.t
	t.Helper()
	keys := []int64{2, 3, 7, 40, 1000}
	wants := map[int64][]batchRow{}
	for _, k := range append([]int64{1, 41, 39}, keys...) {
		q, args := text(bx.table, k)
		wants[k] = bx.mustOracle(q, args...)
	}
	// Alone first: a read of its own.
	q, args := text(bx.table, 39)
	if rows, err := bx.readAlone(q, args...); err != nil || !slices.Equal(rows, wants[39]) {
		t.Fatalf("%s %v alone: rows %v, error %v, want %v", abbrev(q), args, rows, err, wants[39])
	}
	x, err := bx.explain(q)
	if err != nil {
		t.Fatalf("ExplainDB %s: %v", abbrev(q), err)
	}
	if x.Batch == "" {
		t.Fatalf("%s: does not batch: %s (%s)", abbrev(q), x.BatchReason, x.Reason)
	}
	q, args = text(bx.table, 41)
	bx.warm(q, x.Batch, args...)
	base, before := bx.sh.Stats(), bx.statements()
	lk := bx.lock()
	q, args = text(bx.table, 1)
	first := bx.start(nil, q, args...)
	bx.waitLocked(waitRead, 1)
	calls := make([]*batchCall, len(keys))
	for i, k := range keys {
		q, args := text(bx.table, k)
		calls[i] = bx.start(nil, q, args...)
	}
	bx.waitPending(base, uint64(1+len(keys)), 0, 1)
	if err := lk.Rollback(); err != nil {
		t.Fatal(err)
	}
	first.want(t, wants[1])
	for i, k := range keys {
		calls[i].want(t, wants[k])
	}
	bx.wantStatements(before, 2, "one read in flight, the others gathered")
	bx.wantBatches(base, 1, uint64(len(keys)), 0)
}

// TestBatchInOfOneValue: WHERE id IN ($1), a list of one as gorm writes
// IN ? and bun IN (5), is a condition sqlscan.BatchOf takes as a batch
// key (col IN (v)): its reads return their rows alone, and batch as = does.
func TestBatchInOfOneValue(t *testing.T) {
	for _, c := range []struct {
		name string
		text func(table string, key int64) (string, []any)
	}{
		{"parameter", func(table string, key int64) (string, []any) {
			return fmt.Sprintf(`SELECT id, v, n FROM %s WHERE id IN ($1)`, table), []any{key}
		}},
		{"inlined", func(table string, key int64) (string, []any) {
			return fmt.Sprintf(`SELECT "t"."id", "t"."v", "t"."n" FROM %s AS "t" WHERE ("t"."id" IN (%d))`, table, key), nil
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			forEachBatchParent(t, nil, func(t *testing.T, bx *batchEnv) { bx.gatherForm(c.text) })
		})
	}
}

// TestBatchErrorIsEveryMembers: an error of the batch's statement that is
// not about a value (here the server cancels it) is every member's, and
// the Shield counts one failed statement; the breaker stays closed, and
// the next read of a member's key runs again.
func TestBatchErrorIsEveryMembers(t *testing.T) {
	forEachBatchParent(t, []sqlflight.Option{sqlflight.Options{BatchMaxKeys: 2}}, func(t *testing.T, bx *batchEnv) {
		q := fmt.Sprintf(`SELECT id, v, n FROM %s WHERE id = $1`, bx.table)
		bx.warm(q, "id", int64(41))
		base, before := bx.sh.Stats(), bx.statements()

		lk := bx.lock()
		first := bx.start(nil, q, int64(1))
		bx.waitLocked(waitRead, 1)
		b, c := bx.start(nil, q, int64(2)), bx.start(nil, q, int64(3))
		b2 := bx.start(nil, q, int64(2)) // a follower of 2
		bx.waitLocked(waitBatch, 1)      // full: on the server at once
		bx.waitPending(base, 3, 1, -1)
		var cancelled int
		if err := bx.admin.QueryRowContext(bx.ctx, `SELECT count(*) FILTER (WHERE pg_cancel_backend(pid)) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND strpos(query, $1) > 0 AND strpos(query, 'ANY(') > 0`, bx.table).Scan(&cancelled); err != nil || cancelled != 1 {
			t.Fatalf("cancelling the batch on the server: %d cancelled, error %v", cancelled, err)
		}
		for _, call := range []*batchCall{b, c, b2} {
			call.wait(t)
			if call.err == nil || batchSQLState(call.err) != "57014" {
				t.Errorf("%v in the cancelled batch: rows %v, error %v, want the server's 57014", call.args, call.rows, call.err)
			}
		}
		if err := lk.Rollback(); err != nil {
			t.Fatal(err)
		}
		first.want(t, []batchRow{batchRowOf(1)})
		st := bx.sh.Stats()
		if st.OriginErrors-base.OriginErrors != 1 || st.Batches != base.Batches || st.BreakerState != "closed" {
			t.Errorf("%d failed statements, %d batches, breaker %s, want 1, 0, closed; %s",
				st.OriginErrors-base.OriginErrors, st.Batches-base.Batches, st.BreakerState, batchStats(st))
		}
		if rows, err := batchRead(bx.ctx, bx.db, q, int64(2)); err != nil || !slices.Equal(rows, []batchRow{batchRowOf(2)}) {
			t.Errorf("2 after its batch failed: rows %v, error %v", rows, err)
		}
		bx.wantStatements(before, 2, "the read in flight and the read of 2 after (the cancelled batch is not counted)")
	})
}

// TestBatchExplain: ExplainDB names the column a statement batches on, or
// says why it does not: an aggregate, a LIMIT, the nobatch annotation,
// Options.NoBatch.
func TestBatchExplain(t *testing.T) {
	dsn := postgresDSN(t)
	admin := openRaw(t, dsn)
	for _, p := range batchParents {
		t.Run(p.name, func(t *testing.T) {
			bx := newBatchEnv(t, admin, dsn, p)
			off := newBatchEnv(t, admin, dsn, p, sqlflight.Options{NoBatch: true})
			for _, c := range []struct {
				bx        *batchEnv
				q, col    string
				reasonHas string
			}{
				{bx, `SELECT id, v, n FROM %s WHERE id = $1`, "id", ""},
				{bx, `SELECT id, v, n FROM %s WHERE s = $1 ORDER BY n`, "s", ""},
				{bx, `SELECT "t"."id" FROM %s AS "t" WHERE ("t"."id" = 42)`, "id", ""},
				{bx, `SELECT count(*) FROM %s WHERE id = $1`, "", "count"},
				{bx, `SELECT id, v, n FROM %s WHERE id = $1 LIMIT 1`, "", "LIMIT"},
				{bx, `/* sqlflight: nobatch */ SELECT id, v, n FROM %s WHERE id = $1`, "", "nobatch"},
				{off, `SELECT id, v, n FROM %s WHERE id = $1`, "", "NoBatch"},
			} {
				q := fmt.Sprintf(c.q, c.bx.table)
				x, err := c.bx.explain(q)
				if err != nil {
					t.Fatalf("%s: %v", q, err)
				}
				t.Logf("%s: batch %q, reason %q", abbrev(q), x.Batch, x.BatchReason)
				switch {
				case !x.Verified || !x.Shared:
					t.Errorf("%s: verified %v shared %v (%s)", q, x.Verified, x.Shared, x.Reason)
				case x.Batch != c.col:
					t.Errorf("%s: Batch %q (%s), want %q", q, x.Batch, x.BatchReason, c.col)
				case c.col != "" && x.BatchReason != "":
					t.Errorf("%s: batches on %s, with the reason %q", q, x.Batch, x.BatchReason)
				case c.col == "" && !strings.Contains(x.BatchReason, c.reasonHas):
					t.Errorf("%s: BatchReason %q, want one that names %q", q, x.BatchReason, c.reasonHas)
				}
			}
		})
	}
}

// holdBatches makes the Shield's batches wait for the statement in flight
// however long it runs (Options.BatchMaxWait < 0): the tests hold that
// statement behind a lock for as long as they need.
func holdBatches(opts []sqlflight.Option) []sqlflight.Option {
	out := make([]sqlflight.Option, 0, len(opts)+1)
	found := false
	for _, o := range opts {
		if so, ok := o.(sqlflight.Options); ok {
			if so.BatchMaxWait == 0 {
				so.BatchMaxWait = -1
			}
			o, found = so, true
		}
		out = append(out, o)
	}
	if !found {
		out = append([]sqlflight.Option{sqlflight.Options{BatchMaxWait: -1}}, out...)
	}
	return out
}
