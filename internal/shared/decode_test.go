package shared_test

import (
	"bytes"
	"database/sql/driver"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"reflect"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight/internal/heaptest"
	"github.com/sqlflight/sqlflight/internal/resultset"
	"github.com/sqlflight/sqlflight/internal/seal"
	"github.com/sqlflight/sqlflight/internal/shared"
	"github.com/sqlflight/sqlflight/internal/wire"
)

// The Shield's default bounds of a shared result (DefaultMaxResultRows and
// DefaultMaxResultBytes).
const (
	defaultMaxRows  = 10_000
	defaultMaxBytes = 8 << 20
)

// typicalEntry is an entry of a typical n-row result of six columns, as an
// origin fills it.
func typicalEntry(n int) shared.Entry {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rs := resultset.Set{
		Names: []string{"id", "email", "balance", "active", "created_at", "avatar"},
		Cols: []resultset.Column{
			{ScanType: reflect.TypeFor[int64](), DBType: "INT8", NullOK: true},
			{ScanType: reflect.TypeFor[string](), DBType: "TEXT", Nullable: true, NullOK: true},
			{ScanType: reflect.TypeFor[float64](), DBType: "NUMERIC", Precision: 12, Scale: 2, PrecisionScaleOK: true},
			{ScanType: reflect.TypeFor[bool](), DBType: "BOOL"},
			{ScanType: reflect.TypeFor[time.Time](), DBType: "TIMESTAMPTZ"},
			{ScanType: reflect.TypeFor[[]byte](), DBType: "BYTEA", Length: 1 << 20, LengthOK: true},
		},
		N: n,
	}
	for i := range n {
		var avatar driver.Value
		if i%3 != 0 {
			avatar = make([]byte, 64)
		}
		rs.Vals = append(rs.Vals, int64(100000+i), fmt.Sprintf("user%02d@example.com", i), float64(i)*12.34,
			i%2 == 0, now.Add(time.Duration(i)*time.Hour), avatar)
	}
	res := &resultset.Result{Mask: 0x1f, Sets: []resultset.Set{rs}}
	return shared.Entry{Res: res, Filled: now, Soft: now.Add(time.Second), Hard: now.Add(time.Minute),
		Last: now.Add(2 * time.Minute), Delta: time.Millisecond}
}

// BenchmarkDecodeShared10 decodes a typical 10-row value read from the
// shared tier, its seal checked.
func BenchmarkDecodeShared10(b *testing.B) {
	buf := sharedBody(b, typicalEntry(10))
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := shared.Decode(buf, wire.Limits{MaxBytes: defaultMaxBytes, MaxRows: defaultMaxRows}); err != nil {
			b.Fatal(err)
		}
	}
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// sealWire makes a wire payload (format version 1) of body, checksummed.
func sealWire(body []byte) []byte {
	b := append([]byte("SQFW\x01"), body...)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// sharedBody is the body of e's tier value: what Decode reads once
// the value's seal is checked.
func sharedBody(t testing.TB, e shared.Entry) []byte {
	t.Helper()
	b, err := shared.Encode(e)
	if err != nil {
		t.Fatal(err)
	}
	return b[seal.Prefix:]
}

// sharedValueOf is the body of a tier value of a valid header around the
// wire payload w, as Decode reads it below the tier's seal: what an
// attacker who can write to the tier, or who has the secret, could make.
func sharedValueOf(t testing.TB, w []byte) []byte {
	t.Helper()
	e := typicalEntry(0)
	e.Res.Sets = nil
	good := sharedBody(t, e)
	empty, err := wire.Encode(nil, &wire.Result{Mask: e.Res.Mask})
	if err != nil {
		t.Fatal(err)
	}
	return append(good[:len(good)-len(empty):len(good)-len(empty)], w...)
}

// Crafted wire bodies (see the format in package wire).
const (
	wireBytes     = 6
	wireTime      = 8
	wireZoneNamed = 3
)

func emptySetsBody(n int) []byte {
	b := binary.AppendUvarint([]byte{0}, uint64(n))
	return append(b, bytes.Repeat([]byte{0, 0}, n)...)
}

// oneColumnBody is one set of one column (no name, no types) of rows rows,
// the values appended by value.
func oneColumnBody(rows int, value func(b []byte, i int) []byte) []byte {
	b := binary.AppendUvarint([]byte{0, 1, 1, 0, 0, 0, 0, 0, 0, 0}, uint64(rows))
	for i := range rows {
		b = value(b, i)
	}
	return b
}

func unknownZone(b []byte, i int) []byte {
	b = append(b, wireTime, 0, 0, wireZoneNamed)
	name := fmt.Sprintf("Nowhere/Z%07d", i)
	b = binary.AppendUvarint(b, uint64(len(name)))
	b = append(b, name...)
	b = append(b, 1, 'X')
	return binary.AppendVarint(b, 60)
}

// A reader with the default policy (8 MiB, 10,000 rows) rejects crafted
// tier values cheaply: 8 MB of empty sets (which cost 1.1 GB to read and
// counted as nothing in CacheBytes), a 30 MB column, and 10,000 rows of 20
// values each naming a zone of its own that does not exist (200,000 tz
// database lookups, seconds of CPU, per read). This is the decode path
// below whatever authenticates tier values: the values are what an
// attacker who can write to the tier would need them to be.
func TestDecodeSharedBombs(t *testing.T) {
	lim := shared.Limits(0, 0, defaultMaxRows, defaultMaxBytes)
	if lim.MaxBytes != defaultMaxBytes+defaultMaxBytes/8+shared.DecodeSlack || lim.MaxRows != defaultMaxRows {
		t.Fatalf("limits %+v", lim)
	}
	// 10,000 rows of 20 columns of unknown zones.
	wide := binary.AppendUvarint([]byte{0, 1}, 20)
	for range 20 {
		wide = append(wide, 0, 0, 0, 0, 0, 0, 0)
	}
	wide = binary.AppendUvarint(wide, 10_000)
	for i := range 200_000 {
		wide = unknownZone(wide, i)
	}
	// Each is rejected before it allocates much (the zones only once the
	// values' slots, within MaxBytes, are made).
	cases := []struct {
		name  string
		w     []byte
		alloc uint64
	}{
		{"8 MB of empty sets", sealWire(emptySetsBody(4_000_000)), 16 << 10},
		{"30 MB column", sealWire(oneColumnBody(1, func(b []byte, _ int) []byte {
			b = binary.AppendUvarint(append(b, wireBytes), 30<<20)
			return append(b, make([]byte, 30<<20)...)
		})), 16 << 10},
		{"200,000 unknown zones", sealWire(wide), 4 << 20},
	}
	for _, c := range cases {
		v := sharedValueOf(t, c.w)
		var err error
		lookups := wire.ZoneLookups()
		n := heaptest.Allocated(func() { _, err = shared.Decode(v, lim) })
		lookups = wire.ZoneLookups() - lookups
		t.Logf("%s (%d bytes): %v; %d bytes allocated, %d zone lookups", c.name, len(v), err, n, lookups)
		if !errors.Is(err, wire.ErrLimit) {
			t.Errorf("%s: %v, want wire.ErrLimit", c.name, err)
		}
		if n > c.alloc {
			t.Errorf("%s: rejecting it allocated %d bytes", c.name, n)
		}
		if lookups > wire.DefaultMaxZoneLoads {
			t.Errorf("%s: %d zone lookups", c.name, lookups)
		}
	}
}

// A value longer than the reader's limits is refused before its seal is
// checked (a forged seal is not even noticed), and one within them is not.
func TestOpenSharedRefusesLongValuesFirst(t *testing.T) {
	ring := &seal.Ring{Current: seal.Derive([]byte(testSecret))}
	lim := wire.Limits{MaxBytes: 1 << 20}
	long := make([]byte, 1<<20+shared.Framing+1)
	if _, err := shared.Open(ring, "ns:", "k", long, 1, lim); !errors.Is(err, wire.ErrLimit) {
		t.Fatalf("long value: %v, want wire.ErrLimit", err)
	}
	short := make([]byte, 1<<20)
	if _, err := shared.Open(ring, "ns:", "k", short, 1, lim); err == nil || errors.Is(err, wire.ErrLimit) {
		t.Fatalf("value within the limit: %v, want the seal's error", err)
	}
	// A value near the limits, encrypted, is read.
	e := typicalEntry(1)
	e.Res.Sets[0].Vals[5] = make([]byte, 1<<20-4096)
	body := sharedBody(t, e)
	ring.Encrypt = true
	sealed := ring.SealValue(append(make([]byte, seal.Prefix), body...), "ns:", "k", 1)
	got, err := shared.Open(ring, "ns:", "k", sealed, 1, lim)
	if err != nil {
		t.Fatalf("value of %d bytes: %v", len(sealed), err)
	}
	if got.Res.Bytes > lim.MaxBytes {
		t.Fatalf("%d bytes read under a limit of %d", got.Res.Bytes, lim.MaxBytes)
	}
}

// The size an entry read from the tier counts in CacheBytes is the memory
// it holds, measured on the heap (the entry and result headers, and the
// cache's own bookkeeping, are the Shield's to count).
func TestDecodeSharedCost(t *testing.T) {
	many := typicalEntry(0)
	many.Res.Sets = make([]resultset.Set, 1000)
	wide := typicalEntry(500)
	for _, c := range []struct {
		name string
		e    shared.Entry
	}{{"10 rows", typicalEntry(10)}, {"500 rows", wide}, {"1,000 empty sets", many}} {
		v := sharedBody(t, c.e)
		var err error
		// Other goroutines of the test binary may allocate or free while
		// it measures: take the best of three.
		var est, real float64
		for range 3 {
			var e shared.Entry
			real = heaptest.Retained(1000, func() any {
				if e, err = shared.Decode(v, wire.Limits{}); err != nil {
					t.Fatal(err)
				}
				return e
			}) - float64(reflect.TypeFor[shared.Entry]().Size()+reflect.TypeFor[resultset.Result]().Size())
			if est = float64(e.Res.Bytes); est >= 0.75*real && est <= 1.25*real {
				break
			}
		}
		t.Logf("%s: counted %.0f bytes, holds %.0f (%.2f)", c.name, est, real, est/real)
		if est < 0.75*real || est > 1.25*real {
			t.Errorf("%s: counted %.0f bytes, holds %.0f", c.name, est, real)
		}
	}
}
