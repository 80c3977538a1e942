package redistier

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sqlflight/sqlflight"
)

// rowNames are the epoch names a read of items tagged on cols (sorted)
// with the given tags ("col\x00val") checks.
func rowNames(cols []string, tags ...string) []string {
	names := []string{"items\x00c", "items\x00p" + strings.Join(cols, "\x00")}
	for _, tg := range tags {
		names = append(names, "items\x00t"+tg)
	}
	return names
}

func pins(table string, kv ...any) sqlflight.RowPins {
	rp := sqlflight.RowPins{Table: table}
	for i := 0; i < len(kv); i += 2 {
		rp.Columns = append(rp.Columns, kv[i].(string))
		rp.Values = append(rp.Values, kv[i+1].([]string))
	}
	return rp
}

// fetchEpochs returns the epochs of names (the "all" epoch left out).
func fetchEpochs(t *testing.T, tier *Tier, ns string, names []string) []uint64 {
	t.Helper()
	sv, err := tier.Fetch(ctxT(t), ns, "k", names)
	if err != nil {
		t.Fatal(err)
	}
	return sv.Epochs[:len(names)]
}

// TestRowEpochs: a row write raises its table's epoch, its pin set's and
// its values'; a read tagged on other values, or on a column the write
// pinned, sees none of it; a write to the table as a whole raises the
// coarse epoch. The message carries the rows.
func TestRowEpochs(t *testing.T) {
	tier, _, ns := setup(t)
	ctx := ctxT(t)
	rec := subscribed(t, tier, ns)
	fetch := func(names []string) []uint64 { return fetchEpochs(t, tier, ns, names) }
	id5 := rowNames([]string{"id"}, "id\x005")
	id6 := rowNames([]string{"id"}, "id\x006")
	tenant7 := rowNames([]string{"tenant_id"}, "tenant_id\x007")
	both := rowNames([]string{"id", "tenant_id"}, "id\x006", "tenant_id\x007")

	w1, err := publish(ctx, tier, ns, sqlflight.Invalidation{Source: "a", Rows: []sqlflight.RowPins{pins("items", "id", []string{"5", "9"})}})
	if err != nil {
		t.Fatal(err)
	}
	if inv := rec.next(t); len(inv.Rows) != 1 || inv.Rows[0].Table != "items" || fmt.Sprint(inv.Rows[0].Values) != "[[5 9]]" {
		t.Fatalf("message %+v", inv)
	}
	if e := fetch([]string{"items"}); e[0] != w1 {
		t.Errorf("table epoch %v, want %d", e, w1)
	}
	if e := fetch(id5); e[0] != 0 || e[1] != 0 || e[2] != w1 {
		t.Errorf("id 5: %v, want [0 0 %d]", e, w1)
	}
	if e := fetch(id6); e[0] != 0 || e[1] != 0 || e[2] != 0 {
		t.Errorf("id 6: %v, want nothing", e)
	}
	if e := fetch(tenant7); e[1] != w1 {
		t.Errorf("tenant 7: %v: the write pinned on id may touch its rows", e)
	}
	if e := fetch(both); e[0]+e[1]+e[2]+e[3] != 0 {
		t.Errorf("id 6 and tenant 7: %v, want nothing", e)
	}

	w2, err := publish(ctx, tier, ns, sqlflight.Invalidation{Source: "a", Tables: []string{"items"}})
	if err != nil {
		t.Fatal(err)
	}
	rec.next(t)
	if e := fetch(id6); e[0] != w2 {
		t.Errorf("id 6 after a write to the table: %v, want coarse %d", e, w2)
	}
}

// TestRowEpochsBounded: past maxPinSets sets, a row write with a new set
// raises the table's coarse epoch; past maxTableTags tags, the table's tag
// hash is dropped and its coarse epoch raised; a tag hash evicted is
// noticed, and reads of its tags are refused until the next write.
func TestRowEpochsBounded(t *testing.T) {
	tier, c, ns := setup(t)
	ctx := ctxT(t)
	old := maxTableTags
	maxTableTags = 8
	t.Cleanup(func() { maxTableTags = old })
	fetch := func(names []string) []uint64 { return fetchEpochs(t, tier, ns, names) }
	// Sets.
	for i := range maxPinSets {
		if _, err := publish(ctx, tier, ns, sqlflight.Invalidation{Rows: []sqlflight.RowPins{pins("items", fmt.Sprint("c", i), []string{})}}); err != nil {
			t.Fatal(err)
		}
	}
	if e := fetch([]string{"items\x00c"}); e[0] != 0 {
		t.Fatalf("coarse %v before the bound", e)
	}
	over, err := publish(ctx, tier, ns, sqlflight.Invalidation{Rows: []sqlflight.RowPins{pins("items", "other", []string{"1"})}})
	if err != nil {
		t.Fatal(err)
	}
	if e := fetch(rowNames([]string{"other"}, "other\x001")); e[0] != over || e[2] != 0 {
		t.Fatalf("a set past the bound: %v, want coarse %d", e, over)
	}
	if s, _ := c.HGet(ctx, epochsKey(ns), "items\x00p").Result(); strings.Count(s, " ")/2 != maxPinSets {
		t.Fatalf("%d sets kept", strings.Count(s, " ")/2)
	}

	// Tags, on a table of their own.
	var last uint64
	for i := range maxTableTags {
		if last, err = publish(ctx, tier, ns, sqlflight.Invalidation{Rows: []sqlflight.RowPins{pins("t", "id", []string{fmt.Sprint(i)})}}); err != nil {
			t.Fatal(err)
		}
	}
	tag0 := []string{"t\x00c", "t\x00pid", "t\x00tid\x000"}
	if e := fetch(tag0); e[0] != 0 || e[2] == 0 {
		t.Fatalf("tag 0 within the bound: %v", e)
	}
	if n, _ := c.HLen(ctx, tagsKey(ns, "t")).Result(); n != int64(maxTableTags)+1 {
		t.Fatalf("%d fields", n)
	}
	past, err := publish(ctx, tier, ns, sqlflight.Invalidation{Rows: []sqlflight.RowPins{pins("t", "id", []string{"new"})}})
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := c.Exists(ctx, tagsKey(ns, "t")).Result(); n != 0 {
		t.Fatal("the tag hash past its bound is kept")
	}
	if e := fetch(tag0); e[0] < past || e[2] != 0 {
		t.Fatalf("tag 0 past the bound: %v, want coarse ≥ %d", e, past)
	}
	_ = last
	// Eviction of a tag hash (as an allkeys-* policy may do).
	w, err := publish(ctx, tier, ns, sqlflight.Invalidation{Rows: []sqlflight.RowPins{pins("u", "id", []string{"1"})}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Del(ctx, tagsKey(ns, "u")).Err(); err != nil {
		t.Fatal(err)
	}
	sv, err := tier.Fetch(ctx, ns, "k", []string{"u\x00c", "u\x00pid", "u\x00tid\x002"})
	if err != nil || sv.Epochs[2] < w || sv.Epochs[2] != sv.Seq {
		t.Fatalf("after the eviction: %v (seq %d), %v: want the tag at the sequence", sv.Epochs, sv.Seq, err)
	}
	next, err := publish(ctx, tier, ns, sqlflight.Invalidation{Rows: []sqlflight.RowPins{pins("u", "id", []string{"3"})}})
	if err != nil {
		t.Fatal(err)
	}
	if e := fetch([]string{"u\x00c", "u\x00pid", "u\x00tid\x002"}); e[0] < next-1 || e[2] != 0 {
		t.Fatalf("after the next write: %v, want coarse raised past the lost tags", e)
	}
}

// TestRowMessageEncoding: rows round-trip through the message, and a
// message of tables alone keeps the earlier format.
func TestRowMessageEncoding(t *testing.T) {
	inv := sqlflight.Invalidation{Seq: 9, Tag: []byte{1}, Source: "s", Tables: []string{"a"},
		Rows: []sqlflight.RowPins{pins("items", "id", []string{"5", "x\ny \"z\""}, "tenant", []string{}), pins("b")}}
	msg := encodeInvalidation(inv)
	got, err := decodeInvalidation(msg)
	if err != nil || fmt.Sprintf("%q", got.Rows) != fmt.Sprintf("%q", inv.Rows) || fmt.Sprint(got.Tables) != "[a]" {
		t.Fatalf("%q: %+v, %v", msg, got, err)
	}
	if !strings.HasPrefix(encodeInvalidation(sqlflight.Invalidation{Seq: 1, Tag: []byte{1}}), messageVersion+" ") {
		t.Fatal("a message without rows changed format")
	}
	for _, bad := range []string{
		"sqlflight/3 1 tables 01\n\"s\"",                           // no row
		"sqlflight/2 1 tables 01\n\"s\"\nr \"t\"",                  // rows in the old format
		"sqlflight/3 1 tables 01\n\"s\"\nc \"id\" \"1\"",           // a column before its row
		"sqlflight/3 1 tables 01\n\"s\"\nr \"t\"\nc \"id\" 1",      // a value not quoted
		"sqlflight/3 1 tables 01\n\"s\"\nr \"t\" \"u\"",            // two tables
		"sqlflight/3 1 tables 01\n\"s\"\nr \"t\"\nc \"id\" \"1\" ", // a trailing space
	} {
		if _, err := decodeInvalidation(bad); err == nil {
			t.Errorf("%q read", bad)
		}
	}
}
