package sqlscan

import (
	"context"
	"database/sql"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
)

// liveDB opens the PostgreSQL named by SQLFLIGHT_POSTGRES_DSN. Without it the test is skipped,
// unless SQLFLIGHT_REQUIRE_INTEGRATION=1, which makes a missing server a failure.
func liveDB(t *testing.T) *sql.DB {
	t.Helper()
	dsn := os.Getenv("SQLFLIGHT_POSTGRES_DSN")
	if dsn == "" {
		if os.Getenv("SQLFLIGHT_REQUIRE_INTEGRATION") == "1" {
			t.Fatal("SQLFLIGHT_REQUIRE_INTEGRATION=1 but SQLFLIGHT_POSTGRES_DSN is not set")
		}
		t.Skip("SQLFLIGHT_POSTGRES_DSN is not set: the function tables cannot be checked against a server")
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		t.Fatalf("SQLFLIGHT_POSTGRES_DSN: %v", err)
	}
	return db
}

// liveTx begins a transaction that the test rolls back, with the extensions whose functions
// the tables name created inside it when the server has them (CREATE EXTENSION is
// transactional: nothing outlives the test).
func liveTx(t *testing.T, db *sql.DB) (context.Context, *sql.Tx) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback() })
	for _, ext := range []string{"hstore", "pgcrypto", "pg_trgm", "cube"} {
		var avail bool
		if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = $1)`, ext).Scan(&avail); err != nil {
			t.Fatal(err)
		}
		if !avail {
			t.Logf("extension %s is not available: its functions are not checked", ext)
			continue
		}
		if _, err := tx.ExecContext(ctx, `CREATE EXTENSION IF NOT EXISTS "`+ext+`"`); err != nil {
			t.Fatalf("create extension %s: %v", ext, err)
		}
	}
	return ctx, tx
}

// TestFunctionTableAgainstServer checks every name the scanner vouches for against pg_proc of a
// live server: a safe name (Shareable) or a time name (InFlightOnly) with a VOLATILE overload
// among the built-ins (pg_catalog or extension members) is a wrong verdict.
func TestFunctionTableAgainstServer(t *testing.T) {
	db := liveDB(t)
	ctx, tx := liveTx(t, db)

	var names []string
	class := map[string]fnClass{}
	for n, fi := range funcs {
		if fi.class == fnSafe || fi.class == fnTime {
			names = append(names, n)
			class[n] = fi.class
		}
	}
	slices.Sort(names)

	rows, err := tx.QueryContext(ctx, `
		SELECT p.proname, p.oid::regprocedure::text, p.provolatile::text
		FROM pg_proc p
		WHERE p.proname = ANY($1)
		  AND (p.pronamespace = 'pg_catalog'::regnamespace
		       OR EXISTS (SELECT 1 FROM pg_depend d
		                  WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'))
		ORDER BY 1, 2`, names)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	found := map[string]bool{}
	checked := 0
	for rows.Next() {
		var name, sig, vol string
		if err := rows.Scan(&name, &sig, &vol); err != nil {
			t.Fatal(err)
		}
		found[name] = true
		checked++
		if vol == "v" {
			what := "safe (Shareable)"
			if class[name] == fnTime {
				what = "time-dependent (InFlightOnly)"
			}
			t.Errorf("%s is VOLATILE but the scanner calls %s %s", sig, name, what)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var missing []string
	for _, n := range names {
		if !found[n] {
			missing = append(missing, n)
		}
	}
	if len(found) < len(names)/2 {
		t.Fatalf("only %d of %d names found in pg_proc: the query is wrong", len(found), len(names))
	}
	t.Logf("%d names, %d overloads checked; not in this server's pg_proc (special syntax, newer "+
		"versions or extensions not installed): %s", len(names), checked, strings.Join(missing, " "))
}

// TestKeywordFunctionNamesAgainstServer asks the server, for every keyword it knows, whether
// "SELECT word(1)" calls a user function named word (created inside a rolled-back
// transaction), and checks that the scanner records a call wherever the server makes one, in
// the select list, in WHERE and in FROM.
func TestKeywordFunctionNamesAgainstServer(t *testing.T) {
	db := liveDB(t)
	ctx, tx := liveTx(t, db)
	rows, err := tx.QueryContext(ctx, `SELECT word, catcode FROM pg_get_keywords() ORDER BY word`)
	if err != nil {
		t.Fatal(err)
	}
	type kw struct{ word, cat string }
	var words []kw
	for rows.Next() {
		var k kw
		if err := rows.Scan(&k.word, &k.cat); err != nil {
			t.Fatal(err)
		}
		words = append(words, k)
	}
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}
	callable := 0
	for _, k := range words {
		if _, err := tx.ExecContext(ctx, "SAVEPOINT kw"); err != nil {
			t.Fatal(err)
		}
		ok := false
		q := `CREATE FUNCTION public."` + k.word + `"(int) RETURNS int LANGUAGE sql AS 'SELECT 424242'`
		if _, err := tx.ExecContext(ctx, q); err == nil {
			var v int
			ok = tx.QueryRowContext(ctx, "SELECT "+k.word+"(1)").Scan(&v) == nil && v == 424242
		}
		if _, err := tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT kw"); err != nil {
			t.Fatal(err)
		}
		if !ok {
			continue
		}
		callable++
		for _, sql := range []string{
			"SELECT " + k.word + "(1)",
			"SELECT a FROM t WHERE " + k.word + "(1) > 0",
			"SELECT * FROM " + k.word + "(1)",
			"SELECT " + strings.ToUpper(k.word) + "(1)",
		} {
			if r := Parse(sql); !slices.Contains(r.Functions, k.word) {
				t.Errorf("%s (keyword category %s): the server calls function %s, the scanner records %q", sql, k.cat, k.word, r.Functions)
			}
		}
	}
	if callable < 100 {
		t.Fatalf("only %d keywords are callable: the probe is wrong", callable)
	}
	t.Logf("%d keywords, %d callable as function names", len(words), callable)
}

// timeInputs is a corpus of date/time inputs: clock-relative ones in many spellings, absolute
// ones (far from today), and near misses.
var timeInputs = []string{
	"now", " now ", "NOW", "Now", "\tnow\n", "now UTC", "now+1", "now zulu", "now 10:00", "now()",
	"today", "today 10:00", "10:00 today", "today,10:00", "today+02", "today10:00", "today_10:00",
	"today allballs", "allballs today", "today 10:00 +02", "today J", "today_", "today-1", "today.5",
	"tomorrow", "TOMORROW 23:59", "tomorrow midnight", "tomorrow_midnight", "yesterday",
	"yesterday 00:00:00 UTC", "Today Tomorrow", "now,today",
	"todayx", "todayT10:00", "todayt", "nowZ", "now1", "1now", "xnow", "nowhere", "tod", "to day",
	"n ow", "current", "epoch", "infinity", "-infinity", "allballs", "2001-02-03",
	"2001-02-03 04:05:06", "J2451187", "10:00", "04:05 PM", "2001-02-03T04:05:06Z",
}

// TestTimeWordAgainstServer feeds every input to the server's date, timestamp, timestamptz,
// time and timetz input functions and checks that TimeWord says yes wherever the value is
// relative to the clock (a date within two days of today, or a time equal to the
// transaction's local time).
func TestTimeWordAgainstServer(t *testing.T) {
	db := liveDB(t)
	ctx, tx := liveTx(t, db)
	checks := []struct{ typ, relative string }{
		{"date", "v BETWEEN current_date - 2 AND current_date + 2"},
		{"timestamp", "v::date BETWEEN current_date - 2 AND current_date + 2"},
		{"timestamptz", "v::date BETWEEN current_date - 2 AND current_date + 2"},
		{"time", "v = localtime"},
		{"timetz", "v::time = localtime"},
	}
	// Inputs with a zone (now UTC) are compared in that zone.
	if _, err := tx.ExecContext(ctx, "SET LOCAL TimeZone = 'UTC'"); err != nil {
		t.Fatal(err)
	}
	relative := 0
	for _, in := range timeInputs {
		for _, ck := range checks {
			if _, err := tx.ExecContext(ctx, "SAVEPOINT tw"); err != nil {
				t.Fatal(err)
			}
			var rel bool
			err := tx.QueryRowContext(ctx, `SELECT `+ck.relative+` FROM (SELECT $1::text::`+ck.typ+` AS v) s`, in).Scan(&rel)
			if _, err := tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT tw"); err != nil {
				t.Fatal(err)
			}
			if err != nil { // the server rejects the input: nothing to compare
				continue
			}
			if rel {
				relative++
			}
			if rel && !TimeWord(in) {
				t.Errorf("%q::%s depends on the clock, TimeWord says no", in, ck.typ)
			}
			if !rel && TimeWord(in) {
				t.Errorf("%q::%s is absolute, TimeWord says yes", in, ck.typ)
			}
		}
	}
	if relative < 20 {
		t.Fatalf("only %d relative values: the probe is wrong", relative)
	}
}
