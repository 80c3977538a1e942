package hotset_test

import (
	"bytes"
	"database/sql/driver"
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight/internal/hotset"
	"github.com/sqlflight/sqlflight/internal/key"
)

func TestMergeHotSets(t *testing.T) {
	key := func(calls uint64, v int64) hotset.KeyArgs {
		return hotset.KeyArgs{Calls: calls, Args: hotset.EncodeArgs([]driver.Value{v})}
	}
	a := &hotset.Set{Statements: []hotset.Statement{{Fingerprint: "f", Text: "q", Calls: 10, Keys: []hotset.KeyArgs{key(5, 1), key(3, 2)}}}}
	b := &hotset.Set{Statements: []hotset.Statement{
		{Fingerprint: "f", Text: "q", Calls: 7, Keys: []hotset.KeyArgs{key(9, 2)}},
		{Fingerprint: "g", Text: "r", Calls: 20, Keys: []hotset.KeyArgs{key(1, 1)}},
	}}
	m := hotset.Merge(a, b, 32, 8)
	if len(m.Statements) != 2 || m.Statements[0].Fingerprint != "g" {
		t.Fatalf("%+v", m)
	}
	f := m.Statements[1]
	if f.Calls != 10 || len(f.Keys) != 2 || f.Keys[0].Calls != 9 || *f.Keys[0].Args[0].V != "2" {
		t.Fatalf("%+v", f)
	}
	if m2 := hotset.Merge(m, b, 32, 8); m2.Statements[1].Calls != 10 {
		t.Fatal("publishing again counted twice")
	}
}

func TestHotSetArgTypes(t *testing.T) {
	at := time.Date(2024, 1, 2, 3, 4, 5, 6, time.FixedZone("", -3*3600))
	vals := []driver.Value{int64(math.MinInt64), math.NaN(), math.Inf(1), -0.0, 1e-300, true, "x\x00y", []byte(nil), []byte{},
		at, nil, int(-5), int8(-8), int16(16), int32(-32), uint(5), uint16(16), uint32(32), uint64(math.MaxUint64), float32(0.1)}
	data, err := json.Marshal(hotset.EncodeArgs(vals))
	if err != nil {
		t.Fatal(err)
	}
	var back []hotset.Value
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	raw, ok := hotset.DecodeArgs(back, hotset.Kept.ArgBytes)
	if !ok {
		t.Fatalf("%s did not decode", data)
	}
	for i, v := range vals {
		k1, _ := key.AppendValue(nil, v)
		k2, _ := key.AppendValue(nil, raw[i])
		if !bytes.Equal(k1, k2) {
			t.Errorf("argument %d: %#v came back as %#v", i, v, raw[i])
		}
	}
}
