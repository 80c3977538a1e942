package integration

import (
	"bytes"
	"database/sql"
	"fmt"
	"testing"
	"time"
)

// TestRawBytesMutationIsolated: two callers hold cursors over one shared
// result. Whatever one of them does to the bytes it scanned (sql.RawBytes
// aliases the driver's buffer; a []byte is the caller's) the other still
// reads the original values — in both directions, since either caller may be
// the flight's leader.
func TestRawBytesMutationIsolated(t *testing.T) {
	base := postgresDSN(t)
	admin := openRaw(t, base)
	table := "mut_" + uniqueID(t)
	mustExec(t, admin,
		fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, b bytea, s text)`, table),
		fmt.Sprintf(`INSERT INTO %s VALUES (1, '\x00ff0102'::bytea, 'original one'), (2, '\xdeadbeef00'::bytea, 'original two')`, table))
	cleanupExec(t, admin, "DROP TABLE IF EXISTS "+table)
	original := map[int64]struct {
		b []byte
		s string
	}{
		1: {[]byte{0x00, 0xff, 0x01, 0x02}, "original one"},
		2: {[]byte{0xde, 0xad, 0xbe, 0xef, 0x00}, "original two"},
	}

	forEachExecMode(t, base, func(t *testing.T, dsn string) {
		ctx := testContext(t, testTimeout)
		db, sh := openFlight(t, dsn)
		g := newGate(t, admin, dsn, "gate")
		query := fmt.Sprintf(`/* sqlflight: coalesce pure=%[1]s */ SELECT t.id, t.b, t.b AS b2, t.s FROM %[1]s() AS g CROSS JOIN %[2]s AS t ORDER BY t.id`, g.fn, table)
		before := sh.Stats()

		type opened struct {
			rows *sql.Rows
			err  error
		}
		ch := make(chan opened, 2)
		g.close(t)
		defer g.open(t)
		for range 2 {
			go func() {
				rows, err := db.QueryContext(ctx, query)
				ch <- opened{rows, err}
			}()
		}
		waitUntil(t, time.Minute, func() string { return "both callers in the flight: " + statsString(sh.Stats()) },
			func() bool { return sh.Stats().Waiting-before.Waiting >= 2 })
		g.open(t)
		var cur [2]*sql.Rows
		for i := range cur {
			o := <-ch
			if o.err != nil {
				t.Fatalf("query: %v", o.err)
			}
			cur[i] = o.rows
			defer o.rows.Close()
		}
		if d := sh.Stats().Followers - before.Followers; d != 1 {
			t.Errorf("followers: %d, want 1 (the two callers must share one result): %s", d, statsString(sh.Stats()))
		}

		type scanned struct {
			id  int64
			raw sql.RawBytes
			buf []byte
			s   sql.RawBytes
		}
		next := func(who string, r *sql.Rows) *scanned {
			t.Helper()
			if !r.Next() {
				t.Fatalf("%s: no row: %v", who, r.Err())
			}
			var sc scanned
			if err := r.Scan(&sc.id, &sc.raw, &sc.buf, &sc.s); err != nil {
				t.Fatalf("%s: scan: %v", who, err)
			}
			return &sc
		}
		check := func(who string, sc *scanned) {
			t.Helper()
			want := original[sc.id]
			if !bytes.Equal(sc.raw, want.b) || !bytes.Equal(sc.buf, want.b) || string(sc.s) != want.s {
				t.Errorf("%s row %d: got b=%x b2=%x s=%q; want b=%x s=%q (another caller's writes leaked in)",
					who, sc.id, []byte(sc.raw), sc.buf, string(sc.s), want.b, want.s)
			}
		}
		scribble := func(sc *scanned) {
			for i := range sc.raw {
				sc.raw[i] = 'X'
			}
			for i := range sc.buf {
				sc.buf[i] = 'Y'
			}
			for i := range sc.s {
				sc.s[i] = 'Z'
			}
		}

		// Row 1: B scans and keeps its RawBytes; A scans and scribbles.
		b1 := next("B", cur[1])
		check("B before A scribbles", b1)
		a1 := next("A", cur[0])
		check("A", a1)
		scribble(a1)
		check("B after A scribbled", b1)

		// Row 2: the other way round.
		a2 := next("A", cur[0])
		b2 := next("B", cur[1])
		check("A", a2)
		check("B", b2)
		scribble(b2)
		check("A after B scribbled", a2)

		for i, r := range cur {
			if r.Next() {
				t.Errorf("caller %d: more than two rows", i)
			}
			if err := r.Err(); err != nil {
				t.Errorf("caller %d: %v", i, err)
			}
		}

		// A later caller reads the originals too.
		res := readAll(ctx, db, scanAny, query)
		if res.final != nil {
			t.Fatalf("later read: %v", res.final)
		}
		if len(res.rows) != 2 {
			t.Fatalf("later read: %d rows, want 2", len(res.rows))
		}
		for _, row := range res.rows {
			id := row[0].(int64)
			if !bytes.Equal(row[1].([]byte), original[id].b) || row[3].(string) != original[id].s {
				t.Errorf("later read, row %d: %x %q", id, row[1], row[3])
			}
		}
	})
}
