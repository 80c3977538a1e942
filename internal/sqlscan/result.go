package sqlscan

import "sync/atomic"

// Kind is the kind of a statement, decided by its leading keyword(s).
type Kind uint8

// Statement kinds. KindSelect is the only kind that can ever be shared.
const (
	KindEmpty     Kind = iota // only whitespace, comments or semicolons
	KindSelect                // SELECT, VALUES, TABLE, WITH … SELECT, parenthesised selects
	KindInsert                // INSERT (also WITH … INSERT)
	KindUpdate                // UPDATE (also WITH … UPDATE)
	KindDelete                // DELETE (also WITH … DELETE)
	KindMerge                 // MERGE (also WITH … MERGE)
	KindDDL                   // CREATE, ALTER, DROP, COMMENT ON, GRANT, REVOKE, REINDEX, CLUSTER, VACUUM, ANALYZE, REFRESH, SECURITY LABEL, IMPORT FOREIGN SCHEMA, REASSIGN OWNED
	KindTruncate              // TRUNCATE
	KindBegin                 // BEGIN, START TRANSACTION
	KindCommit                // COMMIT, END
	KindRollback              // ROLLBACK, ABORT (not ROLLBACK TO)
	KindSavepoint             // SAVEPOINT, RELEASE, ROLLBACK TO
	KindSet                   // SET, RESET (not SET TRANSACTION / SET CONSTRAINTS)
	KindTxControl             // SET TRANSACTION, SET CONSTRAINTS, PREPARE TRANSACTION, COMMIT/ROLLBACK PREPARED
	KindShow                  // SHOW
	KindListen                // LISTEN, UNLISTEN, NOTIFY
	KindPrepare               // PREPARE name AS …, EXECUTE, DEALLOCATE
	KindCursor                // DECLARE, FETCH, MOVE, CLOSE
	KindDiscard               // DISCARD
	KindLock                  // LOCK
	KindCopy                  // COPY
	KindCall                  // CALL, DO
	KindExplain               // EXPLAIN
	KindOther                 // anything else (LOAD, CHECKPOINT, unknown words, malformed input)
)

var kindNames = [...]string{
	KindEmpty:     "EMPTY",
	KindSelect:    "SELECT",
	KindInsert:    "INSERT",
	KindUpdate:    "UPDATE",
	KindDelete:    "DELETE",
	KindMerge:     "MERGE",
	KindDDL:       "DDL",
	KindTruncate:  "TRUNCATE",
	KindBegin:     "BEGIN",
	KindCommit:    "COMMIT",
	KindRollback:  "ROLLBACK",
	KindSavepoint: "SAVEPOINT",
	KindSet:       "SET",
	KindTxControl: "TXCONTROL",
	KindShow:      "SHOW",
	KindListen:    "LISTEN",
	KindPrepare:   "PREPARE",
	KindCursor:    "CURSOR",
	KindDiscard:   "DISCARD",
	KindLock:      "LOCK",
	KindCopy:      "COPY",
	KindCall:      "CALL",
	KindExplain:   "EXPLAIN",
	KindOther:     "OTHER",
}

// String returns the upper-case name of the kind ("SELECT", "DDL", …).
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "Kind(?)"
}

// Verdict says whether, and how far, the driver may share a statement's result between callers.
// The order matters: a lower value is more restrictive, and a statement's verdict is the
// minimum of what each of its parts allows (Never > OptIn > InFlightOnly > Shareable in precedence).
type Verdict uint8

const (
	// Never: never share — a write, DDL, a locking read, a call of a side-effect or per-call
	// function, a multi-statement text, anything that is not a SELECT kind, or malformed input.
	// No annotation can override it.
	Never Verdict = iota
	// OptIn: a read-only SELECT that calls functions the scanner cannot vouch for (Result.Unknown);
	// shared only when an annotation opts in, or when the caller proves them immutable/stable.
	OptIn
	// InFlightOnly: a read-only SELECT calling time functions (now(), current_timestamp, …):
	// concurrent identical calls may be coalesced, the result must not be cached unless an
	// annotation sets a TTL explicitly.
	InFlightOnly
	// Shareable: a read-only SELECT calling only known-safe functions.
	Shareable
)

var verdictNames = [...]string{
	Never:        "never",
	OptIn:        "opt-in",
	InFlightOnly: "in-flight-only",
	Shareable:    "shareable",
}

// String returns "never", "opt-in", "in-flight-only" or "shareable".
func (v Verdict) String() string {
	if int(v) < len(verdictNames) {
		return verdictNames[v]
	}
	return "Verdict(?)"
}

// TxEffect is what a statement does to the session's transaction state.
type TxEffect uint8

const (
	TxNone     TxEffect = iota // no change
	TxBegin                    // BEGIN, START TRANSACTION: a transaction block starts
	TxCommit                   // COMMIT, END, PREPARE TRANSACTION: the block ends, its writes are (to be) committed
	TxRollback                 // ROLLBACK, ABORT: the block ends, its writes are discarded
)

var txNames = [...]string{TxNone: "none", TxBegin: "begin", TxCommit: "commit", TxRollback: "rollback"}

// String returns "none", "begin", "commit" or "rollback".
func (t TxEffect) String() string {
	if int(t) < len(txNames) {
		return txNames[t]
	}
	return "TxEffect(?)"
}

// Statement describes one statement of a (possibly multi-statement) SQL text.
//
// All slices are sorted, deduplicated and read-only (they may be shared with the Result and,
// through the memo, with other callers).
type Statement struct {
	Kind Kind

	// ReadOnly is true when the statement is proven not to modify data: a SELECT kind without a
	// data-modifying CTE, locking clause, SELECT INTO nor Never-function call; SHOW; EXPLAIN
	// without ANALYZE (or EXPLAIN ANALYZE of a read-only statement).
	//
	// ReadOnly does not account for Unknown functions: a SELECT calling my_fn() is ReadOnly, but
	// its TablesKnown is false and its verdict OptIn. A caller that cannot vouch for the unknown
	// functions (pg_proc lookup, annotation) must treat it as a possible write to unknown tables.
	ReadOnly bool

	// Tx is what the statement does to the transaction state.
	Tx TxEffect
	// Chain is set on COMMIT/ROLLBACK … AND CHAIN: the transaction ends (Tx says how) and a new
	// one starts at once, so the session is still inside a transaction block afterwards.
	Chain bool

	// Taints is set when the statement changes session state that outlives it: SET/RESET (not
	// SET LOCAL, SET TRANSACTION, SET CONSTRAINTS), LISTEN, PREPARE, DECLARE, CREATE TEMP …,
	// SELECT … INTO TEMP, LOAD, DO/CALL (unknown code), calls of session-level functions
	// (pg_advisory_lock*, set_config, setseed, dblink_connect …), writes to pg_settings (an
	// UPDATE of it is a set_config), and writes or DDL naming the temporary schema (pg_temp.t).
	//
	// Calls of functions the scanner does not know (Result.Unknown) do not set it: whether they
	// change the session is for the caller to find out (the server's catalog) or assume.
	Taints bool
	// TempObjects is set when the statement creates or changes objects of the session's
	// temporary schema: CREATE TEMP …, SELECT … INTO TEMP, or a write or DDL naming pg_temp
	// (CREATE TABLE pg_temp.t, CREATE VIEW pg_temp.v …). Such objects shadow others of the same
	// name for the rest of the session. It implies Taints.
	TempObjects bool
	// ClearsTaint is set by DISCARD ALL, which resets all session state.
	ClearsTaint bool

	// Tables are the relations the statement references (read or written): bare relation names,
	// schema stripped, unquoted names lower-cased, quoted names exact, truncated to 63 bytes like
	// Postgres does. CTE names, functions in FROM and aliases are excluded.
	Tables []string
	// Writes are the relations the statement modifies (a subset of Tables): DML targets,
	// TRUNCATE, DDL objects, SELECT INTO targets, data-modifying CTE targets, COPY … FROM, and
	// sequences passed as literals to nextval/setval.
	Writes []string
	// TablesKnown is false when the statement may read or write relations the scanner cannot
	// see (CALL, DO, EXECUTE, FETCH, unknown functions, TRUNCATE/DROP … CASCADE, DDL on objects
	// other than tables/views/sequences/indexes, …). When in doubt it is false.
	TablesKnown bool

	// Verdict and Reason are this statement's own sharing verdict; Result.Verdict is the one to
	// act on (it is Never for multi-statement texts and malformed input).
	Verdict Verdict
	Reason  string
}

// Result is the scan of one SQL text.
//
// A Result is immutable once returned: Scan shares one Result (and its slices) between all
// callers that pass the same SQL text. Never modify it or its slices.
type Result struct {
	// Statements in order; empty statements (a lone ';') are dropped.
	Statements []Statement
	// Kind of the first statement (KindEmpty if there is none).
	Kind Kind
	// Verdict is the sharing verdict for the whole text: Never for more than one statement,
	// none, or a lexing error; otherwise the single statement's verdict.
	Verdict Verdict
	// Reason explains a verdict other than Shareable, e.g. "write: INSERT",
	// "locking clause FOR UPDATE", "calls nextval (side effect)", "calls unknown function my_fn",
	// "calls now (time-dependent)", "multiple statements", "data-modifying CTE", "SELECT INTO",
	// "TABLESAMPLE", "unterminated string literal". Empty when Shareable.
	Reason string
	// ReadOnly is true when every statement is ReadOnly (and the text lexed cleanly).
	ReadOnly bool
	// Tables is the union of the statements' Tables, sorted and deduplicated.
	Tables []string
	// Writes is the union of the statements' Writes, sorted and deduplicated.
	Writes []string
	// TablesKnown is true when every statement's TablesKnown is (and the text lexed cleanly).
	TablesKnown bool
	// Functions are the functions called: lower-cased unless quoted; a pg_catalog qualifier is
	// stripped, any other schema is kept ("myschema.fn") because it names a different function.
	// Sorted, deduplicated. Includes the SQL niladic functions (current_timestamp, current_user …).
	Functions []string
	// Unknown are the called functions the scanner cannot vouch for (a subset of Functions).
	Unknown []string
	// TimeLiteral is true when a string constant of a query or DML statement ('…', E'…',
	// U&'…', $$…$$; continuations joined, escapes decoded) holds a clock-relative date/time
	// input word: now, today, tomorrow or yesterday, as TimeWord reports. Read as a date or
	// time ('now'::timestamptz, date 'today', timestamp 'tomorrow', WHERE d = 'yesterday',
	// '{today}'::date[], a JSON document for jsonb_populate_record …) its value depends on the
	// clock. The scanner cannot see the literal's type, so every such string counts: a SELECT
	// carrying one is at most InFlightOnly, with a Reason like "time literal 'now'
	// (time-dependent)" unless a time function or something more restrictive came first.
	TimeLiteral bool
	// Annotation is the text of every `sqlflight:` comment after the prefix, trimmed, joined
	// by a single space; "" if none.
	Annotation string
	// HasAnnotation is true when at least one `sqlflight:` comment was found (even an empty one).
	HasAnnotation bool
	// Normalized is the SQL with comments removed and whitespace outside literals folded; see
	// the package documentation for the exact contract.
	Normalized string
	// Shape is the statement shape of the text: Normalized with each constant whose value
	// cannot change what the server concludes about the statement (a number, or a plain '…'
	// string, compared, listed or passed as a value) written as a placeholder $n, numbered
	// from Params+1 in the order of the text, as pg_stat_statements shows them:
	// WHERE (id = 4) and WHERE (id = 5) are both WHERE (id = $1). Constants that are cast or
	// typed ('x'::regclass, date 'today', interval '1 day'), that hold a clock-relative word
	// ('now'), other kinds of string (E'…', $$…$$, …), positional references (ORDER BY 2),
	// type modifiers and anything the scanner is not sure of stay as they are; so do the texts
	// of statements other than queries and DML, texts that do not lex, and texts over 16 KiB.
	// It is Normalized itself (the same string) when no constant was replaced. See shape.go
	// for the rules.
	Shape string
	// ShapeKey identifies the shape: Normalized when no constant was replaced; else Shape, a
	// NUL byte and one letter per placeholder telling the type the server gives its constant
	// (i int4, b int8, n numeric, s a string, of unknown type). Two texts have one ShapeKey
	// only when they differ in nothing but the values of constants of the same types where a
	// value alone is read, so that the server resolves the same functions, operators and
	// relations for both (a placeholder never meets a real parameter: its number is past
	// Params). A text holding a NUL byte has Normalized after a NUL byte as its key.
	ShapeKey string
	// Params is the highest $n parameter number seen (0 if none).
	Params int
	// Err describes a lexing problem ("unterminated quoted identifier", …); such input is
	// Verdict Never, ReadOnly false and TablesKnown false.
	Err string

	// Note is the one mutable part of a Result: a slot where a caller keeps its own state
	// about the text (the driver keeps its statistics handle there, so that a memoized text
	// finds it without a map lookup). The scanner never reads it; store one type only.
	Note atomic.Value
	// Parsed is the caller's other slot: what it made of Annotation (the driver keeps its
	// parsed annotation there). The scanner never reads it; store one type only.
	Parsed atomic.Value
	// Rows is the caller's third slot: what it made of the text's own row conditions (the
	// driver keeps there the row filter of this text under its shape's verdict, which was
	// learned from another text of the shape). The scanner never reads it; store one type
	// only.
	Rows atomic.Value
	// Batch is the caller's fourth slot: what it made of the text's batch
	// form (BatchOf) under its shape's verdict. The scanner never reads it;
	// store one type only.
	Batch atomic.Value
}
