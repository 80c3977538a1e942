package sqlflight

import (
	"context"
	"database/sql/driver"
	"errors"
	"sync"

	"github.com/sqlflight/sqlflight/internal/parent"
	"github.com/sqlflight/sqlflight/internal/sqlscan"
)

// stmt is a prepared statement. Outside a transaction its queries share
// like plain queries. A statement that may share is prepared lazily, on the
// real connection, only when it must reach the database (when it leads a
// flight or goes through): otherwise every pooled connection database/sql
// prepares it on would open a real connection, followers included. Any
// other statement is prepared at once. The parent is reached under mu: a
// detached origin may prepare and run it while its caller has left.
type stmt struct {
	c     *conn
	query string
	scan  *sqlscan.Result

	mu     sync.Mutex
	parent driver.Stmt // nil until prepared
	on     driver.Conn // the real connection parent was prepared on
	closed bool
}

var (
	_ driver.Stmt              = (*stmt)(nil)
	_ driver.StmtExecContext   = (*stmt)(nil)
	_ driver.StmtQueryContext  = (*stmt)(nil)
	_ driver.NamedValueChecker = (*stmt)(nil)
	_ driver.ColumnConverter   = (*stmt)(nil) //nolint:staticcheck // mirrored when the parent has it
)

// columnConverterFace is driver.ColumnConverter under another name: a
// wrapper that embedded driver.ColumnConverter would have a field named
// ColumnConverter and no such method.
type columnConverterFace interface {
	ColumnConverter(idx int) driver.ValueConverter
}

var errStmtClosed = errors.New("sqlflight: statement is closed")

// PrepareContext prepares query. Once the scope knows the shape of its
// parent's statements, a read that may share is prepared lazily (its syntax
// errors then surface when it first runs); anything else is prepared on the
// real connection at once.
func (c *conn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	c.awake()
	s := &stmt{c: c, query: query, scan: c.scan(query)}
	if mask, ok := c.sc.stmtShape(); ok && s.lazy(mask) {
		c.stmts++
		return mirrorStmt(s, mask), nil
	}
	rc, err := c.use(ctx)
	if err != nil {
		return nil, err
	}
	ps, err := parent.Prepare(ctx, rc, query)
	if err != nil {
		return nil, err
	}
	s.parent, s.on = ps, rc
	c.stmts++
	return mirrorStmt(s, c.sc.learnStmtShape(ps)), nil
}

// lazy reports whether s may wait to be prepared: a read that may share,
// on a clean connection, whose parent statements need no per-statement
// argument conversion (which would need the prepared statement at once).
func (s *stmt) lazy(mask uint16) bool {
	return mask&(stmtNamedValueChecker|stmtColumnConverter) == 0 &&
		s.scan.ReadOnly && s.scan.Verdict != sqlscan.Never && !s.c.inTx() && !s.c.tainted
}

// prepared returns the parent statement prepared on rc, preparing it (again,
// if the real connection changed) when needed.
func (s *stmt) prepared(ctx context.Context, rc driver.Conn) (driver.Stmt, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errStmtClosed
	}
	if s.parent != nil && s.on == rc {
		return s.parent, nil
	}
	ps, err := parent.Prepare(ctx, rc, s.query)
	if err != nil {
		return nil, err
	}
	if s.parent != nil {
		_ = s.parent.Close()
	}
	s.parent, s.on = ps, rc
	return ps, nil
}

// current is the parent statement if prepared (for the parent's own
// methods that take no connection).
func (s *stmt) current() driver.Stmt {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.parent
}

// Close closes the parent statement, after any origin query still running
// on the real connection (database/sql closes unused statements of idle
// connections, which may be lending their real connection to an origin).
func (s *stmt) Close() error {
	s.c.stmts--
	s.c.waitIdle()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.parent == nil {
		return nil
	}
	return s.parent.Close()
}

// NumInput is the parent's count, or -1 (database/sql then leaves the
// check to the parent) while the statement is not prepared.
func (s *stmt) NumInput() int {
	if ps := s.current(); ps != nil {
		return ps.NumInput()
	}
	return -1
}

// Exec runs the statement (database/sql calls it only for a parent without
// StmtExecContext).
func (s *stmt) Exec(args []driver.Value) (driver.Result, error) { //nolint:staticcheck // legacy parent
	return s.ExecContext(context.Background(), parent.Named(args))
}

// Query runs the statement (database/sql calls it only for a parent without
// StmtQueryContext).
func (s *stmt) Query(args []driver.Value) (driver.Rows, error) { //nolint:staticcheck // legacy parent
	return s.QueryContext(context.Background(), parent.Named(args))
}

// ExecContext runs the statement and records its effects like Conn.ExecContext.
func (s *stmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	s.c.statement()
	s.c.s.stats.queries.Add(1)
	s.c.s.stats.bypassed.Add(bypassExec)
	call := s.c.s.execBegins(s.scan, s.query)
	a, _, err := s.c.s.annotationOf(s.scan)
	if err != nil {
		return nil, err
	}
	probe, err := s.c.admit(!s.scan.ReadOnly)
	if err != nil {
		return nil, err
	}
	rc, err := s.c.use(ctx)
	if err == nil && probe {
		rc, err = s.c.forProbe(ctx, rc, true, s.c.use)
	}
	if err != nil {
		s.c.sc.guard.Breaker.Record(probe, err)
		return nil, err
	}
	var res driver.Result
	ps, err := s.prepared(ctx, rc)
	if err == nil {
		if e, ok := ps.(driver.StmtExecContext); ok {
			res, err = e.ExecContext(ctx, args)
		} else {
			res, err = parent.Legacy(ctx, args, ps.Exec) //nolint:staticcheck // legacy parent
		}
	}
	s.c.sc.guard.Breaker.Record(probe, err)
	s.c.record(ctx, &fate{r: s.scan, a: a, args: args}, err != nil)
	call.st.Ended(call.out, call.began, err != nil)
	return res, err
}

// QueryContext shares the statement's query like Conn.QueryContext; where
// it must reach the database it runs the prepared statement.
func (s *stmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	s.c.statement()
	s.c.s.stats.queries.Add(1)
	return s.c.query(ctx, s.query, s.scan, args, func(ctx context.Context, rc driver.Conn, args []driver.NamedValue) (driver.Rows, error) {
		ps, err := s.prepared(ctx, rc)
		if err != nil {
			return nil, err
		}
		if q, ok := ps.(driver.StmtQueryContext); ok {
			return q.QueryContext(ctx, args)
		}
		return parent.Legacy(ctx, args, ps.Query) //nolint:staticcheck // legacy parent
	}, "")
}

// CheckNamedValue forwards to the parent statement's checker (mirrored only
// when the parent has one; such statements are prepared at once).
func (s *stmt) CheckNamedValue(nv *driver.NamedValue) error {
	if chk, ok := s.current().(driver.NamedValueChecker); ok {
		return chk.CheckNamedValue(nv)
	}
	return s.c.CheckNamedValue(nv)
}

func (s *stmt) ColumnConverter(idx int) driver.ValueConverter {
	return s.current().(driver.ColumnConverter).ColumnConverter(idx) //nolint:staticcheck // mirrored
}
