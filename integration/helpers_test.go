package integration

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlflight/sqlflight"
)

// testTimeout bounds every test's own work; the go test -timeout is the
// last resort, not the plan.
const testTimeout = 3 * time.Minute

// testContext returns a context that ends after d or when the test ends.
func testContext(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// uniqueID returns a fresh lower-case identifier suffix, so that every test
// works on its own tables, functions and schemas.
func uniqueID(t testing.TB) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

// advisoryKey derives a bigint advisory lock key from a name.
func advisoryKey(name string) int64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return int64(h.Sum64() &^ (1 << 63))
}

// openRaw opens a database/sql pool on pgx's own stdlib driver: the oracle.
func openRaw(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx/v5", dsn) // pgx v4 (a parent of the drivers tests) registers "pgx" too
	if err != nil {
		t.Fatalf("open raw pgx: %v", err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// openFlight opens a *sql.DB through a new Shield wrapping pgx's stdlib
// connector for dsn, and returns both. Every test uses its own Shield, so its
// counters are its own.
func openFlight(t testing.TB, dsn string, opts ...sqlflight.Option) (*sql.DB, *sqlflight.Shield) {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("parse DSN: %v", err)
	}
	db := sqlflight.OpenDB(stdlib.GetConnector(*cfg), opts...)
	sh := sqlflight.ShieldOf(db)
	t.Cleanup(func() {
		_ = db.Close()
		// A Shield that cached runs the cache's goroutines until closed.
		if sh != nil {
			_ = sh.Close()
		}
	})
	if sh == nil {
		t.Fatal("sqlflight.ShieldOf returned nil for a *sql.DB from sqlflight.OpenDB")
	}
	return db, sh
}

// mustExec runs statements on db, failing the test on the first error.
func mustExec(t testing.TB, db interface {
	ExecContext(context.Context, string, ...any) (sql.Result, error)
}, stmts ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, s := range stmts {
		if _, err := db.ExecContext(ctx, s); err != nil {
			t.Fatalf("exec %q: %v", abbrev(s), err)
		}
	}
}

// cleanupExec runs statements on db when the test ends (for DROPs). It uses
// its own context and logs, rather than fails, on error.
func cleanupExec(t testing.TB, db *sql.DB, stmts ...string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, s := range stmts {
			if _, err := db.ExecContext(ctx, s); err != nil {
				t.Logf("cleanup %q: %v", abbrev(s), err)
			}
		}
	})
}

func abbrev(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 120 {
		return s[:117] + "..."
	}
	return s
}

// waitUntil polls cond until it holds or d passes; it fails the test with
// what() on timeout. Polling is how tests learn that callers are inside a
// flight; no assertion ever depends on how long something took.
func waitUntil(t testing.TB, d time.Duration, what func() string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for: %s", d, what())
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// statsString formats the interesting parts of a Stats snapshot.
func statsString(s sqlflight.Stats) string {
	reasons := make([]string, 0, len(s.BypassReasons))
	for k, v := range s.BypassReasons {
		reasons = append(reasons, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(reasons)
	return fmt.Sprintf("queries=%d bypassed=%d [%s] flights=%d followers=%d origin=%d originErr=%d batches=%d batched=%d batchLargest=%d batchAlone=%d tooLarge=%d badAnn=%d waiting=%d inFlight=%d realConns=%d realOpened=%d",
		s.Queries, s.Bypassed, strings.Join(reasons, " "), s.Flights, s.Followers, s.OriginExecutions, s.OriginErrors,
		s.Batches, s.BatchedReads, s.BatchLargest, s.BatchAlone,
		s.TooLarge, s.BadAnnotations, s.Waiting, s.InFlight, s.RealConns, s.RealConnsOpened)
}

// gate is a plpgsql function that counts its calls in a sequence and then
// blocks on a shared advisory lock while the test holds the lock exclusively
// on its own raw pgx connection. Queries that call the function through
// sqlflight therefore stay inside their flight until the test opens the
// gate, so tests can wait until every caller has joined the flight before
// any result exists.
type gate struct {
	fn   string // e.g. public.gate_0a1b2c
	seq  string
	key  int64
	dsn  string
	mu   sync.Mutex
	lock *pgx.Conn // holds the exclusive advisory lock while closed
}

// newGate creates the gate function and its sequence, in schema public
// (so they resolve under any search_path); both are dropped when the test
// ends. The function returns one int column, 1.
func newGate(t testing.TB, admin *sql.DB, dsn, prefix string) *gate {
	return newGateFunc(t, admin, dsn, prefix, "int", "RETURN 1;")
}

// newGateFunc is newGate with another result type and tail: the body counts
// the call, waits at the gate, then runs tail.
func newGateFunc(t testing.TB, admin *sql.DB, dsn, prefix, returns, tail string) *gate {
	t.Helper()
	id := uniqueID(t)
	g := &gate{fn: "public." + prefix + "_" + id, seq: "public." + prefix + "_seq_" + id, dsn: dsn}
	g.key = advisoryKey(g.fn)
	mustExec(t, admin,
		fmt.Sprintf(`CREATE SEQUENCE %s`, g.seq),
		fmt.Sprintf(`CREATE FUNCTION %s() RETURNS %s LANGUAGE plpgsql VOLATILE AS $fn$
BEGIN
	PERFORM nextval('%s');
	PERFORM pg_advisory_xact_lock_shared(%d);
	%s
END
$fn$`, g.fn, returns, g.seq, g.key, tail))
	cleanupExec(t, admin,
		fmt.Sprintf(`DROP FUNCTION IF EXISTS %s()`, g.fn),
		fmt.Sprintf(`DROP SEQUENCE IF EXISTS %s`, g.seq))
	t.Cleanup(func() { g.open(t) })
	return g
}

// close takes the exclusive advisory lock: callers of the function block.
func (g *gate) close(t testing.TB) {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.lock != nil {
		t.Fatal("gate closed twice")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The holder names itself, so that tests counting their own backends
	// by application_name do not count it.
	c, err := pgx.Connect(ctx, withDSNParams(t, g.dsn, "application_name", "sqlflight_gate_holder"))
	if err != nil {
		t.Fatalf("gate: connect: %v", err)
	}
	if _, err := c.Exec(ctx, `SELECT pg_advisory_lock($1)`, g.key); err != nil {
		_ = c.Close(context.Background())
		t.Fatalf("gate: lock: %v", err)
	}
	g.lock = c
}

// open releases the lock (by closing its connection, which cannot fail to
// release it). It is idempotent, and safe to defer.
func (g *gate) open(t testing.TB) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.lock == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := g.lock.Exec(ctx, `SELECT pg_advisory_unlock($1)`, g.key); err != nil {
		t.Errorf("gate: unlock: %v", err)
	}
	if err := g.lock.Close(ctx); err != nil {
		t.Errorf("gate: close lock connection: %v", err)
	}
	g.lock = nil
}

// calls returns how many times the function body ran (as seen by Postgres).
func (g *gate) calls(t testing.TB, admin *sql.DB) int64 {
	t.Helper()
	return sequenceCalls(t, admin, g.seq)
}

// sequenceCalls returns how many times nextval was called on a fresh
// sequence (START 1, INCREMENT 1).
func sequenceCalls(t testing.TB, admin *sql.DB, seq string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var last int64
	var called bool
	if err := admin.QueryRowContext(ctx, fmt.Sprintf(`SELECT last_value, is_called FROM %s`, seq)).Scan(&last, &called); err != nil {
		t.Fatalf("read sequence %s: %v", seq, err)
	}
	if !called {
		return 0
	}
	return last
}

// latencies summarises durations for logs (never for assertions).
func latencies(ds []time.Duration) string {
	if len(ds) == 0 {
		return "no samples"
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	q := func(p float64) time.Duration { return s[int(p*float64(len(s)-1))] }
	return fmt.Sprintf("n=%d p50=%v p99=%v max=%v", len(s), q(0.50), q(0.99), s[len(s)-1])
}

// backends counts the server processes of clients named app, and of those,
// the ones waiting for an advisory lock (that is, at a closed gate).
func backends(t testing.TB, admin *sql.DB, app string) (total, atGate int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := admin.QueryRowContext(ctx, `
		SELECT count(*),
		       count(*) FILTER (WHERE wait_event_type = 'Lock' AND wait_event = 'advisory')
		FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&total, &atGate)
	if err != nil {
		t.Fatalf("pg_stat_activity: %v", err)
	}
	return total, atGate
}

// errBudget reports the first few failures of concurrent workers and counts
// the rest, so that a broken guarantee does not bury the log.
type errBudget struct {
	t   testing.TB
	max int64
	n   atomic.Int64
}

func newErrBudget(t testing.TB, max int64) *errBudget {
	b := &errBudget{t: t, max: max}
	t.Cleanup(func() {
		if n := b.n.Load(); n > b.max {
			t.Errorf("… and %d more failures like the above", n-b.max)
		}
	})
	return b
}

func (b *errBudget) Errorf(format string, args ...any) {
	if b.n.Add(1) <= b.max {
		b.t.Errorf(format, args...)
	} else {
		// Still fail the test even when the message is suppressed.
		b.t.Fail()
	}
}

// countedLookup creates a table (id int, label text) holding rows (SQL
// VALUES), and a VOLATILE plpgsql function fn(want int) that returns the
// table's row with that id after bumping a sequence, so that the database
// itself counts the executions (sequenceCalls). Everything is dropped when
// the test ends.
func countedLookup(t testing.TB, admin *sql.DB, prefix, rows string) (table, seq, fn string) {
	t.Helper()
	id := uniqueID(t)
	table, seq, fn = prefix+"_"+id, "public."+prefix+"_seq_"+id, "public."+prefix+"_lookup_"+id
	mustExec(t, admin,
		fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, label text NOT NULL)`, table),
		fmt.Sprintf(`INSERT INTO %s VALUES %s`, table, rows),
		fmt.Sprintf(`CREATE SEQUENCE %s`, seq),
		fmt.Sprintf(`CREATE FUNCTION %s(want int) RETURNS TABLE(id int, label text) LANGUAGE plpgsql VOLATILE AS $fn$
BEGIN
	PERFORM nextval('%s');
	RETURN QUERY SELECT t.id, t.label FROM %s AS t WHERE t.id = want;
END
$fn$`, fn, seq, table))
	cleanupExec(t, admin,
		fmt.Sprintf(`DROP FUNCTION IF EXISTS %s(int)`, fn),
		fmt.Sprintf(`DROP SEQUENCE IF EXISTS %s`, seq),
		"DROP TABLE IF EXISTS "+table)
	return table, seq, fn
}
