// Package sqlscan is a pure-Go, Postgres-aware lexer and classifier for SQL texts.
//
// It decides, without a database round trip, whether a statement is a read-only query whose
// result may be shared between callers (coalesced in flight, or cached), which relations it
// reads and writes, what it does to the transaction and session state, which `sqlflight:`
// annotations its comments carry, and what the statement's shape is (its text with its
// values as placeholders).
//
// # Correctness first
//
// A wrong "read-only" verdict would let the driver serve a shared or cached result for a
// write, so every doubt resolves towards the restrictive answer: unknown constructs make a
// statement Never or OptIn, unknown relations make TablesKnown false, a lexing error makes the
// text Never. The lexer follows Postgres' own rules (scan.l) for the things that decide where
// code ends and data begins: quote doubling, backslash escapes in E'…' strings, string continuation across
// newlines, dollar quotes, nested block comments, operators that stop before "--" and "/*",
// and U&"…" UESCAPE identifiers. Scan and Parse assume standard_conforming_strings = on;
// ScanNonStandard and ParseNonStandard lex plain '…' strings with backslash escapes, as a
// server with the setting off does.
//
// # Time
//
// Clock-dependent calls (now(), current_date …) and string constants holding a clock-relative
// date/time word ('now'::timestamptz, date 'today', WHERE d = 'yesterday'; see TimeWord and
// Result.TimeLiteral) make a SELECT at most InFlightOnly. Functions that read the clock at each
// call (clock_timestamp, timeofday) are VOLATILE, hence Never.
//
// # Normalization
//
// Result.Normalized is the text with every comment (annotation or not) replaced by a single
// space, every run of whitespace and comments outside literals, quoted identifiers and dollar
// quotes folded to one space, leading and trailing whitespace and trailing semicolons removed.
// Literal contents are byte-exact and letter case is never changed. Two exceptions keep the
// meaning intact: the gap of a string continuation ('a'<newline>'b') is written as a single
// newline, and an unterminated block comment is kept verbatim (so that the error survives;
// likewise a text containing a NUL byte is left as it is).
// Normalization is idempotent, and texts that differ only in comments and whitespace outside
// literals normalize identically.
//
// # Shapes
//
// Result.Shape is the statement shape of a text: Normalized with each constant whose value
// cannot change what the server concludes about the statement written as a placeholder $n,
// numbered after the text's highest parameter, as pg_stat_statements shows them (WHERE
// (id = 4) is WHERE (id = $1)). Numbers of decimal digits and plain one-line '…' strings
// compared, listed (IN, VALUES, ARRAY), in BETWEEN, LIKE, CASE, LIMIT or OFFSET, or passed to
// a function are replaced; casts and typed constants ('x'::regclass, date 'today'), strings
// holding a time word, other kinds of string, numbers of other bases, positional references
// (ORDER BY 2), DISTINCT ON, type modifiers, sequence names, anything in a place not known,
// statements other than queries and DML, and texts over 16 KiB are kept (shape.go has the
// rules). Result.ShapeKey adds the type the server gives each placeholder's constant (int4,
// int8, numeric, an unknown-typed string), so that two texts share a key only when the server
// resolves the same functions, operators and relations for both. What the scanner derives from
// a literal's text (TimeLiteral, a sequence's name) stays the text's own. Shape is Normalized
// itself when nothing is replaced.
//
// # Known limitations
//
// The scanner sees text, not the catalog. It cannot see writes done by triggers, rules,
// ON DELETE/UPDATE CASCADE foreign keys, or functions run inside views, by user-defined
// operators, casts or type input functions; it reports a view (not its base tables) and a
// partitioned or inherited parent (not its children) as the relation read, so a write to a
// base table or a partition is not seen as a write to the view or the parent; it cannot tell that a column reference in attribute notation (t.fn) calls
// a function; and it resolves unqualified function names as Postgres' pg_catalog built-ins
// even if a search_path shadows them (or an overload that pg_catalog lacks, such as a user's
// lower(int), catches the call). Words that Postgres accepts as function names (unreserved
// and type-or-function-name keywords: set, zone, freeze, join …) are calls when followed by
// '(' outside the syntax they belong to.
package sqlscan
