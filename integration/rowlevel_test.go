package integration

import (
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"
)

// rowLevel is a table of ten rows (id, tenant_id = id % 3, name) and reads
// of it whose origin executions the database counts: every row a read
// returns calls the gate's function once.
type rowLevel struct {
	t     *testing.T
	admin *sql.DB
	db    *sql.DB
	table string
	g     *gate
}

func newRowLevel(t *testing.T, dsn string) *rowLevel {
	admin := openRaw(t, dsn)
	rl := &rowLevel{t: t, admin: admin, table: "rowlevel_" + uniqueID(t)}
	rl.g = newGate(t, admin, dsn, "rowlevel_count")
	mustExec(t, admin, fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, tenant_id int, name text)`, rl.table),
		fmt.Sprintf(`INSERT INTO %s SELECT i, i %% 3, 'n' || i FROM generate_series(1, 10) i`, rl.table))
	cleanupExec(t, admin, fmt.Sprintf(`DROP TABLE IF EXISTS %s`, rl.table))
	rl.db, _ = openFlight(t, dsn)
	return rl
}

// read runs where (with args) through the Shield and returns its rows and
// how many rows the database computed for it (0: served from the cache, or
// an empty result).
func (rl *rowLevel) read(where string, args ...any) (string, int64) {
	rl.t.Helper()
	q := fmt.Sprintf(`/* sqlflight: ttl=1m jitter=0%% tables=%[1]s pure=%[2]s */ SELECT id, tenant_id, name, %[2]s() FROM %[1]s WHERE %[3]s ORDER BY id`,
		rl.table, rl.g.fn, where)
	before := rl.g.calls(rl.t, rl.admin)
	rows, err := rl.db.QueryContext(testContext(rl.t, time.Minute), q, args...)
	if err != nil {
		rl.t.Fatalf("read %s: %v", where, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id, tenant, one int
		var name string
		if err := rows.Scan(&id, &tenant, &name, &one); err != nil {
			rl.t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%d/%d/%s", id, tenant, name))
	}
	if err := rows.Err(); err != nil {
		rl.t.Fatal(err)
	}
	return strings.Join(out, " "), rl.g.calls(rl.t, rl.admin) - before
}

func (rl *rowLevel) write(sql string, args ...any) {
	rl.t.Helper()
	if _, err := rl.db.ExecContext(testContext(rl.t, time.Minute), strings.ReplaceAll(sql, "{t}", rl.table), args...); err != nil {
		rl.t.Fatalf("write %s: %v", sql, err)
	}
}

// expect reads where and checks its rows and whether the database ran it.
func (rl *rowLevel) expect(what, where string, args []any, rows string, ran bool) {
	rl.t.Helper()
	got, n := rl.read(where, args...)
	if got != rows {
		rl.t.Errorf("%s: read %s %v = %q, want %q", what, where, args, got, rows)
	}
	if (n > 0) != ran {
		rl.t.Errorf("%s: read %s %v computed %d rows at the database, want a query: %v", what, where, args, n, ran)
	}
}

func a(v ...any) []any { return v }

// TestRowLevelInvalidation: a write through the Shield that proves which
// rows it touched leaves the cached reads of other rows alone and refreshes
// the reads of those rows; writes it cannot prove refresh the table.
func TestRowLevelInvalidation(t *testing.T) {
	forEachExecMode(t, postgresDSN(t), func(t *testing.T, dsn string) {
		rl := newRowLevel(t, dsn)
		// Fill the cache.
		rl.expect("first", "id = $1", a(5), "5/2/n5", true)
		rl.expect("first", "id = $1", a(6), "6/0/n6", true)
		rl.expect("first", "id = $1", a(7), "7/1/n7", true)
		rl.expect("first", "tenant_id = $1", a(1), "1/1/n1 4/1/n4 7/1/n7 10/1/n10", true)
		rl.expect("first", "id IN ($1, $2)", a(8, 9), "8/2/n8 9/0/n9", true)
		rl.expect("first", "id = 3", nil, "3/0/n3", true)
		rl.expect("cached", "id = $1", a(5), "5/2/n5", false)
		rl.expect("cached", "id IN ($1, $2)", a(8, 9), "8/2/n8 9/0/n9", false)

		// A write to id 5 refreshes id 5, not id 6; the tenant read may
		// hold row 5 (the write does not say its tenant): refreshed.
		rl.write(`UPDATE {t} SET name = 'x5' WHERE id = $1`, 5)
		rl.expect("write id 5", "id = $1", a(6), "6/0/n6", false)
		rl.expect("write id 5", "id = $1", a(5), "5/2/x5", true)
		rl.expect("write id 5", "id IN ($1, $2)", a(8, 9), "8/2/n8 9/0/n9", false)
		rl.expect("write id 5", "id = 3", nil, "3/0/n3", false)
		rl.expect("write id 5", "tenant_id = $1", a(1), "1/1/n1 4/1/n4 7/1/n7 10/1/n10", true)

		// IN lists: a write to one of their ids refreshes them; a literal
		// in the read's text is tagged like an argument.
		rl.write(`UPDATE {t} SET name = 'x9' WHERE id = 9`)
		rl.expect("write id 9", "id IN ($1, $2)", a(8, 9), "8/2/n8 9/0/x9", true)
		rl.write(`DELETE FROM {t} WHERE id IN ($1, $2)`, 3, 4)
		rl.expect("delete 3, 4", "id = 3", nil, "", false)
		rl.expect("delete 3, 4", "id IN ($1, $2)", a(8, 9), "8/2/n8 9/0/x9", false)
		rl.expect("delete 3, 4", "id = $1", a(6), "6/0/n6", false)

		// An UPDATE of the key column refreshes the old and the new value.
		rl.expect("before key move", "id = $1", a(60), "", false)
		rl.expect("before key move", "id = $1", a(7), "7/1/n7", false)
		rl.write(`UPDATE {t} SET id = $1 WHERE id = $2`, 60, 6)
		rl.expect("key move", "id = $1", a(60), "60/0/n6", true)
		rl.expect("key move", "id = $1", a(6), "", false)
		rl.expect("key move", "id = $1", a(7), "7/1/n7", false)
		// … and the whole table when the new value is not known.
		rl.write(`UPDATE {t} SET id = id + 100 WHERE id = $1`, 60)
		rl.expect("key computed", "id = $1", a(7), "7/1/n7", true)
		rl.expect("key computed", "id = $1", a(160), "160/0/n6", true)

		// A tenant read and a write that moves a row into its tenant.
		rl.expect("tenant", "tenant_id = $1", a(1), "1/1/n1 7/1/n7 10/1/n10", true)
		rl.expect("tenant", "id = $1", a(2), "2/2/n2", true)
		rl.write(`UPDATE {t} SET tenant_id = 1 WHERE id = 2`)
		rl.expect("tenant moved", "tenant_id = $1", a(1), "1/1/n1 2/1/n2 7/1/n7 10/1/n10", true)
		rl.expect("tenant moved", "id = $1", a(2), "2/1/n2", true)
		rl.expect("tenant moved", "id = $1", a(7), "7/1/n7", false)
		// Tagged on both columns: a write to another id leaves it.
		rl.expect("tenant and id", "tenant_id = $1 AND id = $2", a(1, 7), "7/1/n7", true)
		rl.write(`UPDATE {t} SET name = 'x10' WHERE id = 10`)
		rl.expect("tenant and id", "tenant_id = $1 AND id = $2", a(1, 7), "7/1/n7", false)
		rl.write(`UPDATE {t} SET tenant_id = 2 WHERE tenant_id = 1 AND id = 7`)
		rl.expect("tenant and id", "tenant_id = $1 AND id = $2", a(1, 7), "", false)
		rl.expect("tenant and id", "tenant_id = $1 AND id = $2", a(2, 7), "7/2/n7", true)

		// An INSERT refreshes the reads of its values, a negative one too.
		rl.expect("insert", "id = $1", a(12), "", false)
		rl.expect("insert", "id = $1", a(5), "5/2/x5", true) // the computed key moved the table
		rl.write(`INSERT INTO {t} (id, tenant_id, name) VALUES ($1, 0, 'n12')`, 12)
		rl.expect("insert", "id = $1", a(12), "12/0/n12", true)
		rl.expect("insert", "id = $1", a(5), "5/2/x5", false)

		// A range UPDATE refreshes the table.
		rl.write(`UPDATE {t} SET name = 'r' WHERE id > 4 AND id < 6`)
		rl.expect("range", "id = $1", a(5), "5/2/r", true)
		rl.expect("range", "id = $1", a(12), "12/0/n12", true)
		// A write without conditions refreshes the table.
		rl.write(`UPDATE {t} SET name = 'all'`)
		rl.expect("no conditions", "id = $1", a(12), "12/0/all", true)
		rl.expect("no conditions", "id = $1", a(1), "1/1/all", true)
		// A write of two tables (UPDATE … FROM) refreshes the table.
		other := rl.table + "_other"
		mustExec(t, rl.admin, fmt.Sprintf(`CREATE TABLE %s (id int)`, other), fmt.Sprintf(`INSERT INTO %s VALUES (1)`, other))
		cleanupExec(t, rl.admin, fmt.Sprintf(`DROP TABLE IF EXISTS %s`, other))
		rl.expect("two tables", "id = $1", a(12), "12/0/all", false)
		rl.write(`UPDATE {t} SET name = 'o' FROM ` + other + ` WHERE ` + other + `.id = {t}.id AND {t}.id = 1`)
		rl.expect("two tables", "id = $1", a(1), "1/1/o", true)
		rl.expect("two tables", "id = $1", a(12), "12/0/all", true)
		// … and so does a write in a transaction whose rows are not known.
		tx, err := rl.db.BeginTx(testContext(t, time.Minute), nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(strings.ReplaceAll(`UPDATE {t} SET name = 'tx' WHERE id = 12`, "{t}", rl.table)); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(`INSERT INTO ` + other + ` VALUES (2)`); err != nil {
			t.Fatal(err)
		}
		rl.expect("in a transaction", "id = $1", a(12), "12/0/all", false)
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		rl.expect("committed", "id = $1", a(12), "12/0/tx", true)
		rl.expect("committed", "id = $1", a(1), "1/1/o", false)
	})
}
