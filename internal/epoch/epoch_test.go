package epoch_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/sqlflight/sqlflight/internal/epoch"
	"github.com/sqlflight/sqlflight/internal/epoch/epochtest"
)

// tagged is a read of table depending on the rows whose column cols[i]
// equals one of vals[i].
func tagged(table string, cols []string, vals ...[]string) *epoch.RowDeps {
	d := &epoch.RowDeps{Table: table, Cols: cols}
	for i, c := range cols {
		for _, v := range vals[i] {
			d.Keys = append(d.Keys, epoch.TagKey(table, c, v))
		}
	}
	return d
}

// pinned is a write to table whose rows have, in column kv[2i], one of the
// values kv[2i+1].
func pinned(table string, kv ...any) epoch.RowWrite {
	rw := epoch.RowWrite{Table: table, Pins: map[string][]string{}}
	for i := 0; i < len(kv); i += 2 {
		rw.Pins[kv[i].(string)] = kv[i+1].([]string)
	}
	return rw
}

// checkBumped fails t unless every table (or "all") shows at least n, the
// number the bump that just returned took, and no flight that started
// before it may be joined.
func checkBumped(t *testing.T, e *epoch.Epochs, tables []string, known bool, n uint64) {
	if !known {
		if a := e.AllEpoch(); a < n {
			t.Errorf("all = %d after a write numbered %d returned", a, n)
		}
		if e.UnchangedSince(n-1, []string{"x"}, true) {
			t.Errorf("a flight from before write %d (all) is still joinable", n)
		}
		return
	}
	for _, tb := range tables {
		if got := e.TableEpoch(tb); got < n {
			t.Errorf("epoch of %s = %d after a write numbered %d returned", tb, got, n)
		}
	}
	if e.UnchangedSince(n-1, tables, true) {
		t.Errorf("a flight from before write %d to %v is still joinable", n, tables)
	}
}

// TestEpochsOnlyMoveForward bumps the same tables and "all" from many
// goroutines at once: however the stores interleave, after each bump the
// epochs it stamped are at least the number it took, and every epoch read
// by a watcher never goes down.
func TestEpochsOnlyMoveForward(t *testing.T) {
	var e epoch.Epochs
	sets := [][]string{{"a"}, {"a", "b"}, {"B", "public.c"}, {"c", "a"}}
	const writers, rounds = 8, 3000
	stop, watch := epochtest.Watch(t, &e, "a", "b", "c")
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range rounds {
				if t.Failed() {
					return
				}
				tables, known := sets[(w+i)%len(sets)], (w+i)%5 != 0
				n := e.Bump(tables, known)
				checkBumped(t, &e, tables, known, n)
			}
		})
	}
	wg.Wait()
	close(stop)
	watch.Wait()
	if got, want := e.Now(), uint64(writers*rounds); !t.Failed() && got != want {
		t.Errorf("sequence = %d, want %d", got, want)
	}
}

// TestEpochsJoinability is the property the epochs exist for, under
// concurrent writes: a flight whose sequence was taken before a write
// numbered n is never joinable once that write returned, and one taken
// after every write returned is.
func TestEpochsJoinability(t *testing.T) {
	var e epoch.Epochs
	tables := []string{"t"}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 2000 {
				before := e.Now()
				n := e.Bump(tables, true)
				if n <= before {
					t.Errorf("write took %d after the sequence was %d", n, before)
					return
				}
				if e.UnchangedSince(before, tables, true) || e.UnchangedSince(before, tables, false) {
					t.Errorf("flight at %d joinable after write %d returned", before, n)
					return
				}
			}
		})
	}
	wg.Wait()
	now := e.Now()
	if !e.UnchangedSince(now, tables, true) || !e.UnchangedSince(now, tables, false) {
		t.Error("a flight started after every write is not joinable")
	}
	if e.UnchangedSince(now-1, tables, true) {
		t.Error("the last write left its table's epoch behind")
	}
}

func TestEpochsRowLevel(t *testing.T) {
	items := []string{"items"}
	id5 := tagged("items", []string{"id"}, []string{"5"})
	id6 := tagged("items", []string{"id"}, []string{"6"})
	tenant7 := tagged("items", []string{"tenant_id"}, []string{"7"})
	tenant7id5 := tagged("items", []string{"id", "tenant_id"}, []string{"5"}, []string{"7"})
	in56 := tagged("items", []string{"id"}, []string{"5", "6"})

	for _, c := range []struct {
		name  string
		write func(e *epoch.Epochs)
		stale map[string]bool // which reads the write ends
	}{
		{"pinned id=5", func(e *epoch.Epochs) { e.BumpRows(nil, true, []epoch.RowWrite{pinned("items", "id", []string{"5"})}) },
			map[string]bool{"id5": true, "tenant7": true, "tenant7id5": true, "in56": true, "table": true}},
		{"pinned id=6", func(e *epoch.Epochs) { e.BumpRows(nil, true, []epoch.RowWrite{pinned("items", "id", []string{"6"})}) },
			map[string]bool{"id6": true, "tenant7": true, "in56": true, "table": true}},
		{"key moved 5→9", func(e *epoch.Epochs) {
			e.BumpRows(nil, true, []epoch.RowWrite{pinned("items", "id", []string{"5", "9"})})
		}, map[string]bool{"id5": true, "tenant7": true, "tenant7id5": true, "in56": true, "table": true}},
		{"pinned tenant=8", func(e *epoch.Epochs) {
			e.BumpRows(nil, true, []epoch.RowWrite{pinned("items", "tenant_id", []string{"8"})})
		}, map[string]bool{"id5": true, "id6": true, "in56": true, "table": true}},
		{"pinned tenant=7", func(e *epoch.Epochs) {
			e.BumpRows(nil, true, []epoch.RowWrite{pinned("items", "tenant_id", []string{"7"})})
		}, map[string]bool{"id5": true, "id6": true, "in56": true, "tenant7": true, "tenant7id5": true, "table": true}},
		{"whole table", func(e *epoch.Epochs) { e.Bump(items, true) },
			map[string]bool{"id5": true, "id6": true, "tenant7": true, "tenant7id5": true, "in56": true, "table": true}},
		{"rows without pins", func(e *epoch.Epochs) { e.BumpRows(nil, true, []epoch.RowWrite{{Table: "items"}}) },
			map[string]bool{"id5": true, "id6": true, "tenant7": true, "tenant7id5": true, "in56": true, "table": true}},
		{"unknown tables", func(e *epoch.Epochs) { e.Bump(nil, false) },
			map[string]bool{"id5": true, "id6": true, "tenant7": true, "tenant7id5": true, "in56": true, "table": true}},
		{"another table", func(e *epoch.Epochs) {
			e.BumpRows([]string{"other"}, true, []epoch.RowWrite{pinned("more", "id", []string{"5"})})
		}, map[string]bool{}},
	} {
		var e epoch.Epochs
		e.Bump([]string{"warmup"}, true)
		seq := e.Now()
		c.write(&e)
		for name, rows := range map[string]*epoch.RowDeps{"id5": id5, "id6": id6, "tenant7": tenant7,
			"tenant7id5": tenant7id5, "in56": in56, "table": nil} {
			if got := !e.UnchangedFor(seq, items, true, rows); got != c.stale[name] {
				t.Errorf("%s: read %s ended = %v, want %v", c.name, name, got, c.stale[name])
			}
		}
		// A flight that starts after the write is never ended by it.
		if !e.UnchangedFor(e.Now(), items, true, id5) || !e.UnchangedFor(e.Now(), items, true, nil) {
			t.Errorf("%s: a read that started after the write is ended", c.name)
		}
	}
}

func TestEpochsRowBounds(t *testing.T) {
	var e epoch.Epochs
	id5 := tagged("items", []string{"id"}, []string{"5"})
	seq := e.Now()
	// Past epoch.MaxTags values the tags are forgotten: the floor ends
	// every tagged read older than the forgetting write.
	for i := range epoch.MaxTags + 1 {
		e.BumpRows(nil, true, []epoch.RowWrite{pinned("items", "id", []string{fmt.Sprint(1000 + i)})})
	}
	if e.UnchangedFor(seq, []string{"items"}, true, id5) {
		t.Fatal("a tagged read survived the tags it depended on being forgotten")
	}
	// Past epoch.MaxPinSets sets of pinned columns, a write counts as a write to
	// the whole table.
	var f epoch.Epochs
	for i := range epoch.MaxPinSets {
		f.BumpRows(nil, true, []epoch.RowWrite{pinned("items", fmt.Sprintf("c%d", i), []string{"1"})})
	}
	seq = f.Now()
	f.BumpRows(nil, true, []epoch.RowWrite{pinned("items", "id", []string{"6"})})
	if f.UnchangedFor(seq, []string{"items"}, true, id5) {
		t.Fatal("a write past the pin-set bound left a tagged read of another value")
	}
}

// TestTableKeyShares: a table's epochs are kept by TableKey, so a write to
// a schema-qualified, quoted or differently cased name ends the reads of
// the bare name.
func TestTableKeyShares(t *testing.T) {
	var e epoch.Epochs
	seq := e.Now()
	n := e.Bump([]string{`public."Items"`}, true)
	if e.UnchangedSince(seq, []string{"items"}, true) || e.UnchangedSince(seq, []string{"other.ITEMS"}, true) {
		t.Fatal("a write to public.\"Items\" left a read of items")
	}
	if got := e.TableEpoch("ITEMS"); got != n {
		t.Fatalf("TableEpoch(ITEMS) = %d, want %d", got, n)
	}
	if !e.UnchangedSince(seq, []string{"items2"}, true) {
		t.Fatal("a write to items ended a read of items2")
	}
}

// TestRaisesTakeNoNumber: the fleet's raises move epochs to numbers of the
// fleet's without taking one; a table raised without its coarse epoch
// leaves its tagged reads, a raised tag ends only its own, and "all" only
// moves up.
func TestRaisesTakeNoNumber(t *testing.T) {
	var e epoch.Epochs
	id5 := tagged("t", []string{"id"}, []string{"5"})
	id6 := tagged("t", []string{"id"}, []string{"6"})
	e.RaiseTable("t", false, 10)
	if e.Now() != 0 {
		t.Fatalf("a raise took number %d", e.Now())
	}
	if e.UnchangedSince(9, []string{"t"}, true) || !e.UnchangedSince(10, []string{"t"}, true) {
		t.Fatal("RaiseTable(t, 10) did not end exactly the reads before 10")
	}
	if !e.UnchangedFor(9, []string{"t"}, true, id5) {
		t.Fatal("a raise of t as a whole, not coarse, ended a tagged read")
	}
	e.RaiseTable("t", true, 11)
	if e.UnchangedFor(10, []string{"t"}, true, id5) {
		t.Fatal("a coarse raise left a tagged read")
	}
	e.RaiseTagAbove(epoch.TagKey("t", "id", "5"), 12)
	if e.UnchangedFor(11, []string{"t"}, true, id5) || !e.UnchangedFor(11, []string{"t"}, true, id6) {
		t.Fatal("a raised tag did not end exactly its own reads")
	}
	e.RaiseAll(20)
	e.RaiseAll(15)
	if got := e.AllEpoch(); got != 20 {
		t.Fatalf("AllEpoch = %d after raises to 20 and 15", got)
	}
	if e.UnchangedSince(19, []string{"u"}, true) || !e.UnchangedSince(20, []string{"u"}, true) {
		t.Fatal("RaiseAll(20) did not end exactly the reads before 20")
	}
}

// TestRaiseTablePastMaxTables: a raise of a new table past MaxTables
// forgets the tables into "all", past every epoch it forgot.
func TestRaiseTablePastMaxTables(t *testing.T) {
	var e epoch.Epochs
	for i := range epoch.MaxTables {
		e.RaiseTable(fmt.Sprint("t", i), false, uint64(100+i))
	}
	if got := e.Len(); got != epoch.MaxTables {
		t.Fatalf("Len = %d, want %d", got, epoch.MaxTables)
	}
	top := uint64(100 + epoch.MaxTables - 1)
	e.RaiseTable("new", false, 5)
	if got := e.Len(); got != 0 {
		t.Fatalf("Len = %d after forgetting", got)
	}
	if got := e.AllEpoch(); got != top {
		t.Fatalf("AllEpoch = %d, want %d (the largest epoch forgotten)", got, top)
	}
	if e.UnchangedSince(top-1, []string{fmt.Sprint("t", epoch.MaxTables-1)}, true) {
		t.Fatal("a forgotten table's write was lost")
	}
}
