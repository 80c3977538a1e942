package hotset_test

import (
	"bytes"
	"database/sql/driver"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight/internal/hotset"
)

var lim = hotset.Limits{Text: 16 << 10, Keys: 8, ArgBytes: 1 << 10}

// TestArgsComeBackExactly: every type the format names decodes to the very
// Go value it was encoded from; anything else is "null".
func TestArgsComeBackExactly(t *testing.T) {
	at := time.Date(2026, 12, 3, 10, 0, 0, 123456789, time.FixedZone("x", -5*3600))
	values := []driver.Value{nil, int64(-42), 3.25, math.Inf(-1), true, "it's", []byte{0, 255}, []byte{}, []byte(nil), at,
		int(7), int8(-8), int16(16), int32(-32), uint(1), uint16(16), uint32(32), uint64(math.MaxUint64), float32(1.5)}
	enc := hotset.EncodeArgs(values)
	got, ok := hotset.DecodeArgs(enc, lim.ArgBytes)
	if !ok {
		t.Fatalf("DecodeArgs refused %+v", enc)
	}
	for i, v := range values {
		if tm, isTime := v.(time.Time); isTime {
			if g, _ := got[i].(time.Time); !g.Equal(tm) || g.Format(time.RFC3339Nano) != tm.Format(time.RFC3339Nano) {
				t.Errorf("time %v came back as %v", tm, got[i])
			}
			continue
		}
		if !reflect.DeepEqual(got[i], v) || reflect.TypeOf(got[i]) != reflect.TypeOf(v) {
			t.Errorf("%T %#v came back as %T %#v", v, v, got[i], got[i])
		}
	}
	if e := hotset.EncodeArg(struct{}{}); e.T != "null" || e.V != nil {
		t.Errorf("an unknown type encodes as %+v", e)
	}
	for _, bad := range []hotset.Value{{T: "int64"}, {T: "what", V: ptr("1")}, {T: "int8", V: ptr("300")}, {T: "null", V: ptr("x")}, {T: "bytes", V: ptr("!!")}} {
		if _, err := hotset.DecodeArg(bad); err == nil {
			t.Errorf("%+v decoded", bad)
		}
	}
	if _, ok := hotset.DecodeArgs([]hotset.Value{hotset.EncodeArg(strings.Repeat("x", 1025))}, lim.ArgBytes); ok {
		t.Error("arguments over the byte bound decoded")
	}
	if _, ok := hotset.DecodeArgs(make([]hotset.Value, hotset.MaxArgs+1), lim.ArgBytes); ok {
		t.Error("more than MaxArgs arguments decoded")
	}
}

func ptr(s string) *string { return &s }

func sample() *hotset.Set {
	return &hotset.Set{Format: hotset.Format, Version: hotset.Version, Statements: []hotset.Statement{
		{Fingerprint: "a", Text: "SELECT 1 WHERE $1", Calls: 10, Keys: []hotset.KeyArgs{{Calls: 5, Args: hotset.EncodeArgs([]driver.Value{int64(1)})}}},
		{Fingerprint: "b", Text: "SELECT 2 WHERE $1", Calls: 20, Keys: []hotset.KeyArgs{{Calls: 7, Args: hotset.EncodeArgs([]driver.Value{"x"})}}},
	}}
}

// TestSealOpens: a sealed set opens under its key (or the previous one
// among keys) and nowhere else; a changed byte, an unsealed file without
// trust, and a Shield without keys are ErrUnsealed; trust opens both.
func TestSealOpens(t *testing.T) {
	key, other := hotset.SealKey("a secret of thirty-two bytes!!!!"), hotset.SealKey("another secret of 32 bytes......")
	sealed := hotset.Seal(sample(), key)
	for _, keys := range [][][]byte{{key}, {other, key}} {
		body, err := hotset.Open(sealed, keys, false)
		if err != nil {
			t.Fatalf("keys %d: %v", len(keys), err)
		}
		if hs, err := hotset.Parse(body, 32, 8, lim); err != nil || len(hs.Statements) != 2 || hs.Statements[0].Keys[0].Raw[0] != int64(1) {
			t.Fatalf("the sealed body parses as %+v, %v", hs, err)
		}
	}
	if _, err := hotset.Open(sealed, [][]byte{other}, false); !errors.Is(err, hotset.ErrUnsealed) {
		t.Errorf("another key: %v", err)
	}
	if _, err := hotset.Open(sealed, nil, false); !errors.Is(err, hotset.ErrUnsealed) {
		t.Errorf("no keys: %v", err)
	}
	tampered := bytes.Replace(sealed, []byte("SELECT 2"), []byte("SELECT 3"), 1)
	if _, err := hotset.Open(tampered, [][]byte{key}, false); !errors.Is(err, hotset.ErrUnsealed) {
		t.Errorf("a changed statement: %v", err)
	}
	if _, err := hotset.Open(tampered, nil, true); err != nil {
		t.Errorf("trusted: %v", err)
	}
	plain := []byte(`{"format": "sqlflight-hotset", "version": 1, "statements": []}`)
	if _, err := hotset.Open(plain, [][]byte{key}, false); !errors.Is(err, hotset.ErrUnsealed) {
		t.Errorf("unsealed: %v", err)
	}
	if _, err := hotset.Open([]byte(`{"format": "other"}`), nil, true); !errors.Is(err, hotset.ErrBad) {
		t.Errorf("another format: %v", err)
	}
	if _, err := hotset.Read(bytes.NewReader(make([]byte, hotset.MaxBytes+1)), nil, true, 32, 8, lim); !errors.Is(err, hotset.ErrBad) {
		t.Errorf("over MaxBytes: %v", err)
	}
}

// TestParseKeepsWithinLimits: statements and keys past n, m and the
// limits are dropped, and so is a statement left without keys.
func TestParseKeepsWithinLimits(t *testing.T) {
	hs := sample()
	hs.Statements = append(hs.Statements, hotset.Statement{Text: strings.Repeat("x", lim.Text+1), Keys: hs.Statements[0].Keys},
		hotset.Statement{Text: "SELECT 4", Keys: []hotset.KeyArgs{{Args: []hotset.Value{{T: "bad"}}}}})
	body := hotset.Seal(hs, hotset.SealKey("k"))
	got, err := hotset.Read(bytes.NewReader(body), nil, true, 32, 8, lim)
	if err != nil || len(got.Statements) != 2 {
		t.Fatalf("%v %+v", err, got)
	}
	if got, err := hotset.Read(bytes.NewReader(body), nil, true, 1, 8, lim); err != nil || len(got.Statements) != 1 {
		t.Fatalf("n = 1: %v %+v", err, got)
	}
}

// TestMerge: statements meet by fingerprint and text, keys by arguments,
// each with the larger count; the hottest are kept.
func TestMerge(t *testing.T) {
	a, b := sample(), sample()
	b.Statements[0].Calls, b.Statements[0].Keys[0].Calls = 30, 9
	b.Statements[0].Keys = append(b.Statements[0].Keys, hotset.KeyArgs{Calls: 1, Args: hotset.EncodeArgs([]driver.Value{int64(2)})})
	m := hotset.Merge(a, b, 1, 1)
	if len(m.Statements) != 1 || m.Statements[0].Fingerprint != "a" || m.Statements[0].Calls != 30 ||
		len(m.Statements[0].Keys) != 1 || m.Statements[0].Keys[0].Calls != 9 {
		t.Fatalf("merged: %+v", m.Statements)
	}
}
