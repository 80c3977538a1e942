package verdict

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
)

// A Session runs sqlflight's own statements (the verdict probe, write
// closures, column classes, the server's identity) on a real connection of
// a PostgreSQL scope, whatever Go driver the parent is: PostgreSQL is what
// the server says (PostgresVersion), not a Go type. pgx v5 connections are
// asked through pgx itself; any other parent (lib/pq, pgx v4's stdlib,
// bun's pgdriver, …) through the database/sql driver interfaces of its own
// connection. A Session is used by one goroutine at a time, as its
// connection is.
type Session interface {
	// Exec runs one statement without arguments or results. It never
	// runs more than one statement, whatever q holds (the extended
	// protocol): the probe's texts carry the application's SQL.
	Exec(ctx context.Context, q string) error
	// Query runs q with text arguments and returns its rows, each value
	// in text form (booleans as "t"/"f"), nil for NULL. Array arguments
	// are passed as text literals and cast by q ($1::text::text[]).
	Query(ctx context.Context, q string, args ...string) ([][]*string, error)
	// ParamTypes returns the OIDs and type names the server infers for
	// the parameters of the statement q, without running it.
	ParamTypes(ctx context.Context, q string) ([]uint32, []string, error)
	// Clean reports whether the session is usable and outside any
	// transaction: a session that is not goes back to the pool broken.
	Clean() bool
}

// Of returns the catalog session of rc: through pgx itself when rc is a
// pgx v5 connection (*stdlib.Conn), else through OfDriver.
func Of(rc driver.Conn) Session {
	if c, ok := rc.(*stdlib.Conn); ok {
		return pgxCatalog{c.Conn()}
	}
	return OfDriver(rc)
}

// OfDriver returns the catalog session of rc through the database/sql
// driver interfaces alone (QueryerContext, else Prepare and the
// statement's Query or Exec), whatever driver rc belongs to. Its Clean is
// false after a BEGIN without ROLLBACK or COMMIT, or after an error that
// carries no SQLSTATE (or is driver.ErrBadConn).
func OfDriver(rc driver.Conn) Session { return &driverCatalog{rc: rc} }

// pgxCatalog is a catalog session over a pgx v5 connection.
type pgxCatalog struct{ conn *pgx.Conn }

// Exec runs q through the extended protocol, without a prepared name.
func (c pgxCatalog) Exec(ctx context.Context, q string) error {
	_, err := c.conn.PgConn().ExecParams(ctx, q, nil, nil, nil, nil).Close()
	return err
}

// Query runs q as a statement cached on the connection (catalogMode).
func (c pgxCatalog) Query(ctx context.Context, q string, args ...string) ([][]*string, error) {
	a := make([]any, 0, len(args)+1)
	a = append(a, catalogMode)
	for _, s := range args {
		a = append(a, s)
	}
	rows, err := c.conn.Query(ctx, q, a...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out [][]*string
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return nil, err
		}
		out = append(out, textRow(vals))
	}
	return out, rows.Err()
}

// ParamTypes prepares q unnamed and names the types the server infers.
func (c pgxCatalog) ParamTypes(ctx context.Context, q string) ([]uint32, []string, error) {
	sd, err := c.conn.PgConn().Prepare(ctx, "", q, nil)
	if err != nil {
		return nil, nil, err
	}
	return paramTypeNames(ctx, c, sd.ParamOIDs)
}

// Clean reports whether the connection is open and idle.
func (c pgxCatalog) Clean() bool {
	pc := c.conn.PgConn()
	return !pc.IsClosed() && pc.TxStatus() == 'I'
}

// paramTypeNames names the parameter types oids for a function signature.
func paramTypeNames(ctx context.Context, c Session, oids []uint32) ([]uint32, []string, error) {
	if len(oids) == 0 {
		return oids, nil, nil
	}
	list := make([]string, len(oids))
	for i, o := range oids {
		list[i] = strconv.FormatUint(uint64(o), 10)
	}
	rows, err := c.Query(ctx, paramTypesQuery, "{"+strings.Join(list, ",")+"}")
	if err != nil {
		return nil, nil, err
	}
	if len(rows) != len(oids) {
		return nil, nil, errors.New("sqlflight: parameter types not resolved")
	}
	names := make([]string, len(rows))
	for i, r := range rows {
		if len(r) != 1 || r[0] == nil {
			return nil, nil, errors.New("sqlflight: parameter types not resolved")
		}
		names[i] = *r[0]
	}
	return oids, names, nil
}

// paramTypesQuery names parameter types (OIDs in an array literal) for the
// probe function's signature, in order.
const paramTypesQuery = `SELECT pg_catalog.format_type(u.t, NULL) FROM pg_catalog.unnest($1::text::pg_catalog.oid[]) WITH ORDINALITY AS u(t, i) ORDER BY u.i`

// driverCatalog is a catalog session over any other parent's connection,
// through the database/sql driver interfaces: QueryerContext, and prepared
// statements where the parent lacks it (or skips).
type driverCatalog struct {
	rc    driver.Conn
	inTx  bool // a BEGIN went through and no ROLLBACK or COMMIT since
	dirty bool // an error that may have left the session unusable
}

// Exec prepares q and executes it, and follows BEGIN, ROLLBACK and COMMIT.
func (c *driverCatalog) Exec(ctx context.Context, q string) error {
	// Always prepared: the extended protocol runs exactly one statement,
	// where a simple query (lib/pq's Exec without arguments) runs them all.
	st, err := prepareParent(ctx, c.rc, q)
	if err != nil {
		return c.fail(err)
	}
	defer st.Close()
	if se, ok := st.(driver.StmtExecContext); ok {
		_, err = se.ExecContext(ctx, nil)
	} else {
		_, err = st.Exec(nil) //nolint:staticcheck // the legacy form, for parents without the context one
	}
	if err != nil {
		return c.fail(err)
	}
	switch strings.ToUpper(q) {
	case "BEGIN":
		c.inTx = true
	case "ROLLBACK", "COMMIT":
		c.inTx = false
	}
	return nil
}

// Query runs q through QueryerContext, or a prepared statement when the
// parent lacks it (or skips).
func (c *driverCatalog) Query(ctx context.Context, q string, args ...string) ([][]*string, error) {
	nv := make([]driver.NamedValue, len(args))
	for i, s := range args {
		nv[i] = driver.NamedValue{Ordinal: i + 1, Value: s}
	}
	var rows driver.Rows
	err := driver.ErrSkip
	if qc, ok := c.rc.(driver.QueryerContext); ok {
		rows, err = qc.QueryContext(ctx, q, nv)
	}
	if errors.Is(err, driver.ErrSkip) {
		var st driver.Stmt
		st, err = prepareParent(ctx, c.rc, q)
		if err != nil {
			return nil, c.fail(err)
		}
		defer st.Close()
		if sq, ok := st.(driver.StmtQueryContext); ok {
			rows, err = sq.QueryContext(ctx, nv)
		} else {
			vals := make([]driver.Value, len(args))
			for i, s := range args {
				vals[i] = s
			}
			rows, err = st.Query(vals) //nolint:staticcheck // the legacy form, for parents without the context one
		}
	}
	if err != nil {
		return nil, c.fail(err)
	}
	defer rows.Close()
	dest := make([]driver.Value, len(rows.Columns()))
	var out [][]*string
	for {
		if err := rows.Next(dest); err != nil {
			if err == io.EOF {
				return out, nil
			}
			return nil, c.fail(err)
		}
		out = append(out, textRow(dest))
	}
}

// The name of the prepared statement through which a parent without pgx's
// protocol access tells a statement's parameter types.
const paramsStatement = "sqlflight_probe_params"

// ParamTypes asks PREPARE and pg_prepared_statements.
func (c *driverCatalog) ParamTypes(ctx context.Context, q string) ([]uint32, []string, error) {
	// PREPARE infers the types as the protocol's Parse does; the catalog
	// tells them. The statement is deallocated at once (PREPARE is not
	// undone by a ROLLBACK).
	if err := c.Exec(ctx, "PREPARE "+paramsStatement+" AS "+q); err != nil {
		return nil, nil, err
	}
	rows, err := c.Query(ctx, `SELECT u.t::pg_catalog.oid::pg_catalog.text, pg_catalog.format_type(u.t, NULL)
FROM pg_catalog.pg_prepared_statements p, pg_catalog.unnest(p.parameter_types) WITH ORDINALITY AS u(t, i)
WHERE p.name = '`+paramsStatement+`' ORDER BY u.i`)
	if derr := c.Exec(ctx, "DEALLOCATE "+paramsStatement); derr != nil && err == nil {
		err = derr
	}
	if err != nil {
		return nil, nil, err
	}
	oids := make([]uint32, len(rows))
	names := make([]string, len(rows))
	for i, r := range rows {
		if len(r) != 2 || r[0] == nil || r[1] == nil {
			return nil, nil, errors.New("sqlflight: parameter types not resolved")
		}
		n, err := strconv.ParseUint(*r[0], 10, 32)
		if err != nil {
			return nil, nil, fmt.Errorf("sqlflight: parameter type %q: %w", *r[0], err)
		}
		oids[i], names[i] = uint32(n), *r[1]
	}
	return oids, names, nil
}

// Clean reports whether no transaction is open and no error of the
// parent's may have left the session unusable.
func (c *driverCatalog) Clean() bool { return !c.inTx && !c.dirty }

// fail notes an error of the parent's: one that is not the server's own
// answer to a statement (no SQLSTATE) may have left the session unusable.
func (c *driverCatalog) fail(err error) error {
	if SQLState(err) == "" || errors.Is(err, driver.ErrBadConn) {
		c.dirty = true
	}
	return err
}

// prepareParent prepares q on rc.
func prepareParent(ctx context.Context, rc driver.Conn, q string) (driver.Stmt, error) {
	if pc, ok := rc.(driver.ConnPrepareContext); ok {
		return pc.PrepareContext(ctx, q)
	}
	return rc.Prepare(q)
}

// textRow returns vals in text form.
func textRow[V any](vals []V) []*string {
	out := make([]*string, len(vals))
	for i, v := range vals {
		var s string
		switch x := any(v).(type) {
		case nil:
			continue
		case string:
			s = x
		case []byte:
			s = string(x) // a copy: drivers reuse their buffers
		case bool:
			s = "f"
			if x {
				s = "t"
			}
		case int64:
			s = strconv.FormatInt(x, 10)
		case uint32:
			s = strconv.FormatUint(uint64(x), 10)
		case int32:
			s = strconv.FormatInt(int64(x), 10)
		case time.Time:
			s = x.Format(time.RFC3339Nano)
		default:
			s = fmt.Sprint(x)
		}
		out[i] = &s
	}
	return out
}

// SQLState returns the SQLSTATE of a server error, whichever driver's
// error type carries it (pgx v5 and v4, lib/pq: SQLState(); bun's
// pgdriver: Field('C')), anywhere in err's chain, or "" (nil, or an error
// that is not the server's answer).
func SQLState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	var st interface{ SQLState() string }
	if errors.As(err, &st) {
		return st.SQLState()
	}
	var fe interface{ Field(byte) string }
	if errors.As(err, &fe) {
		return fe.Field('C')
	}
	return ""
}

// VersionQuery asks a parent's server whether it is PostgreSQL.
const VersionQuery = `SELECT pg_catalog.current_setting('server_version_num'), pg_catalog.version()`

// DetectTimeout bounds PostgresVersion's question of a connection of
// another driver (and the other questions a new connection is asked once).
const DetectTimeout = 5 * time.Second

// PostgresVersion asks rc's server whether it is PostgreSQL and returns
// its server_version_num, or 0 when it is not (or cannot tell). A pgx v5
// connection knows from its startup (and is PostgreSQL: at least 1 even
// when its server reports no version); any other asks once, within
// DetectTimeout (a server that is not PostgreSQL answers the question with
// an error, which leaves its session as it was).
func PostgresVersion(ctx context.Context, rc driver.Conn) int {
	if c, ok := rc.(*stdlib.Conn); ok {
		v, _ := strconv.Atoi(c.Conn().PgConn().ParameterStatus("server_version_num"))
		if v == 0 {
			// Servers before 12 do not report server_version_num at startup.
			v = versionNum(c.Conn().PgConn().ParameterStatus("server_version"))
		}
		return max(v, 1)
	}
	ctx, cancel := context.WithTimeout(ctx, DetectTimeout)
	defer cancel()
	rows, err := OfDriver(rc).Query(ctx, VersionQuery)
	if err != nil || len(rows) != 1 || len(rows[0]) != 2 || rows[0][0] == nil || rows[0][1] == nil {
		return 0
	}
	v, err := strconv.Atoi(*rows[0][0])
	if err != nil || v < 90000 || !strings.HasPrefix(*rows[0][1], "PostgreSQL ") {
		return 0
	}
	return v
}

// versionNum turns a server_version ("15.4", "9.6.24 (Debian …)") into the
// form of server_version_num.
func versionNum(s string) int {
	f := strings.FieldsFunc(s, func(r rune) bool { return r != '.' && (r < '0' || r > '9') })
	if len(f) == 0 {
		return 0
	}
	parts := strings.Split(f[0], ".")
	major, _ := strconv.Atoi(parts[0])
	minor := 0
	if len(parts) > 1 {
		minor, _ = strconv.Atoi(parts[len(parts)-1])
	}
	if major >= 10 {
		return major*10000 + minor
	}
	mid := 0
	if len(parts) > 1 {
		mid, _ = strconv.Atoi(parts[1])
	}
	if len(parts) > 2 {
		minor, _ = strconv.Atoi(parts[2])
	} else {
		minor = 0
	}
	return major*10000 + mid*100 + minor
}
