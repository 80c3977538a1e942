package sqlscan

import "testing"

func TestBatchOf(t *testing.T) {
	for _, c := range []struct {
		sql, col, rewrite, why string
		n                      int // the $n of the array
	}{
		{sql: "SELECT id, v FROM t WHERE id = $1", col: "id", n: 1,
			rewrite: "SELECT id, v, id AS \"sqlflight.key\" FROM t WHERE id = ANY($1::int4[])"},
		{sql: "SELECT * FROM t AS u WHERE u.tenant = $1 AND u.id = $2 ORDER BY u.v", col: "id", n: 2,
			rewrite: "SELECT *, u.id AS \"sqlflight.key\" FROM t AS u WHERE u.tenant = $1 AND u.id = ANY($2::int4[]) ORDER BY u.v"},
		{sql: `SELECT "t"."id" FROM "t" WHERE ("t"."id" = 42)`, col: "id", n: 1,
			rewrite: `SELECT "t"."id", "t"."id" AS "sqlflight.key" FROM "t" WHERE ("t"."id" = ANY($1::int4[]))`},
		{sql: "SELECT id FROM t WHERE 'x' = s", col: "s", n: 1,
			rewrite: "SELECT id, s AS \"sqlflight.key\" FROM t WHERE s = ANY($1::int4[])"},
		{sql: "SELECT id FROM t WHERE id IN ($1)", col: "id", n: 1,
			rewrite: "SELECT id, id AS \"sqlflight.key\" FROM t WHERE id = ANY($1::int4[])"},
		// $1 is used twice: the other condition keys the batch.
		{sql: "SELECT $1::int, id FROM t WHERE a = $1 AND id = $2", col: "id", n: 2,
			rewrite: "SELECT $1::int, id, id AS \"sqlflight.key\" FROM t WHERE a = $1 AND id = ANY($2::int4[])"},
		{sql: "SELECT $1::int, id FROM t WHERE a = $1", why: "no condition compares a column with one value"},
		{sql: "SELECT id FROM t WHERE id IN ($1, $2)", why: "no condition compares a column with one value"},
		{sql: "SELECT id FROM t", why: "no condition compares a column with one value"},
		{sql: "SELECT count(*) FROM t WHERE id = $1", why: "aggregate count"},
		{sql: "SELECT DISTINCT v FROM t WHERE id = $1", why: "DISTINCT"},
		{sql: "SELECT v FROM t WHERE id = $1 LIMIT 1", why: "LIMIT"},
		{sql: "SELECT v FROM t WHERE id = $1 OFFSET 1", why: "OFFSET"},
		{sql: "SELECT v FROM t WHERE id = $1 FETCH FIRST 1 ROW ONLY", why: "FETCH"},
		{sql: "SELECT v FROM t WHERE id = $1 FOR UPDATE", why: "FOR (a locking clause)"},
		{sql: "SELECT v, row_number() OVER () FROM t WHERE id = $1", why: "aggregate row_number"},
		{sql: "SELECT v, x OVER w FROM t WHERE id = $1", why: "window function"},
		{sql: "SELECT v FROM t WHERE id = $1 GROUP BY v", why: "GROUP BY"},
		{sql: "SELECT v FROM t WHERE id = $1 UNION SELECT v FROM t", why: "not a single-table SELECT (UNION)"},
		{sql: "SELECT v FROM t JOIN u ON u.id = t.id WHERE t.id = $1", why: "not a single-table SELECT (JOIN)"},
		{sql: "SELECT v FROM t, u WHERE t.id = $1", why: "not a single-table SELECT whose WHERE is a conjunction of equalities"},
		{sql: "SELECT v FROM t WHERE id = $1 OR id = $2", why: "not a single-table SELECT whose WHERE is a conjunction of equalities"},
		{sql: "SELECT v FROM t WHERE id = (SELECT 1)", why: "not a single-table SELECT whose WHERE is a conjunction of equalities"},
		{sql: "SELECT v FROM t WHERE id = $1; SELECT 1", why: "several statements"},
		{sql: "UPDATE t SET v = 1 WHERE id = $1", why: "not a SELECT"},
	} {
		f, why := BatchOf(c.sql, false)
		if c.why != "" {
			if f != nil || why != c.why {
				t.Errorf("%s: got %v %q, want no batch: %q", c.sql, f, why, c.why)
			}
			continue
		}
		if f == nil {
			t.Errorf("%s: no batch: %s", c.sql, why)
			continue
		}
		k := f.Keys[len(f.Keys)-1]
		if k.Column != c.col {
			t.Errorf("%s: key %q, want %q", c.sql, k.Column, c.col)
		}
		if got := f.Rewrite(c.sql, k, c.n, "int4"); got != c.rewrite {
			t.Errorf("%s:\n got %s\nwant %s", c.sql, got, c.rewrite)
		}
	}
}

func TestBatchOfValueSpans(t *testing.T) {
	sql := "SELECT v FROM t WHERE a = 'x' AND id = -5 AND b = $1"
	f, why := BatchOf(sql, false)
	if f == nil {
		t.Fatal(why)
	}
	var got []string
	for _, k := range f.Keys {
		got = append(got, k.Column+":"+sql[k.Val[0]:k.Val[1]])
	}
	want := []string{"a:'x'", "id:- 5", "b:$1"}
	if len(got) != len(want) {
		t.Fatalf("keys %q, want %q", got, want)
	}
	for i := range got {
		if got[i] != want[i] && !(i == 1 && got[i] == "id:-5") {
			t.Errorf("key %d: %q, want %q", i, got[i], want[i])
		}
	}
}
