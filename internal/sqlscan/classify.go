package sqlscan

import (
	"slices"
	"strings"
	"sync"
	"unsafe"
)

// maxNesting bounds the recursion of statements inside statements (EXPLAIN EXPLAIN …,
// COPY ((…)) …); deeper input is classified KindOther with unknown tables.
const maxNesting = 32

// nameLimit is Postgres' NAMEDATALEN-1: longer identifiers are truncated to it.
const nameLimit = 63

// analyzer classifies the statements of one lexed text. It is reused through a pool.
type analyzer struct {
	lx       lexer
	src      string
	toks     []token
	match    []int   // for an opening ( or [: index of its closing token (len(toks) if none)
	role     []uint8 // per-token marks set ahead of the walk (see role* constants)
	frames   []frame
	ctes     []cte
	cteIndex map[string][]int // name → indexes into ctes, once there are many
	funcs    []string
	unknown  []string
	timeLit  bool // a string constant holds a clock-relative date/time word
	nesting  int
	// keepLit are the source positions of constants whose text the walk
	// read (a sequence named by a literal): the shape keeps them.
	keepLit []int
}

var analyzers = sync.Pool{New: func() any { return new(analyzer) }}

// Parse scans sql without the memo. It never panics and runs in time linear in len(sql).
// The returned Result is owned by the caller but is meant to be treated as immutable.
func Parse(sql string) *Result {
	return parse(sql, false)
}

// ParseNonStandard is Parse for a server running with standard_conforming_strings = off: a plain
// '…' (or N'…') string takes backslash escapes like E'…': 'it\'s' is one string.
func ParseNonStandard(sql string) *Result {
	return parse(sql, true)
}

func parse(sql string, nonStd bool) *Result {
	a := analyzers.Get().(*analyzer)
	r := a.parse(sql, nonStd)
	if cap(a.toks) <= 1<<14 && cap(a.lx.norm) <= poolNormMax { // do not pool huge buffers
		a.release()
		analyzers.Put(a)
	}
	return r
}

// release drops every reference to the last SQL text, so that a pooled analyzer pins nothing.
func (a *analyzer) release() {
	a.src, a.lx.src = "", ""
	clear(a.lx.annos[:cap(a.lx.annos)])
	clear(a.funcs[:cap(a.funcs)])
	clear(a.unknown[:cap(a.unknown)])
	clear(a.ctes[:cap(a.ctes)])
	a.cteIndex = nil
}

func (a *analyzer) parse(sql string, nonStd bool) *Result {
	a.lx.nonStd = nonStd
	a.lx.shaping = true
	a.lx.run(sql)
	a.timeLit = false
	a.src = sql
	a.toks = a.lx.toks
	a.funcs = a.funcs[:0]
	a.unknown = a.unknown[:0]
	a.ctes = a.ctes[:0]
	a.cteIndex = nil
	a.nesting = 0
	a.keepLit = a.keepLit[:0]
	n := len(a.toks)
	a.match = grow(a.match, n)
	a.role = grow(a.role, n)
	clear(a.role)

	r := &Result{
		Params:        a.lx.params,
		Err:           a.lx.err,
		HasAnnotation: a.lx.hasAnno,
		Annotation:    a.lx.annotation(),
		Normalized:    a.normalized(),
	}
	for _, s := range a.split() {
		r.Statements = append(r.Statements, a.statement(s[0], s[1]))
	}
	a.summarize(r)
	switch {
	case a.lx.err == errNUL:
		// Normalized is the text as it is, NUL bytes included: its key
		// starts with one, which no other key does.
		r.Shape, r.ShapeKey = r.Normalized, "\x00"+r.Normalized
	case shapeKinds(r):
		r.Shape, r.ShapeKey = a.lx.shape(r.Normalized, r.Params, a.keepLit)
	default:
		r.Shape, r.ShapeKey = r.Normalized, r.Normalized
	}
	return r
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// normalized returns the normalized text, sharing the source's memory when they are equal.
func (a *analyzer) normalized() string {
	if a.lx.err == errNUL {
		return a.src // kept verbatim: a NUL inside a comment must not vanish with it
	}
	norm := a.lx.norm
	if len(norm) == 0 {
		return ""
	}
	if len(a.toks) > 0 || a.lx.err != "" {
		start := 0
		if len(a.toks) > 0 {
			start = a.toks[0].pos
		} else {
			start = strings.Index(a.src, "/*") // only an unterminated comment
		}
		if start >= 0 && start+len(norm) <= len(a.src) && a.src[start:start+len(norm)] == string(norm) {
			return a.src[start : start+len(norm)]
		}
	}
	if cap(norm) > poolNormMax {
		// A buffer this large is not pooled: it leaves with the Result instead of being
		// copied (a huge text is scanned at the cost of one copy of itself).
		a.lx.norm = nil
		return unsafe.String(&norm[0], len(norm))
	}
	return string(norm)
}

// poolNormMax is the largest normalized-text buffer an analyzer keeps in the pool.
const poolNormMax = 1 << 16

// split cuts the token list into statements at top-level semicolons and computes a.match.
// A semicolon inside parentheses (CREATE RULE … DO (a; b)) or inside a BEGIN ATOMIC … END
// function body does not end the statement.
func (a *analyzer) split() [][2]int {
	toks := a.toks
	var out [][2]int
	var stack []int
	lo, atomic := 0, 0
	create := false
	for i := range toks {
		t := &toks[i]
		a.match[i] = -1
		if i == lo {
			create = t.kw == kwCreate
			atomic = 0
		}
		switch t.kind {
		case tLParen, tLBrack:
			stack = append(stack, i)
		case tRParen, tRBrack:
			if len(stack) > 0 {
				a.match[stack[len(stack)-1]] = i
				stack = stack[:len(stack)-1]
			}
		case tSemi:
			if len(stack) == 0 && atomic == 0 {
				if i > lo {
					out = append(out, [2]int{lo, i})
				}
				lo = i + 1
			}
		case tIdent:
			if create {
				switch {
				case t.kw == kwBegin && i+1 < len(toks) && toks[i+1].kw == kwAtomic:
					atomic++
				case atomic > 0 && t.kw == kwCase:
					atomic++
				case atomic > 0 && t.kw == kwEnd:
					atomic--
				}
			}
		}
	}
	for _, o := range stack {
		a.match[o] = len(toks) // unmatched: the group runs to the end of the text
	}
	if lo < len(toks) {
		out = append(out, [2]int{lo, len(toks)})
	}
	return out
}

// summarize fills the Result-level fields from the statements.
func (a *analyzer) summarize(r *Result) {
	r.ReadOnly = r.Err == ""
	r.TablesKnown = r.Err == ""
	for i := range r.Statements {
		st := &r.Statements[i]
		r.ReadOnly = r.ReadOnly && st.ReadOnly
		r.TablesKnown = r.TablesKnown && st.TablesKnown
	}
	switch len(r.Statements) {
	case 0:
		r.Kind = KindEmpty
	case 1:
		st := &r.Statements[0]
		r.Kind = st.Kind
		r.Tables, r.Writes = st.Tables, st.Writes
		r.Verdict, r.Reason = st.Verdict, st.Reason
	default:
		r.Kind = r.Statements[0].Kind
		var tables, writes []string
		for _, st := range r.Statements {
			tables = append(tables, st.Tables...)
			writes = append(writes, st.Writes...)
		}
		r.Tables, r.Writes = sortedSet(tables), sortedSet(writes)
		r.Verdict, r.Reason = Never, "multiple statements"
	}
	switch {
	case r.Err != "":
		r.Verdict, r.Reason = Never, r.Err
	case len(r.Statements) == 0:
		r.Verdict, r.Reason = Never, "empty statement"
	}
	r.Functions = sortedSet(slices.Clone(a.funcs))
	r.Unknown = sortedSet(slices.Clone(a.unknown))
	r.TimeLiteral = a.timeLit
}

// sortedSet sorts and deduplicates s in place; it returns nil for an empty set.
func sortedSet(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	slices.Sort(s)
	return slices.Clip(slices.Compact(s))
}

// facts accumulates what the walk of one statement found.
type facts struct {
	tables, writes []string
	never          string // first reason that makes the statement Never
	optin          string // first unknown-function reason
	timed          string // first time-function or time-literal reason
	timeLit        string // first clock-relative word found in a string constant
	write          bool   // not read-only: DML, SELECT INTO, locking clause, Never function
	dml            bool   // a data-modifying statement was found
	taints         bool
	temp           bool // objects of the temporary schema are created or changed
	opaque         bool // relations the scanner cannot see may be touched
}

func (c *facts) setNever(reason string) {
	if c.never == "" {
		c.never = reason
	}
}

func (c *facts) addTable(name string) {
	if name != "" {
		c.tables = append(c.tables, name)
	}
}

func (c *facts) addWrite(name string) {
	if name != "" {
		c.tables = append(c.tables, name)
		c.writes = append(c.writes, name)
	}
}

// apply copies facts into a statement.
func (c *facts) apply(st *Statement) {
	st.Tables = sortedSet(c.tables)
	st.Writes = sortedSet(c.writes)
	st.Taints = st.Taints || c.taints || c.temp
	st.TempObjects = st.TempObjects || c.temp
	if c.opaque {
		st.TablesKnown = false
	}
}

// statement classifies the statement toks[lo:hi] (lo < hi).
func (a *analyzer) statement(lo, hi int) Statement {
	st := a.classify(lo, hi)
	if !st.ReadOnly {
		a.sessionWrites(lo, hi, &st)
	}
	return st
}

// sessionWrites marks a statement that may write (or is DDL) as a session change when it
// names the session's temporary schema (CREATE TABLE pg_temp.t, SELECT … INTO pg_temp.x,
// CREATE VIEW pg_temp.v …: temporary objects without the TEMP keyword) or writes pg_settings
// (an UPDATE of it runs set_config).
func (a *analyzer) sessionWrites(lo, hi int, st *Statement) {
	if slices.Contains(st.Writes, "pg_settings") {
		st.Taints = true
	}
	for j := lo; j+1 < hi; j++ {
		if isName(a.toks[j].kind) && a.toks[j+1].kind == tDot && tempSchema(a.name(j)) {
			st.Taints, st.TempObjects = true, true
			return
		}
	}
}

// tempSchema reports whether a schema name is the session's temporary schema: pg_temp, or
// its real name pg_temp_N.
func tempSchema(name string) bool {
	rest, ok := strings.CutPrefix(name, "pg_temp")
	if !ok {
		return false
	}
	if rest == "" {
		return true
	}
	digits, ok := strings.CutPrefix(rest, "_")
	return ok && digits != "" && strings.Trim(digits, "0123456789") == ""
}

// classify classifies the statement toks[lo:hi] (lo < hi).
func (a *analyzer) classify(lo, hi int) Statement {
	if lo >= hi {
		return Statement{Kind: KindOther, Reason: "not a query: empty"}
	}
	if a.nesting >= maxNesting {
		return Statement{Kind: KindOther, Reason: "nesting too deep"}
	}
	a.nesting++
	defer func() { a.nesting-- }()

	first := a.toks[lo]
	if first.kind == tLParen {
		j := lo
		for j < hi && a.toks[j].kind == tLParen {
			j++
		}
		switch a.kwAt(j, hi) {
		case kwSelect, kwValues, kwTable, kwWith:
			return a.query(lo, hi, KindSelect)
		}
		return a.other(lo, hi, KindOther, true)
	}
	if first.kind != tIdent {
		return a.other(lo, hi, KindOther, true)
	}
	switch first.kw {
	case kwSelect, kwValues, kwTable:
		return a.query(lo, hi, KindSelect)
	case kwWith:
		j := a.cteList(lo, hi, false, hi)
		kind := KindOther
		switch a.kwAt(j, hi) {
		case kwSelect, kwValues, kwTable:
			kind = KindSelect
		case kwInsert:
			kind = KindInsert
		case kwUpdate:
			kind = KindUpdate
		case kwDelete:
			kind = KindDelete
		case kwMerge:
			kind = KindMerge
		default:
			if a.kindAt(j, hi) == tLParen {
				kind = KindSelect
			}
		}
		return a.query(lo, hi, kind)
	case kwInsert:
		return a.query(lo, hi, KindInsert)
	case kwUpdate:
		return a.query(lo, hi, KindUpdate)
	case kwDelete:
		return a.query(lo, hi, KindDelete)
	case kwMerge:
		return a.query(lo, hi, KindMerge)

	case kwExplain:
		return a.explain(lo, hi)
	case kwShow:
		st := a.other(lo, hi, KindShow, false)
		st.ReadOnly = true
		return st

	case kwBegin:
		st := a.other(lo, hi, KindBegin, false)
		st.Tx = TxBegin
		return st
	case kwStart:
		if a.kwAt(lo+1, hi) == kwTransaction {
			st := a.other(lo, hi, KindBegin, false)
			st.Tx = TxBegin
			return st
		}
		return a.other(lo, hi, KindOther, true)
	case kwCommit, kwEnd:
		if a.kwAt(lo+1, hi) == kwPrepared {
			return a.other(lo, hi, KindTxControl, true) // commits writes we never saw
		}
		st := a.other(lo, hi, KindCommit, false)
		st.Tx, st.Chain = TxCommit, a.chain(lo, hi)
		return st
	case kwRollback, kwAbort:
		j := lo + 1
		if k := a.kwAt(j, hi); k == kwWork || k == kwTransaction {
			j++
		}
		switch a.kwAt(j, hi) {
		case kwPrepared:
			return a.other(lo, hi, KindTxControl, false)
		case kwTo:
			return a.other(lo, hi, KindSavepoint, false)
		}
		st := a.other(lo, hi, KindRollback, false)
		st.Tx, st.Chain = TxRollback, a.chain(lo, hi)
		return st
	case kwSavepoint, kwRelease:
		return a.other(lo, hi, KindSavepoint, false)

	case kwSet:
		switch a.kwAt(lo+1, hi) {
		case kwTransaction, kwConstraints:
			return a.other(lo, hi, KindTxControl, false)
		case kwLocal:
			return a.other(lo, hi, KindSet, false)
		}
		st := a.other(lo, hi, KindSet, false)
		st.Taints = true
		return st
	case kwReset:
		st := a.other(lo, hi, KindSet, false)
		st.Taints = true
		return st

	case kwListen:
		st := a.other(lo, hi, KindListen, false)
		st.Taints = true
		return st
	case kwUnlisten, kwNotify:
		return a.other(lo, hi, KindListen, false)

	case kwPrepare:
		if a.kwAt(lo+1, hi) == kwTransaction {
			// The session leaves the transaction; its writes commit later (COMMIT PREPARED,
			// itself a write to unknown tables). Reported as a commit so that the driver
			// publishes the transaction's invalidations now rather than never.
			st := a.other(lo, hi, KindTxControl, false)
			st.Tx = TxCommit
			return st
		}
		st := a.other(lo, hi, KindPrepare, false)
		st.Taints = true
		return st
	case kwExecute:
		return a.other(lo, hi, KindPrepare, true)
	case kwDeallocate:
		return a.other(lo, hi, KindPrepare, false)

	case kwDeclare:
		return a.declare(lo, hi)
	case kwFetch, kwMove:
		return a.other(lo, hi, KindCursor, true) // runs the cursor's query further
	case kwClose:
		return a.other(lo, hi, KindCursor, false)

	case kwDiscard:
		st := a.other(lo, hi, KindDiscard, false)
		st.ClearsTaint = a.kwAt(lo+1, hi) == kwAll
		return st
	case kwLock:
		st := a.other(lo, hi, KindLock, false)
		j := lo + 1
		if a.kwAt(j, hi) == kwTable {
			j++
		}
		var c facts
		a.nameList(j, hi, &c, false)
		c.apply(&st)
		return st
	case kwCopy:
		return a.copy(lo, hi)
	case kwCall, kwDo:
		st := a.other(lo, hi, KindCall, true)
		st.Taints = true // unknown code may change session state
		return st
	case kwTruncate:
		return a.truncate(lo, hi)
	case kwLoad:
		st := a.other(lo, hi, KindOther, true)
		st.Taints = true
		return st
	case kwCheckpoint:
		return a.other(lo, hi, KindOther, false)

	case kwCreate:
		return a.create(lo, hi)
	case kwAlter:
		return a.alter(lo, hi)
	case kwDrop:
		return a.drop(lo, hi)
	case kwRefresh:
		return a.refresh(lo, hi)
	case kwVacuum, kwAnalyze, kwAnalyse, kwCluster, kwReindex:
		return a.maintenance(lo, hi)
	case kwComment, kwGrant, kwRevoke, kwSecurity, kwImport, kwReassign:
		return a.other(lo, hi, KindDDL, true)
	}
	return a.other(lo, hi, KindOther, true)
}

// other returns a Never statement of the given kind touching no relations the scanner can
// name; opaque says it may touch relations it cannot see.
func (a *analyzer) other(lo, _ int, kind Kind, opaque bool) Statement {
	st := Statement{Kind: kind, TablesKnown: !opaque, Verdict: Never}
	word := a.upperWord(lo)
	switch kind {
	case KindInsert, KindUpdate, KindDelete, KindMerge, KindTruncate:
		st.Reason = "write: " + kind.String()
	case KindDDL:
		st.Reason = "DDL: " + word
	case KindBegin, KindCommit, KindRollback, KindSavepoint, KindTxControl:
		st.Reason = "transaction control: " + word
	case KindSet, KindDiscard:
		st.Reason = "session state: " + word
	case KindShow, KindExplain, KindCopy:
		st.Reason = kind.String() + " is not shared"
	case KindListen:
		st.Reason = "notifications: " + word
	case KindPrepare:
		st.Reason = "prepared statement: " + word
	case KindCursor:
		st.Reason = "cursor: " + word
	case KindLock:
		st.Reason = "explicit lock: " + word
	case KindCall:
		st.Reason = "procedural code: " + word
	default:
		st.Reason = "not a query: " + word
	}
	return st
}

// chain reports a trailing AND CHAIN (not AND NO CHAIN).
func (a *analyzer) chain(lo, hi int) bool {
	for j := lo + 1; j < hi; j++ {
		if a.kwAt(j, hi) == kwChain {
			return a.kwAt(j-1, hi) != kwNo
		}
	}
	return false
}

// query classifies a SELECT-kind or DML statement by walking it.
func (a *analyzer) query(lo, hi int, kind Kind) Statement {
	var c facts
	a.walk(lo, hi, &c)
	st := Statement{Kind: kind, TablesKnown: true}
	c.apply(&st)
	if kind != KindSelect {
		st.Verdict = Never
		switch kind {
		case KindInsert, KindUpdate, KindDelete, KindMerge:
			st.Reason = "write: " + kind.String()
			if len(st.Writes) == 0 {
				st.TablesKnown = false // a write whose target we could not find
			}
		default:
			st.Reason = "not a query: " + a.upperWord(lo)
			st.TablesKnown = false
		}
		return st
	}
	st.ReadOnly = !c.write
	switch {
	case c.never != "":
		st.Verdict, st.Reason = Never, c.never
		if c.dml && len(c.writes) == 0 {
			st.TablesKnown = false
		}
	case c.optin != "":
		st.Verdict, st.Reason = OptIn, c.optin
	case c.timed != "":
		st.Verdict, st.Reason = InFlightOnly, c.timed
	default:
		st.Verdict = Shareable
	}
	return st
}

// explain: EXPLAIN [ANALYZE] [VERBOSE] stmt | EXPLAIN (option [value], …) stmt.
// Without ANALYZE nothing runs: ReadOnly, no writes. With ANALYZE the inner statement runs.
func (a *analyzer) explain(lo, hi int) Statement {
	j := lo + 1
	analyze := false
	if a.kindAt(j, hi) == tLParen {
		end := min(a.match[j], hi)
		for k := j + 1; k < end; {
			if w := a.kwAt(k, end); w == kwAnalyze || w == kwAnalyse {
				if v := k + 1; v >= end || a.toks[v].kind == tComma || !a.falseValue(v) {
					analyze = true
				}
			}
			for k < end && a.toks[k].kind != tComma {
				k = a.after(k)
			}
			k++
		}
		j = end + 1
	} else {
		if w := a.kwAt(j, hi); w == kwAnalyze || w == kwAnalyse {
			analyze = true
			j++
		}
		if a.kwAt(j, hi) == kwVerbose {
			j++
		}
	}
	st := a.other(lo, hi, KindExplain, false)
	nf, nu := len(a.funcs), len(a.unknown)
	inner := a.statement(j, hi)
	if !analyze { // nothing runs: no function is called
		a.funcs, a.unknown = a.funcs[:nf], a.unknown[:nu]
	}
	if analyze {
		st.ReadOnly = inner.ReadOnly
		st.Tables, st.Writes = inner.Tables, inner.Writes
		st.TablesKnown = inner.TablesKnown
		st.Taints, st.TempObjects = inner.Taints, inner.TempObjects
	} else {
		st.ReadOnly = true
		st.Tables = inner.Tables
	}
	return st
}

// falseValue reports whether the option value at j spells false (false, off, no, 0 and the
// prefixes Postgres' parse_bool accepts).
func (a *analyzer) falseValue(j int) bool {
	t := &a.toks[j]
	v := a.src[t.pos:t.end]
	if t.kind == tString && t.flags&flagPlain != 0 {
		v = unquote(v, '\'')
	} else if t.kind != tIdent && t.kind != tNumber {
		return false
	}
	v = strings.ToLower(v)
	switch {
	case v == "":
		return false
	case v == "0":
		return true
	case strings.HasPrefix("false", v), strings.HasPrefix("no", v):
		return true
	case len(v) >= 2 && strings.HasPrefix("off", v):
		return true
	}
	return false
}

// declare: DECLARE name … CURSOR … FOR query. The query is analyzed for its relations.
func (a *analyzer) declare(lo, hi int) Statement {
	st := a.other(lo, hi, KindCursor, false)
	st.Taints = true
	cursor := false
	for j := lo + 1; j < hi; j = a.after(j) {
		switch a.kwAt(j, hi) {
		case kwCursor:
			cursor = true
		case kwFor:
			if cursor {
				inner := a.statement(j+1, hi)
				st.Tables, st.Writes, st.TablesKnown = inner.Tables, inner.Writes, inner.TablesKnown
				return st
			}
		}
	}
	st.TablesKnown = false
	return st
}

// copy: COPY table [(cols)] FROM|TO … | COPY (query) TO ….
func (a *analyzer) copy(lo, hi int) Statement {
	st := a.other(lo, hi, KindCopy, false)
	j := lo + 1
	if a.kwAt(j, hi) == kwBinary {
		j++
	}
	if a.kindAt(j, hi) == tLParen {
		inner := a.statement(j+1, min(a.match[j], hi))
		st.Tables, st.Writes, st.TablesKnown = inner.Tables, inner.Writes, inner.TablesKnown
		st.Taints, st.TempObjects = inner.Taints, inner.TempObjects
		return st
	}
	if !a.isRelName(j, hi) {
		st.TablesKnown = false
		return st
	}
	last := a.chainEnd(j, hi)
	name := a.name(last)
	var c facts
	k := last + 1
	if a.kindAt(k, hi) == tLParen {
		k = a.after(k)
	}
	switch a.kwAt(k, hi) {
	case kwFrom:
		c.addWrite(name)
	case kwTo:
		c.addTable(name)
	default:
		c.addWrite(name)
		c.opaque = true
	}
	c.apply(&st)
	return st
}
