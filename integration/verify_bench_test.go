package integration

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkVerifyNewShape measures what the server's verdict costs: each
// iteration reads a statement shape the scope has never seen (a view join
// with a parameter), so the caller waits for one probe before its flight.
// probe-ms is the probe alone (Stats.ProbeDuration); the ns/op is the
// whole first read.
func BenchmarkVerifyNewShape(b *testing.B) {
	dsn := postgresDSN(b)
	admin := openRaw(b, dsn)
	id := uniqueID(b)
	table, view := "vb_"+id, "vbv_"+id
	mustExec(b, admin,
		fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, v text)`, table),
		fmt.Sprintf(`INSERT INTO %s SELECT g, 'v' || g FROM generate_series(1, 100) g`, table),
		fmt.Sprintf(`CREATE VIEW %s AS SELECT id, upper(v) AS v FROM %s`, view, table))
	cleanupExec(b, admin, "DROP VIEW IF EXISTS "+view, "DROP TABLE IF EXISTS "+table)
	db, sh := openFlight(b, dsn)
	ctx := testContext(b, 10*time.Minute)
	var v string
	if err := db.QueryRowContext(ctx, fmt.Sprintf(`SELECT v FROM %s WHERE id = $1`, view), 1).Scan(&v); err != nil {
		b.Fatal(err) // the connection and the spare are open
	}
	before := sh.Stats()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		q := fmt.Sprintf(`SELECT t.v, w.v FROM %s t JOIN %s w USING (id) WHERE t.id = $1 AND w.id < %d`, table, view, i+2)
		if err := db.QueryRowContext(ctx, q, 1).Scan(&v, &v); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	after := sh.Stats()
	probes := after.Probes - before.Probes
	if probes != uint64(b.N) || after.ProbeFailures != before.ProbeFailures {
		b.Fatalf("%d probes for %d new shapes (%d failed)", probes, b.N, after.ProbeFailures-before.ProbeFailures)
	}
	b.ReportMetric((after.ProbeDuration.Sum-before.ProbeDuration.Sum)*1000/float64(probes), "probe-ms")
}
