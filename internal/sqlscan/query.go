package sqlscan

import "strings"

// The walker reads a SELECT-kind or DML statement once, left to right, keeping one frame per
// open parenthesis. It does not build a syntax tree; it recognises just enough structure to
// find relations (FROM lists, JOINs, DML targets, CTE names in scope), function calls, and
// the constructs that make a query unshareable (data-modifying statements, locking clauses,
// SELECT INTO, TABLESAMPLE). Where its reading of the text could be wrong, it errs towards
// the restrictive answer: an unrecognised "name(" is an unknown function, a DML keyword
// anywhere is a write, a FOR followed by UPDATE/SHARE anywhere is a locking clause.

// Token roles, set ahead of the walk by the part of the walker that recognised them.
const (
	roleNone     uint8 = iota
	roleSkip           // not a keyword, relation or call: a CTE name, SEARCH/CYCLE clause word …
	roleRefGroup       // '(' of a table reference (function in FROM, ROWS FROM): an alias may follow its ')'
)

// What the walker expects at the next token of a frame.
const (
	expNone     uint8 = iota
	expRef            // a table reference may start here (after FROM, JOIN, ',' in a FROM list, …)
	expAfterRef       // a table reference just ended: an alias may follow
)

// What USING introduces in a frame.
const (
	usingNone uint8 = iota
	usingList       // DELETE … USING from_list
	usingRef        // MERGE … USING table_ref
)

// frame is the walker's state for one parenthesis level.
type frame struct {
	close      int   // index of the closing token (the walk's hi for the outermost frame)
	query      bool  // a SELECT (or UPDATE) is at this level: FROM starts a FROM list here
	from       bool  // inside a FROM list: ',' starts another table reference
	expect     uint8 // expNone, expRef, expAfterRef
	using      uint8 // usingNone, usingList, usingRef
	aliasAfter bool  // a parenthesised table reference: an alias may follow its ')'
	updateSet  bool  // UPDATE target read: the next SET is the statement's (SET (a, b) = … is syntax)
}

// cte is a WITH query name and the token range in which it hides a relation of that name.
type cte struct {
	name     string
	from, to int
}

// walk analyzes toks[lo:hi] as a query or DML statement and records what it finds in c.
func (a *analyzer) walk(lo, hi int, c *facts) {
	base := len(a.frames)
	a.frames = append(a.frames, frame{close: hi})
	for i := lo; i < hi; i++ {
		top := len(a.frames) - 1
		if top > base && i == a.frames[top].close {
			aliasAfter := a.frames[top].aliasAfter
			a.frames = a.frames[:top]
			top--
			a.frames[top].expect = expNone
			if aliasAfter {
				a.frames[top].expect = expAfterRef
			}
			continue
		}
		f := &a.frames[top]
		if k := a.toks[i].kind; (k == tString || k == tDollar) && c.timeLit == "" {
			if w := a.timeLiteral(i); w != "" {
				c.timeLit = w
				a.timeLit = true
				if c.timed == "" {
					c.timed = "time literal '" + w + "' (time-dependent)"
				}
			}
		}
		if a.role[i] == roleSkip {
			continue
		}
		t := &a.toks[i]
		switch t.kind {
		case tLParen, tLBrack:
			nf := frame{close: min(a.match[i], hi)}
			switch {
			case f.expect == expRef:
				nf.expect, nf.from, nf.aliasAfter = expRef, true, true
			case a.role[i] == roleRefGroup:
				nf.aliasAfter = true
			}
			f.expect = expNone
			a.frames = append(a.frames, nf)
		case tIdent, tQIdent:
			i = a.word(i, lo, hi, top, c)
		case tComma:
			f.expect = expNone
			if f.from {
				f.expect = expRef
			}
		case tOp:
			if f.expect == expAfterRef && a.src[t.pos:t.end] == "*" {
				continue // FROM t * (inheritance): an alias may still follow
			}
			f.expect = expNone
		default:
			f.expect = expNone
		}
	}
	a.frames = a.frames[:base]
}

// word handles the identifier at i in frame fi and returns the index of the last token it
// consumed.
func (a *analyzer) word(i, lo, hi, fi int, c *facts) int {
	t := &a.toks[i]
	kw, kwf := t.kw, t.kwf
	if t.kind == tQIdent || (i > lo && a.toks[i-1].kind == tDot) {
		kw, kwf = kwNone, 0 // "select" and t.select are names, not keywords
	}
	f := &a.frames[fi]
	afterRef := f.expect == expAfterRef

	switch f.expect {
	case expRef:
		f.expect = expNone
		switch kw {
		case kwLateral, kwOnly:
			f.expect = expRef
			return i
		case kwRows: // ROWS FROM (f(…), g(…)) [AS alias …]
			if a.kwAt(i+1, hi) == kwFrom && a.kindAt(i+2, hi) == tLParen {
				a.role[i+2] = roleRefGroup
				return i + 1
			}
		case kwValues: // (VALUES (…), …) is a subquery; a bare "values" is a table
			if a.kindAt(i+1, hi) == tLParen {
				f.from = false
				kwf |= kfNotRel
			}
		case kwSelect, kwWith, kwTable: // a subquery, not a join tree
			f.from = false
		case kwInsert, kwUpdate, kwDelete, kwMerge: // a table named "update", unless it reads as DML
			if j, ok := a.dml(i, lo, hi, fi, kw, c); ok {
				return j
			}
		}
		// A relation name, or a function in FROM: FROM freeze(1) calls a function "freeze".
		if kwf&kfNotRel == 0 || (kwf&kfNotCall == 0 && a.kindAt(i+1, hi) == tLParen) {
			return a.tableRef(i, hi, fi, c)
		}
	case expAfterRef:
		f.expect = expNone
		switch {
		case kw == kwAs: // AS alias: a ColId (a reserved word after AS is not an alias)
			if j := i + 1; a.isRelName(j, hi) {
				a.neverAlias(j, hi, c)
				return j
			}
			return i
		case kw == kwWith && a.kwAt(i+1, hi) == kwOrdinality:
			f.expect = expAfterRef
			return i + 1
		case kwf&kfStop == 0: // a bare alias; a '(' after it opens its column list
			a.neverAlias(i, hi, c)
			return i
		}
	}

	switch kw {
	case kwSelect:
		f.query, f.from = true, false
	case kwFrom:
		if f.query && !a.distinctFrom(i, hi) {
			f.from, f.expect = true, expRef
		}
	case kwJoin:
		if a.kindAt(i+1, hi) != tLParen || afterRef || a.joinSyntax(i, lo) {
			f.expect = expRef // JOIN (b JOIN c ON …) ON …
			return i
		}
	case kwUsing:
		switch f.using {
		case usingList:
			f.from, f.expect = true, expRef
		case usingRef:
			f.expect = expRef
		}
		f.using = usingNone
	case kwWhere, kwGroup, kwHaving, kwWindow, kwOrder, kwLimit, kwOffset, kwFetch,
		kwUnion, kwIntersect, kwExcept, kwReturning:
		f.from = false // these end a FROM list at this level
	case kwSet:
		f.from = false
		upd := f.updateSet
		f.updateSet = false
		if upd || a.kwBefore(i, lo, hi) == kwUpdate {
			return i // UPDATE t SET (a, b) = …, ON CONFLICT … DO UPDATE SET (…), THEN UPDATE SET (…)
		}
	case kwFor:
		f.from = false
		return a.forClause(i, hi, c)
	case kwInto:
		f.from = false
		return a.selectInto(i, hi, c)
	case kwInsert, kwUpdate, kwDelete, kwMerge:
		if j, ok := a.dml(i, lo, hi, fi, kw, c); ok {
			return j
		}
	case kwWith:
		if a.cteStart(i, hi) {
			a.cteList(i, hi, true, a.frames[fi].close)
		}
		return i
	case kwTable: // TABLE name
		f.from, f.expect = false, expRef
		return i
	case kwTablesample: // TABLESAMPLE method (args) [REPEATABLE (seed)]: a random sample
		if a.kindAt(i+1, hi) == tLParen {
			break // tablesample(…) calls a function of that name: the clause names a method first
		}
		c.setNever("TABLESAMPLE")
		if j := i + 1; j < hi && isName(a.toks[j].kind) {
			return j
		}
		return i
	case kwCurrentTimestamp, kwCurrentDate, kwCurrentTime, kwLocaltime, kwLocaltimestamp,
		kwCurrentUser, kwSessionUser, kwCurrentRole, kwUser, kwCurrentCatalog, kwSystemUser:
		a.call(a.name(i), "", i, hi, c) // niladic; a '(' after it is a precision
		return i
	case kwCurrentSchema:
		if a.kindAt(i+1, hi) != tLParen {
			a.call("current_schema", "", i, hi, c)
			return i
		}
	}
	return a.maybeCall(i, lo, hi, kw, kwf, c)
}

// distinctFrom reports whether the FROM at i belongs to IS [NOT] DISTINCT FROM.
func (a *analyzer) distinctFrom(i, hi int) bool {
	if a.kwAt(i-1, hi) != kwDistinct {
		return false
	}
	w := a.kwAt(i-2, hi)
	return w == kwIs || w == kwNot
}

// neverAlias treats an alias followed by '(' as a call when it is named like a Never
// function: an alias never is one, so this only matters if the walker misread the text.
func (a *analyzer) neverAlias(j, hi int, c *facts) {
	if a.kindAt(j+1, hi) != tLParen {
		return
	}
	if name := a.name(j); lookupFunc(name).class == fnNever {
		a.call(name, "", j, hi, c)
	}
}

// tableRef reads a relation name (or a function in FROM) starting at i.
func (a *analyzer) tableRef(i, hi, fi int, c *facts) int {
	last := a.chainEnd(i, hi)
	if a.kindAt(last+1, hi) == tLParen { // FROM f(…) [AS] alias (…)
		a.role[last+1] = roleRefGroup
		schema := ""
		if last > i {
			schema = a.name(last - 2)
		}
		a.call(a.name(last), schema, last, hi, c)
		return last
	}
	name := a.name(last)
	if last > i || !a.isCTE(name, i) {
		c.addTable(name)
	}
	a.frames[fi].expect = expAfterRef
	return last
}

// isCTE reports whether an unqualified relation name at token pos refers to a WITH query.
func (a *analyzer) isCTE(name string, pos int) bool {
	if a.cteIndex != nil {
		for _, k := range a.cteIndex[name] {
			if q := &a.ctes[k]; q.from <= pos && pos < q.to {
				return true
			}
		}
		return false
	}
	for _, q := range a.ctes {
		if q.name == name && q.from <= pos && pos < q.to {
			return true
		}
	}
	return false
}

// addCTE registers a WITH query name; past a few dozen names they are indexed by name so
// that lookups stay cheap on adversarial input.
func (a *analyzer) addCTE(q cte) {
	a.ctes = append(a.ctes, q)
	const indexFrom = 32
	switch {
	case a.cteIndex != nil:
		a.cteIndex[q.name] = append(a.cteIndex[q.name], len(a.ctes)-1)
	case len(a.ctes) >= indexFrom:
		a.cteIndex = make(map[string][]int, len(a.ctes))
		for k := range a.ctes {
			a.cteIndex[a.ctes[k].name] = append(a.cteIndex[a.ctes[k].name], k)
		}
	}
}

// cteStart reports whether the WITH at i starts a list of WITH queries (and not WITH
// ORDINALITY, WITH TIME ZONE, WITH (options), WITH NO DATA, …).
func (a *analyzer) cteStart(i, hi int) bool {
	j := i + 1
	if a.kwAt(j, hi) == kwRecursive {
		return true
	}
	if j >= hi || !isName(a.toks[j].kind) {
		return false
	}
	k := j + 1
	if a.kindAt(k, hi) == tLParen {
		k = a.after(k)
	}
	return a.kwAt(k, hi) == kwAs
}

// cteList reads WITH [RECURSIVE] name [(cols)] AS [[NOT] MATERIALIZED] (body) [SEARCH …]
// [CYCLE …], … starting at the WITH at i, and returns the index after it. With mark set, it
// marks the names and clauses so that the walk skips them, and registers the names: a
// non-recursive name is visible after its body up to scopeEnd, a recursive one from itself.
// The bodies are left to the walk.
func (a *analyzer) cteList(i, hi int, mark bool, scopeEnd int) int {
	skip := func(j int) {
		if mark && j < hi {
			a.role[j] = roleSkip
		}
	}
	j := i + 1
	recursive := false
	if a.kwAt(j, hi) == kwRecursive {
		skip(j)
		recursive = true
		j++
	}
	for j < hi && isName(a.toks[j].kind) {
		nameIdx := j
		k := j + 1
		if a.kindAt(k, hi) == tLParen { // column list: left to the walk (plain names)
			k = a.after(k)
		}
		if a.kwAt(k, hi) != kwAs {
			break // not name [(columns)] AS: leave the word to the walk
		}
		skip(nameIdx)
		skip(k)
		j = k + 1
		if a.kwAt(j, hi) == kwNot {
			skip(j)
			j++
		}
		if a.kwAt(j, hi) == kwMaterialized {
			skip(j)
			j++
		}
		if a.kindAt(j, hi) != tLParen {
			break
		}
		body := j
		j = a.after(j)
		if mark {
			from := a.match[body]
			if recursive {
				from = nameIdx
			}
			a.addCTE(cte{name: a.name(nameIdx), from: from, to: scopeEnd})
		}
		for w := a.kwAt(j, hi); w == kwSearch || w == kwCycle; w = a.kwAt(j, hi) {
			last := kwSet // SEARCH {BREADTH|DEPTH} FIRST BY col, … SET col
			if w == kwCycle {
				last = kwUsing // CYCLE col, … SET col [TO v DEFAULT v] USING col
			}
			skip(j) // SEARCH or CYCLE itself: always consumed, so the outer loop advances
			j++
			for j < hi && !a.clauseEnd(j, hi) {
				skip(j)
				if a.kwAt(j, hi) == last {
					if !a.clauseEnd(j+1, hi) {
						skip(j + 1)
						j++
					}
					j++
					break
				}
				j++
			}
		}
		if a.kindAt(j, hi) != tComma {
			break
		}
		skip(j)
		j++
	}
	return j
}

// clauseEnd reports whether token j cannot belong to a SEARCH or CYCLE clause (which holds
// only names, commas and constants), so that marking it can never hide a statement or a call.
func (a *analyzer) clauseEnd(j, hi int) bool {
	switch a.kindAt(j, hi) {
	case tLParen, tRParen, tLBrack, tRBrack, tSemi:
		return true
	case tIdent, tQIdent:
		if a.kindAt(j+1, hi) == tLParen {
			return true
		}
		switch a.kwAt(j, hi) {
		case kwSelect, kwValues, kwTable, kwWith, kwInsert, kwUpdate, kwDelete, kwMerge,
			kwInto, kwFor, kwFrom, kwTablesample:
			return true
		}
	}
	return false
}

// forClause recognises a locking clause: FOR UPDATE | FOR NO KEY UPDATE | FOR SHARE |
// FOR KEY SHARE (anywhere: FOR also appears in substring(x FOR n), which is no lock).
func (a *analyzer) forClause(i, hi int, c *facts) int {
	var lock string
	end := i
	switch a.kwAt(i+1, hi) {
	case kwUpdate:
		lock, end = "FOR UPDATE", i+1
	case kwShare:
		lock, end = "FOR SHARE", i+1
	case kwNo:
		if a.kwAt(i+2, hi) == kwKey && a.kwAt(i+3, hi) == kwUpdate {
			lock, end = "FOR NO KEY UPDATE", i+3
		}
	case kwKey:
		if a.kwAt(i+2, hi) == kwShare {
			lock, end = "FOR KEY SHARE", i+2
		}
	}
	if lock != "" {
		c.setNever("locking clause " + lock)
		c.write = true
	}
	return end
}

// selectInto handles an INTO that no INSERT or MERGE consumed:
// SELECT … INTO [TEMP|TEMPORARY|UNLOGGED|GLOBAL|LOCAL] [TABLE] target.
func (a *analyzer) selectInto(i, hi int, c *facts) int {
	c.setNever("SELECT INTO")
	c.write = true
	j := i + 1
	for ; j < hi; j++ {
		switch a.kwAt(j, hi) {
		case kwTemp, kwTemporary:
			c.temp = true
			continue
		case kwUnlogged, kwGlobal, kwLocal, kwTable:
			continue
		}
		break
	}
	if !a.isRelName(j, hi) {
		c.opaque = true
		return j - 1
	}
	last := a.chainEnd(j, hi)
	c.addWrite(a.name(last))
	return last
}

// dml recognises INSERT INTO t, UPDATE [ONLY] t, DELETE FROM [ONLY] t and MERGE INTO [ONLY] t
// at i and records the target as a write. The actions of MERGE and ON CONFLICT (which write
// the statement's own target) are consumed without a write. It reports false when the
// keyword is not a statement (a column named "update").
func (a *analyzer) dml(i, lo, hi, fi int, kw kwID, c *facts) (int, bool) {
	if i > lo {
		switch a.kwAt(i-1, hi) {
		case kwThen, kwDo: // MERGE … THEN INSERT (…), ON CONFLICT DO UPDATE: syntax, not a call
			return i, true
		case kwOn, kwFor, kwKey:
			return i, false
		}
	}
	j := i + 1
	switch kw {
	case kwInsert, kwMerge:
		if a.kwAt(j, hi) != kwInto {
			return i, false
		}
		j++
	case kwDelete:
		if a.kwAt(j, hi) != kwFrom {
			return i, false
		}
		j++
	}
	if a.kwAt(j, hi) == kwOnly {
		j++
	}
	if !a.isRelName(j, hi) {
		if kw == kwUpdate {
			return i, false
		}
		c.dml, c.write, c.opaque = true, true, true // a write whose target we cannot read
		c.setNever("data-modifying CTE")
		return j - 1, true
	}
	last := a.chainEnd(j, hi)
	c.addWrite(a.name(last))
	c.dml, c.write = true, true
	c.setNever("data-modifying CTE")
	f := &a.frames[fi]
	f.from = false
	switch kw {
	case kwUpdate:
		f.query = true // UPDATE … FROM list
		f.updateSet = true
	case kwDelete:
		f.using = usingList
	case kwMerge:
		f.using = usingRef
	}
	f.expect = expAfterRef
	return last, true
}

// maybeCall records a function call when the identifier at i is followed by '('.
func (a *analyzer) maybeCall(i, lo, hi int, kw kwID, kwf uint8, c *facts) int {
	if a.kindAt(i+1, hi) != tLParen {
		return i
	}
	head := i
	for head-2 >= lo && a.toks[head-1].kind == tDot && isName(a.toks[head-2].kind) {
		head -= 2
	}
	if head == i && kw != kwNone && a.notCall(i, lo, hi, kw, kwf) {
		return i // ARRAY(, IN (, numeric(10,2), OVER (, … (no Never function is a keyword)
	}
	if head == i && kw == kwNone && a.passingMech(i, lo, hi) {
		return i // XMLEXISTS(x PASSING BY REF (…))
	}
	name := a.name(i)
	// After '::' or AS comes a type (x::numeric(10,2), CAST(x AS varchar(3))) or an alias
	// (AS t(a, b)): no call, unless it is named like a Never function (be conservative).
	if head > lo {
		p := &a.toks[head-1]
		if p.kind == tCast || (p.kind == tIdent && p.kw == kwAs && !(head-2 >= 0 && a.toks[head-2].kind == tDot)) {
			if lookupFunc(name).class != fnNever {
				return i
			}
		}
	}
	schema := ""
	if head < i {
		schema = a.name(i - 2)
	}
	a.call(name, schema, i, hi, c)
	return i
}

// notCall reports whether the keyword at i followed by '(' is syntax rather than a call.
func (a *analyzer) notCall(i, lo, hi int, kw kwID, kwf uint8) bool {
	if kwf&kfNotCall != 0 {
		return true
	}
	switch kw {
	case kwOver, kwFilter, kwRepeatable: // f(…) OVER (…), agg(…) FILTER (…), … REPEATABLE (…)
		return i > lo && a.toks[i-1].kind == tRParen
	case kwConflict: // ON CONFLICT (…)
		return a.kwAt(i-1, hi) == kwOn
	case kwMaterialized: // AS [NOT] MATERIALIZED (…)
		w := a.kwAt(i-1, hi)
		return w == kwAs || w == kwNot
	case kwFirst, kwNext: // FETCH FIRST (n) ROWS
		return a.kwAt(i-1, hi) == kwFetch
	case kwBy: // ORDER BY (a), GROUP BY (a, b), PARTITION BY (a)
		switch a.kwBefore(i, lo, hi) {
		case kwOrder, kwGroup, kwPartition:
			return true
		}
	case kwSets: // GROUPING SETS ((a), ())
		return a.kwBefore(i, lo, hi) == kwGrouping
	case kwEscape, kwColumns, kwPassing: // x LIKE y ESCAPE (…), … '$' COLUMNS (…), '/r' PASSING (…)
		return a.operandEnd(i-1, lo)
	case kwZone: // AT TIME ZONE (…)
		return a.kwBefore(i, lo, hi) == kwTime
	case kwSecond: // INTERVAL '1' SECOND(3), x::interval second(3), DAY TO SECOND(3)
		return a.operandEnd(i-1, lo) || (a.kwBefore(i, lo, hi) == kwTo && i-2 >= lo && a.intervalField(i-2))
	case kwVarying: // CHARACTER VARYING(3), BIT VARYING(3)
		return i-1 >= lo && a.toks[i-1].kind == tIdent &&
			(a.wordIs(i-1, "character") || a.wordIs(i-1, "char") || a.wordIs(i-1, "bit") || a.wordIs(i-1, "nchar"))
	case kwOf: // x IS [NOT] OF (type)
		switch a.kwBefore(i, lo, hi) {
		case kwIs:
			return true
		case kwNot:
			return i-2 >= lo && a.kwAt(i-2, hi) == kwIs
		}
	}
	return false
}

// kwBefore returns the keyword just before token i inside the walk's range (kwNone at its start).
func (a *analyzer) kwBefore(i, lo, hi int) kwID {
	if i-1 < lo {
		return kwNone
	}
	return a.kwAt(i-1, hi)
}

// wordIs reports whether token j is the unquoted word w (lower case), in any letter case.
func (a *analyzer) wordIs(j int, w string) bool {
	t := &a.toks[j]
	return t.kind == tIdent && t.end-t.pos == len(w) && equalFoldASCII(w, a.src[t.pos:t.end])
}

// intervalField reports whether token j is YEAR, MONTH, DAY, HOUR or MINUTE.
func (a *analyzer) intervalField(j int) bool {
	for _, w := range [...]string{"year", "month", "day", "hour", "minute"} {
		if a.wordIs(j, w) {
			return true
		}
	}
	return false
}

// operandEnd reports whether token j (inside the walk, from lo) certainly ends an operand: a
// constant, a parameter, a closing parenthesis or bracket, a quoted or qualified name, a name that
// is no Postgres keyword, a type name, TRUE/FALSE/NULL or a niladic function. A word after
// such a token is an infix or postfix keyword, not a function call. Any other keyword may
// introduce an operand, so what follows it may be a call: when in doubt the answer is false.
func (a *analyzer) operandEnd(j, lo int) bool {
	if j < lo {
		return false
	}
	t := &a.toks[j]
	switch t.kind {
	case tString, tDollar, tNumber, tParam, tRParen, tRBrack, tQIdent:
		return true
	case tIdent:
	default:
		return false
	}
	if j > lo && a.toks[j-1].kind == tDot {
		return true // t.col
	}
	switch t.kw {
	case kwNone:
		if t.kwf == 0 && !pgOtherKeywords[lowerASCII(a.src[t.pos:t.end])] {
			return true
		}
		return a.intervalField(j)
	case kwTypeName, kwTime, kwZone, kwSecond, kwVarying,
		kwCurrentTimestamp, kwCurrentDate, kwCurrentTime, kwLocaltime, kwLocaltimestamp,
		kwCurrentUser, kwSessionUser, kwCurrentRole, kwUser, kwCurrentCatalog, kwSystemUser,
		kwCurrentSchema:
		return true
	case kwReserved:
		return a.wordIs(j, "true") || a.wordIs(j, "false") || a.wordIs(j, "null")
	}
	return false
}

// joinSyntax reports whether JOIN at i, followed by '(', joins a parenthesised table
// reference: it follows an operand (a table or alias, ON condition) or a join-type word.
func (a *analyzer) joinSyntax(i, lo int) bool {
	if a.operandEnd(i-1, lo) {
		return true
	}
	if i-1 < lo {
		return false
	}
	switch a.toks[i-1].kw {
	case kwJoinWord, kwFull: // INNER, CROSS, NATURAL, OUTER, FULL; ISNULL and NOTNULL end an operand
		return !a.wordIs(i-1, "similar") && !a.wordIs(i-1, "authorization") && !a.wordIs(i-1, "collation")
	case kwOperatorLk:
		return a.wordIs(i-1, "left") || a.wordIs(i-1, "right")
	}
	return false
}

// passingMech reports whether the unreserved REF or VALUE at i (followed by '(') is the
// passing mechanism of XMLEXISTS/XMLTABLE: PASSING BY REF (…), PASSING x BY VALUE.
func (a *analyzer) passingMech(i, lo, hi int) bool {
	if a.kwBefore(i, lo, hi) != kwBy || !(a.wordIs(i, "ref") || a.wordIs(i, "value")) {
		return false
	}
	return i-2 >= lo && (a.kwAt(i-2, hi) == kwPassing || a.operandEnd(i-2, lo))
}

// call records a call of function name (schema is its qualifier, if any).
func (a *analyzer) call(name, schema string, i, hi int, c *facts) {
	info := lookupFunc(name)
	display := name
	if schema != "" && schema != "pg_catalog" {
		// Another schema's function of the same name is not the built-in.
		display = schema + "." + name
		if info.class != fnNever {
			info = fnInfo{class: fnUnknown}
		}
	}
	a.funcs = append(a.funcs, display)
	switch info.class {
	case fnNever:
		c.setNever("calls " + name + " (" + info.why + ")")
		c.write = true
		c.taints = c.taints || info.taints
		c.opaque = c.opaque || info.opaque
		if info.seq {
			a.seqArg(i+1, hi, c)
		}
	case fnTime:
		if c.timed == "" {
			c.timed = "calls " + name + " (time-dependent)"
		}
	case fnUnknown:
		if c.optin == "" {
			c.optin = "calls unknown function " + display
		}
		c.opaque = true
		a.unknown = append(a.unknown, display)
	}
}

// seqArg records the sequence named by a literal first argument of nextval/setval (the '('
// is at p) as a write: nextval('public.s') modifies s.
func (a *analyzer) seqArg(p, hi int, c *facts) {
	if a.kindAt(p+1, hi) != tString || a.toks[p+1].flags&flagPlain == 0 {
		return
	}
	switch a.kindAt(p+2, hi) {
	case tRParen, tComma, tCast:
	default:
		return
	}
	t := &a.toks[p+1]
	a.keepLit = append(a.keepLit, t.pos) // its text names what is written: the shape keeps it
	lit := a.src[t.pos:t.end]
	if a.lx.nonStd && strings.IndexByte(lit, '\\') >= 0 {
		c.opaque = true // the escapes make the name hard to read: some sequence is written
		return
	}
	if name := regclassName(unquote(lit, '\'')); name != "" {
		c.addWrite(name)
	}
}

// regclassName returns the relation name of a regclass literal ("s", "public.s",
// "\"My Seq\"") as Postgres resolves it, or "" if it cannot parse it.
func regclassName(s string) string {
	const ws = " \t\n\r\f\v"
	var last string
	for {
		s = strings.TrimLeft(s, ws)
		var part string
		if strings.HasPrefix(s, `"`) {
			end := -1
			for k := 1; k < len(s); k++ {
				if s[k] == '"' {
					if k+1 < len(s) && s[k+1] == '"' {
						k++
						continue
					}
					end = k
					break
				}
			}
			if end < 0 {
				return ""
			}
			part = strings.ReplaceAll(s[1:end], `""`, `"`)
			s = s[end+1:]
		} else {
			k := strings.IndexByte(s, '.')
			if k < 0 {
				k = len(s)
			}
			part = lowerASCII(strings.TrimRight(s[:k], ws))
			s = s[k:]
		}
		s = strings.TrimLeft(s, ws)
		last = part
		if s == "" {
			break
		}
		if s[0] != '.' {
			return ""
		}
		s = s[1:]
	}
	return clip(last)
}
