package errtext

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
)

// What a log line may say about an error. A database's message can hold
// the values of a statement's arguments (invalid input syntax for type
// integer: "alice@example.com"), and so can the message of any driver, so
// no log line, warning or Explain carries an error's text: a PostgreSQL
// error is told by its SQLSTATE and class, any other by its Go type and,
// for the errors a Describer knows, a fixed description.

// Describer describes errors without their messages; Known are the errors
// whose text holds no data (sqlflight's own): an error that wraps one is
// described by that one's text.
type Describer struct{ Known []error }

// Attr is the attribute "error" describing err without its message:
// error.sqlstate and error.class for a PostgreSQL error, error.type and
// (when known) error.what otherwise. It is empty for a nil err.
func (d Describer) Attr(err error) slog.Attr {
	if err == nil {
		return slog.Attr{}
	}
	if code := sqlstateOf(err); code != "" {
		return slog.Group("error", "sqlstate", code, "class", SQLStateClass(code))
	}
	args := []any{"type", Type(err)}
	if what := d.What(err); what != "" {
		args = append(args, "what", what)
	}
	return slog.Group("error", args...)
}

// Class is Attr as one line of text, for Explain and log values
// that are a single string.
func (d Describer) Class(err error) string {
	if err == nil {
		return ""
	}
	if code := sqlstateOf(err); code != "" {
		return "SQLSTATE " + code + " (" + SQLStateClass(code) + ")"
	}
	if what := d.What(err); what != "" {
		return what
	}
	return "error of type " + Type(err)
}

// sqlstateOf returns the SQLSTATE of a PostgreSQL error of any driver:
// pgx v5's *pgconn.PgError, an error with a SQLState method (pgx v4's,
// lib/pq's), or one with a Field method of its protocol fields (bun's
// pgdriver); "" for anything else, or a code that is not one.
func sqlstateOf(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return SQLState(pe.Code)
	}
	var st interface{ SQLState() string }
	if errors.As(err, &st) {
		if code := SQLState(st.SQLState()); code != "?????" {
			return code
		}
	}
	var fe interface{ Field(byte) string }
	if errors.As(err, &fe) {
		if code := SQLState(fe.Field('C')); code != "?????" {
			return code
		}
	}
	return ""
}

// Panic describes a recovered panic value: a runtime error by its
// message (the runtime's own text), an error as Attr does, anything
// else by its type alone (a panic's text may be built from data).
func (d Describer) Panic(r any) slog.Attr {
	switch v := r.(type) {
	case nil:
		return slog.String("panic", "runtime.Goexit")
	case runtime.Error:
		return slog.String("panic", v.Error())
	case error:
		return slog.Attr{Key: "panic", Value: d.Attr(v).Value}
	default:
		return slog.String("panic", fmt.Sprintf("value of type %T", r))
	}
}

// What returns a fixed description of err, or "" for an error it cannot
// describe without its text: the text of the first of d.Known that err
// wraps, or a description of a context, connection or network error.
func (d Describer) What(err error) string {
	for _, k := range d.Known {
		if errors.Is(err, k) {
			return k.Error()
		}
	}
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timed out"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, driver.ErrBadConn):
		return "bad connection"
	case errors.Is(err, syscall.ECONNREFUSED):
		// Nothing listens where the connection went: certain, and at once.
		return "connection refused"
	case errors.As(err, &ne):
		if ne.Timeout() {
			return "network timeout"
		}
		return "network error"
	}
	return ""
}

// Type is the Go type of the innermost error of err's chain (the first
// of joined errors): that of the error that was wrapped, not of the
// wrapping.
func Type(err error) string {
	for {
		var next error
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			next = u.Unwrap()
		case interface{ Unwrap() []error }:
			if errs := u.Unwrap(); len(errs) > 0 {
				next = errs[0]
			}
		}
		if next == nil {
			return fmt.Sprintf("%T", err)
		}
		err = next
	}
}

// SQLState returns code if it looks like a SQLSTATE (five letters or
// digits), or "?????".
func SQLState(code string) string {
	if len(code) != 5 {
		return "?????"
	}
	for _, c := range []byte(code) {
		if !('0' <= c && c <= '9' || 'A' <= c && c <= 'Z') {
			return "?????"
		}
	}
	return code
}

// SQLStateClass names the class of a SQLSTATE (its first two characters),
// as PostgreSQL's documentation does (Appendix A).
func SQLStateClass(code string) string {
	if c, ok := sqlstateClasses[code[:2]]; ok {
		return c
	}
	return "class " + code[:2]
}

var sqlstateClasses = map[string]string{
	"00": "successful completion", "01": "warning", "02": "no data",
	"03": "SQL statement not yet complete", "08": "connection exception", "09": "triggered action exception",
	"0A": "feature not supported", "0B": "invalid transaction initiation", "0F": "locator exception",
	"0L": "invalid grantor", "0P": "invalid role specification", "0Z": "diagnostics exception",
	"20": "case not found", "21": "cardinality violation", "22": "data exception",
	"23": "integrity constraint violation", "24": "invalid cursor state", "25": "invalid transaction state",
	"26": "invalid SQL statement name", "27": "triggered data change violation",
	"28": "invalid authorization specification", "2B": "dependent privilege descriptors still exist",
	"2D": "invalid transaction termination", "2F": "SQL routine exception", "34": "invalid cursor name",
	"38": "external routine exception", "39": "external routine invocation exception",
	"3B": "savepoint exception", "3D": "invalid catalog name", "3F": "invalid schema name",
	"40": "transaction rollback", "42": "syntax error or access rule violation",
	"44": "WITH CHECK OPTION violation", "53": "insufficient resources", "54": "program limit exceeded",
	"55": "object not in prerequisite state", "57": "operator intervention", "58": "system error",
	"72": "snapshot failure", "F0": "configuration file error", "HV": "foreign data wrapper error",
	"P0": "PL/pgSQL error", "XX": "internal error",
}
