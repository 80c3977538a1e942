package pgxflight

import (
	"context"
	"database/sql/driver"

	"github.com/jackc/pgx/v5"
)

// sendBatch sends b on c through send, which does the work on the pool's
// connection; release gives the connection back once the results are
// closed (nil: a transaction's, which keeps it).
func sendBatch(ctx context.Context, c faceConn, b *pgx.Batch, release func() error, send func(*pgx.Conn) pgx.BatchResults) pgx.BatchResults {
	texts := make([]string, len(b.QueuedQueries))
	args := make([][]driver.NamedValue, len(b.QueuedQueries))
	for i, q := range b.QueuedQueries {
		st := statementOf(ctx, q.SQL, q.Arguments)
		texts[i], args[i] = st.sql, st.named
	}
	var br pgx.BatchResults
	done, err := c.FaceExec(ctx, texts, args, func(ctx context.Context, rc driver.Conn) error {
		pc, err := pgxConn(rc)
		if err != nil {
			return err
		}
		br = send(pc)
		return nil
	})
	if err != nil {
		done()
		if release != nil {
			_ = release()
		}
		return pgx.FailedBatchResults(b, err)
	}
	r := &batchResults{BatchResults: br, done: done, release: release}
	if ptx := br.Tx(); ptx != nil && release != nil {
		// Batch.BeginTx: the transaction owns the connection from now on
		// and gives it back when it ends.
		r.tx, r.release = &tx{c: c, tx: ptx}, nil
	}
	return r
}

// batchResults are pgx's results of a batch; Close completes the batch's
// writes for the Shield and gives the connection back.
type batchResults struct {
	pgx.BatchResults
	done    func()
	release func() error
	tx      *tx // the transaction the batch began (Batch.BeginTx), or nil
	closed  bool
	err     error
}

// Tx returns the transaction the batch began (pgx.Batch.BeginTx), or nil.
func (r *batchResults) Tx() pgx.Tx {
	if r.tx == nil {
		return r.BatchResults.Tx() // nil, or a transaction's own batch's
	}
	return r.tx
}

func (r *batchResults) Close() error {
	if r.closed {
		return r.err
	}
	r.closed = true
	r.err = r.BatchResults.Close()
	r.done()
	if r.release != nil {
		_ = r.release()
	}
	return r.err
}

// copyFrom runs a COPY of table's columns on c through copy, which does
// the work on the pool's connection: a write of the table.
func copyFrom(ctx context.Context, c faceConn, table pgx.Identifier, columns []string, copy func(*pgx.Conn) (int64, error)) (int64, error) {
	var n int64
	done, err := c.FaceExec(ctx, []string{copyText(table, columns)}, nil, func(ctx context.Context, rc driver.Conn) error {
		pc, err := pgxConn(rc)
		if err != nil {
			return err
		}
		n, err = copy(pc)
		return err
	})
	done()
	return n, err
}
