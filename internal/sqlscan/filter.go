package sqlscan

import "strings"

// Row filters: which rows of one table a statement reads or writes, as far as its own text
// proves it through equality conditions. Filter is deliberately narrow: anything it does not
// recognise makes it answer "no filter", which callers treat as "any row of any table".

// OperandKind is what a value compared with (or assigned to) a column is.
type OperandKind uint8

const (
	OpExpr   OperandKind = iota // anything else: an expression whose value the text does not give
	OpParam                     // $n
	OpNumber                    // a numeric constant, optionally signed: Text holds it
	OpString                    // a plain '…' string: Text holds its value (quotes undoubled)
	OpBool                      // TRUE or FALSE: Text is "true" or "false"
	OpNull                      // NULL
)

// Operand is one value of a condition, an assignment or an inserted row.
type Operand struct {
	Kind  OperandKind
	Param int    // n of $n (OpParam)
	Text  string // the constant (OpNumber, OpString, OpBool)
}

// Condition says that every row the statement reads or writes has Column equal to one of
// Values (a `col = v` or a `col IN (v, …)` conjunct of the top-level WHERE).
type Condition struct {
	Column string
	Values []Operand
}

// Assignment is one `col = value` of an UPDATE's SET list; Value.Kind is OpExpr when the new
// value is not a single parameter or constant.
type Assignment struct {
	Column string
	Value  Operand
}

// RowFilter is what Filter proves about one single-table statement.
type RowFilter struct {
	Kind   Kind   // KindSelect, KindUpdate, KindDelete or KindInsert
	Schema string // the table's schema as written ("" when unqualified)
	Table  string // the table, as the server resolves the name
	// Where are the AND-ed equality conditions of the top-level WHERE (SELECT, UPDATE,
	// DELETE); none when there is no WHERE.
	Where []Condition
	// Set is an UPDATE's SET list.
	Set []Assignment
	// Columns and Rows are an INSERT … (columns) VALUES (…), (…): Rows[i][j] is the value
	// of Columns[j] in the i-th row (OpExpr for DEFAULT and expressions).
	Columns []string
	Rows    [][]Operand
}

// Filter returns the row filter of sql, a single statement, and true; or false when the text is
// not one it can prove anything about. It recognises:
//
//   - SELECT … FROM t [[AS] a] [WHERE c1 AND c2 …] [GROUP BY …] [ORDER BY …] [LIMIT …] …
//     with no other SELECT anywhere (no subquery, CTE, set operation), no join, no ONLY;
//   - UPDATE t [[AS] a] SET col = v, … [WHERE …] [RETURNING …] (no FROM, no WHERE CURRENT OF,
//     no multi-column or subscripted assignment);
//   - DELETE FROM t [[AS] a] [WHERE …] [RETURNING …] (no USING);
//   - INSERT INTO t [AS a] (cols) VALUES (…), … [RETURNING …] (no ON CONFLICT, OVERRIDING,
//     nor SELECT).
//
// A WHERE is recognised only when it is a conjunction of `col = v`, `v = col` and
// `col IN (v, …)` where col is a column of t (bare or qualified by t or its alias) and each v
// is a single $n, number, plain string, TRUE, FALSE or NULL with no cast, COLLATE or operator
// around it; parentheses may group such conjunctions ((a = 1) AND (b = 2), as ORMs write them);
// OR, NOT, other parentheses, functions of the column and anything else make Filter answer
// false. nonStd lexes '…' strings as a server with standard_conforming_strings = off
// does; strings holding a backslash are never taken as values.
func Filter(sql string, nonStd bool) (*RowFilter, bool) {
	var lx lexer
	lx.nonStd = nonStd
	lx.keepLists = true
	lx.run(sql)
	if lx.err != "" || len(lx.toks) == 0 {
		return nil, false
	}
	p := filterParser{src: sql, toks: lx.toks}
	for i := range p.toks {
		t := &p.toks[i]
		if t.kind == tSemi {
			return nil, false
		}
		if t.kind == tIdent {
			switch p.word(i) {
			case "select":
				p.selects++
			case "with", "union", "intersect", "except", "join", "lateral", "only", "tablesample",
				"natural", "table", "into":
				if !(p.word(0) == "insert" && i == 1) {
					return nil, false
				}
			}
		}
	}
	var f *RowFilter
	var ok bool
	switch p.word(0) {
	case "select":
		f, ok = p.selectStmt()
	case "update":
		f, ok = p.updateStmt()
	case "delete":
		f, ok = p.deleteStmt()
	case "insert":
		f, ok = p.insertStmt()
	}
	if !ok {
		return nil, false
	}
	return f, true
}

type filterParser struct {
	src     string
	toks    []token
	selects int
	alias   string
	f       *RowFilter
	// spans are the token spans of f.Where's conditions, in order
	// (BatchOf's rewrite).
	spans []condSpan
	from  int // the FROM of a SELECT, a token index
}

// condSpan is where one condition of the WHERE is in the tokens: the whole
// condition [start, end), its column [col, colEnd) and, for a single value,
// the value [op, opEnd).
type condSpan struct {
	start, end, col, colEnd, op, opEnd int
}

// word returns the token at i lower-cased if it is an unquoted identifier or keyword, else "".
func (p *filterParser) word(i int) string {
	if i < 0 || i >= len(p.toks) || p.toks[i].kind != tIdent {
		return ""
	}
	return lowerASCII(p.src[p.toks[i].pos:p.toks[i].end])
}

func (p *filterParser) kind(i int) tokKind {
	if i >= len(p.toks) {
		return 0
	}
	return p.toks[i].kind
}

func (p *filterParser) text(i int) string { return p.src[p.toks[i].pos:p.toks[i].end] }

// ident returns the name at i as the server resolves it, if i is a name that is not a
// reserved word (or a keyword that could start a clause).
func (p *filterParser) ident(i int) (string, bool) {
	switch p.kind(i) {
	case tQIdent:
		if p.toks[i].flags&flagUnicode != 0 {
			return "", false
		}
		return clip(unquote(p.text(i), '"')), true
	case tIdent:
		if p.toks[i].kw != kwNone {
			return "", false
		}
		return clip(lowerASCII(p.text(i))), true
	}
	return "", false
}

// table parses [schema.]name [[AS] alias] at i and returns the next index.
func (p *filterParser) table(i int, aliasOK bool) (int, bool) {
	name, ok := p.ident(i)
	if !ok {
		return 0, false
	}
	i++
	if p.kind(i) == tDot {
		t, ok := p.ident(i + 1)
		if !ok {
			return 0, false
		}
		p.f.Schema, name = name, t
		i += 2
		if p.kind(i) == tDot {
			return 0, false // database.schema.table
		}
	}
	p.f.Table = name
	if !aliasOK {
		return i, true
	}
	if p.word(i) == "as" {
		a, ok := p.ident(i + 1)
		if !ok {
			return 0, false
		}
		p.alias = a
		return i + 2, true
	}
	if a, ok := p.ident(i); ok {
		p.alias = a
		i++
	}
	return i, true
}

// column parses a column reference of the statement's table at i.
func (p *filterParser) column(i int) (string, int, bool) {
	first, ok := p.ident(i)
	if !ok {
		return "", 0, false
	}
	if p.kind(i+1) != tDot {
		return first, i + 1, true
	}
	second, ok := p.ident(i + 2)
	if !ok {
		return "", 0, false
	}
	if p.kind(i+3) != tDot {
		// qualifier.column: the alias, or the table when it has none
		if (p.alias != "" && first == p.alias) || (p.alias == "" && first == p.f.Table) {
			return second, i + 3, true
		}
		return "", 0, false
	}
	third, ok := p.ident(i + 4)
	if !ok || p.kind(i+5) == tDot || p.alias != "" || p.f.Schema == "" || first != p.f.Schema ||
		second != p.f.Table {
		return "", 0, false
	}
	return third, i + 5, true
}

// operand parses a single value at i.
func (p *filterParser) operand(i int) (Operand, int, bool) {
	switch p.kind(i) {
	case tParam:
		n := 0
		for _, c := range []byte(p.text(i)[1:]) {
			if c < '0' || c > '9' || n > 1<<20 {
				return Operand{}, 0, false
			}
			n = n*10 + int(c-'0')
		}
		return Operand{Kind: OpParam, Param: n}, i + 1, true
	case tNumber:
		return Operand{Kind: OpNumber, Text: p.text(i)}, i + 1, true
	case tString:
		t := &p.toks[i]
		s := p.text(i)
		if t.flags&flagPlain == 0 || strings.IndexByte(s, '\\') >= 0 {
			return Operand{}, 0, false
		}
		return Operand{Kind: OpString, Text: unquote(s, '\'')}, i + 1, true
	case tOp:
		if s := p.text(i); (s == "-" || s == "+") && p.kind(i+1) == tNumber {
			txt := p.text(i + 1)
			if s == "-" {
				txt = "-" + txt
			}
			return Operand{Kind: OpNumber, Text: txt}, i + 2, true
		}
	case tIdent:
		switch p.word(i) {
		case "true", "false":
			return Operand{Kind: OpBool, Text: p.word(i)}, i + 1, true
		case "null":
			return Operand{Kind: OpNull}, i + 1, true
		}
	}
	return Operand{}, 0, false
}

func (p *filterParser) isOp(i int, op string) bool {
	return p.kind(i) == tOp && p.text(i) == op
}

// maxWhereDepth bounds the parentheses around conditions that where follows.
const maxWhereDepth = 32

// where parses AND-ed conditions from i up to a token that stop accepts (or the end).
func (p *filterParser) where(i int, stop func(int) bool) (int, bool) {
	return p.whereIn(i, stop, 0)
}

// whereIn is where inside depth parentheses: a conjunct may be a
// parenthesised conjunction itself, (a = 1) AND (b = 2) as ORMs write it.
func (p *filterParser) whereIn(i int, stop func(int) bool, depth int) (int, bool) {
	for {
		if p.kind(i) == tLParen && depth < maxWhereDepth {
			j, ok := p.whereIn(i+1, func(k int) bool { return p.kind(k) == tRParen }, depth+1)
			if !ok || p.kind(j) != tRParen {
				return 0, false // (id) = 1, (a, b) = …, or an OR inside
			}
			next, done, ok := p.and(j+1, stop)
			if !ok || done {
				return next, ok
			}
			i = next
			continue
		}
		var c Condition
		sp := condSpan{start: i}
		if col, j, ok := p.column(i); ok {
			c.Column = col
			sp.col, sp.colEnd = i, j
			switch {
			case p.isOp(j, "="):
				v, k, ok := p.operand(j + 1)
				if !ok {
					return 0, false
				}
				sp.op, sp.opEnd = j+1, k
				c.Values, i = []Operand{v}, k
			case p.word(j) == "in" && p.kind(j+1) == tLParen:
				k := j + 2
				sp.op = k
				for {
					v, next, ok := p.operand(k)
					if !ok {
						return 0, false
					}
					c.Values = append(c.Values, v)
					k = next
					if p.kind(k) == tComma {
						k++
						continue
					}
					if p.kind(k) != tRParen {
						return 0, false
					}
					sp.opEnd = k
					i = k + 1
					break
				}
			default:
				return 0, false
			}
		} else {
			v, j, ok := p.operand(i)
			if !ok || !p.isOp(j, "=") {
				return 0, false
			}
			col, k, ok := p.column(j + 1)
			if !ok {
				return 0, false
			}
			sp.op, sp.opEnd, sp.col, sp.colEnd = i, j, j+1, k
			c.Column, c.Values, i = col, []Operand{v}, k
		}
		sp.end = i
		p.f.Where = append(p.f.Where, c)
		p.spans = append(p.spans, sp)
		next, done, ok := p.and(i, stop)
		if !ok || done {
			return next, ok
		}
		i = next
	}
}

// and reads what follows a conjunct at i: the end of the conditions (the
// end of the text, or a token stop accepts: done, at i), or AND (the next
// conjunct starts after it); ok is false for anything else.
func (p *filterParser) and(i int, stop func(int) bool) (next int, done, ok bool) {
	switch {
	case i >= len(p.toks) || stop(i):
		return i, true, true
	case p.word(i) == "and":
		return i + 1, false, true
	}
	return 0, false, false
}

func (p *filterParser) selectStmt() (*RowFilter, bool) {
	p.f = &RowFilter{Kind: KindSelect}
	if p.selects != 1 {
		return nil, false
	}
	// The select list, up to FROM at depth 0.
	depth, i := 0, 1
	for ; i < len(p.toks); i++ {
		switch p.kind(i) {
		case tLParen, tLBrack:
			depth++
		case tRParen, tRBrack:
			depth--
		case tIdent:
			if depth == 0 && p.word(i) == "from" {
				p.from = i
				goto from
			}
		}
	}
	return nil, false
from:
	i, ok := p.table(i+1, true)
	if !ok {
		return nil, false
	}
	tail := func(i int) bool {
		switch p.word(i) {
		case "group", "having", "window", "order", "limit", "offset", "fetch", "for":
			return true
		}
		return false
	}
	switch {
	case i >= len(p.toks) || tail(i):
		return p.f, true
	case p.word(i) == "where":
		if _, ok := p.where(i+1, tail); !ok {
			return nil, false
		}
		return p.f, true
	}
	return nil, false
}

func (p *filterParser) returning(i int) bool { return p.word(i) == "returning" }

func (p *filterParser) updateStmt() (*RowFilter, bool) {
	p.f = &RowFilter{Kind: KindUpdate}
	if p.selects != 0 && !p.selectsOnlyInSet() {
		return nil, false
	}
	i, ok := p.table(1, true)
	if !ok || p.word(i) != "set" {
		return nil, false
	}
	i++
	for {
		col, ok := p.ident(i)
		if !ok || !p.isOp(i+1, "=") {
			return nil, false // (a, b) = …, col[1] = …, col.field = …
		}
		i += 2
		start := i
		depth := 0
		for ; i < len(p.toks); i++ {
			if depth == 0 && (p.kind(i) == tComma || p.word(i) == "where" || p.returning(i) || p.word(i) == "from") {
				break
			}
			switch p.kind(i) {
			case tLParen, tLBrack:
				depth++
			case tRParen, tRBrack:
				depth--
			}
		}
		a := Assignment{Column: col}
		if v, next, ok := p.operand(start); ok && next == i {
			a.Value = v
		}
		p.f.Set = append(p.f.Set, a)
		if p.kind(i) != tComma {
			break
		}
		i++
	}
	return p.writeWhere(i) // not UPDATE … FROM
}

// writeWhere parses what follows an UPDATE's SET list or a DELETE's table
// at i: nothing, RETURNING, or WHERE conditions then RETURNING or nothing.
func (p *filterParser) writeWhere(i int) (*RowFilter, bool) {
	switch {
	case i >= len(p.toks) || p.returning(i):
		return p.f, true
	case p.word(i) == "where":
		if _, ok := p.where(i+1, p.returning); !ok {
			return nil, false
		}
		return p.f, true
	}
	return nil, false
}

// selectsOnlyInSet reports whether every SELECT of an UPDATE is inside its SET list (a
// subquery computing a new value reads other rows but does not choose the rows written).
func (p *filterParser) selectsOnlyInSet() bool {
	for i := range p.toks {
		if p.word(i) == "where" {
			for j := i; j < len(p.toks); j++ {
				if p.word(j) == "select" {
					return false
				}
			}
			return true
		}
	}
	return true
}

func (p *filterParser) deleteStmt() (*RowFilter, bool) {
	p.f = &RowFilter{Kind: KindDelete}
	if p.selects != 0 || p.word(1) != "from" {
		return nil, false
	}
	i, ok := p.table(2, true)
	if !ok {
		return nil, false
	}
	return p.writeWhere(i) // not USING, nor WHERE CURRENT OF …
}

func (p *filterParser) insertStmt() (*RowFilter, bool) {
	p.f = &RowFilter{Kind: KindInsert}
	if p.selects != 0 || p.word(1) != "into" {
		return nil, false
	}
	i, ok := p.table(2, false)
	if !ok {
		return nil, false
	}
	if p.word(i) == "as" {
		if _, ok := p.ident(i + 1); !ok {
			return nil, false
		}
		i += 2
	}
	if p.kind(i) != tLParen {
		return nil, false // the table's own column order: not known here
	}
	for i++; ; i++ {
		col, ok := p.ident(i)
		if !ok {
			return nil, false
		}
		p.f.Columns = append(p.f.Columns, col)
		i++
		if p.kind(i) == tRParen {
			break
		}
		if p.kind(i) != tComma {
			return nil, false
		}
	}
	i++
	if p.word(i) != "values" {
		return nil, false // OVERRIDING, DEFAULT VALUES, SELECT …
	}
	i++
	for {
		if p.kind(i) != tLParen {
			return nil, false
		}
		i++
		var row []Operand
		for {
			start, depth := i, 0
			for ; i < len(p.toks); i++ {
				if depth == 0 && (p.kind(i) == tComma || p.kind(i) == tRParen) {
					break
				}
				switch p.kind(i) {
				case tLParen, tLBrack:
					depth++
				case tRParen, tRBrack:
					depth--
				}
			}
			if i >= len(p.toks) {
				return nil, false
			}
			var v Operand
			if o, next, ok := p.operand(start); ok && next == i {
				v = o
			}
			row = append(row, v)
			if p.kind(i) == tRParen {
				i++
				break
			}
			i++
		}
		if len(row) != len(p.f.Columns) {
			return nil, false
		}
		p.f.Rows = append(p.f.Rows, row)
		if p.kind(i) != tComma {
			break
		}
		i++
	}
	if i < len(p.toks) && !p.returning(i) {
		return nil, false // ON CONFLICT …
	}
	return p.f, true
}
