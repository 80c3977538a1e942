package integration

import (
	"fmt"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight"
)

// fleetRows is a table of rows (id, tenant_id = id % 3, name) and instances
// of one fleet on the real Redis, each its own Shield and Redis client.
type fleetRows struct {
	*trustFleet
	rows string
}

func newFleetRows(t *testing.T) *fleetRows {
	t.Helper()
	f := &fleetRows{trustFleet: newTrustFleet(t)}
	f.rows = f.table + "_rows"
	mustExec(t, f.admin,
		fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, tenant_id int, name text)`, f.rows),
		fmt.Sprintf(`INSERT INTO %s SELECT i, i %% 3, 'n' || i FROM generate_series(1, 10) i`, f.rows))
	cleanupExec(t, f.admin, fmt.Sprintf(`DROP TABLE IF EXISTS %s`, f.rows))
	return f
}

// read runs where through n and returns the names it read and whether n's
// database ran it (an origin execution of n).
func (f *fleetRows) read(t *testing.T, n trustNode, where string, args ...any) (string, bool) {
	t.Helper()
	q := fmt.Sprintf(`/* sqlflight: ttl=1h jitter=0%% tables=%[1]s */ SELECT string_agg(name, ',' ORDER BY id) FROM %[1]s WHERE %[2]s`,
		f.rows, where)
	before := n.s.Stats().OriginExecutions
	var names *string
	if err := n.db.QueryRowContext(testContext(t, 30*time.Second), q, args...).Scan(&names); err != nil {
		t.Fatalf("read %s: %v", where, err)
	}
	out := ""
	if names != nil {
		out = *names
	}
	return out, n.s.Stats().OriginExecutions > before
}

func (f *fleetRows) expect(t *testing.T, what string, n trustNode, where string, args []any, want string, ran bool) {
	t.Helper()
	got, r := f.read(t, n, where, args...)
	if got != want || r != ran {
		t.Errorf("%s: %s %v = %q (ran at the database: %v), want %q (%v)", what, where, args, got, r, want, ran)
	}
}

// fill reads where through n until n wrote its value to the tier.
func (f *fleetRows) fill(t *testing.T, n trustNode, where string, args ...any) {
	t.Helper()
	w := n.s.Stats().SharedWrites
	f.read(t, n, where, args...)
	waitUntil(t, 10*time.Second, func() string { return "the write to the tier" },
		func() bool { return n.s.Stats().SharedWrites > w })
}

func (f *fleetRows) write(t *testing.T, n trustNode, sql string, args ...any) {
	t.Helper()
	if _, err := n.db.ExecContext(testContext(t, 30*time.Second), fmt.Sprintf(sql, f.rows), args...); err != nil {
		t.Fatalf("write %s: %v", sql, err)
	}
}

// heard waits until n applied k more writes of other instances.
func heard(t *testing.T, n trustNode, before uint64, k uint64) {
	t.Helper()
	waitUntil(t, 10*time.Second, func() string { return "the invalidation: " + statsString(n.s.Stats()) },
		func() bool { return n.s.Stats().InvalidationsHeard >= before+k })
}

// TestFleetRowLevelInvalidation: a write to one row through one instance
// ends, on the others and in Redis, the reads of that row only; an instance
// that never heard the message (started after it) is kept from the old
// value by the epochs in Redis alone.
func TestFleetRowLevelInvalidation(t *testing.T) {
	f := newFleetRows(t)
	A := f.node(t, false, sqlflight.Options{})
	B := f.node(t, false, sqlflight.Options{})
	// An instance learns a table's columns from its first tagged read of
	// it; before, its writes to the table are table-level.
	f.read(t, A, "id = $1", 1)

	// In L2 (filled by B) and in B's L1: ids 5 and 6, tenant 1, both columns.
	f.fill(t, B, "id = $1", 5)
	f.fill(t, B, "id = $1", 6)
	f.fill(t, B, "tenant_id = $1", 1)
	f.fill(t, B, "tenant_id = $1 AND id = $2", 1, 7)
	f.expect(t, "cached on B", B, "id = $1", a(5), "n5", false)

	// A writes id 5 (a row write pinned on id).
	h := B.s.Stats().InvalidationsHeard
	f.write(t, A, `UPDATE %s SET name = 'x5' WHERE id = $1`, 5)
	heard(t, B, h, 1)

	// B: id 6 and (tenant 1, id 7) stay in its L1; id 5 and tenant 1 (row
	// 5's tenant is not known to the write) are ended.
	f.expect(t, "B after the write", B, "id = $1", a(6), "n6", false)
	f.expect(t, "B after the write", B, "tenant_id = $1 AND id = $2", a(1, 7), "n7", false)
	f.expect(t, "B after the write", B, "id = $1", a(5), "x5", true)
	f.expect(t, "B after the write", B, "tenant_id = $1", a(1), "n1,n4,n7,n10", true)
	if st := B.s.Stats(); st.InvalidationsHeard != h+1 {
		t.Fatalf("%s", statsString(st))
	}

	// C starts after the message: only Redis's epochs can tell it that L2's
	// value of id 5 predates the write. Id 6 it takes from L2; L2's id 5 it
	// does not (B refilled it after the write: that one it may take). With
	// no L1, every read of C goes to the tier.
	C := f.node(t, true, sqlflight.Options{})
	f.expect(t, "C", C, "id = $1", a(6), "n6", false)
	if st := C.s.Stats(); st.SharedHits != 1 {
		t.Fatalf("C did not take id 6 from L2: %s", statsString(st))
	}
}

// TestFleetRowLevelOldValueNotServed: an L2 value of id 5 filled before a
// write to id 5 is served neither by an instance that heard the write nor
// by one that started after it; L2's value of id 6 is.
func TestFleetRowLevelOldValueNotServed(t *testing.T) {
	f := newFleetRows(t)
	A := f.node(t, true, sqlflight.Options{})
	f.fill(t, A, "id = $1", 5)
	f.fill(t, A, "id = $1", 6)
	f.fill(t, A, "tenant_id = $1", 2)
	B := f.node(t, true, sqlflight.Options{})
	f.write(t, A, `UPDATE %s SET name = 'x5' WHERE id = $1`, 5)
	C := f.node(t, true, sqlflight.Options{}) // never heard of the write
	f.expect(t, "C after the write", C, "id = $1", a(6), "n6", false)
	f.expect(t, "C after the write", C, "id = $1", a(5), "x5", true)
	// Tenant 2 holds row 5: its value predates the write.
	f.expect(t, "C after the write", C, "tenant_id = $1", a(2), "n2,x5,n8", true)
	// B may take what C stored since; never the values from before.
	for _, c := range []struct {
		where string
		arg   any
		want  string
	}{{"id = $1", 6, "n6"}, {"id = $1", 5, "x5"}, {"tenant_id = $1", 2, "n2,x5,n8"}} {
		if got, _ := f.read(t, B, c.where, c.arg); got != c.want {
			t.Errorf("B: %s %v = %q, want %q", c.where, c.arg, got, c.want)
		}
	}
	if st := B.s.Stats(); st.SharedHits == 0 {
		t.Errorf("B took nothing from L2: %s", statsString(st))
	}
	if st := C.s.Stats(); st.InvalidationsHeard != 0 {
		t.Fatalf("C heard the write: %s", statsString(st))
	}
}

// TestFleetRowLevelWriteByTenant: a write pinned on tenant_id ends the reads
// of every id on another instance and in L2 (it may touch any id), but not
// the reads of another tenant.
func TestFleetRowLevelWriteByTenant(t *testing.T) {
	f := newFleetRows(t)
	A := f.node(t, false, sqlflight.Options{})
	B := f.node(t, false, sqlflight.Options{})
	f.read(t, A, "id = $1", 1) // A learns the table's columns
	f.fill(t, B, "id = $1", 4)
	f.fill(t, B, "tenant_id = $1", 2)
	f.fill(t, B, "tenant_id = $1", 0)
	h := B.s.Stats().InvalidationsHeard
	f.write(t, A, `UPDATE %s SET name = name || '!' WHERE tenant_id = $1`, 1)
	heard(t, B, h, 1)
	f.expect(t, "B", B, "tenant_id = $1", a(2), "n2,n5,n8", false)
	f.expect(t, "B", B, "id = $1", a(4), "n4!", true)
	C := f.node(t, true, sqlflight.Options{})
	f.expect(t, "C", C, "tenant_id = $1", a(0), "n3,n6,n9", false)

	// And the other way: a write pinned on id ends a tenant read.
	h = B.s.Stats().InvalidationsHeard
	f.write(t, A, `UPDATE %s SET name = 'y9' WHERE id = $1`, 9)
	heard(t, B, h, 1)
	f.expect(t, "B after id 9", B, "tenant_id = $1", a(0), "n3,n6,y9", true)
	f.expect(t, "B after id 9", B, "tenant_id = $1", a(2), "n2,n5,n8", true)
}
