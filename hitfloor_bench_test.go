package sqlflight

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight/internal/cputime"
)

// These benchmarks hold sqlflight against floors measured in the same run,
// on parent drivers that do no work: what database/sql itself costs.
//
//	go test -run '^$' -bench 'HitFloor|MissAlone|Follower' -benchmem

// replayOne is a parent driver that answers every query with one row, n = 1,
// reusing one cursor (reads are sequential).
func replayOne() *fakeDriver {
	row := oneRow(int64(1))
	return &fakeDriver{onQuery: func(context.Context, string, []driver.NamedValue) (driver.Rows, error) {
		row.i = 0
		return row, nil
	}}
}

// readOne reads query's one row through db.
func readOne(ctx context.Context, db *sql.DB, query string) error {
	var n int64
	if err := db.QueryRowContext(ctx, query, 1).Scan(&n); err != nil {
		return err
	}
	if n != 1 {
		return fmt.Errorf("read %d, want 1", n)
	}
	return nil
}

// mustRead is readOne on the benchmark's goroutine.
func mustRead(b *testing.B, ctx context.Context, db *sql.DB, query string) {
	if err := readOne(ctx, db, query); err != nil {
		b.Fatal(err)
	}
}

// againstFloor runs b.N reads of measured and b.N reads of floor,
// interleaved in chunks so that both see the same machine, and reports
// ns/op and allocs/op of measured (one op is one read: also reported as
// ns/read and allocs/read, with the floor's as floor-allocs/read), the
// floor's ns/op under unit, measured ÷ floor under ratioUnit and measured −
// floor as added-ns/op (what a real query's duration is to be compared
// with).
func againstFloor(b *testing.B, measured, floor func(), unit, ratioUnit string) {
	const chunk = 256
	var (
		floorTime             time.Duration
		mallocs, floorMallocs uint64
		ms                    runtime.MemStats
	)
	readMallocs := func() uint64 {
		runtime.ReadMemStats(&ms)
		return ms.Mallocs
	}
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; {
		n := min(b.N-done, chunk)
		b.StopTimer()
		m0 := readMallocs()
		t := time.Now()
		for range n {
			floor()
		}
		floorTime += time.Since(t)
		m1 := readMallocs()
		b.StartTimer()
		for range n {
			measured()
		}
		b.StopTimer()
		m2 := readMallocs()
		b.StartTimer()
		floorMallocs += m1 - m0
		mallocs += m2 - m1
		done += n
	}
	b.StopTimer()
	floorNs := float64(floorTime) / float64(b.N)
	readNs := float64(b.Elapsed()) / float64(b.N)
	b.ReportMetric(floorNs, unit)
	b.ReportMetric(readNs/floorNs, ratioUnit)
	b.ReportMetric(readNs-floorNs, "added-ns/op")
	b.ReportMetric(readNs, "ns/read")
	b.ReportMetric(float64(mallocs)/float64(b.N), "allocs/read")
	b.ReportMetric(float64(floorMallocs)/float64(b.N), "floor-allocs/read")
}

// contexts are the two contexts a read runs under: database/sql starts a
// watcher goroutine per Rows only for one that can be cancelled.
var contexts = []struct {
	name string
	ctx  func() (context.Context, context.CancelFunc)
}{
	{"ctx=background", func() (context.Context, context.CancelFunc) { return context.Background(), func() {} }},
	{"ctx=cancel", func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }},
}

// BenchmarkHitFloor is a cached one-row hit through sqlflight against the
// database/sql floor: the same read through database/sql straight on a
// parent that replays one row (no sqlflight). ns/op is the hit's; x-floor
// is hit ÷ floor in the same run (goal ≤ 1.5).
func BenchmarkHitFloor(b *testing.B) {
	const query = "/* sqlflight: ttl=1h */ " + pointQuery
	onFloor(b, func(b *testing.B, ctx context.Context, floor *sql.DB) {
		d := replayOne()
		db, s := openFake(b, d, Options{Clock: newFakeClock()})
		b.Cleanup(func() { _ = s.Close() })
		mustRead(b, ctx, db, query) // fill the cache
		before := d.queries.Load()
		againstFloor(b,
			func() { mustRead(b, ctx, db, query) },
			func() { mustRead(b, ctx, floor, query) },
			"floor-ns/op", "x-floor")
		if q := d.queries.Load(); q != before {
			b.Fatalf("%d hits reached the parent", q-before)
		}
	})
}

// onFloor runs body once under each of contexts, with the database/sql
// floor of the hit benchmarks open: database/sql straight on a parent that
// replays one row.
func onFloor(b *testing.B, body func(b *testing.B, ctx context.Context, floor *sql.DB)) {
	for _, c := range contexts {
		b.Run(c.name, func(b *testing.B) {
			ctx, cancel := c.ctx()
			defer cancel()
			floor := sql.OpenDB(dsnConnector{drv: replayOne(), dsn: "fake"})
			defer floor.Close()
			body(b, ctx, floor)
		})
	}
}

// BenchmarkMissAlone is a read that misses, alone in its flight: it leads
// and runs the origin on a parent that replays one row. Under policy=ttl it
// caches the result, and the clock then moves past the entry's life so that
// the next read misses too; under policy=coalesce (the default policy:
// nothing cached) every read is a flight of its own. x-off is that read ÷
// the same statement passed through (/* sqlflight: off */) in the same run
// (goal ≤ 1.05); added-ns/op is what sqlflight adds to the parent's time.
func BenchmarkMissAlone(b *testing.B) {
	const offQuery = "/* sqlflight: off */ " + pointQuery
	for _, pol := range []struct{ name, query string }{
		{"policy=ttl", "/* sqlflight: ttl=1s */ " + pointQuery},
		{"policy=coalesce", pointQuery},
	} {
		for _, c := range contexts {
			b.Run(pol.name+"/"+c.name, func(b *testing.B) {
				ctx, cancel := c.ctx()
				defer cancel()
				clock := newFakeClock()
				d := replayOne()
				db, s := openFake(b, d, Options{Clock: clock})
				b.Cleanup(func() { _ = s.Close() })
				mustRead(b, ctx, db, pol.query) // the statement's verdict (and first fill)
				before, queries := s.Stats().Misses, d.queries.Load()
				againstFloor(b,
					func() {
						clock.Add(2 * time.Second) // past soft and hard, jitter included
						mustRead(b, ctx, db, pol.query)
					},
					func() { mustRead(b, ctx, db, offQuery) },
					"off-ns/op", "x-off")
				if q := d.queries.Load() - queries; q != int64(2*b.N) {
					b.Fatalf("%d queries reached the parent in %d reads and %d passed through", q, b.N, b.N)
				}
				if m := s.Stats().Misses - before; pol.name == "policy=ttl" && m != uint64(b.N) {
					b.Fatalf("%d misses in %d reads", m, b.N)
				}
			})
		}
	}
}

// BenchmarkFollower is what one follower of a herd costs: each op is a
// herd of callers on one key (coalesce only, nothing cached) whose origin
// blocks until all of them wait on its flight. cpu-ns/follower is the
// process's CPU time (user + system) over the herds ÷ followers, the
// leader, the release and the goroutines' start included; allocs/follower
// likewise. pool=default is database/sql's pool as it comes (2 idle: most
// callers open a virtual connection); pool=idle keeps one idle per caller,
// so that after the first herd none is opened (goal ≤ 20 µs of CPU).
func BenchmarkFollower(b *testing.B) {
	const (
		callers = 1000
		query   = "/* sqlflight: coalesce */ " + pointQuery
	)
	for _, idle := range []int{0, callers} {
		name := "pool=default"
		if idle > 0 {
			name = "pool=idle"
		}
		b.Run(fmt.Sprintf("%s/callers=%d", name, callers), func(b *testing.B) {
			var release chan struct{} // this herd's; set before its callers start
			d := &fakeDriver{onQuery: func(ctx context.Context, _ string, _ []driver.NamedValue) (driver.Rows, error) {
				select {
				case <-release:
					return oneRow(int64(1)), nil
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}}
			db, s := openFake(b, d)
			b.Cleanup(func() { _ = s.Close() })
			if idle > 0 {
				db.SetMaxIdleConns(idle)
			}
			herd := func() {
				release = make(chan struct{})
				var wg sync.WaitGroup
				for range callers {
					wg.Go(func() {
						if err := readOne(context.Background(), db, query); err != nil {
							b.Error(err)
						}
					})
				}
				deadline := time.Now().Add(time.Minute)
				for s.Stats().Waiting < callers && time.Now().Before(deadline) {
					time.Sleep(100 * time.Microsecond)
				}
				close(release)
				wg.Wait()
			}
			herd() // the real connection opened, the statement's verdict known
			var m0, m1 runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&m0)
			cpu0, cpuOK := cputime.Process()
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				herd()
			}
			b.StopTimer()
			cpu1, _ := cputime.Process()
			runtime.ReadMemStats(&m1)
			followers := float64(b.N * (callers - 1))
			if cpuOK {
				b.ReportMetric(float64(cpu1-cpu0)/followers, "cpu-ns/follower")
			}
			b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/followers, "allocs/follower")
			b.ReportMetric(float64(b.Elapsed())/followers, "wall-ns/follower")
		})
	}
}

// replayConn is the least a caching driver under database/sql can be: its
// QueryContext hands out a cursor over one result it already holds (no
// key, no lookup, no policy), and it is a pooled connection as sqlflight's
// are (driver.Validator, driver.SessionResetter).
type replayConn struct{ res *result }

func (c replayConn) Prepare(string) (driver.Stmt, error) { return nil, errors.New("not here") }
func (c replayConn) Close() error                        { return nil }
func (c replayConn) Begin() (driver.Tx, error)           { return nil, errors.New("not here") }
func (c replayConn) QueryContext(context.Context, string, []driver.NamedValue) (driver.Rows, error) {
	return newReplay(c.res), nil
}
func (c replayConn) IsValid() bool                      { return true }
func (c replayConn) ResetSession(context.Context) error { return nil }

type replayConnector struct{ res *result }

func (c replayConnector) Connect(context.Context) (driver.Conn, error) { return replayConn(c), nil }
func (c replayConnector) Driver() driver.Driver                        { return nil }

// BenchmarkHitWrapperFloor is replayConn against the database/sql floor of
// BenchmarkHitFloor in the same run: what database/sql itself costs any
// driver that replays a held result through a cursor of its own and pools
// like sqlflight, before any lookup. x-floor is its ratio: a cache hit can
// be no closer to the floor than this.
func BenchmarkHitWrapperFloor(b *testing.B) {
	const query = "/* sqlflight: ttl=1h */ " + pointQuery
	res, _, err := materialize(oneRow(int64(1)), limits{Rows: 10, Bytes: 1 << 20})
	if err != nil {
		b.Fatal(err)
	}
	onFloor(b, func(b *testing.B, ctx context.Context, floor *sql.DB) {
		wrapper := sql.OpenDB(replayConnector{res: res})
		defer wrapper.Close()
		againstFloor(b,
			func() { mustRead(b, ctx, wrapper, query) },
			func() { mustRead(b, ctx, floor, query) },
			"floor-ns/op", "x-floor")
	})
}
