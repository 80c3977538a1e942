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
// its connections ended) and returns its name and DSN.
func guardDatabase(t *testing.T) (string, string) {
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
	return name, withDSNParams(t, base, "dbname", name)
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
	_, healthyDSN := guardDatabase(t)
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
