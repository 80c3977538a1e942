package main

import (
	"context"
	"database/sql"
	"database/sql/driver"
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

	"github.com/sqlflight/sqlflight"
	"modernc.org/sqlite"
)

// The demo's hot key: every caller of a herd asks for this row, through a
// query that calls slow_price, a Go function registered in SQLite that stands
// for an expensive computation and counts its own executions. The scanner
// cannot vouch for slow_price, so the annotation opts the query into sharing.
const (
	hotQuery = `/* sqlflight: coalesce */ SELECT name, slow_price(price) FROM products WHERE id = ?`
	hotID    = 3
	hotName  = "espresso machine"
	hotPrice = 24900 // cents
)

// handful is the number of origin executions a sqlflight herd may cause
// without comment. One is expected; callers that arrive after a flight has
// finished legitimately start the next one (sqlflight coalesces queries in
// flight; the demo caches nothing), so a herd whose arrivals take longer than
// one execution sees a few sequential flights.
const handful = 5

// demoConfig configures the demo.
type demoConfig struct {
	callers int           // concurrent callers per herd, all on the hot key
	latency time.Duration // how long one execution of slow_price takes

	// hold, when set, replaces the sleep in slow_price: every execution calls
	// it with the herd's Shield (nil in the unprotected herd). Tests use it to
	// hold the origin until every caller waits on the flight.
	hold func(*sqlflight.Shield)
}

// herdResult is what one herd measured.
type herdResult struct {
	name      string
	callers   int
	origin    int64 // executions of slow_price, counted inside SQLite
	peak      int64 // most executions of slow_price running at once
	realConns int64 // SQLite connections opened, counted by a connection hook
	errors    int
	firstErr  error
	p50, p99  time.Duration // caller latency, from the release of the herd
	max, wall time.Duration
	stats     *sqlflight.Stats // nil in the unprotected herd
}

// runDemo is the demo subcommand: it parses flags, plays both herds and
// prints their comparison. It fails if sqlflight let more than a handful of
// origin executions through, or if any sqlflight caller failed.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := demoConfig{}
	fs.IntVar(&cfg.callers, "callers", 1000, "concurrent callers per herd, all asking for the same row")
	fs.DurationVar(&cfg.latency, "latency", 50*time.Millisecond, "time one execution of the query takes in the database")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: sqlflight demo [flags]

Demo plays a hot-key thundering herd twice against a temporary SQLite
database (pure Go, no server needed): N callers released at the same instant
run the same slow read-only query, first through the plain driver, then
through the same driver wrapped by sqlflight. It prints how many times the
database executed the query and what the callers saw.

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
	}

	results, err := playDemo(ctx, stdout, cfg)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout)
	writeComparison(stdout, results)
	fmt.Fprintln(stdout)
	return verdict(stdout, results[0], results[1])
}

// playDemo creates the database in a temporary directory, removed on
// return, and plays the unprotected herd then the sqlflight one, reporting
// progress to w.
func playDemo(ctx context.Context, w io.Writer, cfg demoConfig) ([]herdResult, error) {
	dir, err := os.MkdirTemp("", "sqlflight-demo-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "demo.db")
	if err := seed(ctx, path); err != nil {
		return nil, fmt.Errorf("creating the demo database: %w", err)
	}
	fmt.Fprintf(w, "SQLite database %s (modernc.org/sqlite, pure Go)\n", path)
	fmt.Fprintf(w, "query: %s  -- id=%d\n", hotQuery, hotID)
	if cfg.hold == nil {
		fmt.Fprintf(w, "slow_price takes %s per execution; database/sql default pool (no limit on open connections), cold\n", cfg.latency)
	}

	herds := []struct {
		name      string
		protected bool
	}{
		{"no protection", false},
		{"sqlflight (coalescing)", true},
	}
	results := make([]herdResult, 0, len(herds))
	for i, h := range herds {
		fmt.Fprintf(w, "herd %d/%d: %s, %d callers on one key … ", i+1, len(herds), h.name, cfg.callers)
		r, err := playHerd(ctx, path, cfg, h.protected)
		if err != nil {
			fmt.Fprintln(w, "failed")
			return nil, fmt.Errorf("herd %q: %w", h.name, err)
		}
		if err := ctx.Err(); err != nil {
			fmt.Fprintln(w, "interrupted")
			return nil, err
		}
		r.name = h.name
		fmt.Fprintf(w, "done in %s\n", fmtDur(r.wall))
		results = append(results, r)
	}
	return results, nil
}

// seed creates the products table at path and fills it.
func seed(ctx context.Context, path string) error {
	db := sql.OpenDB(dsnConnector{drv: &sqlite.Driver{}, dsn: path})
	defer db.Close()
	const schema = `CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT NOT NULL, price INTEGER NOT NULL)`
	if _, err := db.ExecContext(ctx, schema); err != nil {
		return err
	}
	products := []struct {
		name  string
		price int64
	}{
		{"grinder", 8900},
		{"kettle", 4500},
		{hotName, hotPrice}, // id 3: hotID
		{"scale", 2900},
		{"tamper", 1900},
	}
	for i, p := range products {
		if _, err := db.ExecContext(ctx, `INSERT INTO products (id, name, price) VALUES (?, ?, ?)`, i+1, p.name, p.price); err != nil {
			return err
		}
	}
	return db.Close()
}

// playHerd opens the database at path on a driver of its own, carrying
// slow_price and a connection counter, wrapped by a new Shield when
// protected, and releases a herd of cfg.callers on the hot key.
func playHerd(ctx context.Context, path string, cfg demoConfig, protected bool) (herdResult, error) {
	var (
		shield         *sqlflight.Shield
		origin, opened atomic.Int64
		active, peak   atomic.Int64
	)
	drv := &sqlite.Driver{} // registrations on it reach its connections only
	err := drv.RegisterScalarFunction("slow_price", 1, func(_ *sqlite.FunctionContext, args []driver.Value) (driver.Value, error) {
		origin.Add(1)
		storeMax(&peak, active.Add(1))
		defer active.Add(-1)
		if cfg.hold != nil {
			cfg.hold(shield)
		} else {
			time.Sleep(cfg.latency)
		}
		return args[0], nil
	})
	if err != nil {
		return herdResult{}, err
	}
	drv.RegisterConnectionHook(func(sqlite.ExecQuerierContext, string) error {
		opened.Add(1)
		return nil
	})

	var d driver.Driver = drv
	if protected {
		shield = sqlflight.New()
		d = shield.Wrap(drv)
	}
	db := sql.OpenDB(dsnConnector{drv: d, dsn: path})
	defer db.Close()

	r := stampede(ctx, db, cfg.callers)
	r.origin, r.peak, r.realConns = origin.Load(), peak.Load(), opened.Load()
	if shield != nil {
		st := shield.Stats()
		r.stats = &st
	}
	return r, db.Close()
}

// stampede starts callers goroutines, waits until each is ready, releases
// them at once and waits until all have read the hot row. A caller's latency
// runs from the release to the end of its read; a wrong row counts as an
// error.
func stampede(ctx context.Context, db *sql.DB, callers int) herdResult {
	var (
		ready, done sync.WaitGroup
		start       = make(chan struct{})
		t0          time.Time // written before start is closed
		lat         = make([]time.Duration, callers)
		errs        = make([]error, callers)
	)
	ready.Add(callers)
	for i := range callers {
		done.Go(func() {
			ready.Done()
			<-start
			var (
				name  string
				price int64
			)
			err := db.QueryRowContext(ctx, hotQuery, hotID).Scan(&name, &price)
			if err == nil && (name != hotName || price != hotPrice) {
				err = fmt.Errorf("wrong row: got (%q, %d), want (%q, %d)", name, price, hotName, hotPrice)
			}
			lat[i], errs[i] = time.Since(t0), err
		})
	}
	ready.Wait()
	t0 = time.Now()
	close(start)
	done.Wait()

	r := herdResult{callers: callers, wall: time.Since(t0)}
	for _, err := range errs {
		if err != nil {
			r.errors++
			if r.firstErr == nil {
				r.firstErr = err
			}
		}
	}
	slices.Sort(lat)
	r.p50, r.p99, r.max = percentile(lat, 50), percentile(lat, 99), lat[len(lat)-1]
	return r
}

// percentile returns the nearest-rank p-th percentile of sorted, which must
// not be empty.
func percentile(sorted []time.Duration, p int) time.Duration {
	i := (len(sorted)*p + 99) / 100 // ceil(n·p/100), 1-based
	return sorted[max(i, 1)-1]
}

// writeComparison prints the herds side by side as a Markdown table.
func writeComparison(w io.Writer, rs []herdResult) {
	header := []string{""}
	for _, r := range rs {
		header = append(header, r.name)
	}
	row := func(label string, cell func(r herdResult) string) []string {
		out := []string{label}
		for _, r := range rs {
			out = append(out, cell(r))
		}
		return out
	}
	fromStats := func(f func(st *sqlflight.Stats) string) func(herdResult) string {
		return func(r herdResult) string {
			if r.stats == nil {
				return "–"
			}
			return f(r.stats)
		}
	}
	writeTable(w, header, [][]string{
		row("callers (same key, released together)", func(r herdResult) string { return fmt.Sprint(r.callers) }),
		row("**origin executions** (counted in SQLite)", func(r herdResult) string { return fmt.Sprintf("**%d**", r.origin) }),
		row("origin executions running at once (peak)", func(r herdResult) string { return fmt.Sprint(r.peak) }),
		row("SQLite connections opened", func(r herdResult) string { return fmt.Sprint(r.realConns) }),
		row("errors", func(r herdResult) string { return fmt.Sprint(r.errors) }),
		row("caller latency p50", func(r herdResult) string { return fmtDur(r.p50) }),
		row("caller latency p99", func(r herdResult) string { return fmtDur(r.p99) }),
		row("caller latency max", func(r herdResult) string { return fmtDur(r.max) }),
		row("wall time", func(r herdResult) string { return fmtDur(r.wall) }),
		row("sqlflight flights / followers", fromStats(func(st *sqlflight.Stats) string {
			return fmt.Sprintf("%d / %d", st.Flights, st.Followers)
		})),
		row("sqlflight origin executions", fromStats(func(st *sqlflight.Stats) string { return fmt.Sprint(st.OriginExecutions) })),
		row("sqlflight real conns opened", fromStats(func(st *sqlflight.Stats) string { return fmt.Sprint(st.RealConnsOpened) })),
		row("sqlflight bypassed", fromStats(func(st *sqlflight.Stats) string { return fmt.Sprint(st.Bypassed) })),
	})
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
// protect the database: a caller failed, two origin executions of the one key
// overlapped (contract: one execution per key among concurrent callers), or
// the executions were not cut at least in half.
func verdict(w io.Writer, raw, shared herdResult) error {
	if raw.errors > 0 {
		fmt.Fprintf(w, "note: %d of %d unprotected callers failed, e.g.: %v\n", raw.errors, raw.callers, raw.firstErr)
	}
	if shared.realConns > shared.origin {
		fmt.Fprintf(w, "note: sqlflight opens a real connection at its first Connect, to learn the driver's capabilities, and keeps it;\n"+
			"      the flight's leader may be another connection and open its own.\n")
	}
	switch {
	case shared.errors > 0:
		return fmt.Errorf("%d of %d sqlflight callers failed (a sqlflight bug), e.g.: %w", shared.errors, shared.callers, shared.firstErr)
	case shared.peak > 1:
		return fmt.Errorf("sqlflight let %d executions of one key run at once (%d in all for %d callers); "+
			"concurrent callers must share one (a sqlflight bug)", shared.peak, shared.origin, shared.callers)
	case shared.origin > handful && shared.origin > int64(shared.callers)/2:
		return fmt.Errorf("sqlflight let %d origin executions through for %d callers on one key (a sqlflight bug)",
			shared.origin, shared.callers)
	case shared.origin > handful:
		fmt.Fprintf(w, "note: %d flights ran one after another, never two at once: callers kept arriving for longer than one\n"+
			"      execution takes, and each arrival after a flight had finished started the next (sqlflight coalesces\n"+
			"      queries in flight; this demo caches nothing). Raise -latency or lower -callers to see a single flight.\n",
			shared.origin)
	}
	fmt.Fprintf(w, "sqlflight: the database ran the query %s for %d callers; without sqlflight, %s",
		times(shared.origin), shared.callers, times(raw.origin))
	if shared.origin > 0 && raw.origin > shared.origin {
		fmt.Fprintf(w, " (%d× fewer)", raw.origin/shared.origin)
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
