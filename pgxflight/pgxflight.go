// Package pgxflight is sqlflight's face for pgx: the method set of a
// *pgxpool.Pool that applications call (Exec, Query, QueryRow, Begin,
// BeginTx, SendBatch, CopyFrom, Ping), over the same Shield as the
// database/sql face. It is what code written against pgx's own API, and
// sqlc's pgx/v5 output (its DBTX), puts in front of its pool:
//
//	pool, err := pgxpool.New(ctx, dsn)
//	…
//	db := pgxflight.New(sqlflight.Default(), pool)
//	defer db.Close()
//	queries := store.New(db) // sqlc: New(db DBTX)
//
// Everything the Shield does for database/sql it does here, with the same
// engine: the scan, the server's verdict, the policies (annotations,
// context policies, rules, defaults), flights, the cache, the guard, the
// shared tier, the change feed, statistics and the live page. The scope is
// the pool's resolved connection configuration (Shield.PoolConnector), so
// a database/sql face and a pgx face of one Shield reaching the same
// database as the same user share their entries, and a write through
// either ends the other's cached reads.
//
// # Rows
//
// A read that goes to the database alone (a write, a transaction's, one
// the Shield does not share) returns pgx's own rows from the pool's
// connection. A shared result (a hit, a follower, a result a flight
// recorded) replays as pgx.Rows that scan by pgx's rules, through pgx's
// default type map: []string from text[], pgtype values,
// pgx.RowToStructByName, pgx.CollectRows. A shared result is what pgx's
// stdlib reads (the database/sql face's results are the same entries): the
// types pgx's stdlib reads in binary (integers, floats, booleans, bytea,
// dates and timestamps, oid, xid, cid) replay in binary, every other type
// in text, and FieldDescriptions says which (its Format); RawValues are
// the caller's own copies. Its FieldDescriptions carry the column's name,
// type and format, not its table's OID and attribute number; its
// CommandTag is "SELECT n" once every row was read; its Conn is nil (no
// connection is held); a type registered on the pool's connections
// (AfterConnect) scans as text.
//
// # Arguments and exec modes
//
// Arguments are pgx's: pgx.NamedArgs and pgx.StrictNamedArgs are rewritten
// as pgx rewrites them before the statement is keyed, so that a named
// query shares with its positional twin; a query exec mode
// (pgx.QueryExecMode) or the pool's DefaultQueryExecMode applies to every
// statement that reaches the database. A statement with another
// pgx.QueryRewriter, or with pgx.QueryResultFormats or
// pgx.QueryResultFormatsByOID, is never shared: it goes to the database
// as given.
//
// # Transactions, batches, copies
//
// A transaction (Begin, BeginTx, pgx.BeginFunc), a batch (SendBatch) and a
// copy (CopyFrom) go to the database as pgx sends them, on one of the
// pool's connections held for them; what they write ends the Shield's
// cached reads of its tables (a transaction's at its end, a batch's once
// it is closed), as database/sql's do.
//
// # Tracing
//
// A pool with a ConnConfig.Tracer (otelpgx, pgx's multitracer) sees every
// round trip that reaches the database: the statements passed through, the
// origins of flights, the Shield's catalog questions. A hit or a follower
// reaches no connection and is no query to the tracer.
package pgxflight

import (
	"context"
	"database/sql/driver"
	"errors"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlflight/sqlflight"
)

// DB is a pool seen through a Shield. Its methods are safe for concurrent
// use, as a pool's are.
type DB struct {
	s    *sqlflight.Shield
	pool *pgxpool.Pool
	conn driver.Connector // s.PoolConnector(pool)

	mu     sync.Mutex
	anchor driver.Conn // keeps the scope live while the DB is open
	closed bool
}

// New returns pool seen through s. Nothing reaches the database until the
// first statement. Close closes the pool too; s stays open.
func New(s *sqlflight.Shield, pool *pgxpool.Pool) *DB {
	return &DB{s: s, pool: pool, conn: s.PoolConnector(pool)}
}

// Pool returns the pool underneath, for what the face does not carry
// (Acquire, Stat, Config, Reset). Work done on it directly is not seen by
// the Shield: a write through it does not end cached reads.
func (db *DB) Pool() *pgxpool.Pool { return db.pool }

// Shield returns the Shield db goes through.
func (db *DB) Shield() *sqlflight.Shield { return db.s }

// Close closes the face and then the pool (pgxpool.Pool.Close: it waits
// for every acquired connection to be released).
func (db *DB) Close() {
	db.mu.Lock()
	anchor := db.anchor
	db.anchor, db.closed = nil, true
	db.mu.Unlock()
	if anchor != nil {
		_ = anchor.Close()
	}
	if c, ok := db.conn.(interface{ Close() error }); ok {
		_ = c.Close()
	}
	db.pool.Close()
}

// Ping acquires a connection of the pool and pings the server, as
// pgxpool.Pool.Ping does.
func (db *DB) Ping(ctx context.Context) error { return db.pool.Ping(ctx) }

// errClosed is the error of a statement on a closed DB.
var errClosed = errors.New("pgxflight: the DB is closed")

// faceConn is a virtual connection of the Shield, as the face uses it.
type faceConn interface {
	driver.Conn
	FaceQuery(ctx context.Context, query string, args []driver.NamedValue, share bool, run func(ctx context.Context, rc driver.Conn, args []driver.NamedValue) (driver.Rows, error)) (driver.Rows, error)
	FaceExec(ctx context.Context, queries []string, args [][]driver.NamedValue, run func(ctx context.Context, rc driver.Conn) error) (done func(), err error)
}

// vconn returns a virtual connection of its own for one call (close it
// when the call's work is done). The first call of a DB also makes the
// anchor, a virtual connection that lives as long as the DB so that the
// scope counts a user between calls; making the scope's first opens (and
// gives back) one of the pool's connections to learn their shape.
func (db *DB) vconn(ctx context.Context) (faceConn, error) {
	db.mu.Lock()
	if db.closed {
		db.mu.Unlock()
		return nil, errClosed
	}
	if db.anchor == nil {
		first, err := db.conn.Connect(ctx)
		if err != nil {
			db.mu.Unlock()
			return nil, err
		}
		anchor, err := db.conn.Connect(ctx)
		if err != nil {
			db.mu.Unlock()
			_ = first.Close()
			return nil, err
		}
		db.anchor = anchor
		db.mu.Unlock()
		_ = first.Close() // its real connection goes back to the pool
	} else {
		db.mu.Unlock()
	}
	c, err := db.conn.Connect(ctx)
	if err != nil {
		return nil, err
	}
	fc, ok := c.(faceConn)
	if !ok {
		_ = c.Close()
		return nil, errors.New("pgxflight: the Shield's connection has no face for pgx")
	}
	return fc, nil
}

// pgxConn is the pool's connection under a real connection of the Shield.
func pgxConn(rc driver.Conn) (*pgx.Conn, error) {
	if c, ok := rc.(*stdlib.Conn); ok {
		return c.Conn(), nil
	}
	return nil, errors.New("pgxflight: the Shield's real connection is not pgx's")
}

// Exec runs sql with args on one of the pool's connections, as
// pgxpool.Pool.Exec does, and ends the Shield's cached reads of what it
// wrote.
func (db *DB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	c, err := db.vconn(ctx)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	defer c.Close()
	return execOn(ctx, c, sql, args, func(pc *pgx.Conn) (pgconn.CommandTag, error) { return pc.Exec(ctx, sql, args...) })
}

// execOn runs one statement on c through exec, which does the work on the
// pool's connection.
func execOn(ctx context.Context, c faceConn, sql string, args []any, exec func(*pgx.Conn) (pgconn.CommandTag, error)) (pgconn.CommandTag, error) {
	st := statementOf(ctx, sql, args)
	var tag pgconn.CommandTag
	done, err := c.FaceExec(ctx, []string{st.sql}, [][]driver.NamedValue{st.named}, func(ctx context.Context, rc driver.Conn) error {
		pc, err := pgxConn(rc)
		if err != nil {
			return err
		}
		tag, err = exec(pc)
		return err
	})
	done()
	return tag, err
}

// Query runs sql with args as pgxpool.Pool.Query does: a read the Shield
// shares is answered from the cache or a flight; anything else goes to
// one of the pool's connections, held until the rows are closed. As pgx's,
// the rows are never nil, also beside an error.
func (db *DB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	c, err := db.vconn(ctx)
	if err != nil {
		return errRows{err}, err
	}
	rows, err := queryOn(ctx, c, sql, args, func(pc *pgx.Conn) (pgx.Rows, error) { return pc.Query(ctx, sql, args...) }, c.Close)
	if err != nil {
		_ = c.Close()
	}
	return rows, err
}

// queryOn runs one read on c; query does the work on the pool's
// connection when it goes there. release is called once the rows are
// done with (nil: nothing to release).
func queryOn(ctx context.Context, c faceConn, sql string, args []any, query func(*pgx.Conn) (pgx.Rows, error), release func() error) (pgx.Rows, error) {
	st := statementOf(ctx, sql, args)
	var direct pgx.Rows
	dr, err := c.FaceQuery(ctx, st.sql, st.named, st.share, func(ctx context.Context, rc driver.Conn, _ []driver.NamedValue) (driver.Rows, error) {
		pc, err := pgxConn(rc)
		if err != nil {
			return nil, err
		}
		rows, err := query(pc)
		if err != nil {
			rows.Close()
			return nil, err
		}
		direct = rows
		return &driverRows{rows: rows}, nil
	})
	if err != nil {
		return errRows{err}, err
	}
	if direct != nil {
		return &passRows{Rows: direct, engine: dr, release: release}, nil
	}
	return newSharedRows(dr, release), nil
}

// QueryRow is Query for one row, as pgxpool.Pool.QueryRow: Scan reads the
// first row (pgx.ErrNoRows when there is none) and closes the rows.
func (db *DB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rows, _ := db.Query(ctx, sql, args...)
	return &row{rows: rows}
}

// Begin begins a transaction (pgxpool.Pool.Begin).
func (db *DB) Begin(ctx context.Context) (pgx.Tx, error) { return db.BeginTx(ctx, pgx.TxOptions{}) }

// BeginTx begins a transaction with opts on one of the pool's connections,
// held until it ends (pgxpool.Pool.BeginTx). Its statements go to the
// database, and what it wrote ends the Shield's cached reads of its tables
// when it ends.
func (db *DB) BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error) {
	c, err := db.vconn(ctx)
	if err != nil {
		return nil, err
	}
	var ptx pgx.Tx
	done, err := c.FaceExec(ctx, []string{"BEGIN"}, nil, func(ctx context.Context, rc driver.Conn) error {
		pc, err := pgxConn(rc)
		if err != nil {
			return err
		}
		ptx, err = pc.BeginTx(ctx, opts)
		return err
	})
	done()
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	return &tx{c: c, tx: ptx}, nil
}

// SendBatch sends b on one of the pool's connections, held until the
// results are closed (pgxpool.Pool.SendBatch). Its statements go to the
// database; what they wrote ends the Shield's cached reads of its tables
// once the results are closed.
func (db *DB) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	c, err := db.vconn(ctx)
	if err != nil {
		return pgx.FailedBatchResults(b, err)
	}
	return sendBatch(ctx, c, b, c.Close, func(pc *pgx.Conn) pgx.BatchResults { return pc.SendBatch(ctx, b) })
}

// CopyFrom copies rows into tableName on one of the pool's connections
// (pgxpool.Pool.CopyFrom) and ends the Shield's cached reads of the table.
func (db *DB) CopyFrom(ctx context.Context, tableName pgx.Identifier, columnNames []string, rowSrc pgx.CopyFromSource) (int64, error) {
	c, err := db.vconn(ctx)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	return copyFrom(ctx, c, tableName, columnNames, func(pc *pgx.Conn) (int64, error) {
		return pc.CopyFrom(ctx, tableName, columnNames, rowSrc)
	})
}
