package sqlflight

// Batches of many keys (internal/batch; docs/batching.md). The reads of one
// single-table SELECT that differ only in the value one equality compares
// a column with (WHERE id = $1, or WHERE id = 42 as bun inlines it) form a
// batch group, with the same other conditions, arguments, scope and
// partition. Each read that misses leads the flight of its own key, as
// always; then, instead of running its origin, it asks its group: with
// nothing of the group in flight it runs alone at once, holding the group's
// turn until its origin is done; else it waits in the group's pending
// batch, which runs as one statement (WHERE id = ANY($n::int4[]), the key
// column appended) once the statement in flight is done, and answers each
// member's flight with the rows of its key (resultset.Split).
//
// So the reads of one key still coalesce (followers join its flight); each
// key is filled, judged and invalidated as its own entry, its flight's
// sequence being its member's arrival (a write since then keeps its result
// out of the cache); a caller who arrives after a write joins no flight,
// and so no batch, older than the write; and a batch starts only after
// every member's call began. A member the batch cannot answer (over its
// limits; the batch failed on a value, SQLSTATE class 22, or the server
// refused the rewritten text, class 42, after which the shape batches no
// more) runs alone on its flight; any other error of the batch is every
// member's. The breaker and the semaphore see one statement.

import (
	"context"
	"database/sql/driver"
	"errors"
	"math"
	"slices"
	"time"
	"unsafe"

	"github.com/sqlflight/sqlflight/internal/batch"
	fl "github.com/sqlflight/sqlflight/internal/flight"
	"github.com/sqlflight/sqlflight/internal/key"
	"github.com/sqlflight/sqlflight/internal/parent"
	"github.com/sqlflight/sqlflight/internal/resultset"
	"github.com/sqlflight/sqlflight/internal/sqlscan"
	pgverdict "github.com/sqlflight/sqlflight/internal/verdict"
)

// DefaultBatchMaxKeys is the number of keys a batch holds by default
// (Options.BatchMaxKeys).
const DefaultBatchMaxKeys = 256

// DefaultBatchMaxWait is how long a batch waits at most for the statement
// in flight by default (Options.BatchMaxWait).
const DefaultBatchMaxWait = 10 * time.Millisecond

// batchGroup is the Shield's batch groups (internal/batch); what it keeps
// with a member is a *batchMember.
type batchGroup = batch.Group

// batchMember is what the Shield keeps with a member of a batch: its
// key's flight, the flight's own read and the store it fills. (Its flight
// is spelled as the instance it is, not as the alias: this file is checked
// first, and the alias within the cycle flight → read → conn → flight
// makes the Go 1.26 and 1.27 compilers panic.)
type batchMember struct {
	f  *fl.Flight[result, flightData]
	rd *read
	st *store
	// refresh: a background refresh, which no caller waits for
	// (refreshBatched).
	refresh bool
}

// textBatch is what a scanned text keeps of its batch plan (r.Batch): the
// plan made under the verdict v.
type textBatch struct {
	v *verdict
	p *batch.Plan
}

// batchPlan returns the batch plan of r under v, its shape's verdict,
// made once per text and verdict.
func (sc *scope) batchPlan(v *verdict, r *sqlscan.Result) textBatch {
	if tb, ok := r.Batch.Load().(textBatch); ok && tb.v == v {
		return tb
	}
	var p *batch.Plan
	if v.Err != nil || v.Rows == nil {
		p = &batch.Plan{Why: "no condition on a column of a known type"}
	} else {
		builtin := true
		for _, fn := range v.Server.Functions {
			builtin = builtin && fn.Builtin
		}
		p = batch.NewPlan(r, batch.Shape{Table: v.Rows.Table, Class: v.Rows.Class, Params: v.Params, Builtin: builtin},
			sc.verdicts.NonStandard())
	}
	tb := textBatch{v: v, p: p}
	r.Batch.Store(tb)
	return tb
}

func (s *engine) initBatches() {
	s.batches.Max = func() int {
		if n := s.opts.BatchMaxKeys; n > 0 {
			return n
		}
		return DefaultBatchMaxKeys
	}
	s.batches.Start = func(b *batch.Batch) { go s.runBatch(b) }
	s.batches.MaxWait = func() time.Duration {
		if d := s.opts.BatchMaxWait; d != 0 {
			return d
		}
		return DefaultBatchMaxWait
	}
}

// batchFor returns the batch plan of rd, a read about to lead its key's
// flight, its key's canonical value and its group's key; a nil plan if it
// does not batch.
func (s *engine) batchFor(rd *read) (*batch.Plan, string, string) {
	v := rd.v
	// A read of a session changed under its context's scope (bound) runs on
	// that session: a batch runs on a spare connection, which is not one.
	if s.opts.NoBatch || rd.plan.pol.NoBatch || rd.bound || v == nil || !rd.known || len(rd.tables) != 1 {
		return nil, "", ""
	}
	p := rd.c.sc.batchPlan(v, rd.r).p
	if p.Why != "" {
		return nil, "", ""
	}
	if _, refused := rd.c.sc.batchRefused.Load(v); refused {
		return nil, "", ""
	}
	k, ok := p.KeyOf(rd.args)
	if !ok {
		return nil, "", ""
	}
	// The group: the scope, the partition, the text but its key's value,
	// and the arguments but the key. (Its bytes are never written again:
	// the string may alias them.)
	gb, ok := key.AppendExcept(make([]byte, 0, key.Size(rd.part, p.Group, rd.args)), rd.c.sc.id, rd.part, p.Group, rd.args, p.Param-1)
	if !ok {
		return nil, "", ""
	}
	return p, k, unsafe.String(unsafe.SliceData(gb), len(gb))
}

// batched runs own, the read of a caller who leads its key's flight f,
// through its batch group: alone (done false: the caller runs the origin,
// which gives the group's turn back), or as a member of a batch, which
// answers it (done) or sends it to run alone after all (done false).
func (s *engine) batched(ctx context.Context, f *flight, own *read, st *store, k, group string) (rows driver.Rows, err error, done bool) {
	t, m := s.batches.Join(ctx, group, k, &batchMember{f: f, rd: own, st: st})
	if t != nil {
		f.Data.turn = t
		return nil, nil, false
	}
	b := m.Batch()
	// The last waiter of f to leave abandons its part of the batch (a
	// flight that fills the cache runs on without waiters).
	f.SetCancel(func(error) { b.Abandon(errAbandoned) })
	c := own.c
	c.offer() // its caller only waits: the batch may take its real connection
	s.stats.batchPending.Add(1)
	defer func() {
		s.stats.batchPending.Add(-1)
		c.withdraw()
	}()
	select {
	case <-f.Done():
	case <-m.Alone():
		s.stats.batchAlone.Add(1)
		return nil, nil, false
	case <-ctx.Done():
		if s.batches.Leave(m) {
			// The batch had not started: its key's followers start over.
			s.tier.Release(own.l2, &own.lease)
			s.finish(f, nil, errLeaderGone, nil)
			return nil, ctx.Err(), true
		}
		if s.flights.Leave(f, true) {
			if s.batches.Settle(m, batch.Left) == batch.Alone {
				// Sent alone meanwhile: nobody else ends its flight.
				s.tier.Release(own.l2, &own.lease)
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

// refreshBatched runs bg, the read of a background refresh whose flight is
// f and whose slot is t, through its batch group: alone, at once, holding
// the group's turn, or as a member of the pending batch, which fills its
// entry. Nobody waits for a refresh, so it gives its slot back as it joins
// a batch (the batch's statement takes one of its own): the stale hits of
// many keys refresh them in one statement, not one each.
func (s *engine) refreshBatched(f *flight, bg *read, st *store, t ticket, k, group string) {
	turn, _ := s.batches.Join(context.Background(), group, k, &batchMember{f: f, rd: bg, st: st, refresh: true})
	if turn != nil {
		f.Data.turn = turn
		s.launch(context.Background(), f, bg, st, &poolLink{sc: bg.c.sc, s: s}, t, false)
		return
	}
	t.Exit(errNotRun)
}

// refreshAlone runs the origin of a background refresh a batch could not
// answer, on a background slot; with none free, the refresh is dropped
// (the stale entry serves on; a later hit tries again).
func (s *engine) refreshAlone(bm *batchMember) {
	t, ok := bm.rd.c.sc.guard.Background()
	if !ok {
		s.finish(bm.f, nil, errLeaderGone, nil)
		return
	}
	s.launch(context.Background(), bm.f, bm.rd, bm.st, &poolLink{sc: bm.rd.c.sc, s: s}, t, false)
}

// runBatch runs b's statement and answers its members.
func (s *engine) runBatch(b *batch.Batch) {
	members := b.Members()
	first := members[0].V.(*batchMember).rd
	tb := first.c.sc.batchPlan(first.v, first.r)
	p := tb.p
	keys := b.Keys()
	lims := make([]resultset.Limits, len(keys))
	for i := range lims {
		lims[i] = resultset.Limits{Rows: math.MaxInt, Bytes: math.MaxInt64}
	}
	for _, m := range members {
		bm := m.V.(*batchMember)
		l := s.limitsOf(bm.rd.plan.pol)
		bm.f.Data.lim = l
		i := b.Index(m.Key())
		lims[i].Rows, lims[i].Bytes = min(lims[i].Rows, l.Rows), min(lims[i].Bytes, l.Bytes)
	}
	// The longest of the members' budgets: none fails sooner than its own
	// would have.
	var timeout time.Duration
	for _, m := range members {
		t := m.V.(*batchMember).rd.plan.pol.Timeout
		if t <= 0 {
			t = s.opts.OriginTimeout
		}
		timeout = max(timeout, t)
	}
	ctx := b.Context()
	timer := startTimeout(timeout, b.Cancel)
	start := time.Now()
	s.stats.inFlight.Add(1)

	var (
		results []*result
		over    []bool
		err     error
		ran     bool // the statement was sent: its error may be a value's, or the batch's
		normal  bool
		l       = &poolLink{sc: first.c.sc, s: s}
		t       ticket
	)
	// A panic or runtime.Goexit in the statement's path fails every member
	// with ErrOriginPanicked, as an origin's does its flight's callers, and
	// leaves nothing behind: the connection (closed), the slot, the group's
	// turn.
	defer func() {
		if !normal {
			err = s.panicked(recover(), "a batch of many keys", "a batch's path")
			results, over, ran = nil, nil, false
		}
		broken := !normal || errors.Is(err, driver.ErrBadConn)
		l.release(broken)
		t.Exit(batchOutcome(err))
		timer.stop()
		b.Cancel(nil)
		s.stats.inFlight.Add(-1)
		took := time.Since(start)
		s.stats.originDuration.Observe(took)
		s.batches.Done(b.Turn()) // the group's next batch may start
		s.answerBatch(b, members, results, over, err, ran, took)
	}()
	t, err = first.c.sc.guard.Enter(ctx)
	if err == nil {
		var rc driver.Conn
		if rc, err = l.conn(ctx); err == nil {
			s.stats.originExecs.Add(1)
			ran = true
			var rows driver.Rows
			if rows, err = parent.Query(ctx, rc, p.SQL, p.Args(first.args, keys)); err == nil {
				results, over, err = resultset.Split(rows, shareMask(rows, mirrorRowsMask(rows)), len(keys),
					func(v driver.Value) int {
						if k, ok := p.RowKey(v); ok {
							return b.Index(k)
						}
						return -1
					}, lims)
			}
		}
		if err != nil && context.Cause(ctx) == ErrOriginTimeout {
			err = wrapf("%w (%w): %w", ErrOriginTimeout, context.DeadlineExceeded, err)
		}
	}
	normal = true
}

// answerBatch answers the members of b, whose statement gave results
// (over: a key's result went over its limits) or err (ran: the statement
// was sent) after took.
func (s *engine) answerBatch(b *batch.Batch, members []*batch.Member, results []*result, over []bool, err error, ran bool, took time.Duration) {
	first := members[0].V.(*batchMember).rd
	alone, refused := false, false
	switch {
	case err != nil && ran:
		alone, refused = batchFailure(err)
	case err != nil:
		alone = errors.Is(err, driver.ErrBadConn) // the spare's: each member alone uses its own
	}
	if refused {
		first.c.sc.batchRefused.Store(first.v, true)
		s.warned.Warn(s.log, "batch", first.r.ShapeKey, "sqlflight: a batch of many keys failed; the statement runs one key at a time from now on",
			errText.Attr(err), "fingerprint", key.Fingerprint(first.r.ShapeKey))
	}
	if err != nil && !alone {
		s.stats.originErrors.Add(1)
	}
	// Each member's fate first, and the counts, so that a caller who has
	// its rows sees them counted; then the flights end. The statement's
	// statistics and its policy name's count one origin execution for the
	// batch, with every row it answered.
	var counted batchCounts
	answer := make([]*batch.Member, 0, len(members))
	for _, m := range members {
		bm := m.V.(*batchMember)
		f, rd := bm.f, bm.rd
		if i := b.Index(m.Key()); alone || (err == nil && over[i]) {
			switch prev := s.batches.SendAlone(m); {
			case prev == batch.Waiting && bm.refresh:
				s.stats.batchAlone.Add(1)
				s.refreshAlone(bm)
			case prev == batch.Left:
				s.tier.Release(rd.l2, &rd.lease)
				s.finish(f, nil, errLeaderGone, nil) // its followers start over
			}
			continue
		}
		if s.batches.Settle(m, batch.Done) == batch.Gone {
			continue // it ended its flight itself
		}
		answer = append(answer, m)
		if err != nil {
			counted.add(rd, nil)
		} else {
			counted.add(rd, results[b.Index(m.Key())])
		}
	}
	counted.record(took, err != nil && !alone)
	if n := len(answer); n > 0 && err == nil {
		s.stats.batchSizes[batchSizeBucket(n)].Add(1)
		s.stats.batches.Add(1)
		s.stats.batchedReads.Add(uint64(n))
		for n := uint64(n); ; {
			cur := s.stats.batchLargest.Load()
			if n <= cur || s.stats.batchLargest.CompareAndSwap(cur, n) {
				break
			}
		}
	}
	for _, m := range answer {
		bm := m.V.(*batchMember)
		f, rd := bm.f, bm.rd
		if err != nil {
			s.tier.Release(rd.l2, &rd.lease)
			if rd.plan.onFailure != nil {
				rd.plan.onFailure(err) // a refresh's back-off
			}
			s.finish(f, nil, err, nil)
			continue
		}
		res := results[b.Index(m.Key())]
		var filled *entry
		if st := bm.st; st != nil && f.Fills() {
			filled = s.fill(st, f, rd, res, took)
		}
		s.finish(f, res, nil, nil)
		if rd.l2 != "" {
			s.storeShared(rd, filled)
		}
	}
}

// batchFailure says what the error of a batch's statement means for its
// members: each runs alone (where it gets its own answer) when the batch
// failed on a value (SQLSTATE class 22), when the server or the driver
// would not run it as written (class 42, no Queryer, rows whose keys are
// not the batch's: refused, the statement batches no more), or when the
// error is neither the database's (another SQLSTATE) nor the origin's
// timeout or cancellation (a broken connection is a spare's, no member's:
// database/sql would take driver.ErrBadConn for the member's own);
// otherwise it is every member's, as a flight's error is every caller's.
func batchFailure(err error) (alone, refused bool) {
	if err == driver.ErrSkip || errors.Is(err, resultset.ErrSplit) {
		return true, true
	}
	if state := pgverdict.SQLState(err); len(state) == 5 {
		switch state[:2] {
		case "42":
			return true, true
		case "22":
			return true, false
		}
		return false, false
	}
	switch {
	case errors.Is(err, ErrOriginTimeout), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, errAbandoned):
		return false, false
	}
	return true, false
}

// batchOutcome is what the breaker hears of a batch: a failure on a value,
// or of the rewritten text, is not the database's.
func batchOutcome(err error) error {
	if state := pgverdict.SQLState(err); len(state) == 5 && (state[:2] == "22" || state[:2] == "42") {
		return nil
	}
	return err
}

// batchSizeLabels name the buckets of Stats.BatchSizes.
var batchSizeLabels = [...]string{"1", "2-4", "5-16", "17-64", "65-256", "257+"}

// batchSizeBucket is the bucket of a batch that answered n reads.
func batchSizeBucket(n int) int {
	switch {
	case n <= 1:
		return 0
	case n <= 4:
		return 1
	case n <= 16:
		return 2
	case n <= 64:
		return 3
	case n <= 256:
		return 4
	}
	return 5
}

// batchCounts gathers what a batch's statement gave each statement's
// statistics and each policy name (one each for its members, nearly
// always), so that each counts the batch as one origin execution of the
// rows of all its members.
type batchCounts struct {
	stats []*stmtStats
	rows  []uint64
	bytes []uint64
	named []*nameCounters
}

func (bc *batchCounts) add(rd *read, res *result) {
	i := slices.Index(bc.stats, rd.stats)
	if i < 0 {
		bc.stats = append(bc.stats, rd.stats)
		bc.rows, bc.bytes = append(bc.rows, 0), append(bc.bytes, 0)
		i = len(bc.stats) - 1
	}
	if res != nil {
		for j := range res.Sets {
			bc.rows[i] += uint64(res.Sets[j].N)
		}
		bc.bytes[i] += uint64(res.Bytes)
	}
	if rd.named != nil && !slices.Contains(bc.named, rd.named) {
		bc.named = append(bc.named, rd.named)
	}
}

// record counts the batch's statement, failed or not.
func (bc *batchCounts) record(took time.Duration, failed bool) {
	for i, st := range bc.stats {
		st.Origin(took, bc.rows[i], bc.bytes[i], failed)
	}
	for _, n := range bc.named {
		n.OriginExecs.Add(1)
		n.OriginDuration.Observe(took)
		if failed {
			n.OriginErrors.Add(1)
		}
	}
}
