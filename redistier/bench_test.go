package redistier_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sqlflight/sqlflight"
	"github.com/sqlflight/sqlflight/redistier"
)

// benchTier returns a Tier on SQLFLIGHT_REDIS_ADDR (the benchmark skips
// without it) and a namespace of its own, deleted at the end.
func benchTier(b *testing.B) (*redistier.Tier, string) {
	b.Helper()
	addr := os.Getenv("SQLFLIGHT_REDIS_ADDR")
	if addr == "" {
		b.Skip("SQLFLIGHT_REDIS_ADDR is not set: no Redis to benchmark against")
	}
	c := redis.NewClient(&redis.Options{Addr: addr})
	tier := redistier.New(c)
	ns := fmt.Sprintf("bench:%d:", time.Now().UnixNano())
	b.Cleanup(func() {
		ctx := context.Background()
		var keys []string
		iter := c.Scan(ctx, 0, ns+"*", 1000).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if len(keys) > 0 {
			_ = c.Del(ctx, keys...).Err()
		}
		_ = tier.Close()
		_ = c.Close()
	})
	return tier, ns
}

func BenchmarkFetch(b *testing.B) {
	for _, size := range []int{100, 4 << 10} {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			tier, ns := benchTier(b)
			ctx := context.Background()
			l, err := tier.Acquire(ctx, ns, "k", time.Minute) // a version of the fleet's sequence
			if err != nil {
				b.Fatal(err)
			}
			if _, err := tier.Store(ctx, ns, "k", make([]byte, size), l.Version, time.Minute); err != nil {
				b.Fatal(err)
			}
			tables := []string{"products"}
			b.ReportAllocs()
			b.SetBytes(int64(size))
			for b.Loop() {
				v, err := tier.Fetch(ctx, ns, "k", tables)
				if err != nil || len(v.Data) != size {
					b.Fatalf("%v, %d bytes", err, len(v.Data))
				}
			}
		})
	}
}

func BenchmarkStore(b *testing.B) {
	tier, ns := benchTier(b)
	ctx := context.Background()
	data := make([]byte, 100)
	b.ReportAllocs()
	var version uint64
	for b.Loop() {
		version++
		if ok, err := tier.Store(ctx, ns, "k", data, version, time.Minute); err != nil || !ok {
			b.Fatalf("stored %v: %v", ok, err)
		}
	}
}

func BenchmarkAcquireRelease(b *testing.B) {
	tier, ns := benchTier(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		l, err := tier.Acquire(ctx, ns, "k", time.Minute)
		if err != nil || !l.Held {
			b.Fatalf("held %v: %v", l.Held, err)
		}
		if err := tier.Release(ctx, ns, "k", l); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPublish is what a write through a Shield adds: a sequence
// number, then the message (two round trips, so that the message's MAC
// covers its number).
func BenchmarkPublish(b *testing.B) {
	tier, ns := benchTier(b)
	ctx := context.Background()
	inv := sqlflight.Invalidation{Tables: []string{"products"}, Source: "bench", Tag: make([]byte, 16)}
	b.ReportAllocs()
	for b.Loop() {
		seq, err := tier.NextSeq(ctx, ns)
		if err != nil {
			b.Fatal(err)
		}
		inv.Seq = seq
		if err := tier.Publish(ctx, ns, inv); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPublishRows is BenchmarkPublish for a row write pinned on one
// column to one value (ids drawn from 10,000, so that the tag hash fills),
// with 15 other pin sets recorded for the table.
func BenchmarkPublishRows(b *testing.B) {
	tier, ns := benchTier(b)
	ctx := context.Background()
	for i := range 15 {
		inv := sqlflight.Invalidation{Rows: []sqlflight.RowPins{{Table: "products", Columns: []string{fmt.Sprint("c", i)},
			Values: [][]string{{"1"}}}}, Source: "bench", Tag: make([]byte, 16), Seq: 1}
		if err := tier.Publish(ctx, ns, inv); err != nil {
			b.Fatal(err)
		}
	}
	inv := sqlflight.Invalidation{Source: "bench", Tag: make([]byte, 16)}
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		seq, err := tier.NextSeq(ctx, ns)
		if err != nil {
			b.Fatal(err)
		}
		n++
		inv.Seq = seq
		inv.Rows = []sqlflight.RowPins{{Table: "products", Columns: []string{"id"}, Values: [][]string{{fmt.Sprint(n % 10000)}}}}
		if err := tier.Publish(ctx, ns, inv); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFetchRows is BenchmarkFetch (100 bytes) for a read tagged by
// its rows (id = v): the table's coarse epoch, its pin sets (16 recorded)
// and the tag's epoch, in the same round trip.
func BenchmarkFetchRows(b *testing.B) {
	tier, ns := benchTier(b)
	ctx := context.Background()
	for i := range 16 {
		inv := sqlflight.Invalidation{Rows: []sqlflight.RowPins{{Table: "products", Columns: []string{fmt.Sprint("c", i)},
			Values: [][]string{{"1"}}}}, Source: "bench", Tag: make([]byte, 16), Seq: 1}
		if err := tier.Publish(ctx, ns, inv); err != nil {
			b.Fatal(err)
		}
	}
	l, err := tier.Acquire(ctx, ns, "k", time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := tier.Store(ctx, ns, "k", make([]byte, 100), l.Version, time.Minute); err != nil {
		b.Fatal(err)
	}
	names := []string{"products\x00c", "products\x00pid", "products\x00tid\x005"}
	b.ReportAllocs()
	for b.Loop() {
		v, err := tier.Fetch(ctx, ns, "k", names)
		if err != nil || len(v.Data) != 100 {
			b.Fatalf("%v, %d bytes", err, len(v.Data))
		}
	}
}
