package sqlscan

import (
	"fmt"
	"strings"
	"testing"
	"unsafe"
)

// shapeOf returns the shape of sql and its placeholders' classes.
func shapeOf(sql string) (shape, classes string) {
	r := Parse(sql)
	if r.ShapeKey == r.Normalized {
		return r.Shape, ""
	}
	return r.Shape, r.ShapeKey[len(r.Shape)+1:]
}

func TestShape(t *testing.T) {
	for _, c := range []struct{ sql, shape, classes string }{
		// Numbers and strings compared, listed, passed as values.
		{`SELECT "t"."id", "t"."v" FROM "t" WHERE ("t"."id" = 4)`, `SELECT "t"."id", "t"."v" FROM "t" WHERE ("t"."id" = $1)`, "i"},
		{`SELECT * FROM t WHERE name = 'x' AND k <> 2 AND a < 1 AND b > 1 AND c <= 1 AND d >= 1 AND e != 1`,
			`SELECT * FROM t WHERE name = $1 AND k <> $2 AND a < $3 AND b > $4 AND c <= $5 AND d >= $6 AND e != $7`, "siiiiii"},
		{`SELECT * FROM t WHERE id IN (1, 2, 3)`, `SELECT * FROM t WHERE id IN ($1, $2, $3)`, "iii"},
		{`SELECT * FROM t WHERE k BETWEEN 1.5 AND 2e3`, `SELECT * FROM t WHERE k BETWEEN $1 AND $2`, "nn"},
		{`SELECT * FROM t WHERE n LIKE 'a%' OR n ILIKE 'b%' ESCAPE '!'`, `SELECT * FROM t WHERE n LIKE $1 OR n ILIKE $2 ESCAPE '!'`, "ss"},
		{`SELECT * FROM (VALUES (1, 'a'), (2, 'b')) v(k, n)`, `SELECT * FROM (VALUES ($1, $2), ($3, $4)) v(k, n)`, "isis"},
		{`SELECT lower('A'), coalesce(x, 0), f(k => 3) FROM t`, `SELECT lower($1), coalesce(x, $2), f(k => $3) FROM t`, "sii"},
		{`SELECT * FROM t WHERE doc->>'k' = 'v' AND a[1] = ARRAY['x', 'y']`, `SELECT * FROM t WHERE doc->>$1 = $2 AND a[$3] = ARRAY[$4, $5]`, "ssiss"},
		{`SELECT CASE WHEN a = 1 THEN 'y' ELSE 'n' END FROM t LIMIT 10 OFFSET 20`, `SELECT CASE WHEN a = $1 THEN $2 ELSE $3 END FROM t LIMIT $4 OFFSET $5`, "issii"},
		{`SELECT 1, 'a' FROM t UNION SELECT 2, 'b'`, `SELECT $1, $2 FROM t UNION SELECT $3, $4`, "isis"},
		{`SELECT * FROM t WHERE a = 1 GROUP BY a HAVING count(*) > 5 ORDER BY a`, `SELECT * FROM t WHERE a = $1 GROUP BY a HAVING count(*) > $2 ORDER BY a`, "ii"},
		{`WITH c AS (SELECT a FROM t WHERE k = 1) SELECT * FROM c WHERE a = 2`, `WITH c AS (SELECT a FROM t WHERE k = $1) SELECT * FROM c WHERE a = $2`, "ii"},
		{`WITH c AS NOT MATERIALIZED (SELECT * FROM t WHERE k = 1) SELECT * FROM c`, `WITH c AS NOT MATERIALIZED (SELECT * FROM t WHERE k = $1) SELECT * FROM c`, "i"},
		{`INSERT INTO t (a, b) VALUES (1, 'x') RETURNING a`, `INSERT INTO t (a, b) VALUES ($1, $2) RETURNING a`, "is"},
		{`UPDATE t SET v = 'x' WHERE id = 5`, `UPDATE t SET v = $1 WHERE id = $2`, "si"},
		{`DELETE FROM t WHERE id = 5`, `DELETE FROM t WHERE id = $1`, "i"},
		// Negative numbers: the sign stays an operator.
		{`SELECT * FROM t WHERE id = -4`, `SELECT * FROM t WHERE id = -$1`, "i"},
		{`SELECT * FROM t WHERE id = - 4 AND k = 3-1`, `SELECT * FROM t WHERE id = - $1 AND k = $2-$3`, "iii"},
		// The type the server gives a number is its class.
		{`SELECT * FROM t WHERE id = 2147483647 AND k = 2147483649 AND n = 9223372036854775807`,
			`SELECT * FROM t WHERE id = $1 AND k = $2 AND n = $3`, "ibb"},
		{`SELECT * FROM t WHERE id = 99999999999999999999 AND k = .5 AND n = 5. AND m = 1E+5 AND o = 007`,
			`SELECT * FROM t WHERE id = $1 AND k = $2 AND n = $3 AND m = $4 AND o = $5`, "nnnni"},
		// … and a number whose type depends on its sign stays.
		{`SELECT * FROM t WHERE id = -2147483648 AND k = 9223372036854775808`, `SELECT * FROM t WHERE id = -2147483648 AND k = 9223372036854775808`, ""},
		// Parameters keep their numbers; placeholders come after them.
		{`SELECT * FROM t WHERE a = $2 AND b = 5 AND c = $1`, `SELECT * FROM t WHERE a = $2 AND b = $3 AND c = $1`, "i"},
		// Comments and whitespace are gone, as in Normalized.
		{"/* sqlflight: ttl=1m */ SELECT *\n  FROM t -- x\n WHERE id =   4", `SELECT * FROM t WHERE id = $1`, "i"},
		// Identifiers, keywords and quoted identifiers are untouched.
		{`SELECT id1, "2", "it's" FROM t3 WHERE x4 = 1 AND "5" = 'a'`, `SELECT id1, "2", "it's" FROM t3 WHERE x4 = $1 AND "5" = $2`, "is"},
		{`SELECT * FROM t WHERE flag = TRUE AND v IS NULL AND w = FALSE`, `SELECT * FROM t WHERE flag = TRUE AND v IS NULL AND w = FALSE`, ""},
		// A placeholder never joins a word.
		{`SELECT * FROM t WHERE x=1AND y='a'OR z=2`, `SELECT * FROM t WHERE x=$1 AND y=$2 OR z=$3`, "isi"},
		{`SELECT CASE WHEN a THEN'x'ELSE'y'END FROM t`, `SELECT CASE WHEN a THEN $1 ELSE $2 END FROM t`, "ss"},
	} {
		shape, classes := shapeOf(c.sql)
		if shape != c.shape || classes != c.classes {
			t.Errorf("%s:\n shape %q %q\n want  %q %q", c.sql, shape, classes, c.shape, c.classes)
		}
	}
}

// TestShapeKeeps: constants whose text can change what the server
// concludes, or that the scanner is not sure of, stay as they are.
func TestShapeKeeps(t *testing.T) {
	for _, sql := range []string{
		// Casts and typed constants.
		`SELECT 'x'::regclass, 5::bigint, CAST('1' AS int), CAST(2 AS int), '1 day'::interval FROM t`,
		`SELECT * FROM t WHERE d = date '2024-01-01' AND i = interval '1 day' AND s = timestamp with time zone '2024-01-01'`,
		`SELECT * FROM t WHERE k = int4 '5' AND m = "MyType" 'x' AND n = pg_catalog.date '2024-01-01' AND o = varchar(3) 'abc'`,
		`SELECT * FROM t WHERE n = 'x' COLLATE "C" AND z = ts AT TIME ZONE 'UTC'`,
		`SELECT 5 AS five, 'a' AS a`,
		// Clock-relative words.
		`SELECT * FROM t WHERE d = 'now' AND e = 'today 10:00' AND f = 'Tomorrow' AND g > 'yesterday'`,
		`SELECT jsonb_populate_record(NULL::t, '{"d": "today"}')`,
		// Other kinds of string, and numbers of other bases.
		`SELECT * FROM t WHERE a = E'x' AND b = B'101' AND c = X'1F' AND d = U&'x' AND e = N'x' AND f = $$x$$ AND g = $q$x$q$`,
		`SELECT * FROM t WHERE a = 'x'
'y'`,
		`SELECT * FROM t WHERE a = 0x1F AND b = 0o17 AND c = 0b101 AND d = 1_000`,
		// Positional references, DISTINCT ON, type modifiers, sequences.
		`SELECT a, b FROM t ORDER BY 2, 1`,
		`SELECT a, count(*) FROM t GROUP BY 1 ORDER BY 2 DESC, a`,
		`SELECT a, rank() OVER (PARTITION BY 1 ORDER BY 2) FROM t`,
		`SELECT DISTINCT ON (1) a, b FROM t`,
		`SELECT string_agg(a, b ORDER BY 1) FROM t`,
		`SELECT x::numeric(10, 2), y::varchar(3), CAST(z AS character varying(4)), w::s.mytype(5), v::"T"(6), u::int[3] FROM t`,
		`SELECT timestamp(3) with time zone 'x', numeric(1)`,
		`SELECT nextval('s'), currval('s'), setval('s', 5)`,
		`SELECT "nextval"('s'), pg_catalog."setval"('s', $1), U&"\006Eextval"('s')`,
		// Places not listed.
		`SELECT * FROM t WHERE a IS DISTINCT FROM 5 AND b SIMILAR TO 'x' AND arr[1:2] = c AND x = ANY ('{1}'::int[])`,
		`SELECT * FROM t LIMIT ALL OFFSET 5 ROWS FETCH FIRST 3 ROWS ONLY`,
		`SELECT a FROM t WHERE a = 1 'b'`,
	} {
		if r := Parse(sql); r.ShapeKey != r.Normalized {
			t.Errorf("%s: shape %q replaced a constant", sql, r.ShapeKey)
		}
	}
}

func TestShapeKeepsDDLAndOthers(t *testing.T) {
	for _, sql := range []string{
		`CREATE TABLE t (a varchar(10) DEFAULT 'x', b int CHECK (b > 0))`,
		`SET search_path = 'x'`,
		`EXPLAIN SELECT * FROM t WHERE id = 1`,
		`SELECT * FROM t WHERE id = 'unterminated`,
		`SELECT * FROM t WHERE id = 1 /* unterminated`,
		`SHOW work_mem`,
		`COPY t FROM STDIN WITH (FORMAT 'csv')`,
	} {
		r := Parse(sql)
		if r.Shape != r.Normalized || r.ShapeKey != r.Normalized {
			t.Errorf("%s: shape %q key %q, want the normalized text", sql, r.Shape, r.ShapeKey)
		}
	}
}

// TestShapeKeysGroupValues: texts that differ only in constants of the same
// type share a key; any other difference, a real parameter for a constant
// included, makes another.
func TestShapeKeysGroupValues(t *testing.T) {
	key := func(sql string) string { return Parse(sql).ShapeKey }
	same := [][]string{
		{`SELECT id, v FROM t WHERE (id = 4)`, `SELECT id, v FROM t WHERE (id = 5)`, `SELECT id, v FROM t WHERE (id = 2147483647)`, "SELECT id, v\nFROM t WHERE (id = 0)"},
		{`SELECT * FROM t WHERE id = -4`, `SELECT * FROM t WHERE id = -5`},
		{`SELECT * FROM t WHERE n = 'a'`, `SELECT * FROM t WHERE n = 'it''s'`, `SELECT * FROM t WHERE n = ''`},
		{`SELECT * FROM t WHERE k IN (1, 2)`, `SELECT * FROM t WHERE k IN (3, 4)`},
		{`SELECT * FROM t WHERE x = 1.5`, `SELECT * FROM t WHERE x = 2e9`},
	}
	for _, texts := range same {
		for _, sql := range texts[1:] {
			if key(sql) != key(texts[0]) {
				t.Errorf("%q and %q have two shapes: %q, %q", texts[0], sql, key(texts[0]), key(sql))
			}
		}
	}
	differ := [][2]string{
		{`SELECT * FROM t WHERE id = 4`, `SELECT * FROM t WHERE id = $1`},
		{`SELECT * FROM t WHERE id = 4`, `SELECT * FROM t WHERE id = '4'`},
		{`SELECT * FROM t WHERE id = 4`, `SELECT * FROM t WHERE id = 4.0`},
		{`SELECT * FROM t WHERE id = 4`, `SELECT * FROM t WHERE id = 3000000000`},
		{`SELECT * FROM t WHERE id = 4`, `SELECT * FROM t WHERE id = -4`},
		{`SELECT * FROM t WHERE id = 4`, `SELECT * FROM u WHERE id = 4`},
		{`SELECT * FROM t WHERE id = 4`, `SELECT * FROM t WHERE "id" = 4`},
		{`SELECT * FROM t WHERE k IN (1, 2)`, `SELECT * FROM t WHERE k IN (1, 2, 3)`},
		{`SELECT * FROM t WHERE d = 'now'`, `SELECT * FROM t WHERE d = 'x'`},
		{`SELECT * FROM t WHERE d = 'today'`, `SELECT * FROM t WHERE d = 'tomorrow'`},
		{`SELECT a, b FROM t ORDER BY 1`, `SELECT a, b FROM t ORDER BY 2`},
		{`SELECT * FROM t WHERE a = $1 AND b = 5`, `SELECT * FROM t WHERE a = $1 AND b = $2`},
		{`SELECT $1 WHERE 1 = 1`, `SELECT $1 WHERE $2 = 1`},
	}
	for _, d := range differ {
		if key(d[0]) == key(d[1]) {
			t.Errorf("%q and %q share the shape %q", d[0], d[1], key(d[0]))
		}
	}
	// Every literal of a bun-style statement: one shape.
	first := key(`SELECT id, v FROM t WHERE (id = 0)`)
	for n := range 1000 {
		if k := key(fmt.Sprintf(`SELECT id, v FROM t WHERE (id = %d)`, n*7919)); k != first {
			t.Fatalf("id = %d: shape %q, want %q", n*7919, k, first)
		}
	}
}

// TestShapeAliasesNormalized: a text with nothing to replace has its
// normalized text as shape and key, the same string.
func TestShapeAliasesNormalized(t *testing.T) {
	for _, sql := range []string{
		`SELECT * FROM t WHERE id = $1`,
		`  SELECT a FROM t  -- c`,
		`SELECT 'now'::timestamptz`,
		``,
	} {
		r := Parse(sql)
		if r.Shape != r.Normalized || r.ShapeKey != r.Normalized ||
			unsafe.StringData(r.Shape) != unsafe.StringData(r.Normalized) ||
			unsafe.StringData(r.ShapeKey) != unsafe.StringData(r.Normalized) {
			t.Errorf("%q: shape %q key %q do not alias %q", sql, r.Shape, r.ShapeKey, r.Normalized)
		}
	}
	r := Parse(`SELECT * FROM t WHERE id = 5`)
	if unsafe.StringData(r.Shape) != unsafe.StringData(r.ShapeKey) {
		t.Error("the shape is not a part of its key")
	}
}

// TestShapeKeyNeverMeetsAnother: no normalized text holds a NUL byte but
// a text that holds one, whose key starts with it; a shape never does.
func TestShapeKeyNeverMeetsAnother(t *testing.T) {
	shaped := Parse(`SELECT * FROM t WHERE id = 5`)
	crafted := Parse(shaped.ShapeKey)
	if crafted.Err == "" || crafted.ShapeKey == shaped.ShapeKey || crafted.ShapeKey[0] != 0 {
		t.Fatalf("a text holding the key %q has the key %q (error %q)", shaped.ShapeKey, crafted.ShapeKey, crafted.Err)
	}
	if shaped.ShapeKey[0] == 0 {
		t.Fatal("a shape key starts with a NUL byte")
	}
}

func TestShapeLongTextsAreTheirOwn(t *testing.T) {
	long := `SELECT * FROM t WHERE id = 5 AND note = '` + strings.Repeat("x", shapeMaxSQL) + `'`
	r := Parse(long)
	if r.ShapeKey != r.Normalized {
		t.Errorf("a text of %d bytes has a shape", len(long))
	}
	deep := `SELECT * FROM t WHERE id = ` + strings.Repeat("(", shapeMaxDepth+1) + "1" + strings.Repeat(")", shapeMaxDepth+1)
	if r := Parse(deep); r.ShapeKey != r.Normalized {
		t.Errorf("a text of %d parentheses has a shape", shapeMaxDepth+1)
	}
}

func TestShapeNonStandard(t *testing.T) {
	// With backslash escapes, 'n\ow' is 'now': it stays, as 'n\ow' does
	// not with standard strings (it is not a time word there).
	if r := ParseNonStandard(`SELECT * FROM t WHERE d = 'n\ow'`); r.ShapeKey != r.Normalized {
		t.Errorf("non-standard: %q replaced", r.Shape)
	}
	if r := Parse(`SELECT * FROM t WHERE d = 'n\ow'`); r.Shape != `SELECT * FROM t WHERE d = $1` {
		t.Errorf("standard: shape %q", r.Shape)
	}
	if r := ParseNonStandard(`SELECT * FROM t WHERE d = 'x'`); r.Shape != `SELECT * FROM t WHERE d = $1` {
		t.Errorf("non-standard: shape %q", r.Shape)
	}
}

// TestShapeKeepsClassification: the flags that depend on a literal's
// content are the text's own.
func TestShapeKeepsClassification(t *testing.T) {
	a, b := Parse(`SELECT * FROM t WHERE d = 'x'`), Parse(`SELECT * FROM t WHERE d = 'now'`)
	if a.TimeLiteral || !b.TimeLiteral || a.ShapeKey == b.ShapeKey {
		t.Errorf("time literal %v %v, keys %q %q", a.TimeLiteral, b.TimeLiteral, a.ShapeKey, b.ShapeKey)
	}
}

func BenchmarkParseShaped(b *testing.B) {
	sql := `SELECT "t"."id", "t"."name", "t"."price" FROM "items" AS "t" WHERE ("t"."tenant_id" = 42) AND ("t"."status" = 'active') ORDER BY "t"."id" LIMIT 20`
	b.ReportAllocs()
	for b.Loop() {
		Parse(sql)
	}
}
