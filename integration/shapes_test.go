package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight"
)

// TestShapesOneProbePerStatement: an ORM that inlines its values (bun
// writes WHERE ("t"."id" = 4)) makes a text per value; the server's verdict
// is asked once for all of them (one probe per statement shape), each read
// returns its own row, the statistics count one statement, and the reads
// stay tagged by their own rows: a write to row 5 ends the cached read of
// row 5 and leaves the read of row 4.
func TestShapesOneProbePerStatement(t *testing.T) {
	dsn := postgresDSN(t)
	admin := openRaw(t, dsn)
	table := "shapes_" + uniqueID(t)
	const rows = 200
	mustExec(t, admin, fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, v text NOT NULL)`, table),
		fmt.Sprintf(`INSERT INTO %s SELECT g, 'v' || g FROM generate_series(0, %d) g`, table, rows-1))
	cleanupExec(t, admin, "DROP TABLE IF EXISTS "+table)

	// sql.Open("sqlflight", …) of a DSN of the test's own: a Shield of its
	// own, whose counters are the test's (and which the test closes).
	db, sh := openDSN(t, withDSNParams(t, dsn, "sqlflight.max_result_rows", "1000",
		"application_name", "sqlflight_shapes_"+uniqueID(t)))
	ctx := testContext(t, testTimeout)
	byID := func(id int) string {
		return fmt.Sprintf(`/* sqlflight: ttl=1m jitter=0%% */ SELECT "t"."id", "t"."v" FROM %s AS "t" WHERE ("t"."id" = %d)`, table, id)
	}
	// read runs q and returns its one row's value and how many origin
	// queries it took (0: served from the cache).
	read := func(q string, wantID int) (string, uint64) {
		t.Helper()
		before := sh.Stats().OriginExecutions
		got, err := db.QueryContext(ctx, q)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		defer got.Close()
		var ids []int
		var v string
		for got.Next() {
			var id int
			if err := got.Scan(&id, &v); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		if err := got.Err(); err != nil {
			t.Fatal(err)
		}
		if len(ids) != 1 || ids[0] != wantID {
			t.Fatalf("%s: rows %v, want the one of id %d", q, ids, wantID)
		}
		return v, sh.Stats().OriginExecutions - before
	}

	start := sh.Stats()
	for id := range rows {
		if v, _ := read(byID(id), id); v != fmt.Sprintf("v%d", id) {
			t.Fatalf("id %d: v = %q", id, v)
		}
	}
	after := sh.Stats()
	if probes := after.Probes - start.Probes; probes != 1 || after.ProbeFailures != start.ProbeFailures {
		t.Fatalf("%d probes (%d failed) for %d values of one statement, want 1", probes, after.ProbeFailures-start.ProbeFailures, rows)
	}
	// Served from the cache now, each text its own key.
	for id := range rows {
		if v, origin := read(byID(id), id); v != fmt.Sprintf("v%d", id) || origin != 0 {
			// The first read of a shape may run unshared while the probe
			// runs; read again once.
			if v, origin = read(byID(id), id); v != fmt.Sprintf("v%d", id) || origin != 0 {
				t.Fatalf("id %d: v = %q after %d origin queries, want a cached v%d", id, v, origin, id)
			}
		}
	}

	// One statement in the statistics, the shape's, as Explain says it.
	x, err := sqlflight.ExplainDB(ctx, db, byID(7))
	if err != nil {
		t.Fatal(err)
	}
	wantSQL := fmt.Sprintf(`SELECT "t"."id", "t"."v" FROM %s AS "t" WHERE ("t"."id" = $1)`, table)
	var mine []sqlflight.StatementStats
	for _, st := range sh.Statements() {
		if strings.Contains(st.SQL, table) {
			mine = append(mine, st)
		}
	}
	if len(mine) != 1 || mine[0].SQL != wantSQL || mine[0].Fingerprint != x.Fingerprint || x.Shape != wantSQL ||
		mine[0].Calls-mine[0].Error < 2*rows {
		t.Fatalf("statements of the table: %+v; explain shape %q fingerprint %s", mine, x.Shape, x.Fingerprint)
	}
	if !x.Verified || !x.Cached || x.Statement == nil || x.Statement.Fingerprint != x.Fingerprint {
		t.Fatalf("explain: verified %v cached %v statement %+v (%s)", x.Verified, x.Cached, x.Statement, x.Reason)
	}

	// Row-level: a write to row 5 (bun's form too) ends the read of row 5,
	// not those of rows 4 and 0 (the text the probe planned).
	if _, err := db.ExecContext(ctx, fmt.Sprintf(`UPDATE %s AS "t" SET "v" = 'new5' WHERE ("t"."id" = 5)`, table)); err != nil {
		t.Fatal(err)
	}
	if v, origin := read(byID(5), 5); v != "new5" || origin != 1 {
		t.Fatalf("id 5 after its write: v = %q after %d origin queries, want new5 from the database", v, origin)
	}
	for _, id := range []int{4, 0, 6} {
		if v, origin := read(byID(id), id); v != fmt.Sprintf("v%d", id) || origin != 0 {
			t.Fatalf("id %d after the write to id 5: v = %q after %d origin queries, want the cached v%d", id, v, origin, id)
		}
	}
	// … and a write to row 0, the probed text's, ends its read alone.
	if _, err := db.ExecContext(ctx, fmt.Sprintf(`UPDATE %s SET v = $1 WHERE id = $2`, table), "new0", 0); err != nil {
		t.Fatal(err)
	}
	if v, origin := read(byID(0), 0); v != "new0" || origin != 1 {
		t.Fatalf("id 0 after its write: v = %q after %d origin queries, want new0 from the database", v, origin)
	}
	if v, origin := read(byID(5), 5); v != "new5" || origin != 0 {
		t.Fatalf("id 5 after the write to id 0: v = %q after %d origin queries, want the cached new5", v, origin)
	}

	// Strings are a shape of their own: one more probe for all of them.
	before := sh.Stats().Probes
	for id := range 20 {
		q := fmt.Sprintf(`/* sqlflight: ttl=1m */ SELECT id, v FROM %s WHERE (v = 'v%d')`, table, id+10)
		if v, _ := read(q, id+10); v != fmt.Sprintf("v%d", id+10) {
			t.Fatalf("v%d: %q", id+10, v)
		}
	}
	if probes := sh.Stats().Probes - before; probes != 1 {
		t.Fatalf("%d probes for 20 strings of one statement, want 1", probes)
	}
}

// TestShapesOtherDrivers: lib/pq, pgx v4's stdlib and bun's pgdriver reach
// the same server and get the same verdicts by shape: one probe for 50
// inlined values, each read its own row, cached under its own text, and a
// write to one row ends that row's read alone.
func TestShapesOtherDrivers(t *testing.T) {
	dsn := postgresDSN(t)
	admin := openRaw(t, dsn)
	table := "shapes_drv_" + uniqueID(t)
	const rows = 50
	mustExec(t, admin, fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, v text NOT NULL)`, table),
		fmt.Sprintf(`INSERT INTO %s SELECT g, 'v' || g FROM generate_series(0, %d) g`, table, rows-1))
	cleanupExec(t, admin, "DROP TABLE IF EXISTS "+table)
	for _, parent := range otherParents {
		t.Run(parent, func(t *testing.T) {
			mustExec(t, admin, fmt.Sprintf(`UPDATE %s SET v = 'v5' WHERE id = 5`, table)) // the last subtest's write
			db, sh := openParent(t, parent, dsn)
			ctx := testContext(t, time.Minute)
			read := func(id int) (string, uint64) {
				t.Helper()
				before := sh.Stats().OriginExecutions
				q := fmt.Sprintf(`/* sqlflight: ttl=1m jitter=0%% */ SELECT "t"."id", "t"."v" FROM %s AS "t" WHERE ("t"."id" = %d)`, table, id)
				var got int
				var v string
				if err := db.QueryRowContext(ctx, q).Scan(&got, &v); err != nil {
					t.Fatalf("id %d: %v", id, err)
				}
				if got != id {
					t.Fatalf("id %d: got the row of id %d", id, got)
				}
				return v, sh.Stats().OriginExecutions - before
			}
			for id := range rows {
				if v, _ := read(id); v != fmt.Sprintf("v%d", id) {
					t.Fatalf("id %d: v = %q", id, v)
				}
			}
			if st := sh.Stats(); st.Probes != 1 || st.ProbeFailures != 0 {
				t.Fatalf("%d probes (%d failed) for %d values of one statement, want 1", st.Probes, st.ProbeFailures, rows)
			}
			for id := range rows {
				if _, origin := read(id); origin != 0 {
					if _, origin = read(id); origin != 0 { // the first may have run while the probe ran
						t.Fatalf("id %d: %d origin queries, want a cached read", id, origin)
					}
				}
			}
			want := "new-" + parent
			if _, err := db.ExecContext(ctx, fmt.Sprintf(`UPDATE %s AS "t" SET "v" = '%s' WHERE ("t"."id" = 5)`, table, want)); err != nil {
				t.Fatal(err)
			}
			if v, origin := read(5); v != want || origin != 1 {
				t.Fatalf("id 5 after its write: v = %q after %d origin queries, want %s from the database", v, origin, want)
			}
			if v, origin := read(4); v != "v4" || origin != 0 {
				t.Fatalf("id 4 after the write to id 5: v = %q after %d origin queries, want the cached v4", v, origin)
			}
		})
	}
}
