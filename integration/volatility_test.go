package integration

import (
	"fmt"
	"testing"
)

// TestFunctionVolatility: a function the scanner does not know is shared
// when pg_proc says it is immutable or stable (looked up once), and never
// when it is volatile; a volatile one counts as a write to every table.
func TestFunctionVolatility(t *testing.T) {
	base := postgresDSN(t)
	admin := openRaw(t, base)
	id := uniqueID(t)
	table, imm, stable, vol := "vt_"+id, "imm_"+id, "stb_"+id, "vol_"+id
	mustExec(t, admin,
		fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, v int NOT NULL)`, table),
		fmt.Sprintf(`INSERT INTO %s VALUES (1, 1)`, table),
		fmt.Sprintf(`CREATE FUNCTION %s(int) RETURNS int IMMUTABLE LANGUAGE sql AS 'SELECT $1 * 2'`, imm),
		fmt.Sprintf(`CREATE FUNCTION %s(int) RETURNS int STABLE LANGUAGE sql AS 'SELECT v FROM %s WHERE id = $1'`, stable, table),
		fmt.Sprintf(`CREATE FUNCTION %s() RETURNS int VOLATILE LANGUAGE plpgsql AS $$
BEGIN UPDATE %s SET v = v + 1 WHERE id = 1; RETURN 1; END $$`, vol, table))
	cleanupExec(t, admin,
		fmt.Sprintf(`DROP FUNCTION IF EXISTS %s(int)`, imm),
		fmt.Sprintf(`DROP FUNCTION IF EXISTS %s(int)`, stable),
		fmt.Sprintf(`DROP FUNCTION IF EXISTS %s()`, vol),
		"DROP TABLE IF EXISTS "+table)

	forEachExecMode(t, base, func(t *testing.T, dsn string) {
		ctx := testContext(t, testTimeout)
		db, sh := openFlight(t, dsn)
		var n int
		if err := db.QueryRowContext(ctx, fmt.Sprintf(`SELECT %s(21)`, imm)).Scan(&n); err != nil || n != 42 {
			t.Fatalf("immutable: %v %d", err, n)
		}
		if err := db.QueryRowContext(ctx, fmt.Sprintf(`SELECT %s(1)`, stable)).Scan(&n); err != nil {
			t.Fatalf("stable: %v", err)
		}
		if st := sh.Stats(); st.Flights != 2 {
			t.Fatalf("immutable and stable functions were not shared: %s", statsString(st))
		}
		before := sh.Stats()
		if err := db.QueryRowContext(ctx, fmt.Sprintf(`SELECT %s()`, vol)).Scan(&n); err != nil {
			t.Fatalf("volatile: %v", err)
		}
		after := sh.Stats()
		if after.Flights != before.Flights {
			t.Errorf("a volatile function was shared: %s", statsString(after))
		}
		if after.Invalidations == before.Invalidations {
			t.Errorf("a volatile function call did not count as a write: %s", statsString(after))
		}
		var v, want int
		if err := admin.QueryRowContext(ctx, fmt.Sprintf(`SELECT v FROM %s WHERE id = 1`, table)).Scan(&want); err != nil {
			t.Fatal(err)
		}
		if err := db.QueryRowContext(ctx, fmt.Sprintf(`SELECT %s(1)`, stable)).Scan(&v); err != nil || v != want {
			t.Fatalf("read after the volatile call: %v, got %d want %d", err, v, want)
		}
	})
}
