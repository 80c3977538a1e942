package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight"
)

// TestVerdictHiddenCalls: calls no text shows — a domain's CHECK
// constraint, a user cast, a built-in that runs SQL given as a string, and
// EXPLAIN ANALYZE — are never shared and count as writes; a built-in that
// reads tables named at run time depends on every table.
func TestVerdictHiddenCalls(t *testing.T) {
	base := postgresDSN(t)
	admin := openRaw(t, base)
	id := uniqueID(t)
	hits, fn, dom, counted := "vh_hits_"+id, "vh_track_"+id, "vh_dom_"+id, "vh_cnt_"+id
	mustExec(t, admin,
		fmt.Sprintf(`CREATE TABLE %s (n int)`, hits),
		fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, v int)`, counted),
		fmt.Sprintf(`INSERT INTO %s VALUES (1, 1)`, counted),
		fmt.Sprintf(`CREATE FUNCTION %s(int) RETURNS bool LANGUAGE plpgsql AS $$BEGIN INSERT INTO %s VALUES ($1); RETURN true; END$$`, fn, hits),
		fmt.Sprintf(`CREATE DOMAIN %s AS int CHECK (%s(VALUE))`, dom, fn))
	cleanupExec(t, admin, "DROP DOMAIN IF EXISTS "+dom, fmt.Sprintf("DROP FUNCTION IF EXISTS %s(int)", fn),
		"DROP TABLE IF EXISTS "+hits, "DROP TABLE IF EXISTS "+counted)

	ctx := testContext(t, testTimeout)
	db, sh := openFlight(t, base, sqlflight.Options{Default: sqlflight.Policy{Soft: time.Minute}})
	count := func() int {
		var n int
		if err := db.QueryRowContext(ctx, "SELECT count(*) FROM "+hits).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, q := range []string{
		fmt.Sprintf(`SELECT 7::%s`, dom),
		fmt.Sprintf(`SELECT CAST($1 AS %s)`, dom),
		fmt.Sprintf(`SELECT query_to_xml('SELECT %s(3)', true, false, '')`, fn),
	} {
		before := count() // cached from here on under the default TTL
		var args []any
		if strings.Contains(q, "$1") {
			args = []any{7}
		}
		for i := 0; i < 3; i++ {
			var out any
			if err := db.QueryRowContext(ctx, q, args...).Scan(&out); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		if after := count(); after != before+3 {
			t.Errorf("%s: %d calls reached the database for 3 reads (or the count was served stale: %d → %d); %s",
				q, after-before, before, after, statsString(sh.Stats()))
		}
	}
	// EXPLAIN ANALYZE runs the function: a cached count sees its insert.
	before := count()
	if _, err := db.ExecContext(ctx, fmt.Sprintf(`EXPLAIN ANALYZE SELECT %s(9)`, fn)); err != nil {
		t.Fatal(err)
	}
	if after := count(); after != before+1 {
		t.Errorf("after EXPLAIN ANALYZE of a writing function the cached count is %d, want %d", after, before+1)
	}
	// table_to_xml reads the table named by its argument: a write to it
	// ends the cached read.
	q := fmt.Sprintf(`SELECT table_to_xml('%s'::regclass, true, false, '')::text`, counted)
	var x1, x2 string
	if err := db.QueryRowContext(ctx, q).Scan(&x1); err != nil {
		t.Fatal(err)
	}
	mustExec(t, db, fmt.Sprintf(`UPDATE %s SET v = 2 WHERE id = 1`, counted))
	if err := db.QueryRowContext(ctx, q).Scan(&x2); err != nil {
		t.Fatal(err)
	}
	if x1 == x2 {
		t.Errorf("table_to_xml served from the cache after a write to the table it reads: %s", x2)
	}
}
