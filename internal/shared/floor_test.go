package shared_test

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/sqlflight/sqlflight/internal/epoch"
	"github.com/sqlflight/sqlflight/internal/shared"
)

// TestFloorIsBounded: the floor of fleet epochs keeps at most
// epoch.MaxTables tables one by one; past them it raises every table's
// floor, and forgets no write.
func TestFloorIsBounded(t *testing.T) {
	var f shared.Floor
	for i := range epoch.MaxTables + 10 {
		f.Raise([]string{fmt.Sprint("t", i)}, false, uint64(100+i))
	}
	if f.Len() > epoch.MaxTables || f.Admits(100, []string{"t0"}) || f.Admits(99+epoch.MaxTables, []string{"t0"}) {
		t.Fatalf("floor: %d tables, all %d", f.Len(), f.AllEpoch())
	}
}

// TestFloorAdmitsOnlyNewerValues: a value is admitted only if its version
// is above every write the floor knows of to what its read checks; version
// 0 never is; a write to every table is a write to each.
func TestFloorAdmitsOnlyNewerValues(t *testing.T) {
	var f shared.Floor
	if f.Admits(0, nil) || !f.Admits(1, []string{"items"}) {
		t.Fatal("the zero floor admits every version above 0, and not 0")
	}
	f.Raise([]string{"Items"}, false, 10)
	if f.Admits(10, []string{"items"}) || !f.Admits(11, []string{"public.items"}) || !f.Admits(2, []string{"other"}) {
		t.Fatal("a write to items is a floor of items alone (by its epoch name)")
	}
	f.Raise(nil, true, 20)
	if f.Admits(20, []string{"other"}) || !f.Admits(21, []string{"other"}) {
		t.Fatal("a write to every table is a floor of each")
	}
	// A read of rows is refused by a write to its rows, not by one to
	// other rows of its table.
	var g shared.Floor
	id5 := &epoch.RowDeps{Table: "items", Cols: []string{"id"}, Keys: []string{epoch.TagKey("items", "id", "5")}}
	id6 := &epoch.RowDeps{Table: "items", Cols: []string{"id"}, Keys: []string{epoch.TagKey("items", "id", "6")}}
	g.RaiseRows(nil, false, []epoch.RowWrite{{Table: "items", Pins: map[string][]string{"id": {"5"}}}}, 30)
	if g.AdmitsRows(30, []string{"items"}, id5) || !g.AdmitsRows(30, []string{"items"}, id6) || g.Admits(30, []string{"items"}) {
		t.Fatal("a row write is a floor of its rows and of its table as a whole")
	}
}

// TestFloorLearnsWhatTheTierSays: Learn raises the floors of the names a
// Fetch reported, in each of their forms, but not past the fleet sequence
// nor for an epoch of 0; pin-set names past their bound raise their
// table's coarse epoch instead.
func TestFloorLearnsWhatTheTierSays(t *testing.T) {
	rows := &epoch.RowDeps{Table: "items", Cols: []string{"id"}, Keys: []string{epoch.TagKey("items", "id", "5")}}
	names := shared.EpochNames([]string{"Items", "orders"}, rows)
	want := []string{"items\x00c", "items\x00pid", "items\x00tid\x005", "orders"}
	if !reflect.DeepEqual(names, want) {
		t.Fatalf("EpochNames = %q, want %q", names, want)
	}
	for i := range names {
		var f shared.Floor
		ep := make([]uint64, len(names)+1)
		ep[i] = 40
		f.Learn(names, ep, 50)
		if f.AdmitsRows(40, []string{"items", "orders"}, rows) || !f.AdmitsRows(41, []string{"items", "orders"}, rows) {
			t.Fatalf("epoch of %q not learned", names[i])
		}
	}
	var f shared.Floor
	f.Learn(names, []uint64{0, 60, 0, 0, 0}, 50) // above the sequence: not the fleet's
	if !f.AdmitsRows(41, []string{"items"}, rows) {
		t.Fatal("an epoch above the fleet sequence was learned")
	}
	f.Learn([]string{"orders"}, []uint64{0, 45}, 50)
	if f.Admits(45, []string{"x"}) || !f.Admits(46, []string{"x"}) {
		t.Fatal("every table's epoch was not learned")
	}
	var h shared.Floor
	for i := range shared.MaxLearnedSets {
		h.Learn([]string{fmt.Sprint("t", i, "\x00pc")}, []uint64{7}, 0)
	}
	h.Learn([]string{"items\x00pid"}, []uint64{8}, 0)
	if h.AdmitsRows(8, []string{"items"}, rows) || h.Admits(8, []string{"items"}) || !h.Admits(9, []string{"items"}) {
		t.Fatal("a pin set past the bound did not raise its table's coarse epoch")
	}
}

// TestRowsRoundTrip: a row write goes to the fleet with its columns sorted
// and comes back as the same write, by its table's epoch name.
func TestRowsRoundTrip(t *testing.T) {
	rws := []epoch.RowWrite{{Table: "items", Pins: map[string][]string{"b": {"2"}, "a": {"1", "3"}}}}
	fleet := shared.FleetRows[pins](rws)
	if want := []pins{{"items", []string{"a", "b"}, [][]string{{"1", "3"}, {"2"}}}}; !reflect.DeepEqual(fleet, want) {
		t.Fatalf("FleetRows = %+v, want %+v", fleet, want)
	}
	fleet[0].Table = "public.Items"
	if got := shared.LocalRows(fleet); !reflect.DeepEqual(got, rws) {
		t.Fatalf("LocalRows = %+v, want %+v", got, rws)
	}
	if shared.FleetRows[pins](nil) != nil || shared.LocalRows[pins](nil) != nil {
		t.Fatal("no rows are nil")
	}
	if shared.EpochKeys([]string{"a"}, false) != nil || !reflect.DeepEqual(shared.EpochKeys([]string{"A", "s.a", "b"}, true), []string{"a", "b"}) {
		t.Fatal("EpochKeys")
	}
}

// TestKeySeparatesFleetNames: a key is bound to its fleet name, and the
// boundary between the name and the key is not movable.
func TestKeySeparatesFleetNames(t *testing.T) {
	k := shared.Key("app", "select 1")
	if len(k) != 32 || k == shared.Key("app2", "select 1") || k == shared.Key("ap", "pselect 1") || k != shared.Key("app", "select 1") {
		t.Fatalf("keys %s", k)
	}
}
