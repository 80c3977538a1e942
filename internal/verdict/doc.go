// Package verdict asks PostgreSQL's catalog what it says about statements
// and tables, through a catalog Session on one real connection.
//
// A verdict (Statement) is the server's word on one statement: the
// functions it really calls (views, operators, domains' CHECKs and
// SQL-standard function bodies followed), each with its volatility, and
// the base relations it reads, views expanded. Probe learns it by planning
// the statement as the body of a temporary SQL-standard function, with its
// parameters typed as the server infers them, inside a transaction that is
// always rolled back; the function's recorded dependencies name the user
// functions and relations, and the deparsed texts the built-ins (which the
// catalog pins and never records). QueryClosure tells what a write to a
// table may change (cascading foreign keys, inheritance; any table when a
// user trigger or rule, a view or a foreign table is in the way).
// QueryColumns, ClassOfType and the Canon functions are what row-level
// invalidation needs: which columns compare in one canonical text form, and
// that form. PostgresVersion and SQLState tell, whatever the Go driver,
// whether the server is PostgreSQL and what its errors' codes are.
//
// Anything not known is reported as unknown, never as safe: an error means
// no verdict at all (the caller treats the statement as unjudged); a
// function whose body the server cannot see into (plpgsql, C, a string SQL
// body), row-level security, or a built-in that reads tables named or runs
// SQL given at run time makes TablesKnown false; a function name's
// volatility is that of its most volatile overload, and a volatility letter
// not known is "volatile"; a closure that cannot be bounded is All; a
// column of a type, collation or kind not known for sure is ClassNone, and
// a value whose canonical form is not sure makes CanonText and CanonArg
// report false.
//
// A connection is asked through pgx itself when it is a pgx v5 stdlib
// connection (*stdlib.Conn), else through the database/sql driver
// interfaces of its own (OfDriver): driver.QueryerContext, or Prepare
// (driver.ConnPrepareContext when it has it) and the statement's Query or
// Exec (their context forms when it has them); statements without results
// are always prepared, so that exactly one statement runs whatever the text
// holds. Its values may come back as string, []byte, bool, integers or
// time.Time; its server errors must carry their SQLSTATE (SQLState()
// or Field('C')) for a session to tell them from a broken connection.
// Parameter types come from the protocol's Parse through pgx, and from
// PREPARE and pg_prepared_statements otherwise.
//
// A Book is what a scope remembers of its server's word, the one state the
// package keeps: Of returns the Verdict on a statement shape (at once for
// a SELECT of numbers and parameters alone), probing it in the background
// on a spare Session its Host lends (at most two probes at once and 64
// waiting or running; one more fails at once with ErrBusy), and remembers
// it in bounded memory (8192 shapes, 4 MiB of keys; a key longer than
// 1 KiB is kept as its digest) for ten minutes, a failed one for five
// seconds (an ErrBusy one, a second), all until the Host's schema
// generation changes; a server that refuses the probe (ErrNoProbe) is not
// asked again. WriteClosure remembers QueryClosure's answer per table the
// same way, sharing the probes' slots (it waits a second at most for one:
// else any table). NoteConn learns whether the server's '…' literals take
// backslash escapes. Pools, the Host's connections and what is counted or
// logged are the Host's. A shape is the scanner's ShapeKey: texts that
// differ only in the values of constants of the same types where a value
// alone is read (WHERE (id = 4), WHERE (id = 5)) share one verdict, learned
// by probing the first of them; only its Rows, the row filter, are that
// text's own (its conditions may hold its constants), and the caller
// derives another text's filter from it.
//
// ctx bounds every call (Probe also sets statement and lock timeouts of
// its own inside its transaction; a Book's probe has five seconds). A
// Session is used by one goroutine at a time, as its connection is;
// distinct sessions may be used concurrently. A Session whose Clean is
// false after a call must not go back to a pool as healthy.
package verdict
