package sqlflight

// Batches of many keys. The reads of one single-table SELECT that differ
// only in the value one equality condition compares a column with (WHERE
// id = $1, or WHERE id = 42 as bun inlines it) form a batch group: the
// other conditions, arguments, scope and partition are the same. The first
// read of a group that misses runs alone, at once, as any read does; while
// a statement of the group is in flight, the reads of other keys that miss
// gather into the group's pending batch, and when that statement is done
// the batch runs as one statement, WHERE id = ANY($n::int4[]), with the key
// column appended to its select list, and each row goes to the reads of
// the key it holds (resultset.Split). A full batch (Options.BatchMaxKeys
// keys) does not wait.
//
// What holds: a batch starts only after every one of its members' calls
// began (a member joins only a batch that has not started), so no member
// sees a snapshot older than its own call; every member leads the flight
// of its own key, so that the reads of one key still coalesce, each key is
// cached, judged and invalidated as its own entry (the flight's sequence is
// its member's arrival: a write since then keeps its result out of the
// cache), and a caller who arrives after a write joins no flight older than
// the write. Members whose keys are equal share one value of the array. A
// member the batch cannot answer — its argument is not one the driver can
// compare as the server does, its result goes over its limits, or the batch
// failed on a value (SQLSTATE class 22, or 42: the rewritten text is not
// the server's, and the shape batches no more) — runs alone, on its own
// flight, as it would have without batches. Any other error of the batch is
// every member's. The breaker and the semaphore see one statement.

import (
	"context"
	"database/sql/driver"
	"errors"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/sqlflight/sqlflight/internal/epoch"
	"github.com/sqlflight/sqlflight/internal/key"
	"github.com/sqlflight/sqlflight/internal/parent"
	"github.com/sqlflight/sqlflight/internal/resultset"
	"github.com/sqlflight/sqlflight/internal/sqlscan"
	pgverdict "github.com/sqlflight/sqlflight/internal/verdict"
)

// DefaultBatchMaxKeys is the number of keys a batch holds by default
// (Options.BatchMaxKeys).
const DefaultBatchMaxKeys = 256

// batchPlan is what a text of a batchable statement runs as for many keys,
// made once per text and verdict (batchOf).
type batchPlan struct {
	v   *verdict
	why string // why its reads do not batch; "" when they do

	col   string             // the key column
	class pgverdict.ColClass // how its values compare
	param int                // the key's $n; 0 for a constant of the text …
	lit   string             // … whose canonical value this is
	// lo and hi bound an integer key: its parameter's type's range.
	lo, hi int64
	array  int    // the $n of the keys' array in sql
	sql    string // the text reading every key at once
	group  string // the text with its key's value cut out
	// broken is set when the server refused sql: the shape batches no more.
	broken atomic.Bool
}

// batchText is what a scanned text keeps of its batch plan (r.Batch).
type batchText struct{ p *batchPlan }

// arrayTypes names the array types of the key parameter types a batch
// casts its keys to.
var arrayTypes = map[uint32]string{20: "int8", 21: "int2", 23: "int4", 25: "text", 1043: "varchar", 2950: "uuid"}

// batchOf returns the batch plan of r under v, its shape's verdict, made
// once per text and verdict.
func (sc *scope) batchOf(v *verdict, r *sqlscan.Result) *batchPlan {
	if bt, ok := r.Batch.Load().(batchText); ok && bt.p.v == v {
		return bt.p
	}
	p := sc.makeBatchPlan(v, r)
	r.Batch.Store(batchText{p})
	return p
}

func (sc *scope) makeBatchPlan(v *verdict, r *sqlscan.Result) *batchPlan {
	p := &batchPlan{v: v}
	if v.Err != nil || v.Rows == nil {
		p.why = "no column of known type in its conditions"
		return p
	}
	for _, fn := range v.Server.Functions {
		if !fn.Builtin {
			p.why = "calls " + fn.Name + " (a function of the user's may aggregate)"
			return p
		}
	}
	form, why := sqlscan.BatchOf(r.Normalized, sc.verdicts.NonStandard())
	if form == nil {
		p.why = why
		return p
	}
	if epoch.TableKey(form.Table) != v.Rows.Table {
		p.why = "reads another table than its conditions"
		return p
	}
	// The last condition that may key a batch: WHERE tenant_id = $1 AND
	// id = $2 batches the ids of one tenant.
	for i := len(form.Keys) - 1; i >= 0; i-- {
		k := form.Keys[i]
		class := v.Rows.Class(k.Column)
		var typ string
		switch k.Value.Kind {
		case sqlscan.OpParam:
			n := k.Value.Param
			if n < 1 || n > len(v.Params) || pgverdict.ClassOfType(v.Params[n-1]) != class {
				continue
			}
			if typ = arrayTypes[v.Params[n-1]]; typ == "" {
				continue
			}
			p.param, p.array = n, n
			p.lo, p.hi = intRange(v.Params[n-1])
		case sqlscan.OpNumber:
			lit, ok := pgverdict.CanonText(class, k.Value.Text)
			if class != pgverdict.ClassInt || !ok {
				continue
			}
			// The constant is an int4 or an int8: compared with an int8 of
			// the same value, the column matches the same rows.
			typ, p.lit, p.array = "int8", lit, r.Params+1
			p.lo, p.hi = math.MinInt64, math.MaxInt64
		case sqlscan.OpString:
			if class != pgverdict.ClassText && class != pgverdict.ClassUUID {
				continue // '5' for an int column: its type's range is unknown
			}
			lit, ok := batchCanon(class, k.Value.Text)
			if !ok {
				continue
			}
			typ, p.lit, p.array = "text", lit, r.Params+1
			if class == pgverdict.ClassUUID {
				typ = "uuid"
			}
		}
		if typ == "" {
			continue
		}
		p.col, p.class = k.Column, class
		p.sql = form.Rewrite(r.Normalized, k, p.array, typ)
		p.group = r.Normalized[:k.Val[0]] + "\x00" + r.Normalized[k.Val[1]:]
		return p
	}
	p.why = "no condition compares a column of a batchable type (an integer, a text of a deterministic collation, a uuid) with one value"
	return p
}

// intRange is the range of an integer parameter type.
func intRange(oid uint32) (int64, int64) {
	switch oid {
	case 21:
		return math.MinInt16, math.MaxInt16
	case 23:
		return math.MinInt32, math.MaxInt32
	}
	return math.MinInt64, math.MaxInt64
}

// batchCanon is the canonical form of a text key of class, or false if a
// batch cannot carry it (a NUL byte or invalid UTF-8, which the server
// refuses: alone, the read gets its own error).
func batchCanon(class pgverdict.ColClass, s string) (string, bool) {
	if class == pgverdict.ClassText && (strings.IndexByte(s, 0) >= 0 || !utf8.ValidString(s)) {
		return "", false
	}
	return pgverdict.CanonText(class, s)
}

// keyOf returns the canonical value of the read's key, or false if the
// read cannot be a member of a batch.
func (p *batchPlan) keyOf(args []driver.NamedValue) (string, bool) {
	if p.param == 0 {
		return p.lit, true
	}
	n := p.param
	if n > len(args) || args[n-1].Ordinal != n || args[n-1].Name != "" || args[n-1].Value == nil {
		return "", false
	}
	v := args[n-1].Value
	var s string
	var ok bool
	switch x := v.(type) {
	case string:
		s, ok = batchCanon(p.class, x)
	case []byte:
		if p.class == pgverdict.ClassUUID {
			return "", false // sent as its 16 bytes
		}
		s, ok = batchCanon(p.class, string(x))
	default:
		s, ok = pgverdict.CanonArg(p.class, v)
	}
	if !ok {
		return "", false
	}
	if p.class == pgverdict.ClassInt {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < p.lo || n > p.hi {
			return "", false // out of its type's range: alone, it fails as it should
		}
	}
	return s, true
}

// rowKey is the canonical value of a row's key column as the parent
// returned it, or false.
func (p *batchPlan) rowKey(v driver.Value) (string, bool) {
	switch x := v.(type) {
	case string:
		return pgverdict.CanonText(p.class, x)
	case []byte:
		return pgverdict.CanonText(p.class, string(x))
	case nil:
		return "", false
	}
	return pgverdict.CanonArg(p.class, v)
}

// arrayLiteral writes keys as a PostgreSQL array literal of their
// canonical text forms, each quoted.
func arrayLiteral(keys []string) string {
	n := 2
	for _, k := range keys {
		n += len(k) + 3
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		for j := 0; j < len(k); j++ {
			if c := k[j]; c == '"' || c == '\\' {
				b.WriteByte('\\')
			}
			b.WriteByte(k[j])
		}
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

// batches are the Shield's batch groups.
type batches struct {
	mu sync.Mutex
	m  map[string]*batchGate
}

// A batchGate is one batch group: its statements in flight and the batches
// that wait for their turn.
type batchGate struct {
	key     string
	running int      // statements of the group in flight (alone or batches)
	pending []*batch // the batches gathering or full, in order
}

// A batch is the reads of many keys that run as one statement.
type batch struct {
	s       *engine
	g       *batchGate
	p       *batchPlan
	sc      *scope
	ctx     context.Context // the first member's, for its values
	members []*member
	started bool // sealed: no member joins it any more
	// live counts the members still waiting once it started; the last to
	// leave cancels it.
	live   atomic.Int32
	octx   context.Context // its statement's, from start
	cancel context.CancelCauseFunc
	keys   map[string]int // the distinct keys, numbered
}

// A member is one read of a batch: the leader of its key's flight.
type member struct {
	f     *flight
	rd    *read // the flight's own read
	st    *store
	key   string // its key's canonical value
	alone chan struct{}
	state int // memberWaiting, … (under batches.mu)
}

// A member's states.
const (
	memberWaiting = iota
	memberGone    // it left before the batch started, and ended its flight itself
	memberLeft    // it left its flight once the batch started: the batch ends it
	memberAlone   // the batch could not answer it: it runs alone
	memberDone    // the batch answered it
)

// batchMax is the Shield's number of keys per batch.
func (s *engine) batchMax() int {
	if n := s.opts.BatchMaxKeys; n > 0 {
		return n
	}
	return DefaultBatchMaxKeys
}

// batchFor returns the batch plan of a read about to lead its key's
// flight, the key's canonical value and the group's key; nil if it does not
// batch.
func (s *engine) batchFor(rd *read) (*batchPlan, string, string) {
	v := rd.v
	if s.opts.NoBatch || rd.plan.pol.NoBatch || v == nil || !rd.known || len(rd.tables) != 1 {
		return nil, "", ""
	}
	p := rd.c.sc.batchOf(v, rd.r)
	if p.why != "" || p.broken.Load() {
		return nil, "", ""
	}
	k, ok := p.keyOf(rd.args)
	if !ok {
		return nil, "", ""
	}
	// The group: the scope, the partition, the text but its key's value,
	// and the arguments but the key.
	args := rd.args
	if p.param != 0 {
		args = append([]driver.NamedValue(nil), args...)
		args[p.param-1].Value = nil
	}
	gb, ok := key.Append(make([]byte, 0, key.Size(rd.part, p.group, args)), rd.c.sc.id, rd.part, p.group, args)
	if !ok {
		return nil, "", ""
	}
	return p, k, string(gb)
}

// join makes the read a member of its group's pending batch, or, when the
// group has no statement in flight, takes the group's turn for the read to
// run alone (the batchGate it must give back once its origin is done).
func (b *batches) join(ctx context.Context, s *engine, group string, p *batchPlan, m *member) (*batchGate, *batch) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil {
		b.m = make(map[string]*batchGate)
	}
	g := b.m[group]
	if g == nil {
		g = &batchGate{key: group}
		b.m[group] = g
	}
	if g.running == 0 && len(g.pending) == 0 {
		g.running++
		return g, nil // nothing in flight: no read waits for a batch
	}
	var bt *batch
	if n := len(g.pending); n > 0 && len(g.pending[n-1].keys) < s.batchMax() {
		bt = g.pending[n-1]
	} else {
		bt = &batch{s: s, g: g, p: p, sc: m.rd.c.sc, ctx: context.WithoutCancel(ctx), keys: map[string]int{}}
		g.pending = append(g.pending, bt)
	}
	if _, ok := bt.keys[m.key]; !ok {
		bt.keys[m.key] = len(bt.keys)
	}
	bt.members = append(bt.members, m)
	if len(bt.keys) >= s.batchMax() && len(g.pending) == 1 {
		// Full: it runs now, beside what is in flight.
		g.pending = g.pending[1:]
		g.running++
		b.start(bt)
	}
	return nil, bt
}

// start seals bt and runs it; b.mu is held.
func (b *batches) start(bt *batch) {
	bt.started = true
	live := int32(0)
	for _, m := range bt.members {
		if m.state == memberWaiting {
			live++
		}
	}
	bt.live.Store(live)
	bt.octx, bt.cancel = context.WithCancelCause(bt.ctx)
	if live == 0 {
		bt.cancel(errAbandoned)
	}
	go bt.s.runBatch(bt)
}

// release ends one statement of g: the next pending batch that still has a
// member takes its turn, or the group has one statement fewer in flight.
func (b *batches) release(g *batchGate) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for len(g.pending) > 0 {
		bt := g.pending[0]
		g.pending = g.pending[1:]
		for _, m := range bt.members {
			if m.state == memberWaiting {
				b.start(bt)
				return
			}
		}
	}
	g.running--
	if g.running == 0 && b.m[g.key] == g {
		delete(b.m, g.key)
	}
}

// leave takes m out of bt if bt has not started, and reports whether it
// did.
func (b *batches) leave(bt *batch, m *member) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if bt.started || m.state != memberWaiting {
		return false
	}
	m.state = memberGone
	return true
}

// settle moves m, if it still waits, to state, and returns the state it
// was in.
func (b *batches) settle(m *member, state int) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	prev := m.state
	if prev == memberWaiting {
		m.state = state
	}
	return prev
}

// batched runs a read that leads its key's flight (f, whose own read is
// own) through its batch group: alone, holding the group's turn (done
// false: the caller runs the origin as usual and the origin gives the turn
// back), or as a member of a batch, which answers it (done) or tells it to
// run alone after all (done false, holding no turn).
func (s *engine) batched(ctx context.Context, f *flight, own *read, st *store, p *batchPlan, k, group string) (rows driver.Rows, err error, done bool) {
	m := &member{f: f, rd: own, st: st, key: k, alone: make(chan struct{})}
	g, bt := s.batches.join(ctx, s, group, p, m)
	if g != nil {
		f.Data.gate = g
		return nil, nil, false
	}
	c := own.c
	c.offer() // its caller only waits: the batch may take its real connection
	defer c.withdraw()
	f.SetCancel(func(error) {
		if bt.live.Add(-1) == 0 && bt.cancel != nil {
			bt.cancel(errAbandoned)
		}
	})
	done2 := ctx.Done()
	select {
	case <-f.Done():
	case <-m.alone:
		return nil, nil, false
	case <-done2:
		if s.batches.leave(bt, m) {
			s.tier.Release(own.l2, &own.lease)
			s.finish(f, nil, errLeaderGone, nil) // its key's followers start over
			return nil, ctx.Err(), true
		}
		if s.flights.Leave(f, true) {
			if s.batches.settle(m, memberLeft) == memberAlone {
				// Sent alone meanwhile: nobody else ends its flight.
				s.finish(f, nil, errLeaderGone, nil)
			}
			return nil, ctx.Err(), true
		}
		// It finished meanwhile: take its outcome.
	}
	res, err := f.Outcome(true)
	if err != nil {
		return nil, err, true
	}
	return newReplay(res), nil, true
}

// runBatch runs bt's statement and answers its members.
func (s *engine) runBatch(bt *batch) {
	p := bt.p
	first := bt.members[0].rd
	keys := make([]string, len(bt.keys))
	for k, i := range bt.keys {
		keys[i] = k
	}
	args := make([]driver.NamedValue, 0, len(first.args)+1)
	args = append(args, first.args...)
	arr := driver.NamedValue{Ordinal: p.array, Value: arrayLiteral(keys)}
	if p.param != 0 {
		args[p.param-1] = arr
	} else {
		args = append(args, arr)
	}
	lims := make([]resultset.Limits, len(keys))
	for i := range lims {
		lims[i] = resultset.Limits{Rows: math.MaxInt, Bytes: math.MaxInt64}
	}
	for _, m := range bt.members {
		l := s.limitsOf(m.rd.plan.pol)
		m.f.Data.lim = l
		i := bt.keys[m.key]
		lims[i].Rows, lims[i].Bytes = min(lims[i].Rows, l.Rows), min(lims[i].Bytes, l.Bytes)
	}
	timeout := first.plan.pol.Timeout
	if timeout <= 0 {
		timeout = s.opts.OriginTimeout
	}
	octx, cancel := bt.octx, bt.cancel
	timer := startTimeout(timeout, cancel)
	start := time.Now()
	s.stats.inFlight.Add(1)

	var (
		results []*result
		over    []bool
		err     error
	)
	t, err := bt.sc.guard.Enter(octx)
	if err == nil {
		l := &poolLink{sc: bt.sc, s: s}
		var rc driver.Conn
		if rc, err = l.conn(octx); err == nil {
			s.stats.originExecs.Add(1)
			var rows driver.Rows
			if rows, err = parent.Query(octx, rc, p.sql, args); err == nil {
				results, over, err = resultset.Split(rows, shareMask(rows, mirrorRowsMask(rows)), len(keys),
					func(v driver.Value) int {
						if k, ok := p.rowKey(v); ok {
							if i, ok := bt.keys[k]; ok {
								return i
							}
						}
						return -1
					}, lims)
			}
		}
		if err != nil {
			if cause := context.Cause(octx); cause == ErrOriginTimeout {
				err = wrapf("%w (%w): %w", ErrOriginTimeout, context.DeadlineExceeded, err)
			}
		}
		l.release(errors.Is(err, driver.ErrBadConn))
		t.Exit(batchOutcome(err))
	}
	timer.stop()
	cancel(nil)
	s.stats.inFlight.Add(-1)
	took := time.Since(start)
	s.stats.originDuration.Observe(took)
	s.batches.release(bt.g) // the next batch of the group may start

	alone := err == driver.ErrSkip || errors.Is(err, resultset.ErrSplit)
	if state := pgverdict.SQLState(err); len(state) == 5 {
		switch state[:2] {
		case "42":
			p.broken.Store(true) // the rewritten text is not the server's
			alone = true
			s.warned.Warn(s.log, "batch", first.r.ShapeKey, "sqlflight: a batched statement failed; the statement runs one key at a time from now on",
				errText.Attr(err), "fingerprint", key.Fingerprint(first.r.ShapeKey))
		case "22":
			alone = true // a value's: each member alone gets its own error
		}
	}
	if errors.Is(err, resultset.ErrSplit) {
		p.broken.Store(true)
	}
	if err != nil && !alone {
		s.stats.originErrors.Add(1)
	}
	answered := 0
	for _, m := range bt.members {
		i := bt.keys[m.key]
		if alone || (err == nil && over[i]) {
			switch s.batches.settle(m, memberAlone) {
			case memberWaiting:
				s.stats.batchAlone.Add(1)
				close(m.alone)
			case memberLeft:
				s.tier.Release(m.rd.l2, &m.rd.lease)
				s.finish(m.f, nil, errLeaderGone, nil) // its followers start over
			}
			continue
		}
		if s.batches.settle(m, memberDone) == memberGone {
			continue // it ended its flight itself
		}
		if err != nil {
			s.tier.Release(m.rd.l2, &m.rd.lease)
			s.finish(m.f, nil, err, nil)
		} else {
			res := results[i]
			var filled *entry
			if m.st != nil && m.f.Fills() {
				filled = s.fill(m.st, m.f, m.rd, res, took)
			}
			m.rd.stats.OriginResult(took, res, false)
			if m.rd.named != nil {
				m.rd.named.OriginExecs.Add(1)
				m.rd.named.OriginDuration.Observe(took)
			}
			s.finish(m.f, res, nil, nil)
			if m.rd.l2 != "" {
				s.storeShared(m.rd, filled)
			}
			answered++
		}
	}
	if answered > 0 {
		s.stats.batches.Add(1)
		s.stats.batchedReads.Add(uint64(answered))
		for n := uint64(answered); ; {
			cur := s.stats.batchLargest.Load()
			if n <= cur || s.stats.batchLargest.CompareAndSwap(cur, n) {
				break
			}
		}
	}
}

// batchOutcome is what the breaker hears of a batch: a failure on a value
// is not the database's.
func batchOutcome(err error) error {
	if state := pgverdict.SQLState(err); len(state) == 5 && (state[:2] == "22" || state[:2] == "42") {
		return nil
	}
	return err
}
