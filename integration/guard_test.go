package integration

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlflight/sqlflight"
)

// guardDatabase makes a database of its own for one test (dropped after,
// its connections ended) and returns its name and dsn made to reach it.
func guardDatabase(t *testing.T, dsn string) (string, string) {
	t.Helper()
	base := postgresDSN(t)
	admin := openRaw(t, base)
	name := "sqlflight_guard_" + uniqueID(t)
	mustExec(t, admin, "CREATE DATABASE "+name)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Logf("cleanup: drop database %s: %v", name, err)
		}
	})
	return name, withDSNParams(t, dsn, "dbname", name)
}

// breakerLabel is the label Stats.Breakers gives the scope of dsn.
func breakerLabel(t *testing.T, dsn string) string {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%s@%s:%d", cfg.Database, cfg.Host, cfg.Port)
}

// TestBreakerOpensWhenDownAtStartup: a DSN whose server never answered
// (nothing listens on its port) opens the breaker after BreakerFailures
// connection attempts; every later statement is refused at once.
func TestBreakerOpensWhenDownAtStartup(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close() // connection refused from now on
	dsn := withDSNParams(t, postgresDSN(t), "host", "127.0.0.1", "port", strconv.Itoa(port), "connect_timeout", "5")
	clk := &stepClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	sh := sqlflight.New(sqlflight.Options{Clock: clk, BreakerFailures: 3, BreakerTimeout: 5 * time.Second})
	name := "sqlflight-guard-" + uniqueID(t)
	sh.Register(name, stdlib.GetDefaultDriver())
	db, err := sql.Open(name, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.Close(), sh.Close() })
	ctx := testContext(t, testTimeout)

	var failed, refused int
	for i := range 10 {
		err := db.QueryRowContext(ctx, "SELECT $1::int", i).Scan(new(int))
		switch {
		case err == nil:
			t.Fatal("a closed port answered")
		case errors.Is(err, sqlflight.ErrCircuitOpen):
			refused++
		default:
			failed++
		}
	}
	st := sh.Stats()
	if failed != 3 || refused != 7 || st.BreakerRejected != 7 || st.BreakerState != "open" {
		t.Fatalf("%d connection failures, %d refused (Stats: %d rejected, breaker %s); want 3, 7, open",
			failed, refused, st.BreakerRejected, st.BreakerState)
	}
	if b := st.Breakers[breakerLabel(t, dsn)]; b.State != "open" || b.Rejected != 7 {
		t.Fatalf("the scope's breaker in Stats: %+v (all: %v)", b, st.Breakers)
	}
}

// TestOneDatabaseOutageLeavesTheOtherAlone: two databases opened with
// sql.Open("sqlflight", …), on the package's default Shield; cutting one
// opens its breaker only, and every statement to the other runs.
func TestOneDatabaseOutageLeavesTheOtherAlone(t *testing.T) {
	_, healthyDSN := guardDatabase(t, postgresDSN(t))
	proxy, cutDSN := newFaultProxy(t, postgresDSN(t))
	ctx := testContext(t, testTimeout)
	open := func(dsn string) *sql.DB {
		db, err := sql.Open("sqlflight", dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		return db
	}
	cut, healthy := open(cutDSN), open(healthyDSN)
	id := uniqueID(t)
	mustExec(t, healthy, "CREATE TABLE guard_"+id+" (n int)")
	for _, db := range []*sql.DB{cut, healthy} {
		if err := db.PingContext(ctx); err != nil {
			t.Fatal(err)
		}
	}

	proxy.Cut()
	var opened bool
	for i := range 20 {
		err := cut.QueryRowContext(ctx, "SELECT $1::int", i).Scan(new(int))
		if errors.Is(err, sqlflight.ErrCircuitOpen) {
			opened = true
			break
		}
		if err == nil {
			t.Fatal("a cut database answered")
		}
	}
	if !opened {
		t.Fatal("the cut database's breaker never opened")
	}
	for i := range 20 {
		if err := healthy.QueryRowContext(ctx, "SELECT count(*) FROM guard_"+id+" WHERE n = $1", i).Scan(new(int)); err != nil {
			t.Fatalf("read %d of the healthy database: %v", i, err)
		}
		if _, err := healthy.ExecContext(ctx, "INSERT INTO guard_"+id+" VALUES ($1)", i); err != nil {
			t.Fatalf("write %d to the healthy database: %v", i, err)
		}
	}

	st := sqlflight.ShieldOf(cut).Stats()
	if b := st.Breakers[breakerLabel(t, cutDSN)]; b.State != "open" || b.Rejected == 0 {
		t.Errorf("the cut database's breaker: %+v", b)
	}
	if b := st.Breakers[breakerLabel(t, healthyDSN)]; b.State != "closed" || b.Rejected != 0 || b.Transitions != 0 {
		t.Errorf("the healthy database's breaker: %+v", b)
	}
	if st.BreakerState != "open" || st.BreakerOpen < 1 {
		t.Errorf("Stats: breaker %s, %d scopes open", st.BreakerState, st.BreakerOpen)
	}
}

// TestProbeAfterEveryConnectionKilled: every session of a database is
// ended with 57P01, as a restart ends them (pg_terminate_backend; the
// shared cluster itself is not restarted, which would disturb every other
// test running against it). The first failure opens the breaker; once its
// timeout passes, the probe lands on a connection kept from before, which
// is dead: it must run on a new connection and close the breaker, not fail
// on the dead one and keep it open for another timeout.
func TestProbeAfterEveryConnectionKilled(t *testing.T) {
	forEachExecMode(t, postgresDSN(t), func(t *testing.T, modeDSN string) {
		name, dsn := guardDatabase(t, modeDSN)
		admin := openRaw(t, postgresDSN(t))
		cfg, err := pgx.ParseConfig(dsn)
		if err != nil {
			t.Fatal(err)
		}
		clk := &stepClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
		db := sqlflight.OpenDB(stdlib.GetConnector(*cfg), sqlflight.Options{Clock: clk, BreakerFailures: 1, BreakerTimeout: 5 * time.Second})
		sh := sqlflight.ShieldOf(db)
		t.Cleanup(func() { _, _ = db.Close(), sh.Close() })
		ctx := testContext(t, testTimeout)

		read := func(c *sql.Conn, i int) error {
			return c.QueryRowContext(ctx, "SELECT $1::int + 1", i).Scan(new(int))
		}
		c1, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c1.Close()
		c2, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c2.Close()
		for i, c := range []*sql.Conn{c1, c2} {
			if err := read(c, i); err != nil {
				t.Fatal(err)
			}
		}
		sessions := func() int {
			var n int
			if err := admin.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = $1`, name).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		if n := sessions(); n != 2 {
			t.Fatalf("%d sessions on the database, want 2", n)
		}

		mustExec(t, admin, fmt.Sprintf(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '%s'`, name))
		waitUntil(t, 30*time.Second, func() string { return "the sessions to end" }, func() bool { return sessions() == 0 })
		if err := read(c1, 10); err == nil || sh.Stats().BreakerState != "open" {
			t.Fatalf("every session killed, yet: %v, breaker %s", err, sh.Stats().BreakerState)
		}
		before := sh.Stats()

		clk.add(5 * time.Second)
		if err := read(c2, 11); err != nil {
			t.Fatalf("the probe: %v", err)
		}
		st := sh.Stats()
		if st.BreakerState != "closed" || st.BreakerProbeRedials != 1 || st.RealConnsOpened != before.RealConnsOpened+1 {
			t.Fatalf("breaker %s, %d probes redialled, %d connections opened; want closed, 1, 1",
				st.BreakerState, st.BreakerProbeRedials, st.RealConnsOpened-before.RealConnsOpened)
		}
		if n := sessions(); n != 1 {
			t.Fatalf("%d sessions on the database after the probe, want 1 (the probe's new one)", n)
		}
	})
}
