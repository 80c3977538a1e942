package verdict

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

	"github.com/sqlflight/sqlflight/internal/epoch"
	"github.com/sqlflight/sqlflight/internal/errtext"
	"github.com/sqlflight/sqlflight/internal/memo"
	"github.com/sqlflight/sqlflight/internal/route"
	"github.com/sqlflight/sqlflight/internal/sqlscan"
)

// A Book is what a scope remembers of its server's word: a verdict per
// statement shape, a write closure per table, and how the server reads
// '…' literals. It asks its Host's spare sessions, in the background for
// verdicts, and bounds the probes (and closure lookups) that run at once.
//
// A statement shape is the ShapeKey of a scanned text (sqlscan.Result):
// texts that differ only in the values of constants of the same types,
// where a value alone is read (WHERE (id = 4), WHERE (id = 5)), are one
// shape, so that an application that inlines its values costs one probe
// per statement, not one per value. The probe plans the first text seen
// (its constants are valid SQL); what it learns holds for every text of
// the shape, since the server resolves the same functions, operators,
// casts, relations and parameter types for all of them. Only the row
// filter (Rows) is the probed text's own: its conditions may hold that
// text's constants.

// Verdict is the server's word on one statement shape in one scope; R is
// the caller's row filter. Its fields are set before it is Known and
// never change afterwards.
type Verdict[R any] struct {
	ready chan struct{} // closed once the fields are set
	done  atomic.Bool   // ready is closed (read without a select on the hit path)

	// Gen is the schema generation (Host.SchemaGen) it was learned under.
	Gen uint64
	// Err: the probe failed, and the statement runs unshared.
	Err error
	// RetryAt: the verdict is asked again after this.
	RetryAt time.Time
	// Server is the server's verdict (Probe's).
	Server Statement
	// Tables are what a shared result depends on: the server's base tables
	// and the names in the text.
	Tables []string
	// Params are the parameter type OIDs.
	Params []uint32
	// Rows is the row filter (Host.Rows) of the text the probe planned,
	// when its reads may be tagged by the rows they select. It is that
	// text's: its conditions may hold the text's constants (WHERE id = 4),
	// and another text of the shape (WHERE id = 5) must not be tagged by
	// them; the caller derives that text's own filter from it.
	Rows R
}

// newVerdict returns a Verdict not yet known, under the generation gen.
func newVerdict[R any](gen uint64) *Verdict[R] {
	return &Verdict[R]{ready: make(chan struct{}), Gen: gen}
}

// Known reports whether v's fields are set (a failed verdict is known).
func (v *Verdict[R]) Known() bool { return v.done.Load() }

// publish makes v known.
func (v *Verdict[R]) publish() {
	v.done.Store(true)
	close(v.ready)
}

// Await waits for v on ctx, at most AwaitLimit, and reports whether it is
// known (failed ones included).
func (v *Verdict[R]) Await(ctx context.Context) bool {
	if v.Known() {
		return true
	}
	t := time.NewTimer(AwaitLimit)
	defer t.Stop()
	select {
	case <-v.ready:
		return true
	case <-ctx.Done():
	case <-t.C:
	}
	return false
}

// VolatileUnvouched reports the volatile functions of v that pure does
// not name.
func (v *Verdict[R]) VolatileUnvouched(pure []string) []string {
	return route.VolatileUnvouched(v.Server.Volatile, pure)
}

// Host is what a Book needs of its scope.
type Host[R any] interface {
	// Postgres reports whether the scope's server is PostgreSQL: no other
	// is asked anything.
	Postgres() bool
	// SchemaGen is the schema generation: what a Book learned under
	// another is forgotten.
	SchemaGen() uint64
	// Spare runs f on a catalog Session over a spare real connection of
	// the scope (never a caller's) and gives the connection back, broken
	// unless the Session is Clean afterwards; it returns f's error.
	Spare(ctx context.Context, f func(Session) error) error
	// Rows returns the row filter of v (just probed, Err nil) on r, the
	// text probed, asking conn what it needs, or the zero R when r's reads
	// are judged by their table.
	Rows(ctx context.Context, conn Session, r *sqlscan.Result, v *Verdict[R]) R
	// Probed reports a probe of r that ran for took and failed with err
	// (nil: it succeeded); refused: the server refused the probe
	// (ErrNoProbe) for the first time, and the scope's verdicts are the
	// scanner's from now on.
	Probed(r *sqlscan.Result, took time.Duration, err error, refused bool)
	// Busy reports a verdict failed at once (ErrBusy): too many probes
	// waited.
	Busy()
}

// Book remembers a scope's verdicts and write closures. Its methods are
// safe for concurrent use. A nil *Book is a scope's of no server: it asks
// nothing, and its Of is nil.
type Book[R any] struct {
	h           Host[R]
	plain       *Verdict[R] // the verdict on a text with nothing to resolve
	verdicts    atomic.Pointer[verdictMemo[R]]
	closures    atomic.Pointer[closureMemo]
	slots       chan struct{} // bounds the probes (and closure lookups) running at once
	pending     atomic.Int64  // probes waiting or running
	nonStandard atomic.Bool   // standard_conforming_strings = off
	textOnly    atomic.Bool   // the server refuses the probe: the scanner's verdicts alone
}

// ErrBusy is a verdict's Err when too many statement shapes waited for
// the server's verdict already.
var ErrBusy = errors.New("sqlflight: too many statement shapes wait for the server's verdict")

const (
	maxVerdicts = 8192
	// maxVerdictKey is the longest text the memo keeps as its key; longer
	// ones are kept as digests. maxVerdictBytes bounds the keys' bytes.
	maxVerdictKey   = 1024
	maxVerdictBytes = 4 << 20
	// AwaitLimit bounds how long Await waits for the probe of a new shape
	// (whose statement then runs unshared).
	AwaitLimit = 2 * time.Second
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

// NewBook returns an empty Book of h's scope.
func NewBook[R any](h Host[R]) *Book[R] {
	plain := &Verdict[R]{ready: make(chan struct{}), Server: Statement{TablesKnown: true}, Tables: []string{}}
	plain.publish()
	return &Book[R]{h: h, plain: plain, slots: make(chan struct{}, maxProbes)}
}

// Asks reports whether the scope's server can be asked for verdicts: a
// PostgreSQL that accepts the probe.
func (b *Book[R]) Asks() bool { return b != nil && b.h.Postgres() && !b.textOnly.Load() }

// NonStandard reports whether the server reads backslashes in '…' as
// escapes (standard_conforming_strings off), as NoteConn learned it.
func (b *Book[R]) NonStandard() bool { return b != nil && b.nonStandard.Load() }

// verdictMemo remembers a scope's verdicts in bounded memory, under the
// schema generation gen: a new memo replaces it when the schema changed, and
// its map drops everything when full (maxVerdicts verdicts, maxVerdictBytes
// bytes of keys).
type verdictMemo[R any] struct {
	gen uint64
	m   *memo.Map[string, *Verdict[R]] // memoKey(shape key) → verdict
}

// verdictKeySize is what a verdict counts against maxVerdictBytes: its key.
func verdictKeySize[R any](key string, _ *Verdict[R]) int64 { return int64(len(key)) }

// memoKey is the memo's key for a shape key (sqlscan.Result.ShapeKey): the
// key itself when it is short, a SHA-256 digest of it otherwise, so that a
// statement of megabytes is not kept for as long as its verdict stands.
// The two kinds meet only if a digest is found for a text of 33 bytes
// that starts with a NUL byte: only a text holding a NUL byte has a shape
// key that starts with one.
func memoKey(shapeKey string) string {
	if len(shapeKey) <= maxVerdictKey {
		return shapeKey
	}
	sum := sha256.Sum256([]byte(shapeKey))
	return "\x00" + string(sum[:])
}

// Of returns the scope's verdict on r's statement shape, starting a probe
// of r when there is none (or it expired: a failed verdict stands a few
// seconds, a good one ten minutes). It returns nil when the server is not
// asked (Asks false): its verdicts are the scanner's alone. The verdict's
// Rows are those of the text probed, which may not be r (see Book).
func (b *Book[R]) Of(r *sqlscan.Result) *Verdict[R] {
	if !b.Asks() {
		return nil
	}
	if plainText(r) {
		return b.plain
	}
	gen := b.h.SchemaGen()
	vm := b.verdicts.Load()
	if vm == nil || vm.gen != gen {
		fresh := &verdictMemo[R]{gen: gen, m: memo.NewMap(maxVerdicts, maxVerdictBytes, verdictKeySize[R])}
		if b.verdicts.CompareAndSwap(vm, fresh) {
			vm = fresh
		} else {
			vm = b.verdicts.Load()
		}
	}
	key := memoKey(r.ShapeKey)
	if v, ok := vm.m.Load(key); ok {
		if !v.Known() || time.Now().Before(v.RetryAt) {
			return v
		}
		// A failed verdict stands a few seconds, a good one verdictMaxAge
		// (the schema may change behind the Shield's back): ask again.
		nv := newVerdict[R](gen)
		if vm.m.CompareAndSwap(key, v, nv) {
			b.startProbe(nv, r)
			return nv
		}
		x, ok := vm.m.Load(key)
		if !ok {
			return v
		}
		return x
	}
	nv := newVerdict[R](gen)
	x, loaded := vm.m.LoadOrStore(key, nv)
	if loaded {
		return x
	}
	b.startProbe(nv, r)
	return nv
}

// startProbe runs v's probe of r in the background, unless too many wait
// already (an application that builds a new statement per call, beyond
// its values, makes a new shape per call): then v fails at once, briefly,
// and the statement runs unshared.
func (b *Book[R]) startProbe(v *Verdict[R], r *sqlscan.Result) {
	if b.pending.Add(1) > maxPendingProbes {
		b.pending.Add(-1)
		b.h.Busy()
		v.Err = ErrBusy
		v.RetryAt = time.Now().Add(time.Second)
		v.publish()
		return
	}
	go func() {
		defer b.pending.Add(-1)
		b.probe(v, r)
	}()
}

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

// probe asks the server for v and publishes it.
func (b *Book[R]) probe(v *Verdict[R], r *sqlscan.Result) {
	defer v.publish()
	defer func() {
		if p := recover(); p != nil {
			v.Err = errtext.Wrapf("sqlflight: statement probe panicked: %v", p)
			v.RetryAt = time.Now().Add(retryFailedProbe)
		}
	}()
	b.slots <- struct{}{}
	defer func() { <-b.slots }()
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	start := time.Now()
	v.RetryAt = time.Now().Add(verdictMaxAge)
	err := b.h.Spare(ctx, func(conn Session) error {
		sv, params, err := Probe(ctx, conn, r)
		if err == nil {
			v.Server, v.Params, v.Tables = sv, params, route.Union(sv.Tables, r.Tables)
			v.Rows = b.h.Rows(ctx, conn, r, v)
		}
		return err
	})
	refused := errors.Is(err, ErrNoProbe) && !b.textOnly.Swap(true)
	b.h.Probed(r, time.Since(start), err, refused)
	if err != nil {
		v.Err = err
		v.RetryAt = time.Now().Add(retryFailedProbe)
	}
}

// NoteConn learns what a new real connection rc tells about the server:
// standard_conforming_strings off makes backslashes escapes in '…'. A pgx
// connection tells it at startup; another PostgreSQL driver's is asked,
// within DetectTimeout (a session may change the setting, but a new
// connection starts with the server's default).
func (b *Book[R]) NoteConn(rc driver.Conn) {
	if b == nil {
		return
	}
	if c, ok := rc.(*stdlib.Conn); ok {
		if c.Conn().PgConn().ParameterStatus("standard_conforming_strings") == "off" {
			b.nonStandard.Store(true)
		}
		return
	}
	if !b.h.Postgres() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), DetectTimeout)
	defer cancel()
	rows, err := OfDriver(rc).Query(ctx, `SELECT pg_catalog.current_setting('standard_conforming_strings')`)
	if err == nil && len(rows) == 1 && len(rows[0]) == 1 && rows[0][0] != nil && *rows[0][0] == "off" {
		b.nonStandard.Store(true) // as a pgx connection's ParameterStatus says it
	}
}

// closureMemo remembers the write closures of a scope's tables (by
// epoch.TableKey) under the schema generation gen. It is cleared when it
// holds more than maxVerdicts tables before a batch of learned ones goes
// in: a batch is never split and a table learned again does not count
// twice, unlike a memo.Map, which counts every store; and a lookup of
// several tables reads them all under one lock.
type closureMemo struct {
	gen uint64
	mu  sync.Mutex
	m   map[string]Closure
}

// WriteClosure returns the tables a write to tables may change, and false
// when that may be any table. On PostgreSQL it asks the catalog once per
// table (QueryClosure, on a spare session, sharing the probes' slots: it
// waits a second at most for one); elsewhere the tables are what they are.
func (b *Book[R]) WriteClosure(ctx context.Context, tables []string) ([]string, bool) {
	if b == nil || !b.h.Postgres() || len(tables) == 0 {
		return tables, true
	}
	gen := b.h.SchemaGen()
	cm := b.closures.Load()
	if cm == nil || cm.gen != gen {
		fresh := &closureMemo{gen: gen, m: map[string]Closure{}}
		if !b.closures.CompareAndSwap(cm, fresh) {
			fresh = b.closures.Load()
		}
		cm = fresh
	}
	out := slices.Clone(tables)
	var missing []string
	cm.mu.Lock()
	for _, t := range tables {
		cl, ok := cm.m[epoch.TableKey(t)]
		switch {
		case !ok:
			missing = append(missing, t)
		case cl.All:
			cm.mu.Unlock()
			return nil, false
		default:
			out = append(out, cl.Tables...)
		}
	}
	cm.mu.Unlock()
	if len(missing) == 0 {
		return out, true
	}
	// Lookups share the probes' slots: concurrent writers after a schema
	// change must not each open a spare connection.
	wait := time.NewTimer(time.Second)
	defer wait.Stop()
	select {
	case b.slots <- struct{}{}:
		defer func() { <-b.slots }()
	case <-ctx.Done():
		return nil, false
	case <-wait.C:
		return nil, false // busy: any table
	}
	learned := make(map[string]Closure, len(missing))
	err := b.h.Spare(ctx, func(conn Session) error {
		for _, t := range missing {
			cl, err := QueryClosure(ctx, conn, t)
			if err != nil {
				return err
			}
			learned[epoch.TableKey(t)] = cl
		}
		return nil
	})
	if err != nil {
		return nil, false // unknown: any table
	}
	cm.mu.Lock()
	if len(cm.m) > maxVerdicts {
		clear(cm.m)
	}
	for k, cl := range learned {
		cm.m[k] = cl
	}
	cm.mu.Unlock()
	for _, cl := range learned {
		if cl.All {
			return nil, false
		}
		out = append(out, cl.Tables...)
	}
	slices.Sort(out)
	return slices.Compact(out), true
}
