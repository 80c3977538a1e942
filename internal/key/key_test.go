package key_test

import (
	"bytes"
	"database/sql/driver"
	"math/big"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlflight/sqlflight/internal/key"
)

func keyOf(t *testing.T, args ...driver.NamedValue) string {
	t.Helper()
	k, ok := key.Append(nil, 1, key.Partition{}, "SELECT $1", args)
	if !ok {
		t.Fatalf("args %v not encodable", args)
	}
	return string(k)
}

func arg(v any) driver.NamedValue { return driver.NamedValue{Ordinal: 1, Value: v} }

type point struct{ X, Y int }

func TestKeysNeverCollide(t *testing.T) {
	utc := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	plus2 := utc.In(time.FixedZone("x", 2*3600))
	values := []driver.NamedValue{
		arg(nil), arg(int64(1)), arg("1"), arg([]byte("1")), arg([]byte{}), arg([]byte(nil)), arg(float64(1)),
		arg(true), arg(false), arg(int32(1)), arg(int(1)), arg(uint64(1)), arg(utc), arg(plus2),
		arg([]int32{1, 2}), arg([]int32{12}), arg([]string{"1", "2"}), arg([]string{"12"}),
		arg(pgx.NamedArgs{"a": 1}), arg(pgx.NamedArgs{"a": 2}), arg(pgx.QueryExecModeSimpleProtocol),
		arg(pgx.QueryExecModeExec), arg(point{1, 2}), arg(point{2, 1}), arg(&point{1, 2}), arg((*point)(nil)),
		{Ordinal: 1, Name: "a", Value: int64(1)}, {Ordinal: 2, Value: int64(1)},
		arg("a\x00b"), arg("a"),
	}
	seen := map[string]int{}
	for i, v := range values {
		k := keyOf(t, v)
		if j, dup := seen[k]; dup {
			t.Errorf("values %d (%#v) and %d (%#v) share a key", j, values[j], i, v)
		}
		seen[k] = i
	}
	// Two args vs one arg holding both.
	if keyOf(t, arg("ab")) == keyOf(t, arg("a"), driver.NamedValue{Ordinal: 2, Value: "b"}) {
		t.Error("argument boundaries are ambiguous")
	}
	a, _ := key.Append(nil, 1, key.Partition{}, "SELECT 1", nil)
	b, _ := key.Append(nil, 2, key.Partition{}, "SELECT 1", nil)
	if string(a) == string(b) {
		t.Error("scopes share a key")
	}
}

func TestKeysAreCanonical(t *testing.T) {
	m1 := map[string]any{}
	m2 := map[string]any{}
	for i, k := range []string{"a", "b", "c", "d", "e", "f", "g"} {
		m1[k] = i
	}
	for i, k := range []string{"g", "f", "e", "d", "c", "b", "a"} {
		m2[k] = 6 - i
	}
	if keyOf(t, arg(pgx.NamedArgs(m1))) != keyOf(t, arg(pgx.NamedArgs(m2))) {
		t.Error("map order changed the key")
	}
	t1 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	t2 := t1.Add(time.Hour).Add(-time.Hour) // same instant, same zone
	if keyOf(t, arg(t1)) != keyOf(t, arg(t2)) {
		t.Error("equal times differ")
	}
}

func TestUnencodableArgsDoNotShare(t *testing.T) {
	for _, v := range []any{func() {}, make(chan int), struct{ f func() }{}} {
		if _, ok := key.Append(nil, 1, key.Partition{}, "SELECT $1", []driver.NamedValue{arg(v)}); ok {
			t.Errorf("%T encoded", v)
		}
	}
	type node struct{ Next *node }
	loop := &node{}
	loop.Next = loop
	if _, ok := key.Append(nil, 1, key.Partition{}, "SELECT $1", []driver.NamedValue{arg(loop)}); ok {
		t.Error("a pointer cycle encoded")
	}
}

type valuerBig struct{ n *big.Int }

func (v valuerBig) Value() (driver.Value, error) { return v.n.String(), nil }

func TestDetachArgsCopiesEverything(t *testing.T) {
	b := []byte("abc")
	ints := []int32{1, 2}
	n := 5
	named := map[string]any{"a": []byte("x")}
	type wrapper struct{ B []byte }
	args := []driver.NamedValue{arg(b), arg(ints), arg(&n), arg(named), arg(wrapper{B: []byte("w")}), arg(pgx.QueryExecModeExec)}
	before, _ := key.Append(nil, 1, key.Partition{}, "q", args)
	out, ok := key.Detach(args)
	if !ok {
		t.Fatal("not detachable")
	}
	b[0], ints[0], n = 'X', 9, 6
	named["a"].([]byte)[0] = 'Y'
	args[4].Value.(wrapper).B[0] = 'Z'
	after, _ := key.Append(nil, 1, key.Partition{}, "q", out)
	if string(before) != string(after) {
		t.Fatal("the copy changed with the caller's memory")
	}
	type hidden struct{ p *int }
	if _, ok := key.Detach([]driver.NamedValue{arg(hidden{&n})}); ok {
		t.Error("an unexported pointer was detached")
	}
	big := new(big.Int).SetInt64(12345)
	out, ok = key.Detach([]driver.NamedValue{arg(valuerBig{big})})
	if !ok || out[0].Value != "12345" {
		t.Errorf("a Valuer that cannot be copied went as %#v, %v", out[0].Value, ok)
	}
}

// TestKeyPartitionsNeverCollide: no scope, every scope (the empty one
// included), and a scope's clean and changed sessions key apart, whatever
// the statement: the scope is tagged and length-prefixed.
func TestKeyPartitionsNeverCollide(t *testing.T) {
	parts := []key.Partition{{}, {Set: true}, {Set: true, Session: true}, {Scope: "a", Set: true},
		{Scope: "a", Set: true, Session: true}, {Scope: "b", Set: true}, {Scope: "a\x00", Set: true},
		{Scope: "\x01", Set: true}, {Scope: "\x00", Set: true}, {Scope: "SELECT 1", Set: true}}
	stmts := []string{"SELECT 1", "", "a", "\x01a", "\x00SELECT 1", "\x08SELECT 1"}
	seen := map[string]string{}
	for _, p := range parts {
		for _, q := range stmts {
			k, ok := key.Append(nil, 1, p, q, nil)
			if !ok {
				t.Fatalf("%+v %q: not encodable", p, q)
			}
			what := q + " under " + p.Scope
			if prev, dup := seen[string(k)]; dup {
				t.Errorf("%q and %q share a key", prev, what)
			}
			seen[string(k)] = what
		}
	}
	// The shared tier keys by the bytes after the scope number: the
	// partition is among them.
	a, _ := key.Append(nil, 1, key.Partition{Scope: "a", Set: true}, "SELECT 1", nil)
	b, _ := key.Append(nil, 1, key.Partition{Scope: "b", Set: true}, "SELECT 1", nil)
	if bytes.Equal(a[8:], b[8:]) {
		t.Error("the shared tier's part of two scopes' keys is the same")
	}
	big := key.Partition{Scope: string(make([]byte, key.MaxBytes)), Set: true}
	if _, ok := key.Append(nil, 1, big, "SELECT 1", nil); ok {
		t.Error("a scope over the key limit was accepted")
	}
}

func TestAppendExcept(t *testing.T) {
	args := []driver.NamedValue{{Ordinal: 1, Value: int64(7)}, {Ordinal: 2, Value: "x"}}
	nilled := []driver.NamedValue{{Ordinal: 1, Value: nil}, {Ordinal: 2, Value: "x"}}
	part := key.Partition{Scope: "t", Set: true}
	want, _ := key.Append(nil, 3, part, "q", nilled)
	got, ok := key.AppendExcept(nil, 3, part, "q", args, 0)
	if !ok || string(got) != string(want) {
		t.Fatalf("AppendExcept differs from Append with the argument nil")
	}
	whole, _ := key.Append(nil, 3, part, "q", args)
	if none, _ := key.AppendExcept(nil, 3, part, "q", args, -1); string(none) != string(whole) {
		t.Fatal("skip -1 must encode every argument")
	}
	if args[0].Value != int64(7) {
		t.Fatal("the arguments were changed")
	}
}
