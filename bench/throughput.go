package main

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlflight/sqlflight"
)

// The throughput workload is what sqlflight costs ordinary traffic, with no
// herd: pgbench -S's read, SELECT id, abalance, filler FROM accounts WHERE
// id = $1, with random ids over a table of -throughput-ids rows, by a number of
// callers that keep the database busy (one connection each), through
// database/sql's QueryRowContext(…).Scan, against raw pgx and pgxpool's own
// QueryRow. Rounds interleave the contenders, so that each round's ratio to
// raw pgx compares runs made under the same load of the machine.

// tpReader reads one row by id.
type tpReader interface {
	read(ctx context.Context, id int64) error
	hits() uint64 // reads served from sqlflight's cache (0 for the others)
	close()
}

// throughputKind is one contender of the throughput workload.
type throughputKind struct {
	name string
	// ann is sqlflight's annotation of the query ("" for none: the
	// default policy, coalescing only); raw and pool are the others.
	ann       string
	raw, pool bool
	// hot draws ids from the first hot ids only (0: every id).
	hot int
	// inflight sizes sqlflight's Options.MaxInflight to the callers
	// (default: DefaultMaxInflight, 32): more callers than that queue for
	// an origin slot.
	inflight bool
}

var throughputKinds = []throughputKind{
	{name: "raw pgx v5 stdlib", raw: true},
	{name: "pgxpool (native)", pool: true},
	{name: "sqlflight, default policy (coalescing only)"},
	{name: "sqlflight, `soft=1s hard=2s` on every read", ann: "soft=1s hard=2s"},
	{name: "sqlflight, `soft=1s` on 1,000 hot ids", ann: "soft=1s", hot: 1000},
	{name: "sqlflight, default policy, `MaxInflight` = callers", inflight: true},
}

const throughputQuery = "SELECT id, abalance, filler FROM %s WHERE id = $1"

type sqlReader struct {
	db *sql.DB
	sh *sqlflight.Shield
	q  string
}

func (r *sqlReader) read(ctx context.Context, id int64) error {
	var got, bal int64
	var filler string
	return r.db.QueryRowContext(ctx, r.q, id).Scan(&got, &bal, &filler)
}

func (r *sqlReader) hits() uint64 {
	if r.sh == nil {
		return 0
	}
	st := r.sh.Stats()
	return st.FreshHits + st.StaleHits + st.NegativeHits
}

func (r *sqlReader) close() {
	_ = r.db.Close()
	if r.sh != nil {
		_ = r.sh.Close()
	}
}

type poolReader struct {
	p *pgxpool.Pool
	q string
}

func (r *poolReader) read(ctx context.Context, id int64) error {
	var got, bal int64
	var filler string
	return r.p.QueryRow(ctx, r.q, id).Scan(&got, &bal, &filler)
}

func (r *poolReader) hits() uint64 { return 0 }
func (r *poolReader) close()       { r.p.Close() }

func openThroughput(ctx context.Context, dsn, table string, k throughputKind, conns int) (tpReader, error) {
	q := fmt.Sprintf(throughputQuery, table)
	switch {
	case k.pool:
		cfg, err := pgxpool.ParseConfig(dsn)
		if err != nil {
			return nil, err
		}
		cfg.MaxConns, cfg.MinConns = int32(conns), int32(conns)
		p, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return nil, err
		}
		return &poolReader{p: p, q: q}, nil
	case k.raw:
		db, err := sql.Open("pgx", dsn)
		if err != nil {
			return nil, err
		}
		capPool(db, conns)
		return &sqlReader{db: db, q: q}, nil
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	var opts sqlflight.Options
	if k.inflight {
		opts.MaxInflight = conns
	}
	db := sqlflight.OpenDB(stdlib.GetConnector(*cfg), opts)
	capPool(db, conns)
	if k.ann != "" {
		q = "/* sqlflight: " + k.ann + " */ " + q
	}
	return &sqlReader{db: db, sh: sqlflight.ShieldOf(db), q: q}, nil
}

// throughputRun is one contender's run of one round.
type throughputRun struct {
	ops   uint64
	took  time.Duration
	cpu   time.Duration // the process's user and system time
	hits  uint64
	errs  uint64
	first error
}

// runThroughput runs callers readers of k for d after a warm-up of d/4 (which
// also lets sqlflight learn the server's verdict on the statement).
func runThroughput(ctx context.Context, dsn, table string, k throughputKind, ids, callers int, d time.Duration) (throughputRun, error) {
	r, err := openThroughput(ctx, dsn, table, k, callers)
	if err != nil {
		return throughputRun{}, err
	}
	defer r.close()
	span := ids
	if k.hot > 0 {
		span = min(k.hot, ids)
	}
	var (
		ops, errs atomic.Uint64
		firstErr  atomic.Pointer[error]
		measuring atomic.Bool
		stop      atomic.Bool
		wg        sync.WaitGroup
	)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i)+1, uint64(time.Now().UnixNano())))
			for !stop.Load() {
				err := r.read(ctx, 1+rng.Int64N(int64(span)))
				if !measuring.Load() {
					continue
				}
				if err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, &err)
					continue
				}
				ops.Add(1)
			}
		}()
	}
	time.Sleep(d / 4) // warm-up: connections, statement caches, the verdict
	hits0 := r.hits()
	cpu0 := processCPU()
	start := time.Now()
	measuring.Store(true)
	time.Sleep(d)
	measuring.Store(false)
	run := throughputRun{ops: ops.Load(), took: time.Since(start), cpu: processCPU() - cpu0, hits: r.hits() - hits0, errs: errs.Load()}
	stop.Store(true)
	wg.Wait()
	if p := firstErr.Load(); p != nil {
		run.first = *p
	}
	return run, nil
}

// processCPU returns the user and system time the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// throughput runs the throughput workload and prints its table.
func throughput(ctx context.Context, e *env) error {
	c := e.cfg
	table := "public.sqlflight_bench_accounts_" + e.id
	for _, s := range []string{
		fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, abalance int NOT NULL, filler char(84) NOT NULL)`, table),
		fmt.Sprintf(`INSERT INTO %s SELECT g, 0, '' FROM generate_series(1, %d) AS g`, table, c.tpIDs),
		fmt.Sprintf(`ANALYZE %s`, table),
	} {
		if _, err := e.admin.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("throughput: %s: %w", s, err)
		}
	}
	defer func() {
		// A background refresh started by the last reads may still be on
		// its way to the table: let it finish before the table goes.
		time.Sleep(200 * time.Millisecond)
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = e.admin.ExecContext(dctx, `DROP TABLE IF EXISTS `+table)
	}()

	kinds, err := pickKinds(c.tpKinds)
	if err != nil {
		return err
	}
	fmt.Printf("### 6. Throughput of ordinary traffic, no herd (the tax): `%s` with random ids over %d rows, each caller at saturation on a connection of its own, `QueryRowContext(…).Scan` (pgxpool: its own `QueryRow`); %d interleaved rounds of %v per contender; ratios are per round, against raw pgx in the same round; client CPU is the bench process's user + system time per read\n\n",
		fmt.Sprintf(throughputQuery, "accounts"), c.tpIDs, c.tpRounds, c.tpFor)
	fmt.Println("| contender | callers | reads/s (median) | × raw pgx (min–max) | client CPU per read (median) | cache hits | errors |")
	fmt.Println("|---|---|---|---|---|---|---|")
	for _, callers := range c.tpCallers {
		runs := make([][]throughputRun, len(kinds))
		for round := range c.tpRounds {
			for i, k := range kinds {
				run, err := runThroughput(ctx, c.dsn, table, k, c.tpIDs, callers, c.tpFor)
				if err != nil {
					return fmt.Errorf("throughput / %s: %w", k.name, err)
				}
				runs[i] = append(runs[i], run)
				fmt.Fprintf(os.Stderr, "done: throughput / %s, %d callers, round %d: %.0f reads/s\n", k.name, callers, round+1, rate(run))
			}
		}
		for i, k := range kinds {
			var rates, ratios, cpus []float64
			var hits, ops, errs uint64
			var first error
			for round, run := range runs[i] {
				rates = append(rates, rate(run))
				if kinds[0].raw {
					ratios = append(ratios, rate(run)/rate(runs[0][round]))
				}
				if run.ops > 0 {
					cpus = append(cpus, float64(run.cpu.Nanoseconds())/float64(run.ops)/1e3)
				}
				hits, ops, errs = hits+run.hits, ops+run.ops, errs+run.errs
				if first == nil {
					first = run.first
				}
			}
			hitCell := "—"
			if !k.raw && !k.pool && ops > 0 {
				hitCell = fmt.Sprintf("%.1f %%", 100*float64(hits)/float64(ops))
			}
			errCell := strconv.FormatUint(errs, 10)
			if first != nil {
				errCell += " (" + strings.ReplaceAll(first.Error(), "|", "/") + ")"
			}
			ratioCell := "—" // raw pgx did not run
			if len(ratios) > 0 {
				ratioCell = fmt.Sprintf("%.2f–%.2f×", slices.Min(ratios), slices.Max(ratios))
			}
			fmt.Printf("| %s | %d | %.0f | %s | %.1f µs | %s | %s |\n", k.name, callers, median(rates),
				ratioCell, median(cpus), hitCell, errCell)
		}
	}
	fmt.Println()
	return nil
}

// pickKinds returns the contenders named by -throughput-kinds (numbers in
// the table, from 1), or every one.
func pickKinds(list string) ([]throughputKind, error) {
	if list == "" {
		return throughputKinds, nil
	}
	var ks []throughputKind
	for _, f := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > len(throughputKinds) {
			return nil, fmt.Errorf("-throughput-kinds: %q is not a contender's number (1–%d)", f, len(throughputKinds))
		}
		ks = append(ks, throughputKinds[n-1])
	}
	return ks, nil
}

func rate(r throughputRun) float64 {
	if r.took <= 0 {
		return 0
	}
	return float64(r.ops) / r.took.Seconds()
}
