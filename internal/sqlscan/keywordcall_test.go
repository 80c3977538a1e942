package sqlscan

import (
	"slices"
	"testing"
)

// TestKeywordCalls: every unreserved and type-or-function-name keyword names a function when
// followed by '(' in an expression (Postgres accepts CREATE FUNCTION set(…) and SELECT set(1)),
// so the scanner must record it as a call; where the same words are syntax it must not.
func TestKeywordCalls(t *testing.T) {
	calls := []struct {
		sql  string
		want []string // names that must be in Unknown
	}{
		{"SELECT set('t')", []string{"set"}},
		{"SELECT SET(1)", []string{"set"}},
		{"SELECT x FROM t WHERE zone(1) > 0", []string{"zone"}},
		{"SELECT public.set(1)", []string{"public.set"}},
		{"SELECT pg_temp.zone(1), s.join(2), s.select(3)", []string{"pg_temp.zone", "s.join", "s.select"}},
		{"SELECT freeze(1), verbose(2)", []string{"freeze", "verbose"}},
		{"SELECT columns(1), of(2), by(3)", []string{"by", "columns", "of"}},
		{"SELECT escape(1), passing(2), second(3), varying(4), sets(5)", []string{"escape", "passing", "second", "sets", "varying"}},
		{"SELECT join(1), inner(2), cross(3), natural(4), outer(5), full(6)", []string{"cross", "full", "inner", "join", "natural", "outer"}},
		{"SELECT is(1), isnull(2), notnull(3), similar(4), authorization(5), collation(6), binary(7), concurrently(8)",
			[]string{"authorization", "binary", "collation", "concurrently", "is", "isnull", "notnull", "similar"}},
		{"SELECT conflict(1), materialized(2), repeatable(3), first(4), next(5), over(6), filter(7)",
			[]string{"conflict", "filter", "first", "materialized", "next", "over", "repeatable"}},
		{"SELECT ordinality(1), rows(2), partition(3), key(4), share(5), recursive(6), uescape(7)",
			[]string{"key", "ordinality", "partition", "recursive", "rows", "share", "uescape"}},
		{"SELECT * FROM freeze(1)", []string{"freeze"}},
		{"SELECT tablesample(1) FROM t", []string{"tablesample"}},
		{"SELECT * FROM tablesample(1)", []string{"tablesample"}},
		{"SELECT * FROM set(1) AS s(a)", []string{"set"}},
		{"SELECT * FROM t JOIN LATERAL join(t.a) j ON true", []string{"join"}},
		{"SELECT * FROM t, verbose(t.a) v", []string{"verbose"}},
		{"SELECT * FROM t WHERE a = 1 AND set(a)", []string{"set"}},
		{"SELECT a FROM t ORDER BY set(a)", []string{"set"}},
		{"SELECT a FROM t ORDER BY by(a)", []string{"by"}},
		{"SELECT a FROM t GROUP BY zone(a)", []string{"zone"}},
		{"SELECT a FROM t WHERE a LIKE 'x' ESCAPE escape(1)", []string{"escape"}},
		{"SELECT * FROM t WHERE NOT of(1)", []string{"of"}},
		{"SELECT * FROM t WHERE x IS NOT NULL AND of(x)", []string{"of"}},
		{"SELECT 1 FROM t FETCH FIRST join(1) ROWS ONLY", []string{"join"}},
		{"SELECT 1 FROM t OFFSET second(1)", []string{"second"}},
		{"SELECT x::int + second(1), interval '1' day + second(2) FROM t", []string{"second"}},
		{"SELECT json_value(x, '$' DEFAULT escape(1) ON ERROR) FROM t", []string{"escape"}},
		{"SELECT a FROM t WHERE a = ANY(ARRAY[1]) OR passing(a) OR columns(a)", []string{"columns", "passing"}},
		{"WITH a AS (SELECT verbose(1)) SELECT * FROM a", []string{"verbose"}},
		{"SELECT CASE WHEN true THEN join(1) ELSE zone(2) END", []string{"join", "zone"}},
		{"SELECT (set(1)), [set(2)]", []string{"set"}},
		{"SELECT ARRAY[varying(1)], f(by(2))", []string{"by", "f", "varying"}},
		{"SELECT 1 FROM a JOIN b ON join(a.x) JOIN c ON true", []string{"join"}},
		{"SELECT 1 FROM a, b WHERE a.x = b.x AND join(1)", []string{"join"}},
		{"SELECT count(*) FILTER (WHERE set(x)) OVER (PARTITION BY zone(y)) FROM t", []string{"set", "zone"}},
		{"SELECT xmlexists('//x' PASSING BY REF of('<x/>'))", []string{"of"}},
		{"SELECT a FROM t ORDER BY value(a), ref(b)", []string{"ref", "value"}},
		{"UPDATE t SET a = set(1)", []string{"set"}},
		{"UPDATE t SET a = 1 WHERE set(a)", []string{"set"}},
		{"INSERT INTO t VALUES (set(1))", []string{"set"}},
		{"SELECT set(1) FROM t FOR UPDATE", []string{"set"}},
	}
	for _, tc := range calls {
		r := Parse(tc.sql)
		for _, n := range tc.want {
			if !slices.Contains(r.Unknown, n) {
				t.Errorf("%s: Unknown %q lacks %q", tc.sql, r.Unknown, n)
			}
		}
		if r.Verdict > OptIn || r.TablesKnown {
			t.Errorf("%s: verdict %v, TablesKnown %v; a call of an unknown function must be OptIn with unknown tables", tc.sql, r.Verdict, r.TablesKnown)
		}
	}
	// substring(…) and overlay(…) with plain argument lists resolve through the search path.
	for _, sql := range []string{"SELECT substring(1)", "SELECT overlay('a', 'b')"} {
		if r := Parse(sql); len(r.Functions) != 1 {
			t.Errorf("%s: Functions %q", sql, r.Functions)
		}
	}

	syntax := []struct {
		sql     string
		kind    Kind
		verdict Verdict
		known   bool // TablesKnown
	}{
		{"UPDATE t SET (a, b) = (1, 2)", KindUpdate, Never, true},
		{"UPDATE ONLY t AS x SET (a) = ROW(1) FROM u WHERE x.id = u.id", KindUpdate, Never, true},
		{"UPDATE t x SET (a, b) = (SELECT 1, 2)", KindUpdate, Never, true},
		{"UPDATE t * SET (a) = (1)", KindUpdate, Never, true},
		{"INSERT INTO t VALUES (1) ON CONFLICT (id) DO UPDATE SET (a, b) = (excluded.a, excluded.b)", KindInsert, Never, true},
		{"MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN UPDATE SET (a) = (s.a)", KindMerge, Never, true},
		{"WITH d AS (UPDATE t SET (a) = (1) RETURNING *) SELECT * FROM d", KindSelect, Never, true},
		{"SELECT x AT TIME ZONE ('UTC'), y AT TIME ZONE (z) FROM t", KindSelect, Shareable, true},
		{"SELECT x::timestamp(3) WITH TIME ZONE FROM t", KindSelect, Shareable, true},
		{"SELECT * FROM t ORDER BY (a), (b) DESC", KindSelect, Shareable, true},
		{"SELECT a, b FROM t GROUP BY (a, b) HAVING (count(*) > 1)", KindSelect, Shareable, true},
		{"SELECT a FROM t GROUP BY GROUPING SETS ((a), (b), ())", KindSelect, Shareable, true},
		{"SELECT rank() OVER (PARTITION BY (a) ORDER BY (b)) FROM t", KindSelect, Shareable, true},
		{"SELECT * FROM t FOR UPDATE OF t", KindSelect, Never, true},
		{"EXPLAIN (VERBOSE) SELECT 1", KindExplain, Never, true},
		{"EXPLAIN VERBOSE (SELECT 1)", KindExplain, Never, true},
		{"VACUUM (FREEZE) t", KindDDL, Never, true},
		{"VACUUM (FREEZE, VERBOSE) t", KindDDL, Never, true},
		{"COPY t FROM STDIN (FORMAT csv)", KindCopy, Never, true},
		{"COPY t TO STDOUT WITH (FORMAT csv, HEADER)", KindCopy, Never, true},
		{"SELECT * FROM json_table('{}'::jsonb, '$' COLUMNS (a int PATH '$.a', NESTED PATH '$.b' COLUMNS (b int)))", KindSelect, Shareable, true},
		{"SELECT * FROM t, json_table(t.doc, '$' AS p PASSING 1 AS x COLUMNS (a int))", KindSelect, Shareable, true},
		{"SELECT * FROM xmltable('/r' PASSING ('<r/>'::xml) COLUMNS a int PATH 'a')", KindSelect, Shareable, true},
		{"SELECT xmlexists('//x' PASSING BY REF ('<x/>'::xml)), xmlexists('//x' PASSING BY VALUE (x)) FROM t", KindSelect, Shareable, true},
		{"INSERT INTO t VALUES (1), (2)", KindInsert, Never, true},
		{"SELECT ROW(1, 2), (1, 2), (VALUES (1))", KindSelect, Shareable, true},
		{"SELECT * FROM unnest(ARRAY[1]) WITH ORDINALITY", KindSelect, Shareable, true},
		{"SELECT x IS OF (int), x IS NOT OF (text) FROM t", KindSelect, Shareable, true},
		{"SELECT 'a' LIKE 'b' ESCAPE ('!'), x SIMILAR TO y ESCAPE (e), x ILIKE $1 ESCAPE ($2) FROM t", KindSelect, Shareable, true},
		{"SELECT x::character varying(3), y::bit varying(5), CAST(z AS national character varying(2)), w::char varying(1) FROM t", KindSelect, Shareable, true},
		{"SELECT interval '1' second(3), interval '1' day to second(3), x::interval second(3), interval '1' minute to second(2) FROM t", KindSelect, Shareable, true},
		{"SELECT * FROM a JOIN (b JOIN c ON b.x = c.x) ON true", KindSelect, Shareable, true},
		{"SELECT * FROM a x JOIN (b) ON true LEFT JOIN (c) ON true RIGHT JOIN (d) ON true", KindSelect, Shareable, true},
		{"SELECT * FROM a NATURAL JOIN (b) CROSS JOIN (c) FULL OUTER JOIN (d) ON true INNER JOIN (e) ON true", KindSelect, Shareable, true},
		{"SELECT * FROM a JOIN b ON true JOIN (c) ON a.x = c.x JOIN (d) USING (x) JOIN (e) ON 1 = 1", KindSelect, Shareable, true},
		{"SELECT * FROM a * JOIN (b) ON true", KindSelect, Shareable, true},
		{"SELECT * FROM a JOIN b ON b.x ISNULL JOIN (c) ON $1 JOIN (d) ON 'x' = d.y", KindSelect, Shareable, true},
		{"SELECT * FROM (SELECT 1) s JOIN (SELECT 2) u ON true", KindSelect, Shareable, true},
		{"SELECT OPERATOR(pg_catalog.-) 1, 2 OPERATOR(pg_catalog.+) (3)", KindSelect, Shareable, true},
		{"WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT n+1 FROM t) SEARCH DEPTH FIRST BY n SET ord SELECT * FROM t", KindSelect, Shareable, true},
		{"SELECT substring(x FROM 1 FOR 2), overlay(x PLACING 'a' FROM 1) FROM t", KindSelect, Shareable, true},
		{"SELECT x FROM t WHERE a = left(b, 1) AND b LIKE (c)", KindSelect, Shareable, true},
	}
	for _, tc := range syntax {
		r := Parse(tc.sql)
		if len(r.Unknown) > 0 || r.Kind != tc.kind || r.Verdict != tc.verdict || r.TablesKnown != tc.known {
			t.Errorf("%s: Unknown %q, %v %v (%s) known %v; want no unknown call, %v %v known %v",
				tc.sql, r.Unknown, r.Kind, r.Verdict, r.Reason, r.TablesKnown, tc.kind, tc.verdict, tc.known)
		}
	}
}
