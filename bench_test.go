package sqlflight

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"testing"
)

// The pass-through benchmarks measure what sqlflight adds to a statement it
// does not share, on a parent driver that does no work at all: the
// difference between raw and sqlflight is the whole overhead, free of
// network noise. Compare it with a loopback pgx point query (~100 µs).
func BenchmarkPassthrough(b *testing.B) {
	row := oneRow(int64(1))
	d := &fakeDriver{onQuery: func(context.Context, string, []driver.NamedValue) (driver.Rows, error) {
		row.i = 0
		return row, nil
	}}
	raw := sql.OpenDB(dsnConnector{drv: d, dsn: "fake"})
	defer raw.Close()
	wrapped, _ := openFake(b, d)
	for _, db := range []struct {
		name string
		db   *sql.DB
	}{{"raw", raw}, {"sqlflight", wrapped}} {
		b.Run("write/"+db.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := db.db.Exec("UPDATE items SET n = n + 1 WHERE id = $1", 1); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("read/"+db.name, func(b *testing.B) {
			b.ReportAllocs()
			var n int64
			for b.Loop() {
				if err := db.db.QueryRow("SELECT n FROM items WHERE id = $1 FOR UPDATE", 1).Scan(&n); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSharedAlone is one caller alone in its flight: the cost of
// leading (key, flight, detached origin, materialize, replay) on a parent
// that does no work.
func BenchmarkSharedAlone(b *testing.B) {
	row := oneRow(int64(1))
	d := &fakeDriver{onQuery: func(context.Context, string, []driver.NamedValue) (driver.Rows, error) {
		row.i = 0
		return row, nil
	}}
	db, _ := openFake(b, d)
	b.ReportAllocs()
	var n int64
	for b.Loop() {
		if err := db.QueryRow(pointQuery, 1).Scan(&n); err != nil {
			b.Fatal(err)
		}
	}
}
