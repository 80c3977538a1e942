// Package identity tells what a scope's connections reach: what a DSN
// resolves to in the process, and what a server says of itself. A scope
// shares results between connections that reach the same rows — the same
// database, as the same role — and these are the two things that name it.
//
// # What a DSN resolves to
//
// Resolve resolves a DSN the way the parent driver would, now. For pgx v5's
// stdlib driver the environment (PGUSER, PGHOST, PGDATABASE, PGOPTIONS,
// PGSERVICE and the service file, …) is applied to the text, and the
// Resolution's Name is what that reaches: the servers in order (each
// once), the database, the user and the session parameters, never the
// password, whatever the DSN's spelling. For any other parent driver, and
// for a text pgx cannot parse (the name of a registered config, say), the
// Name is the DSN text itself ("dsn\x00" and the text) and there is no
// Config. Opener opens connections that reach exactly what a Resolution
// names: each resolves the DSN again, so that a rotated password or
// .pgpass entry applies, and uses the Resolution's own Config when the
// environment now names another server, database, user or setting.
//
// # What a server says of itself
//
// A Server is what a real connection's server tells on being asked (Of,
// OfPgx, OfSession): its system identifier (pg_control_system()), the OID
// of the connection's database and the session's roles (session_user and
// current_user). The question runs once per connection with the simple
// protocol (over pgx) or as one query (over another driver), within
// Timeout; it leaves no prepared statement, transaction or setting behind.
// A role that may not call pg_control_system() (EXECUTE revoked, or a
// server that is not PostgreSQL itself) gets a Server whose System is "",
// the database and roles still told; a server that refuses both questions
// tells nothing (ok false, no error). Any other error (the connection
// broke, the answer had another shape, the session was left in a
// transaction) means the connection is unusable.
//
// What the package does not decide: whether a connection whose Server
// differs from its scope's first is refused or taken off the shared tier,
// and what warns. Its functions keep no state and are safe for concurrent
// use on distinct connections; a connection is asked by one goroutine at a
// time, as database/sql uses it.
package identity

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlflight/sqlflight/internal/verdict"
)

// Resolution is what a DSN resolves to for the parent driver.
type Resolution struct {
	// Name identifies what the DSN reaches, without its password: for pgx
	// the servers, database, user and session parameters, the environment
	// applied; for other drivers the DSN text.
	Name string
	// Config is pgx's resolved configuration; nil for other drivers and
	// for DSNs pgx cannot parse (such as the names of registered configs).
	Config *pgx.ConnConfig
}

// Resolve resolves dsn (without sqlflight.* parameters) as parent would,
// now; parent is pgx when it is pgx v5's *stdlib.Driver.
func Resolve(parent driver.Driver, dsn string) Resolution {
	if _, ok := parent.(*stdlib.Driver); ok {
		if cfg, err := pgx.ParseConfig(dsn); err == nil {
			return Resolution{Name: Name(cfg), Config: cfg}
		}
	}
	return Resolution{Name: "dsn\x00" + dsn}
}

// Name names a pgx configuration: two configurations of one name reach
// the same database as the same user with the same settings, whatever the
// DSN's spelling. The password is not part of it.
func Name(cfg *pgx.ConnConfig) string {
	// Servers in order, each once (sslmode=prefer lists one twice).
	servers := []string{fmt.Sprintf("%s\x00%d", cfg.Host, cfg.Port)}
	for _, fb := range cfg.Fallbacks {
		if hp := fmt.Sprintf("%s\x00%d", fb.Host, fb.Port); !slices.Contains(servers, hp) {
			servers = append(servers, hp)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "pgx\x00%s\x01%s\x00%s", strings.Join(servers, "\x00"), cfg.Database, cfg.User)
	for _, k := range slices.Sorted(maps.Keys(cfg.RuntimeParams)) {
		fmt.Fprintf(&b, "\x00%s=%s", k, cfg.RuntimeParams[k])
	}
	return b.String()
}

// Opener opens the real connections of a scope that resolved dsn to r (a
// pgx Resolution: r.Config is not nil). Each resolves dsn again and uses
// that configuration when it still names what r names (a changed password
// applies); otherwise it uses r's.
func Opener(dsn string, r Resolution) func(context.Context) (driver.Conn, error) {
	return func(ctx context.Context) (driver.Conn, error) {
		cfg := r.Config
		if now, err := pgx.ParseConfig(dsn); err == nil && Name(now) == r.Name {
			cfg = now
		}
		return stdlib.GetConnector(*cfg).Connect(ctx)
	}
}

// Server is what a real connection's server says of itself.
type Server struct {
	// System is pg_control_system().system_identifier; "" if the role may
	// not read it.
	System string
	// Database is the OID of the connection's database.
	Database string
	// Roles is session_user and current_user, joined by a NUL.
	Roles string
}

// Identifier is a connection that can tell its Server itself (test
// doubles); Of asks it instead of its server. ok is false when it tells
// nothing.
type Identifier interface {
	ServerIdentity(ctx context.Context) (id Server, ok bool, err error)
}

// Timeout bounds the identity question of a new real connection.
const Timeout = 5 * time.Second

// The identity queries run with the simple protocol on the connection's
// PgConn: no prepared statement, no transaction, no setting is left behind.
const (
	// Query asks for the system identifier, the database's OID and the
	// session's roles.
	Query = `SELECT s.system_identifier::text, d.oid::text, session_user::text, current_user::text ` +
		`FROM pg_catalog.pg_control_system() s, pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database()`
	// QueryNoSystem is Query for a role that may not call
	// pg_control_system(): its system identifier is "".
	QueryNoSystem = `SELECT '', d.oid::text, session_user::text, current_user::text ` +
		`FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database()`
)

// Of returns what rc's server says of itself: over pgx for a pgx v5
// connection, from rc itself for an Identifier, over OfSession for another
// driver's connection when postgres says its server is PostgreSQL; ok is
// false for connections that cannot tell (not PostgreSQL, or a server that
// refuses).
func Of(ctx context.Context, rc driver.Conn, postgres bool) (id Server, ok bool, err error) {
	switch c := rc.(type) {
	case *stdlib.Conn:
		return OfPgx(ctx, c.Conn().PgConn())
	case Identifier:
		return c.ServerIdentity(ctx)
	}
	if postgres {
		return OfSession(ctx, verdict.OfDriver(rc))
	}
	return Server{}, false, nil
}

// OfPgx asks a pgx connection's server who it is. A server that refuses
// pg_control_system() (EXECUTE revoked, or not PostgreSQL itself) still
// tells the database and roles; one that refuses both tells nothing (ok
// false). Any other error means the connection is unusable, and so is one
// the question left in a transaction.
func OfPgx(ctx context.Context, pc *pgconn.PgConn) (Server, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	row, err := queryRow(ctx, pc, Query)
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		row, err = queryRow(ctx, pc, QueryNoSystem)
		if errors.As(err, &pe) {
			return Server{}, false, nil
		}
	}
	if err != nil {
		return Server{}, false, err
	}
	if pc.TxStatus() != 'I' {
		return Server{}, false, errors.New("sqlflight: the identity query left the session in a transaction")
	}
	return Server{System: row[0], Database: row[1], Roles: row[2] + "\x00" + row[3]}, true, nil
}

// queryRow runs q (one row of four text columns) with the simple protocol.
func queryRow(ctx context.Context, pc *pgconn.PgConn, q string) ([]string, error) {
	res, err := pc.Exec(ctx, q).ReadAll()
	if err != nil {
		return nil, err
	}
	if len(res) != 1 || len(res[0].Rows) != 1 || len(res[0].Rows[0]) != 4 {
		return nil, errors.New("sqlflight: unexpected answer to the identity query")
	}
	out := make([]string, 4)
	for i, v := range res[0].Rows[0] {
		out[i] = string(v)
	}
	return out, nil
}

// OfSession is OfPgx through another PostgreSQL driver's session: a server
// error (one with a SQLSTATE) to Query falls back to QueryNoSystem, and
// one to both tells nothing (ok false); a NULL counts as "".
func OfSession(ctx context.Context, c verdict.Session) (Server, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	row, err := sessionRow(ctx, c, Query)
	if err != nil && verdict.SQLState(err) != "" {
		row, err = sessionRow(ctx, c, QueryNoSystem)
		if err != nil && verdict.SQLState(err) != "" {
			return Server{}, false, nil
		}
	}
	if err != nil {
		return Server{}, false, err
	}
	return Server{System: row[0], Database: row[1], Roles: row[2] + "\x00" + row[3]}, true, nil
}

// sessionRow runs q (one row of four text columns) on c.
func sessionRow(ctx context.Context, c verdict.Session, q string) ([]string, error) {
	rows, err := c.Query(ctx, q)
	if err != nil {
		return nil, err
	}
	if len(rows) != 1 || len(rows[0]) != 4 {
		return nil, errors.New("sqlflight: unexpected answer to the identity query")
	}
	out := make([]string, 4)
	for i, v := range rows[0] {
		if v != nil {
			out[i] = *v
		}
	}
	return out, nil
}
