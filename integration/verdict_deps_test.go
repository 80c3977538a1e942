package integration

// Regression tests for what a cached read depends on (issue 10): the base
// tables behind views, the tables a write reaches without naming them
// (foreign-key actions, triggers, rules), and the catalog that DDL changes.
// Every read here is cached under Options.Default{Soft: time.Minute}; each
// test first checks that the read really is cached, then that a write
// through the same *sql.DB is seen at once.

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight"
)

// cachedRead is one read through a Shield that caches by default.
type cachedRead struct {
	t   *testing.T
	ctx context.Context
	db  *sql.DB
	sh  *sqlflight.Shield
}

func newCachedRead(t *testing.T, dsn string) *cachedRead {
	db, sh := openFlight(t, dsn, sqlflight.Options{Default: sqlflight.Policy{Soft: time.Minute}})
	return &cachedRead{t: t, ctx: testContext(t, testTimeout), db: db, sh: sh}
}

// warm reads query twice and fails unless the second read came from the
// cache: what follows tests invalidation, not the absence of a cache.
func (c *cachedRead) warm(query string, args ...any) string {
	c.t.Helper()
	v := readString(c.t, c.ctx, c.db, query, args...)
	hits := c.sh.Stats().FreshHits
	if again := readString(c.t, c.ctx, c.db, query, args...); again != v {
		c.t.Fatalf("%s: %q then %q with no write between", abbrev(query), v, again)
	}
	if c.sh.Stats().FreshHits == hits {
		c.t.Fatalf("%s: the second read was not a cache hit, so this test shows nothing: %s", abbrev(query), statsString(c.sh.Stats()))
	}
	return v
}

// expect reads query and fails unless it returns want.
func (c *cachedRead) expect(after, want, query string, args ...any) {
	c.t.Helper()
	if got := readString(c.t, c.ctx, c.db, query, args...); got != want {
		c.t.Errorf("after %s: %s returned %q, want %q (a stale cached result)", after, abbrev(query), got, want)
	}
}

func (c *cachedRead) write(stmt string) {
	c.t.Helper()
	mustExec(c.t, c.db, stmt)
}

// TestVerdictViews: a cached read of a view (and of a view over a view)
// sees a write to its base table through the same *sql.DB at once; a view
// over a volatile function is never cached; neither are system views whose
// rows change without a write through the Shield (pg_locks, pg_sequences,
// pg_prepared_xacts).
func TestVerdictViews(t *testing.T) {
	base := postgresDSN(t)
	admin := openRaw(t, base)
	forEachExecMode(t, base, func(t *testing.T, dsn string) {
		schema, setup := newSchema(t, admin, base)
		mustExec(t, setup, hitsDDL,
			`CREATE TABLE base_t (id int PRIMARY KEY, v text NOT NULL)`,
			`INSERT INTO base_t VALUES (1, 'one')`,
			`CREATE VIEW v1 AS SELECT id, v FROM base_t`,
			`CREATE VIEW v2 AS SELECT id, upper(v) AS v FROM v1`,
			`CREATE FUNCTION bump() RETURNS int `+bumpBody(schema, "1"),
			`CREATE VIEW vf AS SELECT bump()::text AS x`,
			`CREATE SEQUENCE sq`)
		c := newCachedRead(t, withDSNParams(t, dsn, "search_path", schema+",public"))

		r1, r2 := `SELECT v FROM v1 WHERE id = 1`, `SELECT v FROM v2 WHERE id = 1`
		c.warm(r1)
		c.warm(r2)
		c.write(`UPDATE base_t SET v = 'uno' WHERE id = 1`)
		c.expect("UPDATE base_t", "uno", r1)
		c.expect("UPDATE base_t", "UNO", r2)

		runsEveryTime(t, c.ctx, c.db, func() int64 { return hitsIn(t, admin, schema) }, 3, `SELECT x FROM vf`)

		// pg_sequences: nextval through a raw client, outside the Shield.
		seqRead := `SELECT last_value::text FROM pg_sequences WHERE schemaname = $1 AND sequencename = 'sq'`
		scalar[int64](t, c.ctx, admin, fmt.Sprintf(`SELECT nextval('%s.sq')`, schema))
		if got := readString(t, c.ctx, c.db, seqRead, schema); got != "1" {
			t.Fatalf("pg_sequences.last_value = %s, want 1", got)
		}
		scalar[int64](t, c.ctx, admin, fmt.Sprintf(`SELECT nextval('%s.sq')`, schema))
		c.expect("nextval on another session", "2", seqRead, schema)

		// pg_locks: an advisory lock taken by another session.
		key := advisoryKey(schema)
		lockRead := `SELECT count(*)::text FROM pg_locks WHERE locktype = 'advisory' AND ((classid::bigint << 32) | objid::bigint) = $1`
		if got := readString(t, c.ctx, c.db, lockRead, key); got != "0" {
			t.Fatalf("advisory lock count %s before locking, want 0", got)
		}
		holder, err := admin.Conn(c.ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer holder.Close()
		mustExec(t, holder, fmt.Sprintf(`SELECT pg_advisory_lock(%d)`, key))
		defer mustExec(t, holder, fmt.Sprintf(`SELECT pg_advisory_unlock(%d)`, key))
		c.expect("pg_advisory_lock on another session", "1", lockRead, key)

		// pg_prepared_xacts: the server has no prepared transactions to
		// make (max_prepared_transactions = 0 by default), so only the
		// routing can be checked: two reads, no cache.
		before := c.sh.Stats()
		for range 2 {
			readString(t, c.ctx, c.db, `SELECT count(*)::text FROM pg_prepared_xacts`)
		}
		if after := c.sh.Stats(); after.FreshHits != before.FreshHits || after.Fills != before.Fills {
			t.Errorf("pg_prepared_xacts was cached: %s", statsString(after))
		}
	})
}

// TestVerdictUnnamedWrites: writes reach tables the statement does not
// name: ON DELETE CASCADE (two levels), ON DELETE SET NULL, ON UPDATE
// CASCADE children, a trigger on one table writing another, a rule on one
// table writing another. A cached read of the table reached sees the write
// made through the same *sql.DB at once.
func TestVerdictUnnamedWrites(t *testing.T) {
	base := postgresDSN(t)
	admin := openRaw(t, base)
	forEachExecMode(t, base, func(t *testing.T, dsn string) {
		schema, setup := newSchema(t, admin, base)
		mustExec(t, setup,
			`CREATE TABLE parent (id int PRIMARY KEY)`,
			`CREATE TABLE c_del (id int PRIMARY KEY, pid int REFERENCES parent ON DELETE CASCADE)`,
			`CREATE TABLE gc_del (id int PRIMARY KEY, cid int REFERENCES c_del ON DELETE CASCADE)`,
			`CREATE TABLE c_null (id int PRIMARY KEY, pid int REFERENCES parent ON DELETE SET NULL)`,
			`CREATE TABLE c_upd (id int PRIMARY KEY, pid int REFERENCES parent ON UPDATE CASCADE)`,
			`INSERT INTO parent VALUES (1), (2), (3)`,
			`INSERT INTO c_del VALUES (1, 1)`,
			`INSERT INTO gc_del VALUES (1, 1)`,
			`INSERT INTO c_null VALUES (1, 2)`,
			`INSERT INTO c_upd VALUES (1, 3)`,
			`CREATE TABLE trig_src (id int PRIMARY KEY)`,
			`CREATE TABLE trig_dst (id int PRIMARY KEY)`,
			fmt.Sprintf(`CREATE FUNCTION copy_row() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
	INSERT INTO %s.trig_dst VALUES (NEW.id);
	RETURN NEW;
END
$fn$`, schema),
			`CREATE TRIGGER copy_row AFTER INSERT ON trig_src FOR EACH ROW EXECUTE FUNCTION copy_row()`,
			`CREATE TABLE rule_src (id int PRIMARY KEY)`,
			`CREATE TABLE rule_dst (id int PRIMARY KEY)`,
			`CREATE RULE copy_row AS ON INSERT TO rule_src DO ALSO INSERT INTO rule_dst VALUES (NEW.id)`)
		c := newCachedRead(t, withDSNParams(t, dsn, "search_path", schema+",public"))

		reads := map[string]string{
			"c_del":    `SELECT count(*)::text FROM c_del`,
			"gc_del":   `SELECT count(*)::text FROM gc_del`,
			"c_null":   `SELECT count(pid)::text FROM c_null`,
			"c_upd":    `SELECT pid::text FROM c_upd WHERE id = 1`,
			"trig_dst": `SELECT count(*)::text FROM trig_dst`,
			"rule_dst": `SELECT count(*)::text FROM rule_dst`,
		}
		for _, q := range reads {
			c.warm(q)
		}
		c.write(`DELETE FROM parent WHERE id = 1`)
		c.expect("DELETE FROM parent (ON DELETE CASCADE)", "0", reads["c_del"])
		c.expect("DELETE FROM parent (ON DELETE CASCADE, two levels down)", "0", reads["gc_del"])
		c.write(`DELETE FROM parent WHERE id = 2`)
		c.expect("DELETE FROM parent (ON DELETE SET NULL)", "0", reads["c_null"])
		c.write(`UPDATE parent SET id = 30 WHERE id = 3`)
		c.expect("UPDATE parent (ON UPDATE CASCADE)", "30", reads["c_upd"])
		c.write(`INSERT INTO trig_src VALUES (1)`)
		c.expect("INSERT INTO trig_src (its trigger writes trig_dst)", "1", reads["trig_dst"])
		c.write(`INSERT INTO rule_src VALUES (1)`)
		c.expect("INSERT INTO rule_src (its rule writes rule_dst)", "1", reads["rule_dst"])
	})
}

// TestVerdictDDLInvalidatesCatalogReads: cached reads of
// information_schema.columns and pg_attribute see ALTER TABLE … ADD,
// RENAME and DROP COLUMN made through the same *sql.DB at once.
func TestVerdictDDLInvalidatesCatalogReads(t *testing.T) {
	base := postgresDSN(t)
	admin := openRaw(t, base)
	forEachExecMode(t, base, func(t *testing.T, dsn string) {
		schema, setup := newSchema(t, admin, base)
		mustExec(t, setup, `CREATE TABLE shape (a int, b int)`)
		c := newCachedRead(t, withDSNParams(t, dsn, "search_path", schema+",public"))
		infoSchema := `SELECT string_agg(column_name::text, ',' ORDER BY ordinal_position) FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'shape'`
		pgAttr := `SELECT string_agg(attname::text, ',' ORDER BY attnum) FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped`
		rel := schema + ".shape"
		check := func(after, want string) {
			t.Helper()
			c.expect(after, want, infoSchema, schema)
			c.expect(after, want, pgAttr, rel)
		}
		if got := c.warm(infoSchema, schema); got != "a,b" {
			t.Fatalf("information_schema.columns: %q, want a,b", got)
		}
		if got := c.warm(pgAttr, rel); got != "a,b" {
			t.Fatalf("pg_attribute: %q, want a,b", got)
		}
		c.write(`ALTER TABLE shape ADD COLUMN c int`)
		check("ADD COLUMN", "a,b,c")
		c.write(`ALTER TABLE shape RENAME COLUMN c TO d`)
		check("RENAME COLUMN", "a,b,d")
		c.write(`ALTER TABLE shape DROP COLUMN b`)
		check("DROP COLUMN", "a,d")
	})
}
