//go:build go1.27

package integration

import (
	"context"
	"database/sql"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/sqlflight/sqlflight"
)

// Go 1.27's database/sql scans through driver.RowsColumnScanner when the
// driver's rows implement it, as pgx's do: arrays into Go slices, ranges
// and multiranges into pgtype values, bytea into pgx's native byte slices.
// Through sqlflight they scan as through pgx itself, for rows that go
// straight to the database and for shared (materialized) results alike.
func TestColumnScannerGo127(t *testing.T) {
	dsn := postgresDSN(t)
	raw := openRaw(t, dsn)
	table := "cscan_go127_" + uniqueID(t)
	mustExec(t, raw,
		fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, at text[], r int4range, mr int4multirange, b bytea, s text)`, table),
		fmt.Sprintf(`INSERT INTO %s VALUES
			(1, '{"a","b c",""}', '[1,5)', '{[1,3),[7,9)}', '\x00ff41', 'x'),
			(2, '{}', 'empty', '{}', '', NULL)`, table))
	cleanupExec(t, raw, fmt.Sprintf(`DROP TABLE IF EXISTS %s`, table))
	query := fmt.Sprintf(`SELECT at, r, mr, b, b, s FROM %s ORDER BY id`, table)

	type row struct {
		at []string
		r  pgtype.Range[pgtype.Int4]
		mr pgtype.Multirange[pgtype.Range[pgtype.Int4]]
		b  []byte
		fb pgtype.FlatArray[byte]
		s  sql.NullString
	}
	scanAll := func(t *testing.T, ctx context.Context, q interface {
		QueryContext(context.Context, string, ...any) (*sql.Rows, error)
	}) []row {
		t.Helper()
		rows, err := q.QueryContext(ctx, query)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []row
		for rows.Next() {
			var r row
			if err := rows.Scan(&r.at, &r.r, &r.mr, &r.b, &r.fb, &r.s); err != nil {
				t.Fatal(err)
			}
			out = append(out, r)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	want := scanAll(t, testContext(t, time.Minute), raw)
	if len(want) != 2 || !reflect.DeepEqual(want[0].at, []string{"a", "b c", ""}) || string(want[0].fb) != "\x00\xffA" {
		t.Fatalf("pgx itself scanned %+v", want)
	}

	// nilScan scans into nil destinations: an error, never a hang.
	nilScan := func(t *testing.T, ctx context.Context, q interface {
		QueryContext(context.Context, string, ...any) (*sql.Rows, error)
		QueryRowContext(context.Context, string, ...any) *sql.Row
	}) {
		t.Helper()
		scans := map[string]func() error{
			"Rows.Scan((*string)(nil))": func() error {
				rows, err := q.QueryContext(ctx, query)
				if err != nil {
					return err
				}
				defer rows.Close()
				if !rows.Next() {
					return fmt.Errorf("no row: %v", rows.Err())
				}
				var a, r, mr, b, fb any
				return rows.Scan(&a, &r, &mr, &b, &fb, (*string)(nil))
			},
		}
		for _, dest := range []any{nil, (*int64)(nil), (*string)(nil), (*[]int32)(nil), (*sql.NullString)(nil)} {
			for _, q1 := range []string{"select 42::int4", "select null::int4", "select '{1}'::int4[]"} {
				scans[fmt.Sprintf("QueryRow(%q).Scan(%T(nil))", q1, dest)] = func() error {
					return q.QueryRowContext(ctx, q1).Scan(dest)
				}
			}
		}
		for name, scan := range scans {
			done := make(chan error, 1)
			go func() { done <- scan() }()
			select {
			case err := <-done:
				if err == nil {
					t.Errorf("%s succeeded", name)
				}
			case <-ctx.Done():
				t.Fatalf("%s did not return", name)
			}
		}
	}

	db, sh := openFlight(t, dsn)
	t.Run("pass-through", func(t *testing.T) {
		ctx := testContext(t, 20*time.Second)
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		nilScan(t, ctx, tx)
		if got := scanAll(t, ctx, tx); !reflect.DeepEqual(got, want) {
			t.Fatalf("got %+v, want %+v", got, want)
		}
	})
	t.Run("shared", func(t *testing.T) {
		ctx := sqlflight.WithTTL(testContext(t, 20*time.Second), time.Hour, time.Hour)
		before := sh.Stats()
		for i := 0; i < 3; i++ {
			if got := scanAll(t, ctx, db); !reflect.DeepEqual(got, want) {
				t.Fatalf("read %d: got %+v, want %+v", i, got, want)
			}
		}
		after := sh.Stats()
		if n := after.OriginExecutions - before.OriginExecutions; n != 1 {
			t.Fatalf("%d origin executions for 3 cached reads, want 1: %s", n, statsString(after))
		}
		if n := after.FreshHits - before.FreshHits; n != 2 {
			t.Fatalf("%d fresh hits, want 2: %s", n, statsString(after))
		}
		nilScan(t, ctx, db)
	})
}
