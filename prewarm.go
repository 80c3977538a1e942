package sqlflight

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
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
	n, m := hotset.Bound(opts.MaxStatements, hotset.DefaultStatements, hotset.MaxStatements), hotset.Bound(opts.MaxKeys, hotKeyCapacity, hotKeyCapacity)
	var hs *hotset.Set
	source := "statistics"
	switch {
	case opts.From != nil:
		source = "snapshot"
		keys, err := hotset.SealKeys(s.opts.SharedSecret, s.opts.SharedPreviousSecret, MinSharedSecret, ErrNoSharedSecret)
		if err != nil && !opts.TrustFile {
			return rep, fmt.Errorf("%w: %w", ErrHotSetUnsealed, err)
		}
		if hs, err = hotset.Read(opts.From, keys, opts.TrustFile, n, m, hotset.Kept); err != nil {
			return rep, err
		}
	case opts.FromFleet:
		source = "fleet"
		var err error
		if hs, err = s.fleetHotSet(ctx, n, m); err != nil {
			return rep, err
		}
	default:
		hs = hotset.Build(&s.statements, s.opts.Clock.Now(), n, m)
	}
	// The scope of the DB's connections.
	dc, err := opts.DB.Conn(ctx)
	if err != nil {
		return rep, err
	}
	var sc *scope
	err = dc.Raw(func(d any) error {
		if cb, ok := d.(connBase); ok {
			sc = cb.virtual().sc
			return nil
		}
		return errNotThisShield
	})
	dc.Close()
	if err != nil {
		return rep, err
	}
	st := s.cache()
	if st == nil {
		return rep, errors.New("sqlflight: Prewarm: the cache is closed")
	}
	c := &conn{s: s.engine, sc: sc}
	w := &hotset.Warmer[*fate]{Target: &warmTarget{s: s.engine, c: c, st: st, fleet: opts.FromFleet, bounded: source != "statistics"},
		Scan: c.scan, Trusted: source == "statistics" || opts.TrustAnnotations,
		Counters: hotset.Counters{Replayed: &s.stats.prewarmReplayed, Loaded: &s.stats.prewarmLoaded,
			Skipped: &s.stats.prewarmSkipped, Failed: &s.stats.prewarmFailed},
		Log: s.log, Warn: func(kind, normalized, msg string, args ...any) { s.warned.Warn(s.log, kind, normalized, msg, args...) },
		ErrAttr: errText.Attr, Source: source, Scope: sc.name()}
	if opts.OnlySeen {
		w.Seen = &s.statements
	}
	rep = PrewarmReport(w.Run(ctx, hs, hotset.Bound(opts.Concurrency, DefaultPrewarmConcurrency, 1<<10)))
	if err := ctx.Err(); err != nil {
		return rep, fmt.Errorf("sqlflight: Prewarm ended early: %w", err)
	}
	return rep, nil
}

// warmTarget is a Prewarm's side of its hotset.Warmer: c is a clean
// virtual connection of the scope that never reaches the database itself
// (it only judges statements), st the cache it fills.
type warmTarget struct {
	s       *engine
	c       *conn
	st      *store
	fleet   bool // keys are filled from the shared tier's values only
	bounded bool // a hot set's texts: their timeout= and limits are clamped to the Options'
}

// Judge judges r with args as a read sent now on a clean connection.
func (t *warmTarget) Judge(ctx context.Context, r *sqlscan.Result, args []driver.NamedValue) hotset.Judgement[*fate] {
	f := &fate{r: r, args: args}
	j := hotset.Judgement[*fate]{Key: f}
	annotated := false
	if r.HasAnnotation {
		a, err := annotation.Cached(r.Annotation)
		if err != nil {
			j.Refusal = bypassBadAnnotation
			return j
		}
		f.a, annotated = a, true
	}
	t.s.decide(ctx, t.c, f, annotated, args, true)
	if t.bounded {
		// Whatever the text says: timeout= within OriginTimeout, maxrows=
		// and maxbytes= within MaxResultRows and MaxResultBytes.
		pol, o := &f.plan.pol, &t.s.opts
		b := hotset.Bounds{Timeout: pol.Timeout, MaxRows: pol.MaxRows, MaxBytes: pol.MaxBytes}.Clamp(
			hotset.Bounds{Timeout: o.OriginTimeout, MaxRows: o.MaxResultRows, MaxBytes: o.MaxResultBytes})
		pol.Timeout, pol.MaxRows, pol.MaxBytes = b.Timeout, b.MaxRows, b.MaxBytes
	}
	j.Pure, j.Name = len(f.a.Pure) > 0, f.plan.pol.Name
	switch {
	case !r.ReadOnly:
		j.Refusal = bypassWrite
	case f.reason != "":
		j.Refusal = f.reason
	case !f.plan.cache:
		j.Refusal = "not cached: no TTL under this Shield's policy"
	}
	return j
}

// Warm warms f's key unless it is cached fresh or known too large: from
// the shared tier (fleet), if it holds a usable value, never querying the
// database; else through a flight of its own, like a background refresh.
func (t *warmTarget) Warm(ctx context.Context, f *fate, text string) (hotset.Outcome, error) {
	s := t.s
	key, ok := key.Append(nil, t.c.sc.id, f.part, f.r.Normalized, f.args)
	var seen *entry
	if ok {
		seen = t.st.Peek(string(key))
	}
	if !ok || seen != nil && s.epochs.UnchangedFor(seen.seq, f.tables, f.known, f.rows) &&
		s.judge(seen, f.plan.pol).At(s.opts.Clock.Now()) == fresh.Fresh ||
		s.tooLarge.Holds(string(key), time.Now(), s.limitsOf(f.plan.pol).Within) {
		return hotset.Skipped, nil
	}
	rd := &read{c: t.c, query: text, r: f.r, a: f.a, v: f.v, plan: f.plan, args: f.args, key: string(key),
		tables: f.tables, known: f.known, rows: f.rows, stats: s.statements.Lookup(f.r.ShapeKey)}
	if !t.fleet {
		return t.replay(ctx, rd, seen)
	}
	if rd.l2 = s.sharedKey(rd); rd.l2 == "" {
		return hotset.Skipped, nil
	}
	seq := s.epochs.Now()
	e, err := s.fetchShared(ctx, rd, seq)
	if err != nil || e == nil {
		return hotset.Skipped, nil
	}
	s.tier.Stats.Hits.Add(1)
	if s.epochs.UnchangedFor(seq, rd.tables, rd.known, rd.rows) {
		t.st.Put(e, s.opts.Clock.Now())
		t.st.Wait()
	}
	return hotset.Loaded, nil
}

// replay runs rd's origin through the scope's guard on a spare
// connection, as a background refresh of seen (the entry the key held, or
// nil) does, and waits for it. It is admitted only while the breaker is
// closed (pre-warming never probes a database that failed) and once one
// of the scope's background slots frees up before ctx ends.
func (t *warmTarget) replay(ctx context.Context, rd *read, seen *entry) (hotset.Outcome, error) {
	s, sc := t.s, t.c.sc
	tk, err := sc.guard.Warm(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return hotset.Skipped, nil
		}
		return hotset.Failed, err
	}
	f, ok := s.flights.startRefresh(rd.key, &s.epochs, rd.tables, rd.known, rd.rows, t.st, seen)
	if !ok {
		tk.Exit(errNotRun)
		return hotset.Skipped, nil // a flight runs: it fills the key
	}
	rd.named = s.stats.names.Of(rd.plan.pol.Name)
	rd.wantL2 = s.tier != nil // a value of the fleet's is taken instead of querying
	var failure atomic.Pointer[error]
	rd.plan.onFailure = func(err error) { failure.Store(&err) }
	s.launch(ctx, f, rd, t.st, &poolLink{sc: sc, s: s}, tk, false)
	select {
	case <-f.Done():
	case <-ctx.Done():
		return hotset.Skipped, nil // it goes on and fills the cache; Prewarm returns
	}
	res, err := f.Result()
	switch {
	case err == nil && res != nil && f.Data.fromShared != nil:
		return hotset.Loaded, nil
	case err == nil && res != nil:
		return hotset.Replayed, nil
	case failure.Load() != nil && !errors.Is(*failure.Load(), errLeasedElsewhere):
		return hotset.Failed, *failure.Load()
	}
	return hotset.Skipped, nil // too large to share, or another instance warms it
}
