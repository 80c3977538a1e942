package sqlflight

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight/internal/seal"
	"github.com/sqlflight/sqlflight/internal/shared"
)

// TestSharedTierNeedsASecret: a Shield given a tier without a secret
// refuses every connection with ErrNoSharedSecret (it never runs without
// its tier, nor with a tier it cannot authenticate); the error never holds
// a secret. InsecureTrustSharedTier lets it run.
func TestSharedTierNeedsASecret(t *testing.T) {
	for _, c := range []struct {
		name string
		o    Options
		ok   bool
	}{
		{"none", Options{}, false},
		{"short", Options{SharedSecret: "hunter2-short"}, false},
		{"short previous", Options{SharedSecret: testSecret, SharedPreviousSecret: "hunter2-short"}, false},
		{"encrypt without secret", Options{InsecureTrustSharedTier: true, SharedEncrypt: true}, false},
		{"secret", Options{SharedSecret: testSecret}, true},
		{"secret and previous", Options{SharedSecret: testSecret, SharedPreviousSecret: testSecretDSN, SharedEncrypt: true}, true},
		{"insecure", Options{InsecureTrustSharedTier: true}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			cnt := newCounting()
			db, s := openFake(t, cnt.d, c.o, Shared(newMemTier(newFakeClock())))
			t.Cleanup(func() { _ = s.Close() })
			err := db.Ping()
			if c.ok {
				if err != nil || s.tier == nil {
					t.Fatalf("Ping = %v, tier attached %v", err, s.tier != nil)
				}
				return
			}
			if !errors.Is(err, ErrNoSharedSecret) || s.tier != nil {
				t.Fatalf("Ping = %v, tier attached %v; want ErrNoSharedSecret", err, s.tier != nil)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Fatalf("the error shows the secret: %v", err)
			}
			var n int64
			if err := db.QueryRow(ttlQuery, 1).Scan(&n); !errors.Is(err, ErrNoSharedSecret) || cnt.d.queries.Load() != 0 {
				t.Fatalf("a query ran without the secret: %v", err)
			}
		})
	}
	// Through the DSN: the open fails, and the tier opened for it is given back.
	opened = nil
	d := New().Wrap(&fakeDriver{})
	if _, err := d.Open("db=9 sqlflight.shared=memtest://nosecret"); !errors.Is(err, ErrNoSharedSecret) {
		t.Fatalf("DSN without a secret: %v", err)
	}
	if len(opened) != 1 || opened[0].closed.Load() != 1 {
		t.Fatalf("the DSN's tier was not given back: %d opened", len(opened))
	}
	c, err := d.Open("db=9 sqlflight.shared=memtest://secret sqlflight.shared_secret=" + testSecretDSN +
		" sqlflight.shared_encrypt=true sqlflight.shared_previous_secret=" + testSecretDSN + "-old")
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	e, _ := d.(*wrappedDriver).scopeFor("db=9 sqlflight.shared=memtest://secret sqlflight.shared_secret="+testSecretDSN+
		" sqlflight.shared_encrypt=true sqlflight.shared_previous_secret="+testSecretDSN+"-old", d)
	t.Cleanup(func() { _ = e.s.shield.Close() })
	if ts := e.s.tier; ts == nil || !ts.Ring.Encrypt || ts.Ring.Previous == nil || ts.TrustMessages {
		t.Fatal("the DSN's secret, previous secret and encryption were not applied")
	}
	if _, err := d.Open("db=10 sqlflight.shared=memtest://insecure sqlflight.insecure_trust_shared_tier=true"); err != nil {
		t.Fatalf("insecure: %v", err)
	}
}

// TestValuesOfAnotherSecretAreMisses: an instance whose secret differs
// (or a writer without the fleet's secret) never has its values served;
// an instance moving to a new secret still reads values of its previous
// one, and writes under the new one only.
func TestValuesOfAnotherSecretAreMisses(t *testing.T) {
	tier := newMemTier(newFakeClock())
	old := fleetOf(t, 1, tier, Options{SharedSecret: testSecret})
	other := fleetOf(t, 1, tier, Options{SharedSecret: testSecretDSN})
	rotating := fleetOf(t, 1, tier, Options{SharedSecret: testSecretDSN + "-new", SharedPreviousSecret: testSecret, SharedEncrypt: true})
	readShared(t, old[0], ttlQuery, 1)
	if n := readN(t, rotating[0].db, ttlQuery, 1); n != 1 || rotating[0].c.d.queries.Load() != 0 {
		t.Fatalf("the previous secret's value was not read: %d queries", rotating[0].c.d.queries.Load())
	}
	if n := readShared(t, other[0], ttlQuery, 1); n != 1 || other[0].c.d.queries.Load() != 1 {
		t.Fatalf("another secret's value served: %d queries", other[0].c.d.queries.Load())
	}
	// (Counted twice: the lease holder looks again before querying.)
	if st := other[0].s.Stats(); st.SharedForged == 0 || st.SharedDecodeErrors != st.SharedForged || st.SharedHits != 0 {
		t.Fatalf("%+v", st)
	}
	// The rotating instance writes under its new secret (encrypted): the
	// old instance cannot read that.
	tier.mu.Lock()
	clear(tier.vals)
	tier.mu.Unlock()
	readShared(t, rotating[0], ttlQuery, 2)
	tier.mu.Lock()
	for _, v := range tier.vals {
		if v.data[0] != 3 {
			t.Errorf("SharedEncrypt wrote format %d", v.data[0])
		}
	}
	tier.mu.Unlock()
	if readN(t, old[0].db, ttlQuery, 2); old[0].c.d.queries.Load() != 2 || old[0].s.Stats().SharedForged == 0 {
		t.Fatalf("a value of the new secret was read under the old one: %+v", old[0].s.Stats())
	}
}

// TestForgedMessagesAreIgnored: a message the bus could not read, or whose
// MAC fails (another secret, a changed field), is counted and changes
// nothing: no L1 entry is dropped, no epoch moves.
func TestForgedMessagesAreIgnored(t *testing.T) {
	tier := newMemTier(newFakeClock())
	f := fleetOf(t, 1, tier, Options{})
	s := f[0].s
	readShared(t, f[0], ttlQuery, 1)
	ring := s.tier.Ring
	good := Invalidation{Tables: []string{"items"}, Seq: 1 << 40, Source: "other"}
	good.Tag = ring.MessageTag(s.tier.NS, good.Seq, false, good.Source, good.Tables)
	otherRing := &seal.Ring{Current: seal.Derive([]byte(testSecretDSN))}
	forged := []Invalidation{
		{Malformed: true},
		{Tables: []string{"items"}, Seq: 5, Source: "other"},
		{Tables: []string{"items"}, Seq: 5, Source: "other", Tag: otherRing.MessageTag(s.tier.NS, 5, false, "other", []string{"items"})},
		{Tables: []string{"items"}, Seq: good.Seq + 1, Source: "other", Tag: good.Tag},
		{Tables: []string{"items", "x"}, Seq: good.Seq, Source: "other", Tag: good.Tag},
		{All: true, Seq: good.Seq, Source: "other", Tag: good.Tag},
		{Tables: []string{"items"}, Seq: good.Seq, Source: "another", Tag: good.Tag},
	}
	before := s.epochs.Now()
	for _, inv := range forged {
		s.tier.Hear(inv)
	}
	if n := s.epochs.Now(); n != before {
		t.Fatalf("epochs moved from %d to %d", before, n)
	}
	if readN(t, f[0].db, ttlQuery, 1); f[0].c.d.queries.Load() != 1 || s.Stats().FreshHits != 1 {
		t.Fatalf("the L1 entry was dropped: %+v", s.Stats())
	}
	if st := s.Stats(); st.InvalidationsRejected != uint64(len(forged)) || st.InvalidationsHeard != 0 || st.InvalidationResyncs != 0 {
		t.Fatalf("%+v", st)
	}
	// The genuine one is applied, and raises the floor: nothing of an
	// older version is taken from the tier again.
	s.tier.Hear(good)
	if st := s.Stats(); st.InvalidationsHeard != 1 {
		t.Fatalf("%+v", st)
	}
	if s.tier.Floor.Admits(good.Seq, []string{"items"}) || !s.tier.Floor.Admits(good.Seq+1, []string{"items"}) {
		t.Fatal("the message did not set the floor of its table")
	}
}

// TestEpochsAreBounded: writes (or messages) naming ever new tables keep at
// most maxEpochTables epochs; past it they fall back to "all", and no epoch
// moves back.
func TestEpochsAreBounded(t *testing.T) {
	var e epochs
	first := e.Bump([]string{"t0"}, true)
	for i := 1; i <= maxEpochTables+10; i++ {
		n := e.Bump([]string{fmt.Sprint("t", i)}, true)
		if e.UnchangedSince(n-1, []string{fmt.Sprint("t", i)}, true) {
			t.Fatalf("write %d not seen", i)
		}
	}
	size := e.Len()
	if size > maxEpochTables {
		t.Fatalf("%d epochs kept", size)
	}
	if e.UnchangedSince(first, []string{"t0"}, true) {
		t.Fatal("the write to t0 was forgotten")
	}

	// Messages naming too many tables, or too long a name, count as writes
	// to every table (the floor's bounds: internal/shared).
	tier := newMemTier(newFakeClock())
	s := fleetOf(t, 1, tier, Options{})[0].s
	many := make([]string, shared.MaxMessageTables+1)
	for i := range many {
		many[i] = fmt.Sprint("m", i)
	}
	for _, tables := range [][]string{many, {strings.Repeat("x", shared.MaxTableName+1)}} {
		inv := Invalidation{Tables: tables, Seq: 1 << 41, Source: "other"}
		inv.Tag = s.tier.Ring.MessageTag(s.tier.NS, inv.Seq, false, inv.Source, tables)
		before := s.epochs.AllEpoch()
		s.tier.Hear(inv)
		if s.epochs.AllEpoch() == before || s.epochs.Len() != 0 {
			t.Fatalf("%d tables of up to %d bytes were kept one by one", len(tables), len(tables[0]))
		}
	}
}

// TestOwnWritePublishesWithItsTag: what a write publishes carries a tag
// over its sequence number, which other instances check, and too many
// tables are published as "all".
func TestOwnWritePublishesWithItsTag(t *testing.T) {
	tier := newMemTier(newFakeClock())
	f := fleetOf(t, 2, tier, Options{})
	var got []Invalidation
	stop, _ := tier.Subscribe(f[0].s.tier.NS, func(inv Invalidation) { got = append(got, inv) })
	defer stop()
	f[0].s.Invalidate("items")
	many := make([]string, shared.MaxMessageTables+1)
	for i := range many {
		many[i] = fmt.Sprint("m", i)
	}
	f[0].s.Invalidate(many...)
	if len(got) != 2 || got[0].Seq == 0 || len(got[0].Tag) != seal.TagLen || !got[1].All || got[1].Tables != nil {
		t.Fatalf("%+v", got)
	}
	if !f[1].s.tier.Ring.CheckMessage(got[0].Tag, f[0].s.tier.NS, got[0].Seq, false, got[0].Source, []string{"items"}) {
		t.Fatal("the tag does not cover the message")
	}
	if st := f[1].s.Stats(); st.InvalidationsHeard != 2 || st.InvalidationsRejected != 0 {
		t.Fatalf("%+v", st)
	}
}

// TestVersionAboveTheSequenceIsRefused: a value whose version is above the
// fleet sequence the tier reports is not served, even in the insecure mode
// (where anybody could make its MAC).
func TestVersionAboveTheSequenceIsRefused(t *testing.T) {
	tier := newMemTier(newFakeClock())
	f := fleetOf(t, 2, tier, Options{InsecureTrustSharedTier: true})
	readShared(t, f[0], ttlQuery, 1)
	tier.mu.Lock()
	for k, v := range tier.vals {
		// Re-sealed at the new version, as anybody can without a secret.
		body, err := f[0].s.tier.Ring.OpenValue(bytes.Clone(v.data), f[0].s.tier.NS, strings.TrimPrefix(k, f[0].s.tier.NS), v.version)
		if err != nil {
			t.Fatal(err)
		}
		v.version = 1 << 62
		v.data = f[0].s.tier.Ring.SealValue(append(make([]byte, seal.Prefix), body...), f[0].s.tier.NS,
			strings.TrimPrefix(k, f[0].s.tier.NS), v.version)
		tier.vals[k] = v
	}
	tier.mu.Unlock()
	if readN(t, f[1].db, ttlQuery, 1); f[1].c.d.queries.Load() != 1 || f[1].s.Stats().SharedForged == 0 {
		t.Fatalf("a version above the sequence was served: %+v", f[1].s.Stats())
	}
}

// TestDeadlinesAreTheReaders: a value filled under a long TTL by another
// instance is judged by the reader's own, shorter policy.
func TestDeadlinesAreTheReaders(t *testing.T) {
	tier := newMemTier(newFakeClock())
	f := fleetOf(t, 2, tier, Options{})
	long := "/* sqlflight: soft=1h hard=2h jitter=0% */ SELECT n FROM items WHERE id = $1"
	short := "/* sqlflight: soft=1s hard=2s jitter=0% */ SELECT n FROM items WHERE id = $1"
	readShared(t, f[0], long, 1)
	tier.clock.Add(5 * time.Second)
	if readN(t, f[1].db, short, 1); f[1].c.d.queries.Load() != 1 || f[1].s.Stats().SharedHits != 0 {
		t.Fatalf("a value older than the reader's hard TTL was served: %+v", f[1].s.Stats())
	}
}

// BenchmarkSharedEnvelope is what authentication adds to a tier write (the
// value's encoding and its seal) and to a tier read (the seal's check and
// the decoding), for a ten-row result: "plain" is the encoding alone.
// TestRowMessages: a row write reaches another instance as a row write
// (its read of another id stays), under a MAC that covers the rows: a
// message whose rows were changed is rejected; rows past the bounds of a
// message are published, and applied, as a write to their table.
func TestRowMessages(t *testing.T) {
	tier := newMemTier(newFakeClock())
	f := fleetOf(t, 2, tier, Options{})
	var got []Invalidation
	stop, _ := tier.Subscribe(f[0].s.tier.NS, func(inv Invalidation) { got = append(got, inv) })
	defer stop()
	s := f[1].s
	id6 := tagged("items", []string{"id"}, []string{"6"})
	id5 := tagged("items", []string{"id"}, []string{"5"})
	at := s.epochs.Now()
	f[0].s.bumpWrite(write{known: true, rows: []rowWrite{pinned("items", "id", []string{"5"})}})
	if len(got) != 1 || len(got[0].Rows) != 1 || len(got[0].Tables) != 0 || got[0].All {
		t.Fatalf("%+v", got)
	}
	if !s.epochs.UnchangedFor(at, []string{"items"}, true, id6) || s.epochs.UnchangedFor(at, []string{"items"}, true, id5) {
		t.Fatal("the other instance did not apply the row write as one")
	}
	if !s.tier.Floor.AdmitsRows(got[0].Seq, []string{"items"}, id6) || s.tier.Floor.AdmitsRows(got[0].Seq, []string{"items"}, id5) {
		t.Fatal("the floor does not hold the row write")
	}

	// Forged: the rows changed under the same tag; another column.
	forged := got[0]
	forged.Rows = []RowPins{{Table: "items", Columns: []string{"id"}, Values: [][]string{{"6"}}}}
	forged2 := got[0]
	forged2.Rows = []RowPins{{Table: "items", Columns: []string{"name"}, Values: [][]string{{"5"}}}}
	forged3 := got[0]
	forged3.Rows = nil
	forged3.Tables = []string{"items"}
	at = s.epochs.Now()
	rejected := s.Stats().InvalidationsRejected
	for _, inv := range []Invalidation{forged, forged2, forged3} {
		s.tier.Hear(inv)
	}
	if s.epochs.Now() != at || s.Stats().InvalidationsRejected != rejected+3 {
		t.Fatalf("forged rows applied: %+v", s.Stats())
	}

	// Too many values: the table.
	many := make([]string, shared.MaxMessagePins+1)
	for i := range many {
		many[i] = fmt.Sprint(1000 + i)
	}
	got = nil
	at = s.epochs.Now()
	f[0].s.bumpWrite(write{known: true, rows: []rowWrite{pinned("items", "id", many), pinned("other", "id", []string{"1"})}})
	if len(got) != 1 || fmt.Sprint(got[0].Tables) != "[items]" || len(got[0].Rows) != 1 || got[0].Rows[0].Table != "other" {
		t.Fatalf("%+v", got)
	}
	if s.epochs.UnchangedFor(at, []string{"items"}, true, id6) {
		t.Fatal("a row write past the bounds was not applied to its table")
	}
	// A well-authenticated message past the bounds (from a publisher with
	// other bounds) is applied to its table too; a NUL in a name, to all.
	for _, c := range []struct {
		rows []RowPins
		all  bool
	}{
		{[]RowPins{{Table: "items", Columns: []string{"id"}, Values: [][]string{many}}}, false},
		{[]RowPins{{Table: "items", Columns: []string{"id", "id"}, Values: [][]string{{"1"}, {"2"}}}}, false},
		{[]RowPins{{Table: "items", Columns: []string{"i\x00d"}, Values: [][]string{{"1"}}}}, false},
		{[]RowPins{{Table: "it\x00ems", Columns: []string{"id"}, Values: [][]string{{"1"}}}}, true},
	} {
		inv := Invalidation{Rows: c.rows, Seq: tier.seq + 100, Source: "other"}
		inv.Tag = s.tier.Ring.MessageTagRows(s.tier.NS, inv.Seq, false, inv.Source, nil, shared.RowsFlat(inv.Rows))
		at = s.epochs.Now()
		allBefore := s.epochs.AllEpoch()
		s.tier.Hear(inv)
		if c.all != (s.epochs.AllEpoch() != allBefore) || s.epochs.UnchangedFor(at, []string{"items"}, true, id6) && !c.all {
			t.Errorf("%q: not applied to the table (all: %v)", c.rows, c.all)
		}
	}
}
