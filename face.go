package sqlflight

import (
	"context"
	"database/sql/driver"
)

// What another face of the Shield calls on a virtual connection (the pgx
// face, package pgxflight, over PoolConnector's connections): the
// statement's fate and effects are the engine's, as for database/sql's
// calls, but the work on the real connection is the face's own, so that it
// reaches the parent's API (pgx's rows and command tags) rather than
// database/sql's. Both methods are part of every virtual connection
// (connBase); they are not for applications.

// FaceQuery runs one statement of rows as QueryContext does: shared
// through the cache and flights when its fate says so (the origin runs the
// text on the real connection, as for database/sql), else passed through,
// where run does the work on the real connection (nil: send the text).
// share false passes it through whatever its fate: its arguments are not
// what args says (a pgx QueryRewriter the engine cannot apply), so args
// must then be nil, and what it wrote is judged without them.
func (c *conn) FaceQuery(ctx context.Context, query string, args []driver.NamedValue, share bool, run func(ctx context.Context, rc driver.Conn, args []driver.NamedValue) (driver.Rows, error)) (driver.Rows, error) {
	c.statement()
	c.s.stats.queries.Add(1)
	pass := ""
	if !share {
		pass = bypassArgs
	}
	return c.query(ctx, query, c.scan(query), args, run, pass)
}

// FaceExec runs statements that return no rows to their caller as
// ExecContext does, one text or several sent at once (a pgx batch, or a
// COPY), each with its arguments (args[i] for queries[i]; nil when unknown:
// what it wrote is then judged without them). run does the work on the
// real connection. A transaction begun or ended by run is told by its
// text (BEGIN, COMMIT, ROLLBACK, SAVEPOINT …), as if run had sent it.
//
// The work is complete only when done is called (a batch's results are
// read after run returns): until then its writes hold back every flight of
// their tables, and done tells the fleet of them. done is never nil, and
// is to be called exactly once.
func (c *conn) FaceExec(ctx context.Context, queries []string, args [][]driver.NamedValue, run func(ctx context.Context, rc driver.Conn) error) (done func(), err error) {
	c.statement()
	c.s.stats.queries.Add(uint64(len(queries))) // a batch's statements each count, as each is bypassed
	fates := make([]fate, len(queries))
	calls := make([]stmtCall, len(queries))
	readOnly := true
	for i, q := range queries {
		r := c.scan(q)
		calls[i] = c.s.execBegins(r, q)
		a, _, err := c.s.annotationOf(r)
		if err != nil {
			return func() {}, err
		}
		var as []driver.NamedValue
		if i < len(args) {
			as = args[i]
		}
		fates[i] = fate{r: r, a: a, args: as, rowsFollow: true}
		readOnly = readOnly && r.ReadOnly
	}
	probe, err := c.admit(!readOnly)
	if err != nil {
		return func() {}, err
	}
	rc, err := c.use(ctx)
	if err == nil && probe {
		rc, err = c.forProbe(ctx, rc, true, c.use)
	}
	if err != nil {
		c.sc.guard.Breaker.Record(probe, err)
		return func() {}, err
	}
	err = run(ctx, rc)
	c.sc.guard.Breaker.Record(probe, err)
	var started []write
	for i := range fates {
		c.s.stats.bypassed.Add(bypassExec)
		calls[i].st.Ended(calls[i].out, calls[i].began, err != nil)
		started = append(started, c.record(ctx, &fates[i], err != nil)...)
	}
	return func() {
		for _, w := range started {
			c.s.finishWrite(w)
		}
	}, err
}
