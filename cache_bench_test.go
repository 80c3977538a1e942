package sqlflight

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight/internal/key"
	"github.com/sqlflight/sqlflight/internal/sqlscan"
)

// benchRows returns n rows of (id, v, label), the shape of the integration
// benchmarks' table.
func benchRows(n int) *fakeRows {
	r := &fakeRows{cols: []string{"id", "v", "label"}}
	for i := 1; i <= n; i++ {
		r.rows = append(r.rows, []driver.Value{int64(i), int64(i) * 10, fmt.Sprintf("label %d", i)})
	}
	return r
}

// BenchmarkHitPath is a read served from the result cache, on a parent
// driver that does no work: what a hit costs from QueryContext to the last
// Scan, for one row and for 25. off is the same statement passed through to
// the parent, for scale.
func BenchmarkHitPath(b *testing.B) {
	for _, n := range []int{1, 25} {
		b.Run(fmt.Sprintf("rows=%d", n), func(b *testing.B) {
			d := &fakeDriver{onQuery: func(context.Context, string, []driver.NamedValue) (driver.Rows, error) {
				return benchRows(n), nil
			}}
			db, s := openFake(b, d, Options{Clock: newFakeClock()})
			b.Cleanup(func() { _ = s.Close() })
			const body = "SELECT id, v, label FROM items WHERE id <= $1 ORDER BY id"
			// Scan targets live outside the loop: allocs/op are the read's own.
			var dest struct {
				id, v int64
				label string
			}
			read := func(b *testing.B, query string) {
				rows, err := db.QueryContext(context.Background(), query, n)
				if err != nil {
					b.Fatal(err)
				}
				got := 0
				for rows.Next() {
					if err := rows.Scan(&dest.id, &dest.v, &dest.label); err != nil {
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
			b.Run("hit", func(b *testing.B) {
				query := "/* sqlflight: ttl=1h */ " + body
				read(b, query) // warm
				before := d.queries.Load()
				b.ReportAllocs()
				for b.Loop() {
					read(b, query)
				}
				b.StopTimer()
				if q := d.queries.Load(); q != before {
					b.Fatalf("%d reads reached the parent", q-before)
				}
			})
			b.Run("off", func(b *testing.B) {
				query := "/* sqlflight: off */ " + body
				b.ReportAllocs()
				for b.Loop() {
					read(b, query)
				}
			})
		})
	}
}

// BenchmarkMemoryMillionKeys fills a Shield bounded to MaxBytes = 64 MiB
// with 1,000,000 distinct one-row results (a point query over a million
// ids, cached for an hour on a clock that stands still) and reports the live
// heap it then holds, against that bound: heap-MiB (HeapAlloc after a GC,
// minus the same before the Shield existed), inuse-MiB (HeapInuse, likewise),
// heap/MaxBytes, the entries the cache kept, and live bytes per entry kept
// next to the cost the cache charged for it. It does its work once,
// whatever b.N: run it with -bench Memory (it takes tens of seconds).
func BenchmarkMemoryMillionKeys(b *testing.B) {
	const (
		keys     = 1_000_000
		maxBytes = 64 << 20
		workers  = 4
	)
	var before runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&before)

	d := &fakeDriver{onQuery: func(_ context.Context, _ string, args []driver.NamedValue) (driver.Rows, error) {
		return oneRow(args[0].Value), nil
	}}
	s := New(Options{MaxBytes: maxBytes, Clock: newFakeClock(), Default: Policy{Soft: time.Hour, Jitter: -1}})
	db := sql.OpenDB(dsnConnector{drv: s.Wrap(d), dsn: "fake"})
	db.SetMaxIdleConns(workers)
	b.Cleanup(func() {
		_ = db.Close()
		_ = s.Close()
	})

	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			var n int64
			for i := w; i < keys; i += workers {
				if err := db.QueryRow(pointQuery, i).Scan(&n); err != nil {
					errs <- err
					return
				}
				if n != int64(i) {
					errs <- fmt.Errorf("key %d read %d", i, n)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	st := s.cache()
	if st == nil {
		b.Fatal("no cache")
	}
	st.Wait()

	var after runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&after)

	// Which keys did the cache keep, and what did it charge for them?
	normalized := sqlscan.Scan(pointQuery).Normalized
	var scopeID uint64 = 1
	kept, charged := 0, int64(0)
	var buf []byte
	for i := range keys {
		buf, _ = key.Append(buf[:0], scopeID, partition{}, normalized, []driver.NamedValue{{Ordinal: 1, Value: int64(i)}})
		if e := st.Peek(string(buf)); e != nil {
			kept++
			charged += e.Cost()
		}
	}
	runtime.KeepAlive(db)
	runtime.KeepAlive(s)
	if kept == 0 {
		b.Fatal("no key found in the cache: the probe computes keys differently from the Shield")
	}

	const mib = 1 << 20
	heap := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	inuse := int64(after.HeapInuse) - int64(before.HeapInuse)
	stats := s.Stats()
	b.ReportMetric(float64(heap)/mib, "heap-MiB")
	b.ReportMetric(float64(inuse)/mib, "inuse-MiB")
	b.ReportMetric(float64(heap)/maxBytes, "heap/MaxBytes")
	b.ReportMetric(float64(kept), "entries")
	if kept > 0 {
		b.ReportMetric(float64(heap)/float64(kept), "B/entry")
		b.ReportMetric(float64(charged)/float64(kept), "cost/entry")
	}
	b.Logf("%d keys filled (%d fills); %d kept, charged %.1f MiB of %d MiB; live heap %.1f MiB (in use %.1f MiB) = %.2f × MaxBytes",
		keys, stats.Fills, kept, float64(charged)/mib, maxBytes/mib, float64(heap)/mib, float64(inuse)/mib, float64(heap)/maxBytes)
	if limit := int64(maxBytes + maxBytes/10); heap > limit {
		b.Errorf("live heap %.1f MiB after %d keys exceeds MaxBytes + 10%% (%.1f MiB): %d entries kept at %.0f live bytes each, charged %.0f",
			float64(heap)/mib, keys, float64(limit)/mib, kept, float64(heap)/float64(max(kept, 1)), float64(charged)/float64(max(kept, 1)))
	}
}
