package sqlflight

import (
	"context"
	"database/sql/driver"

	"github.com/sqlflight/sqlflight/internal/sqlscan"
)

// stmt wraps a statement prepared on the connection's real connection.
// Outside a transaction its queries share like plain queries: the origin of
// a flight it leads runs the prepared statement.
type stmt struct {
	c      *conn
	parent driver.Stmt
	query  string
	scan   *sqlscan.Result
}

var (
	_ driver.Stmt              = (*stmt)(nil)
	_ driver.StmtExecContext   = (*stmt)(nil)
	_ driver.StmtQueryContext  = (*stmt)(nil)
	_ driver.NamedValueChecker = (*stmt)(nil)
	_ driver.ColumnConverter   = (*stmt)(nil) //nolint:staticcheck // mirrored when the parent has it
)

func newStmt(c *conn, ps driver.Stmt, query string) driver.Stmt {
	c.stmts++
	s := &stmt{c: c, parent: ps, query: query, scan: sqlscan.Scan(query)}
	return mirrorStmt(s, mirrorStmtMask(ps))
}

func (s *stmt) Close() error {
	s.c.stmts--
	return s.parent.Close()
}

func (s *stmt) NumInput() int { return s.parent.NumInput() }

// Exec runs the statement (database/sql calls it only for a parent without
// StmtExecContext).
func (s *stmt) Exec(args []driver.Value) (driver.Result, error) { //nolint:staticcheck // legacy parent
	return s.ExecContext(context.Background(), namedValues(args))
}

// Query runs the statement (database/sql calls it only for a parent without
// StmtQueryContext).
func (s *stmt) Query(args []driver.Value) (driver.Rows, error) { //nolint:staticcheck // legacy parent
	return s.QueryContext(context.Background(), namedValues(args))
}

// ExecContext runs the statement and records its effects like Conn.ExecContext.
func (s *stmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	s.c.s.stats.queries.Add(1)
	s.c.s.stats.bypass(bypassExec)
	if _, err := s.c.use(ctx); err != nil {
		return nil, err
	}
	probe, err := s.c.admit(!s.scan.ReadOnly || s.c.mayWrite(s.scan))
	if err != nil {
		return nil, err
	}
	var res driver.Result
	if e, ok := s.parent.(driver.StmtExecContext); ok {
		res, err = e.ExecContext(ctx, args)
	} else {
		res, err = legacy(ctx, args, s.parent.Exec) //nolint:staticcheck // legacy parent
	}
	s.c.s.guard.br.record(probe, err)
	s.c.record(s.scan, err != nil)
	return res, err
}

// QueryContext shares the statement's query like Conn.QueryContext.
func (s *stmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	s.c.s.stats.queries.Add(1)
	return s.c.query(ctx, s.query, s.scan, args, func(ctx context.Context, _ driver.Conn, args []driver.NamedValue) (driver.Rows, error) {
		if q, ok := s.parent.(driver.StmtQueryContext); ok {
			return q.QueryContext(ctx, args)
		}
		return legacy(ctx, args, s.parent.Query) //nolint:staticcheck // legacy parent
	})
}

// CheckNamedValue forwards to the parent statement's checker, or to the
// connection's: database/sql consults the statement's checker instead of the
// connection's, so a statement that claims one must not skip the latter.
func (s *stmt) CheckNamedValue(nv *driver.NamedValue) error {
	if chk, ok := s.parent.(driver.NamedValueChecker); ok {
		return chk.CheckNamedValue(nv)
	}
	return s.c.CheckNamedValue(nv)
}

func (s *stmt) ColumnConverter(idx int) driver.ValueConverter {
	return s.parent.(driver.ColumnConverter).ColumnConverter(idx) //nolint:staticcheck // mirrored
}

func namedValues(args []driver.Value) []driver.NamedValue {
	nv := make([]driver.NamedValue, len(args))
	for i, v := range args {
		nv[i] = driver.NamedValue{Ordinal: i + 1, Value: v}
	}
	return nv
}
