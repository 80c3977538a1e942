package sqlflight

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sqlflight/sqlflight/internal/annotation"
	"github.com/sqlflight/sqlflight/internal/fresh"
	"github.com/sqlflight/sqlflight/internal/hotset"
	"github.com/sqlflight/sqlflight/internal/key"
	"github.com/sqlflight/sqlflight/internal/sqlscan"
)

// Pre-warming: after a deploy, fill the cache with the hottest keys before
// the instance takes traffic, a few origin queries at a time, so that a
// new release does not stampede a cold database with one origin per hot
// key at once.

// DefaultPrewarmConcurrency is PrewarmOptions.Concurrency's default.
const DefaultPrewarmConcurrency = 4

// PrewarmOptions configure Shield.Prewarm.
type PrewarmOptions struct {
	// DB is the database to warm: a *sql.DB opened through the Shield
	// (its scope: its DSN or connector). Required.
	DB *sql.DB

	// Where the keys come from: From, a hot set SaveHotSet wrote (read as
	// untrusted input, at most 8 MiB, and replayed only if its seal
	// verifies, see TrustFile); else, with FromFleet, the fleet's hot set
	// in the shared tier (PublishHotSet); else the Shield's own
	// statistics.
	From io.Reader

	// TrustFile says that From comes from a place only the application
	// can write: its seal is not checked, and an unsealed hot set is read
	// too. Without it, From must carry a seal that verifies under the
	// Shield's SharedSecret or SharedPreviousSecret (SaveHotSet seals with
	// the first), else Prewarm fails with ErrHotSetUnsealed and runs
	// nothing: whoever can write the file could otherwise make the
	// application run any read-only statement it names, with the
	// application's role, and put its rows in the cache and the shared
	// tier. A Shield without SharedSecret cannot seal nor verify: its hot
	// sets are replayed only with TrustFile. Either way, each statement is
	// still judged as the application's would be (see Prewarm), and
	// TrustAnnotations still governs pure=.
	TrustFile bool

	// OnlySeen replays only the statements this Shield's statement
	// statistics know (Shield.Statements: statements the application sent
	// through it since it started and that are still counted), whatever
	// the hot set holds; the others are refused. It is a second bound for
	// a hot set from a file or the fleet, for an instance that pre-warms
	// after it served some traffic; with Options.NoStatementStats every
	// statement is refused.
	OnlySeen bool

	// FromFleet fills the cache from the shared tier's values only: a key
	// the tier holds no usable value for is skipped, and no origin query
	// runs. Without a shared tier Prewarm fails with ErrNoSharedTier.
	FromFleet bool

	// Concurrency caps the origin queries Prewarm runs at once (zero:
	// DefaultPrewarmConcurrency). They also take the scope's background
	// refresh slots (Options.MaxRefreshes), so fewer may run.
	Concurrency int

	// MaxStatements and MaxKeys bound what is replayed: the hottest
	// statements (zero: 32, at most 256) and the hottest keys of each
	// (zero and at most: 8).
	MaxStatements int
	MaxKeys       int

	// TrustAnnotations lets the texts of a hot set (From, FromFleet) vouch
	// for functions with pure=, as the application's own statements do.
	// Without it, a statement of a hot set whose annotation has pure= is
	// refused: pure= makes a call the server says is VOLATILE shareable,
	// and a hot set is a file anybody with access to it may have changed.
	TrustAnnotations bool
}

// PrewarmReport tells what Prewarm did.
type PrewarmReport struct {
	Statements int // statements whose keys were replayed
	Refused    int // statements refused: not shared or not cached under this Shield's verdict and policy
	Replayed   int // keys queried and cached
	Loaded     int // keys cached from the shared tier's values
	Skipped    int // keys already cached or in flight, too large, with no usable tier value, or left when ctx ended
	Failed     int // keys whose origin query failed
}

// ErrNoSharedTier is wrapped by the error of a Prewarm from the fleet (or
// of PublishHotSet) on a Shield without a shared tier.
var ErrNoSharedTier = errors.New("sqlflight: no shared tier")

// errNotThisShield is the error of a Prewarm whose DB is not the Shield's.
var errNotThisShield = errors.New("sqlflight: Prewarm: DB is not opened through this Shield")

// Prewarm fills the cache with the hottest keys of the statements the
// Shield caches, on opts.DB, and returns what it did. Call it before the
// instance takes traffic (in a readiness check): keys warmed by then are
// cache hits, and the database saw at most opts.Concurrency origin
// queries at once.
//
// Each statement is judged again, as if the application sent it now, under
// this Shield's verdict and policy: a statement that is not proven
// read-only, that the server's verdict does not let share, or that no TTL
// caches (annotation, context policy, rules, Options.Default) is refused,
// whatever the hot set says. Each key then runs like a background refresh:
// on a real connection of the scope that no caller holds, through the
// scope's breaker (an open one fails it) and a background slot, detached
// from ctx and bounded by the origin timeout; its result fills the cache
// with the entry's own jitter draw, so that the warmed keys do not expire
// together. A key already cached fresh, or with a flight running, is
// skipped. Callers of the application that ask for a key being warmed join
// its flight; no error reaches them from Prewarm.
//
// A hot set from a file (opts.From) is replayed only when its seal
// verifies under the Shield's fleet secret, or with opts.TrustFile: else
// Prewarm fails with ErrHotSetUnsealed before any statement is judged or
// run.
//
// Progress goes to the Shield's logger and to Stats (PrewarmReplayed,
// PrewarmLoaded, PrewarmSkipped, PrewarmFailed). Prewarm returns an error
// for a hot set it cannot read (ErrBadHotSet) or whose seal does not
// verify (ErrHotSetUnsealed), a DB that is not the Shield's, or, with the
// report of what was done, when ctx ended first.
func (s *Shield) Prewarm(ctx context.Context, opts PrewarmOptions) (PrewarmReport, error) {
	var rep PrewarmReport
	if opts.DB == nil || ShieldOf(opts.DB) != s {
		return rep, errNotThisShield
	}
	if opts.FromFleet && s.tier == nil {
		return rep, fmt.Errorf("%w: Prewarm FromFleet", ErrNoSharedTier)
	}
	n, m := boundOr(opts.MaxStatements, hotset.DefaultStatements, hotset.MaxStatements), boundOr(opts.MaxKeys, hotKeyCapacity, hotKeyCapacity)
	hs, source, err := s.prewarmSource(ctx, opts, n, m)
	if err != nil {
		return rep, err
	}
	sc, err := scopeOfDB(ctx, opts.DB)
	if err != nil {
		return rep, err
	}
	st := s.cache()
	if st == nil {
		return rep, errors.New("sqlflight: Prewarm: the cache is closed")
	}
	w := &warmer{s: s, c: &conn{s: s, sc: sc}, st: st, fleet: opts.FromFleet,
		trusted: source == "statistics" || opts.TrustAnnotations, bounded: source != "statistics", onlySeen: opts.OnlySeen}
	keys := 0
	for _, hst := range hs.Statements {
		keys += len(hst.Keys)
	}
	s.log.InfoContext(ctx, "sqlflight: pre-warming", "source", source, "statements", len(hs.Statements),
		"keys", keys, "concurrency", boundOr(opts.Concurrency, DefaultPrewarmConcurrency, 1<<10), "scope", sc.name())
	begin := time.Now()
	w.run(ctx, hs, boundOr(opts.Concurrency, DefaultPrewarmConcurrency, 1<<10))
	rep = w.report()
	s.log.InfoContext(ctx, "sqlflight: pre-warm done", "replayed", rep.Replayed, "loaded", rep.Loaded,
		"skipped", rep.Skipped, "failed", rep.Failed, "refused", rep.Refused, "took", time.Since(begin))
	if err := ctx.Err(); err != nil {
		return rep, fmt.Errorf("sqlflight: Prewarm ended early: %w", err)
	}
	return rep, nil
}

// boundOr returns v, or def when v is not positive, at most max.
func boundOr(v, def, max int) int {
	if v <= 0 {
		v = def
	}
	return min(v, max)
}

// prewarmSource reads the hot set opts names, and says which it is.
func (s *Shield) prewarmSource(ctx context.Context, opts PrewarmOptions, n, m int) (*hotset.Set, string, error) {
	switch {
	case opts.From != nil:
		keys, err := hotSetKeys(&s.opts)
		if err != nil && !opts.TrustFile {
			return nil, "snapshot", fmt.Errorf("%w: %w", ErrHotSetUnsealed, err)
		}
		hs, err := hotset.Read(opts.From, keys, opts.TrustFile, n, m, hotSetLimits)
		return hs, "snapshot", err
	case opts.FromFleet:
		hs, err := s.fleetHotSet(ctx, n, m)
		return hs, "fleet", err
	}
	return s.hotSet(n, m), "statistics", nil
}

// scopeOfDB returns the scope of db's connections.
func scopeOfDB(ctx context.Context, db *sql.DB) (*scope, error) {
	c, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var sc *scope
	err = c.Raw(func(dc any) error {
		if cb, ok := dc.(connBase); ok {
			sc = cb.virtual().sc
			return nil
		}
		return errNotThisShield
	})
	return sc, err
}

// warmer runs one Prewarm: c is a clean virtual connection of the scope
// that never reaches the database itself (it only judges statements).
type warmer struct {
	s       *Shield
	c       *conn
	st      *store
	fleet   bool
	trusted bool // the statements' annotations may vouch with pure=
	bounded bool // a hot set's texts: their timeout= and limits are clamped to the Options'
	// onlySeen refuses the statements the Shield's statistics do not know.
	onlySeen bool

	statements, refused                       atomic.Int64
	replayed, loaded, skipped, failed, queued atomic.Int64
}

// warmKey is one key to replay.
type warmKey struct {
	r    *sqlscan.Result
	text string
	args []driver.NamedValue
}

// run judges the statements of hs one by one and replays their keys on
// conc workers.
func (w *warmer) run(ctx context.Context, hs *hotset.Set, conc int) {
	jobs := make(chan warmKey)
	var wg sync.WaitGroup
	for range conc {
		wg.Go(func() {
			for k := range jobs {
				if ctx.Err() != nil {
					w.skip()
					continue
				}
				w.warm(ctx, k)
			}
		})
	}
	for _, hst := range hs.Statements {
		r, ok := w.judge(ctx, hst)
		if !ok {
			continue
		}
		for _, k := range hst.Keys {
			jobs <- warmKey{r: r, text: hst.Text, args: namedArgs(k.Raw)}
		}
	}
	close(jobs)
	wg.Wait()
}

// judge decides whether hst may be replayed: scanned again, it must be a
// read the current Shield shares and caches (its first key's arguments
// stand for the others; each key is judged again).
func (w *warmer) judge(ctx context.Context, hst hotset.Statement) (*sqlscan.Result, bool) {
	r := w.c.scan(hst.Text)
	f, reason := w.fate(ctx, r, namedArgs(hst.Keys[0].Raw))
	if reason == "" && !w.trusted && len(f.a.Pure) > 0 {
		reason = "its annotation vouches for functions (pure=), which a hot set may not"
	}
	if reason == "" && w.onlySeen && w.s.statements.Lookup(r.Normalized) == nil {
		reason = "this Shield has not seen the statement (OnlySeen)"
	}
	if reason != "" {
		w.refused.Add(1)
		w.s.stats.prewarmSkipped.Add(uint64(len(hst.Keys)))
		w.s.log.InfoContext(ctx, "sqlflight: pre-warm refused a statement", "reason", reason,
			"fingerprint", key.Fingerprint(r.Normalized), "keys", len(hst.Keys))
		return nil, false
	}
	w.statements.Add(1)
	return r, true
}

// fate judges r with args as a read sent now on a clean connection, and
// returns why it may not be replayed ("" when it may).
func (w *warmer) fate(ctx context.Context, r *sqlscan.Result, args []driver.NamedValue) (*fate, string) {
	f := &fate{r: r, args: args}
	annotated := false
	if r.HasAnnotation {
		a, err := annotation.Cached(r.Annotation)
		if err != nil {
			return f, bypassBadAnnotation
		}
		f.a, annotated = a, true
	}
	w.s.decide(ctx, w.c, f, annotated, args, true)
	if w.bounded {
		w.s.clampToOptions(&f.plan.pol)
	}
	switch {
	case !r.ReadOnly:
		return f, bypassWrite
	case f.reason != "":
		return f, f.reason
	case !f.plan.cache:
		return f, "not cached: no TTL under this Shield's policy"
	}
	return f, ""
}

// clampToOptions bounds pol, the policy of a statement read from a hot set
// (a file or the fleet's), by the Shield's Options: its timeout= never
// exceeds OriginTimeout, its maxrows= and maxbytes= never exceed
// MaxResultRows and MaxResultBytes, whatever the text says.
func (s *Shield) clampToOptions(pol *Policy) {
	if pol.Timeout <= 0 || pol.Timeout > s.opts.OriginTimeout {
		pol.Timeout = s.opts.OriginTimeout
	}
	if pol.MaxRows <= 0 || pol.MaxRows > s.opts.MaxResultRows {
		pol.MaxRows = s.opts.MaxResultRows
	}
	if pol.MaxBytes <= 0 || pol.MaxBytes > s.opts.MaxResultBytes {
		pol.MaxBytes = s.opts.MaxResultBytes
	}
}

// namedArgs returns raw as positional arguments.
func namedArgs(raw []driver.Value) []driver.NamedValue {
	out := make([]driver.NamedValue, len(raw))
	for i, v := range raw {
		out[i] = driver.NamedValue{Ordinal: i + 1, Value: v}
	}
	return out
}

func (w *warmer) skip() {
	w.skipped.Add(1)
	w.s.stats.prewarmSkipped.Add(1)
}

// warm replays one key: from the shared tier (fleet), else through a
// flight of its own, like a background refresh.
func (w *warmer) warm(ctx context.Context, k warmKey) {
	s := w.s
	f, reason := w.fate(ctx, k.r, k.args)
	if reason != "" {
		w.skip() // its arguments made it uncacheable (a time word)
		return
	}
	key, ok := key.Append(nil, w.c.sc.id, f.part, k.r.Normalized, k.args)
	var seen *entry
	if ok {
		seen = w.st.Peek(string(key))
	}
	if !ok || w.fresh(seen, f) || s.tooLarge.skips(string(key), s.limitsOf(f.plan.pol), time.Now()) {
		w.skip()
		return
	}
	rd := &read{c: w.c, query: k.text, r: k.r, a: f.a, v: f.v, plan: f.plan, args: k.args, key: string(key),
		tables: f.tables, known: f.known, rows: f.rows, stats: s.statements.Lookup(k.r.Normalized)}
	if w.fleet {
		w.load(ctx, rd)
		return
	}
	w.replay(ctx, rd, seen)
}

// fresh reports whether e, a cached entry or nil, is fresh for f's policy.
func (w *warmer) fresh(e *entry, f *fate) bool {
	return e != nil && w.s.epochs.UnchangedFor(e.seq, f.tables, f.known, f.rows) &&
		w.s.judge(e, f.plan.pol).At(w.s.opts.Clock.Now()) == fresh.Fresh
}

// replay runs rd's origin through the scope's guard on a spare
// connection, as a background refresh of seen (the entry the key held, or
// nil) does, and waits for it.
func (w *warmer) replay(ctx context.Context, rd *read, seen *entry) {
	s, sc := w.s, w.c.sc
	t, err := s.enterWarm(ctx, sc)
	if err != nil {
		if ctx.Err() != nil {
			w.skip()
		} else {
			w.fail(rd, err)
		}
		return
	}
	f, ok := s.flights.startRefresh(rd.key, &s.epochs, rd.tables, rd.known, rd.rows, w.st, seen)
	if !ok {
		t.Exit(errNotRun)
		w.skip() // a flight runs: it fills the key
		return
	}
	rd.named = s.stats.names.of(rd.plan.pol.Name)
	rd.wantL2 = s.tier != nil // a value of the fleet's is taken instead of querying
	var failure atomic.Pointer[error]
	rd.plan.onFailure = func(err error) { failure.Store(&err) }
	s.launch(ctx, f, rd, w.st, &poolLink{sc: sc, s: s}, t, false)
	select {
	case <-f.Done():
	case <-ctx.Done():
		w.skip() // it goes on and fills the cache; Prewarm returns
		return
	}
	res, err := f.Result()
	switch {
	case err == nil && res != nil && f.Data.fromShared != nil:
		w.loaded.Add(1)
		s.stats.prewarmLoaded.Add(1)
	case err == nil && res != nil:
		w.replayed.Add(1)
		s.stats.prewarmReplayed.Add(1)
	case failure.Load() != nil && !errors.Is(*failure.Load(), errLeasedElsewhere):
		w.fail(rd, *failure.Load())
	default:
		w.skip() // too large to share, or another instance warms it
	}
}

// load fills rd's key from the shared tier's value, if it holds a usable
// one; it never queries the database.
func (w *warmer) load(ctx context.Context, rd *read) {
	s := w.s
	if rd.l2 = s.sharedKey(rd); rd.l2 == "" {
		w.skip()
		return
	}
	seq := s.epochs.Now()
	e, err := s.fetchShared(ctx, rd, seq)
	if err != nil || e == nil {
		w.skip()
		return
	}
	s.tier.Stats.Hits.Add(1)
	if s.epochs.UnchangedFor(seq, rd.tables, rd.known, rd.rows) {
		w.st.Put(e, s.opts.Clock.Now())
		w.st.Wait()
	}
	w.loaded.Add(1)
	s.stats.prewarmLoaded.Add(1)
}

func (w *warmer) fail(rd *read, err error) {
	w.failed.Add(1)
	w.s.stats.prewarmFailed.Add(1)
	w.s.warnEvery("prewarm", rd.r.Normalized, "sqlflight: pre-warming a key failed",
		errAttr(err), "fingerprint", key.Fingerprint(rd.r.Normalized), "name", rd.plan.pol.Name)
}

func (w *warmer) report() PrewarmReport {
	return PrewarmReport{Statements: int(w.statements.Load()), Refused: int(w.refused.Load()),
		Replayed: int(w.replayed.Load()), Loaded: int(w.loaded.Load()), Skipped: int(w.skipped.Load()),
		Failed: int(w.failed.Load())}
}

// enterWarm admits one pre-warm origin of sc: its breaker must be closed
// (pre-warming never probes a database that failed) and one of its
// background slots must free up before ctx ends.
func (s *Shield) enterWarm(ctx context.Context, sc *scope) (ticket, error) {
	return sc.guard.Warm(ctx)
}
