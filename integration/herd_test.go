package integration

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight"
)

// herdTail is the rest of the herd function after the gate: a little work,
// then one row.
const herdTail = `PERFORM pg_sleep(0.05);
	RETURN QUERY SELECT 42, 'herd'::text;`

type herdOutcome struct {
	err    error
	rows   int
	answer int64
	label  string
	lat    time.Duration
}

// startHerd starts n goroutines that wait for start to close and then run
// query once, reading (answer, label) rows into out. wg tracks them.
func startHerd(ctx context.Context, db *sql.DB, query string, n int, start <-chan struct{}, wg *sync.WaitGroup) []herdOutcome {
	out := make([]herdOutcome, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := &out[i]
			select {
			case <-start:
			case <-ctx.Done():
				o.err = ctx.Err()
				return
			}
			begin := time.Now()
			defer func() { o.lat = time.Since(begin) }()
			rows, err := db.QueryContext(ctx, query)
			if err != nil {
				o.err = err
				return
			}
			defer rows.Close()
			for rows.Next() {
				o.rows++
				if err := rows.Scan(&o.answer, &o.label); err != nil {
					o.err = err
					return
				}
			}
			o.err = rows.Err()
		}()
	}
	return out
}

// summarize fails t for every caller that did not get exactly the herd row,
// and returns the latencies.
func summarize(t *testing.T, out []herdOutcome) []time.Duration {
	t.Helper()
	var lats []time.Duration
	errs := map[string]int{}
	bad := 0
	for _, o := range out {
		lats = append(lats, o.lat)
		switch {
		case o.err != nil:
			errs[o.err.Error()]++
		case o.rows != 1 || o.answer != 42 || o.label != "herd":
			bad++
		}
	}
	for e, n := range errs {
		t.Errorf("%d callers failed: %s", n, e)
	}
	if bad > 0 {
		t.Errorf("%d callers did not get exactly the one row (42, herd)", bad)
	}
	return lats
}

// TestHerdOneExecution is the headline: 1,000 callers of the same expensive
// query, released at once on a *sql.DB with database/sql's default pool
// settings (no limit on open connections) against a server that allows 100
// connections. One of them reaches PostgreSQL.
func TestHerdOneExecution(t *testing.T) {
	base := postgresDSN(t)
	admin := openRaw(t, base)
	const callers = 1000

	forEachExecMode(t, base, func(t *testing.T, dsn string) {
		t.Run("gated", func(t *testing.T) {
			ctx := testContext(t, testTimeout)
			g := newGateFunc(t, admin, dsn, "herd", "TABLE(answer int, label text)", herdTail)
			query := fmt.Sprintf(`/* sqlflight: coalesce pure=%[1]s name=herd */ SELECT * FROM %[1]s()`, g.fn)
			db, sh := openFlight(t, dsn)

			var wg sync.WaitGroup
			defer wg.Wait()
			g.close(t)
			defer g.open(t)
			start := make(chan struct{})
			out := startHerd(ctx, db, query, callers, start, &wg)
			close(start)
			// Every caller is certainly inside the flight before the
			// origin can finish.
			waitUntil(t, 2*time.Minute, func() string { return "all callers waiting on the flight: " + statsString(sh.Stats()) },
				func() bool { return sh.Stats().Waiting >= callers })
			g.open(t)
			wg.Wait()

			lats := summarize(t, out)
			st := sh.Stats()
			if n := g.calls(t, admin); n != 1 {
				t.Errorf("the function ran %d times in PostgreSQL, want 1", n)
			}
			if st.Flights != 1 || st.Followers != callers-1 {
				t.Errorf("flights=%d followers=%d, want 1 and %d: %s", st.Flights, st.Followers, callers-1, statsString(st))
			}
			if st.OriginExecutions != 1 {
				t.Errorf("origin executions %d, want 1: %s", st.OriginExecutions, statsString(st))
			}
			if st.RealConnsOpened > 2 {
				t.Errorf("%d real connections opened for one shared query, want ≤ 2: %s", st.RealConnsOpened, statsString(st))
			}
			if st.Waiting != 0 {
				t.Errorf("%d callers still counted as waiting after all returned", st.Waiting)
			}
			t.Logf("latency from release: %s; %s", latencies(lats), statsString(st))
		})

		t.Run("ungated", func(t *testing.T) {
			ctx := testContext(t, testTimeout)
			g := newGateFunc(t, admin, dsn, "herd", "TABLE(answer int, label text)", herdTail)
			query := fmt.Sprintf(`/* sqlflight: coalesce pure=%[1]s name=herd */ SELECT * FROM %[1]s()`, g.fn)
			db, sh := openFlight(t, dsn)

			var wg sync.WaitGroup
			start := make(chan struct{})
			out := startHerd(ctx, db, query, callers, start, &wg)
			close(start)
			wg.Wait()

			lats := summarize(t, out)
			st := sh.Stats()
			n := g.calls(t, admin)
			// Callers that arrive after a flight ended start another;
			// how many depends on scheduling, but it stays small.
			if n > 20 {
				t.Errorf("the function ran %d times in PostgreSQL for %d callers, want a handful at most", n, callers)
			}
			t.Logf("%d origin executions for %d callers; latency from release: %s; %s", n, callers, latencies(lats), statsString(st))
		})
	})
}

// TestLazyConnections: followers never open nor hold real connections, so
// PostgreSQL sees a couple of backends however many callers wait.
func TestLazyConnections(t *testing.T) {
	base := postgresDSN(t)
	admin := openRaw(t, base)
	ctx := testContext(t, testTimeout)
	app := "sqlflight_lazy_" + uniqueID(t)
	dsn := withDSNParams(t, base, "application_name", app)
	g := newGateFunc(t, admin, dsn, "herd", "TABLE(answer int, label text)", herdTail)
	query := fmt.Sprintf(`/* sqlflight: coalesce pure=%[1]s */ SELECT * FROM %[1]s()`, g.fn)
	db, sh := openFlight(t, dsn)
	const callers = 200

	// A gated burst: count backends while every caller waits.
	var wg sync.WaitGroup
	defer wg.Wait()
	g.close(t)
	defer g.open(t)
	start := make(chan struct{})
	out := startHerd(ctx, db, query, callers, start, &wg)
	close(start)
	waitUntil(t, time.Minute, func() string { return "all callers waiting: " + statsString(sh.Stats()) },
		func() bool { return sh.Stats().Waiting >= callers })
	total, atGate := backends(t, admin, app)
	if total > 2 {
		t.Errorf("%d backends for %s while %d callers wait on one flight, want ≤ 2", total, app, callers)
	}
	if st := sh.Stats(); st.RealConns > 2 {
		t.Errorf("%d real connections open while %d callers wait on one flight, want ≤ 2", st.RealConns, callers)
	}
	t.Logf("during the flight: %d backends (%d at the gate)", total, atGate)
	g.open(t)
	wg.Wait()
	summarize(t, out)

	// An ungated burst, then: idle backends. pg_stat_activity lags a
	// closing client by a moment, so poll.
	start = make(chan struct{})
	out = startHerd(ctx, db, query, callers, start, &wg)
	close(start)
	wg.Wait()
	summarize(t, out)
	waitUntil(t, 30*time.Second, func() string {
		total, _ := backends(t, admin, app)
		return fmt.Sprintf("at most 2 backends for %s after the callers completed (have %d): %s", app, total, statsString(sh.Stats()))
	}, func() bool {
		total, _ := backends(t, admin, app)
		return total <= 2
	})
	st := sh.Stats()
	t.Logf("after %d callers: %d origin executions; %s", 2*callers, g.calls(t, admin), statsString(st))
}

// TestCancelFollowerLeavesAtOnce: every waiter leaves on its own context
// while the flight goes on for the others; the origin is cancelled only when
// nobody waits.
func TestCancelFollowerLeavesAtOnce(t *testing.T) {
	base := postgresDSN(t)
	admin := openRaw(t, base)

	forEachExecMode(t, base, func(t *testing.T, dsn string) {
		ctx := testContext(t, testTimeout)
		app := "sqlflight_cancel_" + uniqueID(t)
		dsn = withDSNParams(t, dsn, "application_name", app)

		// setup opens a fresh Shield and gate per subtest.
		setup := func(t *testing.T) (*sql.DB, *sqlflight.Shield, *gate, string) {
			g := newGateFunc(t, admin, dsn, "herd", "TABLE(answer int, label text)", herdTail)
			db, sh := openFlight(t, dsn)
			return db, sh, g, fmt.Sprintf(`/* sqlflight: coalesce pure=%[1]s */ SELECT * FROM %[1]s()`, g.fn)
		}
		// call runs the query on its own goroutine and reports its outcome.
		call := func(ctx context.Context, db *sql.DB, query string, wg *sync.WaitGroup) <-chan herdOutcome {
			ch := make(chan herdOutcome, 1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				var o herdOutcome
				o.err = db.QueryRowContext(ctx, query).Scan(&o.answer, &o.label)
				if o.err == nil {
					o.rows = 1
				}
				ch <- o
			}()
			return ch
		}
		// await takes an outcome that must arrive while the gate is still
		// closed: the flight cannot have ended, so the caller left it.
		await := func(t *testing.T, ch <-chan herdOutcome, who string) herdOutcome {
			t.Helper()
			select {
			case o := <-ch:
				return o
			case <-time.After(30 * time.Second):
				t.Fatalf("%s did not leave the flight while it was still running", who)
				return herdOutcome{}
			}
		}
		waiting := func(t *testing.T, sh *sqlflight.Shield, n int64) {
			t.Helper()
			waitUntil(t, time.Minute, func() string { return fmt.Sprintf("%d waiting: %s", n, statsString(sh.Stats())) },
				func() bool { return sh.Stats().Waiting == n })
		}
		stayers := func(t *testing.T, chs []<-chan herdOutcome) {
			t.Helper()
			var out []herdOutcome
			for _, ch := range chs {
				out = append(out, <-ch)
			}
			summarize(t, out)
		}

		t.Run("follower", func(t *testing.T) {
			db, sh, g, query := setup(t)
			var wg sync.WaitGroup
			defer wg.Wait()
			g.close(t)
			defer g.open(t)
			var long []<-chan herdOutcome
			for range 3 {
				long = append(long, call(ctx, db, query, &wg))
			}
			waiting(t, sh, 3)

			shortCtx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			defer cancel()
			short := call(shortCtx, db, query, &wg)
			// Observe it joining, if it does so before its deadline.
			joined := false
			for shortCtx.Err() == nil && !joined {
				joined = sh.Stats().Waiting == 4
				time.Sleep(time.Millisecond)
			}
			o := await(t, short, "the follower whose deadline passed")
			if !errors.Is(o.err, context.DeadlineExceeded) {
				t.Errorf("the follower got %v, want context.DeadlineExceeded", o.err)
			}
			t.Logf("observed the short follower inside the flight: %v", joined)
			waiting(t, sh, 3)

			g.open(t)
			stayers(t, long)
			if n := g.calls(t, admin); n != 1 {
				t.Errorf("the function ran %d times, want 1 (the flight must go on)", n)
			}
		})

		t.Run("leader", func(t *testing.T) {
			db, sh, g, query := setup(t)
			var wg sync.WaitGroup
			defer wg.Wait()
			g.close(t)
			defer g.open(t)
			leaderCtx, cancelLeader := context.WithCancel(ctx)
			defer cancelLeader()
			leader := call(leaderCtx, db, query, &wg)
			waitUntil(t, time.Minute, func() string { return "the leader in its flight: " + statsString(sh.Stats()) },
				func() bool { st := sh.Stats(); return st.Flights == 1 && st.Waiting == 1 })
			var followers []<-chan herdOutcome
			for range 2 {
				followers = append(followers, call(ctx, db, query, &wg))
			}
			waiting(t, sh, 3)
			cancelLeader()
			o := await(t, leader, "the leader whose context was cancelled")
			if !errors.Is(o.err, context.Canceled) {
				t.Errorf("the leader got %v, want context.Canceled", o.err)
			}
			waiting(t, sh, 2)
			g.open(t)
			stayers(t, followers)
			if n := g.calls(t, admin); n != 1 {
				t.Errorf("the function ran %d times, want 1 (the origin must outlive its leader's context)", n)
			}
			if st := sh.Stats(); st.Flights != 1 {
				t.Errorf("flights: %d, want 1: %s", st.Flights, statsString(st))
			}
		})

		t.Run("everyone", func(t *testing.T) {
			db, sh, g, query := setup(t)
			var wg sync.WaitGroup
			defer wg.Wait()
			g.close(t)
			defer g.open(t)
			callCtx, cancel := context.WithCancel(ctx)
			defer cancel()
			var all []<-chan herdOutcome
			for range 3 {
				all = append(all, call(callCtx, db, query, &wg))
			}
			waiting(t, sh, 3)
			waitUntil(t, time.Minute, func() string { return "the origin at the gate" }, func() bool {
				_, n := backends(t, admin, app)
				return n == 1
			})
			cancel()
			for i, ch := range all {
				o := await(t, ch, fmt.Sprintf("caller %d", i))
				if !errors.Is(o.err, context.Canceled) {
					t.Errorf("caller %d got %v, want context.Canceled", i, o.err)
				}
			}
			waiting(t, sh, 0)
			// Nobody waits and nothing will be cached: the origin query
			// is cancelled in PostgreSQL, so it leaves the gate.
			waitUntil(t, 30*time.Second, func() string {
				return "the origin query to be cancelled once nobody waited for it: " + statsString(sh.Stats())
			}, func() bool {
				_, n := backends(t, admin, app)
				return n == 0
			})
		})
	})
}

// TestOversizeNotShared: a result over the sharing limits still reaches
// every concurrent caller whole.
func TestOversizeNotShared(t *testing.T) {
	base := postgresDSN(t)
	admin := openRaw(t, base)

	cases := []struct {
		name    string
		opts    []sqlflight.Option
		query   string // %s is the gate function
		rows    int
		rowSize int // length of column s
	}{
		{
			name:  "maxrows annotation",
			query: `/* sqlflight: coalesce pure=%[1]s maxrows=10 */ SELECT n, 'x' AS s FROM %[1]s() AS g CROSS JOIN generate_series(1, 100) AS n ORDER BY n`,
			rows:  100, rowSize: 1,
		},
		{
			name:  "maxbytes annotation",
			query: `/* sqlflight: coalesce pure=%[1]s maxbytes=1KiB */ SELECT n, repeat('x', 100000) AS s FROM %[1]s() AS g CROSS JOIN generate_series(1, 3) AS n ORDER BY n`,
			rows:  3, rowSize: 100000,
		},
		{
			name:  "MaxRows option",
			opts:  []sqlflight.Option{sqlflight.Options{MaxResultRows: 5}},
			query: `/* sqlflight: coalesce pure=%[1]s */ SELECT n, 'x' AS s FROM %[1]s() AS g CROSS JOIN generate_series(1, 6) AS n ORDER BY n`,
			rows:  6, rowSize: 1,
		},
	}
	forEachExecMode(t, base, func(t *testing.T, dsn string) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				ctx := testContext(t, testTimeout)
				g := newGate(t, admin, dsn, "gate")
				query := fmt.Sprintf(c.query, g.fn)
				db, sh := openFlight(t, dsn, c.opts...)
				const callers = 4

				var wg sync.WaitGroup
				defer wg.Wait()
				g.close(t)
				defer g.open(t)
				type outcome struct {
					err error
					ns  []int64
					bad int
				}
				out := make([]outcome, callers)
				for i := range callers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						o := &out[i]
						rows, err := db.QueryContext(ctx, query)
						if err != nil {
							o.err = err
							return
						}
						defer rows.Close()
						for rows.Next() {
							var n int64
							var s string
							if err := rows.Scan(&n, &s); err != nil {
								o.err = err
								return
							}
							o.ns = append(o.ns, n)
							if s != strings.Repeat("x", c.rowSize) {
								o.bad++
							}
						}
						o.err = rows.Err()
					}()
				}
				waitUntil(t, time.Minute, func() string { return "all callers in the flight: " + statsString(sh.Stats()) },
					func() bool { return sh.Stats().Waiting >= callers })
				g.open(t)
				wg.Wait()
				for i, o := range out {
					if o.err != nil {
						t.Errorf("caller %d: %v", i, o.err)
						continue
					}
					ok := len(o.ns) == c.rows && o.bad == 0
					for j, n := range o.ns {
						ok = ok && n == int64(j+1)
					}
					if !ok {
						t.Errorf("caller %d got %d rows (%d with a wrong s), want all %d in order", i, len(o.ns), o.bad, c.rows)
					}
				}
				st := sh.Stats()
				if st.TooLarge == 0 {
					t.Errorf("TooLarge is 0 after a result over the limit: %s", statsString(st))
				}
				t.Logf("%d executions in PostgreSQL for %d callers; %s", g.calls(t, admin), callers, statsString(st))
			})
		}
	})
}

// TestCappedPoolHerd: under SetMaxOpenConns(8), 8 of 200 callers hold
// connections in the flight and 192 queue in database/sql's pool. Every
// caller gets the herd's row; those that waited in the queue take the
// ended flight's result as database/sql hands them the herd's connections
// (one execution; the ended flight stays joinable only as long as it ran,
// so a machine that drains the queue slower than that runs a flight per
// batch of 8 at most); once the herd is over, a read queries.
func TestCappedPoolHerd(t *testing.T) {
	dsn := postgresDSN(t)
	admin := openRaw(t, dsn)
	ctx := testContext(t, testTimeout)
	g := newGateFunc(t, admin, dsn, "capped", "TABLE(answer int, label text)", herdTail)
	query := fmt.Sprintf(`/* sqlflight: coalesce pure=%[1]s */ SELECT * FROM %[1]s()`, g.fn)
	db, sh := openFlight(t, dsn)
	const conns, callers = 8, 200
	db.SetMaxOpenConns(conns)

	var wg sync.WaitGroup
	defer wg.Wait()
	g.close(t)
	defer g.open(t)
	start := make(chan struct{})
	out := startHerd(ctx, db, query, callers, start, &wg)
	close(start)
	waitUntil(t, 2*time.Minute, func() string {
		return fmt.Sprintf("%d callers in the flight, %d queued: %s", conns, callers-conns, statsString(sh.Stats()))
	}, func() bool { return sh.Stats().Waiting == conns && db.Stats().WaitCount >= callers-conns })
	g.open(t)
	wg.Wait()

	summarize(t, out)
	st := sh.Stats()
	n := g.calls(t, admin)
	if n > callers/conns {
		t.Errorf("the function ran %d times for %d callers on %d connections, want at most one per batch (%d)", n, callers, conns, callers/conns)
	}
	t.Logf("%d executions for %d callers on %d connections; %d late followers", n, callers, conns, st.LateFollowers)

	// The herd is over: the next read queries.
	after := startHerd(ctx, db, query, 1, closedChan(), &wg)
	wg.Wait()
	summarize(t, after)
	if m := g.calls(t, admin); m != n+1 {
		t.Errorf("a read after the herd: %d executions, want %d", m, n+1)
	}
}

func closedChan() <-chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}

// TestFollowerKeepsItsSession: a sql.Conn whose caller ran its own work on
// its session (nextval, pg_backend_pid) keeps its real connection while it
// waits as a follower, even when another leader waits for a real
// connection under MaxConns: currval and the backend are still its own.
func TestFollowerKeepsItsSession(t *testing.T) {
	dsn := postgresDSN(t)
	admin := openRaw(t, dsn)
	ctx := testContext(t, testTimeout)
	g := newGateFunc(t, admin, dsn, "keep", "TABLE(answer int, label text)", herdTail)
	seq := "public.keep_seq_" + uniqueID(t)
	mustExec(t, admin, "CREATE SEQUENCE "+seq)
	cleanupExec(t, admin, "DROP SEQUENCE IF EXISTS "+seq)
	herdQuery := fmt.Sprintf(`/* sqlflight: coalesce pure=%[1]s */ SELECT * FROM %[1]s()`, g.fn)
	db, sh := openFlight(t, dsn, sqlflight.Options{MaxConns: 2})

	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var pid1, pid2, next, curr int64
	if err := conn.QueryRowContext(ctx, `SELECT pg_backend_pid(), nextval('`+seq+`')`).Scan(&pid1, &next); err != nil {
		t.Fatal(err)
	}

	var wg sync.WaitGroup
	defer wg.Wait()
	g.close(t)
	defer g.open(t)
	// The flight's leader (on the pool's connection: the cap's second),
	// then conn as its follower.
	lead := startHerd(ctx, db, herdQuery, 1, closedChan(), &wg)
	waitUntil(t, time.Minute, func() string { return "the leader at the gate: " + statsString(sh.Stats()) },
		func() bool { return sh.Stats().InFlight == 1 })
	followed := make(chan error, 1)
	go func() {
		var a int64
		var l string
		followed <- conn.QueryRowContext(ctx, herdQuery).Scan(&a, &l)
	}()
	waitUntil(t, time.Minute, func() string { return "conn following: " + statsString(sh.Stats()) },
		func() bool { return sh.Stats().Followers == 1 })
	// Another statement needs a real connection: both are taken.
	other := make(chan error, 1)
	go func() { _, err := db.ExecContext(ctx, `SELECT 1`); other <- err }()
	waitUntil(t, time.Minute, func() string { return "a wait for a real connection: " + statsString(sh.Stats()) },
		func() bool { return sh.Stats().RealConnWaits >= 1 })
	g.open(t)
	if err := <-followed; err != nil {
		t.Fatal(err)
	}
	if err := <-other; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	summarize(t, lead)

	if err := conn.QueryRowContext(ctx, `SELECT pg_backend_pid(), currval('`+seq+`')`).Scan(&pid2, &curr); err != nil {
		t.Fatalf("currval on the same sql.Conn: %v", err)
	}
	if pid2 != pid1 || curr != next {
		t.Errorf("the sql.Conn's session moved: backend %d then %d, currval %d after nextval %d", pid1, pid2, curr, next)
	}
}
