package integration

// Regression tests for the server's verdict (issue 10): whatever a TTL,
// context policy or default says, sqlflight never shares a statement that
// really calls a VOLATILE function, however the call is spelled (keyword
// names, operators, attribute notation, name prefixes the scanner would
// guess at); only the statement's own pure= annotation vouches for one.

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight"
)

// openDefault opens a *sql.DB with sql.Open("sqlflight", dsn), that is on
// the package-level default Shield every such *sql.DB of the process
// shares. Its counters are not the test's own: count effects in the
// database instead.
func openDefault(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(sqlflight.DriverName, dsn)
	if err != nil {
		t.Fatalf("sql.Open(%q): %v", sqlflight.DriverName, err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// scalar reads the one value of a one-row, one-column query.
func scalar[T any](t testing.TB, ctx context.Context, db queryer, query string, args ...any) T {
	t.Helper()
	var v T
	if err := db.QueryRowContext(ctx, query, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", abbrev(query), err)
	}
	return v
}

// newSchema creates a uniquely named schema, dropped with everything in it
// when the test ends, and returns its name and a raw pool whose search_path
// starts with it (for setup statements).
func newSchema(t *testing.T, admin *sql.DB, base string) (string, *sql.DB) {
	t.Helper()
	s := "vs_" + uniqueID(t)
	mustExec(t, admin, "CREATE SCHEMA "+s)
	cleanupExec(t, admin, "DROP SCHEMA IF EXISTS "+s+" CASCADE")
	return s, openRaw(t, withDSNParams(t, base, "search_path", s+",public"))
}

// hits is a one-row counter table that volatile test functions bump: the
// database's own count of how often they ran.
const hitsDDL = `CREATE TABLE hits (n bigint NOT NULL); INSERT INTO hits VALUES (0)`

// bumpBody is the body of a plpgsql function that counts its call in
// schema's hits and returns ret.
func bumpBody(schema, ret string) string {
	return fmt.Sprintf(`LANGUAGE plpgsql VOLATILE AS $fn$
BEGIN
	UPDATE %s.hits SET n = n + 1;
	RETURN %s;
END
$fn$`, schema, ret)
}

func hitsIn(t testing.TB, admin *sql.DB, schema string) int64 {
	t.Helper()
	return scalar[int64](t, context.Background(), admin, fmt.Sprintf(`SELECT n FROM %s.hits`, schema))
}

// runsEveryTime runs query n times on db under ctx and fails unless the
// counter moved by exactly n: each run reached the database.
func runsEveryTime(t *testing.T, ctx context.Context, db *sql.DB, count func() int64, n int, query string, args ...any) {
	t.Helper()
	before := count()
	for i := range n {
		rows, err := db.QueryContext(ctx, query, args...)
		if err != nil {
			t.Fatalf("run %d of %s: %v", i+1, abbrev(query), err)
		}
		for rows.Next() {
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("run %d of %s: %v", i+1, abbrev(query), err)
		}
		_ = rows.Close()
	}
	if got := count() - before; got != int64(n) {
		t.Errorf("%s: ran %d times in the database for %d calls (a volatile function's result was shared)", abbrev(query), got, n)
	}
}

// insertingGate creates a gate function (see newGateFunc) that, once past
// the gate, inserts the number of its call into a fresh table and returns
// it: every execution gives a result of its own and leaves a row.
func insertingGate(t *testing.T, admin *sql.DB, dsn string) (*gate, string) {
	t.Helper()
	table := "public.vrows_" + uniqueID(t)
	mustExec(t, admin, fmt.Sprintf(`CREATE TABLE %s (call bigint NOT NULL)`, table))
	cleanupExec(t, admin, "DROP TABLE IF EXISTS "+table)
	g := newGateFunc(t, admin, dsn, "vherd", "bigint", fmt.Sprintf(`INSERT INTO %s VALUES (lastval());
	RETURN lastval();`, table))
	return g, table
}

// gatedHerd closes g, runs n callers of query (released together) on db
// under ctx, waits until each caller is either at the gate or waiting in
// the Shield (waiting reports the Shield's Waiting gauge), opens the gate
// and returns every caller's result.
func gatedHerd(t *testing.T, ctx context.Context, db *sql.DB, admin *sql.DB, g *gate, app string, waiting func() int64, n int, query string) []int64 {
	t.Helper()
	var wg sync.WaitGroup
	defer wg.Wait()
	g.close(t)
	defer g.open(t)
	start := make(chan struct{})
	out := make([]int64, n)
	errs := newErrBudget(t, 3)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if err := db.QueryRowContext(ctx, query).Scan(&out[i]); err != nil {
				errs.Errorf("caller %d: %v", i, err)
			}
		}()
	}
	close(start)
	var atGate int
	waitUntil(t, time.Minute, func() string {
		return fmt.Sprintf("%d callers accounted for: %d at the gate, %d waiting in the Shield", n, atGate, waiting())
	}, func() bool {
		_, atGate = backends(t, admin, app)
		return atGate >= 1 && int64(atGate)+waiting() >= int64(n)
	})
	t.Logf("before the gate opened: %d at the gate, %d waiting in the Shield", atGate, waiting())
	g.open(t)
	wg.Wait()
	return out
}

// distinct counts the distinct values of vs.
func distinct[T comparable](vs []T) int {
	m := map[T]struct{}{}
	for _, v := range vs {
		m[v] = struct{}{}
	}
	return len(m)
}

// TestVerdictVolatileNeverSharedUnderTTL: a plpgsql function left VOLATILE
// that inserts a row, called by 50 callers released together, runs 50
// times and gives each caller its own result under a context TTL, a ttl=
// annotation, a coalesce annotation and Options.Default. The first two go
// through sql.Open("sqlflight", …), the default Shield.
func TestVerdictVolatileNeverSharedUnderTTL(t *testing.T) {
	base := postgresDSN(t)
	admin := openRaw(t, base)
	const callers = 50
	defaultWaiting := func() int64 { return sqlflight.Default().Stats().Waiting }

	type setup struct {
		name string
		open func(t *testing.T, dsn string) (*sql.DB, func() int64)
		ctx  func(context.Context) context.Context
		ann  string // annotation before the statement
	}
	openDef := func(t *testing.T, dsn string) (*sql.DB, func() int64) { return openDefault(t, dsn), defaultWaiting }
	setups := []setup{
		{name: "context TTL via sql.Open", open: openDef,
			ctx: func(c context.Context) context.Context { return sqlflight.WithTTL(c, time.Minute, time.Minute) }},
		{name: "annotation TTL via sql.Open", open: openDef, ann: "/* sqlflight: ttl=1m */ "},
		{name: "coalesce annotation", open: openDef, ann: "/* sqlflight: coalesce */ "},
		{name: "Options.Default", open: func(t *testing.T, dsn string) (*sql.DB, func() int64) {
			db, sh := openFlight(t, dsn, sqlflight.Options{Default: sqlflight.Policy{Soft: time.Minute}})
			return db, func() int64 { return sh.Stats().Waiting }
		}},
	}
	forEachExecMode(t, base, func(t *testing.T, dsn string) {
		for _, s := range setups {
			t.Run(s.name, func(t *testing.T) {
				ctx := testContext(t, testTimeout)
				if s.ctx != nil {
					ctx = s.ctx(ctx)
				}
				app := "sqlflight_verdict_" + uniqueID(t)
				d := withDSNParams(t, dsn, "application_name", app)
				g, table := insertingGate(t, admin, d)
				db, waiting := s.open(t, d)
				query := fmt.Sprintf(`%sSELECT %s()`, s.ann, g.fn)

				got := gatedHerd(t, ctx, db, admin, g, app, waiting, callers, query)
				if n := scalar[int64](t, ctx, admin, `SELECT count(*) FROM `+table); n != callers {
					t.Errorf("%d rows inserted by %d callers of a volatile function, want %d", n, callers, callers)
				}
				if n := g.calls(t, admin); n != callers {
					t.Errorf("the function ran %d times for %d callers", n, callers)
				}
				if n := distinct(got); n != callers {
					t.Errorf("%d callers got %d distinct results, want each its own", callers, n)
				}
				// And once more, after the herd: still not from a cache.
				before := g.calls(t, admin)
				if v := scalar[int64](t, ctx, db, query); v <= before {
					t.Errorf("a later call returned %d, an earlier execution's result (the function had run %d times)", v, before)
				}
			})
		}
	})
}

// TestVerdictPureShares: pure=fn in the statement's own annotation vouches
// for the same inserting volatile function: 50 callers share one execution.
func TestVerdictPureShares(t *testing.T) {
	base := postgresDSN(t)
	admin := openRaw(t, base)
	const callers = 50
	forEachExecMode(t, base, func(t *testing.T, dsn string) {
		ctx := testContext(t, testTimeout)
		app := "sqlflight_verdict_" + uniqueID(t)
		d := withDSNParams(t, dsn, "application_name", app)
		g, table := insertingGate(t, admin, d)
		db, sh := openFlight(t, d)
		// The bare name, as a user would write it (the function lives in
		// public, on the search_path).
		bare := strings.TrimPrefix(g.fn, "public.")
		query := fmt.Sprintf(`/* sqlflight: ttl=1m pure=%s */ SELECT %s()`, strings.ToUpper(bare), g.fn)

		got := gatedHerd(t, ctx, db, admin, g, app, func() int64 { return sh.Stats().Waiting }, callers, query)
		if n := g.calls(t, admin); n != 1 {
			t.Errorf("the function vouched for by pure= ran %d times for %d callers, want 1: %s", n, callers, statsString(sh.Stats()))
		}
		if n := scalar[int64](t, ctx, admin, `SELECT count(*) FROM `+table); n != 1 {
			t.Errorf("%d rows inserted, want 1", n)
		}
		if n := distinct(got); n != 1 {
			t.Errorf("%d callers got %d distinct results, want one shared result", callers, n)
		}
	})
}

// TestVerdictVolatileBuiltinsUnderTTL: clock_timestamp() and timeofday()
// are volatile: under a context TTL 32 concurrent callers are neither
// coalesced nor cached, and 32 calls in a row give 32 distinct values.
func TestVerdictVolatileBuiltinsUnderTTL(t *testing.T) {
	base := postgresDSN(t)
	const callers = 32
	forEachExecMode(t, base, func(t *testing.T, dsn string) {
		for _, query := range []string{`SELECT clock_timestamp()::text`, `SELECT timeofday()`} {
			t.Run(query, func(t *testing.T) {
				ctx := sqlflight.WithTTL(testContext(t, testTimeout), time.Minute, time.Minute)
				db, sh := openFlight(t, dsn, sqlflight.Options{Default: sqlflight.Policy{Soft: time.Minute}})
				before := sh.Stats()
				var wg sync.WaitGroup
				start := make(chan struct{})
				got := make([]string, callers)
				errs := newErrBudget(t, 3)
				for i := range callers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						if err := db.QueryRowContext(ctx, query).Scan(&got[i]); err != nil {
							errs.Errorf("caller %d: %v", i, err)
						}
					}()
				}
				close(start)
				wg.Wait()
				after := sh.Stats()
				if after.Followers != before.Followers || after.FreshHits != before.FreshHits || after.Fills != before.Fills {
					t.Errorf("concurrent calls of a volatile built-in were shared: %s", statsString(after))
				}
				t.Logf("concurrent callers saw %d distinct values of %d", distinct(got), callers)

				seq := make([]string, callers)
				for i := range seq {
					seq[i] = scalar[string](t, ctx, db, query)
				}
				if n := distinct(seq); n != callers {
					t.Errorf("%d calls in a row gave %d distinct values, want %d: %s", callers, n, callers, statsString(sh.Stats()))
				}
			})
		}
	})
}

// TestVerdictKeywordNamedFunctions: user functions named like keywords the
// scanner may not take for calls (set, zone, freeze, verbose, columns, of,
// by) are called, qualified and through the search_path, under a context
// TTL: each call runs, and counts as the write it is.
func TestVerdictKeywordNamedFunctions(t *testing.T) {
	base := postgresDSN(t)
	admin := openRaw(t, base)
	names := []string{"set", "zone", "freeze", "verbose", "columns", "of", "by"}
	forEachExecMode(t, base, func(t *testing.T, dsn string) {
		schema, setup := newSchema(t, admin, base)
		mustExec(t, setup, hitsDDL)
		for _, n := range names {
			mustExec(t, setup, fmt.Sprintf(`CREATE FUNCTION %s.%q(text) RETURNS int %s`, schema, n, bumpBody(schema, "1")))
		}
		db, _ := openFlight(t, withDSNParams(t, dsn, "search_path", schema+",public"))
		ctx := sqlflight.WithTTL(testContext(t, testTimeout), time.Minute, time.Minute)
		count := func() int64 { return hitsIn(t, admin, schema) }
		for _, n := range names {
			for _, call := range []string{n + "('t')", schema + "." + n + "('t')"} {
				runsEveryTime(t, ctx, db, count, 3, "SELECT "+call)
			}
		}

		// A cached read of the table the function writes sees the write
		// at once.
		read := `SELECT n FROM hits`
		before := scalar[int64](t, ctx, db, read)
		scalar[int](t, ctx, db, `SELECT set('t')`)
		if got, want := scalar[int64](t, ctx, db, read), count(); got != want || got != before+1 {
			t.Errorf("after SELECT set('t') the read returned %d, want %d (it was %d before)", got, want, before)
		}
	})
}

// TestVerdictOperatorsAndAttributeNotation: a user operator backed by a
// volatile writing function, and functions called in attribute notation
// ((t).fn, t.fn): volatile ones run every time; a STABLE one that reads
// another table makes the cached read depend on that table.
func TestVerdictOperatorsAndAttributeNotation(t *testing.T) {
	base := postgresDSN(t)
	admin := openRaw(t, base)
	forEachExecMode(t, base, func(t *testing.T, dsn string) {
		schema, setup := newSchema(t, admin, base)
		mustExec(t, setup, hitsDDL,
			`CREATE TABLE items (id int PRIMARY KEY, a int NOT NULL)`,
			`INSERT INTO items VALUES (1, -1)`,
			`CREATE TABLE other (id int PRIMARY KEY, v int NOT NULL)`,
			`INSERT INTO other VALUES (1, 10)`,
			`CREATE FUNCTION lt_bump(int, int) RETURNS boolean `+bumpBody(schema, "$1 < $2"),
			fmt.Sprintf(`CREATE OPERATOR %s.<<< (LEFTARG = int, RIGHTARG = int, FUNCTION = %s.lt_bump)`, schema, schema),
			fmt.Sprintf(`CREATE FUNCTION bump(r %s.items) RETURNS int %s`, schema, bumpBody(schema, "r.id")),
			// An old-style body the server cannot see into, and a
			// standard one it can.
			fmt.Sprintf(`CREATE FUNCTION other_v(r %s.items) RETURNS int STABLE LANGUAGE sql AS 'SELECT v FROM %s.other WHERE id = (r).id'`, schema, schema),
			fmt.Sprintf(`CREATE FUNCTION other_w(r %s.items) RETURNS int STABLE LANGUAGE sql BEGIN ATOMIC SELECT v FROM %s.other WHERE id = (r).id; END`, schema, schema))
		db, sh := openFlight(t, withDSNParams(t, dsn, "search_path", schema+",public"))
		ctx := sqlflight.WithTTL(testContext(t, testTimeout), time.Minute, time.Minute)
		count := func() int64 { return hitsIn(t, admin, schema) }

		for _, q := range []string{
			`SELECT count(*) FROM items WHERE a <<< 0`,
			fmt.Sprintf(`SELECT count(*) FROM items WHERE a OPERATOR(%s.<<<) 0`, schema),
			`SELECT (i).bump FROM items AS i`,
			`SELECT i.bump FROM items AS i`,
			`SELECT (items).bump FROM items`,
		} {
			runsEveryTime(t, ctx, db, count, 3, q)
		}

		// The volatile functions above changed their connections' sessions
		// (as far as anyone can tell): a fresh pool for the cached reads.
		db, sh = openFlight(t, withDSNParams(t, dsn, "search_path", schema+",public"))
		v := 10
		for _, q := range []string{
			`/* sqlflight: ttl=1m */ SELECT (i).other_v FROM items AS i WHERE i.id = 1`,
			`/* sqlflight: ttl=1m */ SELECT i.other_w FROM items AS i WHERE i.id = 1`,
		} {
			if got := scalar[int](t, ctx, db, q); got != v {
				t.Fatalf("%s: got %d, want %d", q, got, v)
			}
			hits := sh.Stats().FreshHits
			scalar[int](t, ctx, db, q)
			if sh.Stats().FreshHits == hits {
				t.Errorf("%s: a STABLE function under a ttl= annotation was not cached: %s", q, statsString(sh.Stats()))
			}
			v++
			mustExec(t, db, fmt.Sprintf(`UPDATE other SET v = %d WHERE id = 1`, v))
			if got := scalar[int](t, ctx, db, q); got != v {
				t.Errorf("%s: after writing the table the function reads, got %d, want %d", q, got, v)
			}
		}
	})
}

// TestVerdictPrefixNamedFunction: a user function whose name has a prefix
// the scanner might take for a known family (st_, as PostGIS) but that is
// VOLATILE and writes is never shared.
func TestVerdictPrefixNamedFunction(t *testing.T) {
	base := postgresDSN(t)
	admin := openRaw(t, base)
	forEachExecMode(t, base, func(t *testing.T, dsn string) {
		schema, setup := newSchema(t, admin, base)
		fn := "st_touch_" + uniqueID(t)
		mustExec(t, setup, hitsDDL,
			fmt.Sprintf(`CREATE FUNCTION %s(int) RETURNS int %s`, fn, bumpBody(schema, "$1")))
		count := func() int64 { return hitsIn(t, admin, schema) }
		db, _ := openFlight(t, withDSNParams(t, dsn, "search_path", schema+",public"),
			sqlflight.Options{Default: sqlflight.Policy{Soft: time.Minute}})
		ctx := testContext(t, testTimeout)
		ttl := sqlflight.WithTTL(ctx, time.Minute, time.Minute)
		runsEveryTime(t, ctx, db, count, 3, fmt.Sprintf(`SELECT %s(1)`, fn))
		runsEveryTime(t, ttl, db, count, 3, fmt.Sprintf(`SELECT %s.%s(1)`, schema, fn))
		runsEveryTime(t, ctx, db, count, 3, fmt.Sprintf(`/* sqlflight: ttl=1m */ SELECT %s($1::int)`, fn), 2)
	})
}
