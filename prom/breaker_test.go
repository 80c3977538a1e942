package prom_test

import (
	"context"
	"database/sql/driver"
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sqlflight/sqlflight"
	"github.com/sqlflight/sqlflight/prom"
)

// downDriver is a database that cannot be reached.
type downDriver struct{ testDriver }

func (downDriver) Connect(context.Context) (driver.Conn, error) {
	return nil, &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
}
func (d downDriver) Driver() driver.Driver { return d }

func TestBreakerMetricsTellWhichScopeIsOpen(t *testing.T) {
	s := sqlflight.New(sqlflight.Options{Logger: slog.New(slog.DiscardHandler), BreakerFailures: 1})
	t.Cleanup(func() { s.Close() })
	down := s.OpenDB(downDriver{}) // scope 1
	up := s.OpenDB(testDriver{})   // scope 2
	t.Cleanup(func() { _, _ = down.Close(), up.Close() })
	if err := down.QueryRow("SELECT 1").Scan(new(int)); err == nil {
		t.Fatal("an unreachable database answered")
	}
	if err := up.QueryRow("SELECT 1").Scan(new(int)); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP sqlflight_breaker_open_scopes Scopes (databases) whose circuit breaker is open or half-open.
# TYPE sqlflight_breaker_open_scopes gauge
sqlflight_breaker_open_scopes{shield="default"} 1
# HELP sqlflight_breaker_scope_state State of a scope's circuit breaker: 0 closed, 1 half-open, 2 open (at most MaxBreakerScopes scopes, those not closed first).
# TYPE sqlflight_breaker_scope_state gauge
sqlflight_breaker_scope_state{scope="scope 1",shield="default"} 2
sqlflight_breaker_scope_state{scope="scope 2",shield="default"} 0
# HELP sqlflight_breaker_state State of the circuit breaker, the worst of the scopes': 0 closed, 1 half-open, 2 open.
# TYPE sqlflight_breaker_state gauge
sqlflight_breaker_state{shield="default"} 2
`
	c := prom.NewCollector(s)
	if err := testutil.CollectAndCompare(c, strings.NewReader(want),
		"sqlflight_breaker_open_scopes", "sqlflight_breaker_scope_state", "sqlflight_breaker_state"); err != nil {
		t.Fatal(err)
	}
}

func TestBreakerScopeSeriesAreBounded(t *testing.T) {
	s := sqlflight.New(sqlflight.Options{Logger: slog.New(slog.DiscardHandler), BreakerFailures: 1})
	t.Cleanup(func() { s.Close() })
	for range prom.MaxBreakerScopes + 5 {
		db := s.OpenDB(testDriver{})
		t.Cleanup(func() { _ = db.Close() })
	}
	down := s.OpenDB(downDriver{}) // the last scope: past the cap by name order
	t.Cleanup(func() { _ = down.Close() })
	_ = down.QueryRow("SELECT 1").Scan(new(int))

	c := prom.NewCollector(s)
	if n := testutil.CollectAndCount(c, "sqlflight_breaker_scope_state"); n != prom.MaxBreakerScopes {
		t.Fatalf("%d scope series, want %d", n, prom.MaxBreakerScopes)
	}
	want := `
# HELP sqlflight_breaker_open_scopes Scopes (databases) whose circuit breaker is open or half-open.
# TYPE sqlflight_breaker_open_scopes gauge
sqlflight_breaker_open_scopes{shield="default"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "sqlflight_breaker_open_scopes"); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		if mf.GetName() != "sqlflight_breaker_scope_state" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "scope" && lp.GetValue() == "scope 16" && m.GetGauge().GetValue() == 2 {
					found = true
				}
			}
		}
	}
	if !found {
		t.Fatal("the open scope is not among the exported ones")
	}
}
