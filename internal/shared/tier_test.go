package shared_test

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight/internal/epoch"
	"github.com/sqlflight/sqlflight/internal/fakeclock"
	"github.com/sqlflight/sqlflight/internal/resultset"
	"github.com/sqlflight/sqlflight/internal/seal"
	"github.com/sqlflight/sqlflight/internal/shared"
	"github.com/sqlflight/sqlflight/internal/wire"
)

// The shapes of the root package's tier types (pins: bounds_test.go).
type (
	msg struct {
		Tables    []string
		Rows      []pins
		All       bool
		Seq       uint64
		Source    string
		Tag       []byte
		Resync    bool
		Malformed bool
	}
	val struct {
		Data    []byte
		Version uint64
		Epochs  []uint64
		Seq     uint64
	}
	lse struct {
		Held    bool
		Token   string
		Version uint64
	}
	tier = shared.Tier[pins, msg, val, lse]
)

// memBackend is a tier in memory: one namespace, values by key, the
// epochs of what was published, leases held by token.
type memBackend struct {
	mu        sync.Mutex
	seq       uint64
	vals      map[string]val
	epochs    map[string]uint64
	leases    map[string]string
	published []msg
	subs      []func(msg)
	released  int
}

func newMemBackend() *memBackend {
	return &memBackend{vals: map[string]val{}, epochs: map[string]uint64{}, leases: map[string]string{}}
}

func (m *memBackend) Fetch(_ context.Context, _, key string, tables []string) (val, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v := m.vals[key]
	v.Epochs = make([]uint64, len(tables)+1)
	for i, t := range tables {
		v.Epochs[i] = m.epochs[t]
	}
	v.Epochs[len(tables)] = m.epochs["*"]
	v.Seq = m.seq
	return v, nil
}

func (m *memBackend) Store(_ context.Context, _, key string, data []byte, version uint64, _ time.Duration) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.vals[key]; ok && old.Version >= version {
		return false, nil
	}
	m.vals[key] = val{Data: data, Version: version}
	return true, nil
}

func (m *memBackend) Acquire(_ context.Context, _, key string, _ time.Duration) (lse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.seq++
	if m.leases[key] != "" {
		return lse{Version: m.seq}, nil
	}
	m.leases[key] = "t" + key
	return lse{Held: true, Token: "t" + key, Version: m.seq}, nil
}

func (m *memBackend) Release(_ context.Context, _, key string, l lse) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.leases[key] == l.Token {
		delete(m.leases, key)
		m.released++
	}
	return nil
}

func (m *memBackend) Renew(context.Context, string, string, lse, time.Duration) (bool, error) {
	return true, nil
}

func (m *memBackend) NextSeq(context.Context, string) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.seq++
	return m.seq, nil
}

func (m *memBackend) Publish(_ context.Context, _ string, inv msg) error {
	m.mu.Lock()
	for _, t := range inv.Tables {
		m.epochs[t] = max(m.epochs[t], inv.Seq)
	}
	if inv.All {
		m.epochs["*"] = max(m.epochs["*"], inv.Seq)
	}
	m.published = append(m.published, inv)
	subs := slices.Clone(m.subs)
	m.mu.Unlock()
	for _, fn := range subs {
		fn(inv)
	}
	return nil
}

func (m *memBackend) Subscribe(_ string, fn func(msg)) (func(), error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.subs = append(m.subs, fn)
	return func() {}, nil
}

// newTier returns a subscribed Tier on b, sealed with testSecret, and its
// epochs.
func newTier(t *testing.T, b *memBackend) (*tier, *epoch.Epochs) {
	t.Helper()
	var ep epoch.Epochs
	ts := shared.NewTier[pins, msg, val, lse](b, shared.TierConfig{NS: "ns:", Timeout: time.Second,
		LeaseTTL: 5 * time.Second, Clock: fakeclock.New(), Ring: shared.NewRing(testSecret, "", false),
		Epochs: &ep, Down: func(error, time.Duration) {}, Up: func() {}})
	if err := ts.Subscribe(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ts.Close)
	return ts, &ep
}

// testEntry is an entry of one row, filled at now.
func testEntry(now time.Time) shared.Entry {
	res := &resultset.Result{Sets: []resultset.Set{{Names: []string{"id"}, Cols: make([]resultset.Column, 1),
		Vals: []driver.Value{int64(1)}, N: 1}}}
	return shared.Entry{Res: res, Filled: now, Soft: now.Add(time.Second), Hard: now.Add(time.Minute), Last: now.Add(2 * time.Minute)}
}

var testLimits = wire.Limits{MaxBytes: 1 << 20, MaxRows: 1 << 10, MaxSets: 16, MaxZoneLoads: 4}

func noBad(t *testing.T) func(error) {
	return func(err error) { t.Errorf("a value could not be opened: %v", err) }
}

// TestTierStoreThenFetch: a value stored under its lease's version is
// fetched back; once a write to its table is published, it is not.
func TestTierStoreThenFetch(t *testing.T) {
	b := newMemBackend()
	ts, _ := newTier(t, b)
	ctx := context.Background()
	tables := []string{"items"}
	var version uint64
	var held lse
	if ok, err := ts.Acquire(ctx, "k", time.Second, &version, &held); !ok || err != nil || !held.Held || version == 0 {
		t.Fatalf("Acquire = %v, %v; lease %+v, version %d", ok, err, held, version)
	}
	ts.Store("k", testEntry(fakeclock.Start), version, time.Minute)
	ts.Release("k", &held)
	if held.Held || b.released != 1 || ts.Stats.Writes.Load() != 1 || ts.Stats.Leases.Load() != 1 {
		t.Fatalf("lease %+v, %d released, %d writes, %d leases", held, b.released, ts.Stats.Writes.Load(), ts.Stats.Leases.Load())
	}
	e, v, err := ts.Fetch(ctx, "k", tables, nil, testLimits, noBad(t))
	if err != nil || v != version || e.Res == nil || !e.Filled.Equal(fakeclock.Start) {
		t.Fatalf("Fetch = %+v, %d, %v", e, v, err)
	}
	// An older version does not overwrite it.
	ts.Store("k", testEntry(fakeclock.Start), version-1, time.Minute)
	if ts.Stats.Superseded.Load() != 1 {
		t.Fatalf("%d superseded, want 1", ts.Stats.Superseded.Load())
	}
	ts.BeginWrite(tables, true, nil)
	if ts.ReadKey("fleet", "key", tables) != "" {
		t.Fatal("a read of a table whose write is not yet published has a tier key")
	}
	ts.PublishWrite(tables, true, nil)
	if ts.ReadKey("fleet", "key", tables) != shared.Key("fleet", "key") {
		t.Fatal("a published write still keeps the tier off its table")
	}
	if _, v, err := ts.Fetch(ctx, "k", tables, nil, testLimits, noBad(t)); v != 0 || err != nil {
		t.Fatalf("a value older than a published write was fetched: %d, %v", v, err)
	}
}

// TestTierFetchRefusesForgedValues: a value sealed under another secret is
// counted as forged and told to bad, never returned.
func TestTierFetchRefusesForgedValues(t *testing.T) {
	b := newMemBackend()
	ts, _ := newTier(t, b)
	body, err := shared.Encode(testEntry(fakeclock.Start))
	if err != nil {
		t.Fatal(err)
	}
	b.vals["k"] = val{Data: shared.NewRing(testSecret+"-other", "", false).SealValue(body, "ns:", "k", 1), Version: 1}
	b.seq = 1
	var bad error
	if _, v, err := ts.Fetch(context.Background(), "k", nil, nil, testLimits, func(err error) { bad = err }); v != 0 || err != nil {
		t.Fatalf("Fetch = %d, %v", v, err)
	}
	if !errors.Is(bad, seal.ErrForged) || ts.Stats.Forged.Load() != 1 || ts.Stats.DecodeErrors.Load() != 1 {
		t.Fatalf("bad %v, %d forged, %d decode errors", bad, ts.Stats.Forged.Load(), ts.Stats.DecodeErrors.Load())
	}
}

// TestTierHear: a write another instance published moves the epochs and
// the floor; a forged or malformed message, or one of this instance's
// own, does not; a resync moves every epoch.
func TestTierHear(t *testing.T) {
	b := newMemBackend()
	ts, ep := newTier(t, b)
	ring := shared.NewRing(testSecret, "", false)
	good := msg{Tables: []string{"items"}, Seq: 7, Source: "other"}
	good.Tag = ring.MessageTag("ns:", good.Seq, false, good.Source, good.Tables)
	forged := good
	forged.Tag = shared.NewRing(testSecret+"-other", "", false).MessageTag("ns:", good.Seq, false, good.Source, good.Tables)
	for _, m := range []msg{forged, {Malformed: true}, {Tables: []string{"items"}, Seq: 8, Source: "other"}} {
		ts.Hear(m)
	}
	if ts.Stats.Rejected.Load() != 3 || ep.Now() != 0 || !ts.Floor.Admits(1, []string{"items"}) {
		t.Fatalf("%d rejected, epochs at %d", ts.Stats.Rejected.Load(), ep.Now())
	}
	ts.Hear(good)
	if ts.Stats.Received.Load() != 1 || ep.TableEpoch(epoch.TableKey("items")) == 0 ||
		ts.Floor.Admits(good.Seq, []string{"items"}) || !ts.Floor.Admits(good.Seq+1, []string{"items"}) {
		t.Fatalf("%d received, epoch %d", ts.Stats.Received.Load(), ep.TableEpoch(epoch.TableKey("items")))
	}
	// This instance's own write, heard back, moves nothing more.
	now := ep.Now()
	ts.PublishWrite([]string{"other"}, true, nil)
	if len(b.published) != 1 || ep.Now() != now || ts.Stats.Received.Load() != 1 || ts.Published() != 1 {
		t.Fatalf("own write: %d published, epochs %d (was %d), %d received", len(b.published), ep.Now(), now, ts.Stats.Received.Load())
	}
	ts.Hear(msg{Resync: true})
	if ts.Stats.Resyncs.Load() != 1 || ep.AllEpoch() == 0 {
		t.Fatalf("resync: %d, all epoch %d", ts.Stats.Resyncs.Load(), ep.AllEpoch())
	}
}

// TestTierLead: a leader that finds nothing takes the lease and queries;
// one that finds a value is answered with it; a loser waits for the
// holder's value.
func TestTierLead(t *testing.T) {
	b := newMemBackend()
	ts, _ := newTier(t, b)
	ctx := context.Background()
	none := func(context.Context) (bool, error) { return false, nil }
	var version uint64
	var held lse
	if ts.Lead(ctx, "k", time.Second, 0, &version, &held, none) || !held.Held || version == 0 {
		t.Fatalf("a leader that found nothing: lease %+v, version %d", held, version)
	}
	if ts.Stats.Misses.Load() != 1 {
		t.Fatalf("%d misses, want 1", ts.Stats.Misses.Load())
	}
	found := func(context.Context) (bool, error) { return true, nil }
	var v2 uint64
	var h2 lse
	if !ts.Lead(ctx, "k2", time.Second, 0, &v2, &h2, found) || h2.Held {
		t.Fatalf("a leader that found a value: lease %+v", h2)
	}
	// A loser looks again until the holder's value is there.
	looks := 0
	later := func(context.Context) (bool, error) { looks++; return looks == 3, nil }
	var v3 uint64
	var h3 lse
	if !ts.Lead(ctx, "k", time.Second, 0, &v3, &h3, later) || h3.Held || looks != 3 || ts.Stats.LeaseWaits.Load() != 1 {
		t.Fatalf("a loser: %d looks, lease %+v, %d lease waits", looks, h3, ts.Stats.LeaseWaits.Load())
	}
	// One whose wait runs out queries, the lease not its.
	var v4 uint64
	var h4 lse
	if ts.Lead(ctx, "k", time.Second, 10*time.Millisecond, &v4, &h4, none) || h4.Held || ts.Stats.LeaseExpired.Load() != 1 {
		t.Fatalf("a loser out of time: lease %+v, %d expired", h4, ts.Stats.LeaseExpired.Load())
	}
	ts.Release("k", &held)
	var nilTier *tier
	nilTier.Release("k", &h4) // a nil Tier holds no lease
}

// TestLeaseFor: a read's lease lasts its origin query's timeout, at most
// the tier's LeaseTTL.
func TestLeaseFor(t *testing.T) {
	ts, _ := newTier(t, newMemBackend())
	for _, c := range []struct{ timeout, def, want time.Duration }{
		{0, time.Second, time.Second},
		{2 * time.Second, time.Second, 2 * time.Second},
		{0, time.Minute, 5 * time.Second},
		{time.Minute, time.Second, 5 * time.Second},
	} {
		if got := ts.LeaseFor(c.timeout, c.def); got != c.want {
			t.Errorf("LeaseFor(%v, %v) = %v, want %v", c.timeout, c.def, got, c.want)
		}
	}
}

// TestWriteKeys: a write marks its tables and the tables of its row
// writes; one to tables not known, every table.
func TestWriteKeys(t *testing.T) {
	rows := []epoch.RowWrite{{Table: "b"}}
	if got := shared.WriteKeys([]string{"a"}, true, rows); !slices.Equal(got, shared.EpochKeys([]string{"a", "b"}, true)) {
		t.Errorf("WriteKeys = %q", got)
	}
	if got := shared.WriteKeys([]string{"a"}, false, rows); got != nil {
		t.Errorf("WriteKeys of tables not known = %q, want nil", got)
	}
}

// TestSecretsRing: a tier needs a secret of Min bytes, or the insecure
// mode (which cannot encrypt); every refusal wraps None and holds no
// secret.
func TestSecretsRing(t *testing.T) {
	none := errors.New("no secret")
	long := strings.Repeat("s", 16)
	for _, c := range []struct {
		s     shared.Secrets
		ok    bool
		trust bool
	}{
		{shared.Secrets{}, false, false},
		{shared.Secrets{Insecure: true}, true, true},
		{shared.Secrets{Insecure: true, Encrypt: true}, false, false},
		{shared.Secrets{Secret: "tiny"}, false, false},
		{shared.Secrets{Secret: long, Previous: "tiny"}, false, false},
		{shared.Secrets{Secret: long, Previous: long + "x", Encrypt: true}, true, false},
	} {
		c.s.Min, c.s.None = 16, none
		ring, trust, err := c.s.Ring()
		if c.ok != (err == nil) || trust != c.trust || (err == nil) != (ring != nil) {
			t.Errorf("%+v: ring %v, trust %v, err %v", c.s, ring != nil, trust, err)
		}
		if err != nil && (!errors.Is(err, none) || strings.Contains(err.Error(), "tiny") || strings.Contains(err.Error(), long)) {
			t.Errorf("%+v: %v", c.s, err)
		}
		if err == nil && !c.trust && (!ring.Encrypt || ring.Previous == nil) {
			t.Errorf("%+v: ring %+v", c.s, ring)
		}
	}
}

// closer is a tier that counts its closes.
type closer struct{ closed *int }

func (c closer) Close() error { *c.closed++; return nil }

// TestOpeners: a target is opened once, shared by its users and closed
// with the last; a scheme is registered once; an unknown scheme names the
// import.
func TestOpeners(t *testing.T) {
	var o shared.Openers[io.Closer]
	if _, _, err := o.Open("memtest://a"); err == nil || !strings.Contains(err.Error(), "redistier") {
		t.Fatalf("no scheme registered: %v", err)
	}
	opened, closed := 0, 0
	o.Register("memtest", func(string) (io.Closer, error) { opened++; return closer{&closed}, nil })
	a, relA, errA := o.Open("memtest://a")
	b, relB, errB := o.Open("memtest://a")
	if errA != nil || errB != nil || a != b || opened != 1 {
		t.Fatalf("opened %d: %v %v", opened, errA, errB)
	}
	relA()
	relA() // once
	if closed != 0 {
		t.Fatal("closed with a user left")
	}
	relB()
	if closed != 1 {
		t.Fatalf("closed %d times, want 1", closed)
	}
	if _, _, err := o.Open("not a url"); err == nil {
		t.Fatal("a target that is not a URL opened")
	}
	defer func() {
		if recover() == nil {
			t.Error("a scheme registered twice")
		}
	}()
	o.Register("memtest", nil)
}
