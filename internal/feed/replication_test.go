package feed

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"
)

func strp(s string) *string { return &s }

func textCol(s string) *pglogrepl.TupleDataColumn {
	return &pglogrepl.TupleDataColumn{DataType: pglogrepl.TupleDataTypeText, Data: []byte(s)}
}

var (
	nullCol      = &pglogrepl.TupleDataColumn{DataType: pglogrepl.TupleDataTypeNull}
	unchangedCol = &pglogrepl.TupleDataColumn{DataType: pglogrepl.TupleDataTypeToast}
)

func tuple(cols ...*pglogrepl.TupleDataColumn) *pglogrepl.TupleData {
	return &pglogrepl.TupleData{ColumnNum: uint16(len(cols)), Columns: cols}
}

// TestDecoderChanges: pgoutput messages become one []Change per committed
// transaction: text values, nil for NULL, nothing for what is unknown
// (unchanged TOAST values, the non-key columns of a key tuple, every
// column but the key's of an UPDATE that sent no old tuple).
func TestDecoderChanges(t *testing.T) {
	d := decoder{relations: map[uint32]*pglogrepl.RelationMessage{}}
	rel := &pglogrepl.RelationMessage{RelationID: 7, Namespace: "public", RelationName: "items",
		Columns: []*pglogrepl.RelationMessageColumn{{Flags: 1, Name: "id"}, {Name: "tenant"}, {Name: "body"}}}
	msgs := []pglogrepl.Message{
		rel,
		&pglogrepl.BeginMessage{},
		&pglogrepl.InsertMessage{RelationID: 7, Tuple: tuple(textCol("1"), nullCol, textCol("x"))},
		&pglogrepl.UpdateMessage{RelationID: 7, NewTuple: tuple(textCol("1"), textCol("t"), unchangedCol)},
		&pglogrepl.UpdateMessage{RelationID: 7, OldTupleType: pglogrepl.UpdateMessageTupleTypeKey,
			OldTuple: tuple(textCol("1"), nullCol, nullCol), NewTuple: tuple(textCol("2"), textCol("t"), textCol("y"))},
		&pglogrepl.DeleteMessage{RelationID: 7, OldTupleType: pglogrepl.DeleteMessageTupleTypeKey,
			OldTuple: tuple(textCol("2"), nullCol, nullCol)},
		&pglogrepl.DeleteMessage{RelationID: 7, OldTupleType: pglogrepl.DeleteMessageTupleTypeOld,
			OldTuple: tuple(textCol("3"), nullCol, unchangedCol)},
		&pglogrepl.TruncateMessage{RelationIDs: []uint32{7, 99}},
		&pglogrepl.InsertMessage{RelationID: 42, Tuple: tuple(textCol("1"))},
	}
	for _, m := range msgs {
		if _, _, done := d.decode(m); done {
			t.Fatalf("%T ended a transaction", m)
		}
	}
	if !d.inTx {
		t.Fatal("not in a transaction after Begin")
	}
	cs, commit, done := d.decode(&pglogrepl.CommitMessage{TransactionEndLSN: 100})
	if !done || commit.TransactionEndLSN != 100 {
		t.Fatal("Commit did not end the transaction")
	}
	want := []Change{
		{Table: "public.items", New: map[string]*string{"id": strp("1"), "tenant": nil, "body": strp("x")}},
		{Table: "public.items", Old: map[string]*string{"id": strp("1")},
			New: map[string]*string{"id": strp("1"), "tenant": strp("t")}},
		{Table: "public.items", Old: map[string]*string{"id": strp("1")},
			New: map[string]*string{"id": strp("2"), "tenant": strp("t"), "body": strp("y")}},
		{Table: "public.items", Old: map[string]*string{"id": strp("2")}},
		{Table: "public.items", Old: map[string]*string{"id": strp("3"), "tenant": nil}},
		{Table: "public.items", Whole: true},
		{Whole: true}, // relation 99 was never described: an unknown table
		{Whole: true},
	}
	if !reflect.DeepEqual(cs, want) {
		t.Fatalf("changes:\n got %s\nwant %s", showChanges(cs), showChanges(want))
	}
	if d.inTx || d.changes != nil {
		t.Fatal("the decoder kept the committed transaction")
	}
}

func showChanges(cs []Change) string {
	var b strings.Builder
	for _, c := range cs {
		fmt.Fprintf(&b, "{%s whole=%v old=%s new=%s} ", c.Table, c.Whole, showRow(c.Old), showRow(c.New))
	}
	return b.String()
}

func showRow(m map[string]*string) string {
	if m == nil {
		return "nil"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		v := "NULL"
		if m[k] != nil {
			v = *m[k]
		}
		parts = append(parts, k+"="+v)
	}
	return "{" + strings.Join(parts, ",") + "}"
}
