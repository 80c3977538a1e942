package sqlflight

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlflight/sqlflight/internal/identity"
)

// idDriver is a fakeDriver whose connections tell a server identity: the
// i-th connection opened tells ids[i] (the last one repeats).
type idDriver struct {
	*fakeDriver
	mu  sync.Mutex
	ids []idAnswer
	n   int
}

type idAnswer struct {
	id  identity.Server
	ok  bool
	err error
}

func newIDDriver(c *counting, ids ...idAnswer) *idDriver { return &idDriver{fakeDriver: c.d, ids: ids} }

func (d *idDriver) Open(string) (driver.Conn, error) {
	c, _ := d.fakeDriver.Open("")
	d.mu.Lock()
	a := d.ids[min(d.n, len(d.ids)-1)]
	d.n++
	d.mu.Unlock()
	return &idConn{fakeConn: c.(*fakeConn), a: a}, nil
}

// set makes every later connection tell a.
func (d *idDriver) set(a idAnswer) {
	d.mu.Lock()
	d.ids, d.n = []idAnswer{a}, 0
	d.mu.Unlock()
}

type idConn struct {
	*fakeConn
	a idAnswer
}

func (c *idConn) ServerIdentity(context.Context) (identity.Server, bool, error) {
	return c.a.id, c.a.ok, c.a.err
}

func server(system, db, role string) idAnswer {
	return idAnswer{id: identity.Server{System: system, Database: db, Roles: role + "\x00" + role}, ok: true}
}

func loggerTo(b *logBuffer) *slog.Logger { return slog.New(slog.NewTextHandler(b, nil)) }

// idInstance opens the DSN "app" through d on a Shield of its own on tier.
func idInstance(t *testing.T, tier *memTier, d driver.Driver, opts Options) (*sql.DB, *Shield, *wrappedDriver) {
	t.Helper()
	opts.Clock, opts.SharedSecret = tier.clock, testSecret
	s := New(opts, Shared(tier))
	t.Cleanup(func() { _ = s.Close() })
	w := s.Wrap(d)
	db := sql.OpenDB(dsnConnector{drv: w, dsn: "app"})
	t.Cleanup(func() { _ = db.Close() })
	return db, s, w.(*wrappedDriver)
}

// scopeOf returns the scope the DSN "app" has in w.
func scopeOf(t *testing.T, w *wrappedDriver) *dsnScope {
	t.Helper()
	e, err := w.scopeFor("app", w)
	if err != nil {
		t.Fatal(err)
	}
	e.release()
	return e
}

// TestFleetNameCarriesServerIdentity: two environments whose DSNs read
// alike (both "app", say both db:5432 on their own networks) share one
// Redis: only instances that reach the same server and database share.
func TestFleetNameCarriesServerIdentity(t *testing.T) {
	tier := newMemTier(newFakeClock())
	staging, production, staging2 := newCounting(), newCounting(), newCounting()
	production.n.Store(1000)
	staging2.n.Store(2000)
	dbS, sS, _ := idInstance(t, tier, newIDDriver(staging, server("7001", "16384", "app")), Options{})
	dbP, _, _ := idInstance(t, tier, newIDDriver(production, server("7002", "16384", "app")), Options{})
	dbS2, _, _ := idInstance(t, tier, newIDDriver(staging2, server("7001", "16384", "app")), Options{})
	other := newCounting()
	other.n.Store(3000)
	dbO, _, _ := idInstance(t, tier, newIDDriver(other, server("7001", "16999", "app")), Options{})

	w := sS.Stats().SharedWrites
	if n := readN(t, dbS, ttlQuery, 1); n != 1 {
		t.Fatal(n)
	}
	waitFor(t, "the L2 write", func() bool { return sS.Stats().SharedWrites > w })
	if n := readN(t, dbP, ttlQuery, 1); n != 1001 {
		t.Fatalf("production read %d: staging's row through the shared tier", n)
	}
	if n := readN(t, dbO, ttlQuery, 1); n != 3001 {
		t.Fatalf("another database of the same server read %d: staging's row", n)
	}
	if n := readN(t, dbS2, ttlQuery, 1); n != 1 || staging2.d.queries.Load() != 0 {
		t.Fatalf("a second staging instance read %d (%d queries): the same server did not share", n, staging2.d.queries.Load())
	}
}

// TestNoSharedTierWithoutSystemIdentifier: a role that may not call
// pg_control_system() leaves the scope off the shared tier, with a warning.
func TestNoSharedTierWithoutSystemIdentifier(t *testing.T) {
	tier := newMemTier(newFakeClock())
	var log logBuffer
	c := newCounting()
	db, _, w := idInstance(t, tier, newIDDriver(c, server("", "16384", "app")), Options{Logger: loggerTo(&log)})
	readN(t, db, ttlQuery, 1)
	readN(t, db, ttlQuery, 2)
	if n := tier.calls.Load(); n != 0 {
		t.Errorf("the tier was called %d times", n)
	}
	if e := scopeOf(t, w); e.sc.sharing() {
		t.Error("a scope without the server's identity shares")
	}
	if got := log.String(); strings.Count(got, "pg_control_system") != 1 {
		t.Errorf("want one warning, have:\n%s", got)
	}
	// A server that tells nothing at all (ok false) on a pgx-less fake
	// connection is not PostgreSQL: the DSN's name alone, as before.
	d := newIDDriver(newCounting(), idAnswer{})
	_, _, w2 := idInstance(t, tier, d, Options{})
	e := scopeOf(t, w2)
	if e.sc.sharing() {
		t.Fatal("sharing before any connection")
	}
	rc, err := e.open(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	_ = rc.Close()
	if !e.sc.sharing() || e.sc.shared != "dsn\x00app" {
		t.Fatalf("%q", e.sc.shared)
	}
}

// TestSharedTierWaitsForTheIdentity: until a real connection told who the
// server is, the scope is off the shared tier; a connection whose identity
// query fails is not used.
func TestSharedTierWaitsForTheIdentity(t *testing.T) {
	tier := newMemTier(newFakeClock())
	c := newCounting()
	broken := errors.New("connection reset")
	d := newIDDriver(c, idAnswer{err: broken}, server("7001", "16384", "app"))
	db, _, w := idInstance(t, tier, d, Options{})
	e := scopeOf(t, w)
	if e.sc.sharing() {
		t.Fatal("a new scope shares before any connection")
	}
	if err := db.Ping(); !errors.Is(err, broken) {
		t.Fatalf("ping: %v", err)
	}
	if e.sc.sharing() || tier.calls.Load() != 0 {
		t.Fatal("sharing after a failed identity")
	}
	if c.d.closed.Load() != 1 {
		t.Errorf("the unidentified connection was not closed: %d closed", c.d.closed.Load())
	}
	readN(t, db, ttlQuery, 1)
	if !e.sc.sharing() || !strings.Contains(e.sc.shared, "\x00server\x007001\x0016384\x00app") {
		t.Fatalf("shared name %q", e.sc.shared)
	}
	if tier.calls.Load() == 0 {
		t.Error("the identified scope did not use the tier")
	}
}

// TestFailoverToAnotherServerLeavesTheSharedTier: a later real connection
// that reaches another cluster takes the scope off the shared tier.
func TestFailoverToAnotherServerLeavesTheSharedTier(t *testing.T) {
	tier := newMemTier(newFakeClock())
	var log logBuffer
	c := newCounting()
	d := newIDDriver(c, server("7001", "16384", "app"))
	db, s, w := idInstance(t, tier, d, Options{Logger: loggerTo(&log)})
	readN(t, db, ttlQuery, 1)
	waitFor(t, "the L2 write", func() bool { return s.Stats().SharedWrites == 1 })
	e := scopeOf(t, w)
	if !e.sc.sharing() {
		t.Fatal("not sharing")
	}
	// A physical standby of the same cluster tells the same identity.
	open := func() {
		rc, err := e.open(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		_ = rc.Close()
	}
	open()
	if !e.sc.sharing() {
		t.Fatal("the same server stopped sharing")
	}
	d.set(server("7002", "16384", "app"))
	open()
	if e.sc.sharing() {
		t.Fatal("still sharing after reaching another cluster")
	}
	before := tier.calls.Load()
	readN(t, db, ttlQuery, 2)
	if tier.calls.Load() != before {
		t.Error("a read of a mixed scope called the tier")
	}
	d.set(server("7001", "16384", "app"))
	open()
	if e.sc.sharing() {
		t.Fatal("back on the shared tier once mixed")
	}
	if got := log.String(); strings.Count(got, "another server or database") != 1 {
		t.Errorf("want one warning, have:\n%s", got)
	}
	// Once nothing uses it, the DSN opened again gets a new scope that
	// learns the server anew.
	_ = db.Close()
	e2 := scopeOf(t, w)
	if e2 == e || e2.sc.id == e.sc.id {
		t.Fatal("the mixed scope was kept after its DB closed")
	}
	rc, err := e2.open(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	_ = rc.Close()
	if !e2.sc.sharing() {
		t.Error("the new scope does not share")
	}
}

// TestConnectionAsAnotherRoleIsRefused: a scope's real connections all log
// in as its first's role; the scope's cached rows are that role's.
func TestConnectionAsAnotherRoleIsRefused(t *testing.T) {
	tier := newMemTier(newFakeClock())
	c := newCounting()
	d := newIDDriver(c, server("7001", "16384", "alice"))
	db, _, w := idInstance(t, tier, d, Options{})
	readN(t, db, ttlQuery, 1)
	e := scopeOf(t, w)
	d.set(server("7001", "16384", "bob"))
	closed := c.d.closed.Load()
	if _, err := e.open(context.Background()); !errors.Is(err, errOtherRole) {
		t.Fatalf("%v", err)
	}
	if c.d.closed.Load() != closed+1 {
		t.Error("the refused connection was not closed")
	}
	if strings.Contains(errOtherRole.Error(), "bob") || strings.Contains(errOtherRole.Error(), "alice") {
		t.Error("the error names a role")
	}
}

// ctxDriver is a fakeDriver with DriverContext.
type ctxDriver struct{ *fakeDriver }

func (d ctxDriver) OpenConnector(dsn string) (driver.Connector, error) {
	return dsnConnector{drv: d, dsn: dsn}, nil
}

// TestRotatedDSNsArePruned: a process that opens and closes DBs with ever
// new DSNs (a rotated password in the text) keeps a bounded number of
// scopes; a scope in use is kept, with its cached results.
func TestRotatedDSNsArePruned(t *testing.T) {
	for _, withCtx := range []bool{false, true} {
		t.Run(fmt.Sprintf("DriverContext=%v", withCtx), func(t *testing.T) {
			c := newCounting()
			var parent driver.Driver = c.d
			if withCtx {
				parent = ctxDriver{c.d}
			}
			name := fmt.Sprintf("sqlflight-rotate-%d", fakeSeq.Add(1))
			s := Register(name, parent)
			t.Cleanup(func() { _ = s.Close() })
			kept, err := sql.Open(name, "app pw=0")
			if err != nil {
				t.Fatal(err)
			}
			defer kept.Close()
			if n := readN(t, kept, ttlQuery, 1); n != 1 {
				t.Fatal(n)
			}
			for i := 1; i <= 1000; i++ {
				db, err := sql.Open(name, fmt.Sprintf("app pw=%d", i))
				if err != nil {
					t.Fatal(err)
				}
				readN(t, db, ttlQuery, 1)
				_ = db.Close()
			}
			w := wrappedOf(kept)
			w.mu.Lock()
			n := len(w.scopes)
			w.mu.Unlock()
			if n > 2*minScopeSweep {
				t.Errorf("%d scopes kept after 1000 rotated DSNs", n)
			}
			q := c.d.queries.Load()
			if got := readN(t, kept, ttlQuery, 1); got != 1 || c.d.queries.Load() != q {
				t.Errorf("the DB kept open lost its scope's cache: read %d", got)
			}
		})
	}
}

func wrappedOf(db *sql.DB) *wrappedDriver {
	switch d := db.Driver().(type) {
	case *wrappedDriver:
		return d
	case *wrappedDriverContext:
		return d.wrappedDriver
	}
	panic("not a sqlflight DB")
}

// TestPrunedDSNShieldsGiveTheirTierBack: the Shield a DSN's sqlflight.*
// parameters made is closed with its forgotten scope, and gives back the
// shared tier it opened.
func TestPrunedDSNShieldsGiveTheirTierBack(t *testing.T) {
	first := len(opened)
	d := New().Wrap(ctxDriver{newCounting().d}).(*wrappedDriverContext)
	const rotations = 2*minScopeSweep + 20
	for i := range rotations {
		c, err := d.OpenConnector(fmt.Sprintf("app pw=%d sqlflight.shared=memtest://rot-%d sqlflight.max_bytes=64KiB sqlflight.shared_secret="+testSecretDSN, i, i))
		if err != nil {
			t.Fatal(err)
		}
		db := sql.OpenDB(c)
		readN(t, db, ttlQuery, 1)
		_ = db.Close()
	}
	open := 0
	for _, tr := range opened[first:] {
		if tr.closed.Load() == 0 {
			open++
		}
	}
	if len(opened)-first != rotations || open > 2*minScopeSweep {
		t.Errorf("%d tiers opened, %d still open", len(opened)-first, open)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, e := range d.scopes {
		_ = e.s.shield.Close()
	}
}

// TestPgxScopeNamedByServerIdentity needs a Postgres
// (SQLFLIGHT_POSTGRES_DSN): a pgx scope's fleet name carries the server's
// system identifier and the database's OID, learned on its first real
// connection; before it, the scope is off the shared tier; the identity
// query leaves nothing in the session.
func TestPgxScopeNamedByServerIdentity(t *testing.T) {
	dsn := postgresDSN(t)
	ctx := context.Background()
	raw, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	var system, oid string
	if err := raw.QueryRowContext(ctx, `SELECT system_identifier::text, (SELECT oid::text FROM pg_database WHERE datname = current_database()) FROM pg_control_system()`).Scan(&system, &oid); err != nil {
		t.Fatal(err)
	}

	s := New()
	defer s.Close()
	w := s.Wrap(stdlib.GetDefaultDriver()).(*wrappedDriverContext)
	c, err := w.OpenConnector(dsn)
	if err != nil {
		t.Fatal(err)
	}
	e := c.(*scopeConnector).e
	if e.sc.sharing() {
		t.Fatal("the scope is on the shared tier before any connection")
	}
	db := sql.OpenDB(c)
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var left int
	if err := conn.QueryRowContext(ctx, `SELECT count(*) FROM pg_prepared_statements WHERE statement NOT ILIKE '%pg_prepared_statements%'`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("the identity query left %d prepared statements", left)
	}
	if !e.sc.sharing() {
		t.Fatal("the scope is off the shared tier after its first connection")
	}
	if want := "\x00server\x00" + system + "\x00" + oid + "\x00"; !strings.Contains(e.sc.shared, want) {
		t.Fatalf("fleet name %q lacks the server's identity %q", e.sc.shared, want)
	}
	cfg, _ := pgx.ParseConfig(dsn)
	if !strings.HasPrefix(e.sc.shared, identity.Name(cfg)+"\x00server\x00") || cfg.Password != "" && strings.Contains(e.sc.shared, cfg.Password) {
		t.Fatalf("fleet name %q", e.sc.shared)
	}
}

// postgresDSN returns SQLFLIGHT_POSTGRES_DSN, or skips the test without it
// (fails it when SQLFLIGHT_REQUIRE_INTEGRATION=1).
func postgresDSN(t *testing.T) string {
	t.Helper()
	dsn := os.Getenv("SQLFLIGHT_POSTGRES_DSN")
	if dsn == "" {
		if os.Getenv("SQLFLIGHT_REQUIRE_INTEGRATION") == "1" {
			t.Fatal("SQLFLIGHT_POSTGRES_DSN not set")
		}
		t.Skip("SQLFLIGHT_POSTGRES_DSN not set")
	}
	return dsn
}
