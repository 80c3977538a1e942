package identity_test

import (
	"context"
	"database/sql/driver"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlflight/sqlflight/internal/identity"
)

// otherDriver is a parent driver that is not pgx.
type otherDriver struct{}

func (otherDriver) Open(string) (driver.Conn, error) { return nil, errors.New("not here") }

// TestResolveNamesWhatTheDSNReaches: two spellings of one database, user
// and settings resolve to one name, without the password; the environment
// takes part; another driver's DSN, or a text pgx cannot parse, is named
// by its text.
func TestResolveNamesWhatTheDSNReaches(t *testing.T) {
	t.Setenv("PGAPPNAME", "")
	t.Setenv("PGOPTIONS", "")
	pgxDriver := stdlib.GetDefaultDriver()
	a := identity.Resolve(pgxDriver, "host=db port=5432 dbname=orders user=app password=secret-a sslmode=disable")
	b := identity.Resolve(pgxDriver, "postgres://app:secret-b@db:5432/orders?sslmode=disable")
	if a.Config == nil || a.Name != b.Name {
		t.Fatalf("one database in two spellings: %q and %q", a.Name, b.Name)
	}
	if strings.Contains(a.Name, "secret") {
		t.Errorf("the name %q carries the password", a.Name)
	}
	// sslmode=prefer tries the server twice (TLS, then not): one server.
	if p := identity.Resolve(pgxDriver, "postgres://app@db:5432/orders?sslmode=prefer"); p.Name != a.Name {
		t.Errorf("sslmode=prefer: %q, want %q", p.Name, a.Name)
	}
	for _, other := range []string{
		"postgres://app@db:5432/billing?sslmode=disable",
		"postgres://bob@db:5432/orders?sslmode=disable",
		"postgres://app@db2:5432/orders?sslmode=disable",
		"postgres://app@db:5432/orders?sslmode=disable&application_name=x",
	} {
		if identity.Resolve(pgxDriver, other).Name == a.Name {
			t.Errorf("%s resolves to the same name as another database, user or setting", other)
		}
	}
	t.Setenv("PGAPPNAME", "reports")
	if c := identity.Resolve(pgxDriver, "postgres://app@db:5432/orders?sslmode=disable"); c.Name == a.Name {
		t.Error("the environment (PGAPPNAME) does not take part in the name")
	}
	if r := identity.Resolve(otherDriver{}, "app pw=1"); r.Name != "dsn\x00app pw=1" || r.Config != nil {
		t.Errorf("another driver's DSN: %q, %v", r.Name, r.Config)
	}
	if r := identity.Resolve(pgxDriver, "host=db port=notaport"); r.Name != "dsn\x00host=db port=notaport" || r.Config != nil {
		t.Errorf("a DSN pgx cannot parse: %q, %v", r.Name, r.Config)
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

func pgxConn(t *testing.T, rc driver.Conn) *pgx.Conn {
	t.Helper()
	c, ok := rc.(*stdlib.Conn)
	if !ok {
		t.Fatalf("%T is not a pgx connection", rc)
	}
	return c.Conn()
}

// TestOpenerKeepsWhatItResolved needs a Postgres: a connection opened
// after the environment changed what the DSN names reaches what it named
// first; while it names the same, the DSN is resolved anew.
func TestOpenerKeepsWhatItResolved(t *testing.T) {
	dsn := postgresDSN(t)
	ctx := context.Background()
	t.Setenv("PGAPPNAME", "sqlflight-identity-first")
	r := identity.Resolve(stdlib.GetDefaultDriver(), dsn)
	open := identity.Opener(dsn, r)
	appName := func() string {
		t.Helper()
		rc, err := open(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		var got string
		if err := pgxConn(t, rc).QueryRow(ctx, "SHOW application_name").Scan(&got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := appName(); got != "sqlflight-identity-first" {
		t.Fatalf("application_name %q", got)
	}
	t.Setenv("PGAPPNAME", "sqlflight-identity-other")
	if got := appName(); got != "sqlflight-identity-first" {
		t.Errorf("after the environment changed: application_name %q, want what the scope resolved", got)
	}
}

// TestOfPgxTellsTheServer needs a Postgres: a pgx connection tells the
// server's system identifier, its database's OID and its roles, and the
// question leaves the session idle, with no prepared statement.
func TestOfPgxTellsTheServer(t *testing.T) {
	dsn := postgresDSN(t)
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := stdlib.GetConnector(*cfg).Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	c := pgxConn(t, rc)
	var system, oid, role string
	if err := c.QueryRow(ctx, `SELECT system_identifier::text, (SELECT oid::text FROM pg_database WHERE datname = current_database()), current_user::text FROM pg_control_system()`, pgx.QueryExecModeSimpleProtocol).Scan(&system, &oid, &role); err != nil {
		t.Fatal(err)
	}
	id, ok, err := identity.Of(ctx, rc, true)
	if err != nil || !ok {
		t.Fatalf("ok %v, %v", ok, err)
	}
	if want := (identity.Server{System: system, Database: oid, Roles: role + "\x00" + role}); id != want {
		t.Errorf("%+v, want %+v", id, want)
	}
	if s := c.PgConn().TxStatus(); s != 'I' {
		t.Errorf("the session is in state %c", s)
	}
	var left int
	if err := c.QueryRow(ctx, `SELECT count(*) FROM pg_prepared_statements WHERE statement NOT ILIKE '%pg_prepared_statements%'`, pgx.QueryExecModeSimpleProtocol).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("%d prepared statements left", left)
	}
}

// pgError is a server's error of another driver: it has a SQLSTATE.
type pgError string

func (e pgError) Error() string    { return "server says no" }
func (e pgError) SQLState() string { return string(e) }

// session is a verdict.Session whose answer to each query is set.
type session struct {
	answers map[string]answer
	asked   []string
}

type answer struct {
	rows [][]*string
	err  error
}

func (s *session) Exec(context.Context, string) error { return errors.New("no exec") }
func (s *session) Query(_ context.Context, q string, _ ...string) ([][]*string, error) {
	s.asked = append(s.asked, q)
	a := s.answers[q]
	return a.rows, a.err
}
func (s *session) ParamTypes(context.Context, string) ([]uint32, []string, error) {
	return nil, nil, errors.New("no param types")
}
func (s *session) Clean() bool { return true }

func row(vals ...string) [][]*string {
	r := make([]*string, len(vals))
	for i := range vals {
		if vals[i] != "NULL" {
			r[i] = &vals[i]
		}
	}
	return [][]*string{r}
}

// TestOfSessionWithoutTheSystemIdentifier: over another driver, a role
// that may not call pg_control_system() still tells the database and
// roles (System ""); a server that refuses both tells nothing; any other
// error, or an answer of another shape, is an error.
func TestOfSessionWithoutTheSystemIdentifier(t *testing.T) {
	ctx := context.Background()
	denied := answer{err: pgError("42501")}
	for _, tc := range []struct {
		name    string
		answers map[string]answer
		want    identity.Server
		ok      bool
		err     bool
	}{
		{"told", map[string]answer{identity.Query: {rows: row("7001", "16384", "app", "app")}},
			identity.Server{System: "7001", Database: "16384", Roles: "app\x00app"}, true, false},
		{"no system identifier", map[string]answer{identity.Query: denied, identity.QueryNoSystem: {rows: row("", "16384", "app", "reader")}},
			identity.Server{Database: "16384", Roles: "app\x00reader"}, true, false},
		{"a NULL", map[string]answer{identity.Query: {rows: row("NULL", "16384", "app", "app")}},
			identity.Server{Database: "16384", Roles: "app\x00app"}, true, false},
		{"refused", map[string]answer{identity.Query: denied, identity.QueryNoSystem: denied}, identity.Server{}, false, false},
		{"broken", map[string]answer{identity.Query: {err: errors.New("connection reset")}}, identity.Server{}, false, true},
		{"another shape", map[string]answer{identity.Query: {rows: row("7001", "16384")}}, identity.Server{}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &session{answers: tc.answers}
			id, ok, err := identity.OfSession(ctx, s)
			if id != tc.want || ok != tc.ok || (err != nil) != tc.err {
				t.Errorf("%+v, ok %v, err %v; want %+v, ok %v, err %v", id, ok, err, tc.want, tc.ok, tc.err)
			}
			if tc.name == "broken" && len(s.asked) != 1 {
				t.Errorf("asked %d questions after an error that is not the server's, want 1", len(s.asked))
			}
		})
	}
}

// identifier is a connection that tells its own Server.
type identifier struct {
	driver.Conn
	id identity.Server
}

func (c identifier) ServerIdentity(context.Context) (identity.Server, bool, error) {
	return c.id, true, nil
}

// silentConn is a connection of another driver that must not be asked.
type silentConn struct{ driver.Conn }

// TestOfAsksTheIdentifierOrNobody: an Identifier tells its own Server; a
// connection of a server that is not PostgreSQL is not asked and tells
// nothing.
func TestOfAsksTheIdentifierOrNobody(t *testing.T) {
	ctx := context.Background()
	want := identity.Server{System: "7001", Database: "1", Roles: "a\x00a"}
	if id, ok, err := identity.Of(ctx, identifier{id: want}, false); id != want || !ok || err != nil {
		t.Errorf("an Identifier: %+v, %v, %v", id, ok, err)
	}
	// silentConn's nil Conn panics if it is used.
	if id, ok, err := identity.Of(ctx, silentConn{}, false); id != (identity.Server{}) || ok || err != nil {
		t.Errorf("not PostgreSQL: %+v, %v, %v", id, ok, err)
	}
}

// TestFleetNameOfPgxDSNs: a pgx DSN's Name is what it reaches, in the
// environment pgx reads, however it is spelt; another driver's is its
// text.
func TestFleetNameOfPgxDSNs(t *testing.T) {
	pgxDriver := stdlib.GetDefaultDriver()
	name := func(d driver.Driver, dsn string) string { return identity.Resolve(d, dsn).Name }
	same := []string{
		"postgres://app@db.example:5432/orders?sslmode=disable",
		"host=db.example port=5432 user=app dbname=orders sslmode=require password=x",
		"postgres://app:pw@db.example/orders", // sslmode=prefer: pgx lists the server twice
	}
	for _, dsn := range same[1:] {
		if a, b := name(pgxDriver, same[0]), name(pgxDriver, dsn); a != b {
			t.Errorf("the same database, user and settings are named apart:\n%q\n%q", a, b)
		}
	}
	for _, other := range []string{
		"postgres://app@db.example:5432/payments",
		"postgres://admin@db.example:5432/orders",
		"postgres://app@db2.example:5432/orders",
		"postgres://app@db.example:5433/orders",
		"postgres://app@db.example:5432/orders?search_path=tenant1",
	} {
		if name(pgxDriver, other) == name(pgxDriver, same[0]) {
			t.Errorf("%s shares a name with %s", other, same[0])
		}
	}
	// The environment pgx reads is part of the name.
	t.Setenv("PGHOST", "h1")
	a := name(pgxDriver, "dbname=orders user=app")
	t.Setenv("PGHOST", "h2")
	if b := name(pgxDriver, "dbname=orders user=app"); a == b {
		t.Error("one DSN text in two environments got one name")
	}
	if n := name(otherDriver{}, "x"); n != "dsn\x00x" {
		t.Errorf("%q", n)
	}
}
