package integration

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlflight/sqlflight"
	"github.com/sqlflight/sqlflight/redistier"
)

// BenchmarkSharedHit reads a result that another instance put in the shared
// tier, through an instance whose L1 admits nothing: every read is a Redis
// round trip, a decode and a replay. (An L1 hit is BenchmarkCachedHit.)
func BenchmarkSharedHit(b *testing.B) {
	dsn := postgresDSN(b)
	admin := openRaw(b, dsn)
	table := benchTable(b, admin)
	rdb, prefix := redisNamespace(b, "sqlflight-bench")
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		b.Fatal(err)
	}
	open := func(o sqlflight.Options) (*sql.DB, *sqlflight.Shield) {
		o.KeyPrefix = prefix + o.KeyPrefix // one namespace per case: an encrypted case reads encrypted values
		o.SharedSecret = fleetSecret
		s := sqlflight.New(o, sqlflight.Shared(redistier.New(rdb)))
		db := sql.OpenDB(s.SharedConnector(stdlib.GetConnector(*cfg), "bench"))
		b.Cleanup(func() {
			_ = db.Close()
			_ = s.Close()
		})
		return db, s
	}
	var r benchReader
	read := func(b *testing.B, db *sql.DB, query string, n int) { r.read(b, context.Background(), db, query, n) }
	for _, c := range []struct {
		n       int
		encrypt bool
	}{{1, false}, {10, false}, {10, true}, {25, false}} {
		ns := fmt.Sprintf("%d-%v:", c.n, c.encrypt)
		filler, _ := open(sqlflight.Options{KeyPrefix: ns, SharedEncrypt: c.encrypt})
		reader, rs := open(sqlflight.Options{KeyPrefix: ns, MaxBytes: 1, NegMaxBytes: 1, SharedEncrypt: c.encrypt}) // L1 keeps nothing
		n := c.n
		name := fmt.Sprintf("rows=%d", n)
		if c.encrypt {
			name += "/encrypted"
		}
		b.Run(name, func(b *testing.B) {
			query := fmt.Sprintf(`/* sqlflight: ttl=1h */ SELECT id, v, label FROM %s WHERE id <= $1 ORDER BY id`, table)
			read(b, filler, query, n)
			deadline := time.Now().Add(10 * time.Second)
			for {
				read(b, reader, query, n)
				if rs.Stats().SharedHits > 0 {
					break
				}
				if time.Now().After(deadline) {
					b.Fatal("the value never reached the shared tier")
				}
			}
			before := rs.Stats()
			b.ReportAllocs()
			for b.Loop() {
				read(b, reader, query, n)
			}
			b.StopTimer()
			st := rs.Stats()
			if st.OriginExecutions != before.OriginExecutions || st.SharedHits-before.SharedHits < uint64(b.N) {
				b.Fatalf("not every read was a shared hit: %d origin executions, %d shared hits for %d reads",
					st.OriginExecutions-before.OriginExecutions, st.SharedHits-before.SharedHits, b.N)
			}
		})
	}
}
