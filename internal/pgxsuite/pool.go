package pgxsuite

// pgx's pgxpool tests (the external ones, package pgxpool_test), run
// through the pgx face: .ci/pgxpool-suite copies them as .ci/pgx-stdlib
// copies the stdlib tests and rewrites their pool constructors to call
// NewPool and NewPoolWithConfig, whose pools answer the query API through
// a pgxflight.DB, in the same modes (EnvMode).
//
// Each pool goes through a Shield of its own, made for the mode, where the
// stdlib suite has one Shield for all its databases. pgx's pool tests run
// in parallel, all on one database as one user, and each counts its own
// pool's connections (Stat) after its reads. Pools of one configuration
// under one Shield share a scope: a test's read would join another test's
// flight or hit its cached result (and borrow no connection of its pool),
// and one pool's verdict probes may borrow another pool's connections;
// either changes counts the tests were not written to see, depending on
// which tests happen to run at once. A Shield per pool gives each test
// what it assumes: its reads are its pool's alone.

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlflight/sqlflight"
	"github.com/sqlflight/sqlflight/pgxflight"
)

// Pool is a *pgxpool.Pool whose query methods (Exec, Query, QueryRow,
// SendBatch, CopyFrom, Begin, BeginTx, Ping) and Close are those of the
// pgx face over it; every other method (Acquire, Stat, Config, Reset …)
// is the pool's own, so that a test written against *pgxpool.Pool
// compiles unchanged and reaches the database through sqlflight wherever
// an application using the face would.
type Pool struct {
	*pgxpool.Pool
	db     *pgxflight.DB
	shield *sqlflight.Shield
	once   sync.Once
}

// NewPool stands for pgxpool.New: the pool pgx makes, seen through a
// Shield of its own. As pgxpool.New, it returns no pool beside an error.
func NewPool(ctx context.Context, connString string) (*Pool, error) {
	p, err := pgxpool.New(ctx, connString)
	if err != nil {
		return nil, err
	}
	return wrapPool(p), nil
}

// NewPoolWithConfig stands for pgxpool.NewWithConfig; a config not made by
// ParseConfig panics as pgx's does, with pgx's value.
func NewPoolWithConfig(ctx context.Context, config *pgxpool.Config) (*Pool, error) {
	p, err := pgxpool.NewWithConfig(ctx, config)
	if err != nil {
		return nil, err
	}
	return wrapPool(p), nil
}

func wrapPool(p *pgxpool.Pool) *Pool {
	s := sqlflight.New(poolOptions())
	pools.mu.Lock()
	pools.open[s] = struct{}{}
	pools.mu.Unlock()
	return &Pool{Pool: p, db: pgxflight.New(s, p), shield: s}
}

// poolOptions are the Options of the mode, as Shield makes them.
func poolOptions() sqlflight.Options {
	var o sqlflight.Options
	switch m := os.Getenv(EnvMode); m {
	case "coalesce":
	case "ttl":
		o.Default = sqlflight.Policy{Soft: time.Minute}
	default:
		panic(fmt.Sprintf("pgxsuite: %s=%q: want coalesce or ttl", EnvMode, m))
	}
	return o
}

// Face returns the pgx face the pool's query methods go through.
func (p *Pool) Face() *pgxflight.DB { return p.db }

func (p *Pool) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return p.db.Exec(ctx, sql, args...)
}

func (p *Pool) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return p.db.Query(ctx, sql, args...)
}

func (p *Pool) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return p.db.QueryRow(ctx, sql, args...)
}

func (p *Pool) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	return p.db.SendBatch(ctx, b)
}

func (p *Pool) CopyFrom(ctx context.Context, tableName pgx.Identifier, columnNames []string, rowSrc pgx.CopyFromSource) (int64, error) {
	return p.db.CopyFrom(ctx, tableName, columnNames, rowSrc)
}

func (p *Pool) Begin(ctx context.Context) (pgx.Tx, error) { return p.db.Begin(ctx) }

func (p *Pool) BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error) {
	return p.db.BeginTx(ctx, opts)
}

func (p *Pool) Ping(ctx context.Context) error { return p.db.Ping(ctx) }

// Close closes the face, which closes the pool, then the pool's Shield
// (its counters are kept for PoolMain). Close may be called again, as the
// pool's may.
func (p *Pool) Close() {
	p.db.Close()
	p.once.Do(func() {
		pools.mu.Lock()
		delete(pools.open, p.shield)
		pools.closed = append(pools.closed, p.shield.Stats())
		pools.mu.Unlock()
		_ = p.shield.Close()
	})
}

// pools are the suite's Shields: those of open pools, and the counters of
// the closed ones'.
var pools = struct {
	mu     sync.Mutex
	open   map[*sqlflight.Shield]struct{}
	closed []sqlflight.Stats
}{open: make(map[*sqlflight.Shield]struct{})}

// PoolMain is Main for the pool suite: it runs the tests, then prints the
// counters of all its Shields together, and fails a whole run (no -run
// filter) in which sqlflight's sharing path was never taken, as Main does.
func PoolMain(m *testing.M) {
	mode := os.Getenv(EnvMode)
	poolOptions() // an unknown mode panics before any test runs
	code := m.Run()
	pools.mu.Lock()
	all := append([]sqlflight.Stats(nil), pools.closed...)
	for s := range pools.open {
		all = append(all, s.Stats())
	}
	pools.mu.Unlock()
	st := sqlflight.Stats{BypassReasons: make(map[string]uint64)}
	for _, o := range all {
		st.Queries += o.Queries
		st.Bypassed += o.Bypassed
		st.Flights += o.Flights
		st.Followers += o.Followers
		st.OriginExecutions += o.OriginExecutions
		st.Fills += o.Fills
		st.FreshHits += o.FreshHits
		st.StaleHits += o.StaleHits
		st.Misses += o.Misses
		st.Invalidations += o.Invalidations
		for r, n := range o.BypassReasons {
			st.BypassReasons[r] += n
		}
	}
	os.Exit(report(mode, fmt.Sprintf("%s, %d pools", mode, len(all)), st, code))
}
