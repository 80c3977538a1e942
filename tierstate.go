package sqlflight

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sqlflight/sqlflight/internal/seal"
)

// tierState is a Shield's side of its shared tier: the namespace, the
// timeouts, a breaker of its own, the invalidations waiting to be published
// and the subscription that hears other instances' writes.
//
// The breaker: every call is bounded by Options.RedisTimeout; a call that
// fails while its caller still waits counts as a failure (a caller that
// left says nothing of the tier). tierFailures failures in a row take the
// tier down: the Shield runs on L1 alone, with no error to any caller,
// until a probe (one call let through after the back-off) succeeds and the
// invalidations that could not be published meanwhile are. A refused
// connection (nothing listens where the tier is) is a certain failure, not
// a slow one: it takes the tier down at once.
type tierState struct {
	t        SharedTier
	ns       string
	timeout  time.Duration
	leaseTTL time.Duration
	source   string // this Shield's instance id, in what it publishes
	clock    Clock
	log      func(msg string, args ...any)

	down atomic.Bool
	mu   sync.Mutex // guards what follows
	// failures in a row; when down, the back-off and whether a probe runs
	failures  int
	openUntil time.Time
	downs     int
	probing   bool
	// Writes not yet known to the tier: being published (inflight) or
	// whose publish failed (pending, by the generation of the latest such
	// write, so that a flush forgets only what it published). "*" stands
	// for every table.
	inflight map[string]int
	pending  map[string]uint64
	gen      uint64
	flushing atomic.Bool    // a background flush runs
	retry    *time.Timer    // the next retry of a flush, while some wait
	closed   atomic.Bool    // the Shield was closed: no more background work
	bg       sync.WaitGroup // background flushes

	stop func()

	// ring authenticates what the tier holds; trustMessages (the insecure
	// mode) acts on invalidations without checking their tags.
	ring          *seal.Ring
	trustMessages bool
	// floor is the least version a value of a table must exceed: the fleet
	// epochs of the writes this instance saw (its own, authenticated
	// messages, epochs it read), which Redis cannot take back.
	floor fleetFloor

	stats tierCounters
}

type tierCounters struct {
	hits, misses, writes, superseded, leases, leaseWaits, leaseExpired atomic.Uint64
	errors, decodeErrors, published, received, resyncs, transitions    atomic.Uint64
	skippedPending, forged, rejected                                   atomic.Uint64
}

const (
	tierFailures   = 3 // failures in a row that take the tier down
	tierBackoffMin = 200 * time.Millisecond
	tierBackoffMax = 2 * time.Second
	maxPending     = 1024 // tables remembered for publishing; beyond, "all"
	// An invalidation names at most maxMessageTables tables, each at most
	// maxTableName bytes long and maxMessageNames together: a write to
	// more, or to longer names, is published (and, received, applied) as a
	// write to every table.
	maxMessageTables = 256
	maxTableName     = 255
	// maxMessageNames bounds the bytes of an invalidation's names together,
	// so that its message, whatever the bus's quoting (up to four bytes a
	// byte), stays within what a subscriber reads (redistier: 64 KiB).
	maxMessageNames = 8 << 10
	// flushRetryInterval is how often invalidations that could not be
	// published are tried again.
	flushRetryInterval = 500 * time.Millisecond
)

// tierRing returns the keys of o's secrets, or an error wrapping
// ErrNoSharedSecret (it never holds a secret). Without a secret and with
// InsecureTrustSharedTier, values are sealed under a key everybody knows
// (it detects corruption, not forgery) and messages are not checked.
func tierRing(o *Options) (ring *seal.Ring, trustMessages bool, err error) {
	switch {
	case o.SharedSecret == "" && o.InsecureTrustSharedTier:
		if o.SharedEncrypt {
			return nil, false, fmt.Errorf("%w: SharedEncrypt needs one", ErrNoSharedSecret)
		}
		return &seal.Ring{Current: insecureKeys}, true, nil
	case o.SharedSecret == "":
		return nil, false, fmt.Errorf("%w; set InsecureTrustSharedTier (sqlflight.insecure_trust_shared_tier=true) only if nobody else can write to the tier", ErrNoSharedSecret)
	case len(o.SharedSecret) < MinSharedSecret:
		return nil, false, fmt.Errorf("%w: SharedSecret is shorter than %d bytes", ErrNoSharedSecret, MinSharedSecret)
	case o.SharedPreviousSecret != "" && len(o.SharedPreviousSecret) < MinSharedSecret:
		return nil, false, fmt.Errorf("%w: SharedPreviousSecret is shorter than %d bytes", ErrNoSharedSecret, MinSharedSecret)
	}
	ring = &seal.Ring{Current: seal.Derive([]byte(o.SharedSecret)), Encrypt: o.SharedEncrypt}
	if o.SharedPreviousSecret != "" && o.SharedPreviousSecret != o.SharedSecret {
		ring.Previous = seal.Derive([]byte(o.SharedPreviousSecret))
	}
	return ring, false, nil
}

// insecureKeys seal the values of a tier trusted without a secret.
var insecureKeys = seal.Derive([]byte("sqlflight: no secret, the tier is trusted"))

func newTierState(t SharedTier, o *Options, ring *seal.Ring, logWarn func(string, ...any)) *tierState {
	var id [8]byte
	_, _ = rand.Read(id[:])
	ts := &tierState{t: t, ns: o.KeyPrefix, timeout: o.RedisTimeout, leaseTTL: o.LeaseTTL,
		source: hex.EncodeToString(id[:]), clock: o.Clock, log: logWarn, ring: ring,
		inflight: map[string]int{}, pending: map[string]uint64{}}
	if ts.ns == "" {
		ts.ns = DefaultKeyPrefix
	}
	if ts.timeout <= 0 {
		ts.timeout = DefaultRedisTimeout
	}
	if ts.leaseTTL <= 0 {
		ts.leaseTTL = DefaultLeaseTTL
	}
	return ts
}

// call runs f on the tier unless the tier is down, and returns within
// Options.RedisTimeout even if f does not honour its context (f then goes
// on in its goroutine and its late answer is dropped). The verdict on the
// tier is the whole call's, whether or not its caller still waits: a caller
// whose deadline is near waits at most half of what is left of it (then
// gets errTierSlow, so that it has time to query the database), while the
// call runs on to its own timeout and tells the breaker how it went. A
// panic in the tier is an error of the tier.
func (ts *tierState) call(ctx context.Context, f func(context.Context) error) error {
	probe, ok := ts.allow()
	if !ok {
		return errTierDown
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ts.timeout)
	var once sync.Once
	verdict := func(err error) { once.Do(func() { ts.record(probe, err) }) }
	timedOut := fmt.Errorf("%w: the shared tier did not answer within %v", context.DeadlineExceeded, ts.timeout)
	stop := context.AfterFunc(cctx, func() { verdict(timedOut) })
	done := make(chan error, 1)
	go func() {
		var err error
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("sqlflight: shared tier panicked: %v", r)
			}
			if stop() { // answered before the timeout
				verdict(err)
			}
			done <- err
			cancel()
		}()
		err = f(cctx)
	}()
	var capped <-chan time.Time
	if dl, ok := ctx.Deadline(); ok {
		if half := time.Until(dl) / 2; half < ts.timeout {
			t := time.NewTimer(max(half, 0))
			defer t.Stop()
			capped = t.C
		}
	}
	select {
	case err := <-done:
		return err
	case <-cctx.Done():
		select {
		case err := <-done:
			return err
		default:
		}
		verdict(timedOut)
		return timedOut
	case <-capped:
		return errTierSlow
	}
}

// errTierSlow is what a call returns to a caller who could not wait for it.
var errTierSlow = errors.New("sqlflight: the shared tier is slower than the caller's deadline allows")

// allow reports whether a call may go to the tier, and whether it is the
// probe of a tier that is down.
func (ts *tierState) allow() (probe, ok bool) {
	if !ts.down.Load() {
		return false, true
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if !ts.down.Load() {
		return false, true
	}
	if ts.probing || ts.clock.Now().Before(ts.openUntil) {
		return false, false
	}
	ts.probing = true
	return true, true
}

// record tells the breaker how a call went.
func (ts *tierState) record(probe bool, err error) {
	if err != nil {
		ts.stats.errors.Add(1)
	}
	ts.mu.Lock()
	if err == nil {
		ts.failures = 0
		pend := len(ts.pending) > 0
		back := probe && ts.down.Load()
		if probe {
			ts.probing = false
		}
		if back {
			ts.down.Store(false)
			ts.downs = 0
			ts.stats.transitions.Add(1)
		}
		ts.mu.Unlock()
		if back {
			ts.log("sqlflight: shared tier is back", "namespace", ts.ns)
		}
		if pend {
			ts.kick() // publish what waited (this process's reads of it leave the tier alone meanwhile)
		}
		return
	}
	ts.failures++
	if probe || (!ts.down.Load() && (ts.failures >= tierFailures || refused(err))) {
		was := ts.down.Load()
		ts.probing = false
		ts.downs++
		wait := min(tierBackoffMin<<min(ts.downs-1, 8), tierBackoffMax)
		ts.openUntil = ts.clock.Now().Add(wait)
		ts.down.Store(true)
		if !was {
			ts.stats.transitions.Add(1)
			ts.mu.Unlock()
			ts.log("sqlflight: shared tier unavailable; running on the in-process cache alone",
				"namespace", ts.ns, errAttr(err), "retry_in", wait)
			return
		}
	}
	ts.mu.Unlock()
}

// refused reports whether err is a refused connection: nothing listens
// where the tier is, and waiting for more failures would only make more
// callers pay for them.
func refused(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED)
}

// kick publishes the invalidations that wait, in the background, once at a
// time.
func (ts *tierState) kick() {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.closed.Load() || !ts.flushing.CompareAndSwap(false, true) {
		return
	}
	ts.bg.Add(1) // under mu, which close takes to set closed
	go func() {
		defer ts.bg.Done()
		defer ts.flushing.Store(false)
		_ = ts.call(context.Background(), ts.flushCtx)
	}()
}

// retryLater makes sure that invalidations waiting for the tier are tried
// again even if this process makes no other call to it: every
// flushRetryInterval until none waits.
func (ts *tierState) retryLater() {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.retry != nil || ts.closed.Load() {
		return
	}
	ts.retry = time.AfterFunc(flushRetryInterval, func() {
		ts.mu.Lock()
		ts.retry = nil
		pend := len(ts.pending) > 0
		ts.mu.Unlock()
		if !pend || ts.closed.Load() {
			return
		}
		if ts.usable() {
			ts.kick()
		}
		ts.retryLater()
	})
}

// close stops the retries; calls in flight end on their own timeouts.
func (ts *tierState) close() {
	ts.mu.Lock()
	ts.closed.Store(true)
	if ts.retry != nil {
		ts.retry.Stop()
		ts.retry = nil
	}
	ts.mu.Unlock()
	ts.bg.Wait()
}

// begin marks a write's tables (nil: every table) as not yet known to the
// tier, before the write's local epochs move: from then until end, reads of
// them leave the tier alone (it may hold results older than the write that
// it cannot yet tell apart).
func (ts *tierState) begin(tables []string) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if tables == nil {
		ts.inflight["*"]++
		return
	}
	for _, t := range tables {
		ts.inflight[t]++
	}
}

// publish tells the fleet about w, a write whose tables begin marked
// (nil: every table), or remembers its tables for when the tier is back (a
// write published late is published as a write to its tables as a whole),
// then ends the mark.
func (ts *tierState) publish(tables []string, w write) {
	err := ts.call(context.Background(), func(ctx context.Context) error {
		if tables == nil {
			return ts.send(ctx, true, nil, nil)
		}
		return ts.send(ctx, false, epochKeys(w.tables, true), fleetRows(w.rows))
	})
	if err != nil {
		defer ts.retryLater() // runs after the deferred Unlock below
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if err == nil {
		ts.stats.published.Add(1)
	} else {
		ts.gen++
		if tables == nil || len(ts.pending)+len(tables) > maxPending {
			clear(ts.pending)
			ts.pending["*"] = ts.gen
		} else {
			for _, t := range tables {
				ts.pending[t] = ts.gen
			}
		}
	}
	if tables == nil {
		tables = []string{"*"}
	}
	for _, t := range tables {
		if ts.inflight[t]--; ts.inflight[t] <= 0 {
			delete(ts.inflight, t)
		}
	}
}

// flushCtx publishes the invalidations that waited for the tier.
func (ts *tierState) flushCtx(ctx context.Context) error {
	ts.mu.Lock()
	sent := maps.Clone(ts.pending)
	ts.mu.Unlock()
	if len(sent) == 0 {
		return nil
	}
	var tables []string // nil: every table
	_, all := sent["*"]
	if !all {
		tables = slices.Sorted(maps.Keys(sent))
	}
	if err := ts.send(ctx, all, tables, nil); err != nil {
		return err
	}
	ts.stats.published.Add(1)
	ts.mu.Lock()
	for t, g := range sent {
		if ts.pending[t] == g { // not failed again since
			delete(ts.pending, t)
		}
	}
	ts.mu.Unlock()
	return nil
}

// send publishes a write to tables as a whole (to every table, when all;
// too many tables, or a name too long, count as every table) and to the
// rows that rows pin (too many, or too long, count as writes to their
// tables): it takes the write's fleet sequence number first, so that the
// message's MAC covers it, then records and publishes it. The write's
// number becomes this instance's floor of what it wrote.
func (ts *tierState) send(ctx context.Context, all bool, tables []string, rows []RowPins) error {
	if !all {
		tables, rows = boundRows(tables, rows)
		if !boundedTables(tables) {
			all, tables, rows = true, nil, nil
		}
	} else {
		tables, rows = nil, nil
	}
	seq, err := ts.t.NextSeq(ctx, ts.ns)
	if err != nil {
		return err
	}
	inv := Invalidation{Tables: tables, Rows: rows, All: all, Seq: seq, Source: ts.source}
	inv.Tag = ts.ring.MessageTagRows(ts.ns, seq, inv.All, inv.Source, inv.Tables, rowsFlat(inv.Rows))
	// Raised first: from now on, no value older than the write is taken,
	// whatever Redis says of its epochs.
	ts.floor.raiseRows(tables, all, localRows(rows), seq)
	return ts.t.Publish(ctx, ts.ns, inv)
}

// boundedTables reports whether an invalidation may name tables one by one.
func boundedTables(tables []string) bool {
	if len(tables) > maxMessageTables {
		return false
	}
	n := 0
	for _, t := range tables {
		if len(t) > maxTableName || strings.IndexByte(t, 0) >= 0 {
			return false // a NUL separates a table from its rows in epoch names
		}
		n += len(t)
	}
	return n <= maxMessageNames
}

// fleetFloor keeps the highest fleet epochs this instance knows of (its
// own writes, authenticated messages, epochs a Fetch reported), which Redis
// cannot take back: an epochs of the in-process model (tables, sets of
// pinned columns, tags) stamped with fleet sequence numbers, in the same
// bounded memory — past its bounds it raises coarser epochs (a table's,
// "all"), which refuses more values than needed, never fewer. learned
// keeps the epochs of pin-set names ("the last write pinned on no column
// of C") a Fetch reported, which name no set of their own.
type fleetFloor struct {
	e       epochs
	mu      sync.Mutex
	learned map[string]uint64
}

// maxLearnedSets bounds the pin-set names whose epochs the floor keeps;
// past it, it raises the table's coarse epoch instead.
const maxLearnedSets = 1024

// raise records a write of fleet sequence seq to tables (every table when
// all).
func (f *fleetFloor) raise(tables []string, all bool, seq uint64) {
	f.raiseRows(tables, all, nil, seq)
}

// raiseRows records a write of fleet sequence seq to tables (every table
// when all) and to the rows that rows pin.
func (f *fleetFloor) raiseRows(tables []string, all bool, rows []rowWrite, seq uint64) {
	f.e.stamp(seq, tables, !all, rows)
}

// learn raises the floors of names (epoch names, see SharedStore.Fetch)
// to the epochs a Fetch reported for them (epochs[len(names)]: every
// table's), when they are within the fleet sequence seq (0: not known).
func (f *fleetFloor) learn(names []string, epochs []uint64, seq uint64) {
	for i, ep := range epochs {
		if ep == 0 || (seq > 0 && ep > seq) {
			continue
		}
		if i >= len(names) {
			f.e.raiseAll(ep)
			continue
		}
		name := names[i]
		table, rest, rows := strings.Cut(name, "\x00")
		switch {
		case !rows:
			f.e.raiseTable(table, false, ep)
		case rest == "c":
			f.e.raiseTable(table, true, ep)
		case strings.HasPrefix(rest, "t"):
			f.e.raiseTagAbove(table+"\x00"+rest[1:], ep)
		case strings.HasPrefix(rest, "p"):
			f.mu.Lock()
			old, ok := f.learned[name]
			switch {
			case ok || len(f.learned) < maxLearnedSets:
				if f.learned == nil {
					f.learned = make(map[string]uint64)
				}
				f.learned[name] = max(old, ep)
				f.mu.Unlock()
			default:
				f.mu.Unlock()
				f.e.raiseTable(table, true, ep)
			}
		}
	}
}

// admits reports whether a value of version may be newer than every write
// to tables this instance knows of.
func (f *fleetFloor) admits(version uint64, tables []string) bool {
	return f.admitsRows(version, tables, nil)
}

// admitsRows reports whether a value of version, of a read of tables that
// depends on the rows of its table that rows names (nil: on every row),
// may be newer than every write to them this instance knows of.
func (f *fleetFloor) admitsRows(version uint64, tables []string, rows *rowDeps) bool {
	if version == 0 || !f.e.unchangedFor(version-1, tables, true, rows) {
		return false
	}
	if rows == nil {
		return true
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.learned[pinSetName(rows)] < version
}

// raiseTable raises the epoch of table k (a tableKey) to n, and its coarse
// epoch with it when coarse, within maxEpochTables.
func (e *epochs) raiseTable(k string, coarse bool, n uint64) {
	e.mu.RLock()
	te := e.tables[k]
	done := te != nil && te.any >= n && (!coarse || te.coarse >= n)
	e.mu.RUnlock()
	if done || e.all.Load() >= n {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.tables == nil {
		e.tables = make(map[string]*tableEpochs)
	}
	if _, ok := e.tables[k]; !ok && len(e.tables) >= maxEpochTables {
		e.forgetTables(n)
		return
	}
	te = e.table(k)
	te.any = max(te.any, n)
	if coarse {
		te.coarse = max(te.coarse, n)
	}
}

// raiseTagAbove raises the epoch of tag k to n unless it is already there.
func (e *epochs) raiseTagAbove(k string, n uint64) {
	e.mu.RLock()
	done := e.tags[k] >= n || e.tagFloor >= n
	e.mu.RUnlock()
	if done {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.raiseTag(k, n)
}

// Bounds of the row writes of one invalidation: at most maxMessagePins
// values in all, their names (tables, columns, values) counted with the
// tables' against maxMessageNames. A row write past them is published (and,
// received, applied) as a write to its table.
const maxMessagePins = 256

// fleetRows returns the row writes of rws as an invalidation carries them:
// a row write without pins is a write to its table (Table alone).
func fleetRows(rws []rowWrite) []RowPins {
	if len(rws) == 0 {
		return nil
	}
	out := make([]RowPins, 0, len(rws))
	for _, rw := range rws {
		rp := RowPins{Table: rw.table, Columns: slices.Sorted(maps.Keys(rw.pins))}
		rp.Values = make([][]string, len(rp.Columns))
		for i, c := range rp.Columns {
			rp.Values[i] = rw.pins[c]
		}
		out = append(out, rp)
	}
	return out
}

// boundRows returns tables and rows within the bounds of one invalidation:
// a row write that is not well formed (no column, columns not sorted and
// distinct, a NUL in a name, a table name too long), or past the bounds
// (see maxMessagePins), moves its table to tables. Rows are kept in order
// while they fit.
func boundRows(tables []string, rows []RowPins) ([]string, []RowPins) {
	if len(rows) == 0 {
		return tables, nil
	}
	n := 0
	for _, t := range tables {
		n += len(t)
	}
	pins := 0
	var kept []RowPins
	var whole []string
	for _, rp := range rows {
		size, vals, ok := rowSize(rp)
		if !ok || pins+vals > maxMessagePins || n+size+len(rp.Table) > maxMessageNames {
			whole = append(whole, rp.Table)
			n += len(rp.Table)
			continue
		}
		pins += vals
		n += size
		kept = append(kept, rp)
	}
	if len(whole) > 0 {
		tables = append(slices.Clip(tables), whole...)
	}
	return tables, kept
}

// rowSize returns the bytes of rp's names and the number of its values,
// and whether it is well formed.
func rowSize(rp RowPins) (size, vals int, ok bool) {
	if len(rp.Columns) == 0 || len(rp.Values) != len(rp.Columns) || len(rp.Table) > maxTableName ||
		strings.IndexByte(rp.Table, 0) >= 0 {
		return 0, 0, false
	}
	size = len(rp.Table)
	for i, c := range rp.Columns {
		if c == "" || strings.IndexByte(c, 0) >= 0 || (i > 0 && rp.Columns[i-1] >= c) {
			return 0, 0, false
		}
		size += len(c)
		for _, v := range rp.Values[i] {
			size += len(v)
		}
		vals += len(rp.Values[i])
	}
	return size, vals, true
}

// localRows returns the row writes of rows (well formed: see boundRows)
// for the epochs.
func localRows(rows []RowPins) []rowWrite {
	if len(rows) == 0 {
		return nil
	}
	out := make([]rowWrite, 0, len(rows))
	for _, rp := range rows {
		rw := rowWrite{table: tableKey(rp.Table), pins: make(map[string][]string, len(rp.Columns))}
		for i, c := range rp.Columns {
			rw.pins[c] = slices.Clip(rp.Values[i])
		}
		out = append(out, rw)
	}
	return out
}

// rowsFlat is the canonical form of rows that an invalidation's MAC
// covers: for each, its table, its number of columns, and for each column
// its name, its number of values and the values.
func rowsFlat(rows []RowPins) []string {
	if len(rows) == 0 {
		return nil
	}
	var out []string
	for _, rp := range rows {
		out = append(out, rp.Table, strconv.Itoa(len(rp.Columns)))
		for i, c := range rp.Columns {
			var vals []string
			if i < len(rp.Values) {
				vals = rp.Values[i]
			}
			out = append(out, c, strconv.Itoa(len(vals)))
			out = append(out, vals...)
		}
	}
	return out
}

// pinSetName is the epoch name (see SharedStore.Fetch) of the last write
// to rows' table pinned on no column of the read's.
func pinSetName(rows *rowDeps) string {
	return rows.table + "\x00p" + strings.Join(rows.cols, "\x00")
}

// sharedEpochNames returns the epoch names a read of tables checks: the
// tables', and for the table whose rows it depends on (rows, may be nil),
// that table's coarse epoch, its pin-set epoch and its tags' epochs.
func sharedEpochNames(tables []string, rows *rowDeps) []string {
	keys := epochKeys(tables, true)
	if rows == nil || !slices.Contains(keys, rows.table) {
		return keys
	}
	out := make([]string, 0, len(keys)+2+len(rows.keys))
	for _, k := range keys {
		if k != rows.table {
			out = append(out, k)
			continue
		}
		out = append(out, k+"\x00c", pinSetName(rows))
		for _, tk := range rows.keys {
			out = append(out, k+"\x00t"+tk[len(k)+1:])
		}
	}
	return out
}

// blocked reports whether a write to one of tables (to any table, when not
// known) is not yet known to the tier.
func (ts *tierState) blocked(tables []string, known bool) bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if len(ts.pending) == 0 && len(ts.inflight) == 0 {
		return false
	}
	if !known || ts.pending["*"] > 0 || ts.inflight["*"] > 0 {
		return true
	}
	for _, t := range tables {
		k := tableKey(t)
		if ts.pending[k] > 0 || ts.inflight[k] > 0 {
			return true
		}
	}
	return false
}

// usable reports whether the tier may be called: it is up, or down but
// due for a probe.
func (ts *tierState) usable() bool {
	if !ts.down.Load() {
		return true
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return !ts.probing && !ts.clock.Now().Before(ts.openUntil)
}

func (ts *tierState) state() string {
	if ts.down.Load() {
		return "down"
	}
	return "up"
}

// onInvalidation applies a write another instance published. A message
// that did not parse, or whose MAC fails, is counted and ignored: it is
// not a write of the fleet, and treating it as one would let anybody who
// can publish on the channel empty every instance's L1.
func (s *Shield) onInvalidation(inv Invalidation) {
	ts := s.tier
	switch {
	case inv.Resync:
		// Writes may have been missed: nothing in L1 can be trusted.
		s.epochs.bump(nil, false)
		ts.stats.resyncs.Add(1)
	case inv.Malformed ||
		!ts.trustMessages && !ts.ring.CheckMessageRows(inv.Tag, ts.ns, inv.Seq, inv.All, inv.Source, inv.Tables, rowsFlat(inv.Rows)):
		ts.stats.rejected.Add(1)
	case inv.Source == ts.source:
		// Our own write: the epochs moved when it was made.
	default:
		all, tables, rows := inv.All, inv.Tables, inv.Rows
		if !all {
			// A row write past the bounds counts as a write to its table
			// (one whose table is past them, as a write to every table).
			tables, rows = boundRows(tables, rows)
			all = !boundedTables(tables)
		}
		var local []rowWrite
		if all {
			tables = nil
		} else {
			local = localRows(rows)
		}
		ts.floor.raiseRows(tables, all, local, inv.Seq)
		s.epochs.bumpRows(tables, !all, local)
		ts.stats.received.Add(1) // once applied: a reader that sees the count sees the write
	}
}

// attachTier starts s's use of t: its subscription to other instances'
// writes. Without a usable secret it sets s.tierErr instead, and every
// connection of s fails with it.
func (s *Shield) attachTier(t SharedTier) {
	ring, trust, err := tierRing(&s.opts)
	if err != nil {
		s.tierErr = err
		return
	}
	s.tier = newTierState(t, &s.opts, ring, func(msg string, args ...any) { s.log.Warn(msg, args...) })
	s.tier.trustMessages = trust
	stop, err := t.Subscribe(s.tier.ns, s.onInvalidation)
	if err != nil {
		// Without hearing other instances' writes, L1 could serve results
		// they made stale: the tier is not used at all.
		s.log.Error("sqlflight: shared tier disabled: cannot subscribe to invalidations", errAttr(err))
		s.tier = nil
		return
	}
	s.tier.stop = stop
}

// epochKeys returns the distinct epoch names of tables (nil when not known:
// every table).
func epochKeys(tables []string, known bool) []string {
	if !known {
		return nil
	}
	keys := make([]string, 0, len(tables))
	for _, t := range tables {
		if k := tableKey(t); !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	return keys
}
