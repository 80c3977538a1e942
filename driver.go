package sqlflight

//go:generate go run ./internal/mirrorgen

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlflight/sqlflight/internal/dsnparam"
	"github.com/sqlflight/sqlflight/internal/identity"
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
// exactly when d does. Connections opened with DSNs that reach the same
// database as the same user share one scope: their identical queries
// coalesce; others never share. For pgx the DSN is resolved with the
// environment applied (PGUSER, PGHOST, a service file, …) when it is
// opened, and every connection of the scope reaches what it resolved then;
// for other drivers the scope is the DSN text.
func (s *Shield) Wrap(d driver.Driver) driver.Driver {
	w := newWrappedDriver(s.engine, d)
	if dc, ok := d.(driver.DriverContext); ok {
		return &wrappedDriverContext{wrappedDriver: w, parentCtx: dc}
	}
	return w
}

func newWrappedDriver(s *engine, d driver.Driver) *wrappedDriver {
	return &wrappedDriver{s: s, parent: d, scopes: make(map[dsnKey]*dsnScope), sweepAt: minScopeSweep}
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
// of the same name reaching the same server: for PostgreSQL, the server's
// system identifier, the database's OID and the session's roles, learned on
// the first real connection, are part of the name. Two connectors that
// reach different databases or users must never be given the same name. In
// this process, each connector is still a scope of its own.
func (s *Shield) SharedConnector(c driver.Connector, name string) driver.Connector {
	sc := s.newScope()
	if name != "" {
		sc.fleetBase = "connector\x00" + name
		sc.setLabel(name, true)
	}
	return s.newConnector(c, s.connectorDriver(c), sc)
}

func (s *engine) connectorDriver(c driver.Connector) driver.Driver {
	var d driver.Driver = newWrappedDriver(s, c.Driver())
	if dc, ok := c.Driver().(driver.DriverContext); ok {
		d = &wrappedDriverContext{wrappedDriver: d.(*wrappedDriver), parentCtx: dc}
	}
	return d
}

// OpenDB opens a *sql.DB on c wrapped by s (see Connector).
func (s *Shield) OpenDB(c driver.Connector) *sql.DB { return sql.OpenDB(s.Connector(c)) }

func (s *engine) newConnector(c driver.Connector, d driver.Driver, sc *scope) driver.Connector {
	wc := &connector{s: s, drv: d, sc: sc, open: sc.opener(s, c.Connect)}
	if cl, ok := c.(io.Closer); ok {
		return &closingConnector{connector: wc, closer: cl}
	}
	return wc
}

// wrappedDriver wraps a driver.Driver. Without DriverContext, database/sql
// calls Open for every new connection.
type wrappedDriver struct {
	s      *engine
	parent driver.Driver

	mu     sync.Mutex
	scopes map[dsnKey]*dsnScope
	// sweepAt is the size of scopes at which the next scope made first
	// forgets the scopes nobody uses.
	sweepAt int
}

// minScopeSweep is the fewest scopes a driver keeps before it forgets the
// unused ones: below it, a DSN opened again finds its warm scope.
const minScopeSweep = 64

var _ driver.Driver = (*wrappedDriver)(nil)

func (d *wrappedDriver) shield() *Shield { return d.s.shield }

// dsnKey is a DSN as given and what it resolves to now.
type dsnKey struct{ dsn, resolved string }

// dsnScope is what a DSN opens: its scope, the Shield it belongs to (a
// Shield of its own when the DSN carries sqlflight.* parameters), and the
// DSN the parent driver sees, without those parameters.
type dsnScope struct {
	sc  *scope
	s   *engine
	dsn string
	drv driver.Driver // the driver its connectors report (ShieldOf finds s through it)

	// pgx's resolved configuration, or nil: then real connections are
	// the parent's for dsn.
	cfg *pgx.ConnConfig
	// open opens the scope's real connections for Driver.Open: pgx's
	// resolved configuration, or the parent's Open.
	open func(context.Context) (driver.Conn, error)
	// users counts the connectors holding the scope and the opens in
	// progress: a scope with no user and no open virtual connection may be
	// forgotten.
	users atomic.Int64
}

// release gives back a use taken by scopeFor.
func (e *dsnScope) release() { e.users.Add(-1) }

// idle reports whether nothing uses e.
func (e *dsnScope) idle() bool { return e.users.Load() == 0 && e.sc.live.Load() == 0 }

// scopeFor returns the scope of dsn as it resolves now, making it on first
// use, and takes a use of it (give it back with release).
// sqlflight.* parameters (see Options; e.g. sqlflight.max_bytes=128MiB,
// sqlflight.max_inflight=32, sqlflight.default=soft=30s,hard=5m) configure a
// Shield for that DSN alone; an unknown or malformed one is an error
// wrapping ErrBadDSN.
func (d *wrappedDriver) scopeFor(dsn string, self driver.Driver) (*dsnScope, error) {
	stripped, params, err := dsnparam.Split(dsn)
	if err != nil {
		return nil, err
	}
	res := identity.Resolve(d.parent, stripped)
	key := dsnKey{dsn, res.Name}
	d.mu.Lock()
	defer d.mu.Unlock()
	if e := d.scopes[key]; e != nil {
		switch {
		case e.s != d.s && e.s.store.Closed(): // a DSN's own Shield that was closed is made anew
		case e.sc.mixed.Load() && e.idle():
			// Its connections reached two servers; nothing uses it any
			// more: a new scope learns the server anew.
			d.forget(key, e)
		default:
			e.users.Add(1)
			return e, nil
		}
	}
	e := &dsnScope{s: d.s, dsn: stripped, drv: self, cfg: res.Config}
	if len(params) > 0 {
		o := d.s.opts
		tier := d.s.tierImpl
		if err := dsnparam.MayNotWeaken(dsnparam.Code{SharedSecret: o.SharedSecret != "",
			SharedEncrypt: o.SharedEncrypt, FeedDSN: o.FeedDSN != "", Tier: tier != nil}, params); err != nil {
			return nil, err
		}
		target, shared := params["shared"]
		delete(params, "shared")
		if err := applyDSN(&o, params); err != nil {
			return nil, err
		}
		var release func()
		if shared {
			if tier, release, err = tierOpeners.Open(target); err != nil {
				return nil, fmt.Errorf("%w: %sshared=%s: %s", ErrBadDSN, dsnPrefix, dsnparam.RedactURL(target), dsnparam.RedactIn(strings.TrimPrefix(err.Error(), errPrefix), target))
			}
		}
		opts := []Option{o}
		if tier != nil {
			opts = append(opts, Shared(tier))
		}
		e.s = New(opts...).engine
		e.s.tierRelease = release // Close gives the DSN's tier back
		if err := e.s.tierErr; err != nil {
			_ = e.s.shield.Close() // gives the tier back
			return nil, err        // ErrNoSharedSecret: never without the tier, never unauthenticated
		}
		own := newWrappedDriver(e.s, d.parent)
		e.drv = own
		if dc, ok := self.(*wrappedDriverContext); ok {
			e.drv = &wrappedDriverContext{wrappedDriver: own, parentCtx: dc.parentCtx}
		}
	}
	if res.Config != nil {
		e.sc = e.s.namedScope(res.Name, res.Config) // shared with its name's DSNs and pools
	} else {
		e.sc = e.s.newScope()
		e.sc.fleetBase = res.Name
	}
	open := func(context.Context) (driver.Conn, error) { return d.parent.Open(stripped) }
	if res.Config != nil {
		open = identity.Opener(stripped, res)
	}
	e.open = e.sc.opener(e.s, open)
	if len(d.scopes) >= d.sweepAt {
		d.sweep()
	}
	d.scopes[key] = e
	e.users.Add(1)
	return e, nil
}

// sweep forgets the scopes that nobody uses: no open virtual connection,
// no connector, no open in progress (d.mu held). A DSN opened again gets a
// new scope (a new number: the old one's cached results are never served
// again; they age out of the cache). A forgotten scope's own Shield is
// closed, which gives its shared tier back.
func (d *wrappedDriver) sweep() {
	for k, e := range d.scopes {
		if e.idle() {
			d.forget(k, e)
		}
	}
	d.sweepAt = max(minScopeSweep, 2*len(d.scopes))
}

// forget removes an unused scope (d.mu held) and closes its DSN's own
// Shield, which has no other scope.
func (d *wrappedDriver) forget(k dsnKey, e *dsnScope) {
	delete(d.scopes, k)
	if e.cfg != nil {
		e.s.dropNamed(e.sc)
	} else {
		e.s.scopes.Delete(e.sc.id)
	}
	if e.s != d.s {
		_ = e.s.shield.Close()
	}
}

// Open returns a virtual connection for dsn. The real one is opened by the
// parent driver only when work must reach the database.
func (d *wrappedDriver) Open(dsn string) (driver.Conn, error) {
	e, err := d.scopeFor(dsn, d)
	if err != nil {
		return nil, err
	}
	defer e.release()
	return e.sc.connect(context.Background(), e.s, e.open)
}

type wrappedDriverContext struct {
	*wrappedDriver
	parentCtx driver.DriverContext
}

var _ driver.DriverContext = (*wrappedDriverContext)(nil)

// OpenConnector returns a connector for dsn as it resolves now; connectors
// for the same DSN and resolution share one scope. The connector holds its
// scope until it is closed (DB.Close closes it).
func (d *wrappedDriverContext) OpenConnector(dsn string) (driver.Connector, error) {
	e, err := d.scopeFor(dsn, d)
	if err != nil {
		return nil, err
	}
	var pc driver.Connector = pinnedConnector{open: e.open, drv: d.parent}
	var closer io.Closer
	if e.cfg == nil {
		if pc, err = d.parentCtx.OpenConnector(e.dsn); err != nil {
			e.release()
			return nil, err
		}
		closer, _ = pc.(io.Closer)
	}
	wc := &connector{s: e.s, drv: e.drv, sc: e.sc, open: e.open}
	if e.cfg == nil {
		wc.open = e.sc.opener(e.s, pc.Connect)
	}
	return &scopeConnector{connector: wc, e: e, closer: closer}, nil
}

// pinnedConnector opens the real connections of a resolved pgx scope; its
// open already tells who each reaches.
type pinnedConnector struct {
	open func(context.Context) (driver.Conn, error)
	drv  driver.Driver
}

func (c pinnedConnector) Connect(ctx context.Context) (driver.Conn, error) { return c.open(ctx) }
func (c pinnedConnector) Driver() driver.Driver                            { return c.drv }

// scopeConnector is a connector opened for a DSN: it holds its scope until
// closed, and closes the parent's connector if that is an io.Closer.
type scopeConnector struct {
	*connector
	e      *dsnScope
	closer io.Closer
	once   sync.Once
}

var _ io.Closer = (*scopeConnector)(nil)

// Close gives the scope back and closes the parent connector; database/sql
// calls it from DB.Close.
func (c *scopeConnector) Close() error {
	var err error
	c.once.Do(func() {
		if c.closer != nil {
			err = c.closer.Close()
		}
		c.e.release()
	})
	return err
}

// connector wraps a driver.Connector; Connect returns virtual connections.
type connector struct {
	s    *engine
	drv  driver.Driver
	sc   *scope
	open func(context.Context) (driver.Conn, error) // the parent's Connect, telling who each connection reaches
}

var _ driver.Connector = (*connector)(nil)

func (c *connector) Connect(ctx context.Context) (driver.Conn, error) {
	return c.sc.connect(ctx, c.s, c.open)
}

func (c *connector) Driver() driver.Driver { return c.drv }

type closingConnector struct {
	*connector
	closer io.Closer
}

var _ io.Closer = (*closingConnector)(nil)

// Close closes the parent connector; database/sql calls it from DB.Close.
func (c *closingConnector) Close() error { return c.closer.Close() }
