// Package sqlflight is a database/sql driver that wraps a real driver (pgx v5
// first; any driver works) and stops thundering herds where they start: when
// many callers run the same read at the same moment, the database sees one
// query.
//
// sqlflight scans every statement, proves which ones are read-only,
// fingerprints them with their arguments, and runs one origin query for all
// identical in-flight callers of the same database scope; each caller gets
// its own cursor over a deep copy of the result. Results can be cached under
// soft/hard TTL policies (stale-while-revalidate, early refresh, jitter, a
// negative cache), and the database is guarded by a semaphore and a circuit
// breaker. Writes, transactions, locking reads and connections that changed
// session state go straight to the database, untouched. On PostgreSQL the
// server has the last word: a statement that calls a VOLATILE function is
// never shared unless its own annotation vouches for it (pure=).
//
// # Opening a database
//
// Importing the package registers the driver "sqlflight", which wraps pgx v5's
// stdlib driver under the package's default Shield (see Default):
//
//	import (
//		"database/sql"
//		_ "github.com/sqlflight/sqlflight"
//	)
//
//	db, err := sql.Open("sqlflight", "postgres://app@localhost/app")
//
// Configuration can ride in the DSN (sqlflight.* parameters, removed before
// the DSN reaches pgx). OpenDB wraps a driver.Connector (for instance a
// configured pgx connector: stdlib.GetConnector) with Options of your own,
// Register and Wrap wrap any other driver, and New returns a Shield that
// several *sql.DB share. A Shield owns the flights, the result cache, the
// guard, the read-your-writes epochs and the counters (Shield.Stats);
// results are shared only within one scope (one DSN of a wrapped driver, or
// one wrapped connector), so two users or two databases never see each
// other's rows.
//
// # Policies
//
// By default a read that may be shared is coalesced and nothing is cached.
// A policy says more, from three places, highest first:
//
//   - an annotation in the statement, a comment beginning with "sqlflight:":
//     /* sqlflight: soft=30s hard=5m name=product_page */ SELECT …
//     (soft, hard, ttl, neg, jitter, beta, maxrows, maxbytes, wait, timeout,
//     tables, name, pure, coalesce, nocoalesce, nocache, off);
//   - a context policy: WithTTL, WithPolicy, WithoutSharing, which work
//     under any ORM;
//   - Options.Rules (by table read or normalized text), then
//     Options.Default.
//
// A malformed annotation never changes behaviour silently: the statement runs
// unshared and a warning is logged, or, with Options.Strict, it fails with an
// error wrapping ErrBadAnnotation. Shield.Explain and the command
// `go run github.com/sqlflight/sqlflight/cmd/sqlflight explain "<SQL>"` tell
// whether and why a statement is shared and cached.
//
// # Invalidation
//
// A write through a Shield invalidates the cached results of the tables it
// writes (row by row where the statement pins the rows), and the writer's
// later reads never see an older value. Changes made by other programs reach
// the cache through Shield.Invalidate, or through a change feed
// (Options.Feed, DSN sqlflight.feed=replication or sqlflight.feed=notify) that
// follows every committed change to the database.
//
// # The guard
//
// Options.MaxInflight bounds the origin queries of shared reads running at
// once (ErrOverloaded past Options.QueueTimeout); a circuit breaker refuses
// work with ErrCircuitOpen while the database is unavailable. Either way a
// read is answered from the cache within Options.MaxStale when it can be.
//
// # A fleet: the shared tier
//
// With a shared tier (Shared, or the DSN parameter
// sqlflight.shared=redis://host:6379/0 with package
// github.com/sqlflight/sqlflight/redistier imported), every instance of a
// fleet shares one origin query per miss and the invalidations of every
// write. Everything read from the tier is authenticated under
// Options.SharedSecret. When the tier is unreachable, each instance runs on
// its in-process cache alone, without an error to any caller.
//
// # Metrics
//
// Package github.com/sqlflight/sqlflight/prom exports Shield.Stats as
// Prometheus metrics.
//
// # More
//
// The README (https://github.com/sqlflight/sqlflight#readme) and its guides in docs/ document the
// semantics in full: what is shared, freshness, invalidation and
// read-your-writes, the change feed, what happens when the database is sick,
// the shared tier, the guarantees and their known limits, security, every
// DSN parameter, and measurements.
package sqlflight
