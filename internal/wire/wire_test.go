package wire

import (
	"bytes"
	"database/sql/driver"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight/internal/leaktest"
)

func TestMain(m *testing.M) {
	leaktest.VerifyTestMain(m)
}

// sameValue reports whether a and b are exactly the same driver value:
// same dynamic type, float bits, nil-ness of []byte, and for time.Time the
// same instant, offset, zone abbreviation and location name.
func sameValue(a, b driver.Value) bool {
	switch a := a.(type) {
	case nil:
		return b == nil
	case int64:
		bv, ok := b.(int64)
		return ok && a == bv
	case float64:
		bv, ok := b.(float64)
		return ok && math.Float64bits(a) == math.Float64bits(bv)
	case bool:
		bv, ok := b.(bool)
		return ok && a == bv
	case []byte:
		bv, ok := b.([]byte)
		return ok && (a == nil) == (bv == nil) && bytes.Equal(a, bv)
	case string:
		bv, ok := b.(string)
		return ok && a == bv
	case time.Time:
		bv, ok := b.(time.Time)
		if !ok || !a.Equal(bv) || a.Location().String() != bv.Location().String() {
			return false
		}
		an, ao := a.Zone()
		bn, bo := bv.Zone()
		return an == bn && ao == bo && a.Nanosecond() == bv.Nanosecond()
	}
	return false
}

// diff returns "" if a and b are the same result; nil and empty slices of
// sets, columns and values are the same.
func diff(a, b *Result) string {
	if a.Mask != b.Mask {
		return fmt.Sprintf("mask %#x != %#x", a.Mask, b.Mask)
	}
	if len(a.Sets) != len(b.Sets) {
		return fmt.Sprintf("%d sets != %d", len(a.Sets), len(b.Sets))
	}
	for i := range a.Sets {
		as, bs := &a.Sets[i], &b.Sets[i]
		if as.Rows != bs.Rows || len(as.Columns) != len(bs.Columns) || len(as.Values) != len(bs.Values) {
			return fmt.Sprintf("set %d: shape %d×%d/%d != %d×%d/%d", i,
				as.Rows, len(as.Columns), len(as.Values), bs.Rows, len(bs.Columns), len(bs.Values))
		}
		for j := range as.Columns {
			if as.Columns[j] != bs.Columns[j] {
				return fmt.Sprintf("set %d column %d: %+v != %+v", i, j, as.Columns[j], bs.Columns[j])
			}
		}
		for j := range as.Values {
			if !sameValue(as.Values[j], bs.Values[j]) {
				return fmt.Sprintf("set %d value %d: %#v != %#v", i, j, as.Values[j], bs.Values[j])
			}
		}
	}
	return ""
}

// roomy limits let every valid encoding decode.
var roomy = Limits{MaxBytes: 1 << 40, MaxRows: MaxRows, MaxSets: math.MaxInt32, MaxZoneLoads: math.MaxInt32}

func roundTrip(t testing.TB, r *Result) *Result {
	t.Helper()
	b, err := Encode(nil, r)
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	got, err := Decode(b, roomy)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if d := diff(r, got); d != "" {
		t.Fatalf("round trip: %s", d)
	}
	return got
}

func mustLoad(t testing.TB, name string) *time.Location {
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Skipf("tzdata: %v", err)
	}
	return loc
}

func oneColumn(vals ...driver.Value) *Result {
	return &Result{Sets: []Set{{Columns: []Column{{Name: "v"}}, Rows: len(vals), Values: vals}}}
}

func TestRoundTrip(t *testing.T) {
	berlin := mustLoad(t, "Europe/Berlin")
	ny := mustLoad(t, "America/New_York")
	ref := time.Date(2024, 3, 31, 1, 59, 59, 999999999, time.UTC)
	mib := strings.Repeat("x\x00y", 1<<20/3+1)
	allCols := []Column{
		{Name: "id", ScanType: "int64", DatabaseType: "INT8", HasNullable: true},
		{Name: "", ScanType: "", DatabaseType: ""},
		{Name: "n\x00ame", ScanType: "[]uint8", DatabaseType: "BYTEA", Length: math.MaxInt64, HasLength: true, Nullable: true, HasNullable: true},
		{Name: "amt", ScanType: "sql.NullFloat64", DatabaseType: "NUMERIC", Precision: 38, Scale: -4, HasPrecisionScale: true},
		{Name: "neg", Length: -1, Precision: math.MinInt64, Scale: math.MaxInt64},
	}
	tests := []struct {
		name string
		r    *Result
	}{
		{"empty result", &Result{}},
		{"mask only", &Result{Mask: 0xFFFF}},
		{"empty set", &Result{Sets: []Set{{}}}},
		{"columns no rows", &Result{Sets: []Set{{Columns: allCols}}}},
		{"zero-column rows", &Result{Sets: []Set{{Rows: 3}}}},
		{"zero-column many rows", &Result{Sets: []Set{{Rows: MaxRows}}}},
		{"nil", oneColumn(nil)},
		{"int64", oneColumn(int64(0), int64(1), int64(-1), int64(math.MaxInt64), int64(math.MinInt64))},
		{"float64", oneColumn(0.0, math.Copysign(0, -1), 1.5, math.Inf(1), math.Inf(-1),
			math.NaN(), math.Float64frombits(0x7ff8000000000001), math.Float64frombits(0xfff0000000000abc),
			math.SmallestNonzeroFloat64, math.MaxFloat64)},
		{"bool", oneColumn(true, false)},
		{"bytes", oneColumn([]byte(nil), []byte{}, []byte{0}, []byte("abc\x00\xff"))},
		{"string", oneColumn("", "\x00", "héllo", "\xff\xfe invalid utf8", mib)},
		{"1 MiB bytes", oneColumn([]byte(mib))},
		{"time utc", oneColumn(ref, time.Time{}, time.Unix(0, 0).UTC(),
			time.Date(-500, 1, 1, 0, 0, 0, 1, time.UTC), time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC))},
		{"time local", oneColumn(ref.Local(), time.Now().Round(0).Local())},
		{"time fixed", oneColumn(ref.In(time.FixedZone("", 3600)), ref.In(time.FixedZone("XYZ", -(9*3600+30*60+15))),
			ref.In(time.FixedZone("UTC", 0)), ref.In(time.FixedZone("Europe/Berlin", 7200)), ref.In(time.FixedZone("\x00", 1)))},
		{"time named", oneColumn(ref.In(berlin), ref.Add(time.Second).In(berlin), ref.In(ny),
			time.Date(1900, 1, 1, 0, 0, 0, 0, berlin), time.Date(2100, 7, 1, 12, 0, 0, 5, ny))},
		{"monotonic dropped", oneColumn(time.Now().UTC())},
		{"mixed multi-set", &Result{Mask: 0x5a, Sets: []Set{
			{Columns: allCols, Rows: 2, Values: []driver.Value{
				int64(1), nil, []byte("x"), 1.25, ref,
				int64(2), "s", []byte{}, math.NaN(), ref.In(berlin),
			}},
			{},
			{Rows: 7},
			{Columns: allCols[:1], Rows: 1, Values: []driver.Value{true}},
		}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			roundTrip(t, tt.r)
		})
	}
}

func TestDecodeNoAlias(t *testing.T) {
	b, _ := Encode(nil, oneColumn([]byte("abc"), "def"))
	r, err := Decode(b, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] = 0
	}
	if string(r.Sets[0].Values[0].([]byte)) != "abc" || r.Sets[0].Values[1].(string) != "def" {
		t.Fatal("decoded values alias the input")
	}
}

func TestMonotonicDropped(t *testing.T) {
	got := roundTrip(t, oneColumn(time.Now()))
	if tm := got.Sets[0].Values[0].(time.Time); tm != tm.Round(0) {
		t.Fatal("monotonic reading kept")
	}
}

func TestEncodeAppends(t *testing.T) {
	prefix := []byte("prefix")
	b, err := Encode(append([]byte(nil), prefix...), oneColumn("v"))
	if err != nil || !bytes.HasPrefix(b, prefix) {
		t.Fatalf("Encode: %q, %v", b, err)
	}
	if _, err := Decode(b[len(prefix):], Limits{}); err != nil {
		t.Fatal(err)
	}
}

func TestEncodeErrors(t *testing.T) {
	for name, r := range map[string]*Result{
		"nil":         nil,
		"int":         oneColumn(1),
		"int32":       oneColumn(int32(1)),
		"float32":     oneColumn(float32(1)),
		"*string":     oneColumn(new(string)),
		"short":       {Sets: []Set{{Columns: []Column{{}}, Rows: 2, Values: []driver.Value{nil}}}},
		"long":        {Sets: []Set{{Rows: 1, Values: []driver.Value{nil}}}},
		"negative":    {Sets: []Set{{Rows: -1}}},
		"too many":    {Sets: []Set{{Rows: MaxRows + 1}}},
		"struct time": oneColumn(struct{ time.Time }{}),
	} {
		dst := []byte("keep")
		out, err := Encode(dst, r)
		if err == nil {
			t.Errorf("%s: no error", name)
		}
		if string(out) != "keep" {
			t.Errorf("%s: dst = %q", name, out)
		}
	}
}

func sample(t testing.TB) []byte {
	berlin := mustLoad(t, "Europe/Berlin")
	ref := time.Date(2025, 10, 26, 2, 30, 0, 123456789, berlin)
	b, err := Encode(nil, &Result{Mask: 0x1f, Sets: []Set{
		{Columns: []Column{
			{Name: "id", ScanType: "int64", DatabaseType: "INT8", Nullable: true, HasNullable: true},
			{Name: "name", ScanType: "string", DatabaseType: "TEXT", Length: 255, HasLength: true},
			{Name: "amount", ScanType: "float64", DatabaseType: "NUMERIC", Precision: 10, Scale: 2, HasPrecisionScale: true},
			{Name: "at", ScanType: "time.Time", DatabaseType: "TIMESTAMPTZ"},
			{Name: "blob"},
		}, Rows: 3, Values: []driver.Value{
			int64(1), "alice", 10.5, ref, []byte("b1"),
			int64(-2), "", math.NaN(), ref.UTC(), []byte{},
			nil, "bob\x00", math.Inf(-1), ref.In(time.FixedZone("X", 5400)), []byte(nil),
		}},
		{Rows: 2},
		{Columns: []Column{{Name: "ok"}}, Rows: 2, Values: []driver.Value{true, false}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestCorruption(t *testing.T) {
	b := sample(t)
	want, err := Decode(b, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	c := make([]byte, len(b))
	for i := range b {
		for _, x := range []byte{0x01, 0x80, 0xff, 0x55} {
			copy(c, b)
			c[i] ^= x
			r, err := Decode(c, Limits{})
			if err == nil {
				t.Fatalf("flip %#x at %d: no error (diff %q)", x, i, diff(want, r))
			}
			if !errors.Is(err, ErrCorrupt) && !(i == len(magic) && errors.Is(err, ErrVersion)) {
				t.Fatalf("flip at %d: %v", i, err)
			}
		}
		for v := 0; v < 256; v++ { // every value of every byte
			copy(c, b)
			if byte(v) == b[i] {
				continue
			}
			c[i] = byte(v)
			if _, err := Decode(c, Limits{}); err == nil {
				t.Fatalf("byte %d = %#x: no error", i, v)
			}
		}
	}
	for n := 0; n < len(b); n++ {
		if _, err := Decode(b[:n], Limits{}); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("truncated to %d: %v", n, err)
		}
	}
	if _, err := Decode(append(append([]byte(nil), b...), 0), Limits{}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("trailing byte: %v", err)
	}
}

// seal returns magic, version, body and a valid checksum, to test the parser
// behind the checksum.
func seal(version byte, body ...byte) []byte {
	b := append([]byte(magic), version)
	b = append(b, body...)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

func TestVersion(t *testing.T) {
	b := sample(t)
	for _, v := range []byte{0, 2, 0xff} {
		c := append([]byte(nil), b...)
		c[len(magic)] = v
		if _, err := Decode(c, Limits{}); !errors.Is(err, ErrVersion) {
			t.Errorf("version %d: %v", v, err)
		}
		if _, err := Decode(seal(v), Limits{}); !errors.Is(err, ErrVersion) {
			t.Errorf("sealed version %d: %v", v, err)
		}
	}
	if _, err := Decode([]byte("SQFW\x02"), Limits{}); !errors.Is(err, ErrVersion) {
		t.Errorf("bare header: %v", err)
	}
}

// TestMalformed checks the parser on bodies with a valid checksum.
func TestMalformed(t *testing.T) {
	big := []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}
	cases := map[string][]byte{
		"empty body":          {},
		"mask too big":        {0x80, 0x80, 0x04, 0},
		"huge sets":           append([]byte{0}, big...),
		"huge columns":        append([]byte{0, 1}, big...),
		"huge string":         append([]byte{0, 1, 1}, big...),
		"huge rows":           append([]byte{0, 1, 0}, big...),
		"rows > MaxRows":      {0, 1, 0, 0x80, 0x80, 0x80, 0x80, 0x08},
		"huge values":         {0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0x80, 0x80, 0x80, 0x80, 0x04, tagNil},
		"bad flags":           {0, 1, 1, 0, 0, 0, 0x10, 0, 0, 0, 0},
		"bad tag":             {0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 9},
		"short float":         {0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, tagFloat64, 0, 0},
		"nsec too big":        {0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, tagTime, 0, 0x80, 0x94, 0xeb, 0xdc, 0x03, zoneUTC},
		"bad zone":            {0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, tagTime, 0, 0, 4},
		"trailing":            {0, 0, 0},
		"overlong varint":     append([]byte{0}, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01),
		"huge bytes":          append([]byte{0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, tagBytes}, big...),
		"truncated column":    {0, 1, 1, 0, 0},
		"truncated named loc": {0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, tagTime, 0, 0, zoneNamed, 3, 'U', 'T'},
	}
	for name, body := range cases {
		if r, err := Decode(seal(Version, body...), Limits{}); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, %+v", name, err, r)
		}
	}
	// A well-formed hand-made body decodes.
	if _, err := Decode(seal(Version, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, tagTime, 0, 0, zoneUTC), Limits{}); err != nil {
		t.Errorf("valid body: %v", err)
	}
}

func TestNamedZoneFallback(t *testing.T) {
	// A location of a name that cannot be loaded falls back to a fixed zone
	// of the abbreviation and offset: same instant, wall clock and zone.
	loc, err := time.LoadLocationFromTZData("Nowhere/Atlantis", tzdataFixed("ATL", 3*3600+600))
	if err != nil {
		t.Fatal(err)
	}
	in := time.Date(2020, 5, 6, 7, 8, 9, 10, loc)
	b, err := Encode(nil, oneColumn(in))
	if err != nil {
		t.Fatal(err)
	}
	r, err := Decode(b, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	out := r.Sets[0].Values[0].(time.Time)
	an, ao := in.Zone()
	bn, bo := out.Zone()
	if !out.Equal(in) || an != bn || ao != bo || out.Format(time.RFC3339Nano) != in.Format(time.RFC3339Nano) {
		t.Fatalf("fallback: %v != %v", out, in)
	}
	if out.Location().String() != "ATL" {
		t.Fatalf("fallback location %q", out.Location())
	}
	// A loadable name whose tzdata disagrees with the encoder's also falls
	// back (the wall clock wins over the name).
	fake, err := time.LoadLocationFromTZData("Europe/Berlin", tzdataFixed("ZZZ", 60))
	if err != nil {
		t.Fatal(err)
	}
	in = time.Date(2020, 1, 1, 0, 0, 0, 0, fake)
	r = roundTripLoose(t, oneColumn(in))
	if out := r.Sets[0].Values[0].(time.Time); !out.Equal(in) || out.Location().String() != "ZZZ" {
		t.Fatalf("mismatched tzdata: %v", out)
	}
}

func TestNamedZoneLikeFixed(t *testing.T) {
	// "CET" is a tz database location whose winter abbreviation is its name.
	cet := mustLoad(t, "CET")
	got := roundTrip(t, oneColumn(time.Date(2024, 1, 15, 10, 0, 0, 0, cet)))
	out := got.Sets[0].Values[0].(time.Time)
	if name, _ := out.Add(180 * 24 * time.Hour).Zone(); name != "CEST" {
		t.Fatalf("decoded CET lost its DST rules: %v (%s)", out, name)
	}
}

func roundTripLoose(t *testing.T, r *Result) *Result {
	b, err := Encode(nil, r)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(b, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// tzdataFixed builds a minimal TZif (version 1) file of one zone.
func tzdataFixed(abbr string, off int32) []byte {
	var b bytes.Buffer
	b.WriteString("TZif")
	b.WriteByte(0)
	b.Write(make([]byte, 15))
	be := func(v uint32) { b.Write([]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}) }
	be(0)                     // isutcnt
	be(0)                     // isstdcnt
	be(0)                     // leapcnt
	be(0)                     // timecnt
	be(1)                     // typecnt
	be(uint32(len(abbr) + 1)) // charcnt
	be(uint32(off))
	b.WriteByte(0) // isdst
	b.WriteByte(0) // abbr index
	b.WriteString(abbr)
	b.WriteByte(0)
	return b.Bytes()
}

func TestDecodeReencode(t *testing.T) {
	b := sample(t)
	r, err := Decode(b, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	b2, err := Encode(nil, r)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, b2) {
		t.Fatal("re-encoding differs")
	}
}

// loadLocation returns the named location through the process's memo, or
// nil if it does not load.
func loadLocation(name string) *time.Location {
	if loc, ok := zones.lookup([]byte(name)); ok {
		return loc
	}
	return zones.load(name)
}
