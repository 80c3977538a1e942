package pgxflight

import (
	"context"
	"database/sql/driver"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// tx is a transaction of the face: pgx's own, on one of the pool's
// connections held by its virtual connection until it ends. Each of its
// statements goes to the database through the Shield, which keeps what it
// wrote and ends the cached reads of those tables when the transaction
// ends. A nested one (Begin on a transaction) is pgx's savepoint.
type tx struct {
	c      faceConn
	tx     pgx.Tx
	depth  int // 0: the outermost; n: the n-th savepoint
	closed bool
}

var _ pgx.Tx = (*tx)(nil)

// end runs the statement that ends t (text, as the Shield reads it) and,
// for the outermost, gives the connection back.
func (t *tx) end(ctx context.Context, text string, run func(context.Context) error) error {
	if t.closed {
		return pgx.ErrTxClosed
	}
	t.closed = true
	done, err := t.c.FaceExec(ctx, []string{text}, nil, func(ctx context.Context, _ driver.Conn) error { return run(ctx) })
	done()
	if t.depth == 0 {
		_ = t.c.Close()
	}
	return err
}

func (t *tx) savepoint() string { return "sp_" + strconv.Itoa(t.depth) }

func (t *tx) Commit(ctx context.Context) error {
	text := "COMMIT"
	if t.depth > 0 {
		text = "RELEASE SAVEPOINT " + t.savepoint()
	}
	return t.end(ctx, text, t.tx.Commit)
}

func (t *tx) Rollback(ctx context.Context) error {
	text := "ROLLBACK"
	if t.depth > 0 {
		text = "ROLLBACK TO SAVEPOINT " + t.savepoint()
	}
	return t.end(ctx, text, t.tx.Rollback)
}

// Begin begins a pseudo nested transaction: a savepoint (pgx.Tx.Begin).
func (t *tx) Begin(ctx context.Context) (pgx.Tx, error) {
	if t.closed {
		return nil, pgx.ErrTxClosed
	}
	n := &tx{c: t.c, depth: t.depth + 1}
	done, err := t.c.FaceExec(ctx, []string{"SAVEPOINT " + n.savepoint()}, nil, func(ctx context.Context, _ driver.Conn) error {
		var err error
		n.tx, err = t.tx.Begin(ctx)
		return err
	})
	done()
	if err != nil {
		return nil, err
	}
	return n, nil
}

func (t *tx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if t.closed {
		return pgconn.CommandTag{}, pgx.ErrTxClosed
	}
	return execOn(ctx, t.c, sql, args, func(*pgx.Conn) (pgconn.CommandTag, error) { return t.tx.Exec(ctx, sql, args...) })
}

func (t *tx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if t.closed {
		return errRows{pgx.ErrTxClosed}, pgx.ErrTxClosed
	}
	return queryOn(ctx, t.c, sql, args, func(*pgx.Conn) (pgx.Rows, error) { return t.tx.Query(ctx, sql, args...) }, nil)
}

func (t *tx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rows, _ := t.Query(ctx, sql, args...)
	return &row{rows: rows}
}

func (t *tx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if t.closed {
		return pgx.FailedBatchResults(b, pgx.ErrTxClosed)
	}
	return sendBatch(ctx, t.c, b, nil, func(*pgx.Conn) pgx.BatchResults { return t.tx.SendBatch(ctx, b) })
}

func (t *tx) CopyFrom(ctx context.Context, tableName pgx.Identifier, columnNames []string, rowSrc pgx.CopyFromSource) (int64, error) {
	if t.closed {
		return 0, pgx.ErrTxClosed
	}
	return copyFrom(ctx, t.c, tableName, columnNames, func(*pgx.Conn) (int64, error) {
		return t.tx.CopyFrom(ctx, tableName, columnNames, rowSrc)
	})
}

// LargeObjects, Prepare and Conn are pgx's own: large objects are no
// table's rows the Shield caches, and a prepared statement changes no
// result.
func (t *tx) LargeObjects() pgx.LargeObjects { return t.tx.LargeObjects() }

func (t *tx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	return t.tx.Prepare(ctx, name, sql)
}

func (t *tx) Conn() *pgx.Conn { return t.tx.Conn() }
