package errtext_test

import (
	"bytes"
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/sqlflight/sqlflight/internal/errtext"
)

const secret = "alice@example.com"

var errKnown = errors.New("sqlflight: a known error")

// A Describer logs an error by its SQLSTATE, its type or a fixed
// description, never by its text.
func TestDescriberAttr(t *testing.T) {
	d := errtext.Describer{Known: []error{errKnown}}
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	for _, c := range []struct {
		err   error
		want  string
		class string
	}{
		{fmt.Errorf("query failed: %w", &pgconn.PgError{Code: "22P02", Message: secret}),
			`error.sqlstate=22P02 error.class="data exception"`, "SQLSTATE 22P02 (data exception)"},
		{&pgconn.PgError{Code: "P0001", Message: secret}, `error.sqlstate=P0001 error.class="PL/pgSQL error"`,
			"SQLSTATE P0001 (PL/pgSQL error)"},
		{&pgconn.PgError{Code: "bad!", Message: secret}, `error.sqlstate=????? error.class="class ??"`,
			"SQLSTATE ????? (class ??)"},
		{fmt.Errorf("Error 1366: '%s'", secret), "error.type=*errors.errorString", "error of type *errors.errorString"},
		{fmt.Errorf("wrapped: %w", errors.Join(context.DeadlineExceeded, errors.New(secret))),
			`error.type=context.deadlineExceededError error.what="timed out"`, "timed out"},
		{fmt.Errorf("%w: %v", errKnown, secret), `error.what="sqlflight: a known error"`, "sqlflight: a known error"},
		{driver.ErrBadConn, `error.what="bad connection"`, "bad connection"},
		{fmt.Errorf("dial: %w", syscall.ECONNREFUSED), `error.what="connection refused"`, "connection refused"},
		{context.Canceled, `error.what=canceled`, "canceled"},
	} {
		logs.Reset()
		log.Info("x", d.Attr(c.err))
		if out := logs.String(); !strings.Contains(out, c.want) || strings.Contains(out, secret) {
			t.Errorf("Attr(%v) logged %q, want %q and no data", c.err, out, c.want)
		}
		if got := d.Class(c.err); got != c.class {
			t.Errorf("Class(%v) = %q, want %q", c.err, got, c.class)
		}
	}
	logs.Reset()
	log.Info("x", d.Attr(nil))
	if strings.Contains(logs.String(), "error") || d.Class(nil) != "" {
		t.Errorf("a nil error was described: %q", logs.String())
	}
	if got := (errtext.Describer{}).What(errKnown); got != "" {
		t.Errorf("an unknown error is described as %q", got)
	}
}

// A panic is told by the runtime's message, as an error, or by its type.
func TestDescriberPanic(t *testing.T) {
	d := errtext.Describer{}
	var runtimeErr error
	func() {
		defer func() { runtimeErr = recover().(error) }()
		var m map[string]int
		m["x"] = 1
	}()
	for _, c := range []struct {
		r    any
		want string
	}{
		{nil, "panic=runtime.Goexit"},
		{runtimeErr, `panic="assignment to entry in nil map"`},
		{errors.New(secret), "panic.type=*errors.errorString"},
		{secret, `panic="value of type string"`},
	} {
		var logs bytes.Buffer
		slog.New(slog.NewTextHandler(&logs, nil)).Info("x", d.Panic(c.r))
		if out := logs.String(); !strings.Contains(out, c.want) || strings.Contains(out, secret) {
			t.Errorf("Panic(%v) logged %q, want %q", c.r, out, c.want)
		}
	}
}

func TestSQLState(t *testing.T) {
	for code, want := range map[string]string{"23505": "23505", "2350": "?????", "ab123": "?????", "XX000": "XX000"} {
		if got := errtext.SQLState(code); got != want {
			t.Errorf("SQLState(%q) = %q, want %q", code, got, want)
		}
	}
	if got := errtext.SQLStateClass("23505"); got != "integrity constraint violation" {
		t.Errorf("SQLStateClass = %q", got)
	}
	if got := errtext.SQLStateClass("ZZ000"); got != "class ZZ" {
		t.Errorf("SQLStateClass of an unknown class = %q", got)
	}
}

// libpqError has a SQLState method, as lib/pq's and pgx v4's errors do;
// fieldError a Field method, as bun's pgdriver's does.
type libpqError struct{ code string }

func (e *libpqError) Error() string {
	return "pq: invalid input syntax for type integer: \"" + secret + "\""
}
func (e *libpqError) SQLState() string { return e.code }

type fieldError struct{ code string }

func (e fieldError) Error() string { return "ERROR: " + secret }
func (e fieldError) Field(f byte) string {
	if f == 'C' {
		return e.code
	}
	return secret
}

// TestOtherDriversSQLState: the PostgreSQL errors of other drivers are
// told by their SQLSTATE too, never by their text; an error whose method
// gives no code is told by its type.
func TestOtherDriversSQLState(t *testing.T) {
	d := errtext.Describer{}
	for _, err := range []error{&libpqError{"22P02"}, fmt.Errorf("wrapped: %w", fieldError{"22P02"})} {
		if got := d.Class(err); got != "SQLSTATE 22P02 (data exception)" {
			t.Errorf("%T: %q", err, got)
		}
		if a := d.Attr(err); !strings.Contains(a.String(), "22P02") || strings.Contains(a.String(), secret) {
			t.Errorf("%T: %s", err, a)
		}
	}
	if got := d.Class(&libpqError{""}); strings.Contains(got, secret) || !strings.Contains(got, "libpqError") {
		t.Errorf("no code: %q", got)
	}
}
