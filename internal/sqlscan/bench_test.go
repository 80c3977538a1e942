package sqlscan

import (
	"fmt"
	"testing"
)

// benchSQL is a typical ~200-byte application query.
const benchSQL = `/* sqlflight: soft=30s */ SELECT p.id, p.name, p.price, c.name AS category FROM public.products p ` +
	`JOIN categories c ON c.id = p.category_id WHERE p.id = $1 AND p.deleted_at IS NULL ORDER BY p.name LIMIT 20`

func BenchmarkScanMemoHit(b *testing.B) {
	Scan(benchSQL)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if Scan(benchSQL).Verdict != Shareable {
				b.Fatal("verdict")
			}
		}
	})
}

func BenchmarkScanMemoHitSerial(b *testing.B) {
	Scan(benchSQL)
	b.ReportAllocs()
	for b.Loop() {
		Scan(benchSQL)
	}
}

func BenchmarkParse(b *testing.B) {
	b.SetBytes(int64(len(benchSQL)))
	b.ReportAllocs()
	for b.Loop() {
		Parse(benchSQL)
	}
}

func BenchmarkParseLarge(b *testing.B) {
	sql := "SELECT "
	for i := 0; i < 200; i++ {
		sql += fmt.Sprintf("coalesce(t%d.a, 0) + lower(t%d.b)::int, ", i, i)
	}
	sql += "1 FROM t0"
	b.SetBytes(int64(len(sql)))
	b.ReportAllocs()
	for b.Loop() {
		Parse(sql)
	}
}
