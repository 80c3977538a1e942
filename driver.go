package sqlflight

//go:generate go run ./internal/mirrorgen

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// DriverName is the name under which importing this package registers the
// default Shield wrapping pgx v5's database/sql driver.
const DriverName = "sqlflight"

var defaultShield = New()

func init() {
	defaultShield.Register(DriverName, stdlib.GetDefaultDriver())
}

// Default returns the Shield behind sql.Open("sqlflight", …). Every *sql.DB
// opened that way in the process shares it: its flights, its counters and its
// read-your-writes epochs.
func Default() *Shield { return defaultShield }

// Register makes d available to sql.Open under name, wrapped by a new Shield
// configured with opts, and returns that Shield. Like sql.Register it panics
// if name is already registered.
func Register(name string, d driver.Driver, opts ...Option) *Shield {
	s := New(opts...)
	s.Register(name, d)
	return s
}

// Wrap returns d wrapped by a new Shield configured with opts.
func Wrap(d driver.Driver, opts ...Option) driver.Driver { return New(opts...).Wrap(d) }

// OpenDB opens a *sql.DB on c wrapped by a new Shield configured with opts.
// Use ShieldOf to reach the Shield later.
func OpenDB(c driver.Connector, opts ...Option) *sql.DB { return New(opts...).OpenDB(c) }

// ShieldOf returns the Shield behind db, or nil if db was not opened through
// sqlflight.
func ShieldOf(db *sql.DB) *Shield {
	if w, ok := db.Driver().(interface{ shield() *Shield }); ok {
		return w.shield()
	}
	return nil
}

// Register makes d, wrapped by s, available to sql.Open under name. Like
// sql.Register it panics if name is already registered.
func (s *Shield) Register(name string, d driver.Driver) { sql.Register(name, s.Wrap(d)) }

// Wrap returns d wrapped by s. The result implements driver.DriverContext
// exactly when d does. Connections opened with the same DSN share one scope:
// their identical queries coalesce; different DSNs never share.
func (s *Shield) Wrap(d driver.Driver) driver.Driver {
	w := &wrappedDriver{s: s, parent: d, scopes: make(map[string]*dsnScope)}
	if dc, ok := d.(driver.DriverContext); ok {
		return &wrappedDriverContext{wrappedDriver: w, parentCtx: dc}
	}
	return w
}

// Connector returns c wrapped by s. The connector is a scope of its own: its
// queries never share results with another connector's. The result implements
// io.Closer exactly when c does. Its results stay out of the shared tier,
// which cannot tell which database and user a connector reaches; see
// SharedConnector.
func (s *Shield) Connector(c driver.Connector) driver.Connector {
	return s.newConnector(c, s.connectorDriver(c), s.newScope())
}

// SharedConnector is Connector for a connector whose results may be shared
// with other instances through the shared tier: name must identify the
// database and the user across the fleet (for example
// "orders-primary/app"). Instances share results only between connectors
// of the same name, so two connectors that reach different databases or
// users must never be given the same name. In this process, each connector
// is still a scope of its own.
func (s *Shield) SharedConnector(c driver.Connector, name string) driver.Connector {
	sc := s.newScope()
	if name != "" {
		sc.shared = "connector\x00" + name
	}
	return s.newConnector(c, s.connectorDriver(c), sc)
}

func (s *Shield) connectorDriver(c driver.Connector) driver.Driver {
	var d driver.Driver = &wrappedDriver{s: s, parent: c.Driver(), scopes: make(map[string]*dsnScope)}
	if dc, ok := c.Driver().(driver.DriverContext); ok {
		d = &wrappedDriverContext{wrappedDriver: d.(*wrappedDriver), parentCtx: dc}
	}
	return d
}

// OpenDB opens a *sql.DB on c wrapped by s (see Connector).
func (s *Shield) OpenDB(c driver.Connector) *sql.DB { return sql.OpenDB(s.Connector(c)) }

func (s *Shield) newConnector(c driver.Connector, d driver.Driver, sc *scope) driver.Connector {
	wc := &connector{s: s, parent: c, drv: d, sc: sc}
	if cl, ok := c.(io.Closer); ok {
		return &closingConnector{connector: wc, closer: cl}
	}
	return wc
}

// wrappedDriver wraps a driver.Driver. Without DriverContext, database/sql
// calls Open for every new connection; each DSN is a scope.
type wrappedDriver struct {
	s      *Shield
	parent driver.Driver

	mu     sync.Mutex
	scopes map[string]*dsnScope
}

var _ driver.Driver = (*wrappedDriver)(nil)

func (d *wrappedDriver) shield() *Shield { return d.s }

// dsnScope is what a DSN opens: its scope, the Shield it belongs to (a
// Shield of its own when the DSN carries sqlflight.* parameters), and the
// DSN the parent driver sees, without those parameters.
type dsnScope struct {
	sc  *scope
	s   *Shield
	dsn string
	drv driver.Driver // the driver its connectors report (ShieldOf finds s through it)
}

// scopeFor returns the scope of dsn, making it on first use.
// sqlflight.* parameters (see Options; e.g. sqlflight.max_bytes=128MiB,
// sqlflight.max_inflight=32, sqlflight.default=soft=30s,hard=5m) configure a
// Shield for that DSN alone; an unknown or malformed one is an error
// wrapping ErrBadDSN.
func (d *wrappedDriver) scopeFor(dsn string, self driver.Driver) (*dsnScope, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e := d.scopes[dsn]; e != nil && (e.s == d.s || !e.s.isClosed()) {
		return e, nil // a DSN's own Shield that was closed is made anew
	}
	stripped, params, err := splitDSN(dsn)
	if err != nil {
		return nil, err
	}
	e := &dsnScope{s: d.s, dsn: stripped, drv: self}
	if len(params) > 0 {
		o := d.s.opts
		tier := d.s.tierImpl
		target, shared := params["shared"]
		delete(params, "shared")
		if err := applyDSN(&o, params); err != nil {
			return nil, err
		}
		var release func()
		if shared {
			if tier, release, err = openTier(target); err != nil {
				return nil, fmt.Errorf("%w: %sshared=%s: %v", ErrBadDSN, dsnPrefix, redactURL(target), err)
			}
		}
		opts := []Option{o}
		if tier != nil {
			opts = append(opts, Shared(tier))
		}
		e.s = New(opts...)
		e.s.tierRelease = release // Close gives the DSN's tier back
		if err := e.s.tierErr; err != nil {
			_ = e.s.Close() // gives the tier back
			return nil, err // ErrNoSharedSecret: never without the tier, never unauthenticated
		}
		own := &wrappedDriver{s: e.s, parent: d.parent, scopes: make(map[string]*dsnScope)}
		e.drv = own
		if dc, ok := self.(*wrappedDriverContext); ok {
			e.drv = &wrappedDriverContext{wrappedDriver: own, parentCtx: dc.parentCtx}
		}
	}
	e.sc = e.s.newScope()
	e.sc.shared = fleetName(d.parent, stripped)
	d.scopes[dsn] = e
	return e, nil
}

// Open returns a virtual connection for dsn. The real one is opened by the
// parent driver only when work must reach the database.
func (d *wrappedDriver) Open(dsn string) (driver.Conn, error) {
	e, err := d.scopeFor(dsn, d)
	if err != nil {
		return nil, err
	}
	open := func(context.Context) (driver.Conn, error) { return d.parent.Open(e.dsn) }
	return e.sc.connect(context.Background(), e.s, open)
}

type wrappedDriverContext struct {
	*wrappedDriver
	parentCtx driver.DriverContext
}

var _ driver.DriverContext = (*wrappedDriverContext)(nil)

// OpenConnector opens the parent's connector for dsn and wraps it; connectors
// for the same DSN share one scope.
func (d *wrappedDriverContext) OpenConnector(dsn string) (driver.Connector, error) {
	e, err := d.scopeFor(dsn, d)
	if err != nil {
		return nil, err
	}
	pc, err := d.parentCtx.OpenConnector(e.dsn)
	if err != nil {
		return nil, err
	}
	return e.s.newConnector(pc, e.drv, e.sc), nil
}

// connector wraps a driver.Connector; Connect returns virtual connections.
type connector struct {
	s      *Shield
	parent driver.Connector
	drv    driver.Driver
	sc     *scope
}

var _ driver.Connector = (*connector)(nil)

func (c *connector) Connect(ctx context.Context) (driver.Conn, error) {
	return c.sc.connect(ctx, c.s, c.parent.Connect)
}

func (c *connector) Driver() driver.Driver { return c.drv }

type closingConnector struct {
	*connector
	closer io.Closer
}

var _ io.Closer = (*closingConnector)(nil)

// Close closes the parent connector; database/sql calls it from DB.Close.
func (c *closingConnector) Close() error { return c.closer.Close() }

// fleetName names a DSN's scope across the fleet, for the shared tier. For
// pgx it is what the DSN resolves to — servers, database, user, session
// parameters — with the environment pgx reads (PGHOST, PGDATABASE, …)
// applied: two instances share results only if they reach the same
// database as the same user with the same settings, whatever the DSN's
// spelling, and never because two DSNs read alike in different
// environments. For other drivers it is the DSN text.
func fleetName(parent driver.Driver, dsn string) string {
	if _, ok := parent.(*stdlib.Driver); ok {
		if cfg, err := pgx.ParseConfig(dsn); err == nil {
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
	}
	return "dsn\x00" + dsn
}
