package sqlscan

import (
	"slices"
	"strings"
	"testing"
)

// fuzzSeeds are real-looking queries covering the lexer's and classifier's corners.
var fuzzSeeds = []string{
	"SELECT * FROM products WHERE id = $1",
	"/* sqlflight: soft=30s hard=5m */ SELECT p.id, p.name FROM public.products p JOIN prices pr ON pr.product_id = p.id WHERE p.id = ANY($1::int[]) ORDER BY p.name LIMIT 10",
	"-- sqlflight: coalesce\nSELECT count(*) FROM orders WHERE created_at > now() - interval '1 day'",
	"WITH RECURSIVE tree(id, parent) AS (SELECT id, parent FROM nodes WHERE parent IS NULL UNION ALL SELECT n.id, n.parent FROM nodes n JOIN tree t ON n.parent = t.id) SELECT * FROM tree",
	"WITH d AS (DELETE FROM t WHERE x RETURNING *) INSERT INTO archive SELECT * FROM d",
	"SELECT $fn$ DELETE FROM t; $fn$, $$;$$, E'it\\'s; DROP TABLE x', U&'\\0041', B'101', X'ff', N'x'",
	"SELECT 'a'\n  -- c\n  'b', E'x'\n'\\' ; DELETE FROM t; --'",
	"SELECT /* a /* nested */ b */ 1 -- trailing",
	"SELECT ARRAY[1,2]::int[], '{a,b}'::text[], x::numeric(10,2), CAST(y AS varchar(3)) FROM t",
	"SELECT a FROM s.\"Weird Name\" w JOIN public.b ON w.id = b.id LEFT JOIN LATERAL (SELECT * FROM c WHERE c.a = w.a) l ON true",
	"BEGIN; INSERT INTO t VALUES (1) ON CONFLICT (id) DO UPDATE SET a = excluded.a; COMMIT",
	"UPDATE t SET a = u.a FROM u WHERE t.id = u.id RETURNING t.*",
	"MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN UPDATE SET a = s.a WHEN NOT MATCHED THEN INSERT (id) VALUES (s.id)",
	"SELECT * FROM t FOR NO KEY UPDATE SKIP LOCKED",
	"SELECT nextval('public.seq'), pg_advisory_lock(1)",
	"SELECT * INTO TEMP x FROM t TABLESAMPLE SYSTEM (1)",
	"EXPLAIN (ANALYZE, BUFFERS) DELETE FROM t",
	"COPY (SELECT * FROM t) TO STDOUT",
	"CREATE FUNCTION f() RETURNS int LANGUAGE sql BEGIN ATOMIC SELECT CASE WHEN true THEN 1 END; END; SELECT 1",
	"SELECT U&\"!0061\" UESCAPE '!' FROM U&\"\\0074\"",
	"SELECT substring(a FROM 1 FOR 2), extract(year FROM d), a IS DISTINCT FROM b FROM t",
	"SET LOCAL search_path = x; SHOW search_path; DISCARD ALL",
	"SELECT 'unterminated",
	"SELECT \"unterminated",
	"SELECT $$unterminated",
	"SELECT 1 /* unterminated",
	"SELECT 1\x00",
	"(((SELECT 1)",
	"SELECT 1))",
	"SELECT 1e5, .5, 1.5e-3, 0x1F, 1_000, 1..2, $1a",
	"SELECT * FROM t WHERE a @> '{}' AND b ?| array['x'] AND c <-> d < 5",
	"SELECT set(1), zone(2) FROM t WHERE freeze(3) AND x AT TIME ZONE (y) ORDER BY (a) GROUP BY GROUPING SETS ((a))",
	"UPDATE t SET (a, b) = (1, 2); SELECT * FROM a JOIN (b JOIN c ON true) ON true, join(1)",
	"SELECT 'now'::timestamptz, date 'today', E'n\\x6fw', U&'!006Eow' UESCAPE '!', $$tomorrow$$, 'yester'\n'day'",
	"SELECT x IS OF (int), 'a' LIKE 'b' ESCAPE ('!'), interval '1' day to second(3), x::character varying(3)",
	`SELECT "t"."id", "t"."v" FROM "t" WHERE ("t"."id" = 4) AND (k IN (1, 'a', -2.5e3)) ORDER BY 2 LIMIT 10`,
	"SELECT CASE WHEN a = 1 THEN'x'ELSE'y'END, f(3, 'b'), x=1AND y=2 FROM t GROUP BY 1 HAVING count(*) > 5",
}

func FuzzParse(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	for _, tc := range classCases {
		f.Add(tc.sql)
	}
	f.Add(`SELECT 'a\' , ', nextval($$s$$) -- '`)
	f.Fuzz(func(t *testing.T, sql string) {
		checkParse(t, sql, false)
		checkParse(t, sql, true)
	})
}

// checkParse checks the invariants of one text in one string mode.
func checkParse(t *testing.T, sql string, nonStd bool) {
	parse := Parse
	if nonStd {
		parse = ParseNonStandard
	}
	r := parse(sql)
	n := parse(r.Normalized)
	if n.Normalized != r.Normalized {
		t.Fatalf("not idempotent:\n in: %q\n 1:  %q\n 2:  %q", sql, r.Normalized, n.Normalized)
	}
	// Normalization removes comments (and so annotations) and whitespace only: everything
	// the classifier says must be unchanged.
	if r.Verdict != n.Verdict || r.Reason != n.Reason || r.Kind != n.Kind || r.ReadOnly != n.ReadOnly ||
		r.TablesKnown != n.TablesKnown || r.Params != n.Params || r.Err != n.Err || r.TimeLiteral != n.TimeLiteral ||
		!slices.Equal(r.Tables, n.Tables) || !slices.Equal(r.Writes, n.Writes) ||
		!slices.Equal(r.Functions, n.Functions) || !slices.Equal(r.Unknown, n.Unknown) ||
		len(r.Statements) != len(n.Statements) {
		t.Fatalf("classification changed by normalization:\n in:   %q\n norm: %q\n %+v\n %+v", sql, r.Normalized, r, n)
	}
	for i := range r.Statements {
		a, b := r.Statements[i], n.Statements[i]
		if a.Kind != b.Kind || a.Tx != b.Tx || a.Chain != b.Chain || a.Taints != b.Taints ||
			a.TempObjects != b.TempObjects || a.ClearsTaint != b.ClearsTaint || a.Verdict != b.Verdict {
			t.Fatalf("statement %d changed by normalization:\n in: %q\n %+v\n %+v", i, sql, a, b)
		}
	}
	// Invariants.
	if w := hiddenWrite(sql, nonStd); w != "" && r.Verdict != Never {
		t.Fatalf("verdict %v but the text contains %s: %q", r.Verdict, w, sql)
	}
	if r.Verdict != Never && (!r.ReadOnly || r.Err != "" || len(r.Statements) != 1 || r.Kind != KindSelect) {
		t.Fatalf("shareable verdict %v for %q: %+v", r.Verdict, sql, r)
	}
	if r.Verdict == Shareable && (len(r.Unknown) > 0 || len(r.Writes) > 0 || !r.TablesKnown) {
		t.Fatalf("Shareable with unknown functions or writes: %q %+v", sql, r)
	}
	for _, st := range r.Statements {
		if st.TempObjects && !st.Taints {
			t.Fatalf("temporary objects without a session change: %q %+v", sql, st)
		}
	}
	if len(r.Unknown) > 0 && r.TablesKnown {
		t.Fatalf("unknown functions with TablesKnown: %q", sql)
	}
	for _, w := range r.Writes {
		if !slices.Contains(r.Tables, w) {
			t.Fatalf("write %q not in Tables %q", w, r.Tables)
		}
	}
	if r.TimeLiteral && r.Verdict == Shareable {
		t.Fatalf("Shareable with a time literal: %q", sql)
	}
	checkShape(t, sql, r, n, parse)
}

// checkShape checks the invariants of r's shape: the normalized text has
// the same; nothing replaced means the normalized text itself; and the
// shape, read as a statement, is the text's with parameters for its
// replaced constants (same kinds, relations and functions).
func checkShape(t *testing.T, sql string, r, n *Result, parse func(string) *Result) {
	if r.ShapeKey != n.ShapeKey || r.Shape != n.Shape {
		t.Fatalf("shape changed by normalization:\n in: %q\n %q\n %q", sql, r.ShapeKey, n.ShapeKey)
	}
	if r.ShapeKey == r.Normalized || (r.ShapeKey != "" && r.ShapeKey[0] == 0) {
		if r.Shape != r.Normalized {
			t.Fatalf("shape %q of a text with nothing replaced: %q", r.Shape, sql)
		}
		return
	}
	classes, ok := strings.CutPrefix(r.ShapeKey, r.Shape+"\x00")
	if !ok || classes == "" || strings.Trim(classes, "ibns") != "" || r.Err != "" {
		t.Fatalf("shape key %q of %q", r.ShapeKey, sql)
	}
	s := parse(r.Shape)
	if s.Normalized != r.Shape || s.ShapeKey != r.Shape || s.Params != r.Params+len(classes) ||
		s.Kind != r.Kind || s.Verdict != r.Verdict || s.ReadOnly != r.ReadOnly || s.TablesKnown != r.TablesKnown ||
		s.TimeLiteral != r.TimeLiteral || !slices.Equal(s.Tables, r.Tables) || !slices.Equal(s.Writes, r.Writes) ||
		!slices.Equal(s.Functions, r.Functions) || !slices.Equal(s.Unknown, r.Unknown) || len(s.Statements) != len(r.Statements) {
		t.Fatalf("the shape reads as another statement:\n in:    %q\n shape: %q\n %+v\n %+v", sql, r.ShapeKey, r, s)
	}
}

// hiddenWrite is a safety oracle independent of the walker: it scans the raw tokens for
// patterns that must make a text Never (DELETE FROM, INSERT INTO, MERGE INTO, UPDATE name,
// INTO, locking FOR …, TABLESAMPLE, a call of a Never function) and returns the first one.
// The walker skips tokens it recognised (aliases, CTE names, targets); this catches a walker
// bug that would skip a real write.
func hiddenWrite(sql string, nonStd bool) string {
	a := &analyzer{}
	a.lx.nonStd = nonStd
	a.lx.run(sql)
	a.src, a.toks = sql, a.lx.toks
	a.match = make([]int, len(a.toks))
	a.split()
	toks := a.toks
	kw := func(j int) kwID {
		if j < 0 || j >= len(toks) || toks[j].kind != tIdent || (j > 0 && toks[j-1].kind == tDot) {
			return kwNone
		}
		return toks[j].kw
	}
	relName := func(j int) bool {
		if kw(j) == kwOnly {
			j++
		}
		return j < len(toks) && (toks[j].kind == tQIdent || (toks[j].kind == tIdent && toks[j].kwf&kfNotRel == 0))
	}
	for j := range toks {
		switch kw(j) {
		case kwDelete:
			if kw(j+1) == kwFrom {
				return "DELETE FROM"
			}
		case kwInsert, kwMerge:
			if kw(j+1) == kwInto {
				return "INSERT/MERGE INTO"
			}
		case kwUpdate:
			switch kw(j - 1) {
			case kwFor, kwKey, kwThen, kwDo, kwOn:
			default:
				if relName(j + 1) {
					return "UPDATE name"
				}
			}
		case kwInto:
			return "INTO"
		case kwTablesample:
			if j+1 >= len(toks) || toks[j+1].kind != tLParen { // tablesample(…) is a call
				return "TABLESAMPLE"
			}
		case kwFor:
			switch kw(j + 1) {
			case kwUpdate, kwShare:
				return "FOR UPDATE/SHARE"
			case kwNo:
				if kw(j+2) == kwKey && kw(j+3) == kwUpdate {
					return "FOR NO KEY UPDATE"
				}
			case kwKey:
				if kw(j+2) == kwShare {
					return "FOR KEY SHARE"
				}
			}
		}
		if isName(toks[j].kind) && j+1 < len(toks) && toks[j+1].kind == tLParen {
			if m := a.match[j+1]; m+1 < len(toks) && kw(m+1) == kwAs && kw(j-1) != kwAs {
				continue // WITH name (columns) AS (…): a WITH query named like a function
			}
			if lookupFunc(a.name(j)).class == fnNever {
				return "calls " + a.name(j)
			}
		}
	}
	return ""
}

func TestHiddenWriteOracle(t *testing.T) {
	for _, tc := range classCases {
		r := Parse(tc.sql)
		if w := hiddenWrite(tc.sql, false); w != "" && r.Verdict != Never {
			t.Errorf("%q: verdict %v but the text contains %s", tc.sql, r.Verdict, w)
		}
	}
}
