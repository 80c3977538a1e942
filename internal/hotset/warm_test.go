package hotset_test

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight/internal/hotset"
	"github.com/sqlflight/sqlflight/internal/parent"
	"github.com/sqlflight/sqlflight/internal/sqlscan"
	"github.com/sqlflight/sqlflight/internal/stats"
)

// fakeTarget judges by the statement's text and warms by the key's first
// argument: a text with "refuse" is refused, one with "pure" vouches with
// pure=; key 1 is replayed, 2 loaded, 3 fails, 4 is refused alone (as a
// time word would make it), anything else skipped.
type fakeTarget struct {
	mu      sync.Mutex
	judged  int
	warmed  []int64
	running atomic.Int64
	peak    atomic.Int64
	// With gate, Warm waits on it until cap keys are being warmed at once.
	gate chan struct{}
	cap  int64
	once sync.Once
}

func (f *fakeTarget) Judge(ctx context.Context, r *sqlscan.Result, args []driver.NamedValue) hotset.Judgement[int64] {
	f.mu.Lock()
	f.judged++
	f.mu.Unlock()
	n := args[0].Value.(int64)
	j := hotset.Judgement[int64]{Key: n, Pure: strings.Contains(r.Normalized, "pure"), Name: "p"}
	if strings.Contains(r.Normalized, "refuse") || n == 4 {
		j.Refusal = "refused"
	}
	return j
}

func (f *fakeTarget) Warm(ctx context.Context, n int64, text string) (hotset.Outcome, error) {
	now := f.running.Add(1)
	defer f.running.Add(-1)
	for p := f.peak.Load(); now > p && !f.peak.CompareAndSwap(p, now); p = f.peak.Load() {
	}
	if f.gate != nil {
		if now == f.cap {
			f.once.Do(func() { close(f.gate) }) // the cap is reached: let everything go
		}
		<-f.gate
	}
	f.mu.Lock()
	f.warmed = append(f.warmed, n)
	f.mu.Unlock()
	switch n {
	case 1:
		return hotset.Replayed, nil
	case 2:
		return hotset.Loaded, nil
	case 3:
		return hotset.Failed, errors.New("boom")
	}
	return hotset.Skipped, nil
}

type counters struct{ replayed, loaded, skipped, failed atomic.Uint64 }

func newWarmer(t *fakeTarget, c *counters, warned *atomic.Int64) *hotset.Warmer[int64] {
	return &hotset.Warmer[int64]{Target: t, Scan: sqlscan.Scan,
		Counters: hotset.Counters{Replayed: &c.replayed, Loaded: &c.loaded, Skipped: &c.skipped, Failed: &c.failed},
		Log:      slog.New(slog.NewTextHandler(io.Discard, nil)),
		Warn: func(kind, normalized, msg string, args ...any) {
			if kind == "prewarm" && strings.Contains(normalized, "SELECT") {
				warned.Add(1)
			}
		},
		ErrAttr: func(err error) slog.Attr { return slog.String("error", err.Error()) },
		Source:  "snapshot", Scope: "test"}
}

func statement(text string, keys ...int64) hotset.Statement {
	st := hotset.Statement{Text: text}
	for _, k := range keys {
		st.Keys = append(st.Keys, hotset.KeyArgs{Raw: []driver.Value{k}})
	}
	return st
}

// TestWarmerJudgesCountsAndReports: refused statements count every key
// as skipped, pure= needs trust, each key is judged again, and every
// outcome lands in the report and the counters.
func TestWarmerJudgesCountsAndReports(t *testing.T) {
	hs := &hotset.Set{Statements: []hotset.Statement{
		statement("SELECT a FROM t WHERE refuse = $1", 1, 1, 1),
		statement("SELECT a FROM t WHERE pure = $1", 1),
		statement("SELECT a FROM t WHERE k = $1", 1, 2, 3, 4, 5),
	}}
	ft := &fakeTarget{}
	var c counters
	var warned atomic.Int64
	rep := newWarmer(ft, &c, &warned).Run(context.Background(), hs, 2)
	want := hotset.Report{Statements: 1, Refused: 2, Replayed: 1, Loaded: 1, Skipped: 2, Failed: 1}
	if rep != want {
		t.Fatalf("report %+v, want %+v", rep, want)
	}
	if c.replayed.Load() != 1 || c.loaded.Load() != 1 || c.failed.Load() != 1 || c.skipped.Load() != 2+4 {
		t.Fatalf("counters %d %d %d %d", c.replayed.Load(), c.loaded.Load(), c.failed.Load(), c.skipped.Load())
	}
	if warned.Load() != 1 {
		t.Fatalf("%d warnings, want one for the failed key", warned.Load())
	}
	// Three statements judged once each, and five keys again each.
	if ft.judged != 3+5 || len(ft.warmed) != 4 {
		t.Fatalf("judged %d, warmed %v", ft.judged, ft.warmed)
	}

	// Trusted, the pure= statement is replayed too.
	ft, c = &fakeTarget{}, counters{}
	w := newWarmer(ft, &c, &warned)
	w.Trusted = true
	if rep := w.Run(context.Background(), hs, 2); rep.Statements != 2 || rep.Refused != 1 || rep.Replayed != 2 {
		t.Fatalf("trusted: %+v", rep)
	}
}

// TestWarmerOnlySeen: with Seen, a statement the table does not know is
// refused.
func TestWarmerOnlySeen(t *testing.T) {
	var tbl stats.Table
	seen := "SELECT a FROM t WHERE k = $1"
	tbl.Of(sqlscan.Scan(seen), "", clockAt{time.Now()}, stats.OutNone, func(s string) string { return s })
	hs := &hotset.Set{Statements: []hotset.Statement{statement(seen, 1), statement("SELECT b FROM t WHERE k = $1", 1)}}
	var c counters
	var warned atomic.Int64
	w := newWarmer(&fakeTarget{}, &c, &warned)
	w.Seen = &tbl
	if rep := w.Run(context.Background(), hs, 1); rep.Statements != 1 || rep.Refused != 1 || rep.Replayed != 1 {
		t.Fatalf("%+v", rep)
	}
	// A text of a shape seen with other constants is seen.
	tbl.Of(sqlscan.Scan("SELECT c FROM t WHERE id = 4 AND k = $1"), "", clockAt{time.Now()}, stats.OutNone, func(s string) string { return s })
	hs = &hotset.Set{Statements: []hotset.Statement{statement("SELECT c FROM t WHERE id = 5 AND k = $1", 1)}}
	w = newWarmer(&fakeTarget{}, &c, &warned)
	w.Seen = &tbl
	if rep := w.Run(context.Background(), hs, 1); rep.Statements != 1 || rep.Refused != 0 {
		t.Fatalf("another text of a seen shape: %+v", rep)
	}
}

type clockAt struct{ t time.Time }

func (c clockAt) Now() time.Time { return c.t }

// TestWarmerConcurrencyAndCancel: at most conc keys are warmed at once,
// and the keys left when ctx ends are skipped without being warmed.
func TestWarmerConcurrencyAndCancel(t *testing.T) {
	keys := make([]int64, 40)
	for i := range keys {
		keys[i] = 1
	}
	hs := &hotset.Set{Statements: []hotset.Statement{statement("SELECT a FROM t WHERE k = $1", keys...)}}
	ft := &fakeTarget{gate: make(chan struct{}), cap: 3}
	var c counters
	var warned atomic.Int64
	if rep := newWarmer(ft, &c, &warned).Run(context.Background(), hs, 3); rep.Replayed != 40 {
		t.Fatalf("%+v", rep)
	}
	if p := ft.peak.Load(); p != 3 {
		t.Fatalf("%d keys warmed at once, cap 3", p)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ft, c = &fakeTarget{}, counters{}
	rep := newWarmer(ft, &c, &warned).Run(ctx, hs, 3)
	if rep.Skipped != 40 || len(ft.warmed) != 0 || c.skipped.Load() != 40 {
		t.Fatalf("after ctx ended: %+v, %d warmed", rep, len(ft.warmed))
	}
}

func TestBoundNamedClamp(t *testing.T) {
	for _, c := range []struct{ v, def, max, want int }{{0, 4, 10, 4}, {-1, 4, 10, 4}, {7, 4, 10, 7}, {70, 4, 10, 10}, {0, 40, 10, 10}} {
		if got := hotset.Bound(c.v, c.def, c.max); got != c.want {
			t.Errorf("Bound(%d, %d, %d) = %d, want %d", c.v, c.def, c.max, got, c.want)
		}
	}
	named := parent.Named([]driver.Value{int64(1), "x"})
	if len(named) != 2 || named[0].Ordinal != 1 || named[1].Ordinal != 2 || named[1].Value != "x" || named[0].Name != "" {
		t.Errorf("Named: %+v", named)
	}
	max := hotset.Bounds{Timeout: time.Second, MaxRows: 10, MaxBytes: 100}
	if got := (hotset.Bounds{}).Clamp(max); got != max {
		t.Errorf("zero bounds: %+v", got)
	}
	if got := (hotset.Bounds{Timeout: time.Hour, MaxRows: 1 << 20, MaxBytes: 1 << 40}).Clamp(max); got != max {
		t.Errorf("bounds over max: %+v", got)
	}
	low := hotset.Bounds{Timeout: time.Millisecond, MaxRows: 2, MaxBytes: 3}
	if got := low.Clamp(max); got != low {
		t.Errorf("bounds within max: %+v", got)
	}
}

func TestSealKeys(t *testing.T) {
	short := errors.New("short")
	if keys, err := hotset.SealKeys("", "", 16, short); keys != nil || err != nil {
		t.Errorf("no secret: %v %v", keys, err)
	}
	if _, err := hotset.SealKeys("tiny", "", 16, short); !errors.Is(err, short) {
		t.Errorf("short secret: %v", err)
	}
	if _, err := hotset.SealKeys(strings.Repeat("a", 16), "tiny", 16, short); !errors.Is(err, short) {
		t.Errorf("short previous secret: %v", err)
	}
	a, b := strings.Repeat("a", 16), strings.Repeat("b", 16)
	keys, err := hotset.SealKeys(a, b, 16, short)
	if err != nil || len(keys) != 2 || string(keys[0]) != string(hotset.SealKey(a)) || string(keys[1]) != string(hotset.SealKey(b)) {
		t.Errorf("two secrets: %v %v", keys, err)
	}
	if keys, _ := hotset.SealKeys(a, a, 16, short); len(keys) != 1 {
		t.Errorf("the same secret twice: %d keys", len(keys))
	}
}

// TestBuildShapeTexts: a statement shape whose texts differ in their
// constants gives a hot set statement per text of its hot keys, each key
// with its own text; the statement of a parameter keeps its one text.
func TestBuildShapeTexts(t *testing.T) {
	var tbl stats.Table
	text := func(n int) string { return fmt.Sprintf(`SELECT id, v FROM t WHERE (id = %d)`, n) }
	var st *stats.Statement
	for round := range 2 { // arguments are kept from a key's second call
		for n := range 3 {
			r := sqlscan.Scan(text(n))
			st, _ = tbl.Of(r, text(n), clockAt{time.Now()}, stats.OutNone, func(s string) string { return "fp" })
			st.NoteKeyText(st.SawKey(text(n), nil), text(n))
			if round == 0 && n == 2 {
				st.SawKey(text(n), nil) // id = 2 is the hottest
			}
		}
	}
	st.SetPlan(&stats.Plan{Cache: true, Soft: time.Minute, Hard: time.Minute})
	hs := hotset.Build(&tbl, time.Now(), 32, 8)
	got := map[string]int{}
	for _, hst := range hs.Statements {
		if hst.Fingerprint != "fp" || len(hst.Keys) != 1 {
			t.Fatalf("statement %+v", hst)
		}
		got[hst.Text] = int(hst.Keys[0].Calls)
	}
	if len(got) != 3 || got[text(0)] != 2 || got[text(1)] != 2 || got[text(2)] != 3 {
		t.Fatalf("hot set texts %v", got)
	}
	if hs.Statements[0].Text != text(0) {
		t.Fatalf("the statement's own text is not first: %q", hs.Statements[0].Text)
	}
	if hs := hotset.Build(&tbl, time.Now(), 2, 8); len(hs.Statements) != 2 {
		t.Fatalf("%d statements for a bound of 2", len(hs.Statements))
	}
}
