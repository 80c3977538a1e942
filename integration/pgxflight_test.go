package integration

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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
		db.Close()
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
		if n := db.Pool().Stat().AcquiredConns(); n != 0 {
			t.Errorf("%d of the pool's connections still acquired after the herd", n)
		}
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
