// Command bench runs raw pgx, a hand-wired x/sync singleflight, a hand-wired
// sturdyc cache and sqlflight side by side against one PostgreSQL, in one
// process and one run, and prints a Markdown report of ratios vs raw pgx.
// The herd also runs the ideal in-driver floor (floor.go), a driver with no
// database that coalesces inside QueryContext, and compares each p99 with
// its own.
//
//	go run ./bench -dsn postgres://postgres@127.0.0.1:5432/test?sslmode=disable
//
// Origin executions are counted by PostgreSQL itself: every benchmark query
// calls a plpgsql function that bumps a sequence of this run.
//
// The manykeys workload (manykeys.go) releases many reads of one statement
// shape with distinct ids together and counts the statements that reached
// the server in pg_stat_statements (which the server must preload).
//
// The Zipf mix runs twice: with the writes through each contender, and with
// the writes made by a plain pgx pool that tells no cache anything, where
// sqlflight also runs with each change feed. For those the role must be
// able to create a publication on the bench table and triggers on it, and
// the server needs wal_level = logical (leave it out with -only).
package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"flag"
	"fmt"
	"math"
	mrand "math/rand"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlflight/sqlflight"
)

type config struct {
	dsn          string
	tpIDs        int
	tpCallers    []int
	tpRounds     int
	tpFor        time.Duration
	tpKinds      string // comma-separated contender numbers (1-based); "" for all
	cpuProfile   string
	maxConns     int
	herdCallers  int
	herdRounds   int
	herdSleep    time.Duration
	expReaders   int
	expEvery     time.Duration
	expFor       time.Duration
	expSoft      time.Duration
	expHard      time.Duration
	hitIters     int
	writeIters   int
	zipfOps      int
	zipfWorkers  int
	zipfIDs      int
	zipfS        float64
	zipfWritePct int
	zipfRange    bool
	zipfTTL      time.Duration
	zipfLag      time.Duration
	mkRows       int
	mkCallers    int
	mkKeys       int
	mkEach       int
	mkAbsent     int
	mkSingle     int
	mkRounds     int
	only         string
}

// result is one contender × workload.
type result struct {
	ops     int     // reads (or writes for the write workload)
	origin  int64   // executions PostgreSQL saw for the measured statement
	mean    float64 // ns/op (wall, per caller)
	p50     time.Duration
	p99     time.Duration
	perHerd []int64       // origin executions of each herd (herd workload)
	floor   bool          // the ideal in-driver floor: its origins are its own timers
	waited  int64         // reads that waited on the database (reads − cache hits)
	allocs  float64       // heap allocations per op (process-wide runtime.MemStats)
	stale   int64         // reads older than the last write committed before they began
	late    int64         // stale reads that began more than cfg.zipfLag after the write that outdated them
	oldest  time.Duration // the most a stale read began after the write that outdated it
	note    string        // what the contender adds (its feed's state)
	errs    int64
	elapsed time.Duration
}

type env struct {
	id    string
	cfg   config
	admin *sql.DB
	table string
	rseq  string // bumped by every read origin execution
	wseq  string // bumped by every write
	cnt   string // read counter function
	wcnt  string // write counter function
	slow  string // ~herdSleep function, one row
	herd  string // ~herdSleep function, herdRowCount rows
	mk    string // the manykeys table (id, v, n), "" when manykeys does not run
	pub   string // the replication feed's publication (FOR TABLE table), while one runs
	known []atomic.Int64
	// commits[id] holds when each version of row id was seen committed
	// (by its writer, when the write returned), indexed by version.
	commits []commitLog
}

type commitLog struct {
	mu sync.Mutex
	at []time.Time
}

func main() {
	var c config
	flag.StringVar(&c.dsn, "dsn", os.Getenv("SQLFLIGHT_POSTGRES_DSN"), "PostgreSQL DSN")
	flag.IntVar(&c.maxConns, "maxconns", 40, "max open connections of each contender's pool (max_connections is shared)")
	flag.IntVar(&c.herdCallers, "herd-callers", 1000, "herd: callers released at once")
	flag.IntVar(&c.herdRounds, "herd-rounds", 5, "herd: rounds (a new key each); the table shows medians over them")
	flag.DurationVar(&c.herdSleep, "slow", 20*time.Millisecond, "duration of the slow query")
	flag.IntVar(&c.expReaders, "exp-readers", 200, "expiry herd: paced readers")
	flag.DurationVar(&c.expEvery, "exp-every", 5*time.Millisecond, "expiry herd: one read per reader each")
	flag.DurationVar(&c.expFor, "exp-for", 2*time.Second, "expiry herd: duration per contender")
	flag.DurationVar(&c.expSoft, "exp-soft", 100*time.Millisecond, "expiry herd: soft TTL (sturdyc TTL)")
	flag.DurationVar(&c.expHard, "exp-hard", 2*time.Second, "expiry herd: hard TTL (sqlflight only)")
	flag.IntVar(&c.hitIters, "hit-iters", 1000, "hit path: sequential reads per contender and shape")
	flag.IntVar(&c.writeIters, "write-iters", 1000, "pass-through writes per contender")
	flag.IntVar(&c.zipfOps, "zipf-ops", 20000, "zipf mix: operations per contender")
	flag.IntVar(&c.zipfWorkers, "zipf-workers", 32, "zipf mix: concurrent workers")
	flag.IntVar(&c.zipfIDs, "zipf-ids", 10000, "zipf mix: distinct ids (table rows)")
	flag.Float64Var(&c.zipfS, "zipf-s", 1.1, "zipf mix: exponent s (> 1)")
	flag.IntVar(&c.zipfWritePct, "zipf-writes", 10, "zipf mix: percent of operations that are UPDATEs")
	flag.DurationVar(&c.zipfTTL, "zipf-ttl", 5*time.Second, "zipf mix: cache TTL (sturdyc, sqlflight)")
	flag.BoolVar(&c.zipfRange, "zipf-range", false, "zipf mix: read each row as a range (id >= $1 AND id < $1 + 1: judged by its table) instead of id = $1 (tagged by its row); writes stay by id = $1")
	flag.DurationVar(&c.zipfLag, "zipf-lag", 10*time.Millisecond, "zipf mix: stale reads that began more than this after the write that outdated them are counted as beyond the feed's lag")
	flag.IntVar(&c.tpIDs, "throughput-ids", 100000, "throughput: rows of the accounts table (ids drawn uniformly)")
	tpCallers := flag.String("throughput-callers", "16,64", "throughput: comma-separated numbers of callers, one connection each")
	flag.IntVar(&c.tpRounds, "throughput-rounds", 3, "throughput: interleaved rounds per contender")
	flag.DurationVar(&c.tpFor, "throughput-for", 2*time.Second, "throughput: measured duration per contender and round (after a quarter of it as warm-up)")
	flag.StringVar(&c.tpKinds, "throughput-kinds", "", "throughput: comma-separated contenders to run, by their number in the table (1 is raw pgx); default all")
	flag.IntVar(&c.mkRows, "manykeys-rows", 20000, "manykeys: rows of its table (id 1…N, v = 'v' || id, n = id * 7)")
	flag.IntVar(&c.mkCallers, "manykeys-callers", 1000, "manykeys A: callers released together, each with a distinct id of its own")
	flag.IntVar(&c.mkKeys, "manykeys-keys", 100, "manykeys B: distinct present ids")
	flag.IntVar(&c.mkEach, "manykeys-each", 10, "manykeys B: callers per present id")
	flag.IntVar(&c.mkAbsent, "manykeys-absent", 100, "manykeys B: callers of ids absent from the table, one each")
	flag.IntVar(&c.mkSingle, "manykeys-single", 20, "manykeys: lone reads per contender and round (their median is the single read)")
	flag.IntVar(&c.mkRounds, "manykeys-rounds", 3, "manykeys: interleaved rounds (new ids each); the tables show medians over them")
	flag.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	flag.StringVar(&c.only, "only", "", "comma-separated workloads to run (herd,expiry,hit,write,zipf,zipf-outside,throughput,manykeys; steady is throughput's old name); default all")
	flag.Parse()
	for _, f := range strings.Split(*tpCallers, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			fmt.Fprintf(os.Stderr, "bench: -throughput-callers: %q is not a positive number\n", f)
			os.Exit(2)
		}
		c.tpCallers = append(c.tpCallers, n)
	}
	if c.dsn == "" {
		fmt.Fprintln(os.Stderr, "bench: -dsn (or SQLFLIGHT_POSTGRES_DSN) is required")
		os.Exit(2)
	}
	if c.cpuProfile != "" {
		f, err := os.Create(c.cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: -cpuprofile:", err)
			os.Exit(2)
		}
		defer pprof.StopCPUProfile()
	}
	if err := run(c); err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func want(c config, w string) bool {
	if c.only == "" {
		return true
	}
	for _, s := range strings.Split(c.only, ",") {
		if strings.TrimSpace(s) == w {
			return true
		}
	}
	return false
}

func run(c config) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	admin, err := sql.Open("pgx", c.dsn)
	if err != nil {
		return err
	}
	defer admin.Close()
	admin.SetMaxOpenConns(2)
	var pgVersion string
	if err := admin.QueryRowContext(ctx, `SELECT version()`).Scan(&pgVersion); err != nil {
		return err
	}
	var maxConn string
	_ = admin.QueryRowContext(ctx, `SHOW max_connections`).Scan(&maxConn)

	e, err := setup(ctx, c, admin)
	if err != nil {
		return err
	}
	defer e.teardown()

	fmt.Printf("# sqlflight bench\n\n")
	fmt.Printf("- date: %s\n", time.Now().UTC().Format(time.RFC3339))
	fmt.Printf("- machine: %d CPUs (runtime.NumCPU), GOMAXPROCS %d, %s/%s, %s\n", runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.GOOS, runtime.GOARCH, runtime.Version())
	fmt.Printf("- PostgreSQL: %s (max_connections %s)\n", pgVersion, maxConn)
	fmt.Printf("- every contender's pool: SetMaxOpenConns(%d) and SetMaxIdleConns(%[1]d) (max_connections is shared by the run; raw pgx's herd would otherwise exceed it); pools are pre-warmed to that size, except in the herd (see there)\n", c.maxConns)
	fmt.Printf("- origin executions are counted in PostgreSQL (plpgsql functions bumping a sequence); \"waited on DB\" = reads − cache hits (origin callers + flight followers); allocs/op are process-wide runtime.MemStats mallocs ÷ ops\n")
	fmt.Printf("- cells are `value (ratio vs raw pgx)`\n")
	fmt.Printf("- Zipf mix: a read is stale when it returns a version older than the newest one whose write had returned (committed) before the read began; \"stale > %v\" counts those that began more than %v after the first write they missed returned, \"oldest\" is the most any stale read began after it\n\n", c.zipfLag, c.zipfLag)

	type wl struct {
		name, title string
		f           func(context.Context, *env, contenderKind) (result, error)
		kinds       []contenderKind
		extra       func([]result) []column // the workload's own columns
	}
	shape := "reads and writes by id = $1"
	if c.zipfRange {
		shape = "reads by id range (table-level), writes by id = $1"
	}
	wls := []wl{
		{"herd", fmt.Sprintf("1. Herd on a warm handle: %d callers × %d herds, one new key per herd, a ~%v plpgsql query returning %d rows; medians over the herds. Warm: the handle ran the query once before (its connection is open). Default pool: database/sql's (no cap, 2 idle); capped: SetMaxOpenConns(%d), SetMaxIdleConns(%[5]d). Annotation `ttl=1m` unless named", c.herdCallers, c.herdRounds, c.herdSleep, herdRowCount, c.maxConns), herd, herdKinds(c.maxConns), herdColumns(c)},
		{"expiry", fmt.Sprintf("2. Expiry herd: %d readers, one read each %v for %v, ~%v query, soft %v (sqlflight hard %v; sturdyc TTL %v)", c.expReaders, c.expEvery, c.expFor, c.herdSleep, c.expSoft, c.expHard, c.expSoft), expiryHerd, nil, nil},
		{"hit", fmt.Sprintf("3a. Hit path, 1 row: %d sequential reads of one key (cache TTL 1m)", c.hitIters), func(ctx context.Context, e *env, k contenderKind) (result, error) { return hitPath(ctx, e, k, 1) }, nil, nil},
		{"hit", fmt.Sprintf("3b. Hit path, 25 rows: %d sequential reads of one key (cache TTL 1m)", c.hitIters), func(ctx context.Context, e *env, k contenderKind) (result, error) { return hitPath(ctx, e, k, 25) }, nil, nil},
		{"write", fmt.Sprintf("4. Pass-through writes: %d sequential `UPDATE … RETURNING` (caches invalidate the read key)", c.writeIters), writes, nil, nil},
		{"zipf", fmt.Sprintf("5a. Zipf mix, writes through each contender: %d ops, %d workers, s=%.2f over %d ids, %d%% UPDATEs, %s, cache TTL %v", c.zipfOps, c.zipfWorkers, c.zipfS, c.zipfIDs, c.zipfWritePct, shape, c.zipfTTL),
			func(ctx context.Context, e *env, k contenderKind) (result, error) { return zipfMix(ctx, e, k, false) }, nil, zipfColumns},
		{"zipf-outside", fmt.Sprintf("5b. Zipf mix, writes by a separate plain pgx client: %d ops, %d workers, s=%.2f over %d ids, %d%% UPDATEs, %s, cache TTL %v", c.zipfOps, c.zipfWorkers, c.zipfS, c.zipfIDs, c.zipfWritePct, shape, c.zipfTTL),
			func(ctx context.Context, e *env, k contenderKind) (result, error) { return zipfMix(ctx, e, k, true) }, outsideKinds, zipfColumns},
	}
	for _, w := range wls {
		if !want(c, w.name) {
			continue
		}
		ks := w.kinds
		if ks == nil {
			ks = kinds
		}
		results := make([]result, len(ks))
		for i, k := range ks {
			r, err := w.f(ctx, e, k)
			if err != nil {
				return fmt.Errorf("%s / %s: %w", w.title, k.name, err)
			}
			results[i] = r
			fmt.Fprintf(os.Stderr, "done: %s / %s in %v\n", w.name, k.name, r.elapsed.Round(time.Millisecond))
		}
		var extra []column
		if w.extra != nil {
			extra = w.extra(results)
		}
		printTable(w.title, ks, results, extra)
	}
	if want(c, "throughput") || want(c, "steady") {
		if err := throughput(ctx, e); err != nil {
			return err
		}
	}
	if want(c, "manykeys") {
		return manyKeys(ctx, e)
	}
	return nil
}

func setup(ctx context.Context, c config, admin *sql.DB) (*env, error) {
	var b [5]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	e := &env{
		id:      id,
		cfg:     c,
		admin:   admin,
		table:   "public.sqlflight_bench_" + id,
		rseq:    "public.sqlflight_bench_rseq_" + id,
		wseq:    "public.sqlflight_bench_wseq_" + id,
		cnt:     "public.sqlflight_bench_cnt_" + id,
		wcnt:    "public.sqlflight_bench_wcnt_" + id,
		slow:    "public.sqlflight_bench_slow_" + id,
		herd:    "public.sqlflight_bench_herd_" + id,
		known:   make([]atomic.Int64, c.zipfIDs+1),
		commits: make([]commitLog, c.zipfIDs+1),
	}
	stmts := []string{
		fmt.Sprintf(`CREATE TABLE %s (id bigint PRIMARY KEY, v bigint NOT NULL, ver bigint NOT NULL, label text NOT NULL)`, e.table),
		fmt.Sprintf(`INSERT INTO %s SELECT g, g * 10, 0, 'label ' || g FROM generate_series(1, %d) AS g`, e.table, c.zipfIDs),
		fmt.Sprintf(`ANALYZE %s`, e.table),
		fmt.Sprintf(`CREATE SEQUENCE %s`, e.rseq),
		fmt.Sprintf(`CREATE SEQUENCE %s`, e.wseq),
		fmt.Sprintf(`SELECT nextval('%s'), nextval('%s')`, e.rseq, e.wseq),
		fmt.Sprintf(`CREATE FUNCTION %s() RETURNS int LANGUAGE plpgsql VOLATILE AS $f$ BEGIN PERFORM nextval('%s'); RETURN 1; END $f$`, e.cnt, e.rseq),
		fmt.Sprintf(`CREATE FUNCTION %s() RETURNS int LANGUAGE plpgsql VOLATILE AS $f$ BEGIN PERFORM nextval('%s'); RETURN 1; END $f$`, e.wcnt, e.wseq),
		fmt.Sprintf(`CREATE FUNCTION %s(k bigint) RETURNS TABLE(id bigint, v bigint, ver bigint, label text) LANGUAGE plpgsql VOLATILE AS $f$
BEGIN
	PERFORM nextval('%s');
	PERFORM pg_sleep(%f);
	RETURN QUERY SELECT k, k * 10, 0::bigint, 'slow'::text;
END $f$`, e.slow, e.rseq, c.herdSleep.Seconds()),
		fmt.Sprintf(`CREATE FUNCTION %s(k bigint) RETURNS TABLE(id bigint, v bigint, ver bigint, label text) LANGUAGE plpgsql VOLATILE AS $f$
BEGIN
	PERFORM nextval('%s');
	PERFORM pg_sleep(%f);
	RETURN QUERY SELECT k + g, (k + g) * 10, 0::bigint, 'herd'::text FROM generate_series(0, %d) AS g;
END $f$`, e.herd, e.rseq, c.herdSleep.Seconds(), herdRowCount-1),
	}
	if want(c, "manykeys") && c.mkRows > 0 {
		e.mk = "public.sqlflight_bench_manykeys_" + id
		stmts = append(stmts,
			fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, v text, n int)`, e.mk),
			fmt.Sprintf(`INSERT INTO %s SELECT g, 'v' || g, g * 7 FROM generate_series(1, %d) AS g`, e.mk, c.mkRows),
			fmt.Sprintf(`ANALYZE %s`, e.mk))
	}
	for _, s := range stmts {
		if _, err := admin.ExecContext(ctx, s); err != nil {
			e.teardown()
			return nil, fmt.Errorf("setup %q: %w", s, err)
		}
	}
	return e, nil
}

// tableName is the bench table's name in schema public.
func (e *env) tableName() string { return strings.TrimPrefix(e.table, "public.") }

// pubName is the publication a replication feed reads: the bench table alone.
func (e *env) pubName() string { return "sqlflight_bench_pub_" + e.id }

// prepareFeed makes what feed needs on the bench table — a publication FOR
// TABLE it, or the NOTIFY triggers on it — and returns what removes it.
func (e *env) prepareFeed(ctx context.Context, feed sqlflight.FeedMode) (undo func(), err error) {
	var do, un string
	switch feed {
	case sqlflight.FeedNone:
		return func() {}, nil
	case sqlflight.FeedReplication:
		do, un = fmt.Sprintf(`CREATE PUBLICATION %s FOR TABLE %s`, e.pubName(), e.table), fmt.Sprintf(`DROP PUBLICATION IF EXISTS %s`, e.pubName())
	case sqlflight.FeedNotify:
		do, un = sqlflight.InstallTriggersSQL("public", e.tableName()), sqlflight.UninstallTriggersSQL("public", e.tableName())
	default:
		return nil, fmt.Errorf("unknown feed %q", feed)
	}
	if _, err := e.admin.ExecContext(ctx, do); err != nil {
		return nil, fmt.Errorf("prepare feed %s: %w", feed, err)
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := e.admin.ExecContext(ctx, un); err != nil {
			fmt.Fprintf(os.Stderr, "remove feed %s: %v\n", feed, err)
		}
	}, nil
}

func (e *env) teardown() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, s := range []string{
		fmt.Sprintf(`DROP FUNCTION IF EXISTS %s(bigint)`, e.slow),
		fmt.Sprintf(`DROP FUNCTION IF EXISTS %s(bigint)`, e.herd),
		fmt.Sprintf(`DROP FUNCTION IF EXISTS %s()`, e.cnt),
		fmt.Sprintf(`DROP FUNCTION IF EXISTS %s()`, e.wcnt),
		fmt.Sprintf(`DROP SEQUENCE IF EXISTS %s`, e.rseq),
		fmt.Sprintf(`DROP SEQUENCE IF EXISTS %s`, e.wseq),
		fmt.Sprintf(`DROP PUBLICATION IF EXISTS %s`, e.pubName()),
		sqlflight.UninstallTriggersSQL("public", e.tableName()),
		fmt.Sprintf(`DROP TABLE IF EXISTS %s`, e.table),
		fmt.Sprintf(`DROP TABLE IF EXISTS %s`, "public.sqlflight_bench_manykeys_"+e.id),
	} {
		if _, err := e.admin.ExecContext(ctx, s); err != nil {
			fmt.Fprintf(os.Stderr, "teardown %q: %v\n", s, err)
		}
	}
}

func (e *env) seqValue(ctx context.Context, seq string) int64 {
	var v int64
	if err := e.admin.QueryRowContext(ctx, `SELECT last_value FROM `+seq).Scan(&v); err != nil {
		panic(err)
	}
	return v
}

// pointQuery reads n rows starting at id $1 and calls the read counter once
// (a FROM-clause function scan runs once per statement).
func (e *env) pointQuery(ann string, n int) string {
	// The counter is VOLATILE (it counts): pure= says the result may be
	// shared all the same, which nothing else can.
	return fmt.Sprintf(`/* sqlflight: %s tables=%s pure=%s */ SELECT t.id, t.v, t.ver, t.label FROM %s() AS c, %s AS t WHERE t.id >= $1 AND t.id < $1 + %d ORDER BY t.id`,
		ann, strings.TrimPrefix(e.table, "public."), e.cnt, e.cnt, e.table, n)
}

// keyQuery reads the row of id $1 by equality (a read sqlflight tags by
// its row), calling the read counter once (once per row returned).
func (e *env) keyQuery(ann string) string {
	return fmt.Sprintf(`/* sqlflight: %s tables=%s pure=%s */ SELECT t.id, t.v * %s(), t.ver, t.label FROM %s AS t WHERE t.id = $1`,
		ann, strings.TrimPrefix(e.table, "public."), e.cnt, e.cnt, e.table)
}

// outsideWriteQuery is keyWriteQuery as a client that knows nothing of
// sqlflight writes it.
func (e *env) outsideWriteQuery() string {
	return fmt.Sprintf(`UPDATE %s SET v = v + 1, ver = ver + 1 WHERE id = $1 RETURNING ver`, e.table)
}

// keyWriteQuery updates the row of id $1 by equality (a write sqlflight
// pins to that row; tables= and pure= say the counter writes no table and
// leaves the session alone).
func (e *env) keyWriteQuery() string {
	return fmt.Sprintf(`/* sqlflight: tables=%s pure=%s */ UPDATE %s SET v = v + %s(), ver = ver + 1 WHERE id = $1 RETURNING ver`,
		strings.TrimPrefix(e.table, "public."), e.wcnt, e.table, e.wcnt)
}

func (e *env) slowQuery(ann string) string { return fnQuery(e.slow, ann) }

// herdQuery reads the herdRowCount rows of the herd function for key $1.
func (e *env) herdQuery(ann string) string { return fnQuery(e.herd, ann) }

// fnQuery reads every row of the set-returning function fn($1); pure= says
// that the function, VOLATILE because it counts, may be shared all the same.
func fnQuery(fn, ann string) string {
	return fmt.Sprintf(`/* sqlflight: %s pure=%s */ SELECT * FROM %s($1)`, ann, fn, fn)
}

func (e *env) writeQuery() string {
	return fmt.Sprintf(`UPDATE %s SET v = v + 1, ver = ver + 1 WHERE id = $1 AND %s() = 1 RETURNING ver`, e.table, e.wcnt)
}

// open opens contender k (with its feed, prepared on the bench table) and
// pre-warms its pool to maxConns connections.
func (e *env) open(ctx context.Context, k contenderKind, ttl time.Duration) (contender, error) {
	c, err := e.openHandle(ctx, k, ttl, e.cfg.maxConns)
	if err != nil {
		return nil, err
	}
	db := c.pool()
	conns := make([]*sql.Conn, 0, e.cfg.maxConns)
	for range e.cfg.maxConns {
		cn, err := db.Conn(ctx)
		if err != nil {
			c.close()
			return nil, err
		}
		if err := cn.PingContext(ctx); err != nil {
			c.close()
			return nil, err
		}
		conns = append(conns, cn)
	}
	for _, cn := range conns {
		_ = cn.Close()
	}
	return c, nil
}

// openHandle opens contender k (with its feed, prepared on the bench table)
// with its pool capped at maxConns (0: database/sql's default pool); it
// opens no connection.
func (e *env) openHandle(ctx context.Context, k contenderKind, ttl time.Duration, maxConns int) (contender, error) {
	undo, err := e.prepareFeed(ctx, k.feed)
	if err != nil {
		return nil, err
	}
	a := openArgs{dsn: e.cfg.dsn, maxConns: maxConns, origin: e.cfg.herdSleep, ttl: ttl, feed: k.feed}
	if k.feed == sqlflight.FeedReplication {
		a.publication = e.pubName()
	}
	c, err := k.open(a)
	if err != nil {
		undo()
		return nil, err
	}
	return &prepared{c, undo}, nil
}

// prepared is a contender whose feed's preparation is undone after it closes.
type prepared struct {
	contender
	undo func()
}

func (p *prepared) close() {
	p.contender.close()
	p.undo()
}

func (p *prepared) note() string {
	if n, ok := p.contender.(interface{ note() string }); ok {
		return n.note()
	}
	return ""
}

func mallocs() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.Mallocs
}

func percentile(lat []time.Duration, p float64) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	slices.Sort(lat)
	i := int(math.Ceil(p*float64(len(lat)))) - 1
	if i < 0 {
		i = 0
	}
	return lat[i]
}

func finish(r *result, lat []time.Duration, m0 uint64) {
	m1 := mallocs()
	summarize(r, lat)
	if r.ops > 0 {
		r.allocs = float64(m1-m0) / float64(r.ops)
	}
}

// summarize sets r's ops, mean, p50 and p99 from the latencies lat.
func summarize(r *result, lat []time.Duration) {
	r.ops = len(lat)
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	if r.ops > 0 {
		r.mean = float64(sum) / float64(r.ops)
	}
	r.p50 = percentile(lat, 0.50)
	r.p99 = percentile(lat, 0.99)
}

// --- 1. herd on a warm handle ---

// herdRowCount is how many rows the herd query returns.
const herdRowCount = 10

// herd releases cfg.herdCallers callers at once on one new key, once per
// round, on a handle that has run the query before (its connection is
// open, sqlflight's verdict on the statement is known). mean, p50 and p99
// are medians over the herds; origins are counted per herd, by PostgreSQL
// (the floor, which has no database, counts its own timers).
func herd(ctx context.Context, e *env, k contenderKind) (result, error) {
	var r result
	maxConns := e.cfg.maxConns
	if k.defaultPool {
		maxConns = 0
	}
	c, err := e.openHandle(ctx, k, time.Minute, maxConns)
	if err != nil {
		return r, err
	}
	defer c.close()
	ann := k.ann
	if ann == "" {
		ann = "ttl=1m"
	}
	q := e.herdQuery(ann)
	if _, err := c.read(ctx, q, int64(1)); err != nil { // warm the handle
		return r, err
	}
	origins := func() int64 { return e.seqValue(ctx, e.rseq) }
	if f, ok := c.(*prepared).contender.(*floorC); ok {
		origins, r.floor = f.origins, true
		r.note = "origin executions are the floor's own timers (it has no database)"
	}
	var means, p50s, p99s []float64
	var allocs uint64
	h0 := c.hits()
	t0 := time.Now()
	for round := range e.cfg.herdRounds {
		key := int64(1_000_000 + round*herdRowCount)
		runtime.GC()
		o0, m0 := origins(), mallocs()
		lat, errs := releaseHerd(ctx, c, q, key, e.cfg.herdCallers)
		allocs += mallocs() - m0
		r.perHerd = append(r.perHerd, origins()-o0)
		r.errs += errs
		var h result
		summarize(&h, lat)
		means, p50s, p99s = append(means, h.mean), append(p50s, float64(h.p50)), append(p99s, float64(h.p99))
		r.ops += h.ops
	}
	r.elapsed = time.Since(t0)
	r.mean, r.p50, r.p99 = median(means), time.Duration(median(p50s)), time.Duration(median(p99s))
	r.allocs = float64(allocs) / float64(max(r.ops, 1))
	for _, o := range r.perHerd {
		r.origin += o
	}
	r.waited = int64(r.ops) - int64(c.hits()-h0)
	if r.errs > 0 {
		return r, fmt.Errorf("%d failed reads", r.errs)
	}
	return r, nil
}

// releaseHerd starts n callers of q on key, releases them together and
// returns each one's latency and how many failed or read wrong rows.
func releaseHerd(ctx context.Context, c contender, q string, key int64, n int) ([]time.Duration, int64) {
	lat := make([]time.Duration, n)
	var errs atomic.Int64
	start := make(chan struct{})
	var ready, wg sync.WaitGroup
	for i := range n {
		ready.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			ready.Done()
			<-start
			s := time.Now()
			rows, err := c.read(ctx, q, key)
			lat[i] = time.Since(s)
			if err != nil || len(rows) != herdRowCount || rows[0].ID != key {
				errs.Add(1)
			}
		}()
	}
	ready.Wait()
	close(start)
	wg.Wait()
	return lat, errs.Load()
}

// median is the middle of v (the mean of the two middle values when even).
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	v = slices.Clone(v)
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// --- 2. expiry herd under paced load ---

func expiryHerd(ctx context.Context, e *env, k contenderKind) (result, error) {
	var r result
	c, err := e.open(ctx, k, e.cfg.expSoft)
	if err != nil {
		return r, err
	}
	defer c.close()
	q := e.slowQuery(fmt.Sprintf("soft=%v hard=%v", e.cfg.expSoft, e.cfg.expHard))
	const key = int64(7)
	if _, err := c.read(ctx, q, key); err != nil { // warm: this measures expiry, not the cold herd
		return r, err
	}
	var mu sync.Mutex
	var lat []time.Duration
	var errs atomic.Int64
	h0, o0 := c.hits(), e.seqValue(ctx, e.rseq)
	runtime.GC()
	m0 := mallocs()
	t0 := time.Now()
	end := t0.Add(e.cfg.expFor)
	var wg sync.WaitGroup
	for i := range e.cfg.expReaders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]time.Duration, 0, int(e.cfg.expFor/e.cfg.expEvery)+1)
			// Spread the readers' phases over one period.
			next := t0.Add(time.Duration(i) * e.cfg.expEvery / time.Duration(e.cfg.expReaders))
			for {
				if d := time.Until(next); d > 0 {
					time.Sleep(d)
				}
				s := time.Now()
				if s.After(end) {
					break
				}
				rows, err := c.read(ctx, q, key)
				local = append(local, time.Since(s))
				if err != nil || len(rows) != 1 {
					errs.Add(1)
				}
				next = next.Add(e.cfg.expEvery)
				for now := time.Now(); next.Before(now); { // skip missed ticks
					next = next.Add(e.cfg.expEvery)
				}
			}
			mu.Lock()
			lat = append(lat, local...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	finish(&r, lat, m0)
	r.elapsed = time.Since(t0)
	r.origin = e.seqValue(ctx, e.rseq) - o0
	r.waited = int64(r.ops) - int64(c.hits()-h0)
	r.errs = errs.Load()
	if r.errs > 0 {
		return r, fmt.Errorf("%d failed reads", r.errs)
	}
	return r, nil
}

// --- 3. hit path ---

func hitPath(ctx context.Context, e *env, k contenderKind, n int) (result, error) {
	var r result
	c, err := e.open(ctx, k, time.Minute)
	if err != nil {
		return r, err
	}
	defer c.close()
	q := e.pointQuery("ttl=1m", n)
	id := int64(100 + n)
	if _, err := c.read(ctx, q, id); err != nil { // warm the cache
		return r, err
	}
	lat := make([]time.Duration, 0, e.cfg.hitIters)
	h0, o0 := c.hits(), e.seqValue(ctx, e.rseq)
	runtime.GC()
	m0 := mallocs()
	t0 := time.Now()
	for range e.cfg.hitIters {
		s := time.Now()
		rows, err := c.read(ctx, q, id)
		lat = append(lat, time.Since(s))
		if err != nil {
			return r, err
		}
		if len(rows) != n {
			return r, fmt.Errorf("got %d rows, want %d", len(rows), n)
		}
	}
	finish(&r, lat, m0)
	r.elapsed = time.Since(t0)
	r.origin = e.seqValue(ctx, e.rseq) - o0
	r.waited = int64(r.ops) - int64(c.hits()-h0)
	return r, nil
}

// --- 4. pass-through writes ---

func writes(ctx context.Context, e *env, k contenderKind) (result, error) {
	var r result
	c, err := e.open(ctx, k, time.Minute)
	if err != nil {
		return r, err
	}
	defer c.close()
	readQ := e.pointQuery("ttl=1m", 1)
	wq := e.writeQuery()
	lat := make([]time.Duration, 0, e.cfg.writeIters)
	o0 := e.seqValue(ctx, e.wseq)
	runtime.GC()
	m0 := mallocs()
	t0 := time.Now()
	for i := range e.cfg.writeIters {
		id := int64(i%e.cfg.zipfIDs + 1)
		s := time.Now()
		ver, err := c.write(ctx, wq, readQ, id)
		lat = append(lat, time.Since(s))
		if err != nil {
			return r, err
		}
		e.observe(id, ver)
	}
	finish(&r, lat, m0)
	r.elapsed = time.Since(t0)
	r.origin = e.seqValue(ctx, e.wseq) - o0
	r.waited = int64(r.ops)
	return r, nil
}

// observe records that version ver of id is committed: its writer has
// just seen its write return.
func (e *env) observe(id, ver int64) {
	now := time.Now()
	l := &e.commits[id]
	l.mu.Lock()
	if n := int(ver) + 1; n > len(l.at) {
		l.at = slices.Grow(l.at, n-len(l.at))[:n]
	}
	l.at[ver] = now
	l.mu.Unlock()
	for {
		cur := e.known[id].Load()
		if ver <= cur || e.known[id].CompareAndSwap(cur, ver) {
			return
		}
	}
}

// missedFor is how long before start the oldest write a stale read of id
// missed (a version in (got, floor]) was seen committed. floor's own time
// is always recorded (observe records it before publishing it in known); a
// version in between whose writer has not recorded it yet is skipped,
// which can only make the answer smaller, by that write's return trip.
func (e *env) missedFor(id, got, floor int64, start time.Time) time.Duration {
	l := &e.commits[id]
	l.mu.Lock()
	defer l.mu.Unlock()
	var first time.Time
	for v := got + 1; v <= floor && v < int64(len(l.at)); v++ {
		if t := l.at[v]; !t.IsZero() && (first.IsZero() || t.Before(first)) {
			first = t
		}
	}
	return start.Sub(first)
}

// --- 5. zipf mix with writes ---

// zipfMix runs the Zipf mix on contender k. With outside, the writes are
// made by a plain pgx pool of their own, which tells no cache anything:
// only a change feed can bring them to sqlflight.
func zipfMix(ctx context.Context, e *env, k contenderKind, outside bool) (result, error) {
	var r result
	c, err := e.open(ctx, k, e.cfg.zipfTTL)
	if err != nil {
		return r, err
	}
	defer c.close()
	readQ, wq := e.keyQuery(fmt.Sprintf("ttl=%v", e.cfg.zipfTTL)), e.keyWriteQuery()
	if e.cfg.zipfRange {
		readQ = e.pointQuery(fmt.Sprintf("ttl=%v", e.cfg.zipfTTL), 1)
	}
	write := func(ctx context.Context, id int64) (int64, error) { return c.write(ctx, wq, readQ, id) }
	if outside {
		pcfg, err := pgxpool.ParseConfig(e.cfg.dsn)
		if err != nil {
			return r, err
		}
		pcfg.MaxConns = int32(min(e.cfg.zipfWorkers, e.cfg.maxConns))
		out, err := pgxpool.NewWithConfig(ctx, pcfg)
		if err != nil {
			return r, err
		}
		defer out.Close()
		if err := out.Ping(ctx); err != nil {
			return r, err
		}
		oq := e.outsideWriteQuery()
		write = func(ctx context.Context, id int64) (int64, error) {
			var ver int64
			err := out.QueryRow(ctx, oq, id).Scan(&ver)
			return ver, err
		}
	}
	var next atomic.Int64
	var stale, late, errs, writesDone atomic.Int64
	var mu sync.Mutex
	var lat []time.Duration
	var oldest time.Duration
	h0, o0 := c.hits(), e.seqValue(ctx, e.rseq)
	runtime.GC()
	m0 := mallocs()
	t0 := time.Now()
	var wg sync.WaitGroup
	for w := range e.cfg.zipfWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := mrand.New(mrand.NewSource(int64(w) + 1))
			z := mrand.NewZipf(rng, e.cfg.zipfS, 1, uint64(e.cfg.zipfIDs-1))
			var local []time.Duration
			var localOldest time.Duration
			for next.Add(1) <= int64(e.cfg.zipfOps) {
				id := int64(z.Uint64()) + 1
				if rng.Intn(100) < e.cfg.zipfWritePct {
					ver, err := write(ctx, id)
					if err != nil {
						errs.Add(1)
						continue
					}
					e.observe(id, ver)
					writesDone.Add(1)
					continue
				}
				floor := e.known[id].Load() // committed before this read began
				s := time.Now()
				rows, err := c.read(ctx, readQ, id)
				local = append(local, time.Since(s))
				if err != nil || len(rows) != 1 {
					errs.Add(1)
					continue
				}
				if got := rows[0].Ver; got < floor {
					stale.Add(1)
					age := e.missedFor(id, got, floor, s)
					if age > e.cfg.zipfLag {
						late.Add(1)
					}
					localOldest = max(localOldest, age)
				}
			}
			mu.Lock()
			lat = append(lat, local...)
			oldest = max(oldest, localOldest)
			mu.Unlock()
		}()
	}
	wg.Wait()
	finish(&r, lat, m0)
	// allocs per op over every operation, reads and writes.
	r.allocs = r.allocs * float64(r.ops) / float64(r.ops+int(writesDone.Load()))
	r.elapsed = time.Since(t0)
	r.origin = e.seqValue(ctx, e.rseq) - o0
	r.waited = int64(r.ops) - int64(c.hits()-h0)
	r.stale, r.late, r.oldest = stale.Load(), late.Load(), oldest
	if p, ok := c.(*prepared); ok {
		r.note = p.note()
	}
	r.errs = errs.Load()
	if r.errs > 0 {
		return r, fmt.Errorf("%d failed operations", r.errs)
	}
	return r, nil
}

// --- report ---

func ratio(v, base float64) string {
	if base == 0 {
		if v == 0 {
			return "1×"
		}
		return "n/a"
	}
	x := v / base
	switch {
	case x == 0:
		return "0×"
	case x < 0.01:
		return fmt.Sprintf("%.4f×", x)
	case x < 10:
		return fmt.Sprintf("%.2f×", x)
	default:
		return fmt.Sprintf("%.0f×", x)
	}
}

func dur(d time.Duration) string {
	switch {
	case d < time.Microsecond:
		return fmt.Sprintf("%dns", d.Nanoseconds())
	case d < time.Millisecond:
		return fmt.Sprintf("%.1fµs", float64(d)/1e3)
	default:
		return fmt.Sprintf("%.2fms", float64(d)/1e6)
	}
}

// column is a workload's own column of its table, after the common ones.
type column struct {
	head string
	cell func(i int) string // the cell of contender i
}

// zipfColumns are the Zipf mix's staleness columns.
func zipfColumns(rs []result) []column {
	return []column{
		{"stale > lag", func(i int) string { return fmt.Sprint(rs[i].late) }},
		{"oldest stale", func(i int) string {
			if rs[i].stale == 0 {
				return "—"
			}
			return dur(rs[i].oldest)
		}},
	}
}

// herdColumns are the herd's columns: origins per herd, and p99 against
// the origin's duration and against the floor's p99 in the same run.
func herdColumns(c config) func([]result) []column {
	return func(rs []result) []column {
		var floor time.Duration
		for _, r := range rs {
			if r.floor {
				floor = r.p99
			}
		}
		return []column{
			{"origins per herd", func(i int) string {
				p := rs[i].perHerd
				lo, hi := slices.Min(p), slices.Max(p)
				if lo == hi {
					return fmt.Sprint(lo)
				}
				return fmt.Sprintf("%d–%d", lo, hi)
			}},
			{"p99 / origin", func(i int) string { return ratio(float64(rs[i].p99), float64(c.herdSleep)) }},
			{"p99 / floor p99", func(i int) string { return ratio(float64(rs[i].p99), float64(floor)) }},
		}
	}
}

func printTable(title string, ks []contenderKind, rs []result, extra []column) {
	base := rs[0]
	fmt.Printf("### %s\n\n", title)
	head := "| contender | ops | origin executions | mean/op | p50 | p99 | waited on DB | allocs/op | stale reads |"
	rule := "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
	for _, x := range extra {
		head += " " + x.head + " |"
		rule += "---:|"
	}
	fmt.Println(head + " wall |")
	fmt.Println(rule + "---:|")
	for i, r := range rs {
		fmt.Printf("| %s | %d | %d (%s) | %s (%s) | %s (%s) | %s (%s) | %d (%s) | %.1f (%s) | %d |",
			ks[i].name, r.ops,
			r.origin, ratio(float64(r.origin), float64(base.origin)),
			dur(time.Duration(r.mean)), ratio(r.mean, base.mean),
			dur(r.p50), ratio(float64(r.p50), float64(base.p50)),
			dur(r.p99), ratio(float64(r.p99), float64(base.p99)),
			r.waited, ratio(float64(r.waited)/float64(max(r.ops, 1)), float64(base.waited)/float64(max(base.ops, 1))),
			r.allocs, ratio(r.allocs, base.allocs),
			r.stale)
		for _, x := range extra {
			fmt.Printf(" %s |", x.cell(i))
		}
		fmt.Printf(" %s |\n", r.elapsed.Round(time.Millisecond))
	}
	fmt.Println()
	for i, r := range rs {
		if r.note != "" {
			fmt.Printf("- %s: %s\n", ks[i].name, r.note)
		}
	}
	fmt.Println()
}
