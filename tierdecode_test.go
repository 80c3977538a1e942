package sqlflight

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
	"github.com/sqlflight/sqlflight/internal/wire"
)

// typicalEntry is an entry of a typical n-row result of six columns, as an
// origin fills it.
func typicalEntry(n int) *entry {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rs := resultSet{
		Names: []string{"id", "email", "balance", "active", "created_at", "avatar"},
		Cols: []column{
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
	res := &result{Mask: 0x1f, Sets: []resultSet{rs}}
	return &entry{res: res, filled: now, soft: now.Add(time.Second), hard: now.Add(time.Minute),
		last: now.Add(2 * time.Minute), delta: time.Millisecond}
}

// BenchmarkDecodeShared10 decodes a typical 10-row value read from the
// shared tier, its seal checked.
func BenchmarkDecodeShared10(b *testing.B) {
	buf := sharedBody(b, typicalEntry(10))
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decodeShared(buf, wire.Limits{MaxBytes: DefaultMaxResultBytes, MaxRows: DefaultMaxResultRows}); err != nil {
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

// sharedBody is the body of e's tier value: what decodeShared reads once
// the value's seal is checked.
func sharedBody(t testing.TB, e *entry) []byte {
	t.Helper()
	b, err := encodeShared(e)
	if err != nil {
		t.Fatal(err)
	}
	return b[seal.Prefix:]
}

// sharedValueOf is the body of a tier value of a valid header around the
// wire payload w, as decodeShared reads it below the tier's seal: what an
// attacker who can write to the tier, or who has the secret, could make.
func sharedValueOf(t testing.TB, w []byte) []byte {
	t.Helper()
	e := typicalEntry(0)
	e.res.Sets = nil
	good := sharedBody(t, e)
	empty, err := wire.Encode(nil, &wire.Result{Mask: e.res.Mask})
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
	s := New(Options{})
	lim := s.decodeLimits(Policy{})
	if lim.MaxBytes != DefaultMaxResultBytes+DefaultMaxResultBytes/8+decodeSlack || lim.MaxRows != DefaultMaxResultRows {
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
		n := heaptest.Allocated(func() { _, err = decodeShared(v, lim) })
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
	long := SharedValue{Data: make([]byte, 1<<20+sharedFraming+1), Version: 1}
	if _, err := openShared(ring, "ns:", "k", long, lim); !errors.Is(err, wire.ErrLimit) {
		t.Fatalf("long value: %v, want wire.ErrLimit", err)
	}
	short := SharedValue{Data: make([]byte, 1<<20), Version: 1}
	if _, err := openShared(ring, "ns:", "k", short, lim); err == nil || errors.Is(err, wire.ErrLimit) {
		t.Fatalf("value within the limit: %v, want the seal's error", err)
	}
	// A value near the limits, encrypted, is read.
	e := typicalEntry(1)
	e.res.Sets[0].Vals[5] = make([]byte, 1<<20-4096)
	body := sharedBody(t, e)
	ring.Encrypt = true
	sealed := ring.SealValue(append(make([]byte, seal.Prefix), body...), "ns:", "k", 1)
	got, err := openShared(ring, "ns:", "k", SharedValue{Data: sealed, Version: 1}, lim)
	if err != nil {
		t.Fatalf("value of %d bytes: %v", len(sealed), err)
	}
	if got.res.Bytes > lim.MaxBytes {
		t.Fatalf("%d bytes read under a limit of %d", got.res.Bytes, lim.MaxBytes)
	}
}

// The reader's own policy bounds what it reads from the tier: a value its
// policy would not have shared from its own origin is a miss.
func TestDecodeSharedPolicyLimits(t *testing.T) {
	s := New(Options{MaxResultRows: 100, MaxResultBytes: 1 << 20})
	v := sharedBody(t, typicalEntry(10))
	big := typicalEntry(1)
	big.res.Sets[0].Vals[5] = make([]byte, 200<<10)
	vbig := sharedBody(t, big)
	for _, c := range []struct {
		pol      Policy
		v        []byte
		rejected bool
	}{
		{Policy{}, v, false},
		{Policy{MaxRows: 5}, v, true},
		{Policy{MaxRows: 10}, v, false},
		{Policy{}, vbig, false},
		{Policy{MaxBytes: 100 << 10}, vbig, true},
		{Policy{MaxRows: 1000, MaxBytes: 300 << 10}, vbig, false},
	} {
		_, err := decodeShared(c.v, s.decodeLimits(c.pol))
		if c.rejected != errors.Is(err, wire.ErrLimit) || (!c.rejected && err != nil) {
			t.Errorf("policy %+v, %d bytes: %v", c.pol, len(c.v), err)
		}
	}
}

// The size an entry read from the tier counts in CacheBytes is the memory
// it holds, measured on the heap (the entry and result headers and the
// cache's own bookkeeping are entryOverhead's).
func TestDecodeSharedCost(t *testing.T) {
	many := typicalEntry(0)
	many.res.Sets = make([]resultSet, 1000)
	wide := typicalEntry(500)
	for _, c := range []struct {
		name string
		e    *entry
	}{{"10 rows", typicalEntry(10)}, {"500 rows", wide}, {"1,000 empty sets", many}} {
		v := sharedBody(t, c.e)
		var err error
		// Other goroutines of the test binary may allocate or free while
		// it measures: take the best of three.
		var est, real float64
		for range 3 {
			var e *entry
			real = heaptest.Retained(1000, func() any {
				if e, err = decodeShared(v, wire.Limits{}); err != nil {
					t.Fatal(err)
				}
				return e
			}) - float64(reflect.TypeFor[entry]().Size()+reflect.TypeFor[result]().Size())
			if est = float64(e.res.Bytes); est >= 0.75*real && est <= 1.25*real {
				break
			}
		}
		t.Logf("%s: counted %.0f bytes, holds %.0f (%.2f)", c.name, est, real, est/real)
		if est < 0.75*real || est > 1.25*real {
			t.Errorf("%s: counted %.0f bytes, holds %.0f", c.name, est, real)
		}
	}
}

// TestResultsWithinTheLimitDecode: a result the origin judged within a
// byte limit decodes from the tier within the same policy's limit, whatever
// its shape: the origin counts values as the decoder charges them.
func TestResultsWithinTheLimitDecode(t *testing.T) {
	const limit = 64 << 10
	shapes := map[string]func(i int) []driver.Value{
		"ints":          func(i int) []driver.Value { return []driver.Value{int64(i)} },
		"short strings": func(i int) []driver.Value { return []driver.Value{"ab", int64(i), nil, true} },
		"empty bytes":   func(i int) []driver.Value { return []driver.Value{[]byte{}, []byte(nil)} },
		"times":         func(i int) []driver.Value { return []driver.Value{time.Unix(int64(i), 0).UTC()} },
	}
	for name, row := range shapes {
		t.Run(name, func(t *testing.T) {
			// As many rows as the origin accepts under limit.
			var rows [][]driver.Value
			for n := int64(0); ; {
				r := row(len(rows))
				for _, v := range r {
					_, sz, _ := resultset.CopyValue(v, true)
					n += sz
				}
				if n > limit-int64(len(r))*96 {
					break
				}
				rows = append(rows, r)
			}
			cols := make([]string, len(rows[0]))
			for i := range cols {
				cols[i] = fmt.Sprintf("c%d", i)
			}
			res, handoff, err := materialize(&fakeRows{cols: cols, rows: rows}, limits{Rows: 1 << 30, Bytes: limit})
			if err != nil || handoff != nil {
				t.Fatalf("the origin refused %d rows: %v", len(rows), err)
			}
			now := time.Now()
			e := &entry{res: res, filled: now, soft: now.Add(time.Second), hard: now.Add(time.Minute), last: now.Add(time.Minute)}
			s := New()
			if _, err := decodeShared(sharedBody(t, e), wire.Limits{MaxBytes: 1 << 30}); err != nil {
				t.Fatalf("unlimited: %v", err)
			}
			if _, err := decodeShared(sharedBody(t, e), s.decodeLimits(Policy{MaxBytes: limit})); err != nil {
				t.Fatalf("%d rows the origin accepted (%d bytes counted) refused from the tier: %v", len(rows), res.Bytes, err)
			}
		})
	}
}
