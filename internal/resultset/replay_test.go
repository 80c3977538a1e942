package resultset_test

import (
	"database/sql/driver"
	"io"
	"testing"

	"github.com/sqlflight/sqlflight/internal/resultset"
)

// Two replays of one result read the same rows, each []byte its own copy,
// and Close calls Release once.
func TestReplayReadsItsOwnCopies(t *testing.T) {
	res, prefix, err := resultset.Materialize(bytesRows("a", "b"), 0, roomy)
	if err != nil || prefix {
		t.Fatalf("Materialize: %v %v", prefix, err)
	}
	one, two := resultset.NewReplay(res), resultset.NewReplay(res)
	d1, d2 := make([]driver.Value, 1), make([]driver.Value, 1)
	if err := one.Next(d1); err != nil {
		t.Fatal(err)
	}
	d1[0].([]byte)[0] = 'X' // a caller writing into sql.RawBytes
	if err := two.Next(d2); err != nil || string(d2[0].([]byte)) != "a" {
		t.Fatalf("the second replay read %q, %v; want a", d2[0], err)
	}
	if cols := one.Columns(); len(cols) != 1 || cols[0] != "b" {
		t.Fatalf("columns %v", cols)
	}
	released := 0
	one.Release = func() { released++ }
	_ = one.Close()
	_ = one.Close()
	if released != 1 {
		t.Fatalf("Release called %d times, want 1", released)
	}
	if err := one.Next(d1); err != io.EOF {
		t.Fatalf("Next after Close: %v, want io.EOF", err)
	}
}

// A handoff replays the prefix, then reads on from the parent, and closes
// the parent with itself.
func TestHandoffGoesOnReadingTheParent(t *testing.T) {
	rows := bytesRows("a", "b", "c", "d")
	res, prefix, err := resultset.Materialize(rows, 0, resultset.Limits{Rows: 1, Bytes: 1 << 30})
	if err != nil || !prefix {
		t.Fatalf("Materialize: prefix %v, %v; want a prefix", prefix, err)
	}
	h := resultset.NewHandoff(res, rows)
	var got string
	dest := make([]driver.Value, 1)
	for h.Next(dest) == nil {
		got += string(dest[0].([]byte))
	}
	if got != "abcd" {
		t.Fatalf("the handoff read %q, want abcd", got)
	}
	_ = h.Close()
	if rows.closed != 1 {
		t.Fatalf("the parent was closed %d times, want 1", rows.closed)
	}
}
