package wire

import (
	"bytes"
	"database/sql/driver"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight/internal/heaptest"
)

// policy are the limits of a reader with sqlflight's default policy.
var policy = Limits{MaxBytes: 8 << 20, MaxRows: 10_000}

// emptySetsBomb is a payload of n empty sets: 2 bytes each.
func emptySetsBomb(n int) []byte {
	body := binary.AppendUvarint([]byte{0}, uint64(n))
	body = append(body, bytes.Repeat([]byte{0, 0}, n)...)
	return seal(Version, body...)
}

// bigValueBomb is a payload of one row of one column: a string or []byte
// value of n bytes.
func bigValueBomb(tag byte, n int) []byte {
	body := []byte{0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, tag}
	body = binary.AppendUvarint(body, uint64(n))
	body = append(body, make([]byte, n)...)
	return seal(Version, body...)
}

// zonesBomb is a payload of n rows of one column: times whose named zone
// is unknown, each of its own name when distinct is set (all of one name
// otherwise), all of abbreviation "X" and offset 60.
func zonesBomb(n int, distinct bool) []byte {
	body := []byte{0, 1, 1, 0, 0, 0, 0, 0, 0, 0}
	body = binary.AppendUvarint(body, uint64(n))
	for i := range n {
		body = append(body, tagTime, 0, 0, zoneNamed)
		name := "Nowhere/Zone"
		if distinct {
			name = fmt.Sprintf("Nowhere/Z%07d", i)
		}
		body = appendString(body, name)
		body = appendString(body, "X")
		body = binary.AppendVarint(body, 60)
	}
	return seal(Version, body...)
}

// A payload of 8 MB of empty sets decoded to 4 million sets (224 MB for
// the wire structs alone, more for the cache's copy) and was counted as
// almost nothing. Now the set count is capped, and each set is paid for
// before it is allocated.
func TestDecodeEmptySetsBomb(t *testing.T) {
	b := emptySetsBomb(4_000_000)
	if len(b) < 8e6 || int64(len(b)) > policy.MaxBytes {
		t.Fatalf("bomb of %d bytes", len(b))
	}
	for _, lim := range []Limits{policy, {}, {MaxBytes: policy.MaxBytes, MaxSets: math.MaxInt32}} {
		var err error
		n := heaptest.Allocated(func() { _, err = Decode(b, lim) })
		if !errors.Is(err, ErrLimit) {
			t.Errorf("%+v: %v, want ErrLimit", lim, err)
		}
		if n > 64<<10 {
			t.Errorf("%+v: rejecting it allocated %d bytes", lim, n)
		}
	}
	// Sets within the limits are paid for.
	r, err := Decode(emptySetsBomb(1000), policy)
	if err != nil {
		t.Fatal(err)
	}
	if r.Bytes != 1000*SetBytes {
		t.Fatalf("1000 empty sets count %d bytes, want %d", r.Bytes, 1000*SetBytes)
	}
}

// Rows of no column take no input: their count is bounded by MaxRows.
func TestDecodeZeroColumnRows(t *testing.T) {
	b := seal(Version, 0, 2, 0, 0x80, 0x80, 0x80, 0x80, 0x07, 0, 0x80, 0x80, 0x80, 0x80, 0x07)
	if _, err := Decode(b, policy); !errors.Is(err, ErrLimit) {
		t.Fatalf("2×2^31 rows of no column: %v", err)
	}
	// Rows count across sets.
	body := binary.AppendUvarint([]byte{0, 2, 0}, 10_000)
	b = seal(Version, binary.AppendUvarint(append(body, 0), 5_000)...)
	if _, err := Decode(b, policy); !errors.Is(err, ErrLimit) {
		t.Fatalf("15,000 rows: %v", err)
	}
	if _, err := Decode(b, Limits{MaxRows: 15_000}); err != nil {
		t.Fatalf("15,000 rows within the limit: %v", err)
	}
}

// A 30 MB column was decoded although the reader shares at most 8 MiB.
// Now a payload longer than MaxBytes is rejected before its checksum is
// even computed, and a value that would take more memory than is left is
// rejected before it is copied.
func TestDecodeLargeValueBomb(t *testing.T) {
	for _, tag := range []byte{tagBytes, tagString} {
		b := bigValueBomb(tag, 30<<20)
		var err error
		n := heaptest.Least(3, func() { _, err = Decode(b, policy) })
		if !errors.Is(err, ErrLimit) {
			t.Errorf("30 MB value (tag %d): %v, want ErrLimit", tag, err)
		}
		if n > 4<<10 {
			t.Errorf("30 MB value (tag %d): rejecting it allocated %d bytes", tag, n)
		}
		// Below the payload limit, the value's memory is checked.
		b = bigValueBomb(tag, 7<<20)
		n = heaptest.Least(3, func() { _, err = Decode(b, Limits{MaxBytes: 6 << 20}) })
		if !errors.Is(err, ErrLimit) {
			t.Errorf("7 MiB value, 6 MiB limit (tag %d): %v, want ErrLimit", tag, err)
		}
		if n > 4<<10 {
			t.Errorf("7 MiB value (tag %d): rejecting it allocated %d bytes", tag, n)
		}
	}
	// Values that take more memory than input (an empty string takes 2
	// bytes of input, 32 of memory) cannot get past MaxBytes either.
	body := binary.AppendUvarint([]byte{0, 1, 1, 0, 0, 0, 0, 0, 0, 0}, 100_000)
	for range 100_000 {
		body = append(body, tagString, 1, 'x')
	}
	b := seal(Version, body...)
	var (
		r   *Result
		err error
	)
	lim := Limits{MaxBytes: 1 << 20, MaxRows: 1 << 20}
	n := heaptest.Allocated(func() { r, err = Decode(b, lim) })
	if !errors.Is(err, ErrLimit) || r != nil {
		t.Fatalf("100,000 strings in 1 MiB: %v", err)
	}
	if n > 1<<20+64<<10 {
		t.Fatalf("rejecting 100,000 strings allocated %d bytes, limit 1 MiB", n)
	}
	if _, err := Decode(b, Limits{MaxBytes: 4 << 20, MaxRows: 1 << 20}); err != nil {
		t.Fatalf("100,000 strings in 4 MiB: %v", err)
	}
}

// A payload of 200,000 unknown zone names cost 200,000 tz database lookups
// (about 10 s of CPU) per read. Now the outcome of a lookup is remembered
// and one decode looks up at most MaxZoneLoads names it does not know.
func TestDecodeUnknownZonesBomb(t *testing.T) {
	b := zonesBomb(200_000, true)
	lim := Limits{MaxBytes: 64 << 20, MaxRows: 1 << 20}
	for read := range 3 {
		before := zones.loads.Load()
		_, err := Decode(b, lim)
		if n := zones.loads.Load() - before; n > DefaultMaxZoneLoads {
			t.Fatalf("read %d: %d zone lookups, budget %d", read, n, DefaultMaxZoneLoads)
		}
		if !errors.Is(err, ErrLimit) {
			t.Fatalf("read %d: %v, want ErrLimit", read, err)
		}
	}
	zones.mu.Lock()
	n := len(zones.known)
	zones.mu.Unlock()
	if n > maxZonesMemo {
		t.Fatalf("memo holds %d names, bound %d", n, maxZonesMemo)
	}

	// One unknown name, 200,000 times: one lookup, then remembered, and
	// one fallback location for all of them.
	b = zonesBomb(200_000, false)
	before := zones.loads.Load()
	r, err := Decode(b, lim)
	if err != nil {
		t.Fatal(err)
	}
	if n := zones.loads.Load() - before; n > 1 {
		t.Fatalf("%d lookups of one name", n)
	}
	v0, v1 := r.Sets[0].Values[0].(time.Time), r.Sets[0].Values[199_999].(time.Time)
	if v0.Location() != v1.Location() || v0.Location().String() != "X" {
		t.Fatalf("fallback locations %p %p %q", v0.Location(), v1.Location(), v0.Location())
	}
	before = zones.loads.Load()
	if _, err := Decode(b, lim); err != nil {
		t.Fatal(err)
	}
	if n := zones.loads.Load() - before; n != 0 {
		t.Fatalf("%d lookups of a remembered name", n)
	}

	// Names too long for the tz database are never looked up.
	body := []byte{0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, tagTime, 0, 0, zoneNamed}
	body = appendString(body, string(bytes.Repeat([]byte("a/"), 1000)))
	body = binary.AppendVarint(appendString(body, "X"), 0)
	before = zones.loads.Load()
	if _, err := Decode(seal(Version, body...), Limits{MaxZoneLoads: 1}); err != nil {
		t.Fatal(err)
	}
	if n := zones.loads.Load() - before; n != 0 {
		t.Fatalf("%d lookups of a 2,000-byte name", n)
	}
}

// A real zone still decodes as itself under the budget, and the budget
// counts only names the process has not looked up yet.
func TestDecodeZoneBudget(t *testing.T) {
	berlin := mustLoad(t, "Europe/Berlin")
	names := []string{"America/Sao_Paulo", "Asia/Tokyo", "Africa/Nairobi"}
	var vals []driver.Value
	for _, n := range names {
		vals = append(vals, time.Unix(1e9, 0).In(mustLoad(t, n)))
	}
	vals = append(vals, time.Unix(1e9, 0).In(berlin))
	b, err := Encode(nil, oneColumn(vals...))
	if err != nil {
		t.Fatal(err)
	}
	loadLocation("Europe/Berlin")
	// Forget the three others, then allow two lookups: not enough.
	zones.mu.Lock()
	for _, n := range names {
		delete(zones.known, n)
	}
	zones.mu.Unlock()
	if _, err := Decode(b, Limits{MaxZoneLoads: 2}); !errors.Is(err, ErrLimit) {
		t.Fatalf("4 zones, 3 unknown, budget 2: %v", err)
	}
	// The two it looked up are remembered: the next read needs one lookup.
	before := zones.loads.Load()
	r, err := Decode(b, Limits{MaxZoneLoads: 1})
	if err != nil {
		t.Fatalf("4 zones, 1 unknown, budget 1: %v", err)
	}
	if n := zones.loads.Load() - before; n != 1 {
		t.Fatalf("%d lookups, want 1", n)
	}
	for i, v := range r.Sets[0].Values {
		if !sameValue(v, vals[i]) {
			t.Fatalf("value %d: %v != %v", i, v, vals[i])
		}
	}
}

// TestDecodeBytesIsMemory compares Result.Bytes with the memory a decoded
// result really keeps, measured on the heap over many copies.
func TestDecodeBytesIsMemory(t *testing.T) {
	ref := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	long := func(n int) []driver.Value {
		vals := make([]driver.Value, n)
		for i := range vals {
			switch i % 4 {
			case 0:
				vals[i] = fmt.Sprintf("user%05d@example.com", i)
			case 1:
				vals[i] = int64(1e6 + i)
			case 2:
				vals[i] = []byte(fmt.Sprintf("%064d", i))
			case 3:
				vals[i] = ref.Add(time.Duration(i) * time.Second).In(time.FixedZone(fmt.Sprintf("Z%d", i%3), 3600*(i%3)))
			}
		}
		return vals
	}
	cases := map[string][]byte{
		"bench 25 rows":  mustEncode(t, benchRows(t, 25)),
		"mixed 1,000":    mustEncode(t, oneColumn(long(1000)...)),
		"1,000 empty":    emptySetsBomb(1000),
		"strings 10,000": mustEncode(t, oneColumn(stringsOf(10_000, 7)...)),
	}
	for name, b := range cases {
		// Other goroutines of the test binary may allocate or free while
		// it measures: take the best of three.
		var est, real float64
		for range 3 {
			var r *Result
			real = heaptest.Retained(1000, func() any {
				var err error
				if r, err = Decode(b, Limits{}); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				return r
			}) - float64(reflect.TypeFor[Result]().Size())
			if est = float64(r.Bytes); est >= 0.75*real && est <= 1.25*real {
				break
			}
		}
		t.Logf("%s: estimate %.0f bytes, measured %.0f (%.2f)", name, est, real, est/real)
		if est < 0.75*real || est > 1.25*real {
			t.Errorf("%s: estimate %.0f bytes, measured %.0f", name, est, real)
		}
	}
}

func stringsOf(n, size int) []driver.Value {
	vals := make([]driver.Value, n)
	for i := range vals {
		vals[i] = fmt.Sprintf("%0*d", size, i)
	}
	return vals
}

func mustEncode(t testing.TB, r *Result) []byte {
	t.Helper()
	b, err := Encode(nil, r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
