package integration

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlflight/sqlflight"
	"github.com/sqlflight/sqlflight/pgxflight"
)

// The faces workload: the epochs workload's tables, statements and kinds
// of write, through both faces of one Shield at once. Its database/sql
// face is a DSN opened with sql.Open and its pgx face a pool of the same
// configuration (pgxflight): one scope, whose entries either face fills
// and the other serves. Every other reader and every other writer goes
// through the pgx face; the face's writers update (UPDATE … RETURNING
// through QueryRow), insert (Exec), copy (CopyFrom), send batches
// (SendBatch) and run committed and rolled-back transactions
// (pgx.BeginFunc), reading inside them. Catches a write through one face
// that does not end the other's reads, a shared entry that replays
// another value through the pgx face, and the pgx face's transactions,
// batches or copies leaking or being cached.

// pgxQueryer is what the pgx face and its transactions read with.
type pgxQueryer interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// faceQuerier is the pgx face (or a transaction of it) as a diffQuerier.
type faceQuerier struct{ q pgxQueryer }

func (f faceQuerier) QueryRowContext(ctx context.Context, query string, args ...any) diffRow {
	return f.q.QueryRow(ctx, query, args...)
}

func (f faceQuerier) QueryContext(ctx context.Context, query string, args ...any) (diffRowSet, error) {
	rows, err := f.q.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return rows, nil
}

// faceInt is scalarInt through the pgx face.
func faceInt(ctx context.Context, q pgxQueryer, query string, args ...any) (int64, error) {
	var v int64
	err := q.QueryRow(ctx, query, args...).Scan(&v)
	return v, err
}

// openFaces opens c's two faces over one Shield with opts.
func openFaces(t *testing.T, c *diffClass, opts sqlflight.Options) {
	t.Helper()
	sh := sqlflight.New(opts)
	name := "sqlflight-faces-" + uniqueID(t)
	sh.Register(name, stdlib.GetDefaultDriver())
	db, err := sql.Open(name, c.dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(c.dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = int32(c.readers/2 + c.writers/2 + 2)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.db, c.sh, c.face = db, sh, pgxflight.New(sh, pool)
	t.Cleanup(func() {
		c.face.Close()
		_ = db.Close()
		_ = sh.Close()
	})
}

// faceTx is diffWriter.tx through the pgx face.
func (w *diffWriter) faceTx(via string, commit bool, body func(pgx.Tx) error, objs ...*diffObj) {
	w.runTx(via, commit, func() (func() error, func() error, func() error, error) {
		tx, err := w.c.face.Begin(w.ctx)
		if err != nil {
			return nil, nil, nil, err
		}
		return func() error { return body(tx) },
			func() error { return tx.Commit(w.ctx) },
			func() error { return tx.Rollback(w.ctx) }, nil
	}, objs...)
}

// diffFaces: the epochs workload through both faces of one Shield.
func diffFaces(t *testing.T, admin *sql.DB, id string) *diffClass {
	c := diffEpochs(t, admin, "f"+id)
	c.catches = "a write through one face (database/sql or pgx) that leaves the other's reads, shared entries replayed wrong through the pgx face, its transactions, batches and copies leaking or cached"
	c.readers, c.writers = 6, 4
	c.open = openFaces
	sqlWrite := c.write
	ep, eq, ei := "dif_ep_f"+id, "dif_eq_f"+id, "dif_ei_f"+id
	const rows, groups = 12, 6
	pBase, qBase, gBase := 0, rows, 2*rows
	updP := fmt.Sprintf("UPDATE %s SET ver = ver + 1 WHERE id = $1 RETURNING ver", ep)
	updQ := fmt.Sprintf("UPDATE %s SET ver = ver + 1 WHERE id = @id RETURNING ver", eq)
	ins := fmt.Sprintf("INSERT INTO %s (grp, w) VALUES ($1, $2)", ei)
	poison := fmt.Sprintf("UPDATE %s SET ver = -%d - ver WHERE id = $1 RETURNING ver", ep, diffPoison)
	c.write = func(w *diffWriter) {
		if w.idx%2 == 0 {
			sqlWrite(w) // the database/sql face's writers
			return
		}
		face := c.face
		k, g := w.own(rows), w.own(groups)
		p, q, n := c.objs[pBase+k], c.objs[qBase+k], c.objs[gBase+g]
		faceUpdate := func(via string, o *diffObj, query string, args ...any) {
			start := w.now()
			got, err := faceInt(w.ctx, face, query, args...)
			if err == nil {
				err = w.next(o, got, via)
			}
			if err != nil {
				w.failed(start, via, err, o)
				return
			}
			w.done(start, via, o)
		}
		switch x := w.rng.IntN(12); {
		case x < 3:
			faceUpdate("face UPDATE "+ep, p, updP, k)
		case x < 5:
			faceUpdate("face UPDATE "+eq+" (named arguments)", q, updQ, pgx.NamedArgs{"id": k})
		case x < 6:
			start := w.now()
			if _, err := face.Exec(w.ctx, ins, g, 1); err != nil {
				w.failed(start, "face INSERT "+ei, err, n)
				return
			}
			w.done(start, "face INSERT "+ei, n)
		case x < 7:
			start := w.now()
			if _, err := face.CopyFrom(w.ctx, pgx.Identifier{ei}, []string{"grp", "w"}, pgx.CopyFromRows([][]any{{g, 1}})); err != nil {
				w.failed(start, "face COPY "+ei, err, n)
				return
			}
			w.done(start, "face COPY "+ei, n)
		case x < 8:
			start := w.now()
			b := &pgx.Batch{}
			b.Queue(updP, k)
			b.Queue(ins, g, 1)
			br := face.SendBatch(w.ctx, b)
			got, err := faceInt(w.ctx, faceRowOf{br}, "")
			if err == nil {
				err = w.next(p, got, "face batch")
			}
			if _, berr := br.Exec(); err == nil {
				err = berr
			}
			if cerr := br.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				w.failed(start, "face batch", err, p, n)
				return
			}
			w.done(start, "face batch", p, n)
		case x < 10:
			w.faceTx("face transaction (committed)", true, func(tx pgx.Tx) error {
				for _, u := range []struct {
					o     *diffObj
					query string
					arg   any
				}{{p, updP, k}, {q, updQ, pgx.NamedArgs{"id": k}}} {
					got, err := faceInt(w.ctx, tx, u.query, u.arg)
					if err == nil {
						err = w.next(u.o, got, "face transaction (committed)")
					}
					if err != nil {
						return err
					}
				}
				_, err := tx.Exec(w.ctx, ins, g, 1)
				return err
			}, p, q, n)
		default:
			w.faceTx("face transaction (rolled back)", false, func(tx pgx.Tx) error {
				bad, err := faceInt(w.ctx, tx, poison, k)
				if err != nil {
					return err
				}
				if err := w.txReadOn(faceQuerier{tx}, 0, k, 0, bad, "poisoned the row"); err != nil {
					return err
				}
				if _, err := tx.Exec(w.ctx, ins, g, diffPoison); err != nil {
					return err
				}
				return w.txReadOn(faceQuerier{tx}, 2, g, 0, -1, "added a poisoned row")
			}, p, n)
		}
	}
	return c
}

// faceRowOf reads a batch's next result as a row, for faceInt.
type faceRowOf struct{ br pgx.BatchResults }

func (f faceRowOf) QueryRow(context.Context, string, ...any) pgx.Row { return f.br.QueryRow() }
func (f faceRowOf) Query(context.Context, string, ...any) (pgx.Rows, error) {
	return f.br.Query()
}
