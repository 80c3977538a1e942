package integration

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlflight/sqlflight"
	"github.com/sqlflight/sqlflight/pgxflight"
)

// BenchmarkPgxFaceVsPool: one caller's reads through the pgx face against
// the same reads on the bare pool (pgxpool.Pool.QueryRow), interleaved in
// chunks on one pool so that the machine's drift hits both alike. A miss
// reads a key nobody read before (under ttl=1h it leads, queries,
// materializes and fills; under the default policy it leads alone and
// reads its own rows); a hit reads one key, cached. Reported: ns and
// allocations per read of each, and their ratio (x-pool).
func BenchmarkPgxFaceVsPool(b *testing.B) {
	dsn := postgresDSN(b)
	admin := openRaw(b, dsn)
	table := benchTable(b, admin)
	body := "SELECT v, label FROM " + table + " WHERE id = $1 AND $2::bigint >= 0"
	keyed := "SELECT v, label FROM " + table + " WHERE id = $1"
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		b.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	sh := sqlflight.New()
	face := pgxflight.New(sh, pool)
	b.Cleanup(func() {
		face.Close()
		_ = sh.Close()
	})
	for _, c := range []struct {
		name, face, pool string
		hit              bool
	}{
		{"miss/policy=ttl", "/* sqlflight: ttl=1h */ " + body, body, false},
		{"miss/policy=coalesce", body, body, false},
		{"miss/policy=coalesce-keyed", keyed, keyed, false},
		{"hit/policy=ttl", "/* sqlflight: ttl=1h */ " + body, body, true},
	} {
		for _, ctxKind := range []string{"background", "cancel"} {
			b.Run(c.name+"/ctx="+ctxKind, func(b *testing.B) {
				ctx := context.Background()
				if ctxKind == "cancel" {
					var cancel context.CancelFunc
					ctx, cancel = context.WithCancel(ctx)
					defer cancel()
				}
				faceVsPool(b, ctx, face, sh, c.face, c.pool, c.hit)
			})
		}
	}
}

func faceVsPool(b *testing.B, ctx context.Context, face *pgxflight.DB, sh *sqlflight.Shield, fq, pq string, hit bool) {
	pool := face.Pool()
	var v int64
	var label string
	seq := time.Now().UnixNano() % 1e9 // new keys in every run
	read := func(q string, on func(ctx context.Context, sql string, args ...any) error) {
		if !hit {
			seq++
		}
		id := seq%benchRows + 1
		args := []any{id, seq}
		if !strings.Contains(q, "$2") {
			args = args[:1]
		}
		if err := on(ctx, q, args...); err != nil {
			b.Fatal(err)
		}
		if v != id*10 {
			b.Fatalf("id %d: v=%d", id, v)
		}
	}
	viaFace := func(ctx context.Context, sql string, args ...any) error {
		return face.QueryRow(ctx, sql, args...).Scan(&v, &label)
	}
	viaPool := func(ctx context.Context, sql string, args ...any) error {
		return pool.QueryRow(ctx, sql, args...).Scan(&v, &label)
	}
	read(fq, viaFace) // the verdict, and a connection
	read(pq, viaPool)
	const chunk = 64
	var faceT, poolT time.Duration
	var faceAllocs, poolAllocs uint64
	var ms runtime.MemStats
	mallocs := func() uint64 { runtime.ReadMemStats(&ms); return ms.Mallocs }
	var n int
	before := sh.Stats()
	for b.Loop() {
		m0 := mallocs()
		t0 := time.Now()
		for range chunk {
			read(fq, viaFace)
		}
		t1 := time.Now()
		m1 := mallocs()
		for range chunk {
			read(pq, viaPool)
		}
		t2 := time.Now()
		m2 := mallocs()
		faceT += t1.Sub(t0)
		poolT += t2.Sub(t1)
		faceAllocs += m1 - m0
		poolAllocs += m2 - m1
		n += chunk
	}
	st := sh.Stats()
	switch hits := st.FreshHits - before.FreshHits; {
	case hit && hits != uint64(n):
		b.Fatalf("%d of %d reads hit the cache; every read must hit", hits, n)
	case !hit && hits != 0:
		b.Fatalf("%d reads hit the cache; every read must miss", hits)
	}
	b.ReportMetric(float64(faceT.Nanoseconds())/float64(n), "face-ns/read")
	b.ReportMetric(float64(poolT.Nanoseconds())/float64(n), "pool-ns/read")
	b.ReportMetric(float64(faceT)/float64(poolT), "x-pool")
	b.ReportMetric(float64(faceAllocs)/float64(n), "face-allocs/read")
	b.ReportMetric(float64(poolAllocs)/float64(n), "pool-allocs/read")
}
