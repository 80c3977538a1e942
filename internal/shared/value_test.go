package shared_test

import (
	"bytes"
	"database/sql/driver"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight/internal/key"
	"github.com/sqlflight/sqlflight/internal/resultset"
	"github.com/sqlflight/sqlflight/internal/seal"
	"github.com/sqlflight/sqlflight/internal/shared"
	"github.com/sqlflight/sqlflight/internal/wire"
)

// testSecret is the fleet secret of these tests.
const testSecret = "a test fleet secret, 32 bytes.."

// FuzzDecodeShared: whatever the tier returns, decoding it never panics,
// and what decodes has consistent deadlines and result shapes.
func FuzzDecodeShared(f *testing.F) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	res := &resultset.Result{Sets: []resultset.Set{{Names: []string{"id", "label"}, Cols: make([]resultset.Column, 2),
		Vals: []driver.Value{int64(1), "a", nil, []byte("b")}, N: 2}}}
	e := shared.Entry{Res: res, Filled: now, Soft: now.Add(time.Second), Hard: now.Add(time.Minute), Last: now.Add(2 * time.Minute), Delta: time.Millisecond}
	body, err := shared.Encode(e)
	if err != nil {
		f.Fatal(err)
	}
	// The MAC is not checked, so that the fuzzer reaches the decoder.
	ring := &seal.Ring{Current: seal.Derive([]byte(testSecret)), NoVerify: true}
	good := ring.SealValue(body, "ns:", "k", 1)
	f.Add(good)
	f.Add([]byte{})
	f.Add(good[:seal.Prefix+1])
	f.Add(good[:len(good)/2])
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := shared.Open(ring, "ns:", "k", b, 1,
			wire.Limits{MaxBytes: 1 << 20, MaxRows: 1 << 10, MaxSets: 16, MaxZoneLoads: 4})
		if err != nil {
			return
		}
		if e.Soft.After(e.Hard) || e.Hard.After(e.Last) {
			t.Fatalf("deadlines out of order: %v %v %v", e.Soft, e.Hard, e.Last)
		}
		for _, rs := range e.Res.Sets {
			if len(rs.Vals) != rs.N*len(rs.Names) || len(rs.Cols) != len(rs.Names) {
				t.Fatalf("inconsistent set: %d values, %d rows, %d columns", len(rs.Vals), rs.N, len(rs.Names))
			}
		}
	})
}

func TestSharedEncodingRoundTrips(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 123, time.FixedZone("X", 3600))
	res := &resultset.Result{Mask: 0x1f, Sets: []resultset.Set{
		{Names: []string{"id", "label", "at"}, Cols: []resultset.Column{
			{ScanType: reflect.TypeFor[int64](), DBType: "INT8", Nullable: true, NullOK: true},
			{ScanType: reflect.TypeFor[string](), DBType: "TEXT", Length: 10, LengthOK: true},
			{ScanType: reflect.TypeFor[time.Time](), DBType: "TIMESTAMPTZ", Precision: 6, Scale: 0, PrecisionScaleOK: true},
		}, Vals: []driver.Value{int64(-1), "a\x00b", now, nil, "", now.UTC()}, N: 2},
		{Names: []string{"b"}, Cols: []resultset.Column{{ScanType: reflect.TypeFor[[]byte]()}}, Vals: []driver.Value{[]byte{}}, N: 1},
	}}
	e := shared.Entry{Res: res, Filled: now, Soft: now.Add(time.Second), Hard: now.Add(time.Minute), Last: now.Add(2 * time.Minute), Delta: 3 * time.Millisecond}
	ring := &seal.Ring{Current: seal.Derive([]byte(testSecret))}
	body, err := shared.Encode(e)
	if err != nil {
		t.Fatal(err)
	}
	b := ring.SealValue(body, "ns:", "k", 9)
	got, err := shared.Open(ring, "ns:", "k", bytes.Clone(b), 9, wire.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if !got.Filled.Equal(e.Filled) || !got.Soft.Equal(e.Soft) || !got.Hard.Equal(e.Hard) || !got.Last.Equal(e.Last) || got.Delta != e.Delta {
		t.Fatalf("deadlines: %+v", got)
	}
	if got.Res.Mask != res.Mask || len(got.Res.Sets) != 2 {
		t.Fatalf("%+v", got.Res)
	}
	for i := range res.Sets {
		w, g := res.Sets[i], got.Res.Sets[i]
		if !reflect.DeepEqual(w.Names, g.Names) || !reflect.DeepEqual(w.Cols, g.Cols) || w.N != g.N {
			t.Fatalf("set %d: %+v != %+v", i, g, w)
		}
		for j := range w.Vals {
			if wt, ok := w.Vals[j].(time.Time); ok {
				gt, ok := g.Vals[j].(time.Time)
				if !ok || !gt.Equal(wt) || gt.Location().String() != wt.Location().String() {
					t.Fatalf("value %d: %v != %v", j, g.Vals[j], wt)
				}
				continue
			}
			if !reflect.DeepEqual(w.Vals[j], g.Vals[j]) {
				t.Fatalf("value %d: %#v != %#v", j, g.Vals[j], w.Vals[j])
			}
		}
	}
	// A byte changed anywhere (the deadlines included), or another key or
	// version, is a miss.
	for i := range b {
		b2 := bytes.Clone(b)
		b2[i] ^= 0x55
		if _, err := shared.Open(ring, "ns:", "k", b2, 9, wire.Limits{}); !errors.Is(err, seal.ErrForged) &&
			!errors.Is(err, seal.ErrFormat) {
			t.Fatalf("value with byte %d altered: %v", i, err)
		}
	}
	for _, c := range []struct {
		key string
		v   uint64
	}{{"k2", 9}, {"k", 10}} {
		if _, err := shared.Open(ring, "ns:", c.key, bytes.Clone(b), c.v, wire.Limits{}); !errors.Is(err, seal.ErrForged) {
			t.Fatalf("read as %s v%d: %v", c.key, c.v, err)
		}
	}
	// A scan type this process does not know makes the value a miss.
	type private struct{ x int }
	res.Sets[1].Cols[0].ScanType = reflect.TypeFor[private]()
	b, err = shared.Encode(e)
	if err != nil {
		t.Fatal(err)
	}
	shared.ForgetScanType(key.TypeName(reflect.TypeFor[private]()))
	if _, err := shared.Decode(b[seal.Prefix:], wire.Limits{}); !errors.Is(err, shared.ErrUnknownScanType) {
		t.Fatalf("unknown scan type: %v", err)
	}
}

// TestLimitsAreThePolicysWithRoom: a reader's limits are its policy's (the
// defaults where it sets none), with an eighth and DecodeSlack of room for
// what the origin counts by estimate.
func TestLimitsAreThePolicysWithRoom(t *testing.T) {
	for _, c := range []struct {
		rows      int
		bytes     int64
		wantRows  int
		wantBytes int64
	}{
		{0, 0, 10, 8<<20 + 1<<20 + shared.DecodeSlack},
		{-1, -1, 10, 8<<20 + 1<<20 + shared.DecodeSlack},
		{3, 800, 3, 900 + shared.DecodeSlack},
	} {
		lim := shared.Limits(c.rows, c.bytes, 10, 8<<20)
		if lim.MaxRows != c.wantRows || lim.MaxBytes != c.wantBytes || lim.MaxSets != 0 || lim.MaxZoneLoads != 0 {
			t.Fatalf("Limits(%d, %d) = %+v, want %d rows, %d bytes", c.rows, c.bytes, lim, c.wantRows, c.wantBytes)
		}
	}
}

func BenchmarkSharedEnvelope(b *testing.B) {
	now := time.Now()
	res := &resultset.Result{Sets: []resultset.Set{{Names: []string{"id", "v", "label"}, Cols: make([]resultset.Column, 3), N: 10}}}
	for i := range 10 {
		res.Sets[0].Vals = append(res.Sets[0].Vals, int64(i), int64(i*10), fmt.Sprintf("label %d", i))
	}
	for _, v := range res.Sets[0].Vals {
		_, n, _ := resultset.CopyValue(v, true)
		res.Bytes += n
	}
	e := shared.Entry{Res: res, Filled: now, Soft: now.Add(time.Minute), Hard: now.Add(time.Hour), Last: now.Add(time.Hour)}
	const ns, key, version = "sqlflight:", "0123456789abcdef0123456789abcdef", 1 << 50
	for _, mode := range []string{"plain", "mac", "aes-gcm"} {
		ring := &seal.Ring{Current: seal.Derive([]byte(testSecret)), Encrypt: mode == "aes-gcm"}
		b.Run(mode+"/store", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				body, err := shared.Encode(e)
				if err != nil {
					b.Fatal(err)
				}
				if mode != "plain" {
					ring.SealValue(body, ns, key, version)
				}
			}
		})
		body, _ := shared.Encode(e)
		sealed := ring.SealValue(body, ns, key, version)
		b.Run(mode+"/fetch", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var err error
				if mode == "plain" {
					_, err = shared.Decode(body[seal.Prefix:], wire.Limits{})
				} else {
					_, err = shared.Open(ring, ns, key, sealed, version, wire.Limits{})
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
