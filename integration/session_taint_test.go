package integration

// Session changes the scanner cannot see (issue 15, item 1): a tenant
// helper function that calls set_config for a row-level-security policy, an
// UPDATE of pg_settings, temporary objects created without the TEMP
// keyword. Each must make its connection bypass sharing, so that no session
// is served another session's rows — in one process and through the shared
// tier.

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlflight/sqlflight"
	"github.com/sqlflight/sqlflight/redistier"
)

// rlsEnv is a table under row-level security whose policy reads the
// setting app.tenant, the helper that sets it, and a role the policy
// applies to (the test's own superuser bypasses it).
type rlsEnv struct {
	dsn    string // the tenant role's DSN
	schema string
	table  string // schema-qualified
	bare   string
	helper string // schema-qualified tenant helper: helper(tenant text)
	admin  *sql.DB
	want   map[string]string // tenant → what read returns
}

// newRLSEnv creates the environment; lang is the helper's language: "sql"
// (a string body, VOLATILE by default), "plpgsql", or "atomic" (a
// SQL-standard body the server can see into).
func newRLSEnv(t *testing.T, base, lang string) *rlsEnv {
	t.Helper()
	id := uniqueID(t)
	e := &rlsEnv{schema: "rls_" + id, bare: "orders_" + id, admin: openRaw(t, base)}
	e.table = e.schema + "." + e.bare
	e.helper = e.schema + ".app_use_tenant"
	role := "rls_role_" + id
	e.dsn = dsnAsUser(t, base, role)
	var body string
	switch lang {
	case "sql":
		body = `LANGUAGE sql AS $$ SELECT set_config('app.tenant', t, false) $$`
	case "plpgsql":
		body = `LANGUAGE plpgsql AS $$ BEGIN PERFORM set_config('app.tenant', t, false); RETURN t; END $$`
	case "atomic":
		body = `LANGUAGE sql BEGIN ATOMIC SELECT set_config('app.tenant', t, false); END`
	default:
		t.Fatalf("helper language %q", lang)
	}
	mustExec(t, e.admin, fmt.Sprintf(`CREATE ROLE %s LOGIN`, role))
	cleanupExec(t, e.admin, fmt.Sprintf(`DROP OWNED BY %s`, role), fmt.Sprintf(`DROP ROLE IF EXISTS %s`, role))
	mustExec(t, e.admin,
		fmt.Sprintf(`CREATE SCHEMA %s`, e.schema),
		fmt.Sprintf(`GRANT USAGE ON SCHEMA %s TO %s`, e.schema, role),
		fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, tenant text NOT NULL, item text NOT NULL)`, e.table),
		fmt.Sprintf(`INSERT INTO %s VALUES (1, 'a', 'a-apple'), (2, 'b', 'b-bread'), (3, 'a', 'a-apricot'), (4, 'b', 'b-bagel'), (5, 'b', 'b-brie')`, e.table),
		fmt.Sprintf(`ALTER TABLE %s ENABLE ROW LEVEL SECURITY`, e.table),
		fmt.Sprintf(`CREATE POLICY tenant_rows ON %s USING (tenant = current_setting('app.tenant', true))`, e.table),
		fmt.Sprintf(`GRANT SELECT ON %s TO %s`, e.table, role),
		fmt.Sprintf(`CREATE FUNCTION %s(t text) RETURNS text %s`, e.helper, body))
	cleanupExec(t, e.admin, fmt.Sprintf(`DROP SCHEMA IF EXISTS %s CASCADE`, e.schema))
	var temp bool
	if err := e.admin.QueryRow(`SELECT has_database_privilege($1, current_database(), 'TEMP')`, role).Scan(&temp); err != nil || !temp {
		t.Fatalf("the tenant role cannot create temporary objects (the probe needs it): %v", err)
	}
	e.want = map[string]string{"a": "a-apple,a-apricot", "b": "b-bread,b-bagel,b-brie"}
	return e
}

// read is the tenant-agnostic read every session runs: the policy picks
// the rows. Its annotation caches it and names its table (a table under
// row-level security is otherwise "any table", which the shared tier
// leaves alone).
func (e *rlsEnv) read() string {
	return fmt.Sprintf(`/* sqlflight: ttl=1m tables=%s */ SELECT coalesce(string_agg(item, ',' ORDER BY id), '') FROM %s`, e.bare, e.table)
}

// choose runs the helper for tenant on c under ctx, by Query on odd rounds
// and by Exec on even ones.
func (e *rlsEnv) choose(t *testing.T, ctx context.Context, c *sql.Conn, tenant string, round int) {
	t.Helper()
	q := fmt.Sprintf(`SELECT %s($1)`, e.helper)
	if round%2 == 0 {
		if _, err := c.ExecContext(ctx, q, tenant); err != nil {
			t.Fatalf("choose %s: %v", tenant, err)
		}
		return
	}
	var got string
	if err := c.QueryRowContext(ctx, q, tenant).Scan(&got); err != nil || got != tenant {
		t.Fatalf("choose %s: %v %q", tenant, err, got)
	}
}

// dsnAsUser returns dsn connecting as user (trust authentication).
func dsnAsUser(t testing.TB, dsn, user string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		t.Fatalf("a postgres:// DSN is needed to connect as another role")
	}
	u.User = url.User(user)
	return u.String()
}

func sqlConn(t *testing.T, db *sql.DB) *sql.Conn {
	t.Helper()
	c, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// tenantRounds runs the reproduction: in each of 3 rounds session
// 1 chooses tenant a and session 2 tenant b, then both run the same read.
// It returns the reads that were served another tenant's rows.
func tenantRounds(t *testing.T, ctx context.Context, e *rlsEnv, c1, c2 *sql.Conn) int {
	t.Helper()
	wrong := 0
	for round := range 3 {
		e.choose(t, ctx, c1, "a", round)
		e.choose(t, ctx, c2, "b", round)
		for _, s := range []struct {
			tenant string
			c      *sql.Conn
		}{{"a", c1}, {"b", c2}} {
			if got := scalar[string](t, ctx, s.c, e.read()); got != e.want[s.tenant] {
				t.Errorf("round %d: tenant %s was served %q, its rows are %q", round, s.tenant, got, e.want[s.tenant])
				wrong++
			}
		}
	}
	return wrong
}

// TestTenantHelperChangesSession: a tenant helper (a SQL, plpgsql or
// SQL-standard function calling set_config) changes the session: the
// sessions of two tenants never see each other's rows.
func TestTenantHelperChangesSession(t *testing.T) {
	base := postgresDSN(t)
	for _, lang := range []string{"sql", "plpgsql", "atomic"} {
		t.Run(lang, func(t *testing.T) {
			e := newRLSEnv(t, base, lang)
			forEachExecMode(t, e.dsn, func(t *testing.T, dsn string) {
				db, sh := openFlight(t, dsn)
				ctx := testContext(t, testTimeout)
				if wrong := tenantRounds(t, ctx, e, sqlConn(t, db), sqlConn(t, db)); wrong != 0 {
					t.Errorf("%d wrong-tenant reads in 3 rounds; %s", wrong, statsString(sh.Stats()))
				}
				if sh.Stats().BypassReasons["session"] == 0 {
					t.Errorf("no read bypassed for a changed session: %s", statsString(sh.Stats()))
				}
			})
		})
	}
}

// TestTenantHelperChangesSessionTextOnly: a server that refuses the probe
// (a read-only default) leaves the scanner to judge: a function it does not
// know may change the session.
func TestTenantHelperChangesSessionTextOnly(t *testing.T) {
	e := newRLSEnv(t, postgresDSN(t), "sql")
	db, sh := openFlight(t, withDSNParams(t, e.dsn, "default_transaction_read_only", "on"))
	ctx := testContext(t, testTimeout)
	if wrong := tenantRounds(t, ctx, e, sqlConn(t, db), sqlConn(t, db)); wrong != 0 {
		t.Errorf("%d wrong-tenant reads in 3 rounds; %s", wrong, statsString(sh.Stats()))
	}
	x, err := sqlflight.ExplainDB(ctx, db, e.read())
	if err != nil {
		t.Fatal(err)
	}
	if x.Verified {
		t.Errorf("the scope was not text-only: %+v", x)
	}
}

// tierOptions are the options of the tests' Shields on the shared tier
// under prefix: the one place they are built.
func tierOptions(prefix string) sqlflight.Options {
	return sqlflight.Options{KeyPrefix: prefix, SharedSecret: "tenant tests share this fleet secret"}
}

// openTierPair opens two Shields (two instances) sharing one Redis under a
// fresh prefix, each with its own pool on dsn, named alike across the
// fleet. The second keeps nothing in its own cache: its hits come from the
// tier.
func openTierPair(t *testing.T, dsn string) (a *sql.DB, as *sqlflight.Shield, b *sql.DB, bs *sqlflight.Shield) {
	t.Helper()
	rdb, prefix := redisNamespace(t, "sqlflight-test-tenant")
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	open := func(o sqlflight.Options) (*sql.DB, *sqlflight.Shield) {
		s := sqlflight.New(o, sqlflight.Shared(redistier.New(rdb)))
		db := sql.OpenDB(s.SharedConnector(stdlib.GetConnector(*cfg), "tenants"))
		t.Cleanup(func() {
			_ = db.Close()
			_ = s.Close()
		})
		return db, s
	}
	a, as = open(tierOptions(prefix))
	o := tierOptions(prefix)
	o.MaxBytes, o.NegMaxBytes = 1, 1
	b, bs = open(o)
	return a, as, b, bs
}

// TestTenantHelperChangesSessionAcrossTheTier: the same through the shared
// tier, tenant a on one instance and tenant b on another.
func TestTenantHelperChangesSessionAcrossTheTier(t *testing.T) {
	e := newRLSEnv(t, postgresDSN(t), "sql")
	a, as, b, bs := openTierPair(t, e.dsn)
	ctx := testContext(t, testTimeout)
	if wrong := tenantRounds(t, ctx, e, sqlConn(t, a), sqlConn(t, b)); wrong != 0 {
		t.Errorf("%d wrong-tenant reads in 3 rounds; A: %s; B: %s", wrong, statsString(as.Stats()), statsString(bs.Stats()))
	}
}

// TestPgSettingsUpdateChangesSession: UPDATE pg_settings is set_config: two
// sessions that point search_path at different schemas that way read their
// own table of the same name.
func TestPgSettingsUpdateChangesSession(t *testing.T) {
	base := postgresDSN(t)
	admin := openRaw(t, base)
	id := uniqueID(t)
	tbl := "st_" + id
	for _, sch := range []string{"public", "sa_" + id, "sb_" + id} {
		if sch != "public" {
			mustExec(t, admin, "CREATE SCHEMA "+sch)
			cleanupExec(t, admin, "DROP SCHEMA IF EXISTS "+sch+" CASCADE")
		}
		mustExec(t, admin, fmt.Sprintf(`CREATE TABLE %s.%s (v text)`, sch, tbl),
			fmt.Sprintf(`INSERT INTO %s.%s VALUES ('%s')`, sch, tbl, sch))
	}
	cleanupExec(t, admin, "DROP TABLE IF EXISTS public."+tbl)
	forEachExecMode(t, base, func(t *testing.T, dsn string) {
		db, sh := openFlight(t, dsn)
		ctx := testContext(t, testTimeout)
		c1, c2 := sqlConn(t, db), sqlConn(t, db)
		read := fmt.Sprintf(`/* sqlflight: ttl=1m */ SELECT v FROM %s`, tbl)
		for _, s := range []struct {
			c      *sql.Conn
			schema string
		}{{c1, "sa_" + id}, {c2, "sb_" + id}} {
			if _, err := s.c.ExecContext(ctx, `UPDATE pg_settings SET setting = $1 WHERE name = 'search_path'`, s.schema); err != nil {
				t.Fatal(err)
			}
		}
		for _, s := range []struct {
			c      *sql.Conn
			schema string
		}{{c1, "sa_" + id}, {c2, "sb_" + id}} {
			if got := scalar[string](t, ctx, s.c, read); got != s.schema {
				t.Errorf("a session whose search_path is %s read %s's table; %s", s.schema, got, statsString(sh.Stats()))
			}
		}
	})
}

// TestTempSchemaChangesSession: objects created in pg_temp without the TEMP
// keyword shadow a table of the same name for their session alone.
func TestTempSchemaChangesSession(t *testing.T) {
	base := postgresDSN(t)
	admin := openRaw(t, base)
	tbl := "tt_" + uniqueID(t)
	mustExec(t, admin, fmt.Sprintf(`CREATE TABLE public.%s (v text)`, tbl), fmt.Sprintf(`INSERT INTO public.%s VALUES ('public')`, tbl))
	cleanupExec(t, admin, "DROP TABLE IF EXISTS public."+tbl)
	for _, create := range []string{
		`CREATE TABLE pg_temp.%s AS SELECT 'temp'::text AS v`,
		`CREATE VIEW pg_temp.%s AS SELECT 'temp'::text AS v`,
		`SELECT 'temp'::text AS v INTO pg_temp.%s`,
	} {
		t.Run(create, func(t *testing.T) {
			db, sh := openFlight(t, base)
			ctx := testContext(t, testTimeout)
			c1, c2 := sqlConn(t, db), sqlConn(t, db)
			if _, err := c1.ExecContext(ctx, fmt.Sprintf(create, tbl)); err != nil {
				t.Fatal(err)
			}
			read := fmt.Sprintf(`/* sqlflight: ttl=1m */ SELECT v FROM %s`, tbl)
			if got := scalar[string](t, ctx, c1, read); got != "temp" {
				t.Errorf("the session with the temporary object read %q; %s", got, statsString(sh.Stats()))
			}
			if got := scalar[string](t, ctx, c2, read); got != "public" {
				t.Errorf("another session read %q, the other session's temporary object; %s", got, statsString(sh.Stats()))
			}
		})
	}
}

// TestORMStatementsKeepSessionClean: what ORMs send — now(), count(),
// coalesce(), lower(), RETURNING, in and out of transactions — changes no
// session: a plain read on the same connection still shares.
func TestORMStatementsKeepSessionClean(t *testing.T) {
	base := postgresDSN(t)
	admin := openRaw(t, base)
	tbl := "orm_clean_" + uniqueID(t)
	mustExec(t, admin, fmt.Sprintf(`CREATE TABLE public.%s (id serial PRIMARY KEY, name text NOT NULL, created_at timestamptz, updated_at timestamptz, deleted_at timestamptz)`, tbl))
	cleanupExec(t, admin, "DROP TABLE IF EXISTS public."+tbl)
	db, sh := openFlight(t, base, sqlflight.Options{Default: sqlflight.Policy{Soft: time.Minute}})
	ctx := testContext(t, testTimeout)
	c := sqlConn(t, db)
	tx, err := c.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var id int64
	if err := tx.QueryRowContext(ctx, fmt.Sprintf(`INSERT INTO %s (name, created_at, updated_at) VALUES ($1, now(), now()) RETURNING "id"`, tbl), "Ada").Scan(&id); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		fmt.Sprintf(`UPDATE %s SET updated_at = now(), name = lower($1) WHERE id = $2 AND deleted_at IS NULL`, tbl),
		fmt.Sprintf(`SELECT count(*), coalesce(max(id), 0) FROM %s WHERE lower(name) = lower($1) AND $2::int > 0`, tbl),
	} {
		if _, err := tx.ExecContext(ctx, q, "ADA", id); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		fmt.Sprintf(`SELECT count(*) FROM %s WHERE created_at <= now() AND deleted_at IS NULL`, tbl),
		fmt.Sprintf(`SELECT coalesce(max(updated_at), now()) FROM %s`, tbl),
	} {
		if _, err := c.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if got := scalar[string](t, ctx, c, fmt.Sprintf(`SELECT name FROM %s WHERE id = $1`, tbl), id); got != "ada" {
			t.Fatalf("read %q", got)
		}
	}
	if st := sh.Stats(); st.BypassReasons["session"] != 0 || st.Flights == 0 || st.FreshHits == 0 {
		t.Errorf("ORM statements changed the session: %s", statsString(st))
	}
}
