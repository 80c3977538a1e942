package main

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/viccon/sturdyc"
	"golang.org/x/sync/singleflight"

	"github.com/sqlflight/sqlflight"
)

// row is what every benchmark query returns: (id, v, ver, label).
type row struct {
	ID, V, Ver int64
	Label      string
}

// contender is one way of reading through database/sql.
type contender interface {
	// read runs query q (always read-only) with args and returns its rows.
	// The returned slice must not be modified (caches share it).
	read(ctx context.Context, q string, args ...any) ([]row, error)
	// write runs an UPDATE … RETURNING ver, then invalidates readKey (the
	// key of the read that the write changes) where the contender caches.
	write(ctx context.Context, q string, readQ string, id int64) (int64, error)
	// hits is the number of reads served without waiting on the database.
	hits() uint64
	// pool is the contender's database/sql pool.
	pool() *sql.DB
	close()
}

// openArgs is what a contender is opened with.
type openArgs struct {
	dsn         string
	maxConns    int           // 0 leaves database/sql's pool as it comes (no cap, 2 idle)
	origin      time.Duration // the herd query's duration (the floor's timer)
	ttl         time.Duration
	feed        sqlflight.FeedMode
	publication string // the replication feed's publication (sqlflight with FeedReplication)
}

type contenderKind struct {
	name string
	open func(openArgs) (contender, error)
	// feed is the change feed a sqlflight contender follows; the workload
	// prepares what it needs on the bench table (a publication, the
	// triggers) before opening and removes it after closing.
	feed sqlflight.FeedMode
	// defaultPool leaves the herd contender's database/sql pool as it comes
	// instead of capping it at -maxconns.
	defaultPool bool
	// ann is the herd query's annotation ("ttl=1m" when empty).
	ann string
}

// kinds are the contenders of every workload.
var kinds = []contenderKind{
	{name: "raw pgx", open: openRawC},
	{name: "x/sync singleflight", open: openSingleflightC},
	{name: "sturdyc", open: openSturdyC},
	{name: "sqlflight", open: openFlightC},
}

// herdKinds are the contenders of the herd workload, each on a warm handle:
// raw pgx and sturdyc for scale, the ideal in-driver floor, and
// singleflight and sqlflight (coalescing only, and caching) each with
// database/sql's default pool and with a pool capped at maxConns.
func herdKinds(maxConns int) []contenderKind {
	capped := fmt.Sprintf("SetMaxOpenConns(%d)", maxConns)
	return []contenderKind{
		{name: "raw pgx, " + capped, open: openRawC},
		{name: "ideal in-driver floor (no database), default pool", open: openFloorC, defaultPool: true},
		{name: "x/sync singleflight, default pool", open: openSingleflightC, defaultPool: true},
		{name: "x/sync singleflight, " + capped, open: openSingleflightC},
		{name: "sturdyc, " + capped, open: openSturdyC},
		{name: "sqlflight `coalesce`, default pool", open: openFlightC, defaultPool: true, ann: "coalesce"},
		{name: "sqlflight `coalesce`, " + capped, open: openFlightC, ann: "coalesce"},
		{name: "sqlflight `soft=1m`, default pool", open: openFlightC, defaultPool: true, ann: "soft=1m"},
		{name: "sqlflight `soft=1m`, " + capped, open: openFlightC, ann: "soft=1m"},
	}
}

// outsideKinds are the contenders of the Zipf mix whose writes a plain pgx
// client makes: nobody tells the caches, so sqlflight runs once without a
// feed (as blind as the others) and once with each change feed.
var outsideKinds = []contenderKind{
	{name: "raw pgx", open: openRawC},
	{name: "x/sync singleflight", open: openSingleflightC},
	{name: "sturdyc", open: openSturdyC},
	{name: "sqlflight, no feed", open: openFlightC},
	{name: "sqlflight, feed=replication", open: openFlightC, feed: sqlflight.FeedReplication},
	{name: "sqlflight, feed=notify", open: openFlightC, feed: sqlflight.FeedNotify},
}

// scanAll reads every row of rs into a fresh slice.
func scanAll(rs *sql.Rows) ([]row, error) {
	defer rs.Close()
	var out []row
	for rs.Next() {
		var r row
		if err := rs.Scan(&r.ID, &r.V, &r.Ver, &r.Label); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rs.Err()
}

func queryRows(ctx context.Context, db *sql.DB, q string, args ...any) ([]row, error) {
	rs, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return scanAll(rs)
}

func execWrite(ctx context.Context, db *sql.DB, q string, id int64) (int64, error) {
	var ver int64
	err := db.QueryRowContext(ctx, q, id).Scan(&ver)
	return ver, err
}

// keyOf is the hand-wired cache/flight key: the SQL text and its arguments.
func keyOf(q string, args ...any) string {
	var b strings.Builder
	b.Grow(len(q) + 8*len(args))
	b.WriteString(q)
	for _, a := range args {
		b.WriteByte(0)
		switch v := a.(type) {
		case int64:
			b.WriteString(strconv.FormatInt(v, 10))
		case int:
			b.WriteString(strconv.Itoa(v))
		default:
			fmt.Fprint(&b, v)
		}
	}
	return b.String()
}

func openPool(dsn string, maxConns int) (*sql.DB, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, err
	}
	capPool(db, maxConns)
	return db, nil
}

// capPool caps db at maxConns open and idle connections; 0 leaves it as
// database/sql makes it.
func capPool(db *sql.DB, maxConns int) {
	if maxConns > 0 {
		db.SetMaxOpenConns(maxConns)
		db.SetMaxIdleConns(maxConns)
	}
}

// --- raw pgx ---

type rawC struct{ db *sql.DB }

func openRawC(a openArgs) (contender, error) {
	db, err := openPool(a.dsn, a.maxConns)
	return &rawC{db}, err
}
func (c *rawC) read(ctx context.Context, q string, args ...any) ([]row, error) {
	return queryRows(ctx, c.db, q, args...)
}
func (c *rawC) write(ctx context.Context, q, _ string, id int64) (int64, error) {
	return execWrite(ctx, c.db, q, id)
}
func (c *rawC) hits() uint64  { return 0 }
func (c *rawC) pool() *sql.DB { return c.db }
func (c *rawC) close()        { _ = c.db.Close() }

// --- singleflight by hand ---

type sfC struct {
	db *sql.DB
	g  singleflight.Group
}

func openSingleflightC(a openArgs) (contender, error) {
	db, err := openPool(a.dsn, a.maxConns)
	return &sfC{db: db}, err
}
func (c *sfC) read(ctx context.Context, q string, args ...any) ([]row, error) {
	v, err, _ := c.g.Do(keyOf(q, args...), func() (any, error) {
		// The leader's context: a canceled leader fails its followers too,
		// which is what a hand-wired singleflight does.
		return queryRows(ctx, c.db, q, args...)
	})
	if err != nil {
		return nil, err
	}
	return v.([]row), nil
}
func (c *sfC) write(ctx context.Context, q, readQ string, id int64) (int64, error) {
	ver, err := execWrite(ctx, c.db, q, id)
	// Readers arriving after the write must not join a flight started before it.
	c.g.Forget(keyOf(readQ, id))
	return ver, err
}
func (c *sfC) hits() uint64  { return 0 }
func (c *sfC) pool() *sql.DB { return c.db }
func (c *sfC) close()        { _ = c.db.Close() }

// --- sturdyc by hand ---

type hitCounter struct{ n atomic.Uint64 }

func (h *hitCounter) CacheHit()                   { h.n.Add(1) }
func (h *hitCounter) CacheMiss()                  {}
func (h *hitCounter) AsynchronousRefresh()        {}
func (h *hitCounter) SynchronousRefresh()         {}
func (h *hitCounter) MissingRecord()              {}
func (h *hitCounter) ForcedEviction()             {}
func (h *hitCounter) EntriesEvicted(int)          {}
func (h *hitCounter) ShardIndex(int)              {}
func (h *hitCounter) CacheBatchRefreshSize(int)   {}
func (h *hitCounter) ObserveCacheSize(func() int) {}

type sturdyC struct {
	db  *sql.DB
	c   *sturdyc.Client[[]row]
	hit *hitCounter
	ttl time.Duration
}

func openSturdyC(a openArgs) (contender, error) {
	db, err := openPool(a.dsn, a.maxConns)
	if err != nil {
		return nil, err
	}
	h := &hitCounter{}
	ttl := a.ttl
	if ttl <= 0 {
		ttl = time.Nanosecond // effectively uncached (not used by workloads that do not cache)
	}
	c := sturdyc.New[[]row](100_000, 16, ttl, 10, sturdyc.WithMetrics(h))
	return &sturdyC{db: db, c: c, hit: h, ttl: ttl}, nil
}
func (c *sturdyC) read(ctx context.Context, q string, args ...any) ([]row, error) {
	return c.c.GetOrFetch(ctx, keyOf(q, args...), func(ctx context.Context) ([]row, error) {
		return queryRows(ctx, c.db, q, args...)
	})
}
func (c *sturdyC) write(ctx context.Context, q, readQ string, id int64) (int64, error) {
	ver, err := execWrite(ctx, c.db, q, id)
	c.c.Delete(keyOf(readQ, id))
	return ver, err
}
func (c *sturdyC) hits() uint64  { return c.hit.n.Load() }
func (c *sturdyC) pool() *sql.DB { return c.db }
func (c *sturdyC) close()        { _ = c.db.Close() }

// --- sqlflight ---

type flightC struct {
	db *sql.DB
	sh *sqlflight.Shield
}

// openFlightC opens sqlflight; a feed it follows is opened by the pool's
// first connection (e.open pre-warms the pool).
func openFlightC(a openArgs) (contender, error) {
	cfg, err := pgx.ParseConfig(a.dsn)
	if err != nil {
		return nil, err
	}
	db := sqlflight.OpenDB(stdlib.GetConnector(*cfg), sqlflight.Options{Feed: a.feed, FeedPublication: a.publication})
	capPool(db, a.maxConns)
	return &flightC{db: db, sh: sqlflight.ShieldOf(db)}, nil
}
func (c *flightC) read(ctx context.Context, q string, args ...any) ([]row, error) {
	return queryRows(ctx, c.db, q, args...)
}
func (c *flightC) write(ctx context.Context, q, _ string, id int64) (int64, error) {
	return execWrite(ctx, c.db, q, id) // sqlflight invalidates the table itself
}
func (c *flightC) hits() uint64 {
	s := c.sh.Stats()
	return s.FreshHits + s.StaleHits + s.NegativeHits
}
func (c *flightC) pool() *sql.DB { return c.db }

// note says what the feed did during the run, if there is one.
func (c *flightC) note() string {
	s := c.sh.Stats()
	if s.FeedState == "" {
		return ""
	}
	n := fmt.Sprintf("feed %s at the end: %d transactions applied, %d resyncs, %d errors",
		s.FeedState, s.FeedTransactions, s.FeedResyncs, s.FeedErrors)
	if s.FeedDelay.Count > 0 { // the replication feed knows each commit's time; NOTIFY does not
		n += fmt.Sprintf(", commit → invalidation delay p99 ≤ %gs (FeedDelay bucket)", s.FeedDelay.Quantile(0.99))
	}
	return n
}
func (c *flightC) close() {
	_ = c.db.Close()
	_ = c.sh.Close()
}
