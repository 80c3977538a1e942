package verdict_test

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlflight/sqlflight/internal/sqlscan"
	"github.com/sqlflight/sqlflight/internal/verdict"
)

// postgresConn opens a pgx v5 connection to SQLFLIGHT_POSTGRES_DSN as a
// database/sql driver.Conn, or skips the test without it (fails it when
// SQLFLIGHT_REQUIRE_INTEGRATION=1).
func postgresConn(t *testing.T) driver.Conn {
	t.Helper()
	dsn := os.Getenv("SQLFLIGHT_POSTGRES_DSN")
	if dsn == "" {
		if os.Getenv("SQLFLIGHT_REQUIRE_INTEGRATION") == "1" {
			t.Fatal("SQLFLIGHT_POSTGRES_DSN not set")
		}
		t.Skip("SQLFLIGHT_POSTGRES_DSN not set")
	}
	rc, err := stdlib.GetDefaultDriver().Open(dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rc.Close() })
	return rc
}

// schema creates a schema of its own for the test, with stmts run in it,
// and drops it at the end.
func schema(t *testing.T, rc driver.Conn, stmts ...string) string {
	t.Helper()
	name := fmt.Sprintf("verdict_%s_%d", strings.ToLower(t.Name()), time.Now().UnixNano())
	ctx := context.Background()
	s := verdict.Of(rc)
	for _, q := range append([]string{"CREATE SCHEMA " + name}, stmts...) {
		if err := s.Exec(ctx, strings.ReplaceAll(q, "$S", name)); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() { _ = verdict.Of(rc).Exec(context.Background(), "DROP SCHEMA "+name+" CASCADE") })
	return name
}

// sessions are the two ways of asking one connection: through pgx, and
// through the database/sql driver interfaces any other parent has.
func sessions(rc driver.Conn) map[string]verdict.Session {
	return map[string]verdict.Session{"pgx": verdict.Of(rc), "driver": verdict.OfDriver(rc)}
}

// TestProbeVolatilityAndDependencies: the server's verdict names the base
// tables behind a view, the volatility of the functions a statement calls
// (a user function's own, random()'s), what it cannot see into, and the
// parameters' types; both sessions say the same and are left clean.
func TestProbeVolatilityAndDependencies(t *testing.T) {
	rc := postgresConn(t)
	ctx := context.Background()
	sch := schema(t, rc,
		"CREATE TABLE $S.vitems (id int8 PRIMARY KEY, note text)",
		"CREATE TABLE $S.vowners (id int8 PRIMARY KEY)",
		"CREATE VIEW $S.vview AS SELECT i.id, i.note FROM $S.vitems i JOIN $S.vowners o ON o.id = i.id",
		"CREATE FUNCTION $S.vstable(int8) RETURNS int8 STABLE LANGUAGE sql RETURN $1 + 1",
		"CREATE FUNCTION $S.vopaque() RETURNS int8 VOLATILE LANGUAGE plpgsql AS 'BEGIN RETURN 1; END'",
	)
	for name, s := range sessions(rc) {
		r := sqlscan.Scan("SELECT id, lower(note), " + sch + ".vstable(id) FROM " + sch + ".vview WHERE id = $1 AND note = $2")
		st, params, err := verdict.Probe(ctx, s, r)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !slices.Equal(st.Tables, []string{"vitems", "vowners"}) || !st.TablesKnown {
			t.Errorf("%s: tables %q (known %v), want the view's base tables", name, st.Tables, st.TablesKnown)
		}
		if !slices.Equal(params, []uint32{20, 25}) {
			t.Errorf("%s: parameter types %v, want [20 25]", name, params)
		}
		var stable, lower *verdict.Function
		for i, f := range st.Functions {
			switch f.Name {
			case "vstable":
				stable = &st.Functions[i]
			case "lower":
				lower = &st.Functions[i]
			}
		}
		if lower == nil || lower.Volatility != "immutable" || !lower.Builtin || lower.Schema != "pg_catalog" {
			t.Errorf("%s: functions %+v, want the built-in immutable lower", name, st.Functions)
		}
		if stable == nil || stable.Volatility != "stable" || stable.Builtin || stable.Opaque || !st.UserFunctions {
			t.Errorf("%s: functions %+v, want the user's stable vstable", name, st.Functions)
		}
		if len(st.Volatile) != 0 || len(st.PerSession) != 0 || st.TimeDependent {
			t.Errorf("%s: %+v, want nothing volatile, per-session or timed", name, st)
		}

		st, _, err = verdict.Probe(ctx, s, sqlscan.Scan("SELECT random(), now(), "+sch+".vopaque(), pg_backend_pid()"))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !slices.Contains(st.Volatile, "pg_catalog.random") || !slices.Contains(st.Volatile, sch+".vopaque") {
			t.Errorf("%s: volatile %q, want random and vopaque", name, st.Volatile)
		}
		if st.TablesKnown || !st.TimeDependent || !slices.Contains(st.PerSession, "pg_catalog.pg_backend_pid") {
			t.Errorf("%s: %+v, want tables unknown (an opaque body), time-dependent, per-session", name, st)
		}
		if !s.Clean() {
			t.Errorf("%s: the session is not clean after the probes", name)
		}
	}
}

// TestProbeRefusedIsNoProbe: a server that refuses the probe function (a
// read-only default here) gives ErrNoProbe, wrapping the server's error,
// and the session is left clean.
func TestProbeRefusedIsNoProbe(t *testing.T) {
	rc := postgresConn(t)
	ctx := context.Background()
	for name, s := range sessions(rc) {
		if err := s.Exec(ctx, "SET default_transaction_read_only = on"); err != nil {
			t.Fatal(err)
		}
		_, _, err := verdict.Probe(ctx, s, sqlscan.Scan("SELECT count(*) FROM pg_class WHERE relname = $1"))
		if !errors.Is(err, verdict.ErrNoProbe) || verdict.SQLState(err) != "25006" {
			t.Errorf("%s: err %v, want ErrNoProbe around 25006", name, err)
		}
		if err := s.Exec(ctx, "RESET default_transaction_read_only"); err != nil {
			t.Fatal(err)
		}
		if !s.Clean() {
			t.Errorf("%s: the session is not clean after a refused probe", name)
		}
	}
}

// TestClosureCascadesAndTriggers: a write reaches the tables whose foreign
// keys cascade from it; a user trigger makes it reach any table.
func TestClosureCascadesAndTriggers(t *testing.T) {
	rc := postgresConn(t)
	ctx := context.Background()
	suffix := fmt.Sprint(time.Now().UnixNano())
	parent, child, plain, trig := "cparent"+suffix, "cchild"+suffix, "cplain"+suffix, "ctrig"+suffix
	schema(t, rc,
		"CREATE TABLE $S."+parent+" (id int PRIMARY KEY)",
		"CREATE TABLE $S."+child+" (id int PRIMARY KEY, p int REFERENCES $S."+parent+" ON DELETE CASCADE)",
		"CREATE TABLE $S."+plain+" (id int PRIMARY KEY, p int REFERENCES $S."+parent+")",
		"CREATE TABLE $S."+trig+" (id int)",
		"CREATE FUNCTION $S.ctrigf() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NEW; END'",
		"CREATE TRIGGER t BEFORE INSERT ON $S."+trig+" FOR EACH ROW EXECUTE FUNCTION $S.ctrigf()",
	)
	for name, s := range sessions(rc) {
		cl, err := verdict.QueryClosure(ctx, s, parent)
		slices.Sort(cl.Tables)
		if err != nil || cl.All || !slices.Equal(cl.Tables, []string{child, parent}) {
			t.Errorf("%s: closure of the parent %+v, %v; want it and its cascading child", name, cl, err)
		}
		if cl, err := verdict.QueryClosure(ctx, s, `"`+strings.ToUpper(plain)+`"`); err != nil || cl.All || len(cl.Tables) != 1 {
			t.Errorf("%s: closure of the folded quoted name %+v, %v; want the table alone", name, cl, err)
		}
		if cl, err := verdict.QueryClosure(ctx, s, "public."+trig); err != nil || !cl.All {
			t.Errorf("%s: closure of a table with a trigger %+v, %v; want any table", name, cl, err)
		}
		if cl, err := verdict.QueryClosure(ctx, s, "cnone"+suffix); err != nil || cl.All || len(cl.Tables) != 0 {
			t.Errorf("%s: closure of no table %+v, %v", name, cl, err)
		}
	}
}

// TestColumnClasses: only columns of the taggable types, neither generated
// nor of a nondeterministic collation, get a class; a name that also names
// a view has none.
func TestColumnClasses(t *testing.T) {
	rc := postgresConn(t)
	ctx := context.Background()
	suffix := fmt.Sprint(time.Now().UnixNano())
	table, viewed := "ccols"+suffix, "cview"+suffix
	sch := schema(t, rc,
		"CREATE COLLATION $S.verdict_ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false)",
		"CREATE TABLE $S."+table+" (id int8, n int4, s int2, t text, v varchar(10), u uuid, b bool, "+
			"price numeric, g int8 GENERATED ALWAYS AS (id + 1) STORED, ci text COLLATE $S.verdict_ci)",
		"CREATE TABLE $S."+viewed+" (id int8)",
		"CREATE SCHEMA $S_other",
		"CREATE VIEW $S_other."+viewed+" AS SELECT 1::int8 AS id",
	)
	t.Cleanup(func() { _ = verdict.Of(rc).Exec(context.Background(), "DROP SCHEMA IF EXISTS "+sch+"_other CASCADE") })
	want := map[string]verdict.ColClass{"id": verdict.ClassInt, "n": verdict.ClassInt, "s": verdict.ClassInt,
		"t": verdict.ClassText, "v": verdict.ClassText, "u": verdict.ClassUUID, "b": verdict.ClassBool}
	for name, s := range sessions(rc) {
		cols, err := verdict.QueryColumns(ctx, s, table)
		if err != nil || fmt.Sprint(cols) != fmt.Sprint(want) {
			t.Errorf("%s: columns %v, %v; want %v", name, cols, err, want)
		}
		if cols, err := verdict.QueryColumns(ctx, s, viewed); err != nil || len(cols) != 0 {
			t.Errorf("%s: columns of a name that is also a view's %v, %v; want none", name, cols, err)
		}
	}
}
