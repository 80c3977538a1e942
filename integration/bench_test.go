package integration

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight"
	"github.com/sqlflight/sqlflight/internal/cputime"
)

// Benchmarks print raw pgx and sqlflight side by side:
//
//	go test ./integration -run '^$' -bench . -benchmem
//
// Without a PostgreSQL (SQLFLIGHT_POSTGRES_DSN or Docker) they skip.

const benchRows = 1000

// benchTable creates a table of benchRows rows (id, v) for one benchmark.
func benchTable(b *testing.B, admin *sql.DB) string {
	b.Helper()
	table := "bench_" + uniqueID(b)
	mustExec(b, admin,
		fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, v bigint NOT NULL, label text NOT NULL)`, table),
		fmt.Sprintf(`INSERT INTO %s SELECT g, g * 10, 'label ' || g FROM generate_series(1, %d) AS g`, table, benchRows))
	cleanupExec(b, admin, "DROP TABLE IF EXISTS "+table)
	return table
}

// sideBySide runs f once on raw pgx and once through sqlflight.
func sideBySide(b *testing.B, dsn string, f func(b *testing.B, db *sql.DB)) {
	b.Run("raw", func(b *testing.B) { f(b, openRaw(b, dsn)) })
	b.Run("sqlflight", func(b *testing.B) {
		db, _ := openFlight(b, dsn)
		f(b, db)
	})
}

func BenchmarkPassthroughWrite(b *testing.B) {
	dsn := postgresDSN(b)
	admin := openRaw(b, dsn)
	table := benchTable(b, admin)
	query := fmt.Sprintf(`UPDATE %s SET v = v + 1 WHERE id = $1`, table)
	sideBySide(b, dsn, func(b *testing.B, db *sql.DB) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if _, err := db.ExecContext(ctx, query, i%benchRows+1); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkPassthroughRead(b *testing.B) {
	dsn := postgresDSN(b)
	admin := openRaw(b, dsn)
	table := benchTable(b, admin)
	// A statement sqlflight must not share: it goes straight through.
	query := fmt.Sprintf(`/* sqlflight: off */ SELECT v, label FROM %s WHERE id = $1`, table)
	sideBySide(b, dsn, func(b *testing.B, db *sql.DB) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			id := i%benchRows + 1
			var v int64
			var label string
			if err := db.QueryRowContext(ctx, query, id).Scan(&v, &label); err != nil {
				b.Fatal(err)
			}
			if v != int64(id)*10 {
				b.Fatalf("id %d: v=%d", id, v)
			}
		}
	})
}

// BenchmarkHerd: each op is herdCallers identical slow queries released at
// once. origin-execs/op counts the executions PostgreSQL itself saw (a
// sequence bumped inside the function).
func BenchmarkHerd(b *testing.B) {
	const herdCallers = 50
	dsn := postgresDSN(b)
	admin := openRaw(b, dsn)
	g := newGateFunc(b, admin, dsn, "herdb", "TABLE(answer int, label text)",
		`PERFORM pg_sleep(0.005);
	RETURN QUERY SELECT 42, 'herd'::text;`)
	query := fmt.Sprintf(`/* sqlflight: coalesce pure=%[1]s name=bench_herd */ SELECT * FROM %[1]s()`, g.fn)
	sideBySide(b, dsn, func(b *testing.B, db *sql.DB) {
		// Leave room under max_connections for raw pgx.
		db.SetMaxOpenConns(herdCallers)
		db.SetMaxIdleConns(herdCallers)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		before := g.calls(b, admin)
		ops := 0
		b.ReportAllocs()
		for b.Loop() {
			ops++
			var wg sync.WaitGroup
			errs := make(chan error, herdCallers)
			start := make(chan struct{})
			for range herdCallers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					var answer int64
					var label string
					if err := db.QueryRowContext(ctx, query).Scan(&answer, &label); err != nil {
						errs <- err
					} else if answer != 42 {
						errs <- fmt.Errorf("answer %d", answer)
					}
				}()
			}
			close(start)
			wg.Wait()
			close(errs)
			for err := range errs {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		execs := g.calls(b, admin) - before
		b.ReportMetric(float64(execs)/float64(ops), "origin-execs/op")
		b.ReportMetric(herdCallers, "callers/op")
	})
}

// BenchmarkMissVsPassthrough: a read that misses against the same point
// query passed through (off), interleaved on one sqlflight handle in the
// same run. Under policy=ttl the miss leads its flight alone, queries,
// materializes and fills the cache (every key is new); under
// policy=coalesce (the default policy) it leads a flight that caches
// nothing, alone. x-off is the miss's time over the pass-through's (goal ≤
// 1.05).
func BenchmarkMissVsPassthrough(b *testing.B) {
	dsn := postgresDSN(b)
	admin := openRaw(b, dsn)
	table := benchTable(b, admin)
	body := fmt.Sprintf(`SELECT v, label FROM %s WHERE id = $1 AND $2::bigint >= 0`, table)
	// keyed is the same read keyed by one equality: its reads batch when
	// they meet (docs/batching.md); alone, each runs at once, as a read
	// that found nothing of its statement in flight.
	keyed := fmt.Sprintf(`SELECT v, label FROM %s WHERE id = $1`, table)
	db, sh := openFlight(b, dsn)
	for _, pol := range []struct{ name, miss, body string }{
		{"ttl", "/* sqlflight: ttl=1h */ " + body, body},
		{"coalesce", body, body},
		{"coalesce-keyed", keyed, keyed},
		{"coalesce-keyed-nobatch", "/* sqlflight: nobatch */ " + keyed, keyed}, // what batching costs a miss alone
	} {
		for _, ctxKind := range []string{"background", "cancel"} {
			b.Run("policy="+pol.name+"/ctx="+ctxKind, func(b *testing.B) {
				ctx := context.Background()
				if ctxKind == "cancel" {
					var cancel context.CancelFunc
					ctx, cancel = context.WithCancel(ctx)
					defer cancel()
				}
				missVsPassthrough(b, ctx, db, sh, pol.miss, "/* sqlflight: off */ "+pol.body)
			})
		}
	}
}

func missVsPassthrough(b *testing.B, ctx context.Context, db *sql.DB, sh *sqlflight.Shield, miss, off string) {
	var v int64
	var label string
	seq := time.Now().UnixNano() % 1e9 // new keys in every run
	read := func(q string) {
		seq++
		id := seq%benchRows + 1
		args := []any{id, seq}
		if !strings.Contains(q, "$2") {
			args = args[:1]
		}
		if err := db.QueryRowContext(ctx, q, args...).Scan(&v, &label); err != nil {
			b.Fatal(err)
		}
		if v != id*10 {
			b.Fatalf("id %d: v=%d", id, v)
		}
	}
	read(miss) // the verdict, and a real connection
	read(off)
	const chunk = 64
	var missT, offT, missCPU, offCPU time.Duration
	var n int
	before := sh.Stats()
	for b.Loop() {
		c0, cpuOK := cputime.Process()
		t0 := time.Now()
		for range chunk {
			read(miss)
		}
		t1 := time.Now()
		c1, _ := cputime.Process()
		for range chunk {
			read(off)
		}
		missT += t1.Sub(t0)
		offT += time.Since(t1)
		if c2, _ := cputime.Process(); cpuOK {
			missCPU += c1 - c0
			offCPU += c2 - c1
		}
		n += chunk
	}
	st := sh.Stats()
	if hits := st.FreshHits - before.FreshHits; hits != 0 {
		b.Fatalf("%d reads hit the cache; every read must miss", hits)
	}
	b.ReportMetric(float64(missT.Nanoseconds())/float64(n), "miss-ns/read")
	b.ReportMetric(float64(offT.Nanoseconds())/float64(n), "off-ns/read")
	b.ReportMetric(float64(missT)/float64(offT), "x-off")
	if offCPU > 0 {
		// The process's CPU (the origin's goroutine, the cache's and the
		// runtime's included; the server's not): what a miss costs here.
		b.ReportMetric(float64(missCPU.Nanoseconds())/float64(n), "miss-cpu-ns/read")
		b.ReportMetric(float64(offCPU.Nanoseconds())/float64(n), "off-cpu-ns/read")
	}
}
