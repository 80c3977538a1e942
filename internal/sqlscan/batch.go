package sqlscan

import (
	"strconv"
	"strings"
)

// Batches: the reads of one single-table SELECT that differ only in the
// value one equality condition compares its column with (WHERE id = $1,
// WHERE id = 42) may run as one statement for many values at once
// (WHERE id = ANY(…)), each row going to the reads whose value its column
// holds. BatchOf says whether a text may, and where its text must change.

// BatchForm is the batch form of a SELECT text: the conditions that may key
// a batch and where its select list ends.
type BatchForm struct {
	// Keys are the conditions of the top-level WHERE that may key a batch,
	// in the order of the text: col = v, v = col or col IN (v), where v is
	// a single $n the text uses nowhere else, a number or a plain string.
	Keys []BatchKey
	// From is the byte offset of the FROM that ends the select list.
	From int
	// Table and Schema are the one table read, as Filter names it.
	Table, Schema string
}

// BatchKey is one condition that may key a batch.
type BatchKey struct {
	Column string  // the column, as the server resolves its name
	Value  Operand // OpParam, OpNumber or OpString
	Cond   [2]int  // the byte span of the whole condition in the text
	Col    [2]int  // the byte span of the column reference, as written
	Val    [2]int  // the byte span of the value
}

// batchAggregates are the aggregate and window functions of PostgreSQL:
// a call of one reads many rows into one, and a batch would mix keys.
var batchAggregates = map[string]bool{
	"count": true, "sum": true, "avg": true, "min": true, "max": true, "array_agg": true, "string_agg": true,
	"json_agg": true, "jsonb_agg": true, "json_object_agg": true, "jsonb_object_agg": true, "json_arrayagg": true,
	"json_objectagg": true, "bool_and": true, "bool_or": true, "every": true, "bit_and": true, "bit_or": true,
	"bit_xor": true, "xmlagg": true, "stddev": true, "stddev_pop": true, "stddev_samp": true, "variance": true,
	"var_pop": true, "var_samp": true, "covar_pop": true, "covar_samp": true, "corr": true, "regr_avgx": true,
	"regr_avgy": true, "regr_count": true, "regr_intercept": true, "regr_r2": true, "regr_slope": true,
	"regr_sxx": true, "regr_sxy": true, "regr_syy": true, "percentile_cont": true, "percentile_disc": true,
	"mode": true, "rank": true, "dense_rank": true, "percent_rank": true, "cume_dist": true, "any_value": true,
	"range_agg": true, "range_intersect_agg": true, "row_number": true, "ntile": true, "lag": true, "lead": true,
	"first_value": true, "last_value": true, "nth_value": true, "grouping": true,
}

// BatchOf returns the batch form of sql, a single SELECT of one table whose
// WHERE is a conjunction of equality conditions (as Filter recognises it),
// with no DISTINCT, GROUP BY, HAVING, WINDOW, window function (OVER),
// aggregate call, LIMIT, OFFSET, FETCH or locking clause (FOR …), and at
// least one condition that may key a batch; or nil and why not. An ORDER BY
// may stay: the rows of one key, taken from the rows of many in order, are
// in order. Whether the server compares the key column's values as the
// driver can (its type, its collation) and whether the functions called are
// aggregates of the user's are for the caller to ask the server. nonStd is
// set when the server's strings are not standard-conforming.
func BatchOf(sql string, nonStd bool) (*BatchForm, string) {
	var lx lexer
	lx.nonStd = nonStd
	lx.keepLists = true
	lx.run(sql)
	if lx.err != "" || len(lx.toks) == 0 {
		return nil, "does not lex"
	}
	p := filterParser{src: sql, toks: lx.toks}
	params := map[int]int{}
	for i := range p.toks {
		t := &p.toks[i]
		switch t.kind {
		case tSemi:
			return nil, "several statements"
		case tParam:
			params[p.paramNumber(i)]++
		case tIdent:
			switch w := p.word(i); w {
			case "select":
				p.selects++
			case "with", "union", "intersect", "except", "join", "lateral", "only", "tablesample",
				"natural", "table", "into":
				return nil, "not a single-table SELECT (" + strings.ToUpper(w) + ")"
			case "group":
				return nil, "GROUP BY"
			case "distinct", "having", "window", "limit", "offset", "fetch":
				return nil, strings.ToUpper(w)
			case "over":
				return nil, "window function"
			case "for":
				return nil, "FOR (a locking clause)"
			default:
				if batchAggregates[w] && p.kind(i+1) == tLParen {
					return nil, "aggregate " + w
				}
			}
		}
	}
	if p.word(0) != "select" {
		return nil, "not a SELECT"
	}
	f, ok := p.selectStmt()
	if !ok {
		return nil, "not a single-table SELECT whose WHERE is a conjunction of equalities"
	}
	form := &BatchForm{From: p.toks[p.from].pos, Table: f.Table, Schema: f.Schema}
	for n, c := range f.Where {
		if len(c.Values) != 1 {
			continue
		}
		v, sp := c.Values[0], p.spans[n]
		switch v.Kind {
		case OpParam:
			if params[v.Param] != 1 {
				continue // used elsewhere too: it cannot become an array
			}
		case OpNumber, OpString:
		default:
			continue
		}
		form.Keys = append(form.Keys, BatchKey{Column: c.Column, Value: v,
			Cond: [2]int{p.toks[sp.start].pos, p.toks[sp.end-1].end},
			Col:  [2]int{p.toks[sp.col].pos, p.toks[sp.colEnd-1].end},
			Val:  [2]int{p.toks[sp.op].pos, p.toks[sp.opEnd-1].end}})
	}
	if len(form.Keys) == 0 {
		return nil, "no condition compares a column with one value"
	}
	return form, ""
}

// paramNumber returns n of the $n at i (-1 if it is not one).
func (p *filterParser) paramNumber(i int) int {
	n := 0
	for _, c := range []byte(p.text(i)[1:]) {
		if c < '0' || c > '9' || n > 1<<20 {
			return -1
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// Rewrite returns sql (the text the form was made from) reading the rows of
// many values of the key k at once: its condition becomes col = ANY($param
// cast to typ's array), and the column is appended to the select list
// under a name of its own ("sqlflight.key", so that an ORDER BY of an
// output column's name means what it meant), where the caller finds each
// row's key.
func (f *BatchForm) Rewrite(sql string, k BatchKey, param int, typ string) string {
	col := sql[k.Col[0]:k.Col[1]]
	var b strings.Builder
	b.Grow(len(sql) + 2*len(col) + len(typ) + 32)
	b.WriteString(strings.TrimRight(sql[:f.From], " "))
	b.WriteString(", ")
	b.WriteString(col)
	b.WriteString(` AS "sqlflight.key" `) // an output name of its own: ORDER BY id stays unambiguous
	b.WriteString(sql[f.From:k.Cond[0]])
	b.WriteString(col)
	b.WriteString(" = ANY($")
	b.WriteString(strconv.Itoa(param))
	b.WriteString("::")
	b.WriteString(typ)
	b.WriteString("[])")
	b.WriteString(sql[k.Cond[1]:])
	return b.String()
}
