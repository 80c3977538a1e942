package sqlflight

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

	pgverdict "github.com/sqlflight/sqlflight/internal/verdict"
)

// Who a scope's connections are. A scope shares results between
// connections that reach the same rows: the same database, as the same
// role. Two things name that.
//
// In the process, a DSN is resolved the way the parent resolves it: for
// pgx, the environment (PGUSER, PGHOST, PGDATABASE, PGOPTIONS, PGSERVICE
// and the service file, …) is applied to the text, and the scope is chosen
// by what it resolves to, never by the text alone. The scope's real
// connections reach exactly what it resolved: each one resolves the DSN
// again (so that a rotated password or .pgpass entry applies), and if the
// environment now names another server, database, user or setting, the
// scope keeps reaching its own with the configuration it resolved first. A
// new sql.Open (or Driver.Open) with the same text resolves anew and gets
// the scope of what the environment names now.
//
// Across the fleet, the scope's name (the shared tier's namespace of its
// results) is the resolved DSN plus what the server says of itself on
// every new real connection: its system identifier
// (pg_control_system()), the database's OID and the session's roles. Two
// environments whose servers are both "db:5432" on their own networks
// never share a name. Until the first real connection told it, a scope
// stays off the shared tier; if the role may not call pg_control_system(),
// it stays off for good (one warning). If a later connection reaches
// another server or database (a failover to another cluster, a database
// dropped and made anew), the scope leaves the shared tier (one warning):
// what it caches from then on may come from either. A connection that logs
// in as another role than the scope's first is refused: the scope's cached
// rows are the first role's.

// resolution is what a DSN resolves to for the parent driver.
type resolution struct {
	// name identifies what the DSN reaches, without its password: for pgx
	// the servers, database, user and session parameters, the environment
	// applied; for other drivers the DSN text.
	name string
	// cfg is pgx's resolved configuration; nil for other drivers and for
	// DSNs pgx cannot parse (such as the names of registered configs).
	cfg *pgx.ConnConfig
}

// resolveDSN resolves dsn (without sqlflight.* parameters) as the parent
// would, now.
func resolveDSN(parent driver.Driver, dsn string) resolution {
	if _, ok := parent.(*stdlib.Driver); ok {
		if cfg, err := pgx.ParseConfig(dsn); err == nil {
			return resolution{name: pgxName(cfg), cfg: cfg}
		}
	}
	return resolution{name: "dsn\x00" + dsn}
}

// fleetName is the name of what dsn resolves to (see resolution.name).
func fleetName(parent driver.Driver, dsn string) string { return resolveDSN(parent, dsn).name }

// pgxName names a pgx configuration: two configurations of one name reach
// the same database as the same user with the same settings, whatever the
// DSN's spelling. The password is not part of it.
func pgxName(cfg *pgx.ConnConfig) string {
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

// pgxOpener opens the real connections of a scope that resolved dsn to r.
// Each resolves dsn again and uses that configuration when it still names
// what r names (a changed password applies); otherwise it uses r's.
func pgxOpener(dsn string, r resolution) func(context.Context) (driver.Conn, error) {
	return func(ctx context.Context) (driver.Conn, error) {
		cfg := r.cfg
		if now, err := pgx.ParseConfig(dsn); err == nil && pgxName(now) == r.name {
			cfg = now
		}
		return stdlib.GetConnector(*cfg).Connect(ctx)
	}
}

// serverID is what a real connection's server says of itself.
type serverID struct {
	system   string // pg_control_system().system_identifier; "" if the role may not read it
	database string // the database's OID
	roles    string // session_user and current_user
}

// serverIdentifier is a connection that can tell its serverID (pgx's, and
// test doubles). ok is false when the server tells nothing.
type serverIdentifier interface {
	serverIdentity(ctx context.Context) (id serverID, ok bool, err error)
}

// identifyTimeout bounds the identity query of a new real connection.
const identifyTimeout = 5 * time.Second

// The identity queries run with the simple protocol on the connection's
// PgConn: no prepared statement, no transaction, no setting is left behind.
const (
	identityQuery = `SELECT s.system_identifier::text, d.oid::text, session_user::text, current_user::text ` +
		`FROM pg_catalog.pg_control_system() s, pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database()`
	identityQueryNoSystem = `SELECT '', d.oid::text, session_user::text, current_user::text ` +
		`FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database()`
)

// pgxIdentity asks a pgx connection's server who it is. A server that
// refuses pg_control_system() (EXECUTE revoked, or not PostgreSQL itself)
// still tells the database and roles; one that refuses both tells nothing
// (ok false). Any other error means the connection is unusable.
func pgxIdentity(ctx context.Context, pc *pgconn.PgConn) (serverID, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, identifyTimeout)
	defer cancel()
	row, err := queryRow(ctx, pc, identityQuery)
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		row, err = queryRow(ctx, pc, identityQueryNoSystem)
		if errors.As(err, &pe) {
			return serverID{}, false, nil
		}
	}
	if err != nil {
		return serverID{}, false, err
	}
	if pc.TxStatus() != 'I' {
		return serverID{}, false, errors.New("sqlflight: the identity query left the session in a transaction")
	}
	return serverID{system: row[0], database: row[1], roles: row[2] + "\x00" + row[3]}, true, nil
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

// serverIdentity returns what rc's server says of itself; ok is false for
// connections that cannot tell (not PostgreSQL, or a server that refuses).
func serverIdentity(ctx context.Context, rc driver.Conn, postgres bool) (id serverID, ok bool, err error) {
	switch c := rc.(type) {
	case *stdlib.Conn:
		return pgxIdentity(ctx, c.Conn().PgConn())
	case serverIdentifier:
		return c.serverIdentity(ctx)
	}
	if postgres {
		return driverIdentity(ctx, pgverdict.OfDriver(rc))
	}
	return serverID{}, false, nil
}

// driverIdentity is pgxIdentity through another PostgreSQL driver.
func driverIdentity(ctx context.Context, c pgverdict.Session) (serverID, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, identifyTimeout)
	defer cancel()
	row, err := identityRow(ctx, c, identityQuery)
	if err != nil && pgverdict.SQLState(err) != "" {
		row, err = identityRow(ctx, c, identityQueryNoSystem)
		if err != nil && pgverdict.SQLState(err) != "" {
			return serverID{}, false, nil
		}
	}
	if err != nil {
		return serverID{}, false, err
	}
	return serverID{system: row[0], database: row[1], roles: row[2] + "\x00" + row[3]}, true, nil
}

func identityRow(ctx context.Context, c pgverdict.Session, q string) ([]string, error) {
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

// errOtherRole refuses a real connection that logged in as another role
// than its scope's first.
var errOtherRole = errors.New("sqlflight: a new connection of this scope logged in as another role than its first " +
	"(did the connector's environment change?); the scope's cached results belong to the first: open a new *sql.DB for the other")

// opener wraps open, which opens the scope's real connections, so that
// every real connection tells who it reaches before it is used.
func (sc *scope) opener(s *Shield, open func(context.Context) (driver.Conn, error)) func(context.Context) (driver.Conn, error) {
	return func(ctx context.Context) (driver.Conn, error) {
		rc, err := open(ctx)
		if err != nil {
			if !errors.Is(ctx.Err(), context.Canceled) {
				// Not the caller's giving up: a refused port, or a server
				// that accepted and never answered within connect_timeout
				// or the caller's deadline, is the database's failure.
				err = &connectFailure{err: err}
			}
			return nil, err
		}
		if err := sc.identify(ctx, s, rc); err != nil {
			_ = rc.Close()
			return nil, err
		}
		return rc, nil
	}
}

// identify learns who rc reaches. The first real connection names the
// scope across the fleet; a later one that reaches another server or
// database takes the scope off the shared tier, and one that logged in as
// another role is refused.
func (sc *scope) identify(ctx context.Context, s *Shield, rc driver.Conn) error {
	postgres := isPgx(rc)
	if _, double := rc.(serverIdentifier); !postgres && !double {
		postgres = sc.detect(ctx, rc) > 0
	}
	id, ok, err := serverIdentity(ctx, rc, postgres)
	if err != nil {
		return err
	}
	sc.idMu.Lock()
	defer sc.idMu.Unlock()
	if !ok {
		if sc.server == nil && !sc.named.Load() {
			switch {
			case sc.fleetBase == "":
			case postgres:
				s.warnEvery("identity", "", "sqlflight: the server does not tell which database it is; "+
					"a scope's results stay out of the shared tier")
			default:
				// Not PostgreSQL: the resolved DSN (or the connector's name) alone.
				sc.shared = sc.fleetBase
				sc.named.Store(true)
			}
		}
		return nil
	}
	if sc.server == nil {
		sc.server = &id
		switch {
		case sc.fleetBase == "":
		case id.system == "":
			s.warnEvery("identity", "", "sqlflight: this role may not call pg_control_system(), which tells the server's "+
				"system identifier; a scope's results stay out of the shared tier")
		default:
			sc.shared = sc.fleetBase + "\x00server\x00" + id.system + "\x00" + id.database + "\x00" + id.roles
			sc.named.Store(true)
		}
		return nil
	}
	first := sc.server
	if id.roles != first.roles {
		return errOtherRole
	}
	if (id.system != first.system || id.database != first.database) && !sc.mixed.Swap(true) && sc.fleetBase != "" {
		s.warnEvery("identity-mixed", "", "sqlflight: a connection of a scope reached another server or database than "+
			"its first (a failover to another cluster, or a database made anew); the scope leaves the shared tier",
			"system_identifier", first.system+" → "+id.system)
	}
	return nil
}

// isPgx reports whether rc is a pgx connection.
func isPgx(rc driver.Conn) bool {
	_, ok := rc.(*stdlib.Conn)
	return ok
}

// sharing reports whether the scope's reads may use the shared tier: it
// has a fleet-wide name (shared, set once before named), and every real
// connection so far reached the server it names.
func (sc *scope) sharing() bool {
	return sc.named.Load() && !sc.mixed.Load() && sc.shared != ""
}
