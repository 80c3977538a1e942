package integration

// Regression tests for statements whose result the text alone does not
// fix (issue 10): volatile built-ins, per-session values, time words in
// literals and arguments, standard_conforming_strings = off, and readers
// with a shorter TTL than the writer of a cached entry.

import (
	"database/sql"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight"
)

// TestVerdictRelationSizeUnderTTL: pg_relation_size and friends are
// volatile: under a context TTL a second read after rows were inserted
// outside the Shield shows the new size, the one a raw client reads.
func TestVerdictRelationSizeUnderTTL(t *testing.T) {
	base := postgresDSN(t)
	admin := openRaw(t, base)
	forEachExecMode(t, base, func(t *testing.T, dsn string) {
		table := "public.sz_" + uniqueID(t)
		mustExec(t, admin, fmt.Sprintf(`CREATE TABLE %s (id int, pad text)`, table))
		cleanupExec(t, admin, "DROP TABLE IF EXISTS "+table)
		db, _ := openFlight(t, dsn)
		ctx := sqlflight.WithTTL(testContext(t, testTimeout), time.Minute, time.Minute)
		for _, f := range []string{"pg_relation_size", "pg_total_relation_size", "pg_table_size"} {
			q := fmt.Sprintf(`SELECT %s('%s')`, f, table)
			before := scalar[int64](t, ctx, db, q)
			// Some 40 kB more: at least a page, whatever the free space.
			mustExec(t, admin, fmt.Sprintf(`INSERT INTO %s SELECT g, repeat('x', 100) FROM generate_series(1, 300) AS g`, table))
			want := scalar[int64](t, ctx, admin, q)
			if want <= before {
				t.Fatalf("%s: %d after inserting rows, %d before: the table did not grow", f, want, before)
			}
			if got := scalar[int64](t, ctx, db, q); got != want {
				t.Errorf("%s under a TTL: %d after the insert, the server says %d (it was %d before)", f, got, want, before)
			}
		}
	})
}

// TestVerdictPerSessionValues: pg_backend_pid(), inet_client_port() and
// pg_prepared_statements under a TTL give each session its own value, the
// one the same session reads with sharing off.
func TestVerdictPerSessionValues(t *testing.T) {
	base := postgresDSN(t)
	forEachExecMode(t, base, func(t *testing.T, dsn string) {
		db, _ := openFlight(t, dsn, sqlflight.Options{Default: sqlflight.Policy{Soft: time.Minute}})
		ctx := sqlflight.WithTTL(testContext(t, testTimeout), time.Minute, time.Minute)
		conn := func() *sql.Conn {
			c, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			return c
		}
		c1, c2 := conn(), conn()
		const off = "/* sqlflight: off */ "
		for _, q := range []string{`SELECT pg_backend_pid()`, `SELECT inet_client_port()`} {
			want1, want2 := scalar[int64](t, ctx, c1, off+q), scalar[int64](t, ctx, c2, off+q)
			if want1 == want2 {
				t.Fatalf("%s: two sessions gave %d with sharing off", q, want1)
			}
			for range 2 {
				if got := scalar[int64](t, ctx, c1, q); got != want1 {
					t.Errorf("%s on session 1: %d, the session's own value is %d", q, got, want1)
				}
				if got := scalar[int64](t, ctx, c2, q); got != want2 {
					t.Errorf("%s on session 2: %d, the session's own value is %d", q, got, want2)
				}
			}
		}

		if strings.Contains(dsn, "simple_protocol") {
			return // pgx prepares nothing in this mode: every session has none
		}
		// pgx prepares each new statement text on the session (its
		// statement cache); the count query itself is prepared on the
		// first run, so each pair below is read once to settle.
		prepare := func(c *sql.Conn, tag string, n int) {
			for i := range n {
				scalar[int](t, ctx, c, fmt.Sprintf(`%sSELECT %d AS %s`, off, i, tag))
			}
		}
		// compare reads count on each session, in the order given, under a
		// TTL and with sharing off, and returns the sessions' own counts.
		compare := func(what, count string, sessions ...*sql.Conn) []int64 {
			t.Helper()
			for _, c := range sessions {
				scalar[int64](t, ctx, c, count)
				scalar[int64](t, ctx, c, off+count)
			}
			own := make([]int64, len(sessions))
			for i, c := range sessions {
				got, want := scalar[int64](t, ctx, c, count), scalar[int64](t, ctx, c, off+count)
				if got != want {
					t.Errorf("%s: %s on a session gave %d under a TTL, the session's own count is %d", what, count, got, want)
				}
				own[i] = want
			}
			return own
		}
		count := `SELECT count(*) FROM pg_prepared_statements`
		prepare(c2, "two", 12)
		n := compare("12 more on session 2", count, c1, c2)
		if n[1] <= n[0] {
			t.Fatalf("session 2 has %d prepared statements, session 1 %d: the setup did not prepare", n[1], n[0])
		}
		prepare(c1, "one", 20)
		if m := compare("20 more on session 1", count, c1, c2); m[0] < n[0]+20 {
			t.Errorf("session 1 has %d prepared statements after preparing 20 more than %d", m[0], n[0])
		}
		// DEALLOCATE ALL empties session 1; a new statement text (pgx's
		// cache still names the old ones), read first on session 2.
		mustExec(t, c1, off+"DEALLOCATE ALL")
		m := compare("after DEALLOCATE ALL on session 1", `SELECT count(*) AS n FROM pg_prepared_statements`, c2, c1)
		if m[1] >= m[0] {
			t.Errorf("after DEALLOCATE ALL session 1 has %d prepared statements, session 2 %d", m[1], m[0])
		}
	})
}

// TestVerdictTimeWords: 'now', 'today', 'tomorrow', 'yesterday' in
// literals, and bound as arguments, make a statement time-dependent: a
// context TTL does not cache it (only a TTL in its own annotation would).
func TestVerdictTimeWords(t *testing.T) {
	base := postgresDSN(t)
	admin := openRaw(t, base)
	forEachExecMode(t, base, func(t *testing.T, dsn string) {
		schema, setup := newSchema(t, admin, base)
		mustExec(t, setup, `CREATE TABLE days (d date NOT NULL)`,
			`INSERT INTO days VALUES (current_date - 1), (current_date), (current_date + 1)`)
		db, sh := openFlight(t, withDSNParams(t, dsn, "search_path", schema+",public"))
		ctx := sqlflight.WithTTL(testContext(t, testTimeout), time.Minute, time.Minute)
		cases := []struct {
			query  string
			args   []any
			cached bool
		}{
			{query: `SELECT 'now'::timestamptz`},
			{query: `SELECT timestamptz 'now'`},
			{query: `SELECT CAST('NOW' AS timestamp)`},
			{query: `SELECT date 'today'`},
			{query: `SELECT count(*) FROM days WHERE d = 'tomorrow'`},
			{query: `SELECT count(*) FROM days WHERE d = 'yesterday'::date`},
			{query: `SELECT $1::timestamptz`, args: []any{"now"}},
			{query: `SELECT $1::date`, args: []any{"today"}},
			{query: `SELECT count(*) FROM days WHERE d = $1`, args: []any{"tomorrow"}},
			{query: `SELECT count(*) FROM days WHERE d > $1::date`, args: []any{"Yesterday"}},
			// Controls: the same shapes with a fixed date are cached.
			{query: `SELECT date '2001-02-03'`, cached: true},
			{query: `SELECT $1::date`, args: []any{"2001-02-03"}, cached: true},
		}
		for _, c := range cases {
			before := sh.Stats()
			for range 2 {
				readString(t, ctx, db, c.query, c.args...)
			}
			after := sh.Stats()
			hit := after.FreshHits > before.FreshHits
			switch {
			case c.cached && !hit:
				t.Errorf("%s %v: the control was not cached, so the test shows nothing: %s", c.query, c.args, statsString(after))
			case !c.cached && (hit || after.Fills != before.Fills):
				t.Errorf("%s %v: cached under a context TTL though it depends on the time: %s", c.query, c.args, statsString(after))
			}
		}
	})
}

// TestVerdictNonStandardStrings: with standard_conforming_strings = off
// (as a startup parameter, and as the role's default) a backslash escapes
// a quote, so `'a\' , ', nextval(…) -- '` calls nextval: the statement is
// never shared and each call runs, under a context TTL and a ttl=
// annotation.
func TestVerdictNonStandardStrings(t *testing.T) {
	base := postgresDSN(t)
	admin := openRaw(t, base)
	id := uniqueID(t)
	seq, log, fn, role := "public.scs_seq_"+id, "public.scs_log_"+id, "public.scs_ins_"+id, "scs_role_"+id
	mustExec(t, admin,
		`CREATE SEQUENCE `+seq,
		fmt.Sprintf(`CREATE TABLE %s (id int)`, log),
		fmt.Sprintf(`CREATE FUNCTION %s() RETURNS int LANGUAGE plpgsql VOLATILE AS $fn$
BEGIN
	INSERT INTO %s VALUES (1);
	RETURN 1;
END
$fn$`, fn, log),
		fmt.Sprintf(`CREATE ROLE %s LOGIN`, role),
		fmt.Sprintf(`ALTER ROLE %s SET standard_conforming_strings = off`, role),
		fmt.Sprintf(`GRANT USAGE, SELECT, UPDATE ON SEQUENCE %s TO %s`, seq, role),
		fmt.Sprintf(`GRANT SELECT, INSERT ON %s TO %s`, log, role))
	// Registered first, so it runs after every pool of the role is closed.
	cleanupExec(t, admin,
		fmt.Sprintf(`DROP FUNCTION IF EXISTS %s()`, fn),
		"DROP TABLE IF EXISTS "+log,
		"DROP SEQUENCE IF EXISTS "+seq,
		"DROP OWNED BY "+role,
		"DROP ROLE IF EXISTS "+role)

	asRole := func(t *testing.T) string {
		u, err := url.Parse(base)
		if err != nil || u.Scheme == "" {
			t.Fatalf("this test needs a URL DSN to change the user: %v", err)
		}
		u.User = url.User(role)
		return u.String()
	}
	dsns := []struct {
		name string
		dsn  func(t *testing.T) string
	}{
		{"startup parameter", func(t *testing.T) string {
			return withDSNParams(t, base, "standard_conforming_strings", "off")
		}},
		{"role default", asRole},
	}
	for _, d := range dsns {
		t.Run(d.name, func(t *testing.T) {
			db, _ := openFlight(t, d.dsn(t))
			plain := testContext(t, testTimeout)
			if got := readString(t, plain, db, `SHOW standard_conforming_strings`); got != "off" {
				t.Fatalf("standard_conforming_strings = %q, want off", got)
			}
			var s string
			var n int64
			probe := fmt.Sprintf(`SELECT 'a\' , ', nextval($$%s$$) -- '`, seq)
			if err := db.QueryRowContext(plain, "/* sqlflight: off */ "+probe).Scan(&s, &n); err != nil || s != `a' , ` {
				t.Fatalf("the server did not read the backslash as an escape: %q %v", s, err)
			}
			ttl := sqlflight.WithTTL(plain, time.Minute, time.Minute)
			calls := func() int64 { return sequenceCalls(t, admin, seq) }
			runsEveryTime(t, ttl, db, calls, 3, probe)
			runsEveryTime(t, plain, db, calls, 3, "/* sqlflight: ttl=1m */ "+probe)

			rows := func() int64 { return scalar[int64](t, plain, admin, `SELECT count(*) FROM `+log) }
			write := fmt.Sprintf(`SELECT 'a\' , ', %s() -- '`, fn)
			runsEveryTime(t, ttl, db, rows, 3, write)
			// And the write is seen by a cached read of the table.
			read := fmt.Sprintf(`/* sqlflight: ttl=1m */ SELECT count(*) FROM %s`, log)
			scalar[int64](t, plain, db, read)
			runsEveryTime(t, ttl, db, rows, 1, write)
			if got, want := scalar[int64](t, plain, db, read), rows(); got != want {
				t.Errorf("after the hidden insert a cached read counts %d rows, the table has %d", got, want)
			}
		})
	}
}

// TestVerdictStricterReader: an entry filled under ttl=1m does not answer a
// reader whose own policy is ttl=500ms with a value older than that: once
// the value changed outside the Shield, such a reader sees it within its
// own TTL (polled, never timed).
func TestVerdictStricterReader(t *testing.T) {
	base := postgresDSN(t)
	admin := openRaw(t, base)
	forEachExecMode(t, base, func(t *testing.T, dsn string) {
		table := "public.strict_" + uniqueID(t)
		mustExec(t, admin,
			fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, v text NOT NULL)`, table),
			fmt.Sprintf(`INSERT INTO %s VALUES (1, 'old')`, table))
		cleanupExec(t, admin, "DROP TABLE IF EXISTS "+table)
		db, sh := openFlight(t, dsn)
		ctx := testContext(t, testTimeout)
		body := fmt.Sprintf(`SELECT v FROM %s WHERE id = 1`, table)
		long, short := "/* sqlflight: ttl=1m */ "+body, "/* sqlflight: ttl=500ms */ "+body
		if got := readString(t, ctx, db, long); got != "old" {
			t.Fatalf("first read: %q", got)
		}
		hits := sh.Stats().FreshHits
		readString(t, ctx, db, long)
		if sh.Stats().FreshHits == hits {
			t.Fatalf("the ttl=1m read was not cached: %s", statsString(sh.Stats()))
		}
		// Outside the Shield: only the TTLs can bring the new value.
		mustExec(t, admin, fmt.Sprintf(`UPDATE %s SET v = 'new' WHERE id = 1`, table))
		var got string
		waitUntil(t, 10*time.Second, func() string {
			return fmt.Sprintf("a ttl=500ms reader to see the new value; it still reads %q from an entry filled under ttl=1m: %s", got, statsString(sh.Stats()))
		}, func() bool {
			got = readString(t, ctx, db, short)
			return got == "new"
		})
	})
}
