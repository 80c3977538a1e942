package integration

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"
)

// BenchmarkCachedHit compares a point read that goes to PostgreSQL (origin:
// the same statement with /* sqlflight: off */, through sqlflight) with the
// same read served from the result cache (hit: ttl=1h, warmed), for one and
// for 25 rows. The hit sub-benchmark reports origin's ns/op over its own as
// x-faster (from the origin run just before it).
//
//	go test ./integration -run '^$' -bench CachedHit -benchmem
func BenchmarkCachedHit(b *testing.B) {
	dsn := postgresDSN(b)
	admin := openRaw(b, dsn)
	table := benchTable(b, admin)
	db, sh := openFlight(b, dsn)
	body := fmt.Sprintf(`SELECT id, v, label FROM %s WHERE id <= $1 ORDER BY id`, table)

	var r benchReader
	read := func(b *testing.B, ctx context.Context, query string, n int) { r.read(b, ctx, db, query, n) }
	nsPerOp := func(b *testing.B) float64 { return float64(b.Elapsed().Nanoseconds()) / float64(b.N) }

	for _, n := range []int{1, 25} {
		b.Run(fmt.Sprintf("rows=%d", n), func(b *testing.B) {
			var originNs float64
			b.Run("origin", func(b *testing.B) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
				defer cancel()
				query := "/* sqlflight: off */ " + body
				b.ReportAllocs()
				for b.Loop() {
					read(b, ctx, query, n)
				}
				originNs = nsPerOp(b)
			})
			// A cancellable context makes database/sql watch it from a
			// goroutine of its own for every Rows; context.Background
			// does not: the floor of a hit through database/sql.
			for _, hc := range []struct {
				name string
				ctx  func() (context.Context, context.CancelFunc)
			}{
				{"hit", func() (context.Context, context.CancelFunc) {
					return context.WithTimeout(context.Background(), 10*time.Minute)
				}},
				{"hit-background-ctx", func() (context.Context, context.CancelFunc) { return context.Background(), func() {} }},
			} {
				b.Run(hc.name, func(b *testing.B) {
					ctx, cancel := hc.ctx()
					defer cancel()
					query := "/* sqlflight: ttl=1h */ " + body
					read(b, ctx, query, n) // warm
					before := sh.Stats()
					b.ReportAllocs()
					for b.Loop() {
						read(b, ctx, query, n)
					}
					b.StopTimer()
					if st := sh.Stats(); st.Misses != before.Misses || st.OriginExecutions != before.OriginExecutions {
						b.Fatalf("the warmed reads were not all hits: %d misses, %d origin executions",
							st.Misses-before.Misses, st.OriginExecutions-before.OriginExecutions)
					}
					if hitNs := nsPerOp(b); originNs > 0 && hitNs > 0 {
						b.ReportMetric(originNs/hitNs, "x-faster")
					}
				})
			}
		})
	}
}

// benchReader reads the first n rows of a bench table (id, v, label). Its
// scan targets live outside the benchmark loop: allocs/op are the read's
// own.
type benchReader struct {
	id, v int64
	label string
}

func (r *benchReader) read(b *testing.B, ctx context.Context, db *sql.DB, query string, n int) {
	rows, err := db.QueryContext(ctx, query, n)
	if err != nil {
		b.Fatal(err)
	}
	got := 0
	for rows.Next() {
		if err := rows.Scan(&r.id, &r.v, &r.label); err != nil {
			b.Fatal(err)
		}
		got++
	}
	if err := rows.Close(); err != nil {
		b.Fatal(err)
	}
	if got != n {
		b.Fatalf("%d rows, want %d", got, n)
	}
}
