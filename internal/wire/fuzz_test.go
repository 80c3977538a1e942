package wire

import (
	"database/sql/driver"
	"encoding/binary"
	"hash/crc32"
	"math"
	"testing"
	"time"
)

// fuzzLimits bound the memory and lookups of one fuzz input.
var fuzzLimits = Limits{MaxBytes: 1 << 20, MaxRows: 1 << 12, MaxSets: 64, MaxZoneLoads: 4}

// FuzzDecode: whatever the input, Decode within fuzzLimits returns an error
// or a result within them that re-encodes to the same result. The seeds are
// valid encodings of every value type and zone kind, and the decode bombs
// (scaled to fuzzLimits).
func FuzzDecode(f *testing.F) {
	f.Add(sample(f))
	berlin, _ := time.LoadLocation("Europe/Berlin")
	named := time.Unix(7, 8)
	if berlin != nil {
		named = named.In(berlin)
	}
	for _, r := range []*Result{
		{},
		{Sets: []Set{{Rows: 3}}},
		oneColumn(nil, int64(-7), 1.5, true, false, []byte(nil), []byte{}, []byte("b"), "s",
			time.Unix(1, 2).UTC(), time.Unix(3, 4).In(time.FixedZone("F", -60)), time.Unix(5, 6).Local(), named),
	} {
		b, err := Encode(nil, r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("SQFW\x01"))
	f.Add([]byte("SQFW\x02\x00\x00\x00\x00"))
	f.Add(emptySetsBomb(100))
	f.Add(bigValueBomb(tagBytes, 2<<20))
	f.Add(bigValueBomb(tagString, 1<<20-64))
	f.Add(zonesBomb(50, true))
	f.Add(zonesBomb(50, false))
	f.Add(seal(Version, 0, 2, 0, 0x80, 0x80, 0x80, 0x80, 0x07, 0, 1))
	f.Fuzz(func(t *testing.T, b []byte) {
		checkDecode(t, b)
		// Random bytes rarely carry a valid checksum: also try them sealed,
		// to fuzz the parser behind it.
		if len(b) >= headerLen+trailerLen {
			c := append([]byte(nil), b[:len(b)-trailerLen]...)
			checkDecode(t, binary.LittleEndian.AppendUint32(c, crc32.Checksum(c, castagnoli)))
		}
		checkDecode(t, seal(Version, b...))
	})
}

func checkDecode(t *testing.T, b []byte) {
	r, err := Decode(b, fuzzLimits)
	if err != nil {
		if r != nil {
			t.Fatal("result with error")
		}
		return
	}
	if r.Bytes > fuzzLimits.MaxBytes {
		t.Fatalf("%d bytes decoded, limit %d", r.Bytes, fuzzLimits.MaxBytes)
	}
	rows := 0
	for _, s := range r.Sets {
		rows += s.Rows
	}
	if len(r.Sets) > fuzzLimits.MaxSets || rows > fuzzLimits.MaxRows {
		t.Fatalf("%d sets, %d rows decoded", len(r.Sets), rows)
	}
	b2, err := Encode(nil, r)
	if err != nil {
		t.Fatalf("re-encode: %v", err)
	}
	// The zones it loaded may have left the memo since: do not count them.
	lim := fuzzLimits
	lim.MaxZoneLoads = math.MaxInt32
	r2, err := Decode(b2, lim)
	if err != nil {
		t.Fatalf("decode re-encoded: %v", err)
	}
	if d := diff(r, r2); d != "" {
		t.Fatalf("re-encoded differs: %s", d)
	}
	if r.Bytes != r2.Bytes {
		t.Fatalf("re-encoded counts %d bytes, not %d", r2.Bytes, r.Bytes)
	}
}

// FuzzRoundTrip builds a result from the fuzz inputs: shape from the first
// bytes of ops, and each value's kind from the next op byte.
func FuzzRoundTrip(f *testing.F) {
	f.Add([]byte{2, 3, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, "s\x00", int64(-1), uint64(0x7ff8000000000001), int64(1700000000), uint32(5), int32(3600), "Europe/Berlin", uint16(7))
	f.Add([]byte{0, 5}, "", int64(0), uint64(0), int64(0), uint32(0), int32(0), "", uint16(0))
	f.Add([]byte{1, 1, 8}, "x", int64(math.MinInt64), uint64(1<<63), int64(math.MaxInt64), uint32(999999999), int32(-1), "XYZ", uint16(0xffff))
	f.Fuzz(func(t *testing.T, ops []byte, s string, i int64, fb uint64, sec int64, nsec uint32, off int32, zone string, mask uint16) {
		next := func() byte {
			if len(ops) == 0 {
				return 0
			}
			c := ops[0]
			ops = ops[1:]
			return c
		}
		r := &Result{Mask: mask}
		nsets := int(next() % 4)
		for range nsets {
			ncols := int(next() % 6)
			rows := int(next() % 8)
			set := Set{Rows: rows}
			for c := range ncols {
				x := next()
				set.Columns = append(set.Columns, Column{
					Name: s, ScanType: zone, DatabaseType: s[:len(s)*c%(len(s)+1)],
					Length: i, HasLength: x&1 != 0, Nullable: x&2 != 0, HasNullable: x&4 != 0,
					Precision: int64(off), Scale: sec, HasPrecisionScale: x&8 != 0,
				})
			}
			for range rows * ncols {
				set.Values = append(set.Values, fuzzValue(next(), s, i, fb, sec, nsec, off, zone))
			}
			r.Sets = append(r.Sets, set)
		}
		b, err := Encode(nil, r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Decode(b, Limits{})
		if err != nil {
			t.Fatalf("Decode: %v", err)
		}
		if d := diff(r, got); d != "" {
			// A named location only round-trips by name if this process can
			// load it with the same zone at that instant; otherwise the
			// documented fallback applies.
			t.Fatalf("round trip: %s", d)
		}
	})
}

func fuzzValue(op byte, s string, i int64, fb uint64, sec int64, nsec uint32, off int32, zone string) driver.Value {
	tm := time.Unix(sec, int64(nsec%1e9))
	switch op % 13 {
	case 0:
		return nil
	case 1:
		return i
	case 2:
		return math.Float64frombits(fb)
	case 3:
		return op&0x80 != 0
	case 4:
		return []byte(nil)
	case 5:
		return []byte(s)
	case 6:
		return []byte{}
	case 7:
		return s
	case 8:
		return tm.UTC()
	case 9:
		return tm.Local()
	case 10:
		return tm.In(time.FixedZone(zone, int(off)))
	case 11:
		// A loadable IANA location, named or chosen by the fuzzer.
		if loc := loadLocation(zone); loc != nil {
			return tm.In(loc)
		}
		names := []string{"Europe/Berlin", "America/New_York", "Asia/Kolkata", "Australia/Lord_Howe", "Pacific/Chatham"}
		if loc := loadLocation(names[int(uint64(sec)%uint64(len(names)))]); loc != nil {
			return tm.In(loc)
		}
		return tm
	case 12:
		return binary.AppendUvarint(nil, fb)
	}
	panic("unreachable")
}
