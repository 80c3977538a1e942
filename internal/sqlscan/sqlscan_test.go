package sqlscan

import (
	"slices"
	"strings"
	"testing"

	"github.com/sqlflight/sqlflight/internal/leaktest"
)

func TestMain(m *testing.M) {
	leaktest.VerifyTestMain(m)
}

// classCase is one expected classification of a single-statement (or empty) text.
type classCase struct {
	sql     string
	kind    Kind
	verdict Verdict
	ro      bool     // Result.ReadOnly
	tables  []string // Result.Tables (nil: none)
	writes  []string // Result.Writes (nil: none)
	opaque  bool     // Result.TablesKnown == false
	reason  string   // a substring of Result.Reason ("" when Shareable)
}

var classCases = []classCase{
	// ---- shareable SELECT kinds ----
	{sql: "SELECT 1", kind: KindSelect, verdict: Shareable, ro: true},
	{sql: "select * from t", kind: KindSelect, verdict: Shareable, ro: true, tables: []string{"t"}},
	{sql: "SeLeCt * FrOm T", kind: KindSelect, verdict: Shareable, ro: true, tables: []string{"t"}},
	{sql: "  \n\tSELECT 1;  ", kind: KindSelect, verdict: Shareable, ro: true},
	{sql: "SELECT 1 /* ; DELETE FROM t */", kind: KindSelect, verdict: Shareable, ro: true},
	{sql: "SELECT 1 -- FOR UPDATE\n", kind: KindSelect, verdict: Shareable, ro: true},
	{sql: "SELECT 1 /* FOR UPDATE */", kind: KindSelect, verdict: Shareable, ro: true},
	{sql: "SELECT 'DELETE FROM t'", kind: KindSelect, verdict: Shareable, ro: true},
	{sql: "SELECT '/* sqlflight: ttl=5s */'", kind: KindSelect, verdict: Shareable, ro: true},
	{sql: "SELECT $$ DELETE $$", kind: KindSelect, verdict: Shareable, ro: true},
	{sql: "SELECT $a$ x $b$ y $a$", kind: KindSelect, verdict: Shareable, ro: true},
	{sql: "SELECT $a$ ; DELETE FROM t; $a$, $$;$$", kind: KindSelect, verdict: Shareable, ro: true},
	{sql: `SELECT E'it\'s; DROP TABLE x'`, kind: KindSelect, verdict: Shareable, ro: true},
	{sql: `SELECT e'\\', 'a\', 'b'`, kind: KindSelect, verdict: Shareable, ro: true},
	{sql: "SELECT /* a /* b; DELETE FROM t */ c */ 1", kind: KindSelect, verdict: Shareable, ro: true},
	{sql: "(SELECT 1) UNION (SELECT 2)", kind: KindSelect, verdict: Shareable, ro: true},
	{sql: "((SELECT a FROM t1)) UNION ALL SELECT b FROM t2", kind: KindSelect, verdict: Shareable, ro: true, tables: []string{"t1", "t2"}},
	{sql: "VALUES (1),(2)", kind: KindSelect, verdict: Shareable, ro: true},
	{sql: "TABLE products", kind: KindSelect, verdict: Shareable, ro: true, tables: []string{"products"}},
	{sql: "SELECT * FROM a UNION TABLE b", kind: KindSelect, verdict: Shareable, ro: true, tables: []string{"a", "b"}},
	{sql: "/* sqlflight: soft=30s hard=5m */ SELECT * FROM products WHERE id = $1", kind: KindSelect, verdict: Shareable, ro: true, tables: []string{"products"}},
	{sql: `SELECT a FROM s."Weird Name" w JOIN public.b ON w.id = b.id`, kind: KindSelect, verdict: Shareable, ro: true, tables: []string{"Weird Name", "b"}},
	{sql: `SELECT * FROM "Sales"."Order Items"`, kind: KindSelect, verdict: Shareable, ro: true, tables: []string{"Order Items"}},
	{sql: `SELECT * FROM Public.Products`, kind: KindSelect, verdict: Shareable, ro: true, tables: []string{"products"}},
	{sql: `SELECT * FROM "t""x"`, kind: KindSelect, verdict: Shareable, ro: true, tables: []string{`t"x`}},
	{sql: "SELECT * FROM generate_series(1,3)", kind: KindSelect, verdict: Shareable, ro: true},
	{sql: "SELECT * FROM unnest(ARRAY[1,2]) WITH ORDINALITY AS u(x, n)", kind: KindSelect, verdict: Shareable, ro: true},
	{sql: "SELECT * FROM json_each('{}') j, generate_series(1, 2) g(n)", kind: KindSelect, verdict: Shareable, ro: true},
	{sql: "SELECT * FROM json_to_record('{}') AS r(a int, b numeric(10,2), c varchar(3))", kind: KindSelect, verdict: Shareable, ro: true},
	{sql: "SELECT * FROM ROWS FROM (generate_series(1,2), unnest(ARRAY[3])) AS r(a, b)", kind: KindSelect, verdict: Shareable, ro: true},
	{sql: "SELECT substring('abc' FOR 2)", kind: KindSelect, verdict: Shareable, ro: true},
	{sql: "SELECT substring(name FROM 2 FOR 3), extract(year FROM created_at), trim(both 'x' from name), " +
		"overlay(name placing 'x' from 1 for 2), position('a' in name), extract(epoch from now() - created_at) > 0 FROM users",
		kind: KindSelect, verdict: InFlightOnly, ro: true, tables: []string{"users"}, reason: "calls now (time-dependent)"},
	{sql: "SELECT ARRAY[1,2]::int[], '{a,b}'::text[], x::numeric(10,2) FROM t", kind: KindSelect, verdict: Shareable, ro: true, tables: []string{"t"}},
	{sql: "SELECT CAST(x AS varchar(10)), x::character varying(3), x::timestamp(3) with time zone, " +
		"x::pg_catalog.numeric(5,1), CAST(x AS myschema.mytype(3)), interval '1' second(3) FROM t",
		kind: KindSelect, verdict: Shareable, ro: true, tables: []string{"t"}},
	{sql: "SELECT interval '1 day', date '2020-01-01', timestamp '2020-01-01 00:00', time(3) '10:00'", kind: KindSelect, verdict: Shareable, ro: true},
	{sql: "SELECT count(*) FILTER (WHERE a > 1) OVER (PARTITION BY b ORDER BY c), string_agg(a, ',' ORDER BY a) WITHIN GROUP (ORDER BY a) FROM t",
		kind: KindSelect, verdict: Shareable, ro: true, tables: []string{"t"}},
	{sql: "SELECT coalesce(a, 0), nullif(b, 1), greatest(1, 2), least(1, 2), ROW(1, 2), EXISTS (SELECT 1) FROM t", kind: KindSelect, verdict: Shareable, ro: true, tables: []string{"t"}},
	{sql: "SELECT left(name, 2), right(name, 2), lower(name) FROM t WHERE a LIKE 'x%' ESCAPE '!' AND (a, b) OVERLAPS (c, d)", kind: KindSelect, verdict: Shareable, ro: true, tables: []string{"t"}},
	{sql: "SELECT a IS DISTINCT FROM b, c IS NOT DISTINCT FROM d FROM t", kind: KindSelect, verdict: Shareable, ro: true, tables: []string{"t"}},
	{sql: "SELECT DISTINCT FROM t", kind: KindSelect, verdict: Shareable, ro: true, tables: []string{"t"}},
	{sql: "SELECT * FROM a, b AS x, ONLY c, LATERAL (SELECT 1) l, d * WHERE a.id = x.id", kind: KindSelect, verdict: Shareable, ro: true, tables: []string{"a", "b", "c", "d"}},
	{sql: "SELECT * FROM a LEFT OUTER JOIN b ON a.id = b.id NATURAL JOIN c CROSS JOIN d FULL JOIN e USING (id) INNER JOIN f ON true",
		kind: KindSelect, verdict: Shareable, ro: true, tables: []string{"a", "b", "c", "d", "e", "f"}},
	{sql: "SELECT * FROM (a JOIN b ON a.x = b.x) JOIN (SELECT * FROM c) s ON true, ((d))", kind: KindSelect, verdict: Shareable, ro: true, tables: []string{"a", "b", "c", "d"}},
	{sql: "SELECT * FROM t1 JOIN t2 ON CASE WHEN t1.a THEN true END, t3", kind: KindSelect, verdict: Shareable, ro: true, tables: []string{"t1", "t2", "t3"}},
	{sql: "SELECT * FROM t1 JOIN t2 USING (a), t3 WHERE x GROUP BY a, b ORDER BY c, d", kind: KindSelect, verdict: Shareable, ro: true, tables: []string{"t1", "t2", "t3"}},
	{sql: "SELECT * FROM t x(a, b)", kind: KindSelect, verdict: Shareable, ro: true, tables: []string{"t"}},
	{sql: `SELECT * FROM t AS "Alias"("A")`, kind: KindSelect, verdict: Shareable, ro: true, tables: []string{"t"}},
	{sql: `SELECT t.update, t."select", t.delete, t.from FROM t`, kind: KindSelect, verdict: Shareable, ro: true, tables: []string{"t"}},
	{sql: "SELECT update, insert FROM t", kind: KindSelect, verdict: Shareable, ro: true, tables: []string{"t"}},
	{sql: "SELECT EXISTS (SELECT 1 FROM t WHERE a IN (SELECT b FROM u)), x = ANY (SELECT y FROM v)", kind: KindSelect, verdict: Shareable, ro: true, tables: []string{"t", "u", "v"}},
	{sql: "SELECT * FROM t1 WHERE EXISTS (TABLE t2) AND a = ANY (ARRAY(SELECT b FROM t3))", kind: KindSelect, verdict: Shareable, ro: true, tables: []string{"t1", "t2", "t3"}},
	{sql: "SELECT * FROM (SELECT 1) AS s(a), t TABLESAMPLE SYSTEM (1), u", kind: KindSelect, verdict: Never, ro: true, tables: []string{"t", "u"}, reason: "TABLESAMPLE"},
	{sql: "SELECT * FROM ONLY (t), f(1) WITH ORDINALITY, u", kind: KindSelect, verdict: OptIn, ro: true, opaque: true, tables: []string{"t", "u"}},
	{sql: "SELECT * FROM xmltable('/r' PASSING (SELECT x FROM t3) COLUMNS a int DEFAULT nextval('s'))", kind: KindSelect, verdict: Never, tables: []string{"s", "t3"}, writes: []string{"s"}},
	{sql: "SELECT (SELECT max(a) FROM t), b FROM u", kind: KindSelect, verdict: Shareable, ro: true, tables: []string{"t", "u"}},
	{sql: "SELECT 1 FROM t1 UNION SELECT 2 FROM t2 EXCEPT SELECT 3 FROM t3 INTERSECT SELECT 4 FROM t4", kind: KindSelect, verdict: Shareable, ro: true, tables: []string{"t1", "t2", "t3", "t4"}},
	{sql: "SELECT DISTINCT ON (a) a, b FROM t ORDER BY a, b", kind: KindSelect, verdict: Shareable, ro: true, tables: []string{"t"}},
	{sql: "SELECT data->>'a', data #> '{a,b}' FROM t WHERE data @> '{}'::jsonb AND data ? 'k' AND x !~* 'y'", kind: KindSelect, verdict: Shareable, ro: true, tables: []string{"t"}},
	{sql: "SELECT * FROM t WHERE x IN (SELECT y FROM u) OFFSET 5 FETCH FIRST (3) ROWS ONLY", kind: KindSelect, verdict: Shareable, ro: true, tables: []string{"t", "u"}},
	{sql: "SELECT * FROM t WHERE x = ANY($1::int[]) LIMIT $2", kind: KindSelect, verdict: Shareable, ro: true, tables: []string{"t"}},
	{sql: "SELECT a, count(*) FROM t GROUP BY CUBE (a, b), ROLLUP (c), GROUPING SETS ((a), ())", kind: KindSelect, verdict: Shareable, ro: true, tables: []string{"t"}},
	{sql: "SELECT stddev_pop(x), regr_slope(y, x), var_samp(x), digest('x', 'sha256') FROM places", kind: KindSelect, verdict: Shareable, ro: true, tables: []string{"places"}},
	// No prefix rule vouches for a family: PostGIS has VOLATILE st_* functions, and a user
	// function may be named regr_mine.
	{sql: "SELECT st_distance(a, b) FROM places", kind: KindSelect, verdict: OptIn, ro: true, tables: []string{"places"}, opaque: true, reason: "unknown function st_distance"},
	{sql: "SELECT ST_GeneratePoints(g, 5) FROM places", kind: KindSelect, verdict: OptIn, ro: true, tables: []string{"places"}, opaque: true, reason: "st_generatepoints"},
	{sql: "SELECT regr_mine(y, x), stddev_x(1) FROM places", kind: KindSelect, verdict: OptIn, ro: true, tables: []string{"places"}, opaque: true},
	// Volatile built-ins: sizes read from disk, the clock read per call.
	{sql: "SELECT pg_relation_size('t'), pg_size_pretty(1)", kind: KindSelect, verdict: Never, reason: "pg_relation_size (volatile)"},
	{sql: "SELECT pg_total_relation_size(c.oid) FROM pg_class c", kind: KindSelect, verdict: Never, tables: []string{"pg_class"}, reason: "volatile"},
	{sql: "SELECT pg_table_size('t'), pg_indexes_size('t'), pg_database_size('test')", kind: KindSelect, verdict: Never, reason: "volatile"},
	{sql: "SELECT clock_timestamp()", kind: KindSelect, verdict: Never, reason: "clock_timestamp (volatile)"},
	{sql: "SELECT timeofday()", kind: KindSelect, verdict: Never, reason: "volatile"},
	{sql: "SELECT inet_client_port(), pg_my_temp_schema()", kind: KindSelect, verdict: Never, reason: "per-session value"},
	{sql: "SELECT current_user, session_user, current_schema, current_schema(), user, current_catalog", kind: KindSelect, verdict: Shareable, ro: true},
	{sql: "SELECT x OPERATOR(pg_catalog.+) 1 FROM t", kind: KindSelect, verdict: Shareable, ro: true, tables: []string{"t"}},
	{sql: "SELECT a FROM t ORDER BY a USING <", kind: KindSelect, verdict: Shareable, ro: true, tables: []string{"t"}},
	{sql: "SELECT row_number() OVER w FROM t WINDOW w AS (PARTITION BY a), w2 AS (ORDER BY b)", kind: KindSelect, verdict: Shareable, ro: true, tables: []string{"t"}},
	{sql: "SELECT a$b, \"a$b\" FROM t$1", kind: KindSelect, verdict: Shareable, ro: true, tables: []string{"t$1"}},
	{sql: "SELECT xmlelement(name foo, xmlattributes(1 AS a)), json_object('a': 1), merge_action()", kind: KindSelect, verdict: Shareable, ro: true},
	{sql: "SELECT 1 +-- comment\n 2, 3 */* c */ 4", kind: KindSelect, verdict: Shareable, ro: true},
	{sql: "SELECT 1from t", kind: KindSelect, verdict: Shareable, ro: true, tables: []string{"t"}},
	{sql: "SELECT 'a'\n'b', E'x'\n'\\' ; DELETE FROM t; --'", kind: KindSelect, verdict: Shareable, ro: true},

	// ---- WITH ----
	{sql: "WITH x AS (SELECT * FROM a), y AS (SELECT * FROM x JOIN b USING (id)) SELECT * FROM y", kind: KindSelect, verdict: Shareable, ro: true, tables: []string{"a", "b"}},
	{sql: "WITH orders AS (SELECT * FROM orders WHERE paid) SELECT * FROM orders", kind: KindSelect, verdict: Shareable, ro: true, tables: []string{"orders"}},
	{sql: "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 10) SELECT * FROM r", kind: KindSelect, verdict: Shareable, ro: true},
	{sql: "WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT n+1 FROM t) SEARCH DEPTH FIRST BY n SET ord CYCLE n SET is_cycle USING path SELECT * FROM t", kind: KindSelect, verdict: Shareable, ro: true},
	{sql: "WITH a AS (SELECT * FROM b), b AS (SELECT 1) SELECT * FROM a, b", kind: KindSelect, verdict: Shareable, ro: true, tables: []string{"b"}},
	{sql: "SELECT * FROM x, (WITH x AS (SELECT 1) SELECT * FROM x) s", kind: KindSelect, verdict: Shareable, ro: true, tables: []string{"x"}},
	{sql: "WITH t AS (SELECT 1) SELECT * FROM public.t, t", kind: KindSelect, verdict: Shareable, ro: true, tables: []string{"t"}},
	{sql: "WITH x AS MATERIALIZED (SELECT 1), y (c) AS NOT MATERIALIZED (SELECT 2) SELECT * FROM x, y", kind: KindSelect, verdict: Shareable, ro: true},
	{sql: "WITH x AS (SELECT 1) (SELECT * FROM x) UNION (SELECT * FROM z)", kind: KindSelect, verdict: Shareable, ro: true, tables: []string{"z"}},
	{sql: `WITH "Q" AS (SELECT 1) SELECT * FROM "Q", q`, kind: KindSelect, verdict: Shareable, ro: true, tables: []string{"q"}},

	// ---- read-only but time-dependent or unknown ----
	{sql: "SELECT now()", kind: KindSelect, verdict: InFlightOnly, ro: true, reason: "calls now (time-dependent)"},
	{sql: "SELECT CURRENT_TIMESTAMP", kind: KindSelect, verdict: InFlightOnly, ro: true, reason: "current_timestamp"},
	{sql: "SELECT current_timestamp(3), LOCALTIME", kind: KindSelect, verdict: InFlightOnly, ro: true},
	{sql: "SELECT pg_catalog.now()", kind: KindSelect, verdict: InFlightOnly, ro: true},
	{sql: "SELECT * FROM t WHERE d < CURRENT_DATE", kind: KindSelect, verdict: InFlightOnly, ro: true, tables: []string{"t"}},
	{sql: "SELECT age(ts) FROM t", kind: KindSelect, verdict: InFlightOnly, ro: true, tables: []string{"t"}},
	{sql: "SELECT my_func(1)", kind: KindSelect, verdict: OptIn, ro: true, opaque: true, reason: "calls unknown function my_func"},
	{sql: "SELECT * FROM my_srf(1) AS x", kind: KindSelect, verdict: OptIn, ro: true, opaque: true, reason: "my_srf"},
	{sql: "SELECT myschema.lower(x) FROM t", kind: KindSelect, verdict: OptIn, ro: true, tables: []string{"t"}, opaque: true, reason: "myschema.lower"},
	{sql: `SELECT "NEXTVAL"('s')`, kind: KindSelect, verdict: OptIn, ro: true, opaque: true, reason: "NEXTVAL"},
	{sql: "SELECT my_func(1), now()", kind: KindSelect, verdict: OptIn, ro: true, opaque: true},

	// ---- never: data-modifying CTEs, locking, INTO, Never functions ----
	{sql: "WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d", kind: KindSelect, verdict: Never, tables: []string{"t"}, writes: []string{"t"}, reason: "data-modifying CTE"},
	{sql: "WITH d AS (UPDATE t SET a = 1 RETURNING *) SELECT * FROM d", kind: KindSelect, verdict: Never, tables: []string{"t"}, writes: []string{"t"}, reason: "data-modifying CTE"},
	{sql: "WITH d AS (INSERT INTO log (a) VALUES (1) RETURNING id) SELECT id FROM d JOIN u ON true", kind: KindSelect, verdict: Never, tables: []string{"log", "u"}, writes: []string{"log"}},
	{sql: "with x as (select 1), d as (merge into t using s on t.id = s.id when matched then delete) select 1", kind: KindSelect, verdict: Never, tables: []string{"s", "t"}, writes: []string{"t"}},
	{sql: "SELECT * FROM t FOR UPDATE", kind: KindSelect, verdict: Never, tables: []string{"t"}, reason: "locking clause FOR UPDATE"},
	{sql: "select * from t for no key update", kind: KindSelect, verdict: Never, tables: []string{"t"}, reason: "FOR NO KEY UPDATE"},
	{sql: "SELECT * FROM t FOR SHARE SKIP LOCKED", kind: KindSelect, verdict: Never, tables: []string{"t"}, reason: "FOR SHARE"},
	{sql: "SELECT * FROM t FOR KEY SHARE OF t NOWAIT", kind: KindSelect, verdict: Never, tables: []string{"t"}, reason: "FOR KEY SHARE"},
	{sql: "SELECT * FROM (SELECT * FROM t FOR UPDATE) s", kind: KindSelect, verdict: Never, tables: []string{"t"}, reason: "FOR UPDATE"},
	{sql: "SELECT * FROM t WHERE id = $1 FOR /* x */ UPDATE", kind: KindSelect, verdict: Never, tables: []string{"t"}, reason: "FOR UPDATE"},
	{sql: "SELECT nextval('s')", kind: KindSelect, verdict: Never, tables: []string{"s"}, writes: []string{"s"}, reason: "calls nextval (side effect)"},
	{sql: "SELECT pg_catalog.nextval('Public.\"My Seq\"'::regclass)", kind: KindSelect, verdict: Never, tables: []string{"My Seq"}, writes: []string{"My Seq"}},
	{sql: "SELECT NEXTVAL /* c */ ( 'S' )", kind: KindSelect, verdict: Never, tables: []string{"s"}, writes: []string{"s"}},
	{sql: `SELECT "nextval"('s')`, kind: KindSelect, verdict: Never, tables: []string{"s"}, writes: []string{"s"}},
	{sql: `SELECT U&"\006Eextval"('s')`, kind: KindSelect, verdict: Never, tables: []string{"s"}, writes: []string{"s"}},
	{sql: `SELECT U&"!006Eextval" UESCAPE '!' ('s')`, kind: KindSelect, verdict: Never, tables: []string{"s"}, writes: []string{"s"}},
	{sql: "SELECT nextval(seq_name) FROM t", kind: KindSelect, verdict: Never, tables: []string{"t"}},
	{sql: "SELECT currval('s'), lastval()", kind: KindSelect, verdict: Never, reason: "currval (per-session value)"},
	{sql: "SELECT random()", kind: KindSelect, verdict: Never, reason: "calls random (volatile)"},
	{sql: "SELECT * FROM t ORDER BY random() LIMIT 1", kind: KindSelect, verdict: Never, tables: []string{"t"}, reason: "random"},
	{sql: "SELECT 1 WHERE 1 = 1 AND random() > 0.5", kind: KindSelect, verdict: Never, reason: "random"},
	{sql: "SELECT gen_random_uuid()", kind: KindSelect, verdict: Never, reason: "gen_random_uuid"},
	{sql: "SELECT pg_advisory_lock(1)", kind: KindSelect, verdict: Never, reason: "pg_advisory_lock"},
	{sql: "SELECT pg_try_advisory_xact_lock(1)", kind: KindSelect, verdict: Never, reason: "pg_try_advisory_xact_lock"},
	{sql: "SELECT set_config('a', 'b', false)", kind: KindSelect, verdict: Never, reason: "set_config"},
	{sql: "SELECT pg_notify('ch', 'x')", kind: KindSelect, verdict: Never, reason: "pg_notify"},
	{sql: "SELECT pg_backend_pid(), txid_current()", kind: KindSelect, verdict: Never},
	{sql: "SELECT pg_stat_reset_shared('bgwriter')", kind: KindSelect, verdict: Never},
	{sql: "SELECT lo_import('/tmp/x')", kind: KindSelect, verdict: Never, opaque: true},
	{sql: "SELECT * FROM dblink('dbname=x', 'DELETE FROM t') AS r(a int)", kind: KindSelect, verdict: Never, opaque: true},
	{sql: "SELECT pg_create_logical_replication_slot('s', 'p')", kind: KindSelect, verdict: Never},
	{sql: "SELECT * FROM t AS random(a)", kind: KindSelect, verdict: Never, tables: []string{"t"}},
	{sql: "SELECT * INTO new_t FROM t", kind: KindSelect, verdict: Never, tables: []string{"new_t", "t"}, writes: []string{"new_t"}, reason: "SELECT INTO"},
	{sql: "SELECT a, b INTO UNLOGGED TABLE s.new_t FROM t", kind: KindSelect, verdict: Never, tables: []string{"new_t", "t"}, writes: []string{"new_t"}, reason: "SELECT INTO"},
	{sql: "SELECT * FROM t TABLESAMPLE SYSTEM (10) REPEATABLE (1)", kind: KindSelect, verdict: Never, ro: true, tables: []string{"t"}, reason: "TABLESAMPLE"},
	{sql: "SELECT * FROM t AS x TABLESAMPLE BERNOULLI (5)", kind: KindSelect, verdict: Never, ro: true, tables: []string{"t"}, reason: "TABLESAMPLE"},
	{sql: "SELECT update x FROM t", kind: KindSelect, verdict: Never, tables: []string{"t", "x"}, writes: []string{"x"}},
	{sql: "SELECT * FROM t delete, u update WHERE true", kind: KindSelect, verdict: Shareable, ro: true, tables: []string{"t", "u"}},
	{sql: "SELECT * FROM t delete FROM x", kind: KindSelect, verdict: Never, tables: []string{"t", "x"}, writes: []string{"x"}},
	{sql: "SELECT * FROM t AS tablesample", kind: KindSelect, verdict: Never, ro: true, tables: []string{"t"}, reason: "TABLESAMPLE"},
	{sql: "WITH nextval(a) AS (SELECT 1) SELECT * FROM nextval", kind: KindSelect, verdict: Shareable, ro: true},
	{sql: "WITH x(random()) AS (SELECT 1) SELECT 1", kind: KindSelect, verdict: Never, reason: "random"},
	{sql: "WITH a AS (SELECT 1), DELETE FROM t", kind: KindDelete, verdict: Never, tables: []string{"t"}, writes: []string{"t"}},
	{sql: "WITH a() AS () SEARCH(", kind: KindSelect, verdict: Shareable, ro: true}, // terminates (a syntax error in Postgres)
	{sql: "WITH a AS (SELECT 1) CYCLE CYCLE SEARCH SEARCH x SET y SELECT 1", kind: KindSelect, verdict: Shareable, ro: true},
	{sql: "WITH RECURSIVE x AS (SELECT 1) SEARCH DEPTH FIRST BY a SELECT * FROM t", kind: KindSelect, verdict: Shareable, ro: true, tables: []string{"t"}},
	{sql: "WITH RECURSIVE x AS (SELECT 1) CYCLE a SET b DELETE FROM t", kind: KindDelete, verdict: Never, tables: []string{"t"}, writes: []string{"t"}},

	// ---- DML ----
	{sql: "INSERT INTO t (a) SELECT a FROM u", kind: KindInsert, verdict: Never, tables: []string{"t", "u"}, writes: []string{"t"}, reason: "write: INSERT"},
	{sql: "insert into public.t as x values (1) on conflict (id) do update set a = excluded.a, b = 2 returning *", kind: KindInsert, verdict: Never, tables: []string{"t"}, writes: []string{"t"}},
	{sql: "INSERT INTO t SELECT * FROM u ON CONFLICT ON CONSTRAINT c DO UPDATE SET (a, b) = (1, 2)", kind: KindInsert, verdict: Never, tables: []string{"t", "u"}, writes: []string{"t"}},
	{sql: "INSERT INTO t DEFAULT VALUES", kind: KindInsert, verdict: Never, tables: []string{"t"}, writes: []string{"t"}},
	{sql: "INSERT INTO t OVERRIDING SYSTEM VALUE VALUES (1)", kind: KindInsert, verdict: Never, tables: []string{"t"}, writes: []string{"t"}},
	{sql: "INSERT INTO t VALUES (my_fn())", kind: KindInsert, verdict: Never, tables: []string{"t"}, writes: []string{"t"}, opaque: true},
	{sql: "INSERT INTO t SELECT nextval('seq')", kind: KindInsert, verdict: Never, tables: []string{"seq", "t"}, writes: []string{"seq", "t"}},
	{sql: "UPDATE t SET a = 1 FROM u WHERE t.id = u.id", kind: KindUpdate, verdict: Never, tables: []string{"t", "u"}, writes: []string{"t"}, reason: "write: UPDATE"},
	{sql: "UPDATE ONLY t AS x SET (a, b) = (1, 2) FROM u, v WHERE x.id = u.id", kind: KindUpdate, verdict: Never, tables: []string{"t", "u", "v"}, writes: []string{"t"}},
	{sql: "UPDATE t SET a = (SELECT max(b) FROM w) WHERE CURRENT OF c", kind: KindUpdate, verdict: Never, tables: []string{"t", "w"}, writes: []string{"t"}},
	{sql: "DELETE FROM t USING u, v WHERE t.id = u.id RETURNING *", kind: KindDelete, verdict: Never, tables: []string{"t", "u", "v"}, writes: []string{"t"}, reason: "write: DELETE"},
	{sql: "DELETE FROM t WHERE id IN (SELECT id FROM u)", kind: KindDelete, verdict: Never, tables: []string{"t", "u"}, writes: []string{"t"}},
	{sql: "DELETE FROM t x USING a JOIN b USING (id) WHERE x.id = a.id", kind: KindDelete, verdict: Never, tables: []string{"a", "b", "t"}, writes: []string{"t"}},
	{sql: "MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN UPDATE SET a = s.a WHEN NOT MATCHED THEN INSERT (id, a) VALUES (s.id, s.a)",
		kind: KindMerge, verdict: Never, tables: []string{"s", "t"}, writes: []string{"t"}, reason: "write: MERGE"},
	{sql: "MERGE INTO t AS tgt USING (SELECT * FROM s) AS src ON tgt.id = src.id WHEN MATCHED THEN DELETE", kind: KindMerge, verdict: Never, tables: []string{"s", "t"}, writes: []string{"t"}},
	{sql: "WITH x AS (SELECT * FROM s) INSERT INTO t SELECT * FROM x", kind: KindInsert, verdict: Never, tables: []string{"s", "t"}, writes: []string{"t"}},
	{sql: "WITH d AS (DELETE FROM a RETURNING *) INSERT INTO b SELECT * FROM d", kind: KindInsert, verdict: Never, tables: []string{"a", "b"}, writes: []string{"a", "b"}},

	// ---- transactions, session ----
	{sql: "BEGIN", kind: KindBegin, verdict: Never, reason: "transaction control"},
	{sql: "START TRANSACTION ISOLATION LEVEL SERIALIZABLE", kind: KindBegin, verdict: Never},
	{sql: "COMMIT", kind: KindCommit, verdict: Never},
	{sql: "END", kind: KindCommit, verdict: Never},
	{sql: "ROLLBACK", kind: KindRollback, verdict: Never},
	{sql: "ABORT", kind: KindRollback, verdict: Never},
	{sql: "ROLLBACK TO SAVEPOINT a", kind: KindSavepoint, verdict: Never},
	{sql: "ROLLBACK WORK TO a", kind: KindSavepoint, verdict: Never},
	{sql: "SAVEPOINT a", kind: KindSavepoint, verdict: Never},
	{sql: "RELEASE SAVEPOINT a", kind: KindSavepoint, verdict: Never},
	{sql: "COMMIT PREPARED 'x'", kind: KindTxControl, verdict: Never, opaque: true},
	{sql: "ROLLBACK PREPARED 'x'", kind: KindTxControl, verdict: Never},
	{sql: "PREPARE TRANSACTION 'x'", kind: KindTxControl, verdict: Never},
	{sql: "SET search_path = x", kind: KindSet, verdict: Never, reason: "session state"},
	{sql: "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE", kind: KindTxControl, verdict: Never},
	{sql: "SET CONSTRAINTS ALL DEFERRED", kind: KindTxControl, verdict: Never},
	{sql: "RESET ALL", kind: KindSet, verdict: Never},
	{sql: "SHOW search_path", kind: KindShow, verdict: Never, ro: true, reason: "SHOW is not shared"},
	{sql: "LISTEN ch", kind: KindListen, verdict: Never},
	{sql: "NOTIFY ch, 'x'", kind: KindListen, verdict: Never},
	{sql: "PREPARE p (int) AS SELECT * FROM t WHERE a = $1", kind: KindPrepare, verdict: Never},
	{sql: "EXECUTE p(1)", kind: KindPrepare, verdict: Never, opaque: true},
	{sql: "DEALLOCATE ALL", kind: KindPrepare, verdict: Never},
	{sql: "DECLARE c CURSOR WITH HOLD FOR SELECT * FROM t", kind: KindCursor, verdict: Never, tables: []string{"t"}},
	{sql: "FETCH 10 FROM c", kind: KindCursor, verdict: Never, opaque: true},
	{sql: "CLOSE c", kind: KindCursor, verdict: Never},
	{sql: "DISCARD ALL", kind: KindDiscard, verdict: Never},
	{sql: "LOCK TABLE t, ONLY s.u IN ACCESS EXCLUSIVE MODE", kind: KindLock, verdict: Never, tables: []string{"t", "u"}},
	{sql: "CALL p(1)", kind: KindCall, verdict: Never, opaque: true},
	{sql: "DO $$ BEGIN DELETE FROM t; END $$", kind: KindCall, verdict: Never, opaque: true},
	{sql: "LOAD 'auto_explain'", kind: KindOther, verdict: Never, opaque: true},
	{sql: "CHECKPOINT", kind: KindOther, verdict: Never},
	{sql: "FOO BAR", kind: KindOther, verdict: Never, opaque: true, reason: "not a query: FOO"},

	// ---- COPY, EXPLAIN ----
	{sql: "COPY t FROM STDIN", kind: KindCopy, verdict: Never, tables: []string{"t"}, writes: []string{"t"}},
	{sql: "COPY s.t (a, b) TO STDOUT WITH (FORMAT csv)", kind: KindCopy, verdict: Never, tables: []string{"t"}},
	{sql: "COPY (SELECT * FROM t JOIN u USING (id)) TO STDOUT", kind: KindCopy, verdict: Never, tables: []string{"t", "u"}},
	{sql: "COPY (SELECT my_fn()) TO STDOUT", kind: KindCopy, verdict: Never, opaque: true},
	{sql: "COPY (DELETE FROM t RETURNING *) TO STDOUT", kind: KindCopy, verdict: Never, tables: []string{"t"}, writes: []string{"t"}},
	{sql: "EXPLAIN SELECT 1", kind: KindExplain, verdict: Never, ro: true, reason: "EXPLAIN is not shared"},
	{sql: "EXPLAIN (FORMAT JSON) SELECT * FROM t", kind: KindExplain, verdict: Never, ro: true, tables: []string{"t"}},
	{sql: "EXPLAIN DELETE FROM t", kind: KindExplain, verdict: Never, ro: true, tables: []string{"t"}},
	{sql: "EXPLAIN ANALYZE DELETE FROM t", kind: KindExplain, verdict: Never, tables: []string{"t"}, writes: []string{"t"}},
	{sql: "EXPLAIN ANALYSE VERBOSE SELECT nextval('s')", kind: KindExplain, verdict: Never, tables: []string{"s"}, writes: []string{"s"}},
	{sql: "EXPLAIN ANALYZE SELECT * FROM t", kind: KindExplain, verdict: Never, ro: true, tables: []string{"t"}},
	{sql: "EXPLAIN (ANALYZE, BUFFERS) UPDATE t SET a = 1", kind: KindExplain, verdict: Never, tables: []string{"t"}, writes: []string{"t"}},
	{sql: "EXPLAIN (ANALYZE true, COSTS off) UPDATE t SET a = 1", kind: KindExplain, verdict: Never, tables: []string{"t"}, writes: []string{"t"}},
	{sql: "EXPLAIN (ANALYZE false) DELETE FROM t", kind: KindExplain, verdict: Never, ro: true, tables: []string{"t"}},
	{sql: "EXPLAIN (ANALYZE off, FORMAT yaml) DELETE FROM t", kind: KindExplain, verdict: Never, ro: true, tables: []string{"t"}},
	{sql: "EXPLAIN ANALYZE EXECUTE p", kind: KindExplain, verdict: Never, opaque: true},
	{sql: "EXPLAIN ANALYZE CREATE TABLE n AS SELECT * FROM t", kind: KindExplain, verdict: Never, tables: []string{"n", "t"}, writes: []string{"n"}},

	// ---- DDL ----
	{sql: "CREATE TABLE t (a int DEFAULT nextval('s'))", kind: KindDDL, verdict: Never, tables: []string{"t"}, writes: []string{"t"}, reason: "DDL: CREATE"},
	{sql: "CREATE TEMP TABLE x (a int)", kind: KindDDL, verdict: Never, tables: []string{"x"}, writes: []string{"x"}},
	{sql: "CREATE TABLE IF NOT EXISTS s.t (a int)", kind: KindDDL, verdict: Never, tables: []string{"t"}, writes: []string{"t"}},
	{sql: "CREATE TEMPORARY TABLE x AS SELECT * FROM t", kind: KindDDL, verdict: Never, tables: []string{"t", "x"}, writes: []string{"x"}},
	{sql: "CREATE UNLOGGED TABLE x AS SELECT my_fn()", kind: KindDDL, verdict: Never, tables: []string{"x"}, writes: []string{"x"}, opaque: true},
	{sql: "CREATE TABLE p1 PARTITION OF p FOR VALUES IN (1)", kind: KindDDL, verdict: Never, tables: []string{"p", "p1"}, writes: []string{"p", "p1"}},
	{sql: "CREATE TABLE p (a int) PARTITION BY RANGE (a)", kind: KindDDL, verdict: Never, tables: []string{"p"}, writes: []string{"p"}},
	{sql: "CREATE OR REPLACE VIEW v AS SELECT * FROM t", kind: KindDDL, verdict: Never, tables: []string{"v"}, writes: []string{"v"}},
	{sql: "CREATE MATERIALIZED VIEW mv AS SELECT * FROM t WITH NO DATA", kind: KindDDL, verdict: Never, tables: []string{"mv", "t"}, writes: []string{"mv"}},
	{sql: "CREATE INDEX CONCURRENTLY IF NOT EXISTS i ON ONLY t USING btree (lower(a))", kind: KindDDL, verdict: Never, tables: []string{"t"}, writes: []string{"t"}},
	{sql: "CREATE UNIQUE INDEX ON s.t (a)", kind: KindDDL, verdict: Never, tables: []string{"t"}, writes: []string{"t"}},
	{sql: "CREATE SEQUENCE s START 1", kind: KindDDL, verdict: Never, tables: []string{"s"}, writes: []string{"s"}},
	{sql: "CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$", kind: KindDDL, verdict: Never, opaque: true},
	{sql: "CREATE EXTENSION IF NOT EXISTS pg_trgm", kind: KindDDL, verdict: Never, opaque: true},
	{sql: "CREATE RULE r AS ON INSERT TO t DO ALSO (INSERT INTO a VALUES (1); INSERT INTO b VALUES (2))", kind: KindDDL, verdict: Never, opaque: true},
	{sql: "ALTER TABLE t ADD COLUMN a int", kind: KindDDL, verdict: Never, tables: []string{"t"}, writes: []string{"t"}},
	{sql: "ALTER TABLE IF EXISTS ONLY t RENAME TO u", kind: KindDDL, verdict: Never, tables: []string{"t", "u"}, writes: []string{"t", "u"}},
	{sql: "ALTER TABLE t RENAME COLUMN a TO b", kind: KindDDL, verdict: Never, tables: []string{"t"}, writes: []string{"t"}},
	{sql: "ALTER TABLE p ATTACH PARTITION c FOR VALUES IN (1)", kind: KindDDL, verdict: Never, tables: []string{"c", "p"}, writes: []string{"c", "p"}},
	{sql: "ALTER MATERIALIZED VIEW mv OWNER TO x", kind: KindDDL, verdict: Never, tables: []string{"mv"}, writes: []string{"mv"}},
	{sql: "ALTER TABLE ALL IN TABLESPACE a SET TABLESPACE b", kind: KindDDL, verdict: Never, opaque: true},
	{sql: "ALTER FUNCTION f() OWNER TO x", kind: KindDDL, verdict: Never, opaque: true},
	{sql: "DROP TABLE a, s.b", kind: KindDDL, verdict: Never, tables: []string{"a", "b"}, writes: []string{"a", "b"}},
	{sql: "DROP TABLE IF EXISTS a CASCADE", kind: KindDDL, verdict: Never, tables: []string{"a"}, writes: []string{"a"}, opaque: true},
	{sql: "DROP MATERIALIZED VIEW IF EXISTS mv", kind: KindDDL, verdict: Never, tables: []string{"mv"}, writes: []string{"mv"}},
	{sql: "DROP INDEX CONCURRENTLY i", kind: KindDDL, verdict: Never, tables: []string{"i"}, writes: []string{"i"}},
	{sql: "DROP SCHEMA s CASCADE", kind: KindDDL, verdict: Never, opaque: true},
	{sql: "TRUNCATE a, ONLY b RESTART IDENTITY", kind: KindTruncate, verdict: Never, tables: []string{"a", "b"}, writes: []string{"a", "b"}, reason: "write: TRUNCATE"},
	{sql: "TRUNCATE TABLE a CASCADE", kind: KindTruncate, verdict: Never, tables: []string{"a"}, writes: []string{"a"}, opaque: true},
	{sql: "VACUUM (VERBOSE) a, b (x)", kind: KindDDL, verdict: Never, tables: []string{"a", "b"}},
	{sql: "VACUUM FULL ANALYZE", kind: KindDDL, verdict: Never},
	{sql: "ANALYZE t", kind: KindDDL, verdict: Never, tables: []string{"t"}},
	{sql: "CLUSTER t USING i", kind: KindDDL, verdict: Never, tables: []string{"t"}},
	{sql: "REINDEX TABLE CONCURRENTLY t", kind: KindDDL, verdict: Never, tables: []string{"t"}},
	{sql: "REFRESH MATERIALIZED VIEW CONCURRENTLY mv", kind: KindDDL, verdict: Never, tables: []string{"mv"}, writes: []string{"mv"}},
	{sql: "GRANT SELECT ON t TO u", kind: KindDDL, verdict: Never, opaque: true},
	{sql: "COMMENT ON TABLE t IS 'x'", kind: KindDDL, verdict: Never, opaque: true},

	// ---- empty and malformed ----
	{sql: "", kind: KindEmpty, verdict: Never, ro: true, reason: "empty statement"},
	{sql: "  ;; ", kind: KindEmpty, verdict: Never, ro: true},
	{sql: "/* only a comment */ -- and another", kind: KindEmpty, verdict: Never, ro: true},
	{sql: "SELECT 'abc", kind: KindSelect, verdict: Never, opaque: true, reason: "unterminated string literal"},
	{sql: `SELECT E'abc\'`, kind: KindSelect, verdict: Never, opaque: true, reason: "unterminated string literal"},
	{sql: `SELECT "abc`, kind: KindSelect, verdict: Never, opaque: true, reason: "unterminated quoted identifier"},
	{sql: "SELECT $$abc", kind: KindSelect, verdict: Never, opaque: true, reason: "unterminated dollar-quoted string"},
	{sql: "SELECT $a$abc$b$", kind: KindSelect, verdict: Never, opaque: true, reason: "unterminated dollar-quoted string"},
	{sql: "SELECT 1 /* abc /* def */", kind: KindSelect, verdict: Never, opaque: true, reason: "unterminated block comment"},
	{sql: "SELECT 1\x00; DELETE FROM t", verdict: Never, tables: []string{"t"}, writes: []string{"t"}, opaque: true, reason: "NUL byte"},
	{sql: "SELECT 'a\x00b'", kind: KindSelect, verdict: Never, opaque: true, reason: "NUL byte"},
	{sql: "SELECT (1; DELETE FROM t", kind: KindSelect, verdict: Never, tables: []string{"t"}, writes: []string{"t"}},
	{sql: "SELECT 1)", kind: KindSelect, verdict: Shareable, ro: true},
}

func TestClassify(t *testing.T) {
	for _, tc := range classCases {
		t.Run(tc.sql, func(t *testing.T) {
			r := Parse(tc.sql)
			if tc.kind != KindEmpty || len(r.Statements) == 0 {
				if r.Kind != tc.kind {
					t.Errorf("Kind = %v, want %v", r.Kind, tc.kind)
				}
			}
			if r.Verdict != tc.verdict {
				t.Errorf("Verdict = %v (%s), want %v", r.Verdict, r.Reason, tc.verdict)
			}
			if r.ReadOnly != tc.ro {
				t.Errorf("ReadOnly = %v, want %v", r.ReadOnly, tc.ro)
			}
			if !slices.Equal(r.Tables, tc.tables) {
				t.Errorf("Tables = %q, want %q", r.Tables, tc.tables)
			}
			if !slices.Equal(r.Writes, tc.writes) {
				t.Errorf("Writes = %q, want %q", r.Writes, tc.writes)
			}
			if r.TablesKnown == tc.opaque {
				t.Errorf("TablesKnown = %v, want %v", r.TablesKnown, !tc.opaque)
			}
			if tc.reason != "" && !strings.Contains(r.Reason, tc.reason) {
				t.Errorf("Reason = %q, want it to contain %q", r.Reason, tc.reason)
			}
			if r.Verdict == Shareable && r.Reason != "" {
				t.Errorf("Shareable with Reason %q", r.Reason)
			}
			if r.Verdict != Shareable && r.Reason == "" {
				t.Errorf("%v without a Reason", r.Verdict)
			}
		})
	}
}

func TestStatementEffects(t *testing.T) {
	type eff struct {
		kind   Kind
		tx     TxEffect
		chain  bool
		taints bool
		clears bool
	}
	cases := []struct {
		sql  string
		want []eff
	}{
		{"BEGIN; INSERT INTO t VALUES (1); COMMIT", []eff{{KindBegin, TxBegin, false, false, false}, {KindInsert, TxNone, false, false, false}, {KindCommit, TxCommit, false, false, false}}},
		{"BEGIN ISOLATION LEVEL SERIALIZABLE", []eff{{kind: KindBegin, tx: TxBegin}}},
		{"START TRANSACTION ISOLATION LEVEL SERIALIZABLE", []eff{{kind: KindBegin, tx: TxBegin}}},
		{"begin work; rollback", []eff{{kind: KindBegin, tx: TxBegin}, {kind: KindRollback, tx: TxRollback}}},
		{"COMMIT AND CHAIN", []eff{{kind: KindCommit, tx: TxCommit, chain: true}}},
		{"COMMIT AND NO CHAIN", []eff{{kind: KindCommit, tx: TxCommit}}},
		{"ROLLBACK AND CHAIN", []eff{{kind: KindRollback, tx: TxRollback, chain: true}}},
		{"END TRANSACTION", []eff{{kind: KindCommit, tx: TxCommit}}},
		{"ABORT", []eff{{kind: KindRollback, tx: TxRollback}}},
		{"ROLLBACK TO SAVEPOINT s", []eff{{kind: KindSavepoint}}},
		{"COMMIT PREPARED 'x'", []eff{{kind: KindTxControl}}},
		{"PREPARE TRANSACTION 'x'", []eff{{kind: KindTxControl, tx: TxCommit}}},
		{"SET search_path = x", []eff{{kind: KindSet, taints: true}}},
		{"SET SESSION statement_timeout = 5", []eff{{kind: KindSet, taints: true}}},
		{"SET LOCAL x = 1", []eff{{kind: KindSet}}},
		{"SET TRANSACTION ISOLATION LEVEL SERIALIZABLE", []eff{{kind: KindTxControl}}},
		{"SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY", []eff{{kind: KindSet, taints: true}}},
		{"SET ROLE admin", []eff{{kind: KindSet, taints: true}}},
		{"SET SESSION AUTHORIZATION bob", []eff{{kind: KindSet, taints: true}}},
		{"SET TIME ZONE 'UTC'", []eff{{kind: KindSet, taints: true}}},
		{"RESET search_path", []eff{{kind: KindSet, taints: true}}},
		{"DISCARD ALL", []eff{{kind: KindDiscard, clears: true}}},
		{"DISCARD PLANS", []eff{{kind: KindDiscard}}},
		{"CREATE TEMP TABLE x (a int)", []eff{{kind: KindDDL, taints: true}}},
		{"CREATE TEMPORARY TABLE x AS SELECT 1", []eff{{kind: KindDDL, taints: true}}},
		{"CREATE GLOBAL TEMPORARY VIEW v AS SELECT 1", []eff{{kind: KindDDL, taints: true}}},
		{"CREATE TABLE x (a int)", []eff{{kind: KindDDL}}},
		{"SELECT * INTO TEMP x FROM t", []eff{{kind: KindSelect, taints: true}}},
		{"SELECT pg_advisory_lock(1)", []eff{{kind: KindSelect, taints: true}}},
		{"SELECT pg_try_advisory_lock_shared(1)", []eff{{kind: KindSelect, taints: true}}},
		{"SELECT pg_advisory_xact_lock(1)", []eff{{kind: KindSelect}}},
		{"SELECT set_config('search_path', 'x', false)", []eff{{kind: KindSelect, taints: true}}},
		{"SELECT dblink_connect('c', 'dbname=x')", []eff{{kind: KindSelect, taints: true}}},
		{"LISTEN ch", []eff{{kind: KindListen, taints: true}}},
		{"UNLISTEN *", []eff{{kind: KindListen}}},
		{"PREPARE p AS SELECT 1", []eff{{kind: KindPrepare, taints: true}}},
		{"DECLARE c CURSOR WITH HOLD FOR SELECT 1", []eff{{kind: KindCursor, taints: true}}},
		{"LOAD 'x'", []eff{{kind: KindOther, taints: true}}},
		{"DO $$ BEGIN PERFORM set_config('a', 'b', false); END $$", []eff{{kind: KindCall, taints: true}}},
		{"EXPLAIN ANALYZE SELECT pg_advisory_lock(1)", []eff{{kind: KindExplain, taints: true}}},
		{"EXPLAIN SELECT pg_advisory_lock(1)", []eff{{kind: KindExplain}}},
		{"SELECT 1;; SELECT 2;", []eff{{kind: KindSelect}, {kind: KindSelect}}},
		{"CREATE FUNCTION f() RETURNS int LANGUAGE sql BEGIN ATOMIC SELECT 1; SELECT CASE WHEN true THEN 1 END; END; END",
			[]eff{{kind: KindDDL}, {kind: KindCommit, tx: TxCommit}}},
		{"CREATE PROCEDURE p() BEGIN ATOMIC INSERT INTO t VALUES (1); END; BEGIN",
			[]eff{{kind: KindDDL}, {kind: KindBegin, tx: TxBegin}}},
	}
	for _, tc := range cases {
		t.Run(tc.sql, func(t *testing.T) {
			r := Parse(tc.sql)
			if len(r.Statements) != len(tc.want) {
				t.Fatalf("%d statements, want %d: %+v", len(r.Statements), len(tc.want), r.Statements)
			}
			for i, w := range tc.want {
				st := r.Statements[i]
				got := eff{st.Kind, st.Tx, st.Chain, st.Taints, st.ClearsTaint}
				if got != w {
					t.Errorf("statement %d = %+v, want %+v", i, got, w)
				}
			}
			if len(r.Statements) > 1 && (r.Verdict != Never || r.Reason != "multiple statements") {
				t.Errorf("multi-statement verdict %v %q", r.Verdict, r.Reason)
			}
		})
	}
}

func TestMultiStatement(t *testing.T) {
	r := Parse("BEGIN; INSERT INTO t VALUES (1); UPDATE u SET a = 1; COMMIT;")
	if len(r.Statements) != 4 || r.Kind != KindBegin || r.Verdict != Never || r.ReadOnly {
		t.Fatalf("got %d statements, kind %v, verdict %v, ro %v", len(r.Statements), r.Kind, r.Verdict, r.ReadOnly)
	}
	if !slices.Equal(r.Writes, []string{"t", "u"}) || !slices.Equal(r.Tables, []string{"t", "u"}) || !r.TablesKnown {
		t.Errorf("Writes %q Tables %q known %v", r.Writes, r.Tables, r.TablesKnown)
	}
	r = Parse("SELECT 1; SELECT 2")
	if r.Verdict != Never || r.Reason != "multiple statements" || !r.ReadOnly {
		t.Errorf("two selects: %v %q ro=%v", r.Verdict, r.Reason, r.ReadOnly)
	}
	for _, st := range r.Statements {
		if st.Verdict != Shareable {
			t.Errorf("statement verdict %v", st.Verdict)
		}
	}
	r = Parse("SELECT 1; DELETE FROM t")
	if r.Verdict != Never || r.ReadOnly || !slices.Equal(r.Writes, []string{"t"}) {
		t.Errorf("select+delete: %v ro=%v writes=%q", r.Verdict, r.ReadOnly, r.Writes)
	}
}

func TestFunctions(t *testing.T) {
	cases := []struct {
		sql              string
		functions, unkwn []string
	}{
		{"SELECT count(*), COUNT(x), Lower(a) FROM t", []string{"count", "lower"}, nil},
		{"SELECT pg_catalog.now(), CURRENT_DATE, current_user", []string{"current_date", "current_user", "now"}, nil},
		{"SELECT my_fn(1), s.other(2), \"Mixed\"(3)", []string{"Mixed", "my_fn", "s.other"}, []string{"Mixed", "my_fn", "s.other"}},
		{"SELECT x::numeric(10,2), CAST(y AS varchar(3)), ARRAY[1], ARRAY(SELECT 1), coalesce(a, b) FROM t", nil, nil},
		{"SELECT * FROM t WHERE a IN (1, 2) AND b = ANY (ARRAY[1]) AND EXISTS (SELECT 1)", nil, nil},
		{"SELECT * FROM generate_series(1, 3) g(n) JOIN LATERAL my_srf(g.n) AS m(x int) ON true", []string{"generate_series", "my_srf"}, []string{"my_srf"}},
		{"SELECT 1; SELECT f()", []string{"f"}, []string{"f"}},
	}
	for _, tc := range cases {
		r := Parse(tc.sql)
		if !slices.Equal(r.Functions, tc.functions) || !slices.Equal(r.Unknown, tc.unkwn) {
			t.Errorf("%s: Functions %q Unknown %q, want %q %q", tc.sql, r.Functions, r.Unknown, tc.functions, tc.unkwn)
		}
	}
}

func TestAnnotations(t *testing.T) {
	cases := []struct {
		sql  string
		has  bool
		anno string
	}{
		{"-- sqlflight: coalesce\nSELECT 1", true, "coalesce"},
		{"/* sqlflight: soft=30s hard=5m */ SELECT * FROM products WHERE id = $1", true, "soft=30s hard=5m"},
		{"/*sqlflight:ttl=1s*/SELECT 1", true, "ttl=1s"},
		{"/* SQLFlight: nocache */ SELECT 1", true, "nocache"},
		{"/* sqlflight: ttl=5s */ SELECT 1 -- sqlflight: name=x", true, "ttl=5s name=x"},
		{"/* sqlflight: */ SELECT 1", true, ""},
		{"/* sqlflight: a /* b */ c */ SELECT 1", true, "a /* b */ c"},
		{"/*\n  sqlflight: tables=a,b\n*/ SELECT 1", true, "tables=a,b"},
		{"SELECT '/* sqlflight: ttl=5s */'", false, ""},
		{"SELECT $$ -- sqlflight: ttl=5s\n $$", false, ""},
		{`SELECT "-- sqlflight: ttl=5s"`, false, ""},
		{"/* note: sqlflight: x */ SELECT 1", false, ""},
		{"/** sqlflight: x */ SELECT 1", false, ""},
		{"SELECT 1 /* sqlflight: ttl=5s", false, ""}, // unterminated: not an annotation
		{"SELECT 'a' -- sqlflight: off\n 'b'", true, "off"},
	}
	for _, tc := range cases {
		r := Parse(tc.sql)
		if r.HasAnnotation != tc.has || r.Annotation != tc.anno {
			t.Errorf("%q: HasAnnotation %v Annotation %q, want %v %q", tc.sql, r.HasAnnotation, r.Annotation, tc.has, tc.anno)
		}
	}
}

func TestParams(t *testing.T) {
	cases := []struct {
		sql    string
		params int
	}{
		{"SELECT 1", 0},
		{"SELECT $1", 1},
		{"SELECT * FROM t WHERE a = $2 AND b = $12 OR c = $3", 12},
		{"SELECT '$5', $$ $6 $$, \"$7\", a$8 FROM t WHERE x = $1", 1},
		{"SELECT $99999999999999999999", 2147483647},
	}
	for _, tc := range cases {
		if got := Parse(tc.sql).Params; got != tc.params {
			t.Errorf("%q: Params %d, want %d", tc.sql, got, tc.params)
		}
	}
}

func TestNames(t *testing.T) {
	long := strings.Repeat("a", 70)
	r := Parse("SELECT * FROM " + long + ", \"" + strings.Repeat("é", 40) + "\"")
	want := []string{strings.Repeat("a", 63), strings.Repeat("é", 31)}
	slices.Sort(want)
	if !slices.Equal(r.Tables, want) {
		t.Errorf("Tables %q, want %q", r.Tables, want)
	}
	if got := regclassName(` public . "My ""Seq"" " `); got != `My "Seq" ` {
		t.Errorf("regclassName = %q", got)
	}
	if got := regclassName(`A.B`); got != "b" {
		t.Errorf("regclassName = %q", got)
	}
	if got := decodeUnicode(`d\0061t\+000061\\`, 0); got != `data\` {
		t.Errorf("decodeUnicode = %q", got)
	}
	if got := decodeUnicode(`\D83D\DE00`, 0); got != "😀" {
		t.Errorf("decodeUnicode surrogates = %q", got)
	}
}

func TestStrings(t *testing.T) {
	for k := KindEmpty; k <= KindOther; k++ {
		if s := k.String(); s == "" || strings.Contains(s, "?") {
			t.Errorf("Kind(%d).String() = %q", k, s)
		}
	}
	if Never.String() != "never" || OptIn.String() != "opt-in" || InFlightOnly.String() != "in-flight-only" || Shareable.String() != "shareable" {
		t.Error("Verdict strings")
	}
	if TxCommit.String() != "commit" || Kind(200).String() == "" || Verdict(9).String() == "" || TxEffect(9).String() == "" {
		t.Error("other strings")
	}
}

// TestFuncTables checks that the three function lists do not contradict each other.
func TestFuncTables(t *testing.T) {
	for _, n := range []string{"now", "age", "current_timestamp", "statement_timestamp"} {
		if lookupFunc(n).class != fnTime {
			t.Errorf("%s is not time-dependent", n)
		}
	}
	for _, n := range []string{"nextval", "random", "gen_random_uuid", "pg_advisory_lock", "lo_open",
		"dblink_exec", "pg_stat_reset", "pg_create_physical_replication_slot", "uuidv7",
		"clock_timestamp", "timeofday", "pg_relation_size", "pg_total_relation_size", "pg_table_size",
		"pg_indexes_size", "pg_database_size"} {
		if lookupFunc(n).class != fnNever {
			t.Errorf("%s is not Never", n)
		}
	}
	for _, n := range []string{"count", "lower", "stddev_samp", "regr_syy", "jsonb_build_object"} {
		if lookupFunc(n).class != fnSafe {
			t.Errorf("%s is not safe", n)
		}
	}
	for _, n := range []string{"my_fn", "pg_create_foo", "st_astext", "st_generatepoints",
		"st_clusterkmeans", "st_addisonode", "regr_mine", "stddev_x", "var_foo", "covar_x", "variance2"} {
		if lookupFunc(n).class != fnUnknown {
			t.Errorf("%s is not unknown", n)
		}
	}
	for _, p := range prefixFuncs {
		if p.info.class != fnNever {
			t.Errorf("prefix rule %q%s… is not Never: no prefix rule may vouch for a name", p.prefix, p.suffix)
		}
	}
}

// TestNeverPanics throws truncated and spliced fragments at the parser.
func TestNeverPanics(t *testing.T) {
	var all strings.Builder
	for _, tc := range classCases {
		all.WriteString(tc.sql)
		all.WriteString(" ")
	}
	s := all.String()
	for i := 0; i < len(s); i += 7 {
		for _, j := range []int{i + 1, i + 13, i + 101, len(s)} {
			if j <= len(s) {
				r := Parse(s[i:j])
				if r == nil {
					t.Fatal("nil Result")
				}
			}
		}
	}
}

// TestKeywordRelations checks that unreserved and column-name keywords are relation names.
func TestKeywordRelations(t *testing.T) {
	cases := []struct {
		sql    string
		tables []string
	}{
		{"SELECT * FROM set", []string{"set"}},
		{"SELECT * FROM values, ordinality, overriding, comment, time", []string{"comment", "ordinality", "overriding", "time", "values"}},
		{"SELECT * FROM (VALUES (1)) v, rows", []string{"rows"}},
		{"TABLE set", []string{"set"}},
		{"SELECT * FROM s.select, s.left", []string{"left", "select"}},
	}
	for _, tc := range cases {
		if r := Parse(tc.sql); !slices.Equal(r.Tables, tc.tables) {
			t.Errorf("%s: Tables %q, want %q", tc.sql, r.Tables, tc.tables)
		}
	}
	r := Parse("INSERT INTO set VALUES (1)")
	if !slices.Equal(r.Writes, []string{"set"}) || !r.TablesKnown {
		t.Errorf("INSERT INTO set: Writes %q known %v", r.Writes, r.TablesKnown)
	}
}

// TestLargeInputs feeds megabyte-sized texts of pathological shapes; a super-linear step
// would make this test run for minutes (it does not measure time itself).
func TestLargeInputs(t *testing.T) {
	const n = 50000
	var ctes strings.Builder
	ctes.WriteString("WITH ")
	for i := 0; i < n/10; i++ {
		if i > 0 {
			ctes.WriteString(", ")
		}
		ctes.WriteString("c")
		ctes.WriteString(strings.Repeat("x", i%7))
		ctes.WriteString(" AS (SELECT * FROM t)")
	}
	ctes.WriteString(" SELECT * FROM ")
	for i := 0; i < n/10; i++ {
		ctes.WriteString("c, ")
	}
	ctes.WriteString("t")
	shapes := map[string]string{
		"parens":       strings.Repeat("(", n) + "SELECT 1" + strings.Repeat(")", n),
		"open parens":  "SELECT " + strings.Repeat("(", n),
		"close parens": "SELECT " + strings.Repeat(")", n),
		"comments":     "SELECT " + strings.Repeat("/* a */ --b\n", n) + "1",
		"nested":       "SELECT 1 " + strings.Repeat("/*", n) + strings.Repeat("*/", n),
		"unterminated": "SELECT 1 " + strings.Repeat("/*", n),
		"dollars":      "SELECT " + strings.Repeat("$a$ $b$ $a$, ", n) + "1",
		"dollar open":  "SELECT " + strings.Repeat("$a", n),
		"strings":      "SELECT " + strings.Repeat("'a'\n", n),
		"estrings":     "SELECT " + strings.Repeat(`E'\\\''`, n),
		"semicolons":   strings.Repeat("SELECT 1;", n),
		"explain":      strings.Repeat("EXPLAIN ", n) + "SELECT 1",
		"ctes":         ctes.String(),
		"qualified":    "SELECT " + strings.Repeat("a.", n) + "b(1)",
		"from list":    "SELECT * FROM " + strings.Repeat("t, ", n) + "u",
		"calls":        "SELECT " + strings.Repeat("f(", n) + strings.Repeat(")", n),
		"with":         strings.Repeat("WITH ", n),
		"atomic":       "CREATE FUNCTION f() BEGIN ATOMIC " + strings.Repeat("CASE ", n),
		"uescape":      "SELECT " + strings.Repeat(`U&"a" UESCAPE '!' `, n),
	}
	for name, sql := range shapes {
		r := Parse(sql)
		if again := Parse(r.Normalized); again.Normalized != r.Normalized {
			t.Errorf("%s: normalization not idempotent", name)
		}
	}
	r := Parse(shapes["ctes"])
	if !slices.Equal(r.Tables, []string{"t"}) { // c is the first WITH query
		t.Errorf("ctes: Tables %q", r.Tables)
	}
}

// TestSessionWrites: writes and DDL that change the session without a keyword the statement
// parsers know (issue 15): objects of the temporary schema named by pg_temp, and UPDATE of
// pg_settings (which runs set_config). Reads of them, and ordinary names that merely look
// alike, change nothing.
func TestSessionWrites(t *testing.T) {
	cases := []struct {
		sql          string
		taints, temp bool
	}{
		{"CREATE TABLE pg_temp.t (a int)", true, true},
		{`CREATE TABLE "pg_temp".t (a int)`, true, true},
		{"CREATE TABLE PG_TEMP.t AS SELECT 1", true, true},
		{"CREATE TABLE pg_temp_3.t (a int)", true, true},
		{"CREATE TABLE IF NOT EXISTS pg_temp.t (a int)", true, true},
		{"CREATE UNLOGGED TABLE pg_temp.t (a int)", true, true},
		{"CREATE VIEW pg_temp.v AS SELECT 1", true, true},
		{"CREATE OR REPLACE VIEW pg_temp.v AS SELECT 1", true, true},
		{"CREATE MATERIALIZED VIEW pg_temp.v AS SELECT 1", true, true},
		{"CREATE SEQUENCE pg_temp.s", true, true},
		{"CREATE FUNCTION pg_temp.f() RETURNS int LANGUAGE sql AS 'SELECT 1'", true, true},
		{"CREATE INDEX ON pg_temp.t (a)", true, true},
		{"ALTER TABLE pg_temp.t ADD COLUMN b int", true, true},
		{"SELECT 1 AS a INTO pg_temp.x", true, true},
		{"SELECT * INTO TEMP x FROM t", true, true},
		{"SELECT * INTO TABLE pg_temp.x FROM t", true, true},
		{"INSERT INTO pg_temp.t VALUES (1)", true, true},
		{"WITH w AS (INSERT INTO pg_temp.t VALUES (1) RETURNING *) SELECT * FROM w", true, true},
		{"CREATE TEMP TABLE x (a int)", true, true},
		{"CREATE TEMP VIEW v AS SELECT 1", true, true},
		{"EXPLAIN ANALYZE CREATE TABLE pg_temp.t AS SELECT 1", true, true},
		{"UPDATE pg_settings SET setting = 'x' WHERE name = 'search_path'", true, false},
		{"update pg_catalog.pg_settings set setting = 'x' where name = 'search_path'", true, false},
		{`UPDATE "pg_settings" SET setting = 'x' WHERE name = 'search_path'`, true, false},
		{"WITH s AS (UPDATE pg_settings SET setting = 'x' WHERE name = 'work_mem' RETURNING 1) SELECT * FROM s", true, false},
		// Reads, and names that only look alike.
		{"SELECT * FROM pg_temp.t", false, false},
		{"SELECT * FROM pg_settings WHERE name = 'search_path'", false, false},
		{"CREATE TABLE pg_temporary.t (a int)", false, false},
		{"CREATE TABLE pg_temp_x.t (a int)", false, false},
		{"CREATE TABLE t (pg_temp int)", false, false},
		{"INSERT INTO t SELECT name FROM settings", false, false},
		{"UPDATE my_settings SET v = 1", false, false},
		{"CREATE VIEW v AS SELECT app_use_tenant('b')", false, false},
	}
	for _, tc := range cases {
		t.Run(tc.sql, func(t *testing.T) {
			r := Parse(tc.sql)
			if len(r.Statements) != 1 {
				t.Fatalf("%d statements", len(r.Statements))
			}
			st := r.Statements[0]
			if st.Taints != tc.taints || st.TempObjects != tc.temp {
				t.Errorf("Taints %v TempObjects %v, want %v %v", st.Taints, st.TempObjects, tc.taints, tc.temp)
			}
		})
	}
}

// TestSessionNeutral: built-ins whose calls leave the session as it was, and those that do
// not or that the scanner does not know.
func TestSessionNeutral(t *testing.T) {
	for _, n := range []string{"lower", "count", "now", "coalesce", "random", "nextval", "currval",
		"pg_backend_pid", "pg_advisory_xact_lock", "pg_is_in_recovery", "pg_stat_get_xact_numscans"} {
		if !SessionNeutral(n) {
			t.Errorf("%s: not neutral", n)
		}
	}
	for _, n := range []string{"set_config", "setseed", "pg_advisory_lock", "pg_try_advisory_lock_shared",
		"dblink_connect", "dblink_exec", "lo_open", "app_use_tenant", "query_to_xml", "myschema.lower"} {
		if SessionNeutral(n) {
			t.Errorf("%s: neutral", n)
		}
	}
}
