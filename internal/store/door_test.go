package store_test

import (
	"testing"
	"time"

	"github.com/sqlflight/sqlflight/internal/store"
)

// entry is an entry of the door's tests.
type entry struct {
	key      string
	cost     int64
	empty    bool
	last     time.Time
	slot     store.Slot
	prepared int
}

func (e *entry) Key() string       { return e.key }
func (e *entry) Cost() int64       { return e.cost }
func (e *entry) Empty() bool       { return e.empty }
func (e *entry) Last() time.Time   { return e.last }
func (e *entry) Slot() *store.Slot { return &e.slot }
func prepare(e *entry)             { e.prepared++ }
func at(key string, cost int64, last time.Time) *entry {
	return &entry{key: key, cost: cost, last: last}
}

var now = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// TestTheStoreIsMadeLazily: the zero Store is not open and takes nothing;
// the first Open makes it, later ones ignore their config.
func TestTheStoreIsMadeLazily(t *testing.T) {
	var st store.Store[*entry]
	if st.Ready() || st.Closed() {
		t.Fatalf("zero store: ready %v, closed %v; want neither", st.Ready(), st.Closed())
	}
	st.Flush() // nothing to hand over, nothing made
	if st.Entries() != 0 || st.Bytes() != 0 {
		t.Fatal("a zero store counts entries")
	}
	if ok, err := st.Open(store.Config[*entry]{MaxBytes: 1 << 20, NegMaxBytes: 1 << 17}); !ok || err != nil {
		t.Fatalf("Open: %v, %v", ok, err)
	}
	defer st.Close()
	if !st.Ready() {
		t.Fatal("an open store is not ready")
	}
	// A second Open does not make the store again: its bounds stay.
	if ok, err := st.Open(store.Config[*entry]{MaxBytes: 1, NegMaxBytes: 1}); !ok || err != nil {
		t.Fatalf("second Open: %v, %v", ok, err)
	}
	e := at("k", 1000, now.Add(time.Hour))
	if !st.Put(e, now) || st.Peek("k") != e || st.Get("k") != e {
		t.Fatal("an entry of 1000 bytes is refused by a store of 1 MiB opened again with 1 byte")
	}
}

// TestAFailedOpenStaysShut: the Open that cannot make the store returns the
// error; the store stays shut, and later Opens report false with no error.
func TestAFailedOpenStaysShut(t *testing.T) {
	var st store.Store[*entry]
	if ok, err := st.Open(store.Config[*entry]{}); ok || err == nil { // ristretto refuses a MaxCost of 0
		t.Fatalf("Open with no bounds: %v, %v; want false and an error", ok, err)
	}
	if ok, err := st.Open(store.Config[*entry]{MaxBytes: 1 << 20, NegMaxBytes: 1 << 17}); ok || err != nil {
		t.Fatalf("Open after a failure: %v, %v; want false, no error", ok, err)
	}
	if st.Ready() {
		t.Fatal("a store that failed to open is ready")
	}
	st.Close()
}

// TestCloseShutsTheStore: after Close, Open reports false, Put refuses, and
// Get and Peek find nothing, Wait and Drop return at once.
func TestCloseShutsTheStore(t *testing.T) {
	var st store.Store[*entry]
	cfg := store.Config[*entry]{MaxBytes: 1 << 20, NegMaxBytes: 1 << 17}
	st.Open(cfg)
	e := at("k", 1000, now.Add(time.Hour))
	st.Put(e, now)
	st.Close()
	if !st.Closed() || st.Ready() {
		t.Fatalf("closed %v, ready %v; want closed, not ready", st.Closed(), st.Ready())
	}
	if ok, err := st.Open(cfg); ok || err != nil {
		t.Fatalf("Open after Close: %v, %v; want false, no error", ok, err)
	}
	if st.Peek("k") != nil || st.Get("k") != nil {
		t.Fatal("a closed store still finds its entry")
	}
	if st.Put(at("k2", 1000, now.Add(time.Hour)), now) {
		t.Fatal("a closed store took a put")
	}
	st.Wait()
	st.Drop(e)
	st.Flush()
	st.Close() // twice is fine
}

// TestPrepareSeesWhatPutGoesOnToStore: Config.Prepare is called once on an
// entry Put goes on to store (one too costly included: it is refused after),
// and not on one past its Last or on a closed store.
func TestPrepareSeesWhatPutGoesOnToStore(t *testing.T) {
	var st store.Store[*entry]
	st.Open(store.Config[*entry]{MaxBytes: 1 << 20, NegMaxBytes: 1 << 17, Prepare: prepare})
	live := at("live", 1000, now.Add(time.Hour))
	if !st.Put(live, now) || live.prepared != 1 {
		t.Fatalf("a live entry: prepared %d times, want once", live.prepared)
	}
	dead := at("dead", 1000, now)
	if st.Put(dead, now) || dead.prepared != 0 || st.Peek("dead") != nil {
		t.Fatalf("an entry at its Last: prepared %d times, indexed %v; want refused, never prepared", dead.prepared, st.Peek("dead") != nil)
	}
	huge := at("huge", 2<<20, now.Add(time.Hour))
	if st.Put(huge, now) || huge.prepared != 1 {
		t.Fatalf("an entry too costly: prepared %d times; want refused, prepared once", huge.prepared)
	}
	st.Close()
	late := at("late", 1000, now.Add(time.Hour))
	if st.Put(late, now) || late.prepared != 0 {
		t.Fatalf("a put on a closed store: prepared %d times, want never", late.prepared)
	}
}

// TestPutRefusesWhatTheStoreCanNeverHold: an entry costlier than its store
// is refused and takes the older entry of its key with it; a store of one
// byte holds nothing.
func TestPutRefusesWhatTheStoreCanNeverHold(t *testing.T) {
	var st store.Store[*entry]
	st.Open(store.Config[*entry]{MaxBytes: 1 << 20, NegMaxBytes: 1 << 17})
	defer st.Close()
	old := at("k", 1000, now.Add(time.Hour))
	st.Put(old, now)
	st.Wait()
	if st.Entries() != 1 {
		t.Fatalf("%d entries after one put", st.Entries())
	}
	if st.Put(at("k", 2<<20, now.Add(time.Hour)), now) {
		t.Fatal("an entry of 2 MiB was taken by a store of 1 MiB")
	}
	st.Wait()
	if st.Peek("k") != nil || st.Entries() != 0 || st.Bytes() != 0 {
		t.Fatalf("after the refused put: indexed %v, %d entries of %d bytes; want the older entry gone", st.Peek("k") != nil, st.Entries(), st.Bytes())
	}

	var tiny store.Store[*entry]
	tiny.Open(store.Config[*entry]{MaxBytes: 1, NegMaxBytes: 1})
	defer tiny.Close()
	for i, empty := range []bool{false, true} {
		e := at("k", 100+int64(i), now.Add(time.Hour))
		e.empty = empty
		if tiny.Put(e, now) || tiny.Peek("k") != nil {
			t.Fatalf("a store of one byte took an entry (empty %v)", empty)
		}
	}
}

// TestDropLeavesANewerEntry: Drop of an entry that another one replaced
// leaves the newer one, in the index and in the count.
func TestDropLeavesANewerEntry(t *testing.T) {
	var st store.Store[*entry]
	st.Open(store.Config[*entry]{MaxBytes: 1 << 20, NegMaxBytes: 1 << 17})
	defer st.Close()
	older, newer := at("k", 1000, now.Add(time.Hour)), at("k", 1000, now.Add(time.Hour))
	st.Put(older, now)
	st.Wait()
	st.Put(newer, now)
	st.Drop(older)
	st.Wait()
	if st.Peek("k") != newer || st.Entries() != 1 {
		t.Fatalf("indexed %p, %d entries; want the newer %p, 1", st.Peek("k"), st.Entries(), newer)
	}
	st.Drop(newer)
	st.Wait()
	if st.Peek("k") != nil || st.Entries() != 0 || st.Bytes() != 0 {
		t.Fatalf("after its drop: indexed %v, %d entries of %d bytes", st.Peek("k") != nil, st.Entries(), st.Bytes())
	}
}
