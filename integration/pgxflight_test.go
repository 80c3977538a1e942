package integration

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlflight/sqlflight"
	"github.com/sqlflight/sqlflight/pgxflight"
)

// openFace opens a pool for dsn and the pgx face over it through a new
// Shield with opts; both close when the test ends.
func openFace(t testing.TB, dsn string, opts ...sqlflight.Option) (*pgxflight.DB, *sqlflight.Shield) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("parse DSN: %v", err)
	}
	return openFaceConfig(t, cfg, sqlflight.New(opts...))
}

// openFaceConfig is openFace for a pool of cfg through sh.
func openFaceConfig(t testing.TB, cfg *pgxpool.Config, sh *sqlflight.Shield) (*pgxflight.DB, *sqlflight.Shield) {
	t.Helper()
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("pgxpool: %v", err)
	}
	db := pgxflight.New(sh, pool)
	t.Cleanup(func() {
		// A Close still waiting for one of the pool's connections after a
		// while fails the test instead of holding it until go test's
		// timeout (pgxpool.Pool.Close waits for every acquired connection;
		// a leaked one never comes back).
		closed := make(chan struct{})
		go func() {
			defer close(closed)
			db.Close()
		}()
		select {
		case <-closed:
		case <-time.After(10 * time.Second):
			t.Errorf("the face's Close still waits after 10s: %d of its pool's connections never came back", pool.Stat().AcquiredConns())
		}
		_ = sh.Close()
	})
	return db, sh
}

// TestPgxFaceHerd: a cold herd of 1,000 callers through the pgx face runs
// one origin query, counted by the database, and every caller gets its row.
func TestPgxFaceHerd(t *testing.T) {
	base := postgresDSN(t)
	admin := openRaw(t, base)
	const callers = 1000

	forEachExecMode(t, base, func(t *testing.T, dsn string) {
		ctx := testContext(t, testTimeout)
		g := newGateFunc(t, admin, dsn, "pgxherd", "TABLE(answer int, label text)", herdTail)
		query := fmt.Sprintf(`/* sqlflight: coalesce pure=%[1]s name=herd */ SELECT * FROM %[1]s()`, g.fn)
		db, sh := openFace(t, dsn)

		g.close(t)
		defer g.open(t)
		var wg sync.WaitGroup
		out := make([]herdOutcome, callers)
		start := make(chan struct{})
		for i := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				o := &out[i]
				begin := time.Now()
				defer func() { o.lat = time.Since(begin) }()
				rows, err := db.Query(ctx, query)
				if err != nil {
					o.err = err
					return
				}
				for rows.Next() {
					o.rows++
					if err := rows.Scan(&o.answer, &o.label); err != nil {
						o.err = err
					}
				}
				if err := rows.Err(); err != nil && o.err == nil {
					o.err = err
				}
			}()
		}
		close(start)
		waitUntil(t, 2*time.Minute, func() string { return "all callers waiting on the flight: " + statsString(sh.Stats()) },
			func() bool { return sh.Stats().Waiting >= callers })
		if n := db.Pool().Stat().AcquiredConns(); n > 1 {
			t.Errorf("%d of the pool's connections held while the herd waits on one flight, want ≤ 1", n)
		}
		g.open(t)
		wg.Wait()

		summarize(t, out)
		if n := g.calls(t, admin); n != 1 {
			t.Errorf("the function ran %d times in PostgreSQL, want 1", n)
		}
		st := sh.Stats()
		if st.OriginExecutions != 1 || st.Followers != callers-1 {
			t.Errorf("origin executions %d, followers %d, want 1 and %d: %s", st.OriginExecutions, st.Followers, callers-1, statsString(st))
		}
		waitUntil(t, 10*time.Second, func() string {
			return fmt.Sprintf("%d of the pool's connections still acquired after the herd", db.Pool().Stat().AcquiredConns())
		}, func() bool { return db.Pool().Stat().AcquiredConns() == 0 })
	})
}

// TestPgxFaceReadYourWrites: a cached read through the face ends with a
// write through the face, and the two faces of one Shield share entries
// and end each other's.
func TestPgxFaceReadYourWrites(t *testing.T) {
	dsn := postgresDSN(t)
	admin := openRaw(t, dsn)
	ctx := testContext(t, testTimeout)
	table := "pgxryw_" + uniqueID(t)
	mustExec(t, admin, fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, label text NOT NULL)`, table),
		fmt.Sprintf(`INSERT INTO %s VALUES (1, 'one'), (2, 'two')`, table))
	cleanupExec(t, admin, "DROP TABLE IF EXISTS "+table)

	sh := sqlflight.New(sqlflight.Options{Default: sqlflight.Policy{Soft: time.Hour}})
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	face, _ := openFaceConfig(t, cfg, sh)
	sqldb := sql.OpenDB(sh.PoolConnector(face.Pool())) // the database/sql face of the same pool's scope
	t.Cleanup(func() { _ = sqldb.Close() })
	read := fmt.Sprintf(`SELECT label FROM %s WHERE id = $1`, table)
	faceLabel := func() string {
		t.Helper()
		var s string
		if err := face.QueryRow(ctx, read, 1).Scan(&s); err != nil {
			t.Fatalf("face read: %v", err)
		}
		return s
	}
	sqlLabel := func() string {
		t.Helper()
		var s string
		if err := sqldb.QueryRowContext(ctx, read, 1).Scan(&s); err != nil {
			t.Fatalf("database/sql read: %v", err)
		}
		return s
	}

	if got := faceLabel(); got != "one" {
		t.Fatalf("face read %q, want one", got)
	}
	before := sh.Stats()
	if got := sqlLabel(); got != "one" {
		t.Fatalf("database/sql read %q, want one", got)
	}
	if got := faceLabel(); got != "one" {
		t.Fatalf("face read %q, want one", got)
	}
	if st := sh.Stats(); st.OriginExecutions != before.OriginExecutions || st.FreshHits < before.FreshHits+2 {
		t.Errorf("the second face and the same face hit the entry the first filled: origins %d → %d, hits %d → %d",
			before.OriginExecutions, st.OriginExecutions, before.FreshHits, st.FreshHits)
	}

	steps := []struct {
		name  string
		write func(label string) error
	}{
		{"face Exec", func(l string) error {
			_, err := face.Exec(ctx, fmt.Sprintf(`UPDATE %s SET label = $1 WHERE id = 1`, table), l)
			return err
		}},
		{"database/sql Exec", func(l string) error {
			_, err := sqldb.ExecContext(ctx, fmt.Sprintf(`UPDATE %s SET label = $1 WHERE id = 1`, table), l)
			return err
		}},
		{"face named args", func(l string) error {
			_, err := face.Exec(ctx, fmt.Sprintf(`UPDATE %s SET label = @label WHERE id = @id`, table), pgx.NamedArgs{"label": l, "id": 1})
			return err
		}},
		{"face transaction", func(l string) error {
			return pgx.BeginFunc(ctx, face, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, fmt.Sprintf(`UPDATE %s SET label = $1 WHERE id = 1`, table), l)
				return err
			})
		}},
		{"face batch", func(l string) error {
			b := &pgx.Batch{}
			b.Queue(fmt.Sprintf(`UPDATE %s SET label = $1 WHERE id = 1`, table), l)
			return face.SendBatch(ctx, b).Close()
		}},
		{"face copy", func(l string) error {
			if _, err := face.Exec(ctx, fmt.Sprintf(`DELETE FROM %s WHERE id = 1`, table)); err != nil {
				return err
			}
			// The delete ended the entry; read it again so the copy has one to end.
			var n int
			if err := face.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s WHERE id = $1`, table), 1).Scan(&n); err != nil || n != 0 {
				return fmt.Errorf("count after delete: %d, %v", n, err)
			}
			_, err := face.CopyFrom(ctx, pgx.Identifier{table}, []string{"id", "label"}, pgx.CopyFromRows([][]any{{1, l}}))
			return err
		}},
	}
	for i, step := range steps {
		label := fmt.Sprintf("v%d", i)
		// Both faces hold the entry.
		_, _ = faceLabel(), sqlLabel()
		if err := step.write(label); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if got := faceLabel(); got != label {
			t.Errorf("after a write through %s, the face read %q, want %q", step.name, got, label)
		}
		if got := sqlLabel(); got != label {
			t.Errorf("after a write through %s, database/sql read %q, want %q", step.name, got, label)
		}
	}
}

// TestPgxFaceSharesWithDSN: a DSN opened with sql.Open and a pool of the
// same configuration are one scope of one Shield.
func TestPgxFaceSharesWithDSN(t *testing.T) {
	dsn := postgresDSN(t)
	ctx := testContext(t, testTimeout)
	sh := sqlflight.New(sqlflight.Options{Default: sqlflight.Policy{Soft: time.Hour}})
	name := "sqlflight-face-" + uniqueID(t)
	sh.Register(name, stdlib.GetDefaultDriver())
	sqldb, err := sql.Open(name, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sqldb.Close() })
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	face, _ := openFaceConfig(t, cfg, sh)

	q := `SELECT 'shared-' || $1::text`
	var a, b string
	if err := sqldb.QueryRowContext(ctx, q, "x").Scan(&a); err != nil {
		t.Fatal(err)
	}
	before := sh.Stats()
	if err := face.QueryRow(ctx, q, "x").Scan(&b); err != nil {
		t.Fatal(err)
	}
	st := sh.Stats()
	if a != "shared-x" || b != a {
		t.Errorf("read %q and %q, want shared-x twice", a, b)
	}
	if st.OriginExecutions != before.OriginExecutions || st.FreshHits != before.FreshHits+1 {
		t.Errorf("the face's read of what the DSN's read filled: origins %d → %d, hits %d → %d, want a hit",
			before.OriginExecutions, st.OriginExecutions, before.FreshHits, st.FreshHits)
	}
}

// countingTracer counts the queries pgx traces.
type countingTracer struct{ n atomic.Int64 }

func (c *countingTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (c *countingTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestPgxFaceTracer: the pool's tracer sees the statements that reach the
// database, and not the hits.
func TestPgxFaceTracer(t *testing.T) {
	dsn := postgresDSN(t)
	ctx := testContext(t, testTimeout)
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	tr := &countingTracer{}
	cfg.ConnConfig.Tracer = tr
	face, sh := openFaceConfig(t, cfg, sqlflight.New(sqlflight.Options{Default: sqlflight.Policy{Soft: time.Hour}}))
	q := `SELECT 'traced-' || $1::text`
	var s string
	if err := face.QueryRow(ctx, q, "a").Scan(&s); err != nil {
		t.Fatal(err)
	}
	after := tr.n.Load()
	if after == 0 {
		t.Fatal("the tracer saw no query for a miss")
	}
	for range 10 {
		if err := face.QueryRow(ctx, q, "a").Scan(&s); err != nil {
			t.Fatal(err)
		}
	}
	if n := tr.n.Load(); n != after {
		t.Errorf("ten hits traced %d queries, want none", n-after)
	}
	if _, err := face.Exec(ctx, `SELECT 1`); err != nil {
		t.Fatal(err)
	}
	if n := tr.n.Load(); n != after+1 {
		t.Errorf("an Exec traced %d queries, want 1", n-after)
	}
	if st := sh.Stats(); st.FreshHits < 10 {
		t.Errorf("hits %d, want 10: %s", st.FreshHits, statsString(st))
	}
}

// TestPgxFaceErrors: the face's errors are the database/sql face's.
func TestPgxFaceErrors(t *testing.T) {
	dsn := postgresDSN(t)
	ctx := testContext(t, testTimeout)
	face, _ := openFace(t, dsn, sqlflight.Options{Strict: true})
	_, err := face.Query(ctx, `/* sqlflight: soft=banana */ SELECT 1`)
	if !errors.Is(err, sqlflight.ErrBadAnnotation) {
		t.Errorf("a bad annotation under Strict: %v, want ErrBadAnnotation", err)
	}
	err = face.QueryRow(ctx, `/* sqlflight: soft=banana */ SELECT 1`).Scan(new(int))
	if !errors.Is(err, sqlflight.ErrBadAnnotation) {
		t.Errorf("QueryRow with a bad annotation under Strict: %v, want ErrBadAnnotation", err)
	}
	var n int
	err = face.QueryRow(ctx, `SELECT n FROM generate_series(1, 10) n WHERE n = 0`).Scan(&n)
	if !errors.Is(err, pgx.ErrNoRows) {
		t.Errorf("no row: %v, want pgx.ErrNoRows", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := face.Query(cctx, `SELECT 1`); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled context: %v, want context.Canceled", err)
	}
}

// hostileRow is a row of every kind of column, for RowToStructByName.
type hostileRow struct {
	ID    int32              `db:"id"`
	I2    *int16             `db:"i2"`
	I8    *int64             `db:"i8"`
	F4    *float32           `db:"f4"`
	F8    *float64           `db:"f8"`
	Num   pgtype.Numeric     `db:"num"`
	Txt   *string            `db:"txt"`
	Bool  *bool              `db:"b"`
	Bytes []byte             `db:"by"`
	Day   pgtype.Date        `db:"d"`
	TS    pgtype.Timestamp   `db:"ts"`
	TSTZ  pgtype.Timestamptz `db:"tstz"`
	UUID  pgtype.UUID        `db:"u"`
	JSON  any                `db:"j"`
	JSONB any                `db:"jb"`
	Tags  []string           `db:"tags"`
	Ints  []*int32           `db:"ints"`
	Span  pgtype.Interval    `db:"span"`
	Addr  *netip.Prefix      `db:"addr"`
}

// sameHostile reports whether a and b hold the same rows, NaN equal to
// itself.
func sameHostile(a, b []hostileRow) bool {
	nan := func(rows []hostileRow) []hostileRow {
		out := slices.Clone(rows)
		for i := range out {
			if f := out[i].F4; f != nil && math.IsNaN(float64(*f)) {
				out[i].F4 = nil
			}
		}
		return out
	}
	return reflect.DeepEqual(nan(a), nan(b))
}

// TestPgxFaceScansAsPgx: a shared result (a hit) scans, collects and
// gives its values as pgx's own rows of the same query on the bare pool,
// for every kind of column, NULLs and hostile text included.
func TestPgxFaceScansAsPgx(t *testing.T) {
	dsn := postgresDSN(t)
	admin := openRaw(t, dsn)
	table := "pgxscan_" + uniqueID(t)
	mustExec(t, admin, fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, i2 int2, i8 int8, f4 float4, f8 float8,
		num numeric, txt text, b bool, by bytea, d date, ts timestamp, tstz timestamptz, u uuid, j json, jb jsonb,
		tags text[], ints int4[], span interval, addr inet)`, table),
		fmt.Sprintf(`INSERT INTO %s VALUES
		(1, -32768, 9223372036854775807, 1.5, -2.25e300, 12345678901234567890.000123, E'it''s\n"quoted"\\ {a,b} NULL', true,
		 '\x00ff10'::bytea, '2024-02-29', '2001-02-03 04:05:06.789', '2001-02-03 04:05:06.789+05:30',
		 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{"a": [1, "x"]}', '{"b": {"c": null}}',
		 ARRAY['a', 'b,c', 'NULL', '', E'q"u\\o'], ARRAY[1, NULL, -3], '1 day 02:03:04.5', '192.168.0.1/24'),
		(2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
		(3, 0, 0, 'NaN', '-Infinity', 'NaN', '', false, ''::bytea, 'infinity', '-infinity', 'infinity',
		 '00000000-0000-0000-0000-000000000000', 'null', '[]', '{}', '{}', '0', '::1/128')`, table))
	cleanupExec(t, admin, "DROP TABLE IF EXISTS "+table)

	forEachExecMode(t, dsn, func(t *testing.T, dsn string) {
		ctx := testContext(t, testTimeout)
		face, sh := openFace(t, dsn, sqlflight.Options{Default: sqlflight.Policy{Soft: time.Hour}})
		pool := face.Pool()
		q := fmt.Sprintf(`SELECT * FROM %s ORDER BY id`, table)

		values := func(rows pgx.Rows, err error) ([][]any, []pgconn.FieldDescription) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			var out [][]any
			var fds []pgconn.FieldDescription
			for rows.Next() {
				v, err := rows.Values()
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, v)
				fds = rows.FieldDescriptions()
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			return out, fds
		}
		want, wantFDs := values(pool.Query(ctx, q))
		_, _ = values(face.Query(ctx, q)) // fills
		before := sh.Stats()
		got, gotFDs := values(face.Query(ctx, q))
		if st := sh.Stats(); st.FreshHits != before.FreshHits+1 {
			t.Fatalf("the second read was no hit: %s", statsString(st))
		}
		if len(got) != len(want) {
			t.Fatalf("%d rows, want %d", len(got), len(want))
		}
		for i := range want {
			for j := range want[i] {
				if !reflect.DeepEqual(got[i][j], want[i][j]) && fmt.Sprintf("%#v", got[i][j]) != fmt.Sprintf("%#v", want[i][j]) {
					t.Errorf("row %d column %s: Values %#v, pgx's %#v", i, wantFDs[j].Name, got[i][j], want[i][j])
				}
			}
		}
		for j := range wantFDs {
			if gotFDs[j].Name != wantFDs[j].Name || gotFDs[j].DataTypeOID != wantFDs[j].DataTypeOID {
				t.Errorf("column %d described as %s (oid %d), pgx's %s (oid %d)", j, gotFDs[j].Name, gotFDs[j].DataTypeOID,
					wantFDs[j].Name, wantFDs[j].DataTypeOID)
			}
		}

		collect := func(rows pgx.Rows, err error) []hostileRow {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
			out, err := pgx.CollectRows(rows, pgx.RowToStructByName[hostileRow])
			if err != nil {
				t.Fatal(err)
			}
			return out
		}
		wantRows := collect(pool.Query(ctx, q))
		gotRows := collect(face.Query(ctx, q))
		if !sameHostile(gotRows, wantRows) {
			t.Errorf("RowToStructByName over a shared result:\n got %+v\nwant %+v", gotRows, wantRows)
		}

		// Scanning into the destinations pgx's users write, and the tag.
		rows, err := face.Query(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for rows.Next() {
			var id int
			var tags []string
			var txt pgtype.Text
			var by []byte
			if err := rows.Scan(&id, nil, nil, nil, nil, nil, &txt, nil, &by, nil, nil, nil, nil, nil, nil, &tags, nil, nil, nil); err != nil {
				t.Fatal(err)
			}
			if id == 1 {
				if len(tags) != 5 || tags[1] != "b,c" || tags[2] != "NULL" || tags[4] != `q"u\o` || txt.String != "it's\n\"quoted\"\\ {a,b} NULL" {
					t.Errorf("row 1 scanned tags %q, txt %q", tags, txt.String)
				}
				if raw := rows.RawValues(); len(raw) != 19 {
					t.Errorf("%d raw values, want 19", len(raw))
				} else {
					raw[8][0] = 'X' // the caller's own copy
				}
				by[0] = 'Y'
			}
			n++
		}
		if err := rows.Err(); err != nil || n != 3 {
			t.Fatalf("%d rows, %v", n, err)
		}
		if tag := rows.CommandTag(); tag.String() != "SELECT 3" {
			t.Errorf("command tag %q, want SELECT 3", tag.String())
		}
		again := collect(face.Query(ctx, q))
		if !sameHostile(again, wantRows) {
			t.Errorf("a reader that wrote to its raw values and scanned bytes changed the shared result:\n got %+v\nwant %+v", again, wantRows)
		}
	})
}

// TestPgxFacePoolHygiene: the face holds none of the pool's connections
// between calls, and a connection whose session it changed never goes
// back to the pool for another caller.
func TestPgxFacePoolHygiene(t *testing.T) {
	dsn := postgresDSN(t)
	ctx := testContext(t, testTimeout)
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	face, sh := openFaceConfig(t, cfg, sqlflight.New(sqlflight.Options{Default: sqlflight.Policy{Soft: time.Hour}}))
	pool := face.Pool()
	var s string
	for i := range 5 {
		if err := face.QueryRow(ctx, `SELECT 'hygiene-' || $1::text`, fmt.Sprint(i%2)).Scan(&s); err != nil {
			t.Fatal(err)
		}
		if _, err := face.Exec(ctx, `SELECT 1`); err != nil {
			t.Fatal(err)
		}
		// An origin gives its connection back just after its callers have
		// their rows.
		waitUntil(t, 10*time.Second, func() string {
			return fmt.Sprintf("after call %d, %d of the pool's connections are held", i, pool.Stat().AcquiredConns())
		}, func() bool { return pool.Stat().AcquiredConns() == 0 })
	}
	// A session changed through the face is ended, not handed back.
	if _, err := face.Exec(ctx, `SET application_name = 'pgxflight_tainted'`); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SHOW application_name`).Scan(&s); err != nil {
		t.Fatal(err)
	}
	if s == "pgxflight_tainted" {
		t.Errorf("the pool handed out the session the face changed (application_name %q)", s)
	}
	// A transaction reads its own writes, not the cache, and a rolled-back
	// write ends nothing.
	table := "pgxtx_" + uniqueID(t)
	admin := openRaw(t, dsn)
	mustExec(t, admin, fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, label text)`, table),
		fmt.Sprintf(`INSERT INTO %s VALUES (1, 'one')`, table))
	cleanupExec(t, admin, "DROP TABLE IF EXISTS "+table)
	read := fmt.Sprintf(`SELECT label FROM %s WHERE id = 1`, table)
	if err := face.QueryRow(ctx, read).Scan(&s); err != nil || s != "one" {
		t.Fatalf("read %q, %v", s, err)
	}
	tx, err := face.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf(`UPDATE %s SET label = 'inside' WHERE id = 1`, table)); err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRow(ctx, read).Scan(&s); err != nil || s != "inside" {
		t.Errorf("the transaction read %q (%v), want its own write", s, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); !errors.Is(err, pgx.ErrTxClosed) {
		t.Errorf("a second Rollback: %v, want pgx.ErrTxClosed", err)
	}
	if err := face.QueryRow(ctx, read).Scan(&s); err != nil || s != "one" {
		t.Errorf("after the rollback the face read %q (%v), want one", s, err)
	}
	// A batch that begins a transaction (Batch.BeginTx) holds the
	// connection until the transaction ends.
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	b.Queue(fmt.Sprintf(`UPDATE %s SET label = 'batched' WHERE id = 1`, table))
	br := face.SendBatch(ctx, b)
	btx := br.Tx()
	if btx == nil {
		t.Fatal("a batch that began a transaction has no Tx")
	}
	if err := br.Close(); err != nil {
		t.Fatal(err)
	}
	if err := btx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := face.QueryRow(ctx, read).Scan(&s); err != nil || s != "batched" {
		t.Errorf("after the batch's transaction committed the face read %q (%v), want batched", s, err)
	}
	waitUntil(t, 10*time.Second, func() string {
		return fmt.Sprintf("%d of the pool's connections held at the end", pool.Stat().AcquiredConns())
	}, func() bool { return pool.Stat().AcquiredConns() == 0 })
	t.Log(statsString(sh.Stats()))
}

// upperRewriter is a QueryRewriter the Shield cannot apply itself.
type upperRewriter struct{ arg string }

func (r upperRewriter) RewriteQuery(_ context.Context, _ *pgx.Conn, sql string, _ []any) (string, []any, error) {
	return sql, []any{r.arg}, nil
}

// TestPgxFaceArguments: named arguments share with their positional twin;
// a rewriter the Shield cannot apply, or result formats of the caller's
// own, are never shared.
func TestPgxFaceArguments(t *testing.T) {
	dsn := postgresDSN(t)
	ctx := testContext(t, testTimeout)
	face, sh := openFace(t, dsn, sqlflight.Options{Default: sqlflight.Policy{Soft: time.Hour}})
	var a, b string
	if err := face.QueryRow(ctx, `SELECT 'named-' || $1::text`, "x").Scan(&a); err != nil {
		t.Fatal(err)
	}
	before := sh.Stats()
	if err := face.QueryRow(ctx, `SELECT 'named-' || @v::text`, pgx.NamedArgs{"v": "x"}).Scan(&b); err != nil {
		t.Fatal(err)
	}
	if st := sh.Stats(); a != "named-x" || b != a || st.FreshHits != before.FreshHits+1 {
		t.Errorf("named twin read %q after %q; hits %d → %d, want a hit", b, a, before.FreshHits, st.FreshHits)
	}
	for _, v := range []string{"p", "q"} {
		if err := face.QueryRow(ctx, `SELECT 'rewritten-' || $1::text`, upperRewriter{v}).Scan(&a); err != nil {
			t.Fatal(err)
		}
		if a != "rewritten-"+v {
			t.Errorf("a rewriter's read %q, want rewritten-%s", a, v)
		}
	}
	before = sh.Stats()
	if err := face.QueryRow(ctx, `SELECT 'named-' || $1::text`, pgx.QueryResultFormats{pgx.TextFormatCode}, "x").Scan(&a); err != nil || a != "named-x" {
		t.Fatalf("read %q, %v", a, err)
	}
	if err := face.QueryRow(ctx, `SELECT 'named-' || $1::text`, pgx.QueryExecModeSimpleProtocol, "x").Scan(&a); err != nil || a != "named-x" {
		t.Fatalf("read %q, %v", a, err)
	}
	if st := sh.Stats(); st.FreshHits != before.FreshHits+1 {
		t.Errorf("result formats of the caller's own passed through and an exec mode hit: hits %d → %d, want one more", before.FreshHits, st.FreshHits)
	}
}
