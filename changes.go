package sqlflight

import "github.com/sqlflight/sqlflight/internal/feed"

// change is one committed change to a table as a change feed reports it
// (a row inserted, updated or deleted, or the table truncated), made by any
// client of the database, through a Shield or not: a feed.Change, in the
// form the row-level invalidation reads (changesOf converts).
type change struct {
	// table is the changed table, schema-qualified as the server names it
	// (public.items); epochs key it by tableKey.
	table string
	// whole is set when the change may touch any row of the table: a
	// TRUNCATE, or a change whose rows the feed could not report.
	whole bool
	// old and new are the row's column values before and after the change,
	// in PostgreSQL's text form, for the columns the feed knows (for an
	// UPDATE or DELETE, old often holds the replica identity's columns
	// alone). old is nil for an INSERT, new for a DELETE; a column missing
	// from a map is unknown, not NULL (a NULL is reported as a nil value).
	old, new map[string]*string
}

// changesOf returns a feed's changes as the Shield applies them.
func changesOf(fcs []feed.Change) []change {
	if len(fcs) == 0 {
		return nil
	}
	cs := make([]change, len(fcs))
	for i, c := range fcs {
		cs[i] = change{table: c.Table, whole: c.Whole, old: c.Old, new: c.New}
	}
	return cs
}

// applyChanges invalidates what committed changes may have changed, as
// writes through the Shield do, in this process and, with a shared tier,
// in the fleet (which hears of the tables). Each change pins the columns of
// its table whose values it gives (before and after, or the one side an
// INSERT or a DELETE has) to those values: reads tagged with other values
// of a pinned column stay. A change to a table whose column types are not
// known, or that gives no such column, a whole-table change (TRUNCATE),
// and a change of unknown table invalidate the table, or every table.
// The changes of one call are one write: a column stays pinned only if
// every change to its table pins it.
func (s *Shield) applyChanges(cs []change) {
	if len(cs) == 0 {
		return
	}
	var w write
	w.known = true
	whole := map[string]bool{}
	rows := map[string]rowWrite{}
	var order []string
	for _, c := range cs {
		if c.table == "" {
			s.bump(nil, false)
			return
		}
		k := tableKey(c.table)
		if whole[k] {
			continue
		}
		rw, ok := s.changeRows(c)
		if prev, seen := rows[k]; ok && seen {
			rw, ok = mergeRows(prev, rw)
		}
		if !ok {
			whole[k] = true
			delete(rows, k)
			w.tables = append(w.tables, k)
			continue
		}
		if _, seen := rows[k]; !seen {
			order = append(order, k)
		}
		rows[k] = rw
	}
	for _, k := range order {
		if rw, ok := rows[k]; ok {
			w.rows = append(w.rows, rw)
		}
	}
	s.bumpWrite(w)
}
