package integration

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlflight/sqlflight"
)

// notifyWriters is how many clients write at once: PostgreSQL serializes
// the commits of notifying transactions on a global lock, which only shows
// under concurrency.
const notifyWriters = 16

// BenchmarkNotifyTriggersWriteThroughput measures what the NOTIFY feed's
// triggers cost writers: 16 plain pgx clients run single-row UPDATEs by
// primary key (autocommit) on a 10,000-row table, without and with the
// triggers (and a Shield whose feed reads their queue). Each sub-benchmark
// reports tx/s.
//
//	go test ./integration -run '^$' -bench NotifyTriggersWriteThroughput -benchtime 20000x
func BenchmarkNotifyTriggersWriteThroughput(b *testing.B) {
	base := postgresDSN(b)
	ctx := testContext(b, 10*time.Minute)
	admin := openRaw(b, base)
	schema := "notify_bench_" + uniqueID(b)
	mustExec(b, admin, "CREATE SCHEMA "+schema,
		"CREATE TABLE "+schema+".accounts (id int PRIMARY KEY, balance bigint NOT NULL, note text)",
		"INSERT INTO "+schema+".accounts SELECT g, 0, 'account ' || g FROM generate_series(1, 10000) g")
	cleanupExec(b, admin, sqlflight.UninstallTriggersSQL(schema), "DROP SCHEMA IF EXISTS "+schema+" CASCADE")

	cfg, err := pgxpool.ParseConfig(base)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = notifyWriters
	cfg.MinConns = notifyWriters
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	update := "UPDATE " + schema + ".accounts SET balance = balance + 1 WHERE id = $1"

	for _, tc := range []struct {
		name     string
		triggers bool
	}{{"without_triggers", false}, {"with_triggers", true}} {
		b.Run(tc.name, func(b *testing.B) {
			if tc.triggers {
				mustExec(b, admin, sqlflight.InstallTriggersSQL(schema, "accounts"))
			} else {
				mustExec(b, admin, sqlflight.UninstallTriggersSQL(schema, "accounts"))
			}
			// A Shield with the NOTIFY feed, which reads the queue the
			// writers fill.
			if tc.triggers {
				db, s := openFlight(b, base, sqlflight.Options{Feed: sqlflight.FeedNotify})
				if err := db.PingContext(ctx); err != nil {
					b.Fatal(err)
				}
				defer func() { b.Logf("feed: %s", feedStats(s)) }()
			}

			var next sync.Mutex
			left := b.N
			var errOnce sync.Once
			var firstErr error
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for w := range notifyWriters {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := rand.New(rand.NewPCG(uint64(w), 1))
					for {
						next.Lock()
						if left == 0 {
							next.Unlock()
							return
						}
						left--
						next.Unlock()
						if _, err := pool.Exec(ctx, update, 1+r.IntN(10000)); err != nil {
							errOnce.Do(func() { firstErr = err })
							return
						}
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			if firstErr != nil {
				b.Fatal(firstErr)
			}
			tps := float64(b.N) / elapsed.Seconds()
			b.ReportMetric(tps, "tx/s")
			b.Logf("%s: %d single-row UPDATEs by %d writers in %v: %.0f tx/s", tc.name, b.N, notifyWriters, elapsed.Round(time.Millisecond), tps)
		})
	}
}
