package sqlflight

import (
	"bytes"
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight/internal/hotset"
	"github.com/sqlflight/sqlflight/internal/key"
	"github.com/sqlflight/sqlflight/internal/parent"
	"github.com/sqlflight/sqlflight/internal/stats"
)

const warmQuery = "/* sqlflight: ttl=1m */ SELECT n FROM products WHERE a = $1 AND b = $2 AND c = $3 AND d = $4 AND e = $5 AND f = $6 AND g = $7"

// warmArgs are keys of every plain type, each one twice (a key's arguments
// are kept from its second call on).
func warmArgs() [][]any {
	at := time.Date(2024, 2, 29, 13, 14, 15, 123456789, time.FixedZone("", 5*3600+1800))
	return [][]any{
		{int64(42), 3.25, true, "café", []byte{0, 1, 2, 255}, at, nil},
		{int64(-1), math.Inf(-1), false, "", []byte{}, at.UTC(), nil},
		{int64(math.MaxInt64), 0.1, true, `"quoted" \ `, []byte(nil), at.Add(time.Nanosecond), nil},
	}
}

func queryAll(t *testing.T, db *sql.DB, q string, keys [][]any, times int) {
	t.Helper()
	for range times {
		for _, args := range keys {
			readAll(t, db, q, args...)
		}
	}
}

func TestPrewarmSnapshotRoundTrip(t *testing.T) {
	old := &fakeDriver{}
	dbA, a := openWarm(t, old)
	queryAll(t, dbA, warmQuery, warmArgs(), 2)
	var buf bytes.Buffer
	if err := a.SaveHotSet(&buf); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), `"t": "int64",`) || !strings.Contains(buf.String(), `"v": "42"`) {
		t.Fatalf("hot set does not type its arguments:\n%s", buf.String())
	}
	hs, err := hotset.Parse(buf.Bytes(), 32, 8, hotset.Kept)
	if err != nil || len(hs.Statements) != 1 || len(hs.Statements[0].Keys) != 3 {
		t.Fatalf("hot set: %v %+v", err, hs)
	}
	for _, k := range hs.Statements[0].Keys {
		found := false
		for _, want := range warmArgs() {
			if sameValues(k.Raw, want) {
				found = true
			}
		}
		if !found {
			t.Errorf("arguments did not round-trip: %#v", k.Raw)
		}
	}

	// A new instance: cold, warmed from the snapshot, then served from it.
	d := &fakeDriver{}
	dbB, b := openWarm(t, d)
	rep, err := b.Prewarm(context.Background(), PrewarmOptions{DB: dbB, From: bytes.NewReader(buf.Bytes()), TrustFile: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Replayed != 3 || rep.Statements != 1 || rep.Failed != 0 {
		t.Fatalf("report %+v", rep)
	}
	before := d.queries.Load()
	queryAll(t, dbB, warmQuery, warmArgs(), 1)
	if got := d.queries.Load() - before; got != 0 {
		t.Fatalf("%d origin queries after pre-warming, want 0 (the keys did not round-trip)", got)
	}
	if st := b.Stats(); st.PrewarmReplayed != 3 || st.FreshHits != 3 {
		t.Fatalf("stats: replayed %d, fresh hits %d", st.PrewarmReplayed, st.FreshHits)
	}

	// Again: every key is cached, nothing runs.
	rep, err = b.Prewarm(context.Background(), PrewarmOptions{DB: dbB, From: bytes.NewReader(buf.Bytes()), TrustFile: true})
	if err != nil || rep.Skipped != 3 || rep.Replayed != 0 || d.queries.Load() != before {
		t.Fatalf("second pre-warm: %+v %v", rep, err)
	}
}

// sameValues compares arguments exactly: types, bytes (nil or not), and
// instants with their zone offsets.
func sameValues(got []driver.Value, want []any) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		g, w := got[i], want[i]
		if gt, ok := g.(time.Time); ok {
			wt, ok := w.(time.Time)
			_, go1 := gt.Zone()
			_, wo := wt.Zone()
			if !ok || !gt.Equal(wt) || go1 != wo {
				return false
			}
			continue
		}
		if gb, ok := g.([]byte); ok {
			wb, ok := w.([]byte)
			if !ok || (gb == nil) != (wb == nil) || !bytes.Equal(gb, wb) {
				return false
			}
			continue
		}
		if !reflect.DeepEqual(g, w) {
			return false
		}
	}
	return true
}

func TestPrewarmRefusesHostileSnapshot(t *testing.T) {
	d := &fakeDriver{}
	db, s := openWarm(t, d)
	stmt := func(text string, args ...string) map[string]any {
		var keys []any
		for _, a := range args {
			var v []map[string]string
			if err := json.Unmarshal([]byte(a), &v); err != nil {
				t.Fatal(err)
			}
			keys = append(keys, map[string]any{"calls": 10, "args": v})
		}
		return map[string]any{"fingerprint": "x", "text": text, "calls": 100, "keys": keys}
	}
	one := `[{"t":"int64","v":"1"}]`
	snapshot := map[string]any{"format": "sqlflight-hotset", "version": 1, "statements": []any{
		stmt("/* sqlflight: ttl=1h */ UPDATE products SET n = n + 1 WHERE id = $1", one),
		stmt("/* sqlflight: ttl=1h */ DELETE FROM products WHERE id = $1", one),
		stmt("/* sqlflight: ttl=1h */ SELECT n FROM products WHERE id = $1 FOR UPDATE", one),
		stmt("/* sqlflight: ttl=1h */ WITH d AS (DELETE FROM products WHERE id = $1 RETURNING n) SELECT n FROM d", one),
		stmt("/* sqlflight: ttl=1h */ SELECT nextval('s') WHERE $1 = 1", one),
		stmt("/* sqlflight: ttl=1h */ SELECT random() WHERE $1 = 1", one),
		stmt("/* sqlflight: ttl=1h pure=bump */ SELECT bump($1)", one),
		stmt("/* sqlflight: ttl=1h */ SELECT 1; DELETE FROM products WHERE id = $1", one),
		stmt("SELECT n FROM products WHERE id = $1", one), // no TTL: not cached
		stmt("/* sqlflight: ttl=bogus */ SELECT n FROM products WHERE id = $1", one),
		// Keys out of bounds or mistyped are dropped, and a statement
		// left with none.
		stmt("/* sqlflight: ttl=1h */ SELECT n FROM products WHERE name = $1",
			`[{"t":"int64","v":"x"}]`, `[{"t":"float64","v":"1e999"}]`, `[{"t":"complex128","v":"1"}]`, `[{"t":"int8","v":"300"}]`,
			`[{"t":"string","v":"`+strings.Repeat("x", 2000)+`"}]`, `[{"t":"int64"}]`, `[{"t":"null","v":"1"}]`),
		stmt("/* sqlflight: ttl=1h */ SELECT n FROM products WHERE id = $1 -- "+strings.Repeat("x", 17<<10), one),
	}}
	data, err := json.Marshal(snapshot)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := s.Prewarm(context.Background(), PrewarmOptions{DB: db, From: bytes.NewReader(data), TrustFile: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Refused != 10 || rep.Statements != 0 || rep.Replayed != 0 {
		t.Fatalf("report %+v, want 10 statements refused and none replayed", rep)
	}
	if q, e := d.queries.Load(), d.execs.Load(); q != 0 || e != 0 {
		t.Fatalf("a hostile snapshot reached the database: %d queries, %d execs", q, e)
	}

	// The same vouching statement from a trusted snapshot is replayed.
	trusted := map[string]any{"format": "sqlflight-hotset", "version": 1, "statements": []any{
		stmt("/* sqlflight: ttl=1h pure=bump */ SELECT bump($1)", one)}}
	data, _ = json.Marshal(trusted)
	rep, err = s.Prewarm(context.Background(), PrewarmOptions{DB: db, From: bytes.NewReader(data), TrustFile: true, TrustAnnotations: true})
	if err != nil || rep.Replayed != 1 {
		t.Fatalf("trusted: %+v %v", rep, err)
	}

	for _, bad := range []string{`not json`, `{"format":"other","version":1}`, `{"format":"sqlflight-hotset","version":2}`} {
		if _, err := s.Prewarm(context.Background(), PrewarmOptions{DB: db, From: strings.NewReader(bad)}); !errors.Is(err, ErrBadHotSet) {
			t.Errorf("%s: %v, want ErrBadHotSet", bad, err)
		}
	}
	huge := io0{n: hotset.MaxBytes + 10}
	if _, err := s.Prewarm(context.Background(), PrewarmOptions{DB: db, From: &huge}); !errors.Is(err, ErrBadHotSet) || huge.read > hotset.MaxBytes+1 {
		t.Errorf("huge snapshot: %v after %d bytes", err, huge.read)
	}
	other, _ := openWarm(t, &fakeDriver{})
	if _, err := s.Prewarm(context.Background(), PrewarmOptions{DB: other}); err == nil {
		t.Error("Prewarm on another Shield's DB succeeded")
	}
}

// io0 reads n spaces.
type io0 struct{ n, read int }

func (r *io0) Read(p []byte) (int, error) {
	if r.read >= r.n {
		return 0, errors.New("EOF")
	}
	k := min(len(p), r.n-r.read)
	for i := range k {
		p[i] = ' '
	}
	r.read += k
	return k, nil
}

func TestPrewarmConcurrencyCapAndJitter(t *testing.T) {
	var running, peak atomic.Int64
	release := make(chan struct{})
	var once sync.Once
	d := &fakeDriver{onQuery: func(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
		n := enterCounted(&running, &peak)
		defer running.Add(-1)
		if n == 3 {
			once.Do(func() { close(release) }) // the cap is reached: let everything go
		}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return &fakeRows{cols: []string{"n"}, rows: [][]driver.Value{{int64(1)}}}, nil
	}}
	db, s := openWarm(t, d, Options{MaxInflight: 64, MaxRefreshes: 32})
	const q = "/* sqlflight: soft=10m hard=20m */ SELECT n FROM products WHERE id = $1"
	hs := hotset.Set{Format: hotset.Format, Version: hotset.Version}
	for st := range 4 {
		text := q + strings.Repeat(" ", st) // four statements …
		hst := hotset.Statement{Text: text}
		for k := range 8 { // … of eight keys
			hst.Keys = append(hst.Keys, hotset.KeyArgs{Args: hotset.EncodeArgs([]driver.Value{int64(st*100 + k)})})
		}
		hs.Statements = append(hs.Statements, hst)
	}
	data, _ := json.Marshal(hs)
	rep, err := s.Prewarm(context.Background(), PrewarmOptions{DB: db, From: bytes.NewReader(data), TrustFile: true, Concurrency: 3})
	if err != nil || rep.Replayed != 32 {
		t.Fatalf("%+v %v", rep, err)
	}
	if p := peak.Load(); p > 3 {
		t.Fatalf("%d origin queries at once, cap 3", p)
	}
	// Each warmed key has its own jitter draw: their soft deadlines spread
	// over ±10% of 10m instead of falling together.
	var sc *scope
	dc, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := dc.Raw(func(d any) error { sc = d.(connBase).virtual().sc; return nil }); err != nil {
		t.Fatal(err)
	}
	dc.Close()
	softs := map[time.Time]bool{}
	for k := range 8 {
		key, _ := key.Append(nil, sc.id, partition{}, "SELECT n FROM products WHERE id = $1", parent.Named([]driver.Value{int64(k)}))
		e := s.store.Get(string(key))
		if e == nil {
			t.Fatalf("key %d not cached", k)
		}
		if d := e.soft.Sub(e.filled); d < 9*time.Minute || d > 11*time.Minute {
			t.Fatalf("soft %v outside 10m ± 10%%", d)
		}
		softs[e.soft] = true
	}
	if len(softs) < 7 {
		t.Fatalf("the warmed keys share their deadlines: %d distinct of 8", len(softs))
	}
}

func TestPrewarmFromStatistics(t *testing.T) {
	d := &fakeDriver{}
	db, s := openWarm(t, d)
	const q = "/* sqlflight: ttl=1m */ SELECT n FROM products WHERE id = $1"
	keys := [][]any{{int64(1)}, {int64(2)}, {strings.Repeat("x", 2000)}} // the last: over 1 KiB
	queryAll(t, db, q, keys, 2)
	sts := s.Statements()
	if len(sts) != 1 || len(sts[0].HotKeys) != 3 {
		t.Fatalf("statements %+v", sts)
	}
	warm := 0
	for _, k := range sts[0].HotKeys {
		if _, ok := stats.WarmArgs(k); ok {
			warm++
		}
	}
	if warm != 2 {
		t.Fatalf("%d keys kept for pre-warming, want 2 (one exceeds 1 KiB)", warm)
	}
	s.InvalidateAll()
	before := d.queries.Load()
	rep, err := s.Prewarm(context.Background(), PrewarmOptions{DB: db})
	if err != nil || rep.Replayed != 2 || d.queries.Load()-before != 2 {
		t.Fatalf("%+v %v, %d queries", rep, err, d.queries.Load()-before)
	}
}

// TestPrewarmShapeTexts: a statement whose values are inlined is one
// statement (its shape) in the statistics; pre-warming from them replays
// each hot key with its own text, so that the keys warmed are the keys the
// application reads.
func TestPrewarmShapeTexts(t *testing.T) {
	d := &fakeDriver{}
	db, s := openWarm(t, d)
	text := func(id int) string {
		return fmt.Sprintf("/* sqlflight: ttl=1m */ SELECT n FROM products WHERE (id = %d)", id)
	}
	for range 2 { // a key's arguments (none) are kept from its second call
		for id := range 3 {
			readAll(t, db, text(id))
		}
	}
	sts := s.Statements()
	if len(sts) != 1 || sts[0].SQL != "SELECT n FROM products WHERE (id = $1)" || sts[0].Calls != 6 || len(sts[0].HotKeys) != 3 {
		t.Fatalf("statements %+v", sts)
	}
	if x := s.Explain(context.Background(), text(7)); x.Fingerprint != sts[0].Fingerprint || x.Statement == nil || x.Shape != sts[0].SQL {
		t.Fatalf("explain of another value: shape %q fingerprint %s, statement %+v", x.Shape, x.Fingerprint, x.Statement)
	}
	s.InvalidateAll()
	rep, err := s.Prewarm(context.Background(), PrewarmOptions{DB: db})
	if err != nil || rep.Replayed != 3 || rep.Statements != 3 {
		t.Fatalf("%+v %v", rep, err)
	}
	before := d.queries.Load()
	for id := range 3 {
		readAll(t, db, text(id))
	}
	if got := d.queries.Load() - before; got != 0 {
		t.Fatalf("%d origin queries after pre-warming, want 0 (a key was warmed with another text)", got)
	}
}

func TestHotSetLeavesOutLongTexts(t *testing.T) {
	db, s := openWarm(t, &fakeDriver{})
	q := "/* sqlflight: ttl=1m */ SELECT n FROM products WHERE id = $1 -- " + strings.Repeat("x", maxWarmText)
	queryAll(t, db, q, [][]any{{int64(1)}}, 2)
	if hs := hotset.Build(&s.statements, time.Now(), 32, 8); len(hs.Statements) != 0 {
		t.Fatalf("a text over 16 KiB was kept: %d statements", len(hs.Statements))
	}
}

// openWarm is openFake for a Shield that caches: it is closed at the end.
func openWarm(t *testing.T, d *fakeDriver, opts ...Option) (*sql.DB, *Shield) {
	db, s := openFake(t, d, opts...)
	t.Cleanup(func() { _ = s.Close() })
	return db, s
}

// TestPrewarmFromFleet: an instance publishes the fleet's hot set; a new
// one fills its L1 from the tier's values without querying its database,
// and then serves the keys from L1. A forged hot set is ignored.
func TestPrewarmFromFleet(t *testing.T) {
	tier := newMemTier(newFakeClock())
	f := fleetOf(t, 2, tier, Options{})
	for k := range 3 {
		readShared(t, f[0], ttlQuery, k)
		readN(t, f[0].db, ttlQuery, k)
	}
	if err := f[0].s.PublishHotSet(context.Background()); err != nil {
		t.Fatal(err)
	}
	in := f[1]
	rep, err := in.s.Prewarm(context.Background(), PrewarmOptions{DB: in.db, FromFleet: true})
	if err != nil || rep.Loaded != 3 || rep.Replayed != 0 {
		t.Fatalf("%+v %v", rep, err)
	}
	if q := in.c.d.queries.Load(); q != 0 {
		t.Fatalf("pre-warming from the fleet queried the database %d times", q)
	}
	calls := tier.calls.Load()
	for k := range 3 {
		readN(t, in.db, ttlQuery, k)
	}
	if in.c.d.queries.Load() != 0 || tier.calls.Load() != calls || in.s.Stats().FreshHits != 3 {
		t.Fatalf("after pre-warming: %d queries, %d tier calls, %+v", in.c.d.queries.Load(), tier.calls.Load()-calls, in.s.Stats())
	}

	// A hot set written by someone without the secret is not read.
	tier.mu.Lock()
	for k, v := range tier.vals {
		if strings.HasSuffix(k, hotset.FleetKey) {
			v.data = append([]byte(nil), v.data...)
			v.data[len(v.data)-2] ^= 1
			tier.vals[k] = v
		}
	}
	tier.mu.Unlock()
	fresh := fleetOf(t, 1, tier, Options{})[0]
	rep, err = fresh.s.Prewarm(context.Background(), PrewarmOptions{DB: fresh.db, FromFleet: true})
	if err != nil || rep.Loaded != 0 || fresh.s.Stats().SharedForged != 1 {
		t.Fatalf("forged hot set: %+v %v forged %d", rep, err, fresh.s.Stats().SharedForged)
	}
	// Without a tier, FromFleet is an error.
	db, s := openWarm(t, &fakeDriver{})
	if _, err := s.Prewarm(context.Background(), PrewarmOptions{DB: db, FromFleet: true}); !errors.Is(err, ErrNoSharedTier) {
		t.Fatal(err)
	}
}
