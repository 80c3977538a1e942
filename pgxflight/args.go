package pgxflight

import (
	"context"
	"database/sql/driver"
	"strings"

	"github.com/jackc/pgx/v5"
)

// statement is a statement as the Shield sees it: its text and positional
// arguments after pgx's options and named arguments, and whether it may be
// shared. pgx itself is always given the statement as the caller wrote it.
type statement struct {
	sql   string
	named []driver.NamedValue
	share bool
}

// statementOf reads args as pgx's Conn.Query does: leading options (result
// formats, an exec mode, a query rewriter), then the statement's
// arguments. NamedArgs and StrictNamedArgs are rewritten here exactly as
// pgx will rewrite them (they need no connection); another rewriter's
// output is known only on the connection, so the statement is passed
// through and judged without its arguments, as are statements with result
// formats of their own (their rows are not what a shared result replays).
func statementOf(ctx context.Context, sql string, args []any) statement {
	st := statement{sql: sql, share: true}
	var rewriter pgx.QueryRewriter
options:
	for len(args) > 0 {
		switch a := args[0].(type) {
		case pgx.QueryResultFormats, pgx.QueryResultFormatsByOID:
			st.share = false
		case pgx.QueryExecMode:
		case pgx.QueryRewriter:
			rewriter = a
		default:
			break options
		}
		args = args[1:]
	}
	switch rewriter.(type) {
	case nil:
	case pgx.NamedArgs, pgx.StrictNamedArgs:
		var err error
		if st.sql, args, err = rewriter.RewriteQuery(ctx, nil, sql, args); err != nil {
			// pgx will fail it the same way; the Shield judges the text alone.
			st.sql, args, st.share = sql, nil, false
		}
	default:
		st.share = false
		return st
	}
	if len(args) > 0 {
		st.named = make([]driver.NamedValue, len(args))
		for i, a := range args {
			st.named[i] = driver.NamedValue{Ordinal: i + 1, Value: a}
		}
	}
	return st
}

// copyText is the COPY statement pgx sends for CopyFrom, as the Shield
// reads it: a write of the table.
func copyText(table pgx.Identifier, columns []string) string {
	var b strings.Builder
	b.WriteString("COPY ")
	b.WriteString(table.Sanitize())
	b.WriteString(" ( ")
	for i, c := range columns {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(pgx.Identifier{c}.Sanitize())
	}
	b.WriteString(" ) FROM STDIN BINARY")
	return b.String()
}
