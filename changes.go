package sqlflight

// change is one committed change to a table as a change feed reports it
// (a row inserted, updated or deleted, or the table truncated), made by any
// client of the database, through a Shield or not.
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

// applyChanges invalidates what committed changes may have changed, as
// writes through the Shield do: the tables they touch (every table when a
// change's table is not known), in this process and, with a shared tier,
// in the fleet.
func (s *Shield) applyChanges(cs []change) {
	if len(cs) == 0 {
		return
	}
	tables := make([]string, 0, len(cs))
	for _, c := range cs {
		if c.table == "" {
			s.bump(nil, false)
			return
		}
		tables = append(tables, c.table)
	}
	s.bump(tables, true)
}
