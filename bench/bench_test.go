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
// Without SQLFLIGHT_POSTGRES_DSN they skip at once; plain go test runs only
// TestManyKeys, a small manykeys workload (it skips too without the DSN).

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

// TestManyKeys runs the manykeys workload small, one round: every caller
// gets exactly its own row (none for an absent id), and raw pgx sends one
// statement per caller, which sqlflight never exceeds.
func TestManyKeys(t *testing.T) {
	dsn := os.Getenv("SQLFLIGHT_POSTGRES_DSN")
	if dsn == "" {
		t.Skip("SQLFLIGHT_POSTGRES_DSN is not set")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	c := config{dsn: dsn, maxConns: 4, zipfIDs: 10, herdSleep: time.Millisecond, only: "manykeys",
		mkRows: 500, mkCallers: 60, mkKeys: 10, mkEach: 4, mkAbsent: 10, mkSingle: 3, mkRounds: 1}
	e, err := setup(ctx, c, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer e.teardown()
	runs, p, err := e.measureManyKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"A": int64(c.mkCallers), "B": int64(c.mkKeys*c.mkEach + c.mkAbsent)}
	for i, k := range manyKeysKinds {
		r := runs[i][0]
		for name, s := range map[string]mkScenario{"A": r.a, "B": r.b} {
			if s.wrong != 0 || s.wrongAbs != 0 || s.errs != 0 {
				t.Errorf("%s / %s: %d wrong, %d rows for absent ids, %d errors (%v)", k.name, name, s.wrong, s.wrongAbs, s.errs, s.first)
			}
			switch {
			case p.missing != "":
				t.Logf("%s / %s: statements not counted: %s", k.name, name, p.missing)
			case k.driver == "pgx" && s.statements != want[name]:
				t.Errorf("%s / %s: %d statements at the server, want %d (one per caller)", k.name, name, s.statements, want[name])
			case s.statements < 1 || s.statements > want[name]:
				t.Errorf("%s / %s: %d statements at the server, want 1…%d", k.name, name, s.statements, want[name])
			}
		}
	}
}
