// Package parent calls the wrapped ("parent") driver's connections as
// database/sql would: through the context-aware interface a connection
// implements, else through its legacy one, adapting the arguments and the
// context as database/sql does for such a driver.
//
// Exec and Query return driver.ErrSkip when the connection implements
// neither form (the caller prepares instead, as database/sql does). A
// legacy call refuses named arguments with database/sql's own error and is
// not made once its context has ended; a legacy Prepare that returns after
// its context ended is closed and reports the context's error. Values and
// Named convert between the two forms of arguments.
package parent

import (
	"context"
	"database/sql/driver"
	"errors"
)

// Exec runs query on rc with ExecerContext, else a legacy Execer, else
// returns driver.ErrSkip.
func Exec(ctx context.Context, rc driver.Conn, query string, args []driver.NamedValue) (driver.Result, error) {
	if e, ok := rc.(driver.ExecerContext); ok {
		return e.ExecContext(ctx, query, args)
	}
	if e, ok := rc.(driver.Execer); ok { //nolint:staticcheck // legacy parent
		return Legacy(ctx, args, func(vals []driver.Value) (driver.Result, error) { return e.Exec(query, vals) })
	}
	return nil, driver.ErrSkip
}

// Query runs query on rc with QueryerContext, else a legacy Queryer, else
// returns driver.ErrSkip.
func Query(ctx context.Context, rc driver.Conn, query string, args []driver.NamedValue) (driver.Rows, error) {
	if q, ok := rc.(driver.QueryerContext); ok {
		return q.QueryContext(ctx, query, args)
	}
	if q, ok := rc.(driver.Queryer); ok { //nolint:staticcheck // legacy parent
		return Legacy(ctx, args, func(vals []driver.Value) (driver.Rows, error) { return q.Query(query, vals) })
	}
	return nil, driver.ErrSkip
}

// Prepare prepares query on rc with ConnPrepareContext, else with Prepare;
// a statement the latter returns after ctx ended is closed, and ctx's error
// returned.
func Prepare(ctx context.Context, rc driver.Conn, query string) (driver.Stmt, error) {
	if pc, ok := rc.(driver.ConnPrepareContext); ok {
		return pc.PrepareContext(ctx, query)
	}
	ps, err := rc.Prepare(query)
	if err == nil && ctx.Err() != nil {
		_ = ps.Close()
		return nil, ctx.Err()
	}
	return ps, err
}

// Legacy calls a parent method that takes neither a context nor named
// arguments, as database/sql would: names are refused, and a context that
// already ended stops the call.
func Legacy[T any](ctx context.Context, args []driver.NamedValue, call func([]driver.Value) (T, error)) (T, error) {
	var zero T
	vals, err := Values(args)
	if err != nil {
		return zero, err
	}
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	return call(vals)
}

// ErrNamed is database/sql's error for named arguments to a driver that
// does not support them.
var ErrNamed = errors.New("sql: driver does not support the use of Named Parameters")

// Values returns args as plain values, or ErrNamed if one has a name.
func Values(args []driver.NamedValue) ([]driver.Value, error) {
	vals := make([]driver.Value, len(args))
	for i, a := range args {
		if a.Name != "" {
			return nil, ErrNamed
		}
		vals[i] = a.Value
	}
	return vals, nil
}

// Named returns vals as positional arguments ($1, $2, …).
func Named(vals []driver.Value) []driver.NamedValue {
	nv := make([]driver.NamedValue, len(vals))
	for i, v := range vals {
		nv[i] = driver.NamedValue{Ordinal: i + 1, Value: v}
	}
	return nv
}
