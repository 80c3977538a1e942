package feed

import (
	"context"
	"errors"
	"testing"
)

func TestParseSnapshotVisible(t *testing.T) {
	snap, err := parseSnapshot("100:110:103,107")
	if err != nil {
		t.Fatal(err)
	}
	for xid, want := range map[uint32]bool{99: true, 100: true, 103: false, 105: true, 107: false, 109: true, 110: false, 111: false} {
		if got := snap.visible(xid); got != want {
			t.Errorf("visible(%d) = %v, want %v", xid, got, want)
		}
	}
	// Full xids past 2^32 compare by their low 32 bits, modulo 2^32.
	snap, err = parseSnapshot("4294967290:4294967306:")
	if err != nil {
		t.Fatal(err)
	}
	if !snap.visible(4294967295) || !snap.visible(5) || snap.visible(10) {
		t.Errorf("wraparound: got %v %v %v", snap.visible(4294967295), snap.visible(5), snap.visible(10))
	}
	for _, bad := range []string{"", "1:2", "a:2:", "1:b:", "1:2:x"} {
		if _, err := parseSnapshot(bad); err == nil {
			t.Errorf("parseSnapshot(%q): no error", bad)
		}
	}
}

// A transaction whose Commit arrived before it is visible to new snapshots
// is applied again once a snapshot shows it visible, not before.
func TestVisibilityAppliesAgainOnceVisible(t *testing.T) {
	var applied [][]Change
	snaps := []string{"10:12:11", "10:13:11", "12:13:"}
	calls := 0
	v := newVisibility(func(cs []Change) { applied = append(applied, cs) }, func(context.Context) (string, error) {
		s := snaps[calls]
		calls++
		return s, nil
	})
	a := []Change{{Table: "public.a"}}
	b := []Change{{Table: "public.b"}}
	v.add(11, a)
	v.add(12, b)
	v.add(13, nil) // nothing to apply: never queued
	ctx := context.Background()

	more, err := v.check(ctx) // 11 in progress, 12 at xmax: neither visible
	if err != nil || !more || len(applied) != 0 {
		t.Fatalf("first check: more=%v err=%v applied=%v", more, err, applied)
	}
	more, err = v.check(ctx) // 12 visible, 11 still in progress
	if err != nil || !more || len(applied) != 1 || applied[0][0].Table != "public.b" {
		t.Fatalf("second check: more=%v err=%v applied=%v", more, err, applied)
	}
	more, err = v.check(ctx) // 11 visible
	if err != nil || more || len(applied) != 2 || applied[1][0].Table != "public.a" {
		t.Fatalf("third check: more=%v err=%v applied=%v", more, err, applied)
	}
	if more, err = v.check(ctx); err != nil || more || calls != 3 {
		t.Fatalf("nothing pending: more=%v err=%v snapshots=%d", more, err, calls)
	}
}

func TestVisibilityCheckErrorEndsRun(t *testing.T) {
	boom := errors.New("boom")
	v := newVisibility(func([]Change) {}, func(context.Context) (string, error) { return "", boom })
	v.add(1, []Change{{Table: "public.a"}})
	if err := v.run(context.Background()); !errors.Is(err, boom) {
		t.Fatalf("run: %v, want the snapshot's error", err)
	}
}
