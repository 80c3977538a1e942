package integration

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sqlflight/sqlflight"
)

// The corpus differential test.
//
// testdata/corpus/*.sql holds real-world statements (ORM output, tricky
// PostgreSQL syntax, and the classes of issue 10: volatile user functions,
// functions named like keywords, volatile built-ins, operators, attribute
// notation, views, system views, per-session functions, time words, writes,
// catalog reads). PostgreSQL is the oracle for each statement: whether it
// writes (it is run inside BEGIN READ ONLY … ROLLBACK: SQLSTATE 25006 means
// it writes) and how volatile the functions it calls are (pg_proc on the
// live server). sqlflight's explanation must agree:
//
//   - a statement that writes, calls a VOLATILE function (not vouched for by
//     its own pure= annotation) or reads a per-session value is never shared;
//   - a time-dependent statement, or one calling a user-defined IMMUTABLE or
//     STABLE function, is shared in flight but cached only under its own
//     soft=/ttl= annotation (never under Options.Default's TTL);
//   - a plain read-only read calling only immutable/stable built-ins is
//     shared (unless listed as known-conservative in the corpus).
//
// Corpus format: an entry starts with one or more header lines
//
//	-- @class NAME          class for the summary (default: the file's name)
//	-- @calls fn1, s.fn2    functions the statement really calls (through
//	                        operators, casts, attribute notation, views too)
//	-- @args 1, 'x', null   arguments for $1, $2, … (default: NULL for each)
//	-- @session             reads a per-session value
//	-- @time                time-dependent
//	-- @expect never|any    override: never shared (session state, COPY
//	                        protocol…) or not asserted
//	-- @conservative WHY    a plain read that sqlflight may decline to share
//	-- @nooracle            do not run it (COPY TO STDOUT)
//
// and the statement follows up to the next header line or the end of file.
// Tables, views, functions and operators the statements name live in a
// fixture schema made for the run and set as search_path in the DSN.

const corpusDir = "testdata/corpus"

type corpusEntry struct {
	file, class  string
	line         int
	sql          string
	calls        []string
	args         []any
	argsGiven    bool
	session      bool
	timeDep      bool
	expect       string
	conservative string
	noOracle     bool
}

func (e *corpusEntry) where() string { return fmt.Sprintf("%s:%d", e.file, e.line) }

var (
	corpusHeader = regexp.MustCompile(`^--\s*@(\w+)\s*(.*)$`)
	corpusParam  = regexp.MustCompile(`\$(\d+)`)
	corpusPure   = regexp.MustCompile(`(?i)\bpure=([\w.,]+)`)
	corpusTTL    = regexp.MustCompile(`(?i)\b(soft|ttl)=\d`)
)

func loadCorpus(t *testing.T) []*corpusEntry {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(corpusDir, "*.sql"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no corpus files in %s: %v", corpusDir, err)
	}
	sort.Strings(files)
	var out []*corpusEntry
	for _, f := range files {
		out = append(out, parseCorpusFile(t, f)...)
	}
	return out
}

func parseCorpusFile(t *testing.T, path string) []*corpusEntry {
	t.Helper()
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	base := strings.TrimSuffix(filepath.Base(path), ".sql")
	defClass := base
	if i := strings.IndexByte(base, '_'); i > 0 {
		if _, err := strconv.Atoi(base[:i]); err == nil {
			defClass = base[i+1:]
		}
	}
	var (
		out  []*corpusEntry
		cur  *corpusEntry
		body []string
		// hasSQL: the current entry has statement text, so the next
		// header line starts a new entry (comment lines between header
		// lines do not).
		hasSQL bool
	)
	flush := func() {
		if cur == nil {
			return
		}
		cur.sql = strings.TrimSpace(strings.Join(body, "\n"))
		if cur.sql == "" {
			t.Fatalf("%s: entry without a statement", cur.where())
		}
		if !cur.argsGiven {
			n := 0
			for _, m := range corpusParam.FindAllStringSubmatch(cur.sql, -1) {
				if k, _ := strconv.Atoi(m[1]); k > n {
					n = k
				}
			}
			cur.args = make([]any, n)
		}
		out = append(out, cur)
		cur, body = nil, nil
	}
	sc := bufio.NewScanner(fh)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	ln := 0
	for sc.Scan() {
		ln++
		line := sc.Text()
		m := corpusHeader.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			trimmed := strings.TrimSpace(line)
			isSQL := trimmed != "" && !strings.HasPrefix(trimmed, "--")
			if cur != nil {
				body = append(body, line)
				hasSQL = hasSQL || isSQL
			} else if isSQL {
				t.Fatalf("%s:%d: statement text before any header", path, ln)
			}
			continue
		}
		if cur == nil || hasSQL {
			flush()
			cur = &corpusEntry{file: filepath.Base(path), line: ln, class: defClass}
			hasSQL = false
		}
		key, val := m[1], strings.TrimSpace(m[2])
		switch key {
		case "class":
			cur.class = val
		case "calls":
			for _, f := range strings.Split(val, ",") {
				if f = strings.TrimSpace(f); f != "" {
					cur.calls = append(cur.calls, strings.ToLower(f))
				}
			}
		case "args":
			cur.argsGiven = true
			cur.args = parseCorpusArgs(t, cur.where(), val)
		case "session":
			cur.session = true
		case "time":
			cur.timeDep = true
		case "expect":
			if val != "never" && val != "any" {
				t.Fatalf("%s: @expect %q (want never or any)", cur.where(), val)
			}
			cur.expect = val
		case "conservative":
			if val == "" {
				t.Fatalf("%s: @conservative needs a reason", cur.where())
			}
			cur.conservative = val
		case "nooracle":
			cur.noOracle = true
		default:
			t.Fatalf("%s:%d: unknown header @%s", path, ln, key)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	flush()
	return out
}

// parseCorpusArgs reads a comma-separated list of SQL-ish literals: integers,
// numbers, 'quoted strings' (” inside), true/false and null.
func parseCorpusArgs(t *testing.T, where, s string) []any {
	var out []any
	for s = strings.TrimSpace(s); s != ""; {
		var v any
		if s[0] == '\'' {
			var b strings.Builder
			i := 1
			for ; i < len(s); i++ {
				if s[i] == '\'' {
					if i+1 < len(s) && s[i+1] == '\'' {
						b.WriteByte('\'')
						i++
						continue
					}
					break
				}
				b.WriteByte(s[i])
			}
			if i >= len(s) {
				t.Fatalf("%s: unterminated string in @args", where)
			}
			v, s = b.String(), s[i+1:]
		} else {
			tok := s
			if i := strings.IndexByte(s, ','); i >= 0 {
				tok = s[:i]
			}
			s = s[len(tok):]
			tok = strings.TrimSpace(tok)
			switch strings.ToLower(tok) {
			case "null":
				v = nil
			case "true":
				v = true
			case "false":
				v = false
			default:
				if n, err := strconv.ParseInt(tok, 10, 64); err == nil {
					v = n
				} else if f, err := strconv.ParseFloat(tok, 64); err == nil {
					v = f
				} else {
					t.Fatalf("%s: bad @args value %q", where, tok)
				}
			}
		}
		out = append(out, v)
		s = strings.TrimSpace(s)
		if s != "" {
			if s[0] != ',' {
				t.Fatalf("%s: @args: expected a comma before %q", where, s)
			}
			s = strings.TrimSpace(s[1:])
		}
	}
	return out
}

// oracleVerdict is what PostgreSQL says about one statement.
type oracleVerdict struct {
	writes    bool     // SQLSTATE 25006 (or 25001: cannot run in a transaction block)
	sqlstate  string   // the error the read-only run ended with, if any
	volatile  []string // called functions pg_proc says are VOLATILE
	userFuncs []string // called non-built-in IMMUTABLE/STABLE functions
}

// category of a statement, from the oracle and the corpus annotations, in
// order of precedence.
const (
	catWrite     = "write"
	catVolatile  = "volatile"
	catSession   = "per-session"
	catNever     = "never (annotated)"
	catPure      = "volatile vouched by pure="
	catTime      = "time-dependent"
	catUserFunc  = "user immutable/stable fn"
	catPlain     = "plain read"
	catUnchecked = "unchecked"
)

type corpusOracle struct {
	conn   *pgx.Conn
	schema string
	super  bool
	vol    map[string]procInfo
}

type procInfo struct {
	volatility byte // 'i', 's', 'v'
	builtin    bool
}

func (o *corpusOracle) proc(ctx context.Context, name string) (procInfo, error) {
	if p, ok := o.vol[name]; ok {
		return p, nil
	}
	schema, fn := "", name
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		schema, fn = name[:i], name[i+1:]
	}
	// The most volatile overload with that name wins: the conservative view.
	var (
		v       *string
		builtin *bool
	)
	err := o.conn.QueryRow(ctx, `
		SELECT max(p.provolatile)::text, bool_and(p.oid < 16384)
		FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
		WHERE p.proname = $1
		  AND CASE WHEN $2 = '' THEN n.nspname IN ('pg_catalog', 'information_schema', $3)
		           ELSE n.nspname = $2 END`,
		fn, schema, o.schema).Scan(&v, &builtin)
	if err != nil {
		return procInfo{}, err
	}
	if v == nil {
		return procInfo{}, fmt.Errorf("function %q not found in pg_proc", name)
	}
	p := procInfo{volatility: (*v)[0], builtin: *builtin}
	o.vol[name] = p
	return p, nil
}

// judge runs e inside a read-only transaction that is rolled back, and looks
// up the volatility of the functions e says it calls.
func (o *corpusOracle) judge(ctx context.Context, e *corpusEntry) (oracleVerdict, error) {
	var v oracleVerdict
	for _, fn := range e.calls {
		p, err := o.proc(ctx, fn)
		if err != nil {
			return v, err
		}
		switch {
		case p.volatility == 'v':
			v.volatile = append(v.volatile, fn)
		case !p.builtin:
			v.userFuncs = append(v.userFuncs, fn)
		}
	}
	if e.noOracle {
		return v, nil
	}
	if _, err := o.conn.Exec(ctx, "BEGIN READ ONLY"); err != nil {
		return v, err
	}
	defer func() {
		// Session-level advisory locks survive the rollback.
		_, _ = o.conn.Exec(context.Background(), "ROLLBACK; SELECT pg_advisory_unlock_all()", pgx.QueryExecModeSimpleProtocol)
	}()
	setup := "SET LOCAL statement_timeout = '20s'"
	if o.super {
		setup += "; SET LOCAL track_functions = 'all'"
	}
	if _, err := o.conn.Exec(ctx, setup, pgx.QueryExecModeSimpleProtocol); err != nil {
		return v, err
	}
	// The server keeps its function counters pending across transactions:
	// compare before and after.
	var before map[string]int64
	if o.super {
		var err error
		if before, err = o.functionCalls(ctx); err != nil {
			return v, err
		}
	}
	args := append([]any{pgx.QueryExecModeSimpleProtocol}, e.args...)
	_, err := o.conn.Exec(ctx, e.sql, args...)
	var pe *pgconn.PgError
	switch {
	case err == nil:
	case errors.As(err, &pe) && (pe.Code == "25006" || pe.Code == "25001"):
		v.writes, v.sqlstate = true, pe.Code
		return v, nil
	default:
		return v, fmt.Errorf("the statement fails on the server: %w", err)
	}
	if !o.super {
		return v, nil
	}
	// Cross-check the annotation: every fixture function the server counted
	// as called must be listed (SQL functions that were inlined are not
	// counted; the annotation covers them).
	after, err := o.functionCalls(ctx)
	if err != nil {
		return v, err
	}
	for fn, n := range after {
		if n > before[fn] && !corpusListed(e.calls, fn, o.schema) {
			return v, fmt.Errorf("the server saw a call of %s, which @calls does not list", fn)
		}
	}
	return v, nil
}

// functionCalls returns the calls of fixture functions that this session's
// statistics counted (SQL functions that were inlined are not counted).
func (o *corpusOracle) functionCalls(ctx context.Context) (map[string]int64, error) {
	rows, err := o.conn.Query(ctx, `SELECT funcname, calls FROM pg_stat_xact_user_functions WHERE schemaname = $1`, o.schema)
	if err != nil {
		return nil, err
	}
	m := map[string]int64{}
	var (
		fn string
		n  int64
	)
	_, err = pgx.ForEachRow(rows, []any{&fn, &n}, func() error { m[fn] += n; return nil })
	return m, err
}

func corpusListed(calls []string, fn, schema string) bool {
	for _, c := range calls {
		if c == fn || c == schema+"."+fn || strings.HasSuffix(c, "."+fn) {
			return true
		}
	}
	return false
}

func containsFold(list []string, s string) bool {
	for _, x := range list {
		if strings.EqualFold(x, s) || strings.HasSuffix(strings.ToLower(x), "."+strings.ToLower(s)) ||
			strings.HasSuffix(strings.ToLower(s), "."+strings.ToLower(x)) {
			return true
		}
	}
	return false
}

// categorize applies the rules: the first category that holds decides.
func categorize(e *corpusEntry, v oracleVerdict) string {
	var pure []string
	if m := corpusPure.FindStringSubmatch(e.sql); m != nil {
		pure = strings.Split(m[1], ",")
	}
	vouched := len(v.volatile) > 0
	for _, fn := range v.volatile {
		if !containsFold(pure, fn) {
			vouched = false
		}
	}
	switch {
	case e.expect == "any":
		return catUnchecked
	case v.writes:
		return catWrite
	case len(v.volatile) > 0 && !vouched:
		return catVolatile
	case e.session:
		return catSession
	case e.expect == "never":
		return catNever
	case vouched:
		return catPure
	case e.timeDep:
		return catTime
	case len(v.userFuncs) > 0:
		return catUserFunc
	}
	return catPlain
}

// check returns what is wrong with x for an entry of category cat, or "".
func check(e *corpusEntry, cat string, x sqlflight.Explanation) string {
	annotatedTTL := corpusTTL.MatchString(e.sql)
	switch cat {
	case catWrite, catVolatile, catSession, catNever:
		if x.Shared {
			return "shared, but must never be"
		}
	case catTime, catUserFunc:
		if !x.Shared {
			return "not shared, but must be shared in flight"
		}
		if x.Cached && !annotatedTTL {
			return "cached under the default TTL, but only its own soft=/ttl= may cache it"
		}
	case catPure:
		if !x.Shared {
			return "not shared, though pure= vouches for its volatile functions"
		}
	case catPlain:
		if !x.Shared && e.conservative == "" {
			return "not shared, but it is a plain read of immutable/stable built-ins"
		}
	}
	if x.Cached && !x.Shared {
		return "cached but not shared"
	}
	return ""
}

// corpusFixture creates the schema the corpus reads and writes. %[1]s is
// the schema name.
const corpusFixture = `
CREATE SCHEMA %[1]s;
SET search_path = %[1]s;

CREATE TABLE orgs (id serial PRIMARY KEY, name text NOT NULL, parent_id int REFERENCES orgs(id));
CREATE TABLE users (
	id bigserial PRIMARY KEY, email text UNIQUE NOT NULL, name text, org_id int REFERENCES orgs(id),
	"createdAt" timestamptz NOT NULL DEFAULT now(), updated_at timestamptz, deleted_at timestamptz,
	profile jsonb NOT NULL DEFAULT '{}', tags text[] NOT NULL DEFAULT '{}', age int, active boolean DEFAULT true);
CREATE TABLE orders (
	id bigserial PRIMARY KEY, user_id bigint REFERENCES users(id) ON DELETE CASCADE, total numeric(12,2),
	status text NOT NULL DEFAULT 'new', created_at timestamptz NOT NULL DEFAULT now(), meta json);
CREATE TABLE order_items (
	id bigserial PRIMARY KEY, order_id bigint REFERENCES orders(id) ON DELETE CASCADE, sku text, qty int, price numeric);
CREATE TABLE products (
	id serial PRIMARY KEY, sku text UNIQUE, name text, price numeric, attrs jsonb, search tsvector, category text);
CREATE TABLE events (id bigserial PRIMARY KEY, kind text, payload jsonb, at timestamptz DEFAULT now(), during tstzrange);
CREATE TABLE "Weird Table" ("select" int, "from" text, "a""b" int, "ünï" text, "CamelCol" int);
CREATE TABLE "order" (id int PRIMARY KEY, "group" text, "user" int, "limit" int);
CREATE TABLE audit_log (id bigserial PRIMARY KEY, tbl text, op text, at timestamptz DEFAULT clock_timestamp());
CREATE TABLE counters (name text PRIMARY KEY, n int NOT NULL DEFAULT 0);
CREATE TABLE kv (k text PRIMARY KEY, v text, expires_at timestamptz);
CREATE TABLE accounts (id int PRIMARY KEY, balance numeric NOT NULL DEFAULT 0, owner text);
CREATE TABLE documents (id int PRIMARY KEY, body text, version int DEFAULT 1);
CREATE TABLE tree (id int PRIMARY KEY, parent_id int, label text);
CREATE TABLE sessions (id uuid PRIMARY KEY, user_id bigint, data bytea, valid_until timestamptz);
CREATE TABLE measurements (city_id int, logdate date, peaktemp int) PARTITION BY RANGE (logdate);
CREATE TABLE measurements_2024 PARTITION OF measurements FOR VALUES FROM ('2024-01-01') TO ('2025-01-01');
CREATE TABLE staging_users (email text, name text);
CREATE SEQUENCE order_seq;
CREATE INDEX users_org ON users(org_id);

INSERT INTO orgs (name) VALUES ('acme'), ('globex');
INSERT INTO users (email, name, org_id, profile, tags, age) VALUES
	('a@x.io', 'Ann', 1, '{"plan": "pro", "address": {"city": "Oslo"}}', '{admin,beta}', 31),
	('b@x.io', 'Bob', 2, '{"plan": "free"}', '{}', 42);
INSERT INTO orders (user_id, total, status) VALUES (1, 10.5, 'paid'), (1, 20, 'new'), (2, 7, 'paid');
INSERT INTO order_items (order_id, sku, qty, price) VALUES (1, 'A-1', 2, 5.25), (2, 'B-2', 1, 20);
INSERT INTO products (sku, name, price, attrs, category) VALUES ('A-1', 'Anvil', 5.25, '{"color": "black"}', 'tools');
INSERT INTO counters VALUES ('hits', 0);
INSERT INTO accounts VALUES (1, 100, 'ann'), (2, 50, 'bob');
INSERT INTO documents VALUES (1, 'hello', 1);
INSERT INTO tree VALUES (1, NULL, 'root'), (2, 1, 'child');
INSERT INTO "order" VALUES (1, 'g', 1, 10);

-- Functions the server can see into (SQL bodies) and cannot (plpgsql).
CREATE FUNCTION double_it(int) RETURNS int IMMUTABLE LANGUAGE sql AS 'SELECT $1 * 2';
CREATE FUNCTION user_email(bigint) RETURNS text STABLE LANGUAGE sql AS 'SELECT email FROM users WHERE id = $1';
CREATE FUNCTION org_size(int) RETURNS bigint STABLE LANGUAGE plpgsql AS $$
BEGIN RETURN (SELECT count(*) FROM users WHERE org_id = $1); END $$;
CREATE FUNCTION slugify(text) RETURNS text IMMUTABLE STRICT LANGUAGE sql
	BEGIN ATOMIC SELECT lower(regexp_replace($1, '[^a-zA-Z0-9]+', '-', 'g')); END;
CREATE FUNCTION plus_one(int) RETURNS int LANGUAGE sql AS 'SELECT $1 + 1';
CREATE FUNCTION log_access(text) RETURNS int VOLATILE LANGUAGE plpgsql AS $$
BEGIN INSERT INTO audit_log (tbl, op) VALUES ($1, 'read'); RETURN 1; END $$;
CREATE FUNCTION bump(text) RETURNS int LANGUAGE plpgsql AS $$
DECLARE r int; BEGIN UPDATE counters SET n = n + 1 WHERE name = $1 RETURNING n INTO r; RETURN r; END $$;
CREATE FUNCTION next_order_no() RETURNS bigint LANGUAGE sql AS $$ SELECT nextval('order_seq') $$;
CREATE FUNCTION pick_user() RETURNS SETOF users VOLATILE LANGUAGE sql AS 'SELECT * FROM users ORDER BY random() LIMIT 1';
CREATE FUNCTION active_users() RETURNS SETOF users STABLE LANGUAGE sql AS 'SELECT * FROM users WHERE deleted_at IS NULL';
CREATE FUNCTION user_orders(bigint) RETURNS TABLE (id bigint, total numeric) STABLE LANGUAGE plpgsql AS $$
BEGIN RETURN QUERY SELECT o.id, o.total FROM orders o WHERE o.user_id = $1; END $$;
CREATE FUNCTION read_only_plpgsql() RETURNS int LANGUAGE plpgsql AS $$ BEGIN RETURN 42; END $$;

-- Functions named like keywords (all VOLATILE by default).
CREATE FUNCTION "set"(int) RETURNS int LANGUAGE plpgsql AS $$
BEGIN UPDATE counters SET n = $1 WHERE name = 'hits'; RETURN $1; END $$;
CREATE FUNCTION zone(text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN INSERT INTO kv (k, v) VALUES ('zone', $1) ON CONFLICT (k) DO UPDATE SET v = excluded.v; RETURN $1; END $$;
CREATE FUNCTION freeze(int) RETURNS int LANGUAGE plpgsql AS $$
BEGIN UPDATE accounts SET balance = 0 WHERE id = $1; RETURN $1; END $$;
CREATE FUNCTION verbose() RETURNS int LANGUAGE plpgsql AS $$
BEGIN INSERT INTO audit_log (tbl, op) VALUES ('verbose', 'call'); RETURN 1; END $$;
CREATE FUNCTION columns() RETURNS SETOF text LANGUAGE plpgsql AS $$
BEGIN INSERT INTO audit_log (tbl, op) VALUES ('columns', 'call'); RETURN NEXT 'a'; END $$;
CREATE FUNCTION "of"(int) RETURNS int LANGUAGE sql AS 'SELECT $1';
CREATE FUNCTION "by"(int) RETURNS int LANGUAGE plpgsql AS $$ BEGIN PERFORM nextval('order_seq'); RETURN $1; END $$;
CREATE FUNCTION "window"(int) RETURNS int LANGUAGE sql AS 'SELECT $1';
CREATE FUNCTION "filter"(text) RETURNS text LANGUAGE sql AS 'SELECT $1';

-- Attribute notation: u.fullname calls fullname(u).
CREATE FUNCTION fullname(users) RETURNS text STABLE LANGUAGE sql AS $$ SELECT $1.name || ' <' || $1.email || '>' $$;
CREATE FUNCTION touch(users) RETURNS timestamptz LANGUAGE plpgsql AS $$
BEGIN UPDATE users SET updated_at = now() WHERE id = $1.id; RETURN now(); END $$;
CREATE FUNCTION lucky(users) RETURNS double precision LANGUAGE sql AS 'SELECT random()';

-- Operators over functions.
CREATE FUNCTION vol_eq(int, int) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN INSERT INTO audit_log (tbl, op) VALUES ('op', '==='); RETURN $1 = $2; END $$;
CREATE OPERATOR === (LEFTARG = int, RIGHTARG = int, FUNCTION = vol_eq);
CREATE FUNCTION jitter_add(int, int) RETURNS int LANGUAGE sql AS 'SELECT $1 + $2 + (random() * 0)::int';
CREATE OPERATOR +~ (LEFTARG = int, RIGHTARG = int, FUNCTION = jitter_add);
CREATE FUNCTION imm_close(numeric, numeric) RETURNS boolean IMMUTABLE LANGUAGE sql AS 'SELECT abs($1 - $2) < 1';
CREATE OPERATOR ~= (LEFTARG = numeric, RIGHTARG = numeric, FUNCTION = imm_close);

-- A cast through a volatile function.
CREATE TYPE tagged AS (label text, n int);
CREATE FUNCTION to_tagged(text) RETURNS tagged LANGUAGE plpgsql AS $$
BEGIN PERFORM nextval('order_seq'); RETURN ROW($1, 1)::tagged; END $$;
CREATE CAST (text AS tagged) WITH FUNCTION to_tagged(text);

-- Views.
CREATE VIEW v_active_users AS SELECT id, email, name FROM users WHERE deleted_at IS NULL;
CREATE VIEW v_user_totals AS SELECT u.id, u.email, sum(o.total) AS total FROM users u LEFT JOIN orders o ON o.user_id = u.id GROUP BY u.id;
CREATE VIEW v_nested AS SELECT * FROM v_user_totals WHERE total > 0;
CREATE VIEW v_random_user AS SELECT id, email, random() AS r FROM users;
CREATE VIEW v_sizes AS SELECT 'users' AS t, pg_total_relation_size('users') AS bytes;
CREATE VIEW v_logged AS SELECT id, log_access('users') AS logged FROM users;
CREATE VIEW v_today_orders AS SELECT * FROM orders WHERE created_at >= date_trunc('day', now());
CREATE VIEW v_emails AS SELECT id, user_email(id) AS email FROM users;
CREATE VIEW v_nested_random AS SELECT * FROM v_random_user WHERE r < 2;
CREATE VIEW v_backend AS SELECT pg_backend_pid() AS pid;
CREATE MATERIALIZED VIEW mv_order_totals AS SELECT user_id, sum(total) AS total FROM orders GROUP BY user_id;

-- A table with a trigger and one with a rule.
CREATE FUNCTION documents_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN NEW.version := OLD.version + 1; RETURN NEW; END $$;
CREATE TRIGGER documents_version BEFORE UPDATE ON documents FOR EACH ROW EXECUTE FUNCTION documents_version();
CREATE RULE kv_log AS ON DELETE TO kv DO ALSO INSERT INTO audit_log (tbl, op) VALUES ('kv', 'delete');
`

// TestCorpusDifferential checks sqlflight's explanation of every corpus
// statement against what PostgreSQL says about it.
func TestCorpusDifferential(t *testing.T) {
	entries := loadCorpus(t)
	base := postgresDSN(t)
	ctx := testContext(t, 10*time.Minute)
	id := uniqueID(t)
	schema := "corpus_" + id

	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Close(context.Background()) })
	if _, err := admin.Exec(ctx, fmt.Sprintf(corpusFixture, schema), pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatalf("corpus fixture: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
			t.Logf("cleanup: %v", err)
		}
	})

	dsn := withDSNParams(t, base, "search_path", schema+",public")
	oconn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = oconn.Close(context.Background()) })
	o := &corpusOracle{conn: oconn, schema: schema, vol: map[string]procInfo{}}
	if err := oconn.QueryRow(ctx, `SELECT rolsuper FROM pg_roles WHERE rolname = current_user`).Scan(&o.super); err != nil {
		t.Fatal(err)
	}
	if !o.super {
		t.Log("not a superuser: the @calls annotations are not cross-checked with track_functions")
	}

	db, _ := openFlight(t, dsn, sqlflight.Options{Default: sqlflight.Policy{Soft: time.Minute}})

	type tally struct{ n, bad int }
	byClass := map[string]*tally{}
	byCat := map[string]*tally{}
	bump := func(m map[string]*tally, k string, bad bool) {
		if m[k] == nil {
			m[k] = &tally{}
		}
		m[k].n++
		if bad {
			m[k].bad++
		}
	}
	var (
		mismatches   []string
		corpusErrors []string
		conservative []string
	)
	for _, e := range entries {
		v, err := o.judge(ctx, e)
		if err != nil {
			corpusErrors = append(corpusErrors, fmt.Sprintf("%s [%s] %s: %v", e.where(), e.class, abbrev(e.sql), err))
			continue
		}
		cat := categorize(e, v)
		x, err := sqlflight.ExplainDB(ctx, db, e.sql)
		if err != nil {
			mismatches = append(mismatches, fmt.Sprintf("%s [%s/%s] %s: explain: %v", e.where(), e.class, cat, abbrev(e.sql), err))
			bump(byClass, e.class, true)
			bump(byCat, cat, true)
			continue
		}
		why := check(e, cat, x)
		if why == "" && cat == catPlain && e.conservative != "" && !x.Shared {
			conservative = append(conservative, fmt.Sprintf("%s: %s", e.where(), e.conservative))
		}
		bump(byClass, e.class, why != "")
		bump(byCat, cat, why != "")
		if why != "" {
			mismatches = append(mismatches, fmt.Sprintf("%s [%s/%s] %s\n\t%s (shared=%v cached=%v verdict=%s reason=%q; oracle: writes=%v %s volatile=%v user=%v)",
				e.where(), e.class, cat, abbrev(e.sql), why, x.Shared, x.Cached, x.Verdict, x.Reason,
				v.writes, v.sqlstate, v.volatile, v.userFuncs))
		}
	}

	var b strings.Builder
	fmt.Fprintf(&b, "corpus: %d statements in %d classes; %d mismatches; %d corpus errors\n",
		len(entries), len(byClass), len(mismatches), len(corpusErrors))
	writeTally := func(title string, m map[string]*tally) {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		fmt.Fprintf(&b, "%s:\n", title)
		for _, k := range keys {
			fmt.Fprintf(&b, "  %-28s %4d statements %4d mismatches\n", k, m[k].n, m[k].bad)
		}
	}
	writeTally("by class", byClass)
	writeTally("by oracle category", byCat)
	if len(conservative) > 0 {
		fmt.Fprintf(&b, "known-conservative plain reads not shared: %d\n", len(conservative))
		for _, c := range conservative {
			fmt.Fprintf(&b, "  %s\n", c)
		}
	}
	t.Log("\n" + b.String())

	for _, c := range corpusErrors {
		t.Errorf("corpus error (fix the corpus or the fixture): %s", c)
	}
	for _, m := range mismatches {
		t.Errorf("mismatch: %s", m)
	}
}
