package integration

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight"
	"github.com/sqlflight/sqlflight/pgxflight"
)

// TestDifferential is a randomized differential test against PostgreSQL:
// concurrent readers under several policies and statement shapes, writers
// through the driver, and every read checked afterwards against the
// committed history (differential_history_test.go). Each workload below aims
// at one class of bug and has its own tables and its own Shield, so that one
// workload's writes cannot hide or cause another's violations:
//
//   - epochs: many writers to the same tables (autocommit, committed and
//     rolled-back transactions) and readers under every policy: point reads,
//     a join, count(*). Catches epochs that move backwards and any other
//     read-your-writes failure, and rolled-back values leaking out.
//   - volatile: writes through a VOLATILE plpgsql function called by SELECT
//     under every policy. Catches the function's result being shared (the
//     write does not happen) and the call not counting as a write.
//   - cascade: deletes of a parent row that reach the read table through ON
//     DELETE CASCADE.
//   - trigger: updates of a table whose trigger writes the read table.
//   - view: reads of a view whose base table is written, and reads of a base
//     table written through an updatable view.
//   - strict: one statement read under ttl=1s by some readers and under
//     ttl=50ms, coalescing only and other TTLs by others, while another
//     Shield writes (this one cannot know). Catches a reader served an entry
//     older than its own policy allows.
//   - invalidate: writes behind the Shield's back followed by
//     Shield.Invalidate.
//   - rows: reads tagged by their rows (by id, by tenant, by both, IN lists)
//     and writes that pin the rows they touch (by id, by tenant and id, IN
//     lists, in transactions) mixed with writes that do not. Catches a
//     row-level invalidation that leaves a read of a written row.
//   - fleet-rows: the rows workload on instances of one fleet sharing Redis
//     (three from the start, one without L1; two more join a third of the
//     way through), each read judged by when its instance applied each
//     write's message, and reads of instances without L1 by the tier's
//     guarantee (differential_fleet_test.go says exactly what counts).
//     Catches row messages applied too coarsely or not at all, Redis's row
//     epochs not keeping an older value out (an instance that joined late
//     heard no earlier message), and read-your-writes on the writing one.
//   - batch: many keys of one statement read at once (300 ids and 240 text
//     keys full of quotes, backslashes, commas, braces, spaces, "NULL" and
//     unicode; each as a parameter and inlined as bun writes it), so that
//     reads of different keys overlap, under coalescing only (the Shield's
//     default), TTLs and ttl=1m; writes through the Shield (autocommit by
//     parameter and by an inlined key, committed and rolled-back
//     transactions) and by an outside client on pgx, which the Shield
//     learns of only through its change feed (logical replication, a
//     publication of the workload's two tables). Every write is followed at
//     once by reads of its key and its neighbours (and preceded by some, so
//     that a read of the key is in flight when it returns). Catches a
//     batch of reads that answers a caller whose call began after the
//     batch started (or after a write that returned before it), a caller
//     given another key's row or not exactly its own, keys mangled on
//     their way into one statement, and outside writes the feed does not
//     report (differential_batch_test.go).
//
// Knobs: SQLFLIGHT_DIFF_OPS (operations, default 105000; 20000 with -short),
// SQLFLIGHT_DIFF_SECONDS (longest run, default 150), SQLFLIGHT_DIFF_WORKLOADS
// (a comma-separated subset), SQLFLIGHT_DIFF_SEED.
func TestDifferential(t *testing.T) { runDifferential(t, "pgx") }

// TestDifferentialLibPQ is the differential test through lib/pq as the
// parent driver: PostgreSQL is what the server says, so every workload
// but the fleet's (which opens pgx connectors of its own) must hold
// through another driver as it holds through pgx v5.
func TestDifferentialLibPQ(t *testing.T) { runDifferential(t, "libpq") }

func runDifferential(t *testing.T, parent string) {
	dsn := postgresDSN(t)
	admin := openRaw(t, dsn)
	poolSize(admin, 2)
	id := uniqueID(t)
	target, longest, seed := diffKnobs(t)

	var classes []*diffClass
	only := os.Getenv("SQLFLIGHT_DIFF_WORKLOADS")
	for _, w := range []struct {
		name  string
		build func(*testing.T, *sql.DB, string) *diffClass
	}{
		{"epochs", diffEpochs}, {"volatile", diffVolatile}, {"cascade", diffCascade}, {"trigger", diffTrigger},
		{"view", diffView}, {"strict", diffStrict}, {"invalidate", diffInvalidate}, {"rows", diffRows},
		{"fleet-rows", diffFleetRows}, {"batch", diffBatch}, {"faces", diffFaces},
	} {
		if only != "" && !strings.Contains(","+only+",", ","+w.name+",") {
			continue
		}
		if parent != "pgx" && (w.name == "fleet-rows" || w.name == "faces") {
			continue // pgx connectors of their own; the pgx face
		}
		c := w.build(t, admin, id)
		c.name = w.name
		c.admin = admin
		// Every other workload speaks the simple protocol (arguments and
		// results as text), the others pgx's default.
		c.mode, c.dsn = execModes[len(classes)%len(execModes)], dsn
		if parent != "pgx" {
			c.mode = execModes[0] // lib/pq has one protocol of its own
		}
		if c.mode.value != "" {
			c.dsn = withDSNParams(t, dsn, "default_query_exec_mode", c.mode.value)
		}
		if c.fleet != nil {
			c.fleet.open(t, c)
			classes = append(classes, c)
			continue
		}
		// The readers share two connections (cache hits and followers
		// hold them only briefly), and background refreshes run two at a
		// time (each on a real connection of its own beyond the pool's:
		// the Shield keeps one spare): the whole test stays near 45
		// connections, on a server that others may use too. (The batch
		// workload's readers have more, on at most Options.MaxConns real
		// ones: reads of many keys at once are what it is about.)
		opts := sqlflight.Options{Default: diffDefault, MaxRefreshes: 2}
		if c.options != nil {
			c.options(&opts, parent, c.dsn)
		}
		switch {
		case c.open != nil:
			c.open(t, c, opts)
		case parent == "pgx":
			c.db, c.sh = openFlight(t, c.dsn, opts)
		default:
			c.db, c.sh = openParent(t, parent, c.dsn, opts)
		}
		pool := 2
		if c.pool > 0 {
			pool = c.pool
		}
		if c.writeVia == viaShield {
			pool += c.writers
		}
		poolSize(c.db, pool)
		if opts.Feed != sqlflight.FeedNone {
			// The first Connect opens the feed and waits until it streams:
			// before the first outside write.
			diffStartFeed(t, c)
			if st := c.sh.Stats(); st.FeedState != "current" {
				t.Fatalf("%s: after the first Connect the change feed is %q, want current", c.name, st.FeedState)
			}
		}
		if c.outside {
			c.odb = openRaw(t, c.dsn)
			poolSize(c.odb, c.writers)
		}
		c.wdb = c.db
		switch c.writeVia {
		case viaForeign:
			c.wdb, _ = openFlight(t, c.dsn)
			poolSize(c.wdb, c.writers)
		case viaRaw:
			c.wdb = openRaw(t, c.dsn)
			poolSize(c.wdb, c.writers)
		}
		classes = append(classes, c)
	}
	if len(classes) == 0 {
		t.Fatalf("SQLFLIGHT_DIFF_WORKLOADS=%q names no workload", only)
	}

	ctx := testContext(t, testTimeout)
	t0 := time.Now()
	now := func() int64 { return int64(time.Since(t0)) }
	var (
		stop  atomic.Bool
		total atomic.Int64
		wg    sync.WaitGroup
	)
	for ci, c := range classes {
		if c.fleet != nil {
			c.fleet.clock.Store(&now)
		}
		c.reads = make([][]diffRead, c.readers+c.chasers)
		for r := range c.readers {
			rng := rand.New(rand.NewPCG(seed, uint64(ci<<16|r)))
			wg.Go(func() { c.readLoop(ctx, r, rng, now, &stop, &total) })
		}
		for i := range c.chasers {
			r := c.readers + i
			rng := rand.New(rand.NewPCG(seed, uint64(ci<<16|r)))
			wg.Go(func() { c.chaseLoop(ctx, r, rng, now, &stop, &total) })
		}
		for i := range c.writers {
			w := &diffWriter{c: c, ctx: ctx, rng: rand.New(rand.NewPCG(seed, uint64(ci<<16|1<<8|i))), idx: i, n: c.writers, now: now, stop: &stop, wdb: c.wdb}
			if c.fleet != nil {
				w.inst, w.wdb = c.fleet.writerOn(i)
			}
			wg.Go(func() {
				for !stop.Load() && ctx.Err() == nil {
					c.write(w)
					total.Add(1)
					if c.pause > 0 {
						time.Sleep(time.Duration(w.rng.Int64N(int64(c.pause))))
					}
				}
			})
		}
	}
	deadline := time.Now().Add(longest)
	joined := false
	for total.Load() < target && time.Now().Before(deadline) && ctx.Err() == nil {
		if !joined && (total.Load() >= target/3 || time.Since(t0) >= longest/3) {
			// A third of the way: the fleets' new instances join.
			for _, c := range classes {
				if c.fleet != nil {
					c.fleet.join(t)
				}
			}
			joined = true
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	elapsed := time.Since(t0)
	for _, c := range classes {
		if c.fleet != nil {
			c.fleet.settle(c)
		}
	}

	// The database's final state must be the last recorded version of
	// every object: otherwise a write was lost or the history is wrong, and
	// no other verdict can be trusted.
	for _, c := range classes {
		for _, o := range c.objs {
			truth, err := c.truth(o)
			if err != nil {
				t.Fatalf("%s: read %s: %v", c.name, o.name, err)
			}
			switch {
			case truth > o.cur():
				c.violation(vHistory, fmt.Sprintf("%s: the database holds version %d, the history ends at %d: something wrote that no writer sent (a background refresh running a volatile function?)\n%s",
					o.name, truth, o.cur(), o.around(o.cur())))
			case truth < o.cur():
				c.violation(vHistory, fmt.Sprintf("%s: the database holds version %d, the history ends at %d: a write that returned is lost\n%s",
					o.name, truth, o.cur(), o.around(o.cur())))
			}
		}
	}

	counts := map[string]map[string]int{}
	found := map[string][]diffViolation{}
	for _, c := range classes {
		vs := append(c.check(), c.found...)
		found[c.name] = vs
		counts[c.name] = map[string]int{}
		for _, v := range vs {
			counts[c.name][v.kind]++
		}
	}
	t.Logf("differential run: %d operations in %v (target %d, seed %d)\n%s", total.Load(), elapsed.Round(time.Millisecond), target, seed, diffSummary(classes, counts))
	if total.Load() < target {
		t.Logf("NOTE: the run stopped at its time limit (%v) before the target of %d operations", longest, target)
	}

	for _, c := range classes {
		t.Run(c.name, func(t *testing.T) {
			t.Logf("%s catches: %s (pgx exec mode: %s)", c.name, c.catches, c.mode.name)
			t.Logf("reads by policy: %s", c.policyCounts())
			if c.fleet != nil {
				c.fleet.report(t)
			} else {
				ps := c.db.Stats()
				t.Logf("shield: %s; database/sql pool: open=%d maxIdleClosed=%d maxIdleTimeClosed=%d maxLifetimeClosed=%d",
					statsString(c.sh.Stats()), ps.OpenConnections, ps.MaxIdleClosed, ps.MaxIdleTimeClosed, ps.MaxLifetimeClosed)
			}
			if c.report != nil {
				c.report(t)
			}
			versions := 0
			for _, o := range c.objs {
				versions += int(o.cur())
			}
			// A workload that did (almost) nothing proves nothing.
			if c.readOps.Load() < 100 || versions < 10 {
				t.Errorf("too little work to judge: %d reads, %d committed versions", c.readOps.Load(), versions)
			}
			if n := c.errCount.Load(); n > 0 {
				t.Errorf("%d operations failed; first: %s", n, strings.Join(c.errs, "\n"))
			}
			byKind := map[string][]diffViolation{}
			for _, v := range found[c.name] {
				byKind[v.kind] = append(byKind[v.kind], v)
			}
			for _, k := range diffKinds {
				vs := byKind[k]
				if len(vs) == 0 {
					continue
				}
				var b strings.Builder
				for i, v := range vs[:min(len(vs), 3)] {
					fmt.Fprintf(&b, "\n[%d] %s", i+1, v.msg)
				}
				t.Errorf("%d %s violation(s); the first %d:%s", len(vs), k, min(len(vs), 3), b.String())
			}
		})
	}
}

// diffStartFeed makes the first Connect of c's Shield, which opens its
// change feed. Making a logical replication slot waits until every
// transaction of the cluster that held an xid when it began has ended, so
// another session's long transaction (another test's, on a shared server)
// can delay it past the feed's start timeout; the next Connect tries
// again.
func diffStartFeed(t *testing.T, c *diffClass) {
	t.Helper()
	ctx := testContext(t, 3*time.Minute)
	began := time.Now()
	for attempt := 1; ; attempt++ {
		err := c.db.PingContext(ctx)
		if err == nil {
			t.Logf("%s: change feed established in %v", c.name, time.Since(began).Round(time.Millisecond))
			return
		}
		if !errors.Is(err, sqlflight.ErrFeedUnavailable) || attempt == 3 {
			var held []string
			rows, qerr := c.admin.QueryContext(ctx, `SELECT pid, coalesce(application_name, ''), state, now() - xact_start, left(query, 80)
				FROM pg_stat_activity WHERE backend_xid IS NOT NULL AND pid <> pg_backend_pid()`)
			if qerr == nil {
				for rows.Next() {
					var pid int
					var app, state, age, query string
					if rows.Scan(&pid, &app, &state, &age, &query) == nil {
						held = append(held, fmt.Sprintf("pid %d %q %s for %s: %s", pid, app, state, age, query))
					}
				}
				_ = rows.Close()
			}
			t.Fatalf("%s: first connect (change feed), attempt %d: %v\ntransactions holding an xid now (a logical replication slot waits for them): %q", c.name, attempt, err, held)
		}
		t.Logf("%s: first connect (change feed), attempt %d: %v; trying again", c.name, attempt, err)
	}
}

// poolSize bounds db's pool and keeps its connections (reopening one
// costs more than the work this test measures).
func poolSize(db *sql.DB, n int) {
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
}

// diffKnobs reads the test's size from the environment.
func diffKnobs(t *testing.T) (target int64, longest time.Duration, seed uint64) {
	target = 105_000
	if testing.Short() {
		target = 20_000
	}
	longest = 150 * time.Second
	seed = rand.Uint64()
	if v := os.Getenv("SQLFLIGHT_DIFF_OPS"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			t.Fatalf("SQLFLIGHT_DIFF_OPS=%q: want a positive number", v)
		}
		target = n
	}
	if v := os.Getenv("SQLFLIGHT_DIFF_SECONDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			t.Fatalf("SQLFLIGHT_DIFF_SECONDS=%q: want a positive number", v)
		}
		longest = time.Duration(n) * time.Second
	}
	if v := os.Getenv("SQLFLIGHT_DIFF_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("SQLFLIGHT_DIFF_SEED=%q: %v", v, err)
		}
		seed = n
	}
	return target, longest, seed
}

// diffSlack is how much later than its policy allows a value may still be
// served, for the time between the database's snapshot and the cache fill,
// and scheduling. It only widens what the check accepts.
const diffSlack = 300 * time.Millisecond

// diffDefault is Options.Default of every workload's Shield.
var diffDefault = sqlflight.Policy{Soft: 150 * time.Millisecond, Hard: 300 * time.Millisecond}

// staleAllowance is how old a value a TTL policy with this hard life may
// serve: hard, plus 10% jitter, and as much again past the hard deadline
// when a refresh fails or no origin slot is free (Options.MaxStale's
// default).
func staleAllowance(hard time.Duration) time.Duration { return 2 * hard * 11 / 10 }

// diffPolicy is how a reader asks for sharing.
type diffPolicy struct {
	name  string
	ann   string                                // annotation put before the statement
	ctx   func(context.Context) context.Context // context policy, or nil
	allow time.Duration                         // the staleness it accepts (of writes its Shield cannot know)
}

const (
	polCoalesce uint8 = iota
	polCtxTTL
	polSoftHard
	polDefault
	polTTL1s
	polTTL50ms
	polPlain
	polTTL1m
)

var diffPolicies = []diffPolicy{
	polCoalesce: {name: "coalesce", ctx: func(ctx context.Context) context.Context {
		return sqlflight.WithPolicy(ctx, sqlflight.Policy{})
	}},
	polCtxTTL: {name: "WithTTL(200ms,400ms)", ctx: func(ctx context.Context) context.Context {
		return sqlflight.WithTTL(ctx, 200*time.Millisecond, 400*time.Millisecond)
	}, allow: staleAllowance(400 * time.Millisecond)},
	polSoftHard: {name: "soft=100ms hard=300ms", ann: "/* sqlflight: soft=100ms hard=300ms */ ", allow: staleAllowance(300 * time.Millisecond)},
	polDefault:  {name: "Options.Default", allow: staleAllowance(diffDefault.Hard)},
	polTTL1s:    {name: "ttl=1s", ann: "/* sqlflight: ttl=1s */ ", allow: staleAllowance(time.Second)},
	polTTL50ms:  {name: "ttl=50ms", ann: "/* sqlflight: ttl=50ms */ ", allow: staleAllowance(50 * time.Millisecond)},
	// No annotation, on a Shield whose Options.Default is zero (coalescing
	// only): the batch workload's.
	polPlain: {name: "none (Options.Default: coalescing only)"},
	// Only invalidations (the Shield's own writes, its change feed) keep
	// it fresh.
	polTTL1m: {name: "ttl=1m", ann: "/* sqlflight: ttl=1m */ ", allow: staleAllowance(time.Minute)},
}

func (p *diffPolicy) apply(ctx context.Context, query string) (context.Context, string) {
	if p.ctx != nil {
		ctx = p.ctx(ctx)
	}
	return ctx, p.ann + query
}

// diffShape is a statement the readers run: one row of cols bigints, from
// which decode derives the version of each object objs names.
type diffShape struct {
	name   string
	sql    string
	cols   int
	keys   int
	args   func(k int) []any
	objs   func(k int) []int
	decode func(k int, raw []int64) []int64

	// text, when set, is the statement for key k (a key inlined in it, as
	// bun writes its arguments); sql is then only its description.
	text func(k int) string
	// key, when set, makes the statement keyed: it returns rows of (key,
	// cols bigints), and a read must return exactly one, whose key is
	// key(k) (an int64 or a string).
	key func(k int) any
	// policies, when set, are the only ones the shape is read under (nil:
	// the workload's).
	policies []uint8
}

// policy picks a policy for a read of shape si.
func (c *diffClass) policy(rng *rand.Rand, si int) uint8 {
	ps := c.policies
	if p := c.shapes[si].policies; p != nil {
		ps = p
	}
	return ps[rng.IntN(len(ps))]
}

// query is the statement for key k.
func (s *diffShape) query(k int) string {
	if s.text != nil {
		return s.text(k)
	}
	return s.sql
}

// diffQuerier is what a shape runs on: a *sql.DB or a *sql.Tx, or the
// pgx face (differential_faces_test.go).
type diffQuerier interface {
	QueryRowContext(context.Context, string, ...any) diffRow
	QueryContext(context.Context, string, ...any) (diffRowSet, error)
}

// diffRow and diffRowSet are what a diffQuerier's reads return.
type diffRow interface{ Scan(...any) error }

type diffRowSet interface {
	Next() bool
	Scan(...any) error
	Err() error
	Close()
}

// sqlQuerier is a database/sql handle as a diffQuerier.
type sqlQuerier struct {
	q interface {
		queryRower
		QueryContext(context.Context, string, ...any) (*sql.Rows, error)
	}
}

func (s sqlQuerier) QueryRowContext(ctx context.Context, query string, args ...any) diffRow {
	return s.q.QueryRowContext(ctx, query, args...)
}

func (s sqlQuerier) QueryContext(ctx context.Context, query string, args ...any) (diffRowSet, error) {
	rows, err := s.q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return sqlRows{rows}, nil
}

type sqlRows struct{ *sql.Rows }

func (r sqlRows) Close() { _ = r.Rows.Close() }

// run runs query (s's statement for key k, a policy's annotation before
// it) on q and returns its columns. For a keyed shape, wrong says how the
// result is not exactly key k's one row ("" when it is).
func (s *diffShape) run(ctx context.Context, q diffQuerier, query string, k int) (raw [2]int64, wrong string, err error) {
	if s.key == nil {
		dest := []any{&raw[0], &raw[1]}
		err = q.QueryRowContext(ctx, query, s.args(k)...).Scan(dest[:s.cols]...)
		return raw, "", err
	}
	rows, err := q.QueryContext(ctx, query, s.args(k)...)
	if err != nil {
		return raw, "", err
	}
	defer rows.Close()
	want := s.key(k)
	_, text := want.(string)
	var (
		n     int
		other []string
	)
	for rows.Next() {
		var (
			vals [2]int64
			ik   int64
			sk   string
		)
		dest := []any{&ik, &vals[0], &vals[1]}
		if text {
			dest[0] = &sk
		}
		if err := rows.Scan(dest[:1+s.cols]...); err != nil {
			return raw, "", err
		}
		n++
		var got any = ik
		if text {
			got = sk
		}
		if got != want {
			other = append(other, fmt.Sprintf("%#v", got))
			continue
		}
		raw = vals
	}
	if err := rows.Err(); err != nil {
		return raw, "", err
	}
	switch {
	case len(other) > 0:
		wrong = fmt.Sprintf("%d row(s), of key(s) %s, want one of key %#v", n, strings.Join(other, ", "), want)
	case n != 1:
		wrong = fmt.Sprintf("%d rows of key %#v, want one", n, want)
	}
	return raw, wrong, nil
}

func (s *diffShape) versions(k int, raw []int64) []int64 {
	if s.decode == nil {
		return raw
	}
	return s.decode(k, raw)
}

// pointShape reads the version of row k of table, object base+k.
func pointShape(name, table string, keys, base int) *diffShape {
	return &diffShape{
		name: name, sql: fmt.Sprintf("SELECT ver FROM %s WHERE id = $1", table), cols: 1, keys: keys,
		args: func(k int) []any { return []any{k} },
		objs: func(k int) []int { return []int{base + k} },
	}
}

// Where a workload's writes go.
const (
	viaShield  = iota // the readers' own Shield
	viaForeign        // another Shield (another process, as far as the readers' Shield knows)
	viaRaw            // pgx directly, followed by Shield.Invalidate
)

// diffClass is one workload: its tables, objects, readers and writers.
type diffClass struct {
	name     string
	catches  string
	writeVia int
	readers  int
	writers  int
	pause    time.Duration // a writer sleeps up to this long between writes
	policies []uint8
	shapes   []*diffShape
	objs     []*diffObj
	write    func(w *diffWriter)

	pool    int                                                      // the readers' connections in database/sql's pool (zero: 2)
	options func(o *sqlflight.Options, parent, dsn string)           // adjusts the Shield's options (nil: none)
	open    func(t *testing.T, c *diffClass, opts sqlflight.Options) // opens db and sh (nil: openFlight)
	outside bool                                                     // writers also write behind the Shield's back, on odb
	odb     *sql.DB                                                  // raw pgx: the outside client's
	chasers int                                                      // readers that read what the writers kick, at once
	kicks   chan diffKick                                            // to the chasers
	pick    func(rng *rand.Rand, si int) int                         // a reader's key of shape si (nil: uniform)
	report  func(t *testing.T)                                       // more of the subtest's report (nil: none)

	mode  execMode
	dsn   string
	admin *sql.DB
	db    *sql.DB       // the readers' (a Shield's)
	face  *pgxflight.DB // the faces workload's: the pgx face of sh, beside db
	sh    *sqlflight.Shield
	wdb   *sql.DB // the writers'

	fleet        *diffFleet      // the instances of a fleet workload (nil: one Shield, db)
	reads        [][]diffRead    // per reader (chasers after the readers)
	worstLag     map[uint8]int64 // per policy, filled by check
	worstFeedLag int64           // of versions outside the Shield, filled by check

	mu       sync.Mutex
	found    []diffViolation // by the writers, as they go
	errs     []string
	errCount atomic.Int64
	readOps  atomic.Int64
	writeOps atomic.Int64
	shed     atomic.Int64
}

// foreign reports whether the readers' Shield cannot know of the writes.
func (c *diffClass) foreign() bool { return c.writeVia == viaForeign }

func (c *diffClass) violation(kind, msg string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.found = append(c.found, diffViolation{kind, kind + ": " + msg})
}

func (c *diffClass) fail(format string, args ...any) {
	if c.errCount.Add(1) > 5 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.errs = append(c.errs, fmt.Sprintf(format, args...))
}

// addObjs adds n objects named prefix[k], read by shape at key k, column
// col, and returns the index of the first.
func (c *diffClass) addObjs(prefix string, n, shape, col int) int {
	base := len(c.objs)
	for k := range n {
		c.objs = append(c.objs, newDiffObj(fmt.Sprintf("%s[%d]", prefix, k), shape, k, col))
	}
	return base
}

// truth reads o's current version on a raw connection.
func (c *diffClass) truth(o *diffObj) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sh := c.shapes[o.shape]
	raw, wrong, err := sh.run(ctx, sqlQuerier{c.admin}, sh.query(o.key), o.key)
	if err == nil && wrong != "" {
		err = fmt.Errorf("%s: %s", sh.query(o.key), wrong)
	}
	if err != nil {
		return 0, err
	}
	return sh.versions(o.key, raw[:sh.cols])[o.col], nil
}

// readLoop is one reader: random shape, key and policy, until stop.
func (c *diffClass) readLoop(ctx context.Context, r int, rng *rand.Rand, now func() int64, stop *atomic.Bool, total *atomic.Int64) {
	out := make([]diffRead, 0, 4096)
	defer func() { c.reads[r] = out }()
	var db diffQuerier = sqlQuerier{c.db}
	inst := uint8(0)
	switch {
	case c.fleet != nil:
		// A reader of an instance that joins mid-run starts when it does.
		var idb *sql.DB
		if inst, idb = c.fleet.readerOn(r, stop); idb == nil {
			return
		}
		db = sqlQuerier{idb}
	case c.face != nil && r%2 == 1:
		db = faceQuerier{c.face} // every other reader reads through the pgx face
	}
	for !stop.Load() && ctx.Err() == nil {
		si := rng.IntN(len(c.shapes))
		var k int
		if c.pick != nil {
			k = c.pick(rng, si)
		} else {
			k = rng.IntN(c.shapes[si].keys)
		}
		c.readOne(ctx, db, inst, si, k, c.policy(rng, si), now, total, &out)
	}
}

// readOne reads key k of shape si under policy pi through db and records
// the read in out.
func (c *diffClass) readOne(ctx context.Context, db diffQuerier, inst uint8, si, k int, pi uint8, now func() int64, total *atomic.Int64, out *[]diffRead) {
	sh := c.shapes[si]
	qctx, query := diffPolicies[pi].apply(ctx, sh.query(k))
	start := now()
	raw, wrong, err := sh.run(qctx, db, query, k)
	end := now()
	switch {
	case err == nil:
		c.readOps.Add(1)
		total.Add(1)
		if wrong != "" {
			c.violation(vWrongRow, fmt.Sprintf("read of shape %q under policy %q, key %d, ran [%s, %s]: %q %v returned %s",
				sh.name, diffPolicies[pi].name, k, ms(start), ms(end), query, sh.args(k), wrong))
			return
		}
		*out = append(*out, diffRead{start: start, end: end, shape: uint8(si), pol: pi, inst: inst, key: int32(k), raw: raw})
	case errors.Is(err, sqlflight.ErrOverloaded):
		c.shed.Add(1)
	case ctx.Err() != nil:
	default:
		c.fail("read %q %v under %s: %v", query, sh.args(k), diffPolicies[pi].name, err)
	}
}

// diffKick asks a chaser to read key of shape at once.
type diffKick struct {
	shape uint8
	key   int32
}

// kick asks a chaser to read key k of shape si now, unless all are busy.
func (c *diffClass) kick(si, k int) {
	select {
	case c.kicks <- diffKick{shape: uint8(si), key: int32(k)}:
	default:
	}
}

// chaseLoop is one chaser: it reads what the writers kick, under a random
// policy, as soon as it is kicked, until stop.
func (c *diffClass) chaseLoop(ctx context.Context, r int, rng *rand.Rand, now func() int64, stop *atomic.Bool, total *atomic.Int64) {
	out := make([]diffRead, 0, 4096)
	defer func() { c.reads[r] = out }()
	idle := time.NewTimer(time.Hour)
	defer idle.Stop()
	for !stop.Load() && ctx.Err() == nil {
		idle.Reset(10 * time.Millisecond)
		select {
		case kk := <-c.kicks:
			c.readOne(ctx, sqlQuerier{c.db}, 0, int(kk.shape), int(kk.key), c.policy(rng, int(kk.shape)), now, total, &out)
		case <-idle.C:
		case <-ctx.Done():
		}
	}
}

// diffWriter is one writer goroutine. It owns the keys k with k%n == idx
// of every key space of its workload, and is the only one to write them.
type diffWriter struct {
	c    *diffClass
	ctx  context.Context
	rng  *rand.Rand
	idx  int
	n    int
	wdb  *sql.DB // the writer's handle: c.wdb, or its instance's in a fleet
	inst uint8   // its instance in a fleet
	out  bool    // the write under way is an outside client's (c.odb)
	now  func() int64
	stop *atomic.Bool
	hi   map[int]int64 // cascade: the next child number per group
}

// own returns a random key in [0, keys) that w owns.
func (w *diffWriter) own(keys int) int {
	return w.idx + w.n*w.rng.IntN((keys-w.idx+w.n-1)/w.n)
}

// errUnexpected ends a write whose result was already reported.
var errUnexpected = errors.New("unexpected result (reported)")

type queryRower interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}

func scalarInt(ctx context.Context, q queryRower, query string, args ...any) (int64, error) {
	var v int64
	err := q.QueryRowContext(ctx, query, args...).Scan(&v)
	return v, err
}

// next checks that a write returned the next version of o.
func (w *diffWriter) next(o *diffObj, got int64, via string) error {
	if got == o.cur()+1 {
		return nil
	}
	w.c.violation(vLostWrite, fmt.Sprintf("%s returned version %d of %s at %s, want %d: the write did not happen, or another call's result was shared\n%s",
		via, got, o.name, ms(w.now()), o.cur()+1, o.around(o.cur())))
	return errUnexpected
}

// done records a committed write of objs, sent at start.
func (w *diffWriter) done(start int64, via string, objs ...*diffObj) {
	ret := w.now()
	for _, o := range objs {
		o.commit(start, ret, via, w.inst, w.out)
	}
	w.c.writeOps.Add(1)
}

// failed reports err (unless errUnexpected) and resolves objs from the
// database: whatever the write committed counts as returned now.
func (w *diffWriter) failed(start int64, via string, err error, objs ...*diffObj) {
	if err != nil && !errors.Is(err, errUnexpected) {
		w.c.fail("%s: %v", via, err)
	}
	w.c.writeOps.Add(1)
	how := " (resolved after an error)"
	if errors.Is(err, errUnexpected) {
		// The database moved without this writer knowing (a background
		// refresh ran the write, say): when, nobody knows.
		start, how = 0, " (found when resolving a lost write)"
	}
	for _, o := range objs {
		truth, terr := w.c.truth(o)
		if terr != nil {
			w.c.fail("resolve %s after %s: %v", o.name, via, terr)
			continue
		}
		ret := w.now()
		if truth < o.cur() {
			w.c.violation(vHistory, fmt.Sprintf("after %s the database holds version %d of %s, the history %d\n%s", via, truth, o.name, o.cur(), o.around(o.cur())))
		}
		for o.cur() < truth {
			o.commit(start, ret, via+how, w.inst, w.out)
		}
	}
}

// update runs an UPDATE … RETURNING the object's new version.
func (w *diffWriter) update(via string, o *diffObj, query string, args ...any) {
	start := w.now()
	got, err := scalarInt(w.ctx, w.wdb, query, args...)
	if err == nil {
		err = w.next(o, got, via)
	}
	if err != nil {
		w.failed(start, via, err, o)
		return
	}
	w.done(start, via, o)
}

// tx runs body in a transaction through the writers' handle, then commits
// (objs each move to their next version) or rolls back.
func (w *diffWriter) tx(via string, commit bool, body func(*sql.Tx) error, objs ...*diffObj) {
	w.runTx(via, commit, func() (func() error, func() error, func() error, error) {
		tx, err := w.wdb.BeginTx(w.ctx, nil)
		if err != nil {
			return nil, nil, nil, err
		}
		return func() error { return body(tx) }, tx.Commit, tx.Rollback, nil
	}, objs...)
}

// runTx runs a transaction that begin begins (its body, commit and
// rollback), then commits (objs each move to their next version) or rolls
// back.
func (w *diffWriter) runTx(via string, commit bool, begin func() (body, commitTx, rollbackTx func() error, err error), objs ...*diffObj) {
	start := w.now()
	body, commitTx, rollbackTx, err := begin()
	if err == nil {
		if err = body(); err != nil {
			_ = rollbackTx()
		} else if commit {
			err = commitTx()
		} else {
			err = rollbackTx()
		}
	}
	if err != nil {
		w.failed(start, via, err, objs...)
		return
	}
	if !commit {
		w.c.writeOps.Add(1)
		return
	}
	w.done(start, via, objs...)
}

// txRead runs one of the readers' statements inside a transaction (under
// a random policy, which a transaction must ignore) and checks that it sees
// the transaction's own write: want.
func (w *diffWriter) txRead(tx *sql.Tx, si int, k int, col int, want int64, what string) error {
	return w.txReadOn(sqlQuerier{tx}, si, k, col, want, what)
}

// txReadOn is txRead on a transaction of either face.
func (w *diffWriter) txReadOn(tx diffQuerier, si int, k int, col int, want int64, what string) error {
	sh := w.c.shapes[si]
	pol := &diffPolicies[w.c.policy(w.rng, si)]
	ctx, query := pol.apply(w.ctx, sh.query(k))
	raw, wrong, err := sh.run(ctx, tx, query, k)
	if err != nil {
		return err
	}
	if wrong != "" {
		w.c.violation(vTxRead, fmt.Sprintf("inside a transaction that %s, %q %v under %s returned %s", what, query, sh.args(k), pol.name, wrong))
		return nil
	}
	if got := sh.versions(k, raw[:sh.cols])[col]; got != want {
		w.c.violation(vTxRead, fmt.Sprintf("inside a transaction that %s, %q %v under %s returned %v (version %d), want version %d",
			what, query, sh.args(k), pol.name, raw[:sh.cols], got, want))
	}
	return nil
}

// Rolled-back writes store values no committed state has: a poisoned
// version is negative, a poisoned row of a count weighs diffPoison.
const diffPoison = 1_000_000

// diffEpochs: many writers to the same tables, every kind of write.
func diffEpochs(t *testing.T, admin *sql.DB, id string) *diffClass {
	const rows, groups = 12, 6
	ep, eq, ei := counterTable(t, admin, "dif_ep_"+id, rows), counterTable(t, admin, "dif_eq_"+id, rows), "dif_ei_"+id
	mustExec(t, admin,
		fmt.Sprintf(`CREATE TABLE %s (grp int NOT NULL, w int NOT NULL)`, ei),
		fmt.Sprintf(`CREATE INDEX ON %s (grp)`, ei))
	cleanupExec(t, admin, "DROP TABLE IF EXISTS "+ei)

	c := &diffClass{
		catches:  "read-your-writes across concurrent writes to one table (epochs that move backwards), rolled-back values",
		readers:  4,
		writers:  4,
		pause:    0, // as many concurrent bumps of one table's epoch as possible
		policies: []uint8{polCoalesce, polCtxTTL, polSoftHard, polDefault},
	}
	pBase := c.addObjs(ep, rows, 0, 0)
	qBase := c.addObjs(eq, rows, 1, 1)
	gBase := c.addObjs(ei, groups, 2, 0)
	c.shapes = []*diffShape{
		pointShape("point", ep, rows, pBase),
		{
			name: "join", cols: 2, keys: rows,
			sql:  fmt.Sprintf("SELECT p.ver, q.ver FROM %s p JOIN %s q ON q.id = p.id WHERE p.id = $1", ep, eq),
			args: func(k int) []any { return []any{k} },
			objs: func(k int) []int { return []int{pBase + k, qBase + k} },
		},
		{
			name: "count", cols: 2, keys: groups,
			sql:  fmt.Sprintf("SELECT count(*), coalesce(sum(w), 0) FROM %s WHERE grp = $1", ei),
			args: func(k int) []any { return []any{k} },
			objs: func(k int) []int { return []int{gBase + k} },
			decode: func(_ int, raw []int64) []int64 {
				if raw[0] != raw[1] {
					return []int64{-1} // a poisoned row is counted
				}
				return raw[:1]
			},
		},
	}
	updP := fmt.Sprintf("UPDATE %s SET ver = ver + 1 WHERE id = $1 RETURNING ver", ep)
	updQ := fmt.Sprintf("UPDATE %s SET ver = ver + 1 WHERE id = $1 RETURNING ver", eq)
	ins := fmt.Sprintf("INSERT INTO %s (grp, w) VALUES ($1, $2)", ei)
	poison := fmt.Sprintf("UPDATE %s SET ver = -%d - ver WHERE id = $1 RETURNING ver", ep, diffPoison)
	c.write = func(w *diffWriter) {
		k, g := w.own(rows), w.own(groups)
		p, q, n := c.objs[pBase+k], c.objs[qBase+k], c.objs[gBase+g]
		switch x := w.rng.IntN(10); {
		case x < 3:
			w.update("UPDATE "+ep, p, updP, k)
		case x < 5:
			w.update("UPDATE "+eq, q, updQ, k)
		case x < 6:
			start := w.now()
			if _, err := w.wdb.ExecContext(w.ctx, ins, g, 1); err != nil {
				w.failed(start, "INSERT "+ei, err, n)
				return
			}
			w.done(start, "INSERT "+ei, n)
		case x < 8:
			w.tx("transaction (committed)", true, func(tx *sql.Tx) error {
				for _, u := range []struct {
					o     *diffObj
					query string
				}{{p, updP}, {q, updQ}} {
					got, err := scalarInt(w.ctx, tx, u.query, k)
					if err == nil {
						err = w.next(u.o, got, "transaction (committed)")
					}
					if err != nil {
						return err
					}
				}
				_, err := tx.ExecContext(w.ctx, ins, g, 1)
				return err
			}, p, q, n)
		default:
			w.tx("transaction (rolled back)", false, func(tx *sql.Tx) error {
				bad, err := scalarInt(w.ctx, tx, poison, k)
				if err != nil {
					return err
				}
				if err := w.txRead(tx, 0, k, 0, bad, "poisoned the row"); err != nil {
					return err
				}
				if _, err := tx.ExecContext(w.ctx, ins, g, diffPoison); err != nil {
					return err
				}
				return w.txRead(tx, 2, g, 0, -1, "added a poisoned row")
			}, p, n)
		}
	}
	return c
}

// diffVolatile: writes through a VOLATILE function called by SELECT, under
// every policy.
func diffVolatile(t *testing.T, admin *sql.DB, id string) *diffClass {
	const rows = 6
	vo, fn := counterTable(t, admin, "dif_vo_"+id, rows), "dif_vf_"+id
	mustExec(t, admin,
		fmt.Sprintf(`CREATE FUNCTION %s(k int) RETURNS bigint LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE r bigint;
BEGIN
	UPDATE %s SET ver = ver + 1 WHERE id = k RETURNING ver INTO r;
	RETURN r;
END
$fn$`, fn, vo))
	cleanupExec(t, admin, fmt.Sprintf("DROP FUNCTION IF EXISTS %s(int)", fn))

	c := &diffClass{
		catches:  "a volatile function's result shared or cached under a TTL policy (the write it makes is lost), and its call not counting as a write",
		readers:  3,
		writers:  2,
		pause:    2 * time.Millisecond,
		policies: []uint8{polCoalesce, polCtxTTL, polSoftHard, polDefault},
	}
	base := c.addObjs(vo, rows, 0, 0)
	c.shapes = []*diffShape{pointShape("point", vo, rows, base)}
	call := fmt.Sprintf("SELECT %s($1)", fn)
	c.write = func(w *diffWriter) {
		k := w.own(rows)
		o := c.objs[base+k]
		var ctx context.Context
		var query, via string
		if x := w.rng.IntN(len(diffPolicies) + 1); x == len(diffPolicies) {
			ctx, query, via = w.ctx, "/* sqlflight: coalesce */ "+call, "SELECT "+fn+"() under annotation coalesce"
		} else {
			pol := &diffPolicies[x]
			ctx, query = pol.apply(w.ctx, call)
			via = "SELECT " + fn + "() under " + pol.name
		}
		start := w.now()
		got, err := scalarInt(ctx, w.wdb, query, k)
		if err == nil {
			err = w.next(o, got, via)
		}
		if err != nil {
			w.failed(start, via, err, o)
			return
		}
		w.done(start, via, o)
	}
	return c
}

// diffCascade: the read table is written only through ON DELETE CASCADE.
// Each group's children are numbered; deleting the parent of the smallest
// one moves the group's smallest child number (its version) up by one.
func diffCascade(t *testing.T, admin *sql.DB, id string) *diffClass {
	const groups, window, grow = 6, 100, 300
	const span = 1_000_000_000
	cp, cc := "dif_cp_"+id, "dif_cc_"+id
	mustExec(t, admin,
		fmt.Sprintf(`CREATE TABLE %s (id bigint PRIMARY KEY)`, cp),
		fmt.Sprintf(`CREATE TABLE %s (n bigint PRIMARY KEY, grp int NOT NULL, pid bigint NOT NULL REFERENCES %s (id) ON DELETE CASCADE)`, cc, cp),
		fmt.Sprintf(`CREATE INDEX ON %s (grp, n)`, cc),
		fmt.Sprintf(`CREATE INDEX ON %s (pid)`, cc),
		fmt.Sprintf(`INSERT INTO %s SELECT g::bigint * %d + i FROM generate_series(0, %d) g, generate_series(0, %d) i`, cp, span, groups-1, window-1),
		fmt.Sprintf(`INSERT INTO %s SELECT g::bigint * %d + i, g, g::bigint * %d + i FROM generate_series(0, %d) g, generate_series(0, %d) i`, cc, span, span, groups-1, window-1))
	cleanupExec(t, admin, "DROP TABLE IF EXISTS "+cc, "DROP TABLE IF EXISTS "+cp)

	c := &diffClass{
		catches:  "a write that reaches the read table through ON DELETE CASCADE not invalidating it",
		readers:  3,
		writers:  2,
		pause:    2 * time.Millisecond,
		policies: []uint8{polCoalesce, polCtxTTL, polSoftHard, polDefault},
	}
	base := c.addObjs(cc, groups, 0, 0)
	c.shapes = []*diffShape{{
		name: "child-min", cols: 1, keys: groups,
		sql:    fmt.Sprintf("SELECT min(n) FROM %s WHERE grp = $1", cc),
		args:   func(k int) []any { return []any{k} },
		objs:   func(k int) []int { return []int{base + k} },
		decode: func(k int, raw []int64) []int64 { return []int64{raw[0] - int64(k)*span} },
	}}
	del := fmt.Sprintf("DELETE FROM %s WHERE id = $1", cp)
	addP := fmt.Sprintf("INSERT INTO %s SELECT n FROM generate_series($1::bigint, $2::bigint) n", cp)
	addC := fmt.Sprintf("INSERT INTO %s SELECT n, $3::int, n FROM generate_series($1::bigint, $2::bigint) n", cc)
	c.write = func(w *diffWriter) {
		if w.hi == nil {
			w.hi = map[int]int64{}
		}
		g := w.own(groups)
		o := c.objs[base+g]
		hi, ok := w.hi[g]
		if !ok {
			hi = window
		}
		lo := o.cur() // the smallest child left, and the version
		first := int64(g) * span
		deleted := func(res sql.Result) error {
			if n, err := res.RowsAffected(); err != nil || n != 1 {
				return fmt.Errorf("DELETE affected %d rows (%v), want 1", n, err)
			}
			return nil
		}
		switch x := w.rng.IntN(10); {
		case hi-lo < 10:
			// Rarely: more children, so that the group never runs out.
			start := w.now()
			_, err := w.wdb.ExecContext(w.ctx, addP, first+hi, first+hi+grow-1)
			if err == nil {
				_, err = w.wdb.ExecContext(w.ctx, addC, first+hi, first+hi+grow-1, g)
			}
			if err != nil {
				w.failed(start, "INSERT children", err, o)
				return
			}
			w.hi[g] = hi + grow
			w.c.writeOps.Add(1)
		case x < 7:
			start := w.now()
			res, err := w.wdb.ExecContext(w.ctx, del, first+lo)
			if err == nil {
				err = deleted(res)
			}
			if err != nil {
				w.failed(start, "DELETE parent", err, o)
				return
			}
			w.done(start, "DELETE parent (cascade)", o)
		case x < 9:
			w.tx("DELETE parent in a transaction (committed)", true, func(tx *sql.Tx) error {
				res, err := tx.ExecContext(w.ctx, del, first+lo)
				if err == nil {
					err = deleted(res)
				}
				return err
			}, o)
		default:
			w.tx("DELETE parent in a transaction (rolled back)", false, func(tx *sql.Tx) error {
				res, err := tx.ExecContext(w.ctx, del, first+lo)
				if err == nil {
					err = deleted(res)
				}
				if err != nil {
					return err
				}
				return w.txRead(tx, 0, g, 0, lo+1, "deleted the parent of the smallest child")
			}, o)
		}
	}
	return c
}

// diffTrigger: the read table is written only by a trigger on another.
func diffTrigger(t *testing.T, admin *sql.DB, id string) *diffClass {
	const rows = 8
	ts, tt := counterTable(t, admin, "dif_ts_"+id, rows), counterTable(t, admin, "dif_tt_"+id, rows)
	fn, tr := "dif_tf_"+id, "dif_tr_"+id
	mustExec(t, admin,
		fmt.Sprintf(`CREATE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
	UPDATE %s SET ver = NEW.ver WHERE id = NEW.id;
	RETURN NEW;
END
$fn$`, fn, tt),
		fmt.Sprintf(`CREATE TRIGGER %s AFTER UPDATE ON %s FOR EACH ROW EXECUTE FUNCTION %s()`, tr, ts, fn))
	cleanupExec(t, admin, fmt.Sprintf("DROP TRIGGER IF EXISTS %s ON %s", tr, ts), fmt.Sprintf("DROP FUNCTION IF EXISTS %s()", fn))

	c := &diffClass{
		catches:  "a write to a table whose trigger writes the read table not invalidating it",
		readers:  3,
		writers:  2,
		pause:    2 * time.Millisecond,
		policies: []uint8{polCoalesce, polCtxTTL, polSoftHard, polDefault},
	}
	base := c.addObjs(tt, rows, 0, 0)
	c.shapes = []*diffShape{pointShape("trigger-target", tt, rows, base)}
	upd := fmt.Sprintf("UPDATE %s SET ver = ver + 1 WHERE id = $1 RETURNING ver", ts)
	c.write = func(w *diffWriter) {
		k := w.own(rows)
		o := c.objs[base+k]
		if w.rng.IntN(5) > 0 {
			w.update("UPDATE "+ts+" (trigger)", o, upd, k)
			return
		}
		w.tx("UPDATE "+ts+" (trigger) in a transaction", true, func(tx *sql.Tx) error {
			got, err := scalarInt(w.ctx, tx, upd, k)
			if err == nil {
				err = w.next(o, got, "UPDATE (trigger) in a transaction")
			}
			return err
		}, o)
	}
	return c
}

// diffView: reads of a view whose base table is written, and reads of a
// base table written through an updatable view.
func diffView(t *testing.T, admin *sql.DB, id string) *diffClass {
	const rows = 8
	vb, wb := counterTable(t, admin, "dif_vb_"+id, rows), counterTable(t, admin, "dif_wb_"+id, rows)
	vv, wv := "dif_vv_"+id, "dif_wv_"+id
	mustExec(t, admin,
		fmt.Sprintf(`CREATE VIEW %s AS SELECT id, ver FROM %s`, vv, vb),
		fmt.Sprintf(`CREATE VIEW %s AS SELECT id, ver FROM %s`, wv, wb))
	cleanupExec(t, admin, "DROP VIEW IF EXISTS "+vv, "DROP VIEW IF EXISTS "+wv)

	c := &diffClass{
		catches:  "a view's read not depending on its base table, and a write through a view not invalidating its base table",
		readers:  3,
		writers:  2,
		pause:    2 * time.Millisecond,
		policies: []uint8{polCoalesce, polCtxTTL, polSoftHard, polDefault},
	}
	vBase := c.addObjs(vb+" (read through "+vv+")", rows, 0, 0)
	wBase := c.addObjs(wb+" (written through "+wv+")", rows, 1, 0)
	c.shapes = []*diffShape{pointShape("view", vv, rows, vBase), pointShape("base-of-written-view", wb, rows, wBase)}
	updBase := fmt.Sprintf("UPDATE %s SET ver = ver + 1 WHERE id = $1 RETURNING ver", vb)
	updView := fmt.Sprintf("UPDATE %s SET ver = ver + 1 WHERE id = $1 RETURNING ver", wv)
	c.write = func(w *diffWriter) {
		k := w.own(rows)
		if w.rng.IntN(2) == 0 {
			w.update("UPDATE "+vb+" (base of "+vv+")", c.objs[vBase+k], updBase, k)
		} else {
			w.update("UPDATE "+wv+" (view of "+wb+")", c.objs[wBase+k], updView, k)
		}
	}
	return c
}

// diffStrict: one statement under policies from ttl=1s to coalescing only,
// written through another Shield.
func diffStrict(t *testing.T, admin *sql.DB, id string) *diffClass {
	const rows = 4
	st := counterTable(t, admin, "dif_st_"+id, rows)

	c := &diffClass{
		catches:  "a reader served an entry older than its own policy allows (filled under a longer TTL)",
		writeVia: viaForeign,
		readers:  4,
		writers:  1,
		pause:    2 * time.Millisecond,
		policies: []uint8{polCoalesce, polCtxTTL, polSoftHard, polDefault, polTTL1s, polTTL1s, polTTL50ms, polTTL50ms},
	}
	base := c.addObjs(st, rows, 0, 0)
	c.shapes = []*diffShape{pointShape("point", st, rows, base)}
	upd := fmt.Sprintf("UPDATE %s SET ver = ver + 1 WHERE id = $1 RETURNING ver", st)
	c.write = func(w *diffWriter) {
		k := w.own(rows)
		w.update("UPDATE "+st+" through another Shield", c.objs[base+k], upd, k)
	}
	return c
}

// counterTable creates table name with rows versioned rows (ver 0), dropped
// when the test ends, and returns its name.
func counterTable(t *testing.T, admin *sql.DB, name string, rows int) string {
	mustExec(t, admin,
		fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, ver bigint NOT NULL)`, name),
		fmt.Sprintf(`INSERT INTO %s SELECT g, 0 FROM generate_series(0, %d) g`, name, rows-1))
	cleanupExec(t, admin, "DROP TABLE IF EXISTS "+name)
	return name
}

// diffInvalidate: writes behind the Shield's back, then Invalidate.
func diffInvalidate(t *testing.T, admin *sql.DB, id string) *diffClass {
	const rows = 4
	mi := counterTable(t, admin, "dif_mi_"+id, rows)

	c := &diffClass{
		catches:  "Shield.Invalidate not making later reads see a write made behind the Shield's back",
		writeVia: viaRaw,
		readers:  2,
		writers:  1,
		pause:    2 * time.Millisecond,
		policies: []uint8{polCoalesce, polCtxTTL, polSoftHard, polDefault},
	}
	base := c.addObjs(mi, rows, 0, 0)
	c.shapes = []*diffShape{pointShape("point", mi, rows, base)}
	upd := fmt.Sprintf("UPDATE %s SET ver = ver + 1 WHERE id = $1 RETURNING ver", mi)
	c.write = func(w *diffWriter) {
		k := w.own(rows)
		o := c.objs[base+k]
		const via = "UPDATE on pgx, then Invalidate"
		start := w.now()
		got, err := scalarInt(w.ctx, w.wdb, upd, k)
		if err == nil {
			err = w.next(o, got, via)
		}
		c.sh.Invalidate(mi) // before the write counts as returned, whatever happened
		if err != nil {
			w.failed(start, via, err, o)
			return
		}
		w.done(start, via, o)
	}
	return c
}

// diffRows: row-level invalidation. Row id belongs to tenant id % tenants;
// writer w owns the ids and tenants equal to w modulo the writers, so one
// writer moves a row and its tenant's sum together.
func diffRows(t *testing.T, admin *sql.DB, id string) *diffClass {
	const rows, tenants, writers = 16, 4, 2
	c := &diffClass{
		catches:  "row-level invalidation leaving a read of a row a write touched (by id, by tenant, IN lists, transactions)",
		readers:  4,
		writers:  writers,
		policies: []uint8{polCoalesce, polCtxTTL, polSoftHard, polDefault, polTTL1s},
	}
	rowsWorkload(t, admin, c, "dif_rw_"+id, rows, tenants)
	return c
}

// rowsWorkload creates table rt of rows rows, row id of tenant id %
// tenants, and gives c the rows workload's objects, shapes and writes on
// it. Writer w owns the ids and tenants equal to w modulo c.writers, which
// must divide tenants.
func rowsWorkload(t *testing.T, admin *sql.DB, c *diffClass, rt string, rows, tenants int) {
	writers := c.writers
	mustExec(t, admin,
		fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, tenant int NOT NULL, ver bigint NOT NULL)`, rt),
		fmt.Sprintf(`CREATE INDEX ON %s (tenant)`, rt),
		fmt.Sprintf(`INSERT INTO %s SELECT g, g %% %d, 0 FROM generate_series(0, %d) g`, rt, tenants, rows-1))
	cleanupExec(t, admin, "DROP TABLE IF EXISTS "+rt)

	rBase := c.addObjs(rt, rows, 0, 0)
	tBase := c.addObjs(rt+".tenant", tenants, 1, 0)
	pair := func(k int) int { return (k + writers) % rows } // same owner, another tenant
	c.shapes = []*diffShape{
		pointShape("by id", rt, rows, rBase),
		{
			name: "by tenant", cols: 1, keys: tenants,
			sql:  fmt.Sprintf("SELECT coalesce(sum(ver), 0) FROM %s WHERE tenant = $1", rt),
			args: func(k int) []any { return []any{k} },
			objs: func(k int) []int { return []int{tBase + k} },
		},
		{
			name: "by tenant and id", cols: 1, keys: rows,
			sql:  fmt.Sprintf("SELECT ver FROM %s WHERE tenant = $1 AND id = $2", rt),
			args: func(k int) []any { return []any{k % tenants, k} },
			objs: func(k int) []int { return []int{rBase + k} },
		},
		{
			name: "IN list", cols: 2, keys: rows,
			sql:  fmt.Sprintf("SELECT min(ver) FILTER (WHERE id = $1), min(ver) FILTER (WHERE id = $2) FROM %s WHERE id IN ($1, $2)", rt),
			args: func(k int) []any { return []any{k, pair(k)} },
			objs: func(k int) []int { return []int{rBase + k, rBase + pair(k)} },
		},
		{
			name: "literal", cols: 1, keys: 1,
			sql:  fmt.Sprintf("SELECT ver FROM %s WHERE id = 3", rt),
			args: func(int) []any { return nil },
			objs: func(int) []int { return []int{rBase + 3} },
		},
	}
	byID := fmt.Sprintf("UPDATE %s SET ver = ver + 1 WHERE id = $1 RETURNING ver", rt)
	byBoth := fmt.Sprintf("UPDATE %s SET ver = ver + 1 WHERE tenant = $1 AND id = $2 RETURNING ver", rt)
	byList := fmt.Sprintf("UPDATE %s SET ver = ver + 1 WHERE id IN ($1, $2)", rt)
	unproven := fmt.Sprintf("UPDATE %s SET ver = ver + 1 WHERE id = $1 AND ver >= 0 RETURNING ver", rt)
	literal := fmt.Sprintf("UPDATE %s SET ver = ver + 1 WHERE id = 3 RETURNING ver", rt)
	c.write = func(w *diffWriter) {
		k := w.own(rows)
		o, ten := c.objs[rBase+k], c.objs[tBase+k%tenants]
		one := func(via, query string, args ...any) {
			start := w.now()
			got, err := scalarInt(w.ctx, w.wdb, query, args...)
			if err == nil {
				err = w.next(o, got, via)
			}
			if err != nil {
				w.failed(start, via, err, o, ten)
				return
			}
			w.done(start, via, o, ten)
		}
		switch x := w.rng.IntN(10); {
		case x < 3:
			one("UPDATE by id", byID, k)
		case x < 5:
			one("UPDATE by tenant and id", byBoth, k%tenants, k)
		case x < 6 && k == 3:
			one("UPDATE by a literal id", literal)
		case x < 6:
			one("UPDATE not proven", unproven, k)
		case x < 8:
			p := pair(k)
			start := w.now()
			objs := []*diffObj{o, ten, c.objs[rBase+p], c.objs[tBase+p%tenants]}
			res, err := w.wdb.ExecContext(w.ctx, byList, k, p)
			if err == nil {
				if n, _ := res.RowsAffected(); n != 2 {
					err = fmt.Errorf("IN-list UPDATE touched %d rows", n)
				}
			}
			if err != nil {
				w.failed(start, "UPDATE IN list", err, objs...)
				return
			}
			w.done(start, "UPDATE IN list", objs...)
		default:
			p := pair(k)
			po := c.objs[rBase+p]
			w.tx("transaction of two rows", true, func(tx *sql.Tx) error {
				for _, u := range []struct {
					o *diffObj
					k int
				}{{o, k}, {po, p}} {
					got, err := scalarInt(w.ctx, tx, byID, u.k)
					if err == nil {
						err = w.next(u.o, got, "transaction of two rows")
					}
					if err != nil {
						return err
					}
				}
				return nil
			}, o, ten, po, c.objs[tBase+p%tenants])
		}
	}
}
