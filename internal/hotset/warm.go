package hotset

import (
	"context"
	"crypto/sha256"
	"database/sql/driver"
	"encoding/hex"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sqlflight/sqlflight/internal/key"
	"github.com/sqlflight/sqlflight/internal/parent"
	"github.com/sqlflight/sqlflight/internal/sqlscan"
	"github.com/sqlflight/sqlflight/internal/stats"
)

// Warming: a Warmer replays a hot set on one scope (the root's Prewarm).
// It judges each statement again through its Target, as if the
// application sent it now, refuses what the Target, its trust and its
// bounds do not let through, and hands the keys of the others to a fixed
// number of workers; the Target warms each key (from the shared tier's
// value, or through an origin run like a background refresh) and says how
// it went. The Warmer counts, logs and reports; it never touches the cache
// nor the database itself.

// Kept are the bounds of what a hot set read from a file or the fleet
// keeps: what the root's SaveHotSet writes (texts of 16 KiB, the hot keys
// a statement keeps, arguments in 1 KiB).
var Kept = Limits{Text: stats.MaxWarmText, Keys: stats.HotKeyCapacity, ArgBytes: stats.MaxWarmArgs}

// FleetTTL is how long the fleet's hot set lives in the shared tier after
// its last publication.
const FleetTTL = 24 * time.Hour

// FleetKey is the shared tier's key of the fleet's hot set: a digest, like
// every key there.
var FleetKey = func() string {
	sum := sha256.Sum256([]byte("sqlflight/hotset/1"))
	return hex.EncodeToString(sum[:16])
}()

// Bound returns v, or def when v is not positive, at most max.
func Bound(v, def, max int) int {
	if v <= 0 {
		v = def
	}
	return min(v, max)
}

// Bounds are what a statement's policy asks of its origin: its timeout=,
// maxrows= and maxbytes= (zero: none).
type Bounds struct {
	Timeout  time.Duration
	MaxRows  int
	MaxBytes int64
}

// Clamp returns b within max, for a statement read from a hot set: each of
// its bounds that is not positive or exceeds max's is max's, whatever the
// text says.
func (b Bounds) Clamp(max Bounds) Bounds {
	if b.Timeout <= 0 || b.Timeout > max.Timeout {
		b.Timeout = max.Timeout
	}
	if b.MaxRows <= 0 || b.MaxRows > max.MaxRows {
		b.MaxRows = max.MaxRows
	}
	if b.MaxBytes <= 0 || b.MaxBytes > max.MaxBytes {
		b.MaxBytes = max.MaxBytes
	}
	return b
}

// SealKeys returns the hot set keys (SealKey) of a fleet secret and of the
// previous one, the current one first (it seals) and then the previous one
// (it only verifies): none without a secret, or an error wrapping short
// for a secret shorter than minLen bytes.
func SealKeys(secret, previous string, minLen int, short error) ([][]byte, error) {
	switch {
	case secret == "":
		return nil, nil
	case len(secret) < minLen:
		return nil, fmt.Errorf("%w: SharedSecret is shorter than %d bytes: the hot set cannot be sealed", short, minLen)
	case previous != "" && len(previous) < minLen:
		return nil, fmt.Errorf("%w: SharedPreviousSecret is shorter than %d bytes", short, minLen)
	}
	keys := [][]byte{SealKey(secret)}
	if previous != "" && previous != secret {
		keys = append(keys, SealKey(previous))
	}
	return keys, nil
}

// Build returns the hot set of a statement table, saved at now: its
// hottest statements that are shared and cached under a TTL, at most n,
// each with at most m of its hottest keys whose arguments are kept for
// warming (stats.WarmArgs); a statement without such a key, or without a
// text kept for warming, is left out. A statement shape whose texts differ
// in their constants (WHERE id = 4, WHERE id = 5) gives a hot set
// statement per text among its hot keys (stats.KeyText), each with its
// keys (and the calls of its keys as its calls, but for the statement's
// own text), so that each key is replayed with its own text; a key whose
// text was not kept is left out.
func Build(t *stats.Table, now time.Time, n, m int) *Set {
	hs := &Set{Format: Format, Version: Version, Saved: now.UTC(), Statements: []Statement{}}
	for _, st := range t.Snapshot() {
		if len(hs.Statements) >= n {
			break
		}
		p := st.Plan()
		if st.WarmText() == "" || p == nil || p.Reason != "" || !p.Cache {
			continue
		}
		own := Statement{Fingerprint: st.Fingerprint(), Text: st.WarmText(), Policy: p.Policy(), Calls: st.Calls()}
		var others []Statement // the shape's other texts, hottest key first
		for _, k := range st.HotKeys() {
			raw, warm := stats.WarmArgs(k)
			text, known := stats.KeyText(k)
			if !warm || !known {
				continue
			}
			hst := &own
			if text != "" && text != own.Text {
				i := slices.IndexFunc(others, func(o Statement) bool { return o.Text == text })
				if i < 0 {
					i = len(others)
					others = append(others, Statement{Fingerprint: own.Fingerprint, Text: text, Policy: own.Policy})
				}
				hst = &others[i]
				hst.Calls += k.Calls
			}
			if len(hst.Keys) >= m {
				continue
			}
			hst.Keys = append(hst.Keys, KeyArgs{Calls: k.Calls, Args: EncodeArgs(raw), Raw: raw})
		}
		for _, hst := range append([]Statement{own}, others...) {
			if len(hst.Keys) > 0 && len(hs.Statements) < n {
				hs.Statements = append(hs.Statements, hst)
			}
		}
	}
	return hs
}

// Target is the Shield's side of a Warmer, on one scope. J is what its
// judgement of a statement with arguments hands back to warm the key.
type Target[J any] interface {
	// Judge judges r with args as a read the application sent now on a
	// clean connection of the scope, under the Shield's verdict and
	// policy.
	Judge(ctx context.Context, r *sqlscan.Result, args []driver.NamedValue) Judgement[J]
	// Warm warms the key of j (a Judgement that refused nothing) and
	// says how it went; the error is the origin's, when it Failed.
	Warm(ctx context.Context, j J, text string) (Outcome, error)
}

// Judgement is what a Target's Judge says of a statement with arguments.
type Judgement[J any] struct {
	Key     J      // what Warm takes
	Refusal string // why it may not be replayed; "" when it may
	Pure    bool   // its annotation vouches for functions (pure=)
	Name    string // its policy's name, for the logs
}

// Outcome is how a Target warmed one key.
type Outcome int

// The outcomes of Target.Warm.
const (
	// Skipped: already cached or in flight, too large, with no usable
	// tier value, or left when ctx ended.
	Skipped  Outcome = iota
	Replayed         // queried and cached
	Loaded           // cached from the shared tier's value
	Failed           // its origin query failed
)

// Counters are the Shield's counters of pre-warming, which a Warmer adds
// to as it goes.
type Counters struct{ Replayed, Loaded, Skipped, Failed *atomic.Uint64 }

// Report is what a Warmer did (the root's PrewarmReport).
type Report struct {
	Statements int // statements whose keys were replayed
	Refused    int // statements refused: not shared or not cached under the Shield's verdict and policy
	Replayed   int // keys queried and cached
	Loaded     int // keys cached from the shared tier's values
	Skipped    int // keys already cached or in flight, too large, with no usable tier value, or left when ctx ended
	Failed     int // keys whose origin query failed
}

// Warmer runs one replay of a hot set through Target: set its fields, then
// call Run once.
type Warmer[J any] struct {
	Target Target[J]
	// Scan returns the scanner's view of a text as the scope's server
	// reads it.
	Scan func(text string) *sqlscan.Result
	// Trusted lets the statements' annotations vouch with pure=; without
	// it such a statement is refused.
	Trusted bool
	// Seen, when not nil, refuses the statements it does not know (the
	// Shield's statistics, for OnlySeen).
	Seen *stats.Table
	// Counters are added to as keys are warmed, skipped or fail.
	Counters Counters
	// Log takes the progress; Warn the failures of keys, at most once a
	// minute per kind and statement (the Shield's logx.Limiter), with
	// ErrAttr of the error.
	Log     *slog.Logger
	Warn    func(kind, normalized, msg string, args ...any)
	ErrAttr func(error) slog.Attr
	// Source and Scope name the hot set and the scope in the logs.
	Source, Scope string

	statements, refused               atomic.Int64
	replayed, loaded, skipped, failed atomic.Int64
}

// warmKey is one key to warm.
type warmKey struct {
	r    *sqlscan.Result
	text string
	args []driver.NamedValue
}

// Run judges the statements of hs one by one, hottest first, warms the
// keys of those it does not refuse on conc workers, and returns what it
// did. The statement is judged with its first key's arguments, and each
// key again with its own. When ctx ends, the keys left are skipped.
func (w *Warmer[J]) Run(ctx context.Context, hs *Set, conc int) Report {
	keys := 0
	for _, hst := range hs.Statements {
		keys += len(hst.Keys)
	}
	w.Log.InfoContext(ctx, "sqlflight: pre-warming", "source", w.Source, "statements", len(hs.Statements),
		"keys", keys, "concurrency", conc, "scope", w.Scope)
	begin := time.Now()
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
			jobs <- warmKey{r: r, text: hst.Text, args: parent.Named(k.Raw)}
		}
	}
	close(jobs)
	wg.Wait()
	rep := Report{Statements: int(w.statements.Load()), Refused: int(w.refused.Load()),
		Replayed: int(w.replayed.Load()), Loaded: int(w.loaded.Load()), Skipped: int(w.skipped.Load()),
		Failed: int(w.failed.Load())}
	w.Log.InfoContext(ctx, "sqlflight: pre-warm done", "replayed", rep.Replayed, "loaded", rep.Loaded,
		"skipped", rep.Skipped, "failed", rep.Failed, "refused", rep.Refused, "took", time.Since(begin))
	return rep
}

// judge decides whether hst may be replayed: scanned again, it must be a
// read the Target lets through (its first key's arguments stand for the
// others; each key is judged again).
func (w *Warmer[J]) judge(ctx context.Context, hst Statement) (*sqlscan.Result, bool) {
	r := w.Scan(hst.Text)
	reason := w.Target.Judge(ctx, r, parent.Named(hst.Keys[0].Raw))
	if reason.Refusal == "" && !w.Trusted && reason.Pure {
		reason.Refusal = "its annotation vouches for functions (pure=), which a hot set may not"
	}
	if reason.Refusal == "" && w.Seen != nil && w.Seen.Lookup(r.ShapeKey) == nil {
		reason.Refusal = "this Shield has not seen the statement (OnlySeen)"
	}
	if reason.Refusal != "" {
		w.refused.Add(1)
		w.Counters.Skipped.Add(uint64(len(hst.Keys)))
		w.Log.InfoContext(ctx, "sqlflight: pre-warm refused a statement", "reason", reason.Refusal,
			"fingerprint", key.Fingerprint(r.ShapeKey), "keys", len(hst.Keys))
		return nil, false
	}
	w.statements.Add(1)
	return r, true
}

// warm judges one key again and has the Target warm it.
func (w *Warmer[J]) warm(ctx context.Context, k warmKey) {
	j := w.Target.Judge(ctx, k.r, k.args)
	if j.Refusal != "" {
		w.skip() // its arguments made it uncacheable (a time word)
		return
	}
	out, err := w.Target.Warm(ctx, j.Key, k.text)
	switch out {
	case Replayed:
		w.replayed.Add(1)
		w.Counters.Replayed.Add(1)
	case Loaded:
		w.loaded.Add(1)
		w.Counters.Loaded.Add(1)
	case Failed:
		w.failed.Add(1)
		w.Counters.Failed.Add(1)
		w.Warn("prewarm", k.r.ShapeKey, "sqlflight: pre-warming a key failed",
			w.ErrAttr(err), "fingerprint", key.Fingerprint(k.r.ShapeKey), "name", j.Name)
	default:
		w.skip()
	}
}

func (w *Warmer[J]) skip() {
	w.skipped.Add(1)
	w.Counters.Skipped.Add(1)
}
