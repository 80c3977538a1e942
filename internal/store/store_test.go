package store

import (
	"fmt"
	"testing"
	"time"
)

// item is an entry of the tests: its cost is what it is given.
type item struct {
	key   string
	cost  int64
	empty bool
	last  time.Time
	slot  Slot
}

func (e *item) Key() string     { return e.key }
func (e *item) Cost() int64     { return e.cost }
func (e *item) Empty() bool     { return e.empty }
func (e *item) Last() time.Time { return e.last }
func (e *item) Slot() *Slot     { return &e.slot }

// t0 is the tests' now.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// newItem returns an entry of key as the Shield charges a result of 100
// bytes (its key, its rows and 656 of overhead), alive for an hour.
func newItem(key string) *item {
	return &item{key: key, cost: int64(len(key)) + 100 + 656, last: t0.Add(time.Hour)}
}

// open returns an open store of maxBytes (negMaxBytes: an eighth), closed
// with the test.
func open(t *testing.T, maxBytes int64) *Store[*item] {
	t.Helper()
	st := &Store[*item]{}
	if ok, err := st.Open(Config[*item]{MaxBytes: maxBytes, NegMaxBytes: max(maxBytes/8, 1)}); !ok || err != nil {
		t.Fatalf("Open: %v, %v", ok, err)
	}
	t.Cleanup(st.Close)
	return st
}

// TestIndexFollowsTheStore: what the store's index holds is what ristretto
// kept: entries it refused or evicted leave the index, so that the index
// never grows past the cache; an entry is visible from its put on.
func TestIndexFollowsTheStore(t *testing.T) {
	st := open(t, 64<<10)
	const keys = 5000
	for i := range keys {
		e := newItem(fmt.Sprintf("key %d", i))
		st.Put(e, t0)
		if i%97 == 0 && st.Peek(e.key) != e {
			t.Fatalf("entry %d not visible right after its put", i)
		}
	}
	st.Wait()
	indexed := 0
	for i := range st.index.shards {
		indexed += len(st.index.shards[i].m)
	}
	kept := st.Entries()
	if indexed == 0 || int64(indexed) != kept || kept >= keys {
		t.Fatalf("index holds %d entries, the store %d, of %d put (64 KiB): want the same, fewer than put", indexed, kept, keys)
	}
	// A dropped entry is gone from the index at once; dropping an entry
	// another one replaced leaves the newer one.
	for i := range keys {
		k := fmt.Sprintf("key %d", i)
		if e := st.Peek(k); e != nil {
			newer := newItem(k)
			st.Put(newer, t0)
			st.Drop(e)
			if st.Peek(k) != newer {
				t.Fatalf("dropping the replaced entry of %s took the newer one too", k)
			}
			st.Drop(newer)
			if st.Peek(k) != nil {
				t.Fatalf("%s still indexed after drop", k)
			}
			break
		}
	}
}

// TestPutTwiceBeforeTheStoreApplies: a key put again before ristretto
// applied its first put ends with the second entry, in the index and in the
// store, and no unreachable first one is left taking room.
func TestPutTwiceBeforeTheStoreApplies(t *testing.T) {
	st := open(t, 64<<20)
	const keys = 200
	second := make([]*item, keys)
	for i := range keys {
		k := fmt.Sprintf("key %d", i)
		st.Put(newItem(k), t0)
		second[i] = newItem(k)
		st.Put(second[i], t0)
	}
	st.Wait()
	for i, e := range second {
		if got := st.Peek(e.key); got != e {
			t.Fatalf("key %d: indexed %p, want the second put's %p", i, got, e)
		}
		if got, ok := st.pos.Get(e.key); !ok || got != e {
			t.Fatalf("key %d: the store holds %p (%v), want the second put's %p", i, got, ok, e)
		}
	}
	if n := st.Entries(); n != keys {
		t.Fatalf("the store counts %d entries for %d keys", n, keys)
	}
}

// TestPutsReachRistrettoInBatches: a put is visible at once (the index)
// and counted once flushed, but handed to ristretto with the batch it is
// in: when batchMax puts are there, or later (batchDelay; Flush and Wait
// hand it over).
func TestPutsReachRistrettoInBatches(t *testing.T) {
	st := open(t, 64<<20)
	st.batchDelay = time.Hour // only a full batch, Flush or Wait hand it over
	put := func(i int) *item {
		e := newItem(fmt.Sprintf("key %d", i))
		if !st.Put(e, t0) {
			t.Fatalf("put %d refused", i)
		}
		return e
	}
	first := put(0)
	if st.Peek(first.key) != first {
		t.Fatal("a put is not visible at once")
	}
	st.batchMu.Lock()
	waiting, handed := len(st.batch), first.slot.handed
	st.batchMu.Unlock()
	if waiting != 1 || handed {
		t.Fatalf("after one put: %d in the batch, handed %v; want 1, false", waiting, handed)
	}
	if n := st.Entries(); n != 0 {
		t.Fatalf("a put still in the batch is counted: %d entries", n)
	}
	for i := 1; i < batchMax; i++ {
		put(i)
	}
	st.batchMu.Lock()
	waiting, handed = len(st.batch), first.slot.handed
	st.batchMu.Unlock()
	if waiting != 0 || !handed {
		t.Fatalf("after %d puts: %d in the batch, handed %v; want the batch handed", batchMax, waiting, handed)
	}
	last := put(batchMax)
	st.Flush()
	if n := st.Entries(); n != batchMax+1 {
		t.Fatalf("Entries counts %d entries after %d puts and a Flush", n, batchMax+1)
	}
	st.Wait()
	if got, ok := st.pos.Get(last.key); !ok || got != last {
		t.Fatal("the last put is not in ristretto after wait")
	}
}

// TestABatchOfBytesIsHandedOver: a batch is handed over once its puts cost
// batchMaxBytes, however few they are.
func TestABatchOfBytesIsHandedOver(t *testing.T) {
	st := open(t, 64<<20)
	st.batchDelay = time.Hour
	big := &item{key: "big", cost: batchMaxBytes / 2, last: t0.Add(time.Hour)}
	st.Put(big, t0)
	st.Put(&item{key: "big too", cost: batchMaxBytes / 2, last: t0.Add(time.Hour)}, t0)
	st.batchMu.Lock()
	waiting, handed := len(st.batch), big.slot.handed
	st.batchMu.Unlock()
	if waiting != 0 || !handed {
		t.Fatalf("after puts of %d bytes: %d in the batch, handed %v; want the batch handed", batchMaxBytes, waiting, handed)
	}
}

// TestEmptyResultsLiveApart: an empty result goes to the store of empty
// results, and one put under the key of a result of the other kind takes
// the older one out of its store.
func TestEmptyResultsLiveApart(t *testing.T) {
	st := open(t, 64<<20)
	full := newItem("k")
	st.Put(full, t0)
	st.Wait()
	if _, ok := st.pos.Get("k"); !ok {
		t.Fatal("a result is not in the store of results")
	}
	empty := newItem("k")
	empty.empty = true
	st.Put(empty, t0)
	st.Wait()
	if got, ok := st.neg.Get("k"); !ok || got != empty {
		t.Fatalf("the store of empty results holds %p (%v), want %p", got, ok, empty)
	}
	if _, ok := st.pos.Get("k"); ok {
		t.Fatal("the older result stayed in the store of results")
	}
	if st.Peek("k") != empty || st.Entries() != 1 || st.Bytes() != empty.cost {
		t.Fatalf("indexed %p, %d entries of %d bytes; want %p, 1 of %d", st.Peek("k"), st.Entries(), st.Bytes(), empty, empty.cost)
	}
}

// TestPutAgainBeforeRistrettoAppliesTheFirst: a key put again once its
// first put was handed to ristretto but before ristretto applied it ends
// with the second entry, in the index and in the store (ristretto would
// otherwise keep the first as the key's and refuse the second as a
// newcomer beside it).
func TestPutAgainBeforeRistrettoAppliesTheFirst(t *testing.T) {
	st := open(t, 64<<20)
	st.batchDelay = time.Hour
	const keys = 200
	second := make([]*item, keys)
	for i := range keys {
		k := fmt.Sprintf("key %d", i)
		first := newItem(k)
		st.Put(first, t0)
		st.Flush() // handed, most likely not applied yet
		if !first.slot.handed {
			t.Fatalf("key %d: the first put is not handed after Flush", i)
		}
		second[i] = newItem(k)
		st.Put(second[i], t0)
	}
	st.Wait()
	for i, e := range second {
		if got := st.Peek(e.key); got != e {
			t.Fatalf("key %d: indexed %p, want the second put's %p", i, got, e)
		}
		if got, ok := st.pos.Get(e.key); !ok || got != e {
			t.Fatalf("key %d: the store holds %p (%v), want the second put's %p", i, got, ok, e)
		}
	}
	if n := st.Entries(); n != keys {
		t.Fatalf("the store counts %d entries for %d keys", n, keys)
	}
}
