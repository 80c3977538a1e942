package wire

import (
	"database/sql/driver"
	"fmt"
	"testing"
	"time"
)

// bench25 is a typical 25-row result of six columns.
func bench25(b *testing.B) *Result { return benchRows(b, 25) }

// benchRows is a typical result of n rows of six columns.
func benchRows(tb testing.TB, n int) *Result {
	berlin := mustLoad(tb, "Europe/Berlin")
	cols := []Column{
		{Name: "id", ScanType: "int64", DatabaseType: "INT8", Nullable: false, HasNullable: true},
		{Name: "email", ScanType: "string", DatabaseType: "TEXT", HasNullable: true},
		{Name: "balance", ScanType: "float64", DatabaseType: "NUMERIC", Precision: 12, Scale: 2, HasPrecisionScale: true},
		{Name: "active", ScanType: "bool", DatabaseType: "BOOL"},
		{Name: "created_at", ScanType: "time.Time", DatabaseType: "TIMESTAMPTZ"},
		{Name: "avatar", ScanType: "[]uint8", DatabaseType: "BYTEA", Length: 1 << 20, HasLength: true},
	}
	s := Set{Columns: cols, Rows: n}
	t0 := time.Date(2025, 6, 1, 12, 0, 0, 123456000, berlin)
	for i := range n {
		var avatar driver.Value
		if i%3 != 0 {
			avatar = make([]byte, 64)
		}
		s.Values = append(s.Values,
			int64(100000+i),
			fmt.Sprintf("user%02d@example.com", i),
			float64(i)*12.34,
			i%2 == 0,
			t0.Add(time.Duration(i)*time.Hour).UTC(),
			avatar,
		)
	}
	return &Result{Mask: 0x3f, Sets: []Set{s}}
}

func BenchmarkEncode25(b *testing.B) {
	r := bench25(b)
	buf, _ := Encode(nil, r)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if buf, err = Encode(buf[:0], r); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecode25(b *testing.B) { benchDecode(b, bench25(b)) }

// BenchmarkDecode10 decodes a typical 10-row result.
func BenchmarkDecode10(b *testing.B) { benchDecode(b, benchRows(b, 10)) }

func BenchmarkDecode25Named(b *testing.B) {
	r := bench25(b)
	berlin := mustLoad(b, "Europe/Berlin")
	for i := 4; i < len(r.Sets[0].Values); i += 6 {
		r.Sets[0].Values[i] = r.Sets[0].Values[i].(time.Time).In(berlin)
	}
	benchDecode(b, r)
}

// benchDecode decodes r's encoding under the default limits.
func benchDecode(b *testing.B, r *Result) {
	buf, err := Encode(nil, r)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(buf, Limits{}); err != nil {
			b.Fatal(err)
		}
	}
}
