package sqlflight

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight/internal/sqlscan"
	pgverdict "github.com/sqlflight/sqlflight/internal/verdict"
)

func TestScopeOf(t *testing.T) {
	if _, ok := ScopeOf(context.Background()); ok {
		t.Error("a plain context carries a scope")
	}
	ctx := WithScope(context.Background(), "")
	if s, ok := ScopeOf(ctx); !ok || s != "" {
		t.Errorf("empty scope: %q %v", s, ok)
	}
	if s, ok := ScopeOf(WithScope(ctx, "tenant-b")); !ok || s != "tenant-b" {
		t.Errorf("inner scope: %q %v", s, ok)
	}
}

// scopedConn returns a connection of db whose session was changed under
// ctx by a function the scanner cannot vouch for (a tenant helper).
func scopedConn(t *testing.T, ctx context.Context, db *sql.DB, helper string) *sql.Conn {
	t.Helper()
	c, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if helper != "" {
		if _, err := c.ExecContext(ctx, helper); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

func connRead(t *testing.T, ctx context.Context, c *sql.Conn, q string) int64 {
	t.Helper()
	var n int64
	if err := c.QueryRowContext(ctx, q, 1).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// TestUnknownFunctionChangesSession: a function the scanner cannot vouch
// for (on a parent whose server cannot be asked) may be a tenant helper
// calling set_config: the connection bypasses sharing afterwards, by Exec,
// by Query, in a transaction, in DML. Known built-ins (what ORMs write) do
// not change the session.
func TestUnknownFunctionChangesSession(t *testing.T) {
	changes := []string{
		"SELECT app_use_tenant('b')",
		"SELECT * FROM app_use_tenant('b')",
		"SELECT public.app_use_tenant('b')",
		"UPDATE t SET v = app_use_tenant('b') WHERE id = 1",
		"EXPLAIN ANALYZE SELECT app_use_tenant('b')",
		"SELECT 1; SELECT app_use_tenant('b')",
		"UPDATE pg_settings SET setting = 'b' WHERE name = 'search_path'",
		"CREATE TABLE pg_temp.t (a int)",
		"SELECT 1 INTO pg_temp.t",
		"CREATE VIEW pg_temp.v AS SELECT 1",
		"CREATE SEQUENCE pg_temp.s",
		"/* sqlflight: coalesce ttl=1m */ SELECT app_use_tenant('b')",
	}
	clean := []string{
		"SELECT count(*), coalesce(max(id), 0) FROM t WHERE lower(name) = lower('x') AND created_at < now()",
		"UPDATE t SET updated_at = now(), name = lower(name) WHERE id = 1",
		"INSERT INTO t (id, name, created_at) VALUES (1, 'x', now()) RETURNING id",
		"DELETE FROM t WHERE id = 1",
		"SELECT nextval('s'), random(), gen_random_uuid()",
		"SELECT pg_advisory_xact_lock(1)",
		"EXPLAIN SELECT app_use_tenant('b')",
		"CREATE VIEW v AS SELECT app_use_tenant('b')",
		"/* sqlflight: pure=app_use_tenant */ SELECT app_use_tenant('b')",
	}
	for _, stmt := range append(changes, clean...) {
		changed := slices.Contains(changes, stmt)
		t.Run(stmt, func(t *testing.T) {
			db, s, _, _ := openCached(t, Options{})
			ctx := context.Background()
			c := scopedConn(t, ctx, db, stmt)
			connRead(t, ctx, c, ttlQuery)
			connRead(t, ctx, c, ttlQuery)
			st := s.Stats()
			if got := st.BypassReasons[bypassSession] == 2 && st.Flights == 0; got != changed {
				t.Errorf("session changed: %v, want %v (%+v)", got, changed, st.BypassReasons)
			}
		})
	}
	// In a transaction: the change outlives COMMIT (set_config(…, false)).
	db, s, _, _ := openCached(t, Options{})
	ctx := context.Background()
	c := scopedConn(t, ctx, db, "")
	tx, err := c.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "SELECT app_use_tenant('b')"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	connRead(t, ctx, c, ttlQuery)
	if st := s.Stats(); st.BypassReasons[bypassSession] != 1 {
		t.Errorf("a change made in a transaction ended with it: %+v", st.BypassReasons)
	}
}

// TestScopedSessionsShareWithinTheirScope: sessions changed under a
// context scope share with each other under that scope only; clean
// sessions, other scopes and no scope key apart; temporary objects and
// changes under no scope still bypass; DISCARD ALL makes a session new.
func TestScopedSessionsShareWithinTheirScope(t *testing.T) {
	db, s, c, _ := openCached(t, Options{})
	bg := context.Background()
	inA, inB := WithScope(bg, "a"), WithScope(bg, "b")
	const helperA, helperB = "SELECT app_use_tenant('a')", "SELECT app_use_tenant('b')"
	a1, a2 := scopedConn(t, inA, db, helperA), scopedConn(t, inA, db, helperA)
	b1 := scopedConn(t, inB, db, helperB)

	if n := connRead(t, inA, a1, ttlQuery); n != 1 {
		t.Fatalf("first read of a: %d", n)
	}
	if n := connRead(t, inA, a2, ttlQuery); n != 1 {
		t.Errorf("another session of a read %d, not a's cached 1", n)
	}
	if n := connRead(t, inB, b1, ttlQuery); n == 1 {
		t.Error("a session of b was served a's result")
	}
	if st := s.Stats(); st.FreshHits != 1 || st.BypassReasons[bypassSession] != 0 {
		t.Errorf("%+v", st)
	}

	// A session of a reads under b, or under no scope: straight to the
	// database.
	before := c.d.queries.Load()
	connRead(t, inB, a1, ttlQuery)
	connRead(t, bg, a1, ttlQuery)
	if st := s.Stats(); st.BypassReasons[bypassSession] != 2 || c.d.queries.Load() != before+2 {
		t.Errorf("a session read outside its scope shared: %+v", st)
	}

	// A clean session under a keys apart from a's sessions: it has no
	// tenant set.
	clean := scopedConn(t, inA, db, "")
	if n := connRead(t, inA, clean, ttlQuery); n == 1 {
		t.Error("a clean session under a was served a's sessions' result")
	}
	if n := connRead(t, bg, clean, ttlQuery); n == 1 {
		t.Error("a clean session with no scope was served a's result")
	}

	// The last change decides: a session of a changed under b is b's.
	if _, err := a2.ExecContext(inB, helperB); err != nil {
		t.Fatal(err)
	}
	connRead(t, inB, b1, ttlQuery) // b's entry (the helper's call counted as a write)
	hits := s.Stats().FreshHits
	connRead(t, inB, a2, ttlQuery)
	if s.Stats().FreshHits != hits+1 {
		t.Error("a session changed under b did not share with b")
	}

	// Changes under no scope, and temporary objects under a scope, make a
	// session unknown.
	for _, tc := range []struct {
		ctx  context.Context
		stmt string
	}{
		{bg, helperA},
		{inA, "CREATE TEMP TABLE x (a int)"},
		{inA, "CREATE TABLE pg_temp.x (a int)"},
	} {
		u := scopedConn(t, inA, db, helperA)
		if _, err := u.ExecContext(tc.ctx, tc.stmt); err != nil {
			t.Fatal(err)
		}
		before := s.Stats().BypassReasons[bypassSession]
		connRead(t, inA, u, ttlQuery)
		if s.Stats().BypassReasons[bypassSession] != before+1 {
			t.Errorf("%s: the session still shared under a", tc.stmt)
		}
		// Not even a later change under a scope vouches for it.
		if _, err := u.ExecContext(inA, helperA); err != nil {
			t.Fatal(err)
		}
		connRead(t, inA, u, ttlQuery)
		if s.Stats().BypassReasons[bypassSession] != before+2 {
			t.Errorf("%s: a change under a scope made the session a's again", tc.stmt)
		}
		if _, err := u.ExecContext(bg, "DISCARD ALL"); err != nil {
			t.Fatal(err)
		}
		connRead(t, bg, u, ttlQuery)
		if s.Stats().BypassReasons[bypassSession] != before+2 {
			t.Errorf("%s: DISCARD ALL did not make the session new", tc.stmt)
		}
	}
}

// TestScopedSessionEntryNotRefreshedOnASpare: a stale entry of a scope's
// sessions is a miss, read again on a session of the scope; a spare
// connection (a clean session, without the tenant) never refreshes it.
func TestScopedSessionEntryNotRefreshedOnASpare(t *testing.T) {
	db, s, c, clk := openCached(t, Options{})
	inA := WithScope(context.Background(), "a")
	a1 := scopedConn(t, inA, db, "SELECT app_use_tenant('a')")
	connRead(t, inA, a1, ttlQuery)
	clk.Add(9 * time.Second)
	connRead(t, inA, a1, ttlQuery) // fresh: no early refresh either
	clk.Add(2 * time.Second)       // stale, not expired
	if n := connRead(t, inA, a1, ttlQuery); n != 2 {
		t.Errorf("a stale entry of a's sessions served %d, not read again", n)
	}
	settle(t, s)
	if st := s.Stats(); st.Refreshes != 0 || st.StaleHits != 0 || c.d.queries.Load() != 2 {
		t.Errorf("refreshed in the background: %+v", st)
	}
}

// TestSessionChangeWithoutVerdict: on a PostgreSQL scope, a statement whose
// verdict failed (the probe could not plan it) or is not known in time is
// judged by the scanner: a function it cannot vouch for changes the
// session; a plain read changes nothing when its verdict failed.
func TestSessionChangeWithoutVerdict(t *testing.T) {
	s := New()
	sc := s.newScope()
	sc.postgres = true
	h := &probeHost{verdictHost: verdictHost{s.engine, sc}, release: make(chan struct{})}
	defer close(h.release)
	sc.verdicts = pgverdict.NewBook[*readFilter](h)
	done, cancel := context.WithCancel(context.Background())
	cancel()
	cases := []struct {
		sql     string
		failed  bool // else pending
		changes bool
	}{
		{"SELECT app_use_tenant('b')", true, true},
		{"SELECT app_use_tenant('b') AS t", false, true},
		{"SELECT n FROM items WHERE id = $1", true, false},
		{"SELECT n FROM items WHERE id = $2", false, true},
	}
	for _, failed := range []bool{true, false} {
		h.fail.Store(failed)
		for _, tc := range cases {
			if tc.failed != failed {
				continue
			}
			v := sc.verdicts.Of(sqlscan.Scan(tc.sql))
			if failed && (!v.Await(context.Background()) || v.Err == nil) || !failed && v.Known() {
				t.Fatalf("%s: verdict known %v, error %v", tc.sql, v.Known(), v.Err)
			}
		}
	}
	for _, tc := range cases {
		r := sqlscan.Scan(tc.sql)
		c := &conn{s: s.engine, sc: sc}
		c.record(done, &fate{r: r}, false)
		if c.tainted != tc.changes {
			t.Errorf("%s (verdict failed %v): session changed %v, want %v", tc.sql, tc.failed, c.tainted, tc.changes)
		}
	}
}

// probeHost is a verdict Host whose probes fail at once (fail) or wait
// for release.
type probeHost struct {
	verdictHost
	fail    atomic.Bool
	release chan struct{}
}

func (h *probeHost) Spare(ctx context.Context, _ func(pgverdict.Session) error) error {
	if h.fail.Load() {
		return errors.New("sqlflight: the server could not plan it")
	}
	select {
	case <-h.release:
	case <-ctx.Done():
	}
	return errors.New("sqlflight: released")
}
