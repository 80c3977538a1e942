// Package errtext writes sqlflight's error texts, and describes errors
// for its logs without their texts.
//
// Every error text of sqlflight begins with Prefix ("sqlflight: ") once,
// however many errors it wraps (Wrapf).
//
// No log line, warning or Explain carries an error's text, which may hold
// the values of a statement's arguments: a Describer tells a PostgreSQL
// error by its SQLSTATE and class (SQLState, SQLStateClass), any other by
// its Go type (Type) and, for a context, connection or network error or one
// of the errors it knows, a fixed description (What). A recovered panic is
// told by its runtime message (the runtime's own text), as an error, or by
// its type alone (Panic). Nothing it returns is built from an error's text
// but the texts of the errors it is given as known.
package errtext

import (
	"fmt"
	"strings"
)

// Prefix begins the text of every error of sqlflight, once.
const Prefix = "sqlflight: "

// Wrapf is fmt.Errorf for sqlflight's errors: an error among args is
// written without its own Prefix (unless it leads the message, the format
// beginning with its verb), so that the message says "sqlflight:" once; %w
// wraps as with fmt.Errorf, and errors.Is and errors.As see the same
// errors.
func Wrapf(format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	texts := make([]any, len(args))
	for i, a := range args {
		if e, ok := a.(error); ok && e != nil && (i > 0 || !strings.HasPrefix(format, "%")) {
			a = strings.TrimPrefix(e.Error(), Prefix)
		}
		texts[i] = a
	}
	msg := fmt.Sprintf(strings.ReplaceAll(format, "%w", "%v"), texts...)
	if msg == err.Error() {
		return err
	}
	return &rewordedError{msg: msg, err: err}
}

// rewordedError is err under another text.
type rewordedError struct {
	msg string
	err error
}

func (e *rewordedError) Error() string { return e.msg }
func (e *rewordedError) Unwrap() error { return e.err }
