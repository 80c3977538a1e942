package main

import (
	"context"
	"database/sql"
	"os"
	"testing"
	"time"
)

// Go benchmarks of the hit path and of pass-through writes, per contender:
//
//	SQLFLIGHT_POSTGRES_DSN=postgres://… go test ./bench -run '^$' -bench . -benchmem
//
// Without SQLFLIGHT_POSTGRES_DSN they skip at once; plain go test runs nothing.

func benchEnv(b *testing.B) (context.Context, *env) {
	b.Helper()
	dsn := os.Getenv("SQLFLIGHT_POSTGRES_DSN")
	if dsn == "" {
		b.Skip("SQLFLIGHT_POSTGRES_DSN is not set")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	b.Cleanup(cancel)
	admin, err := sql.Open("pgx", dsn)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = admin.Close() })
	e, err := setup(ctx, config{dsn: dsn, maxConns: 4, zipfIDs: 1000, herdSleep: time.Millisecond}, admin)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(e.teardown)
	return ctx, e
}

func BenchmarkHitPath(b *testing.B) {
	ctx, e := benchEnv(b)
	for _, n := range []int{1, 25} {
		q := e.pointQuery("ttl=1m", n)
		for _, k := range kinds {
			b.Run(k.name+"/rows="+map[int]string{1: "1", 25: "25"}[n], func(b *testing.B) {
				c, err := e.open(ctx, k, time.Minute)
				if err != nil {
					b.Fatal(err)
				}
				defer c.close()
				if _, err := c.read(ctx, q, int64(10)); err != nil { // warm the cache
					b.Fatal(err)
				}
				b.ReportAllocs()
				for b.Loop() {
					rows, err := c.read(ctx, q, int64(10))
					if err != nil || len(rows) != n {
						b.Fatalf("rows=%d err=%v", len(rows), err)
					}
				}
			})
		}
	}
}

func BenchmarkWrite(b *testing.B) {
	ctx, e := benchEnv(b)
	readQ, wq := e.pointQuery("ttl=1m", 1), e.writeQuery()
	for _, k := range kinds {
		b.Run(k.name, func(b *testing.B) {
			c, err := e.open(ctx, k, time.Minute)
			if err != nil {
				b.Fatal(err)
			}
			defer c.close()
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if _, err := c.write(ctx, wq, readQ, int64(i%1000+1)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
