package integration

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// queryer is what *sql.DB, *sql.Conn and *sql.Tx have in common.
type queryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

func readString(t testing.TB, ctx context.Context, q queryer, query string, args ...any) string {
	t.Helper()
	var s sql.NullString
	if err := q.QueryRowContext(ctx, query, args...).Scan(&s); err != nil {
		t.Fatalf("%s: %v", abbrev(query), err)
	}
	return s.String
}

// hammer runs read on n goroutines until stop closes, at most max times
// each; it returns a function that stops them and returns the number of
// reads made. read reports problems through t.Errorf (safe from goroutines
// while the test waits for them).
func hammer(ctx context.Context, n, max int, read func(ctx context.Context, worker int)) (stop func() int64) {
	var (
		wg    sync.WaitGroup
		done  = make(chan struct{})
		count atomic.Int64
	)
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range max {
				select {
				case <-done:
					return
				case <-ctx.Done():
					return
				default:
				}
				read(ctx, w)
				count.Add(1)
			}
		}()
	}
	var once sync.Once
	return func() int64 {
		once.Do(func() { close(done) })
		wg.Wait()
		return count.Load()
	}
}

// TestTxBypass: statements inside a transaction — begun with BeginTx or
// sent as SQL — go to the transaction's own connection, never into a flight,
// so they see the transaction's writes and snapshot, and outsiders don't.
func TestTxBypass(t *testing.T) {
	base := postgresDSN(t)
	admin := openRaw(t, base)
	forEachExecMode(t, base, func(t *testing.T, dsn string) {
		ctx := testContext(t, testTimeout)
		table := "tx_" + uniqueID(t)
		mustExec(t, admin,
			fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, v text NOT NULL)`, table),
			fmt.Sprintf(`INSERT INTO %s VALUES (1, 'old')`, table))
		cleanupExec(t, admin, "DROP TABLE IF EXISTS "+table)
		sel := fmt.Sprintf(`SELECT v FROM %s WHERE id = 1`, table)
		set := func(v string) string { return fmt.Sprintf(`UPDATE %s SET v = '%s' WHERE id = 1`, table, v) }

		db, sh := openFlight(t, dsn)

		// outsiders hammers the same statement on the pool and checks the
		// value each read sees; it returns the stopper.
		outsiders := func(t *testing.T, want string) func() int64 {
			errs := newErrBudget(t, 5)
			return hammer(ctx, 3, 200, func(ctx context.Context, _ int) {
				var v string
				if err := db.QueryRowContext(ctx, sel).Scan(&v); err != nil {
					if ctx.Err() == nil {
						errs.Errorf("outside read: %v", err)
					}
					return
				}
				if v != want {
					errs.Errorf("outside read saw %q, want %q", v, want)
				}
			})
		}

		t.Run("BeginTx", func(t *testing.T) {
			if got := readString(t, ctx, db, sel); got != "old" {
				t.Fatalf("before: %q", got)
			}
			before := sh.Stats()
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			if _, err := tx.ExecContext(ctx, set("new")); err != nil {
				t.Fatal(err)
			}
			if got := readString(t, ctx, tx, sel); got != "new" {
				t.Errorf("read inside the transaction after its write: %q, want %q", got, "new")
			}
			mid := sh.Stats()
			if mid.Bypassed < before.Bypassed+2 {
				t.Errorf("bypassed grew by %d, want ≥ 2 (the write and the read): %s", mid.Bypassed-before.Bypassed, statsString(mid))
			}
			if mid.Flights != before.Flights || mid.Followers != before.Followers {
				t.Errorf("statements inside a transaction formed or joined flights: before %s; after %s", statsString(before), statsString(mid))
			}

			// Concurrent outsiders see the committed value; the transaction
			// keeps seeing its own.
			stop := outsiders(t, "old")
			for range 100 {
				if got := readString(t, ctx, tx, sel); got != "new" {
					t.Errorf("read inside the transaction: %q, want %q", got, "new")
					break
				}
			}
			stop()

			if err := tx.Rollback(); err != nil {
				t.Fatal(err)
			}
			if got := readString(t, ctx, db, sel); got != "old" {
				t.Errorf("after rollback: %q, want %q", got, "old")
			}
		})

		t.Run("BeginTx repeatable read keeps its snapshot", func(t *testing.T) {
			tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			if got := readString(t, ctx, tx, sel); got != "old" {
				t.Fatalf("first read in the transaction: %q", got)
			}
			mustExec(t, admin, set("committed elsewhere"))
			defer mustExec(t, admin, set("old"))
			stop := outsiders(t, "committed elsewhere")
			for range 100 {
				if got := readString(t, ctx, tx, sel); got != "old" {
					t.Errorf("repeatable-read transaction saw %q, want its snapshot %q", got, "old")
					break
				}
			}
			stop()
		})

		t.Run("BEGIN as SQL", func(t *testing.T) {
			conn, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			mustExec(t, conn, "BEGIN")
			committed := false
			defer func() {
				if !committed {
					mustExec(t, conn, "ROLLBACK")
				}
			}()
			mustExec(t, conn, set("sql begin"))
			before := sh.Stats()
			if got := readString(t, ctx, conn, sel); got != "sql begin" {
				t.Errorf("read after BEGIN and a write on the same connection: %q, want %q", got, "sql begin")
			}
			mid := sh.Stats()
			if mid.Bypassed <= before.Bypassed || mid.Flights != before.Flights || mid.Followers != before.Followers {
				t.Errorf("a read inside BEGIN…COMMIT was shared: before %s; after %s", statsString(before), statsString(mid))
			}
			stop := outsiders(t, "old")
			for range 100 {
				if got := readString(t, ctx, conn, sel); got != "sql begin" {
					t.Errorf("read inside BEGIN…COMMIT: %q, want %q", got, "sql begin")
					break
				}
			}
			stop()
			mustExec(t, conn, "COMMIT")
			committed = true
			if got := readString(t, ctx, db, sel); got != "sql begin" {
				t.Errorf("pool read after COMMIT: %q, want %q", got, "sql begin")
			}
			s0 := sh.Stats()
			if got := readString(t, ctx, conn, sel); got != "sql begin" {
				t.Errorf("read on the connection after COMMIT: %q, want %q", got, "sql begin")
			}
			s1 := sh.Stats()
			t.Logf("a read on the connection after COMMIT was %s", map[bool]string{true: "shared again", false: "still bypassed"}[s1.Flights+s1.Followers > s0.Flights+s0.Followers])
			mustExec(t, admin, set("old"))
		})

		t.Run("START TRANSACTION repeatable read as SQL", func(t *testing.T) {
			conn, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			mustExec(t, conn, "start transaction isolation level repeatable read")
			defer mustExec(t, conn, "ROLLBACK")
			if got := readString(t, ctx, conn, sel); got != "old" {
				t.Fatalf("first read: %q", got)
			}
			mustExec(t, admin, set("committed elsewhere"))
			defer mustExec(t, admin, set("old"))
			stop := outsiders(t, "committed elsewhere")
			for range 100 {
				if got := readString(t, ctx, conn, sel); got != "old" {
					t.Errorf("repeatable-read transaction begun as SQL saw %q, want its snapshot %q", got, "old")
					break
				}
			}
			stop()
		})
	})
}

// TestSessionBypass: a connection whose session differs from the pool's
// (search_path, temp tables) never shares a flight with the pool, in either
// direction.
func TestSessionBypass(t *testing.T) {
	base := postgresDSN(t)
	admin := openRaw(t, base)
	forEachExecMode(t, base, func(t *testing.T, dsn string) {
		ctx := testContext(t, testTimeout)
		id := uniqueID(t)
		a, b := "a_"+id, "b_"+id
		mustExec(t, admin,
			"CREATE SCHEMA "+a, "CREATE SCHEMA "+b,
			fmt.Sprintf(`CREATE TABLE %s.t (v text)`, a), fmt.Sprintf(`CREATE TABLE %s.t (v text)`, b),
			fmt.Sprintf(`INSERT INTO %s.t VALUES ('a1'), ('a2')`, a),
			fmt.Sprintf(`INSERT INTO %s.t VALUES ('b1')`, b))
		cleanupExec(t, admin, "DROP SCHEMA IF EXISTS "+a+" CASCADE", "DROP SCHEMA IF EXISTS "+b+" CASCADE")

		app := "sqlflight_session_" + id
		db, sh := openFlight(t, withDSNParams(t, dsn, "search_path", a, "application_name", app))
		g := newGate(t, admin, dsn, "gate")
		plain := `SELECT string_agg(v, ',' ORDER BY v) FROM t`
		gated := fmt.Sprintf(`/* sqlflight: coalesce pure=%[1]s */ SELECT string_agg(t.v, ',' ORDER BY t.v) FROM %[1]s() AS g CROSS JOIN t`, g.fn)
		const fromA, fromB, fromTemp = "a1,a2", "b1", "temp1"

		if got := readString(t, ctx, db, plain); got != fromA {
			t.Fatalf("the pool reads %q, want %q (search_path from the DSN)", got, fromA)
		}

		// check runs, on conn whose session reads want:
		//  1. a deterministic interleaving: pool callers wait in a gated
		//     flight, then conn sends the same statement; conn must go to
		//     the database itself (it shows up at the gate) rather than join;
		//  2. a bounded hammer of pool and conn reads at once.
		check := func(t *testing.T, conn *sql.Conn, want string) {
			t.Helper()
			const poolCallers = 3
			before := sh.Stats()
			var wg sync.WaitGroup
			defer wg.Wait()
			g.close(t)
			defer g.open(t)
			for range poolCallers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var got sql.NullString
					if err := db.QueryRowContext(ctx, gated).Scan(&got); err != nil {
						t.Errorf("pool read: %v", err)
					} else if got.String != fromA {
						t.Errorf("pool read %q, want %q", got.String, fromA)
					}
				}()
			}
			waitUntil(t, time.Minute, func() string { return "pool callers in the flight: " + statsString(sh.Stats()) },
				func() bool { return sh.Stats().Waiting-before.Waiting >= poolCallers })
			connDone := make(chan string, 1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				var got sql.NullString
				if err := conn.QueryRowContext(ctx, gated).Scan(&got); err != nil {
					t.Errorf("session read: %v", err)
				}
				connDone <- got.String
			}()
			// Either conn reaches the gate on its own backend (two
			// backends wait there: the flight's and conn's), or it wrongly
			// joined the flight (one more waiter).
			waitUntil(t, time.Minute, func() string {
				_, n := backends(t, admin, app)
				return fmt.Sprintf("the session's read to reach the gate or the flight (%d at the gate): %s", n, statsString(sh.Stats()))
			}, func() bool {
				_, n := backends(t, admin, app)
				return n >= 2 || sh.Stats().Waiting-before.Waiting > poolCallers
			})
			if w := sh.Stats().Waiting - before.Waiting; w > poolCallers {
				t.Errorf("the session-tainted connection joined the pool's flight (%d waiting)", w)
			}
			g.open(t)
			if got := <-connDone; got != want {
				t.Errorf("session read %q, want %q", got, want)
			}
			wg.Wait()

			errs := newErrBudget(t, 5)
			stop := hammer(ctx, 3, 100, func(ctx context.Context, _ int) {
				var got sql.NullString
				if err := db.QueryRowContext(ctx, plain).Scan(&got); err != nil {
					if ctx.Err() == nil {
						errs.Errorf("pool read: %v", err)
					}
				} else if got.String != fromA {
					errs.Errorf("pool read %q, want %q", got.String, fromA)
				}
			})
			for range 100 {
				if got := readString(t, ctx, conn, plain); got != want {
					t.Errorf("session read %q, want %q", got, want)
					break
				}
			}
			stop()
		}

		t.Run("SET search_path", func(t *testing.T) {
			conn, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			mustExec(t, conn, "SET search_path = "+b)
			check(t, conn, fromB)
			mustExec(t, conn, "RESET search_path")
			if got := readString(t, ctx, conn, plain); got != fromA {
				t.Errorf("after RESET search_path: %q, want %q", got, fromA)
			}
		})

		t.Run("set_config", func(t *testing.T) {
			conn, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			readString(t, ctx, conn, `SELECT set_config('search_path', $1, false)`, b)
			check(t, conn, fromB)
			mustExec(t, conn, "RESET search_path")
		})

		t.Run("temp table", func(t *testing.T) {
			conn, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			tmp := "tmp_" + id
			mustExec(t, conn,
				fmt.Sprintf(`CREATE TEMP TABLE %s (v int)`, tmp),
				fmt.Sprintf(`INSERT INTO %s VALUES (7), (8)`, tmp))
			var n int64
			if err := conn.QueryRowContext(ctx, fmt.Sprintf(`SELECT sum(v) FROM %s`, tmp)).Scan(&n); err != nil {
				t.Fatalf("reading a temp table on its own connection: %v", err)
			} else if n != 15 {
				t.Errorf("sum over the temp table: %d, want 15", n)
			}
			// A temp table named t shadows the pool's t on this session.
			mustExec(t, conn, `CREATE TEMP TABLE t (v text)`, `INSERT INTO t VALUES ('temp1')`)
			check(t, conn, fromTemp)
			mustExec(t, conn, "DISCARD TEMP")
			if got := readString(t, ctx, conn, plain); got != fromA {
				t.Errorf("after DISCARD TEMP: %q, want %q", got, fromA)
			}
		})

		if got := readString(t, ctx, db, plain); got != fromA {
			t.Errorf("the pool reads %q at the end, want %q", got, fromA)
		}
	})
}

// TestReadYourWrites: a writer that changes a row through sqlflight and then
// reads it through sqlflight sees its own write every time, even while
// other callers keep flights for the same statement running.
func TestReadYourWrites(t *testing.T) {
	base := postgresDSN(t)
	admin := openRaw(t, base)
	forEachExecMode(t, base, func(t *testing.T, dsn string) {
		ctx := testContext(t, testTimeout)
		table := "ryw_" + uniqueID(t)
		mustExec(t, admin,
			fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, v int NOT NULL)`, table),
			fmt.Sprintf(`INSERT INTO %s VALUES (1, 0)`, table))
		cleanupExec(t, admin, "DROP TABLE IF EXISTS "+table)
		sel := fmt.Sprintf(`SELECT v FROM %s WHERE id = $1`, table)
		upd := fmt.Sprintf(`UPDATE %s SET v = $1 WHERE id = 1`, table)

		db, sh := openFlight(t, dsn)
		var maxSeen atomic.Int64
		var readerErrs atomic.Int64
		stop := hammer(ctx, 6, 100_000, func(ctx context.Context, _ int) {
			var v int64
			if err := db.QueryRowContext(ctx, sel, 1).Scan(&v); err != nil {
				if ctx.Err() == nil && readerErrs.Add(1) <= 5 {
					t.Errorf("reader: %v", err)
				}
				return
			}
			for {
				m := maxSeen.Load()
				if v <= m || maxSeen.CompareAndSwap(m, v) {
					break
				}
			}
		})
		defer stop()

		const iterations = 300
		stale := 0
		for i := int64(1); i <= iterations; i++ {
			switch i % 3 {
			case 0: // a committed transaction
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := tx.ExecContext(ctx, upd, i); err != nil {
					_ = tx.Rollback()
					t.Fatal(err)
				}
				if err := tx.Commit(); err != nil {
					t.Fatal(err)
				}
			default:
				if _, err := db.ExecContext(ctx, upd, i); err != nil {
					t.Fatal(err)
				}
			}
			var v int64
			if err := db.QueryRowContext(ctx, sel, 1).Scan(&v); err != nil {
				t.Fatalf("iteration %d: read: %v", i, err)
			}
			if v != i {
				stale++
				if stale <= 10 {
					t.Errorf("iteration %d: read %d after writing %d (stale read)", i, v, i)
				}
			}
		}
		reads := stop()
		st := sh.Stats()
		if stale > 0 {
			t.Errorf("%d of %d reads after a write were stale", stale, iterations)
		}
		if m := maxSeen.Load(); m > iterations {
			t.Errorf("a reader saw %d, more than was ever written", m)
		}
		t.Logf("%d writes, %d background reads; %s", iterations, reads, statsString(st))
	})
}
