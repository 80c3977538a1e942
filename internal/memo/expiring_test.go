package memo_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight/internal/memo"
)

// A full memo forgets the expired entries first: the live ones stay.
func TestSetPurgesExpired(t *testing.T) {
	var e memo.Set
	e.Init(100)
	t0 := time.Unix(1000, 0)
	key := func(i int) string { return strings.Repeat("q", i) }
	for i := range 60 {
		e.Add(key(i), t0, 30*time.Second)
	}
	t1 := t0.Add(20 * time.Second)
	for i := 60; i < 100; i++ {
		e.Add(key(i), t1, 30*time.Second)
	}
	t2 := t0.Add(40 * time.Second) // the first 60 expired, the last 40 live
	if !e.Add(key(100), t2, 30*time.Second) {
		t.Fatal("a new key was not new")
	}
	if got := e.Len(); got != 41 {
		t.Errorf("len = %d after the purge, want 41", got)
	}
	for i := 60; i <= 100; i++ {
		if !e.Has(key(i), t2) {
			t.Fatalf("live key %d forgotten", i)
		}
	}
	if e.Has(key(0), t2) || !e.Add(key(0), t2, time.Second) {
		t.Error("an expired key is still remembered")
	}
	if e.Has(key(60), t0.Add(time.Minute)) {
		t.Error("a key is remembered past its expiry")
	}
	// Full of live keys: everything is forgotten (bounded memory first).
	var f memo.Set
	f.Init(10)
	for i := range 11 {
		f.Add(key(i), t0, time.Hour)
	}
	if got := f.Len(); got != 1 {
		t.Errorf("len = %d after a full set of live keys, want 1", got)
	}
}

// A key is remembered up to its deadline, not at it; a live key is kept
// unless keep says to replace it, and Put reports which happened.
func TestExpiringDeadlineAndKeep(t *testing.T) {
	var e memo.Expiring[int]
	e.Init(8)
	t0 := time.Unix(5000, 0)
	if _, ok := e.Get("k", t0); ok {
		t.Fatal("an empty memo remembers a key")
	}
	if !e.Put("k", 10, t0, time.Minute, nil) {
		t.Fatal("a new key was not stored")
	}
	if v, ok := e.Get("k", t0.Add(time.Minute-time.Nanosecond)); !ok || v != 10 {
		t.Fatalf("just before the deadline: %d, %v", v, ok)
	}
	if _, ok := e.Get("k", t0.Add(time.Minute)); ok {
		t.Fatal("a key is remembered at its deadline")
	}
	if e.Put("k", 20, t0, time.Minute, nil) {
		t.Fatal("a live key was replaced without keep")
	}
	smaller := func(was int) bool { return was >= 20 }
	if !e.Put("k", 20, t0, time.Minute, smaller) {
		t.Fatal("keep said to replace, the value stayed")
	}
	if v, _ := e.Get("k", t0); v != 20 {
		t.Fatalf("value %d after the replacement, want 20", v)
	}
	if e.Put("k", 5, t0, time.Minute, smaller) {
		t.Fatal("keep said to keep, the value was replaced")
	}
	if !e.Put("k", 5, t0.Add(2*time.Minute), time.Minute, nil) {
		t.Fatal("an expired key was not replaced")
	}
	if e.Len() != 1 {
		t.Fatalf("Len = %d for one key", e.Len())
	}
}

// Holds asks the value remembered, until its deadline.
func TestExpiringHolds(t *testing.T) {
	var e memo.Expiring[int]
	e.Init(8)
	now := time.Unix(1000, 0)
	e.Put("k", 5, now, time.Second, nil)
	atLeast := func(n int) func(int) bool { return func(v int) bool { return v >= n } }
	if !e.Holds("k", now, atLeast(5)) || e.Holds("k", now, atLeast(6)) {
		t.Error("Holds does not ask the value remembered")
	}
	if e.Holds("k", now.Add(time.Second), atLeast(0)) || e.Holds("other", now, atLeast(0)) {
		t.Error("Holds holds what is expired or was never remembered")
	}
}
