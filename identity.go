package sqlflight

import (
	"context"
	"database/sql/driver"
	"errors"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlflight/sqlflight/internal/guard"
	"github.com/sqlflight/sqlflight/internal/identity"
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

// errOtherRole refuses a real connection that logged in as another role
// than its scope's first.
var errOtherRole = errors.New("sqlflight: a new connection of this scope logged in as another role than its first " +
	"(did the connector's environment change?); the scope's cached results belong to the first: open a new *sql.DB for the other")

// opener wraps open, which opens the scope's real connections, so that
// every real connection tells who it reaches before it is used.
func (sc *scope) opener(s *engine, open func(context.Context) (driver.Conn, error)) func(context.Context) (driver.Conn, error) {
	return func(ctx context.Context) (driver.Conn, error) {
		rc, err := open(ctx)
		if err != nil {
			if !errors.Is(ctx.Err(), context.Canceled) {
				// Not the caller's giving up: a refused port, or a server
				// that accepted and never answered within connect_timeout
				// or the caller's deadline, is the database's failure.
				err = &guard.ConnectFailure{Err: err}
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
func (sc *scope) identify(ctx context.Context, s *engine, rc driver.Conn) error {
	_, postgres := rc.(*stdlib.Conn)
	if _, double := rc.(identity.Identifier); !postgres && !double {
		postgres = sc.detect(ctx, rc) > 0
	}
	id, ok, err := identity.Of(ctx, rc, postgres)
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
				s.warned.Warn(s.log, "identity", "", "sqlflight: the server does not tell which database it is; "+
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
		case id.System == "":
			s.warned.Warn(s.log, "identity", "", "sqlflight: this role may not call pg_control_system(), which tells the server's "+
				"system identifier; a scope's results stay out of the shared tier")
		default:
			sc.shared = sc.fleetBase + "\x00server\x00" + id.System + "\x00" + id.Database + "\x00" + id.Roles
			sc.named.Store(true)
		}
		return nil
	}
	first := sc.server
	if id.Roles != first.Roles {
		return errOtherRole
	}
	if (id.System != first.System || id.Database != first.Database) && !sc.mixed.Swap(true) && sc.fleetBase != "" {
		s.warned.Warn(s.log, "identity-mixed", "", "sqlflight: a connection of a scope reached another server or database than "+
			"its first (a failover to another cluster, or a database made anew); the scope leaves the shared tier",
			"system_identifier", first.System+" → "+id.System)
	}
	return nil
}

// sharing reports whether the scope's reads may use the shared tier: it
// has a fleet-wide name (shared, set once before named), and every real
// connection so far reached the server it names.
func (sc *scope) sharing() bool {
	return sc.named.Load() && !sc.mixed.Load() && sc.shared != ""
}
