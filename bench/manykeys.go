package main

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sqlflight/sqlflight"
)

// The manykeys workload is many concurrent reads of one statement shape,
// SELECT id, v, n FROM t WHERE id = $1, each with an id of its own (or a
// few callers per id), released together through database/sql's
// QueryContext as application code calls it. Without batching every
// distinct id is one statement at the server; batching of one shape runs
// the ids gathered while a read is in flight as one statement. The
// statements that reached the server are counted by pg_stat_statements;
// every caller's rows are checked against the values its id was inserted
// with (v = 'v' || id, n = id * 7): exactly its own row, or none for an
// id that is absent.
//
//   A: -manykeys-callers callers, each with a distinct id of its own;
//   B: -manykeys-keys ids with -manykeys-each callers each, plus
//      -manykeys-absent callers of ids that are not in the table.
//
// Rounds interleave the contenders (each round draws new ids, the same for
// every contender); each contender's pool is capped at -maxconns and
// pre-warmed, like the other workloads' pools.

// manyKeysKind is one contender of the manykeys workload.
type manyKeysKind struct {
	name   string
	driver string // database/sql driver name: "pgx" or sqlflight.DriverName
	ann    string // annotation of the statement ("" for none)
	// realCap leaves database/sql's pool uncapped and caps sqlflight's real
	// connections at -maxconns instead (sqlflight.max_conns): what
	// docs/connections.md advises, so that every caller can wait in a
	// flight or a batch while no more server connections open than under
	// the capped pool.
	realCap bool
}

var manyKeysKinds = []manyKeysKind{
	{name: "raw pgx v5 stdlib", driver: "pgx"},
	{name: "sqlflight, default policy", driver: sqlflight.DriverName},
	{name: "sqlflight, `nobatch`", driver: sqlflight.DriverName, ann: "nobatch"},
	{name: "sqlflight, default policy, real connections capped (`sqlflight.max_conns`)", driver: sqlflight.DriverName, realCap: true},
	{name: "sqlflight, `nobatch`, real connections capped (`sqlflight.max_conns`)", driver: sqlflight.DriverName, ann: "nobatch", realCap: true},
}

const manyKeysQuery = "SELECT id, v, n FROM %s WHERE id = $1"

// manyKeysStmt is k's statement on table.
func manyKeysStmt(table string, k manyKeysKind) string {
	q := fmt.Sprintf(manyKeysQuery, table)
	if k.ann != "" {
		q = "/* sqlflight: " + k.ann + " */ " + q
	}
	return q
}

// mkPlan is the ids of one round, the same for every contender.
type mkPlan struct {
	single []int // the lone reads, one after another
	a      []int // scenario A: one caller each
	b      []int // scenario B: one caller each, ids repeated, absent ids among them
}

// manyKeysPlan draws round's ids over a table of rows ids (1…rows).
func manyKeysPlan(c config, round int) mkPlan {
	rng := rand.New(rand.NewPCG(uint64(round)+1, 0x6d616e796b657973))
	perm := rng.Perm(c.mkRows) // 0…rows-1
	var p mkPlan
	for i := range c.mkCallers {
		p.a = append(p.a, perm[i]+1)
	}
	rng.Shuffle(len(perm), func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
	for i := range c.mkKeys {
		for range c.mkEach {
			p.b = append(p.b, perm[i]+1)
		}
	}
	absent := rng.Perm(c.mkRows) // absent ids: rows+1…2·rows
	for i := range c.mkAbsent {
		p.b = append(p.b, c.mkRows+absent[i]+1)
	}
	rng.Shuffle(len(p.b), func(i, j int) { p.b[i], p.b[j] = p.b[j], p.b[i] })
	for range c.mkSingle {
		p.single = append(p.single, 1+rng.IntN(c.mkRows))
	}
	return p
}

// mkScenario is one contender's run of one scenario in one round.
type mkScenario struct {
	statements int64 // statements at the server for the table (-1: not counted)
	p50, p99   time.Duration
	wrong      int64 // callers of a present id that did not get exactly their own row
	wrongAbs   int64 // callers of an absent id that got any row
	errs       int64
	first      error
	// sqlflight's counters over the scenario (the default Shield's)
	flights, followers, bad uint64
}

// mkRun is one contender's run of one round.
type mkRun struct {
	single time.Duration // median of the lone reads
	a, b   mkScenario
}

// pgss counts the statements that reached the server for one table, in
// pg_stat_statements. Its queries pass the table's name as a parameter, so
// that their own text never mentions it.
type pgss struct {
	db      *sql.DB
	name    string // the table's name as the statements spell it
	missing string // why the statements cannot be counted ("" when they can)
	reset   string // why the scoped reset failed, if it did (counts are differences anyway)
}

const pgssWhere = `FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND strpos(query, $1) > 0`

func newPgss(ctx context.Context, db *sql.DB, name string) *pgss {
	p := &pgss{db: db, name: name}
	if _, err := p.calls(ctx); err != nil {
		p.missing = err.Error()
	}
	return p
}

func (p *pgss) calls(ctx context.Context) (int64, error) {
	var n int64
	err := p.db.QueryRowContext(ctx, `SELECT coalesce(sum(calls), 0)::bigint `+pgssWhere, p.name).Scan(&n)
	return n, err
}

// begin resets the table's entries (only those: a global reset would wipe
// the counts of anything else running on the server) and returns the calls
// left, which the end of the scenario subtracts.
func (p *pgss) begin(ctx context.Context) int64 {
	if p.missing != "" {
		return 0
	}
	if _, err := p.db.ExecContext(ctx, `SELECT count(pg_stat_statements_reset(userid, dbid, queryid)) `+pgssWhere, p.name); err != nil && p.reset == "" {
		p.reset = err.Error()
	}
	n, err := p.calls(ctx)
	if err != nil {
		p.missing = err.Error()
	}
	return n
}

// end returns the statements since begin returned n0, or -1.
func (p *pgss) end(ctx context.Context, n0 int64) int64 {
	if p.missing != "" {
		return -1
	}
	n, err := p.calls(ctx)
	if err != nil {
		p.missing = err.Error()
		return -1
	}
	return n - n0
}

// manyKeysAnswer is how one caller's read went.
type manyKeysAnswer int

const (
	mkRight manyKeysAnswer = iota
	mkWrong
	mkErr
)

// readOwn reads id through db and says whether the caller got exactly its
// own row (none for an id above rows: what QueryRow turns into
// sql.ErrNoRows). Every row is read, so that a row too many is seen.
func readOwn(ctx context.Context, db *sql.DB, q string, id, rows int) (manyKeysAnswer, error) {
	rs, err := db.QueryContext(ctx, q, id)
	if err != nil {
		return mkErr, err
	}
	n, ok := 0, true
	for rs.Next() {
		var gotID, gotN int
		var gotV string
		if err := rs.Scan(&gotID, &gotV, &gotN); err != nil {
			_ = rs.Close()
			return mkErr, err
		}
		n++
		if gotID != id || gotV != "v"+strconv.Itoa(id) || gotN != id*7 {
			ok = false
		}
	}
	if err := rs.Err(); err != nil {
		_ = rs.Close()
		return mkErr, err
	}
	if err := rs.Close(); err != nil {
		return mkErr, err
	}
	want := 1
	if id < 1 || id > rows {
		want = 0
	}
	if !ok || n != want {
		return mkWrong, nil
	}
	return mkRight, nil
}

// scenario releases one caller per entry of ids together on db, reading
// with q, and counts what reached the server.
func (e *env) manyKeysScenario(ctx context.Context, db *sql.DB, q string, ids []int, p *pgss) mkScenario {
	var s mkScenario
	sh := sqlflight.ShieldOf(db)
	var st0 sqlflight.Stats
	if sh != nil {
		st0 = sh.Stats()
	}
	lat := make([]time.Duration, len(ids))
	var wrong, wrongAbs, errs atomic.Int64
	var firstErr atomic.Pointer[error]
	start := make(chan struct{})
	var ready, wg sync.WaitGroup
	runtime.GC()
	n0 := p.begin(ctx)
	for i, id := range ids {
		ready.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			ready.Done()
			<-start
			t := time.Now()
			a, err := readOwn(ctx, db, q, id, e.cfg.mkRows)
			lat[i] = time.Since(t)
			switch {
			case a == mkErr:
				errs.Add(1)
				firstErr.CompareAndSwap(nil, &err)
			case a == mkWrong && id > e.cfg.mkRows:
				wrongAbs.Add(1)
			case a == mkWrong:
				wrong.Add(1)
			}
		}()
	}
	ready.Wait()
	close(start)
	wg.Wait()
	s.statements = p.end(ctx, n0)
	s.p50, s.p99 = percentile(lat, 0.50), percentile(lat, 0.99)
	s.wrong, s.wrongAbs, s.errs = wrong.Load(), wrongAbs.Load(), errs.Load()
	if f := firstErr.Load(); f != nil {
		s.first = *f
	}
	if sh != nil {
		st := sh.Stats()
		s.flights, s.followers, s.bad = st.Flights-st0.Flights, st.Followers-st0.Followers, st.BadAnnotations-st0.BadAnnotations
	}
	return s
}

// runManyKeys runs one round of contender k: its pool capped at -maxconns
// and pre-warmed, one unmeasured read (sqlflight learns the server's
// verdict on the statement), the lone reads, then A and B.
func (e *env) runManyKeys(ctx context.Context, k manyKeysKind, plan mkPlan, p *pgss) (mkRun, error) {
	var r mkRun
	dsn := e.cfg.dsn
	if k.realCap {
		sep := "?"
		if strings.Contains(dsn, "?") {
			sep = "&"
		}
		dsn += fmt.Sprintf("%ssqlflight.max_conns=%d", sep, e.cfg.maxConns)
	}
	db, err := sql.Open(k.driver, dsn)
	if err != nil {
		return r, err
	}
	defer db.Close()
	if !k.realCap {
		capPool(db, e.cfg.maxConns)
	}
	if err := prewarm(ctx, db, e.cfg.maxConns); err != nil {
		return r, err
	}
	q := manyKeysStmt(e.mk, k)
	if a, err := readOwn(ctx, db, q, 1, e.cfg.mkRows); err != nil || a != mkRight {
		return r, fmt.Errorf("warm-up read of id 1: answer %d, %v", a, err)
	}
	var single []float64
	for _, id := range plan.single {
		t := time.Now()
		a, err := readOwn(ctx, db, q, id, e.cfg.mkRows)
		single = append(single, float64(time.Since(t)))
		if err != nil || a != mkRight {
			return r, fmt.Errorf("lone read of id %d: answer %d, %v", id, a, err)
		}
	}
	r.single = time.Duration(median(single))
	r.a = e.manyKeysScenario(ctx, db, q, plan.a, p)
	r.b = e.manyKeysScenario(ctx, db, q, plan.b, p)
	return r, nil
}

// prewarm opens n connections of db and gives them back to its pool.
func prewarm(ctx context.Context, db *sql.DB, n int) error {
	conns := make([]*sql.Conn, 0, n)
	defer func() {
		for _, cn := range conns {
			_ = cn.Close()
		}
	}()
	for range n {
		cn, err := db.Conn(ctx)
		if err != nil {
			return err
		}
		conns = append(conns, cn)
		if err := cn.PingContext(ctx); err != nil {
			return err
		}
	}
	return nil
}

// manyKeys runs the manykeys workload and prints its tables.
func manyKeys(ctx context.Context, e *env) error {
	runs, p, err := e.measureManyKeys(ctx)
	if err != nil {
		return err
	}
	printManyKeys(e.cfg, runs, p)
	return nil
}

// measureManyKeys runs every round of every contender: runs[i] holds
// manyKeysKinds[i]'s rounds; p says whether the statements were counted.
func (e *env) measureManyKeys(ctx context.Context) (runs [][]mkRun, p *pgss, err error) {
	c := e.cfg
	switch {
	case c.mkRows < 1, c.mkCallers < 1, c.mkKeys < 0, c.mkEach < 1, c.mkAbsent < 0, c.mkSingle < 1, c.mkRounds < 1:
		return nil, nil, fmt.Errorf("manykeys: -manykeys-rows, -callers, -each, -single and -rounds must be positive, -keys and -absent not negative")
	case c.mkCallers > c.mkRows || c.mkKeys > c.mkRows || c.mkAbsent > c.mkRows:
		return nil, nil, fmt.Errorf("manykeys: -manykeys-callers, -keys and -absent are distinct ids: at most -manykeys-rows (%d)", c.mkRows)
	case e.mk == "":
		return nil, nil, fmt.Errorf("manykeys: the env made no table (setup without manykeys)")
	}
	p = newPgss(ctx, e.admin, strings.TrimPrefix(e.mk, "public."))
	runs = make([][]mkRun, len(manyKeysKinds))
	for round := range c.mkRounds {
		plan := manyKeysPlan(c, round)
		for i, k := range manyKeysKinds {
			r, err := e.runManyKeys(ctx, k, plan, p)
			if err != nil {
				return nil, nil, fmt.Errorf("manykeys / %s: %w", k.name, err)
			}
			runs[i] = append(runs[i], r)
			fmt.Fprintf(os.Stderr, "done: manykeys / %s, round %d: A %s statements, p99 %v; B %s statements, p99 %v\n",
				k.name, round+1, stmtCell([]int64{r.a.statements}), r.a.p99.Round(time.Microsecond), stmtCell([]int64{r.b.statements}), r.b.p99.Round(time.Microsecond))
		}
	}
	return runs, p, nil
}

// printManyKeys prints the manykeys tables: A's and B's.
func printManyKeys(c config, runs [][]mkRun, p *pgss) {
	bCallers := c.mkKeys*c.mkEach + c.mkAbsent
	fmt.Printf("### 7. Many keys, one shape: `%s` over a fresh table of %s rows (id int primary key, v = 'v' || id, n = id * 7), callers released together on one channel, one `QueryContext` each through database/sql (rows read to the end); %d interleaved rounds, new ids each round (the same for every contender); medians over the rounds\n\n",
		fmt.Sprintf(manyKeysQuery, "t"), thousands(c.mkRows), c.mkRounds)
	fmt.Printf("- every contender's pool: SetMaxOpenConns(%d) and SetMaxIdleConns(%[1]d) (-maxconns), pre-warmed: a connection per caller (%s) would exceed max_connections, so every contender's callers queue in database/sql's pool alike; except \"real connections capped\": database/sql's pool uncapped, sqlflight's real connections capped at %[1]d instead (sqlflight.max_conns), so that every caller is in the driver at once and no more server connections open\n", c.maxConns, thousands(max(c.mkCallers, bCallers)))
	if p.missing != "" {
		fmt.Printf("- statements: n/a: pg_stat_statements cannot be read (%s)\n", strings.ReplaceAll(p.missing, "|", "/"))
	} else {
		fmt.Printf("- statements: sum(calls) in pg_stat_statements over the entries of this database whose query text names the table, over the scenario (its entries reset before it, by queryid only; any statement naming the table counts, a verdict probe of a new shape included)\n")
		if p.reset != "" {
			fmt.Printf("- the scoped pg_stat_statements_reset failed (%s): the counts are differences of sum(calls) before and after each scenario\n", strings.ReplaceAll(p.reset, "|", "/"))
		}
	}
	fmt.Printf("- single read: one caller alone, one id, median of %d sequential reads per round; \"p99 / single read\" divides the scenario's p99 by it\n", c.mkSingle)
	fmt.Printf("- wrong answers (all rounds): a caller of a present id that did not get exactly one row with its own id, v and n; a caller of an absent id that got any row (it must get none: `QueryRow` would return sql.ErrNoRows)\n")
	fmt.Printf("- sqlflight counters: its Shield's Stats over the scenario (medians per round): Flights (shared flights started), Followers (callers that joined one), BadAnnotations (an annotation word it does not know makes the statement run unshared)\n\n")

	scen := func(title string, callers int, get func(mkRun) mkScenario, absent bool) {
		fmt.Printf("#### %s\n\n", title)
		head := "| contender | callers | statements at the server | p50 | p99 | single read | p99 / single read | wrong answers |"
		rule := "|---|---:|---:|---:|---:|---:|---:|---:|"
		if absent {
			head = "| contender | callers | statements at the server | p50 | p99 | single read | p99 / single read | wrong answers (present ids) | rows for absent ids |"
			rule += "---:|"
		}
		fmt.Println(head + " errors | sqlflight flights / followers / bad annotations |")
		fmt.Println(rule + "---:|---|")
		for i, k := range manyKeysKinds {
			var stmts []int64
			var p50s, p99s, singles []float64
			var wrong, wrongAbs, errs int64
			var first error
			var fl, fo, bad []float64
			for _, r := range runs[i] {
				s := get(r)
				stmts = append(stmts, s.statements)
				p50s, p99s, singles = append(p50s, float64(s.p50)), append(p99s, float64(s.p99)), append(singles, float64(r.single))
				wrong, wrongAbs, errs = wrong+s.wrong, wrongAbs+s.wrongAbs, errs+s.errs
				if first == nil {
					first = s.first
				}
				fl, fo, bad = append(fl, float64(s.flights)), append(fo, float64(s.followers)), append(bad, float64(s.bad))
			}
			p99, single := time.Duration(median(p99s)), time.Duration(median(singles))
			fmt.Printf("| %s | %s | %s | %s | %s | %s | %s | %d |", k.name, thousands(callers), stmtCell(stmts),
				dur(time.Duration(median(p50s))), dur(p99), dur(single), ratio(float64(p99), float64(single)), wrong)
			if absent {
				fmt.Printf(" %d |", wrongAbs)
			}
			errCell := strconv.FormatInt(errs, 10)
			if first != nil {
				errCell += " (" + strings.ReplaceAll(first.Error(), "|", "/") + ")"
			}
			counters := "—"
			if k.driver != "pgx" {
				counters = fmt.Sprintf("%.0f / %.0f / %.0f", median(fl), median(fo), median(bad))
			}
			fmt.Printf(" %s | %s |\n", errCell, counters)
		}
		fmt.Println()
	}
	scen(fmt.Sprintf("7a. %s callers × %s distinct ids released together", thousands(c.mkCallers), thousands(c.mkCallers)), c.mkCallers, func(r mkRun) mkScenario { return r.a }, false)
	scen(fmt.Sprintf("7b. %s callers over %s ids (%d each) plus %s absent ids", thousands(c.mkKeys*c.mkEach), thousands(c.mkKeys), c.mkEach, thousands(c.mkAbsent)), bCallers, func(r mkRun) mkScenario { return r.b }, true)
}

// stmtCell is the median of the statements counted in each round, with
// their range when the rounds differ ("n/a" when they were not counted).
func stmtCell(v []int64) string {
	if len(v) == 0 || slices.Contains(v, -1) {
		return "n/a"
	}
	lo, hi := slices.Min(v), slices.Max(v)
	f := make([]float64, len(v))
	for i, x := range v {
		f[i] = float64(x)
	}
	m := strconv.FormatFloat(median(f), 'f', -1, 64)
	if lo == hi {
		return m
	}
	return fmt.Sprintf("%s (%d–%d)", m, lo, hi)
}

// thousands writes n with a comma between groups of three digits.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
