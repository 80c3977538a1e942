package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/sqlflight/sqlflight"
	"modernc.org/sqlite"
)

// The demo's hot key: every caller asks for this row, through a query that
// calls slow_price, a function of the database that stands for an expensive
// computation and counts its own executions (a Go function registered in
// SQLite; a plpgsql function bumping a sequence in Postgres). It is
// VOLATILE (it counts), and nothing but the statement's own pure= entry can
// vouch for such a function: the annotation says it may be shared.
const (
	hotID    = 3
	hotName  = "espresso machine"
	hotPrice = 24900 // cents
)

// handful is the number of origin executions one wave of coalesced callers
// may cause without comment. One is expected; callers that arrive after a
// flight has finished legitimately start the next one.
const handful = 5

// A way is one way of playing the herd.
type way struct {
	name       string
	annotation string // prepended to the query; "" for none
	protected  bool   // through a sqlflight Shield
	// keys spreads a wave's callers over the products 1..keys (0: the
	// hot one only); prewarm, when set, is a hot set the Shield warms
	// from before the first wave (the deploy scenario, deploy.go).
	keys    int
	prewarm []byte
}

// demoWays returns the three ways, the TTL one with the given soft and hard
// TTLs.
func demoWays(soft, hard time.Duration) []way {
	return []way{
		{name: "no protection"},
		{name: "coalescing only", annotation: "/* sqlflight: coalesce pure=slow_price */", protected: true},
		{name: "soft/hard TTL", annotation: fmt.Sprintf("/* sqlflight: coalesce pure=slow_price soft=%s hard=%s */", soft, hard), protected: true},
	}
}

// Indexes of the ways in demoWays.
const (
	wayRaw = iota
	wayCoalesce
	wayTTL
)

// demoConfig configures the demo.
type demoConfig struct {
	callers  int           // callers per wave, all on the hot key, released together
	interval time.Duration // time between two waves
	duration time.Duration // waves are released for this long
	latency  time.Duration // how long one execution of slow_price takes
	soft     time.Duration // TTLs of the third way
	hard     time.Duration
	conns    int           // max open connections per *sql.DB; 0: no limit
	bucket   time.Duration // width of a chart bucket
	dsn      string        // postgres://… or "" for the embedded SQLite
	progress time.Duration // between two progress lines; 0: none while a way runs
	scenario string        // "herd" (the three ways) or "deploy" (deploy.go)
	warmConc int           // the deploy scenario's pre-warming concurrency

	// hold, when set, replaces the sleep in slow_price (SQLite only): every
	// execution calls it with the index of the way and its Shield (nil in
	// the unprotected way). Tests use it to hold the origin until every
	// caller waits on the flight.
	hold func(way int, s *sqlflight.Shield)
}

// waves returns how many waves a way releases.
func (c demoConfig) waves() int {
	if c.interval <= 0 {
		return 1
	}
	return max(1, int(c.duration/c.interval))
}

// bucket is one time slice of a way, for the chart.
type bucket struct {
	origin int64         // origin queries that started in it (sampled from the database's counter)
	calls  int           // callers released in it
	p99    time.Duration // p99 latency of those callers
}

// herdResult is what one way measured.
type herdResult struct {
	name     string
	callers  int
	waves    int
	origin   int64 // executions of slow_price, counted inside the database
	peak     int64 // most executions of slow_price running at once; -1: not measured
	errors   int
	firstErr error
	p50, p99 time.Duration // caller latency, from the release of its wave
	max      time.Duration
	wall     time.Duration
	stats    *sqlflight.Stats // nil in the unprotected way
	buckets  []bucket
	// The deploy scenario: origins until the first wave's callers all had
	// their rows, and the origins of pre-warming and the most of them at
	// once.
	firstWave            int64
	warmOrigin, warmPeak int64
}

// runDemo is the demo subcommand: it parses flags, plays the three ways,
// prints their comparison and writes the chart. It fails if sqlflight let
// overlapping or far too many origin executions through, or if any sqlflight
// caller failed.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := demoConfig{bucket: 100 * time.Millisecond, progress: 500 * time.Millisecond}
	var chart string
	fs.IntVar(&cfg.callers, "callers", 100, "callers per wave, all asking for the same row at the same instant")
	fs.DurationVar(&cfg.interval, "interval", 100*time.Millisecond, "time between two waves of callers")
	fs.DurationVar(&cfg.duration, "duration", 2*time.Second, "how long each way releases waves")
	fs.DurationVar(&cfg.latency, "latency", 50*time.Millisecond, "time one execution of the query takes in the database")
	fs.DurationVar(&cfg.soft, "soft", 200*time.Millisecond, "soft TTL of the third way: fresh for this long")
	fs.DurationVar(&cfg.hard, "hard", 5*time.Second, "hard TTL of the third way: served stale (and refreshed) until then")
	fs.IntVar(&cfg.conns, "conns", 20, "database connections of the unprotected way, origin queries at once of the others (0: no limit)")
	fs.StringVar(&cfg.dsn, "dsn", "", "run against this Postgres (postgres://…) instead of an embedded SQLite")
	fs.StringVar(&chart, "chart", "sqlflight-demo.svg", "write the chart (SVG) to this file; \"\" for none")
	fs.StringVar(&cfg.scenario, "scenario", "herd", "herd: one hot key three ways; deploy: a cold restart under load, with and without pre-warming")
	fs.IntVar(&cfg.warmConc, "warm-conc", 2, "deploy: origin queries pre-warming runs at once")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: sqlflight demo [flags]

Demo plays a hot-key thundering herd three ways: with no protection,
through sqlflight coalescing only, and through sqlflight with a soft/hard
TTL cache. Every -interval for -duration, a wave of -callers callers runs the
same slow read-only query at the same instant. By default the database is a
temporary embedded SQLite (modernc.org/sqlite, pure Go, no server needed);
-dsn postgres://… plays against Postgres instead. It prints progress, a
side-by-side table (origin queries counted by the database, latency, errors)
and writes a chart of origin queries and latency over time as an SVG file.

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage // flag has printed the error and the usage
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	case cfg.callers < 1:
		return fmt.Errorf("%w: -callers must be at least 1", errUsage)
	case cfg.latency < 0:
		return fmt.Errorf("%w: -latency must not be negative", errUsage)
	case cfg.interval <= 0:
		return fmt.Errorf("%w: -interval must be positive", errUsage)
	case cfg.duration < cfg.interval:
		return fmt.Errorf("%w: -duration must be at least -interval", errUsage)
	case cfg.soft <= 0 || cfg.hard < cfg.soft:
		return fmt.Errorf("%w: want 0 < -soft <= -hard", errUsage)
	case cfg.conns < 0:
		return fmt.Errorf("%w: -conns must not be negative", errUsage)
	case cfg.scenario != "herd" && cfg.scenario != "deploy":
		return fmt.Errorf("%w: -scenario must be herd or deploy", errUsage)
	case cfg.warmConc < 1:
		return fmt.Errorf("%w: -warm-conc must be at least 1", errUsage)
	case cfg.dsn != "" && !strings.HasPrefix(cfg.dsn, "postgres://") && !strings.HasPrefix(cfg.dsn, "postgresql://"):
		return fmt.Errorf("%w: -dsn must be a postgres:// URL", errUsage)
	}

	play, compare, conclude := playDemo, writeComparison, verdict
	if cfg.scenario == "deploy" {
		play, compare, conclude = playDeploy, writeDeployComparison, deployVerdict
	}
	results, err := play(ctx, stdout, cfg)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout)
	compare(stdout, results)
	fmt.Fprintln(stdout)
	if chart != "" {
		if err := writeChartFile(chart, cfg, results); err != nil {
			return fmt.Errorf("writing the chart: %w", err)
		}
		abs, _ := filepath.Abs(chart)
		fmt.Fprintf(stdout, "chart: %s\n", abs)
	}
	return conclude(stdout, results)
}

// A backend is the database the ways play against.
type backend interface {
	// query returns the hot query, without annotation.
	query() string
	// connector returns a connector to the database for way i, with s its
	// Shield or nil.
	connector(i int, s *sqlflight.Shield) driver.Connector
	// count returns how many times slow_price has run, as the database
	// counts it.
	count(ctx context.Context) (int64, error)
	// peak returns the most executions running at once since the last call,
	// or -1 if the backend cannot tell.
	peak(ctx context.Context) int64
	close(ctx context.Context) error
}

// playDemo sets up the backend, plays the three ways one after the other,
// reporting progress to w, and tears the backend down.
func playDemo(ctx context.Context, w io.Writer, cfg demoConfig) (_ []herdResult, err error) {
	be, err := openBackend(ctx, w, cfg)
	if err != nil {
		return nil, err
	}
	defer closeBackend(ctx, be, &err)

	ways := demoWays(cfg.soft, cfg.hard)
	pool := "no limit on open connections"
	if cfg.conns > 0 {
		pool = fmt.Sprintf("a pool of %d connections", cfg.conns)
	}
	fmt.Fprintf(w, "workload: %d waves of %d callers on one key, one wave every %s for %s; slow_price takes %s; %s per way\n",
		cfg.waves(), cfg.callers, cfg.interval, cfg.duration, cfg.latency, pool)
	results := make([]herdResult, 0, len(ways))
	for i, h := range ways {
		q := be.query()
		if h.annotation != "" {
			q = h.annotation + " " + q
		}
		fmt.Fprintf(w, "way %d/%d: %s\n  query: %s\n", i+1, len(ways), h.name, q)
		r, err := playWay(ctx, w, be, cfg, i, h, q)
		if err != nil {
			if cerr := ctx.Err(); cerr != nil {
				fmt.Fprintln(w, "  interrupted")
				return nil, cerr
			}
			return nil, fmt.Errorf("way %q: %w", h.name, err)
		}
		fmt.Fprintf(w, "  done in %s: %d origin queries, %d errors\n", fmtDur(r.wall), r.origin, r.errors)
		results = append(results, r)
	}
	return results, nil
}

// openBackend sets up the database the demo plays against.
func openBackend(ctx context.Context, w io.Writer, cfg demoConfig) (backend, error) {
	if cfg.dsn == "" {
		return newSQLiteBackend(ctx, w, cfg)
	}
	return newPostgresBackend(ctx, w, cfg)
}

// closeBackend tears be down, not on ctx (an interrupted demo still drops
// what it created), and sets *err to its error if *err is nil.
func closeBackend(ctx context.Context, be backend, err *error) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if cerr := be.close(cctx); cerr != nil && *err == nil {
		*err = fmt.Errorf("cleaning up: %w", cerr)
	}
}

// playWay opens the backend for way i and plays the paced herd on it: a wave
// of cfg.callers every cfg.interval for cfg.duration, each wave released at
// once whether or not the previous one has finished. A sampler reads the
// database's counter every bucket for the chart and the progress lines.
func playWay(ctx context.Context, w io.Writer, be backend, cfg demoConfig, i int, h way, q string) (herdResult, error) {
	var shield *sqlflight.Shield
	if h.protected {
		// sqlflight's connections are virtual: a caller that waits on a
		// flight or reads the cache holds no database connection, so the
		// pool limit goes to the Shield's origin queries instead.
		shield = sqlflight.New(sqlflight.Options{MaxInflight: cfg.conns})
		defer shield.Close()
	}
	db := sql.OpenDB(be.connector(i, shield))
	defer db.Close()
	if shield == nil {
		db.SetMaxOpenConns(cfg.conns)
		db.SetMaxIdleConns(max(cfg.conns, 2))
	}
	be.peak(ctx) // reset

	base, err := be.count(ctx)
	if err != nil {
		return herdResult{}, err
	}
	var warmOrigin, warmPeak int64
	if h.prewarm != nil {
		if warmOrigin, warmPeak, err = prewarmWay(ctx, w, be, cfg, shield, db, h.prewarm); err != nil {
			return herdResult{}, err
		}
		base += warmOrigin
	}
	var firstWave, left0 atomic.Int64 // the first wave's origins, once its last caller is done
	left0.Store(int64(cfg.callers))

	waves := cfg.waves()
	n := waves * cfg.callers
	var (
		done     sync.WaitGroup
		lat      = make([]time.Duration, n)
		sent     = make([]time.Duration, n) // release of the caller's wave, from t0
		errs     = make([]error, n)
		finished atomic.Int64
	)
	t0 := time.Now()

	// The sampler: cumulative origin count at the end of every bucket.
	var (
		samples  []int64
		sampErr  error
		stopSamp = make(chan struct{})
		sampDone = make(chan struct{})
	)
	go func() {
		defer close(sampDone)
		tick := time.NewTicker(cfg.bucket)
		defer tick.Stop()
		every := max(1, int(cfg.progress/cfg.bucket))
		for {
			select {
			case <-stopSamp:
				return
			case <-tick.C:
			}
			c, err := be.count(ctx)
			if err != nil {
				sampErr = err
				return
			}
			samples = append(samples, c-base)
			if cfg.progress > 0 && len(samples)%every == 0 {
				fmt.Fprintf(w, "  %5s  callers done %5d/%d  origin queries so far %5d\n",
					fmtDur(time.Since(t0).Round(cfg.bucket)), finished.Load(), n, c-base)
			}
		}
	}()

	// Waves start half a bucket in, so that a wave and the origin queries it
	// causes fall in the same bucket rather than on a boundary.
	for wv := range waves {
		at := cfg.bucket/2 + time.Duration(wv)*cfg.interval
		if d := time.Until(t0.Add(at)); d > 0 {
			timer := time.NewTimer(d)
			select {
			case <-ctx.Done():
				timer.Stop()
			case <-timer.C:
			}
		}
		if ctx.Err() != nil {
			break
		}
		rel := time.Now()
		for c := range cfg.callers {
			k := wv*cfg.callers + c
			sent[k] = rel.Sub(t0)
			id := hotID
			if h.keys > 0 {
				id = c%h.keys + 1
			}
			done.Go(func() {
				var (
					name  string
					price int64
				)
				err := db.QueryRowContext(ctx, q, id).Scan(&name, &price)
				if p := products[id-1]; err == nil && (name != p.name || price != p.price) {
					err = fmt.Errorf("wrong row: got (%q, %d), want (%q, %d)", name, price, p.name, p.price)
				}
				lat[k], errs[k] = time.Since(rel), err
				finished.Add(1)
				if wv == 0 && left0.Add(-1) == 0 {
					if c, err := be.count(ctx); err == nil {
						firstWave.Store(c - base)
					}
				}
			})
		}
	}
	done.Wait()
	wall := time.Since(t0)
	// Background refreshes the last callers started still count.
	if shield != nil {
		for deadline := time.Now().Add(10 * time.Second); shield.Stats().InFlight > 0 && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
	}
	close(stopSamp)
	<-sampDone
	if sampErr != nil {
		return herdResult{}, fmt.Errorf("counting origin queries: %w", sampErr)
	}
	if err := ctx.Err(); err != nil {
		return herdResult{}, err
	}
	total, err := be.count(ctx)
	if err != nil {
		return herdResult{}, err
	}

	r := herdResult{name: h.name, callers: n, waves: waves, origin: total - base, peak: be.peak(ctx), wall: wall,
		firstWave: firstWave.Load(), warmOrigin: warmOrigin, warmPeak: warmPeak}
	for _, err := range errs {
		if err != nil {
			r.errors++
			if r.firstErr == nil {
				r.firstErr = err
			}
		}
	}
	sorted := slices.Clone(lat)
	slices.Sort(sorted)
	r.p50, r.p99, r.max = percentile(sorted, 50), percentile(sorted, 99), sorted[len(sorted)-1]
	r.buckets = makeBuckets(cfg.bucket, samples, total-base, sent, lat)
	if shield != nil {
		st := shield.Stats()
		r.stats = &st
	}
	return r, db.Close()
}

// makeBuckets turns the sampler's cumulative counts (the last bucket closed
// by total) and the callers' release times and latencies into buckets.
func makeBuckets(width time.Duration, samples []int64, total int64, sent, lat []time.Duration) []bucket {
	nb := len(samples) + 1
	for _, s := range sent {
		nb = max(nb, int(s/width)+1)
	}
	bs := make([]bucket, nb)
	prev := int64(0)
	for i := range bs {
		c := total
		if i < len(samples) {
			c = min(samples[i], total)
		}
		bs[i].origin = max(c-prev, 0)
		prev = max(prev, c)
	}
	per := make([][]time.Duration, nb)
	for k, s := range sent {
		b := int(s / width)
		per[b] = append(per[b], lat[k])
	}
	for i, l := range per {
		if len(l) == 0 {
			continue
		}
		slices.Sort(l)
		bs[i].calls, bs[i].p99 = len(l), percentile(l, 99)
	}
	return bs
}

// sqliteBackend is a temporary SQLite database carrying slow_price.
type sqliteBackend struct {
	dir, path    string
	cfg          demoConfig
	origin       atomic.Int64 // executions of slow_price, over all ways
	active, high atomic.Int64 // executions running now; most at once since peak()
}

func newSQLiteBackend(ctx context.Context, w io.Writer, cfg demoConfig) (*sqliteBackend, error) {
	dir, err := os.MkdirTemp("", "sqlflight-demo-")
	if err != nil {
		return nil, err
	}
	b := &sqliteBackend{dir: dir, path: filepath.Join(dir, "demo.db"), cfg: cfg}
	if err := b.seed(ctx); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("creating the demo database: %w", err)
	}
	fmt.Fprintf(w, "SQLite database %s (modernc.org/sqlite, pure Go); origin queries counted by slow_price itself\n", b.path)
	return b, nil
}

func (b *sqliteBackend) seed(ctx context.Context) error {
	db := sql.OpenDB(dsnConnector{drv: &sqlite.Driver{}, dsn: b.path})
	defer db.Close()
	const schema = `CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT NOT NULL, price INTEGER NOT NULL)`
	if _, err := db.ExecContext(ctx, schema); err != nil {
		return err
	}
	for i, p := range products {
		if _, err := db.ExecContext(ctx, `INSERT INTO products (id, name, price) VALUES (?, ?, ?)`, i+1, p.name, p.price); err != nil {
			return err
		}
	}
	return db.Close()
}

// products fills the demo table; the hot row is hotID.
var products = []struct {
	name  string
	price int64
}{
	{"grinder", 8900},
	{"kettle", 4500},
	{hotName, hotPrice}, // id 3: hotID
	{"scale", 2900},
	{"tamper", 1900},
}

func (b *sqliteBackend) query() string {
	return `SELECT name, slow_price(price) FROM products WHERE id = ?`
}

func (b *sqliteBackend) connector(i int, s *sqlflight.Shield) driver.Connector {
	drv := &sqlite.Driver{} // registrations on it reach its connections only
	err := drv.RegisterScalarFunction("slow_price", 1, func(_ *sqlite.FunctionContext, args []driver.Value) (driver.Value, error) {
		b.origin.Add(1)
		storeMax(&b.high, b.active.Add(1))
		defer b.active.Add(-1)
		if b.cfg.hold != nil {
			b.cfg.hold(i, s)
		} else {
			time.Sleep(b.cfg.latency)
		}
		return args[0], nil
	})
	if err != nil {
		panic(err) // only for a bad name or arity
	}
	var d driver.Driver = drv
	if s != nil {
		d = s.Wrap(drv)
	}
	return dsnConnector{drv: d, dsn: b.path}
}

func (b *sqliteBackend) count(context.Context) (int64, error) { return b.origin.Load(), nil }
func (b *sqliteBackend) peak(context.Context) int64           { return b.high.Swap(0) }
func (b *sqliteBackend) close(context.Context) error          { return os.RemoveAll(b.dir) }

// postgresBackend is a schema of its own in a Postgres database: the table,
// a sequence, a table of runs and slow_price, a plpgsql function that bumps
// the sequence, notes when it starts and ends (the server's clock) and
// sleeps. The schema is dropped on close.
type postgresBackend struct {
	cfg    *pgx.ConnConfig
	admin  *sql.DB // plain pgx, for setup, counting and cleanup
	schema string
	seen   int64 // the last run that peak has looked at
}

func newPostgresBackend(ctx context.Context, w io.Writer, cfg demoConfig) (*postgresBackend, error) {
	pc, err := pgx.ParseConfig(cfg.dsn)
	if err != nil {
		return nil, fmt.Errorf("%w: -dsn: %v", errUsage, err)
	}
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	b := &postgresBackend{cfg: pc, schema: "sqlflight_demo_" + hex.EncodeToString(rnd[:])}
	b.admin = sql.OpenDB(stdlib.GetConnector(*pc))
	b.admin.SetMaxOpenConns(2)
	ms := float64(cfg.latency) / float64(time.Second)
	stmts := []string{
		`CREATE SCHEMA ` + b.schema,
		`CREATE TABLE ` + b.schema + `.products (id bigint PRIMARY KEY, name text NOT NULL, price bigint NOT NULL)`,
		`CREATE SEQUENCE ` + b.schema + `.origin`,
		`CREATE TABLE ` + b.schema + `.runs (id bigint PRIMARY KEY, started timestamptz NOT NULL, ended timestamptz)`,
		fmt.Sprintf(`CREATE FUNCTION %[1]s.slow_price(p bigint) RETURNS bigint LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
	run bigint := nextval('%[1]s.origin');
BEGIN
	INSERT INTO %[1]s.runs VALUES (run, clock_timestamp());
	PERFORM pg_sleep(%[2]g);
	UPDATE %[1]s.runs SET ended = clock_timestamp() WHERE id = run;
	RETURN p;
END
$fn$`, b.schema, ms),
	}
	for i, p := range products {
		stmts = append(stmts, fmt.Sprintf(`INSERT INTO %s.products VALUES (%d, '%s', %d)`, b.schema, i+1, p.name, p.price))
	}
	for _, s := range stmts {
		if _, err := b.admin.ExecContext(ctx, s); err != nil {
			b.close(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("setting up schema %s: %w", b.schema, err)
		}
	}
	var version string
	_ = b.admin.QueryRowContext(ctx, `SHOW server_version`).Scan(&version)
	fmt.Fprintf(w, "Postgres %s at %s:%d/%s, temporary schema %s; origin queries counted by the sequence %s.origin\n",
		version, pc.Host, pc.Port, pc.Database, b.schema, b.schema)
	return b, nil
}

func (b *postgresBackend) query() string {
	return `SELECT name, ` + b.schema + `.slow_price(price) FROM ` + b.schema + `.products WHERE id = $1`
}

func (b *postgresBackend) connector(_ int, s *sqlflight.Shield) driver.Connector {
	c := stdlib.GetConnector(*b.cfg)
	if s != nil {
		return s.Connector(c)
	}
	return c
}

func (b *postgresBackend) count(ctx context.Context) (int64, error) {
	var n int64
	err := b.admin.QueryRowContext(ctx, `SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM `+b.schema+`.origin`).Scan(&n)
	return n, err
}

// peak returns the most runs of slow_price that overlapped, among those
// that started since the last call (from the times the server noted), or -1
// if the server cannot say.
func (b *postgresBackend) peak(ctx context.Context) int64 {
	var n, last sql.NullInt64
	err := b.admin.QueryRowContext(ctx, `
WITH r AS (SELECT id, started, coalesce(ended, 'infinity') AS ended FROM `+b.schema+`.runs WHERE id > $1),
ev AS (SELECT started AS t, 1 AS d FROM r UNION ALL SELECT ended, -1 FROM r),
run AS (SELECT sum(d) OVER (ORDER BY t, d ROWS UNBOUNDED PRECEDING) AS at FROM ev)
SELECT (SELECT max(at) FROM run), (SELECT max(id) FROM r)`, b.seen).Scan(&n, &last)
	if err != nil {
		return -1
	}
	if last.Valid {
		b.seen = last.Int64
	}
	return n.Int64 // 0 when nothing ran
}

func (b *postgresBackend) close(ctx context.Context) error {
	_, err := b.admin.ExecContext(ctx, `DROP SCHEMA IF EXISTS `+b.schema+` CASCADE`)
	return errors.Join(err, b.admin.Close())
}

// percentile returns the nearest-rank p-th percentile of sorted, which must
// not be empty.
func percentile(sorted []time.Duration, p int) time.Duration {
	i := (len(sorted)*p + 99) / 100 // ceil(n·p/100), 1-based
	return sorted[max(i, 1)-1]
}

// writeComparison prints the ways side by side as a Markdown table.
func writeComparison(w io.Writer, rs []herdResult) {
	header, row := comparison(rs)
	fromStats := func(f func(st *sqlflight.Stats) string) func(herdResult) string {
		return func(r herdResult) string {
			if r.stats == nil {
				return "–"
			}
			return f(r.stats)
		}
	}
	rows := [][]string{
		row("callers (waves × callers per wave)", func(r herdResult) string {
			return fmt.Sprintf("%d (%d × %d)", r.callers, r.waves, r.callers/max(r.waves, 1))
		}),
		row("**origin queries** (counted by the database)", func(r herdResult) string { return fmt.Sprintf("**%d**", r.origin) }),
	}
	if len(rs) > 0 && rs[0].peak >= 0 {
		rows = append(rows, row("origin queries running at once (peak)", func(r herdResult) string { return fmt.Sprint(r.peak) }))
	}
	rows = append(rows,
		row("errors", func(r herdResult) string { return fmt.Sprint(r.errors) }),
		row("caller latency p50", func(r herdResult) string { return fmtDur(r.p50) }),
		row("caller latency p99", func(r herdResult) string { return fmtDur(r.p99) }),
		row("caller latency max", func(r herdResult) string { return fmtDur(r.max) }),
		row("wall time", func(r herdResult) string { return fmtDur(r.wall) }),
		row("sqlflight flights / followers", fromStats(func(st *sqlflight.Stats) string {
			return fmt.Sprintf("%d / %d", st.Flights, st.Followers)
		})),
		row("sqlflight cache hits fresh / stale", fromStats(func(st *sqlflight.Stats) string {
			return fmt.Sprintf("%d / %d", st.FreshHits, st.StaleHits)
		})),
		row("sqlflight misses / background refreshes", fromStats(func(st *sqlflight.Stats) string {
			return fmt.Sprintf("%d / %d", st.Misses, st.Refreshes)
		})),
		row("sqlflight origin executions", fromStats(func(st *sqlflight.Stats) string { return fmt.Sprint(st.OriginExecutions) })),
		row("sqlflight real connections opened", fromStats(func(st *sqlflight.Stats) string { return fmt.Sprint(st.RealConnsOpened) })),
		row("sqlflight bypassed", fromStats(func(st *sqlflight.Stats) string { return fmt.Sprint(st.Bypassed) })),
	)
	writeTable(w, header, rows)
}

// comparison returns the header of a table with a column per result, and
// a function that makes a row of it from a label and each result's cell.
func comparison(rs []herdResult) ([]string, func(string, func(herdResult) string) []string) {
	header := []string{""}
	for _, r := range rs {
		header = append(header, r.name)
	}
	return header, func(label string, cell func(herdResult) string) []string {
		out := []string{label}
		for _, r := range rs {
			out = append(out, cell(r))
		}
		return out
	}
}

// writeTable prints a Markdown table, its columns padded to line up; the
// first column is left-aligned, the others right-aligned.
func writeTable(w io.Writer, header []string, rows [][]string) {
	all := append([][]string{header}, rows...)
	width := make([]int, len(header))
	for _, r := range all {
		for i, c := range r {
			width[i] = max(width[i], utf8.RuneCountInString(c), 3)
		}
	}
	line := func(r []string) {
		var b strings.Builder
		for i, c := range r {
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			if i == 0 {
				fmt.Fprintf(&b, "| %s%s ", c, pad)
			} else {
				fmt.Fprintf(&b, "| %s%s ", pad, c)
			}
		}
		fmt.Fprintln(w, b.String()+"|")
	}
	line(header)
	sep := make([]string, len(header))
	for i := range sep {
		if i == 0 {
			sep[i] = strings.Repeat("-", width[i])
		} else {
			sep[i] = strings.Repeat("-", width[i]-1) + ":"
		}
	}
	line(sep)
	for _, r := range rows {
		line(r)
	}
}

// verdict prints the conclusion and returns an error if sqlflight did not
// protect the database: a sqlflight caller failed, two origin executions of
// the one key overlapped while coalescing (contract: one execution per key
// among concurrent callers), or coalescing did not cut the executions at
// least in half.
func verdict(w io.Writer, rs []herdResult) error {
	raw, shared := rs[wayRaw], rs[wayCoalesce]
	if raw.errors > 0 {
		fmt.Fprintf(w, "note: %d of %d unprotected callers failed, e.g.: %v\n", raw.errors, raw.callers, raw.firstErr)
	}
	for _, r := range rs[1:] {
		if r.errors > 0 {
			return fmt.Errorf("%s: %d of %d sqlflight callers failed (a sqlflight bug), e.g.: %w", r.name, r.errors, r.callers, r.firstErr)
		}
	}
	waves := int64(max(shared.waves, 1))
	switch {
	case shared.peak > 1:
		return fmt.Errorf("coalescing let %d executions of one key run at once (%d in all for %d callers); "+
			"concurrent callers must share one (a sqlflight bug)", shared.peak, shared.origin, shared.callers)
	case shared.origin > handful*waves && shared.origin > int64(shared.callers)/2:
		return fmt.Errorf("coalescing let %d origin executions through for %d callers on one key (a sqlflight bug)",
			shared.origin, shared.callers)
	case shared.origin > handful*waves:
		fmt.Fprintf(w, "note: %d flights for %d waves: callers of a wave kept arriving for longer than one execution takes,\n"+
			"      and each arrival after a flight had finished started the next. Raise -latency or lower -callers.\n",
			shared.origin, waves)
	}
	if st := shared.stats; st != nil && st.RealConnsOpened > 1 {
		fmt.Fprintf(w, "note: coalescing only opened %d real connections: a flight runs on the real connection of the\n"+
			"      virtual connection whose caller leads it, opened by its first query; each wave's leader is\n"+
			"      another virtual connection of database/sql's pool (which keeps 2 idle and closes the rest),\n"+
			"      so nearly every wave opens one. Under a TTL, hits hold no connection and refreshes run on\n"+
			"      the Shield's one spare connection.\n", st.RealConnsOpened)
	}
	fmt.Fprintf(w, "the database ran the query %s for %d callers without protection", times(raw.origin), raw.callers)
	for _, r := range rs[1:] {
		fmt.Fprintf(w, "; %s with %s", times(r.origin), r.name)
		if r.origin > 0 && raw.origin > r.origin {
			fmt.Fprintf(w, " (%d× fewer)", raw.origin/r.origin)
		}
	}
	fmt.Fprintln(w, ".")
	return nil
}

// storeMax raises m to n if n is larger.
func storeMax(m *atomic.Int64, n int64) {
	for {
		old := m.Load()
		if n <= old || m.CompareAndSwap(old, n) {
			return
		}
	}
}

// times spells n as a count of executions: "1 time", "3 times".
func times(n int64) string {
	if n == 1 {
		return "1 time"
	}
	return fmt.Sprintf("%d times", n)
}

// fmtDur rounds d to about three significant digits.
func fmtDur(d time.Duration) string {
	var unit time.Duration
	switch {
	case d >= 10*time.Second:
		unit = 100 * time.Millisecond
	case d >= time.Second:
		unit = 10 * time.Millisecond
	case d >= 100*time.Millisecond:
		unit = time.Millisecond
	case d >= time.Millisecond:
		unit = 100 * time.Microsecond
	default:
		unit = time.Microsecond
	}
	return d.Round(unit).String()
}

// dsnConnector opens connections to dsn with drv: the smallest
// driver.Connector, to use a driver value with sql.OpenDB without
// registering it under a global name.
type dsnConnector struct {
	drv driver.Driver
	dsn string
}

func (c dsnConnector) Connect(ctx context.Context) (driver.Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return c.drv.Open(c.dsn)
}

func (c dsnConnector) Driver() driver.Driver { return c.drv }
