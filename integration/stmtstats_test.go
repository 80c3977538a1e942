package integration

import (
	"fmt"
	"strings"
	"testing"
)

// TestStatementStatsIntegration: on PostgreSQL, a cached statement's
// statistics count its origin executions as the database does, its hits,
// and its hottest key with its arguments; a shareable statement that runs
// uncached is advised a TTL, soft and hard from the writes to its table.
func TestStatementStatsIntegration(t *testing.T) {
	base := postgresDSN(t)
	admin := openRaw(t, base)
	forEachExecMode(t, base, func(t *testing.T, dsn string) {
		ctx := testContext(t, testTimeout)
		table, seq, fn := countedLookup(t, admin, "stmt", "(1, 'one'), (2, 'two')")
		db, sh := openFlight(t, dsn)
		read := func(q string, key int) {
			t.Helper()
			var got int
			var label string
			if err := db.QueryRowContext(ctx, q, key).Scan(&got, &label); err != nil || got != key {
				t.Fatalf("%s (%d): %d, %v", q, key, got, err)
			}
		}

		cached := fmt.Sprintf(`/* sqlflight: ttl=1m tables=%[1]s pure=%[2]s */ SELECT id, label FROM %[2]s($1)`, table, fn)
		for range 10 {
			read(cached, 1)
		}
		for range 3 {
			read(cached, 2)
		}
		x := sh.Explain(ctx, cached)
		st := x.Statement
		if st == nil {
			t.Fatalf("no statistics for %q: %+v", cached, sh.Statements())
		}
		origins := sequenceCalls(t, admin, seq)
		if st.OriginExecutions != uint64(origins) || origins != 2 || st.Calls != 13 || st.Miss != 2 || st.Fresh != 11 || st.Rows != 2 {
			t.Errorf("database ran %d; statistics: origin %d calls %d miss %d fresh %d rows %d", origins,
				st.OriginExecutions, st.Calls, st.Miss, st.Fresh, st.Rows)
		}
		if len(st.HotKeys) != 2 || st.HotKeys[0].Calls != 10 || strings.Join(st.HotKeys[0].Args, ",") != "1" {
			t.Errorf("hot keys %+v", st.HotKeys)
		}

		plain := fmt.Sprintf(`SELECT id, label FROM %s WHERE id = $1`, table)
		for range 10 {
			read(plain, 1)
		}
		mustExec(t, db, fmt.Sprintf(`UPDATE %s SET label = 'uno' WHERE id = 1`, table))
		advised := false
		for _, a := range sh.Advice() {
			if strings.Contains(a.SQL, table) && strings.HasPrefix(a.SQL, "SELECT id, label FROM") {
				if a.Repeats != 9 || a.Executions != 10 || a.Policy != "coalesce only" || a.WritesPerSecond <= 0 ||
					!strings.HasPrefix(a.Annotation, "/* sqlflight: soft=") {
					t.Errorf("advice %+v", a)
				}
				advised = true
			}
		}
		if !advised {
			t.Errorf("no advice for %q: %+v", plain, sh.Advice())
		}
	})
}
