package sqlflight

import (
	"context"
	"crypto/sha256"
	"database/sql/driver"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlflight/sqlflight/internal/key"
	"github.com/sqlflight/sqlflight/internal/memo"
	"github.com/sqlflight/sqlflight/internal/route"
	"github.com/sqlflight/sqlflight/internal/rowlevel"
	"github.com/sqlflight/sqlflight/internal/sqlscan"
	pgverdict "github.com/sqlflight/sqlflight/internal/verdict"
)

// The server's word. The scanner only filters: what it calls never
// shareable stays never, and everything it would share is confirmed by
// PostgreSQL's catalog once per statement shape and scope before its result
// is shared. The probe plans the statement as the body of a temporary
// SQL-standard function (BEGIN ATOMIC … END), with its parameters typed as
// the server infers them, inside a transaction that is always rolled back,
// on a spare connection of the scope; the function's recorded dependencies
// (pg_depend, through views' rewrite rules, operators and SQL-standard
// function bodies, recursively) name the user functions and relations it
// really reaches, and the deparsed texts (the body, view definitions,
// SQL-standard function bodies) name the built-in functions, which the
// catalog pins and so never records as dependencies. The probe and the
// catalog's other answers are internal/verdict's; this file keeps what the
// Shield remembers of them.

// FunctionVerdict is one function a statement really calls, as the server
// resolves it.
type FunctionVerdict = pgverdict.Function

// ServerVerdict is what PostgreSQL says a statement calls and reads.
type ServerVerdict = pgverdict.Statement

// verdict is the server's word on one statement shape in one scope. ready
// is closed once the fields are set.
type verdict struct {
	ready chan struct{}
	done  atomic.Bool // ready is closed (read without a select on the hit path)
	gen   uint64      // the Shield's schema generation it was learned under

	err     error     // the probe failed: the statement runs unshared
	retryAt time.Time // the verdict is asked again after this

	sv     ServerVerdict
	tables []string // what a shared result depends on: the server's base tables and the names in the text
	params []uint32 // parameter type OIDs
	// rows is the statement's row filter, when its reads may be tagged
	// by the rows they select (row-level invalidation).
	rows *rowlevel.ReadFilter
}

func (v *verdict) known() bool { return v.done.Load() }

// publish makes v known.
func (v *verdict) publish() {
	v.done.Store(true)
	close(v.ready)
}

// volatileUnvouched reports the volatile functions that pure does not name.
func (v *verdict) volatileUnvouched(pure []string) []string {
	return route.VolatileUnvouched(v.sv.Volatile, pure)
}

// verdictMemo remembers a scope's verdicts in bounded memory, under the
// schema generation gen: a new memo replaces it when the schema changed, and
// its map drops everything when full (maxVerdicts verdicts, maxVerdictBytes
// bytes of keys).
type verdictMemo struct {
	gen uint64
	m   *memo.Map[string, *verdict] // memoKey(normalized SQL) → *verdict
}

// newVerdictMemo returns an empty verdictMemo under the schema generation
// gen.
func newVerdictMemo(gen uint64) *verdictMemo {
	return &verdictMemo{gen: gen, m: memo.NewMap(maxVerdicts, maxVerdictBytes, verdictKeySize)}
}

// verdictKeySize is what a verdict counts against maxVerdictBytes: its key.
func verdictKeySize(key string, _ *verdict) int64 { return int64(len(key)) }

// memoKey is the memo's key for a normalized text: the text itself when it
// is short, a SHA-256 digest of it otherwise, so that a statement of
// megabytes is not kept for as long as its verdict stands. The two kinds
// never meet: no normalized text starts with a NUL byte.
func memoKey(normalized string) string {
	if len(normalized) <= maxVerdictKey {
		return normalized
	}
	sum := sha256.Sum256([]byte(normalized))
	return "\x00" + string(sum[:])
}

const (
	maxVerdicts = 8192
	// maxVerdictKey is the longest text the memo keeps as its key; longer
	// ones are kept as digests. maxVerdictBytes bounds the keys' bytes.
	maxVerdictKey   = 1024
	maxVerdictBytes = 4 << 20
	// verdictWait bounds how long a caller waits for the probe of a new
	// shape before running it unshared.
	verdictWait = 2 * time.Second
	// maxPendingProbes bounds the probes a scope keeps waiting or running.
	maxPendingProbes = 64
	// probeTimeout bounds one probe on the server.
	probeTimeout = 5 * time.Second
	// retryFailedProbe is how long a failed verdict stands.
	retryFailedProbe = 5 * time.Second
	// verdictMaxAge is how long a verdict stands: DDL through the Shield
	// forgets it at once, DDL by anyone else after this.
	verdictMaxAge = 10 * time.Minute
	// maxProbes bounds the probes a scope runs at once.
	maxProbes = 2
)

// verdictOf returns the scope's verdict on r, starting a probe when there
// is none (or a failed one expired). It returns nil when the parent is not
// PostgreSQL: its verdicts are the scanner's alone.
func (sc *scope) verdictOf(s *Shield, r *sqlscan.Result) *verdict {
	if !sc.serverVerdicts() {
		return nil
	}
	if plainText(r) {
		return plainVerdict
	}
	gen := s.schemaGen.Load()
	vm := sc.verdicts.Load()
	if vm == nil || vm.gen != gen {
		fresh := newVerdictMemo(gen)
		if sc.verdicts.CompareAndSwap(vm, fresh) {
			vm = fresh
		} else {
			vm = sc.verdicts.Load()
		}
	}
	key := memoKey(r.Normalized)
	if v, ok := vm.m.Load(key); ok {
		if !v.known() || time.Now().Before(v.retryAt) {
			return v
		}
		// A failed verdict stands a few seconds, a good one verdictMaxAge
		// (the schema may change behind the Shield's back): ask again.
		nv := &verdict{ready: make(chan struct{}), gen: gen}
		if vm.m.CompareAndSwap(key, v, nv) {
			sc.startProbe(s, nv, r)
			return nv
		}
		x, ok := vm.m.Load(key)
		if !ok {
			return v
		}
		return x
	}
	nv := &verdict{ready: make(chan struct{}), gen: gen}
	x, loaded := vm.m.LoadOrStore(key, nv)
	if loaded {
		return x
	}
	sc.startProbe(s, nv, r)
	return nv
}

// startProbe runs v's probe in the background, unless too many wait
// already (an application that inlines its values makes a new shape per
// call): then v fails at once, briefly, and the statement runs unshared.
func (sc *scope) startProbe(s *Shield, v *verdict, r *sqlscan.Result) {
	if sc.pending.Add(1) > maxPendingProbes {
		sc.pending.Add(-1)
		s.stats.probeFailures.Add(1)
		v.err = errProbesBusy
		v.retryAt = time.Now().Add(time.Second)
		v.publish()
		return
	}
	go func() {
		defer sc.pending.Add(-1)
		sc.probe(s, v, r)
	}()
}

var errProbesBusy = errors.New("sqlflight: too many statement shapes wait for the server's verdict")

// plainVerdict is the verdict on a statement with nothing for the server to
// resolve.
var plainVerdict = func() *verdict {
	v := &verdict{ready: make(chan struct{}), sv: ServerVerdict{TablesKnown: true}, tables: []string{}}
	v.publish()
	return v
}()

// plainText reports whether r leaves the server nothing to resolve: a
// SELECT of numbers and parameters alone (SELECT 1, SELECT $1, $2). No
// relation, function, operator, cast (a domain's CHECK, a user cast) or
// attribute notation can hide in it.
func plainText(r *sqlscan.Result) bool {
	if len(r.Statements) != 1 || r.Kind != sqlscan.KindSelect || len(r.Tables) != 0 || len(r.Functions) != 0 {
		return false
	}
	rest, ok := strings.CutPrefix(r.Normalized, "SELECT ")
	if !ok {
		rest, ok = strings.CutPrefix(r.Normalized, "select ")
	}
	return ok && strings.Trim(rest, "0123456789$, ") == ""
}

// serverVerdicts reports whether the scope's server can be asked for
// verdicts: a PostgreSQL that accepts the probe.
func (sc *scope) serverVerdicts() bool { return sc.postgres && !sc.textOnly.Load() }

// awaitVerdict waits for v on ctx, at most verdictWait, and reports
// whether it is known (failed ones included).
func awaitVerdict(ctx context.Context, v *verdict) bool {
	if v.known() {
		return true
	}
	t := time.NewTimer(verdictWait)
	defer t.Stop()
	select {
	case <-v.ready:
		return true
	case <-ctx.Done():
	case <-t.C:
	}
	return false
}

// awaitVerdict is awaitVerdict on c's caller. Under Options.MaxConns its
// real connection is lendable meanwhile: the probe may need it.
func (c *conn) awaitVerdict(ctx context.Context, v *verdict) bool {
	if v.known() || c.sc.spare.max <= 0 {
		return awaitVerdict(ctx, v)
	}
	c.offer()
	defer c.withdraw()
	return awaitVerdict(ctx, v)
}

// probe asks the server for v and publishes it.
func (sc *scope) probe(s *Shield, v *verdict, r *sqlscan.Result) {
	defer v.publish()
	defer func() {
		if p := recover(); p != nil {
			v.err = wrapf("sqlflight: statement probe panicked: %v", p)
			v.retryAt = time.Now().Add(retryFailedProbe)
		}
	}()
	sc.probes <- struct{}{}
	defer func() { <-sc.probes }()
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	start := time.Now()
	v.retryAt = time.Now().Add(verdictMaxAge)
	err := sc.withSpare(ctx, s, func(conn pgverdict.Session) error {
		sv, params, err := pgverdict.Probe(ctx, conn, r)
		if err == nil {
			v.sv, v.params, v.tables = sv, params, union(sv.Tables, r.Tables)
			v.rows = sc.learnRows(ctx, s, conn, r, v)
		}
		return err
	})
	s.stats.probes.Add(1)
	s.stats.probeDuration.observe(time.Since(start))
	if errors.Is(err, pgverdict.ErrNoProbe) && !sc.textOnly.Swap(true) {
		s.log.Warn("sqlflight: the server refuses the probe (a hot standby, a read-only default, or no TEMPORARY privilege); this scope's verdicts are the scanner's alone",
			"error", errorClass(err))
	}
	if err != nil {
		s.stats.probeFailures.Add(1)
		v.err = err
		v.retryAt = time.Now().Add(retryFailedProbe)
		s.warnEvery("probe", r.Normalized, "sqlflight: the server's verdict on a statement could not be had; it runs unshared",
			"error", errorClass(err), "fingerprint", key.Fingerprint(r.Normalized))
	}
}

// withSpare runs f on a spare real connection of the scope (never a
// caller's) and gives it back, broken if f failed in a way that may have
// left the session dirty.
func (sc *scope) withSpare(ctx context.Context, s *Shield, f func(pgverdict.Session) error) error {
	rc, _, err := sc.anyReal(ctx, s)
	if err != nil {
		return err
	}
	broken := true // unless f returns normally and leaves the session idle
	defer func() { sc.spare.put(rc, broken, s) }()
	c := pgverdict.Of(rc)
	err = f(c)
	broken = !c.Clean()
	return err
}

// noteConn learns what a new real connection tells about the server:
// standard_conforming_strings off makes backslashes escapes in '…'.
func (sc *scope) noteConn(rc driver.Conn) {
	if c, ok := rc.(*stdlib.Conn); ok {
		if c.Conn().PgConn().ParameterStatus("standard_conforming_strings") == "off" {
			sc.nonStandard.Store(true)
		}
		return
	}
	if !sc.postgres {
		return
	}
	// Another PostgreSQL driver: the setting is asked (a session may
	// change it, but a new connection starts with the server's default).
	ctx, cancel := context.WithTimeout(context.Background(), pgverdict.DetectTimeout)
	defer cancel()
	rows, err := pgverdict.OfDriver(rc).Query(ctx, `SELECT pg_catalog.current_setting('standard_conforming_strings')`)
	if err == nil && len(rows) == 1 && len(rows[0]) == 1 && rows[0][0] != nil && *rows[0][0] == "off" {
		sc.nonStandard.Store(true) // as a pgx connection's ParameterStatus says it
	}
}

// closureMemo remembers the write closures of a scope's tables (by
// tableKey) under the schema generation gen. It is cleared when it holds
// more than maxVerdicts tables before a batch of learned ones goes in: a
// batch is never split and a table learned again does not count twice,
// unlike a memo.Map, which counts every store; and a lookup of several
// tables reads them all under one lock.
type closureMemo struct {
	gen uint64
	mu  sync.Mutex
	m   map[string]pgverdict.Closure
}

// writeClosure returns the tables a write to tables may change, and false
// when that may be any table. On PostgreSQL it asks the catalog once per
// table (on a spare connection); elsewhere the tables are what they are.
func (sc *scope) writeClosure(ctx context.Context, s *Shield, tables []string) ([]string, bool) {
	if !sc.postgres || len(tables) == 0 {
		return tables, true
	}
	gen := s.schemaGen.Load()
	memo := sc.closures.Load()
	if memo == nil || memo.gen != gen {
		fresh := &closureMemo{gen: gen, m: map[string]pgverdict.Closure{}}
		if !sc.closures.CompareAndSwap(memo, fresh) {
			fresh = sc.closures.Load()
		}
		memo = fresh
	}
	out := slices.Clone(tables)
	var missing []string
	memo.mu.Lock()
	for _, t := range tables {
		cl, ok := memo.m[tableKey(t)]
		switch {
		case !ok:
			missing = append(missing, t)
		case cl.All:
			memo.mu.Unlock()
			return nil, false
		default:
			out = append(out, cl.Tables...)
		}
	}
	memo.mu.Unlock()
	if len(missing) == 0 {
		return out, true
	}
	// Lookups share the probes' slots: concurrent writers after a schema
	// change must not each open a spare connection.
	wait := time.NewTimer(time.Second)
	defer wait.Stop()
	select {
	case sc.probes <- struct{}{}:
		defer func() { <-sc.probes }()
	case <-ctx.Done():
		return nil, false
	case <-wait.C:
		return nil, false // busy: any table
	}
	learned := make(map[string]pgverdict.Closure, len(missing))
	err := sc.withSpare(ctx, s, func(conn pgverdict.Session) error {
		for _, t := range missing {
			cl, err := pgverdict.QueryClosure(ctx, conn, t)
			if err != nil {
				return err
			}
			learned[tableKey(t)] = cl
		}
		return nil
	})
	if err != nil {
		return nil, false // unknown: any table
	}
	memo.mu.Lock()
	if len(memo.m) > maxVerdicts {
		clear(memo.m)
	}
	for k, cl := range learned {
		memo.m[k] = cl
	}
	memo.mu.Unlock()
	for _, cl := range learned {
		if cl.All {
			return nil, false
		}
		out = append(out, cl.Tables...)
	}
	slices.Sort(out)
	return slices.Compact(out), true
}

// learnRows returns the row filter of the verdict v on r, learning the
// classes of its table's columns from the catalog (the Shield remembers
// them for the writes and changes to that table), or nil when its reads
// are judged by their table.
func (sc *scope) learnRows(ctx context.Context, s *Shield, conn pgverdict.Session, r *sqlscan.Result, v *verdict) *rowlevel.ReadFilter {
	rf, table := rowlevel.FilterOf(r, sc.nonStandard.Load())
	if rf == nil {
		return nil
	}
	cols, err := pgverdict.QueryColumns(ctx, conn, table)
	if err != nil {
		return nil
	}
	s.rowCols.Set(table, cols, v.gen)
	return rowlevel.NewReadFilter(rf, table, cols, v.params)
}
