package verdict

import (
	"context"
	"errors"
	"strings"

	"github.com/sqlflight/sqlflight/internal/feed"
)

// Write closures: the tables a write to a table may change in the same
// statement, learned once per table and scope.

// Closure is what a write to one table may change.
type Closure struct {
	// Tables are the tables (lower-case bare names, as epochs key them)
	// the write may change: the table itself, its inheritance relatives
	// and the tables whose foreign keys cascade from it, recursively.
	Tables []string
	// All: any table (a user trigger or rule, a view or a foreign table
	// among them); Tables do not bound the write.
	All bool
}

// closureQuery follows cascading foreign keys and inheritance from the
// named tables, and tells which of them have user triggers or rules. The
// NOTIFY feed's triggers (InstallTriggersSQL) write nothing and do not
// count.
const closureQuery = `WITH RECURSIVE w(rel) AS (
  SELECT c.oid FROM pg_catalog.pg_class c WHERE c.relname = ANY($1::text::text[])
  UNION
  SELECT x.rel FROM w, LATERAL (
    SELECT con.conrelid AS rel FROM pg_catalog.pg_constraint con
    WHERE con.contype = 'f' AND con.confrelid = w.rel
      AND (con.confdeltype IN ('c', 'n', 'd') OR con.confupdtype IN ('c', 'n', 'd'))
    UNION ALL SELECT i.inhparent FROM pg_catalog.pg_inherits i WHERE i.inhrelid = w.rel
    UNION ALL SELECT i.inhrelid FROM pg_catalog.pg_inherits i WHERE i.inhparent = w.rel
  ) x
)
SELECT c.relname::text,
  c.relkind IN ('v', 'f')
  OR EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t WHERE t.tgrelid = c.oid AND NOT t.tgisinternal
    AND t.tgfoid IS DISTINCT FROM pg_catalog.to_regprocedure('` + feed.TriggerFunction + `')::oid)
  OR EXISTS (SELECT 1 FROM pg_catalog.pg_rewrite r WHERE r.ev_class = c.oid AND r.rulename <> '_RETURN')
FROM w JOIN pg_catalog.pg_class c ON c.oid = w.rel`

// QueryClosure asks conn's catalog what a write to table (a name as the
// scanner spells it: quoted names exact, others folded; a schema is
// ignored) may change, over every schema's table of that name. A table the
// catalog does not know has an empty Closure.
func QueryClosure(ctx context.Context, conn Session, table string) (Closure, error) {
	name := strings.Trim(table, `"`)
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		name = name[i+1:]
	}
	// The scanner keeps quoted names exact and folds the others; epochs
	// fold every name, so ask for both spellings.
	rows, err := conn.Query(ctx, closureQuery, TextArray([]string{name, strings.ToLower(name)}))
	if err != nil {
		return Closure{}, err
	}
	var cl Closure
	for _, row := range rows {
		if len(row) != 2 || row[0] == nil || row[1] == nil {
			return Closure{}, errors.New("sqlflight: unexpected answer to the closure query")
		}
		cl.Tables = append(cl.Tables, tableKey(*row[0]))
		cl.All = cl.All || *row[1] == "t"
	}
	return cl, nil
}

// TextArray is list as a PostgreSQL array literal of text: each element
// quoted ("…", with " and \ escaped) and kept byte for byte, which the
// server reads as text[] (or casts to another array type); every driver
// sends it as a text parameter.
func TextArray(list []string) string {
	n := 2
	for _, s := range list {
		n += len(s) + 3
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteByte('{')
	for i, s := range list {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		for j := 0; j < len(s); j++ {
			if c := s[j]; c == '"' || c == '\\' {
				b.WriteByte('\\')
			}
			b.WriteByte(s[j])
		}
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

// tableKey is how epochs key a table: its bare name, unquoted and folded
// to lower case (the root's tableKey).
func tableKey(name string) string {
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		name = name[i+1:]
	}
	return strings.ToLower(strings.Trim(name, `"`))
}
