package sqlscan

// Parsers of the statements that name relations without being queries: TRUNCATE, LOCK's
// name list, CREATE/ALTER/DROP of tables, views, sequences and indexes, REFRESH, and the
// maintenance commands.

// nameList reads "[ONLY] name [*] [(cols)] {, …}" starting at j and returns the index after
// it. Names go to Writes when write is set, to Tables otherwise.
func (a *analyzer) nameList(j, hi int, c *facts, write bool) int {
	for {
		if a.kwAt(j, hi) == kwOnly {
			j++
		}
		if !a.isRelName(j, hi) {
			return j
		}
		last := a.chainEnd(j, hi)
		if write {
			c.addWrite(a.name(last))
		} else {
			c.addTable(a.name(last))
		}
		j = last + 1
		if j < hi && a.toks[j].kind == tOp && a.src[a.toks[j].pos:a.toks[j].end] == "*" {
			j++
		}
		if a.kindAt(j, hi) == tLParen {
			j = a.after(j)
		}
		if a.kindAt(j, hi) != tComma {
			return j
		}
		j++
	}
}

// hasWord reports whether keyword w occurs at the top level of toks[j:hi].
func (a *analyzer) hasWord(j, hi int, w kwID) bool {
	for ; j < hi; j = a.after(j) {
		if a.kwAt(j, hi) == w {
			return true
		}
	}
	return false
}

// truncate: TRUNCATE [TABLE] [ONLY] name [*], … [RESTART|CONTINUE IDENTITY] [CASCADE].
func (a *analyzer) truncate(lo, hi int) Statement {
	st := a.other(lo, hi, KindTruncate, false)
	j := lo + 1
	if a.kwAt(j, hi) == kwTable {
		j++
	}
	var c facts
	j = a.nameList(j, hi, &c, true)
	c.opaque = len(c.writes) == 0 || a.hasWord(j, hi, kwCascade) // CASCADE empties referencing tables
	c.apply(&st)
	return st
}

// relKind reads the object type of CREATE/ALTER/DROP at j: TABLE, VIEW, MATERIALIZED VIEW,
// SEQUENCE, INDEX, FOREIGN TABLE. It returns the type's first keyword and the index after it.
func (a *analyzer) relKind(j, hi int) (kwID, int) {
	switch w := a.kwAt(j, hi); w {
	case kwTable, kwView, kwSequence, kwIndex:
		return w, j + 1
	case kwMaterialized:
		if a.kwAt(j+1, hi) == kwView {
			return kwView, j + 2
		}
	case kwForeign:
		if a.kwAt(j+1, hi) == kwTable {
			return kwTable, j + 2
		}
	}
	return kwNone, j
}

// skipIfExists skips IF [NOT] EXISTS.
func (a *analyzer) skipIfExists(j, hi int) int {
	if a.kwAt(j, hi) == kwIf {
		j++
		if a.kwAt(j, hi) == kwNot {
			j++
		}
		if a.kwAt(j, hi) == kwExists {
			j++
		}
	}
	return j
}

// create handles CREATE … TABLE / VIEW / MATERIALIZED VIEW / SEQUENCE / INDEX / FOREIGN TABLE;
// any other object is DDL on relations the scanner cannot name.
func (a *analyzer) create(lo, hi int) Statement {
	st := a.other(lo, hi, KindDDL, false)
	var c facts
	j := lo + 1
	if a.kwAt(j, hi) == kwOr { // OR REPLACE
		j += 2
	}
	temp, matview := false, false
	for {
		w := a.kwAt(j, hi)
		if w == kwTemp || w == kwTemporary {
			temp = true
		} else if w != kwGlobal && w != kwLocal && w != kwUnlogged && w != kwRecursive && w != kwUnique {
			break
		}
		j++
	}
	if a.kwAt(j, hi) == kwMaterialized {
		matview = true
	}
	kind, j := a.relKind(j, hi)
	switch kind {
	case kwTable, kwView, kwSequence:
		j = a.skipIfExists(j, hi)
		if !a.isRelName(j, hi) {
			c.opaque = true
			break
		}
		last := a.chainEnd(j, hi)
		c.addWrite(a.name(last))
		if temp {
			c.temp = true
		}
		if kind == kwView && !matview {
			break // the view's query does not run
		}
		// CREATE TABLE … AS query | PARTITION OF parent; CREATE MATERIALIZED VIEW … AS query
		for k := last + 1; k < hi; k = a.after(k) {
			switch a.kwAt(k, hi) {
			case kwAs:
				if a.kwAt(k+1, hi) == kwExecute {
					c.opaque = true
				} else {
					a.mergeInner(k+1, hi, &c)
				}
				k = hi - 1
			case kwPartition: // PARTITION OF parent: the parent's contents change
				if a.kwAt(k+1, hi) == kwOf && a.isRelName(k+2, hi) {
					c.addWrite(a.name(a.chainEnd(k+2, hi)))
				}
			}
		}
	case kwIndex:
		// CREATE [UNIQUE] INDEX [CONCURRENTLY] [[IF NOT EXISTS] name] ON [ONLY] table
		for k := j; k < hi; k = a.after(k) {
			if a.kwAt(k, hi) == kwOn {
				p := k + 1
				if a.kwAt(p, hi) == kwOnly {
					p++
				}
				if a.isRelName(p, hi) {
					c.addWrite(a.name(a.chainEnd(p, hi)))
				}
				break
			}
		}
		if len(c.writes) == 0 {
			c.opaque = true
		}
	default:
		c.opaque = true // FUNCTION, TRIGGER, RULE, TYPE, SCHEMA, EXTENSION, ROLE, …
	}
	c.apply(&st)
	return st
}

// mergeInner analyzes the query that a DDL statement runs (CREATE TABLE AS, MATERIALIZED
// VIEW) and adds its relations and effects to c.
func (a *analyzer) mergeInner(j, hi int, c *facts) {
	inner := a.statement(j, hi)
	c.tables = append(c.tables, inner.Tables...)
	c.writes = append(c.writes, inner.Writes...)
	c.tables = append(c.tables, inner.Writes...)
	c.opaque = c.opaque || !inner.TablesKnown
	c.taints = c.taints || inner.Taints
	c.temp = c.temp || inner.TempObjects
}

// alter handles ALTER TABLE / VIEW / MATERIALIZED VIEW / SEQUENCE / INDEX / FOREIGN TABLE
// name … (including RENAME TO and ATTACH/DETACH PARTITION); other objects are opaque.
func (a *analyzer) alter(lo, hi int) Statement {
	st := a.other(lo, hi, KindDDL, false)
	var c facts
	kind, j := a.relKind(lo+1, hi)
	j = a.skipIfExists(j, hi)
	if a.kwAt(j, hi) == kwOnly {
		j++
	}
	if kind == kwNone || a.kwAt(j, hi) == kwAll || !a.isRelName(j, hi) {
		c.opaque = true
		c.apply(&st)
		return st
	}
	last := a.chainEnd(j, hi)
	c.addWrite(a.name(last))
	for k := last + 1; k < hi; k = a.after(k) {
		switch a.kwAt(k, hi) {
		case kwRename:
			if a.kwAt(k+1, hi) == kwTo && a.isRelName(k+2, hi) {
				c.addWrite(a.name(k + 2))
			}
		case kwAttach, kwDetach:
			if a.kwAt(k+1, hi) == kwPartition && a.isRelName(k+2, hi) {
				c.addWrite(a.name(a.chainEnd(k+2, hi)))
			}
		}
	}
	c.apply(&st)
	return st
}

// drop handles DROP TABLE / VIEW / MATERIALIZED VIEW / SEQUENCE / INDEX / FOREIGN TABLE
// [CONCURRENTLY] [IF EXISTS] a, b [CASCADE]; CASCADE and other objects are opaque.
func (a *analyzer) drop(lo, hi int) Statement {
	st := a.other(lo, hi, KindDDL, false)
	var c facts
	kind, j := a.relKind(lo+1, hi)
	if kind == kwNone {
		c.opaque = true
		c.apply(&st)
		return st
	}
	if a.kwAt(j, hi) == kwConcurrently {
		j++
	}
	j = a.skipIfExists(j, hi)
	j = a.nameList(j, hi, &c, true)
	c.opaque = len(c.writes) == 0 || a.hasWord(j, hi, kwCascade)
	c.apply(&st)
	return st
}

// refresh: REFRESH MATERIALIZED VIEW [CONCURRENTLY] name [WITH [NO] DATA].
func (a *analyzer) refresh(lo, hi int) Statement {
	st := a.other(lo, hi, KindDDL, false)
	var c facts
	j := lo + 1
	if a.kwAt(j, hi) == kwMaterialized && a.kwAt(j+1, hi) == kwView {
		j += 2
		if a.kwAt(j, hi) == kwConcurrently {
			j++
		}
		if a.isRelName(j, hi) {
			c.addWrite(a.name(a.chainEnd(j, hi)))
		}
	}
	c.opaque = len(c.writes) == 0
	c.apply(&st)
	return st
}

// maintenance handles VACUUM, ANALYZE, CLUSTER and REINDEX. They change no rows: Writes stay
// empty and TablesKnown true; the named tables are listed in Tables.
func (a *analyzer) maintenance(lo, hi int) Statement {
	st := a.other(lo, hi, KindDDL, false)
	var c facts
	w := a.kwAt(lo, hi)
	j := lo + 1
	if a.kindAt(j, hi) == tLParen { // (options)
		j = a.after(j)
	}
	switch w {
	case kwReindex:
		if a.kwAt(j, hi) == kwTable {
			j++
			if a.kwAt(j, hi) == kwConcurrently {
				j++
			}
			a.nameList(j, hi, &c, false)
		}
	default:
		for {
			switch a.kwAt(j, hi) {
			case kwFull, kwFreeze, kwVerbose, kwAnalyze, kwAnalyse:
				j++
				continue
			}
			break
		}
		a.nameList(j, hi, &c, false)
	}
	c.apply(&st)
	return st
}
