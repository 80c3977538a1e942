package integration

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"strings"
	"testing"
	"time"

	stdlibv4 "github.com/jackc/pgx/v4/stdlib"
	"github.com/lib/pq"
	"github.com/uptrace/bun/driver/pgdriver"

	"github.com/sqlflight/sqlflight"
)

// PostgreSQL is what the server says, not a Go type: lib/pq, pgx v4's
// stdlib and bun's pgdriver reach the same server as pgx v5 and must get
// exactly its verdicts and write closures.

// otherParents are the PostgreSQL drivers other than pgx v5 the tests run
// through.
var otherParents = []string{"libpq", "pgx4", "pgdriver"}

// openParent opens a *sql.DB through a new Shield wrapping the named
// parent driver for dsn.
func openParent(t testing.TB, parent, dsn string, opts ...sqlflight.Option) (*sql.DB, *sqlflight.Shield) {
	t.Helper()
	var c driver.Connector
	switch parent {
	case "libpq":
		pc, err := pq.NewConnector(dsn)
		if err != nil {
			t.Fatalf("lib/pq connector: %v", err)
		}
		c = pc
	case "pgx4":
		c = dsnConnector{drv: stdlibv4.GetDefaultDriver(), dsn: dsn}
	case "pgdriver":
		c = pgdriver.NewConnector(pgdriver.WithDSN(dsn), pgdriver.WithTimeout(10*time.Second))
	default:
		t.Fatalf("unknown parent %q", parent)
	}
	sh := sqlflight.New(opts...)
	db := sh.OpenDB(c)
	t.Cleanup(func() {
		_ = db.Close()
		_ = sh.Close()
	})
	return db, sh
}

// dsnConnector is a driver.Connector of a driver without one.
type dsnConnector struct {
	drv driver.Driver
	dsn string
}

func (c dsnConnector) Connect(context.Context) (driver.Conn, error) { return c.drv.Open(c.dsn) }
func (c dsnConnector) Driver() driver.Driver                        { return c.drv }

// TestOtherDriversCompositeForeignKey is bun's dbtest shape
// (testWithForeignKeysAndRules): a composite foreign key ON UPDATE CASCADE
// ON DELETE SET NULL, a count cached under a default TTL, a delete of the
// referenced row. Through every PostgreSQL driver the count after the
// delete is 0: the write's closure (the server's catalog) reaches decks.
func TestOtherDriversCompositeForeignKey(t *testing.T) {
	dsn := postgresDSN(t)
	admin := openRaw(t, dsn)
	for _, parent := range otherParents {
		t.Run(parent, func(t *testing.T) {
			ctx := testContext(t, time.Minute)
			id := uniqueID(t)
			users, decks := "drv_users_"+id, "drv_decks_"+id
			mustExec(t, admin, fmt.Sprintf(`CREATE TABLE %s (id int, type text, PRIMARY KEY (id, type))`, users))
			mustExec(t, admin, fmt.Sprintf(`CREATE TABLE %s (id serial PRIMARY KEY, user_id int, user_type text,
				FOREIGN KEY (user_id, user_type) REFERENCES %s (id, type) ON UPDATE CASCADE ON DELETE SET NULL)`, decks, users))
			t.Cleanup(func() { _, _ = admin.Exec(fmt.Sprintf(`DROP TABLE IF EXISTS %s, %s`, decks, users)) })
			mustExec(t, admin, fmt.Sprintf(`INSERT INTO %s VALUES (1, 'admin'), (2, 'admin')`, users))
			mustExec(t, admin, fmt.Sprintf(`INSERT INTO %s (user_id, user_type) VALUES (1, 'admin'), (2, 'admin')`, decks))

			db, _ := openParent(t, parent, dsn, sqlflight.Options{Default: sqlflight.Policy{Soft: time.Minute}})
			count := fmt.Sprintf(`SELECT count(*) FROM "%s" AS "deck" WHERE (user_id = 2)`, decks)
			for range 2 { // the second is a hit once the verdict is known
				if n := queryInt(ctx, t, db, count); n != 1 {
					t.Fatalf("count before the delete = %d, want 1", n)
				}
			}
			waitCached(ctx, t, db, count, 1)
			if _, err := db.ExecContext(ctx, fmt.Sprintf(`DELETE FROM "%s" AS "user" WHERE (id = 2)`, users)); err != nil {
				t.Fatal(err)
			}
			if n := queryInt(ctx, t, db, count); n != 0 {
				t.Fatalf("count after the delete = %d through %s, want 0 (a stale cached row)", n, parent)
			}
			// ON UPDATE CASCADE too.
			byOne := fmt.Sprintf(`SELECT count(*) FROM %s WHERE user_id = 1`, decks)
			waitCached(ctx, t, db, byOne, 1)
			if _, err := db.ExecContext(ctx, fmt.Sprintf(`UPDATE %s SET id = 7 WHERE id = 1`, users)); err != nil {
				t.Fatal(err)
			}
			if n := queryInt(ctx, t, db, byOne); n != 0 {
				t.Fatalf("count after the cascading update = %d through %s, want 0", n, parent)
			}
		})
	}
}

// TestOtherDriversServerVerdicts: a view's read is invalidated by a write
// to its base table, a trigger's write reaches what it writes, and a
// VOLATILE user function is never shared, through every PostgreSQL driver.
func TestOtherDriversServerVerdicts(t *testing.T) {
	dsn := postgresDSN(t)
	admin := openRaw(t, dsn)
	for _, parent := range otherParents {
		t.Run(parent, func(t *testing.T) {
			ctx := testContext(t, time.Minute)
			id := uniqueID(t)
			base, view, src, log, fn := "drv_base_"+id, "drv_view_"+id, "drv_src_"+id, "drv_log_"+id, "drv_next_"+id
			mustExec(t, admin, fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY)`, base))
			mustExec(t, admin, fmt.Sprintf(`CREATE VIEW %s AS SELECT count(*) AS n FROM %s`, view, base))
			mustExec(t, admin, fmt.Sprintf(`CREATE TABLE %s (id int)`, src))
			mustExec(t, admin, fmt.Sprintf(`CREATE TABLE %s (id int)`, log))
			mustExec(t, admin, fmt.Sprintf(`CREATE FUNCTION %s_t() RETURNS trigger LANGUAGE plpgsql AS $$
				BEGIN INSERT INTO %s VALUES (NEW.id); RETURN NEW; END $$`, fn, log))
			mustExec(t, admin, fmt.Sprintf(`CREATE TRIGGER t AFTER INSERT ON %s FOR EACH ROW EXECUTE FUNCTION %s_t()`, src, fn))
			mustExec(t, admin, fmt.Sprintf(`CREATE SEQUENCE %s_seq`, fn))
			mustExec(t, admin, fmt.Sprintf(`CREATE FUNCTION %s() RETURNS bigint VOLATILE LANGUAGE sql AS $$ SELECT nextval('%s_seq') $$`, fn, fn))
			t.Cleanup(func() {
				_, _ = admin.Exec(fmt.Sprintf(`DROP VIEW IF EXISTS %s; DROP TABLE IF EXISTS %s, %s, %s;
					DROP FUNCTION IF EXISTS %s(); DROP FUNCTION IF EXISTS %s_t(); DROP SEQUENCE IF EXISTS %s_seq`,
					view, base, src, log, fn, fn, fn))
			})

			db, _ := openParent(t, parent, dsn, sqlflight.Options{Default: sqlflight.Policy{Soft: time.Minute}})

			// The server's verdict, not the scanner's alone.
			viewRead := fmt.Sprintf(`SELECT n FROM %s`, view)
			x, err := sqlflight.ExplainDB(ctx, db, viewRead)
			if err != nil {
				t.Fatal(err)
			}
			if strings.HasPrefix(x.Provisional, "text only") {
				t.Fatalf("%s: Explain says %q: the server was not asked", parent, x.Provisional)
			}

			waitCached(ctx, t, db, viewRead, 0)
			if _, err := db.ExecContext(ctx, fmt.Sprintf(`INSERT INTO %s VALUES (1)`, base)); err != nil {
				t.Fatal(err)
			}
			if n := queryInt(ctx, t, db, viewRead); n != 1 {
				t.Fatalf("%s: the view after a write to its base table = %d, want 1", parent, n)
			}

			logRead := fmt.Sprintf(`SELECT count(*) FROM %s`, log)
			waitCached(ctx, t, db, logRead, 0)
			if _, err := db.ExecContext(ctx, fmt.Sprintf(`INSERT INTO %s VALUES (1)`, src)); err != nil {
				t.Fatal(err)
			}
			if n := queryInt(ctx, t, db, logRead); n != 1 {
				t.Fatalf("%s: the trigger's table after a write that fires it = %d, want 1", parent, n)
			}

			call := fmt.Sprintf(`SELECT %s()`, fn)
			seen := map[int64]bool{}
			for range 6 {
				n := queryInt(ctx, t, db, call)
				if seen[n] {
					t.Fatalf("%s: the VOLATILE function's value %d was served twice", parent, n)
				}
				seen[n] = true
			}
		})
	}
}

// queryInt runs q on db and returns its one integer.
func queryInt(ctx context.Context, t testing.TB, db *sql.DB, q string) int64 {
	t.Helper()
	var n int64
	if err := db.QueryRowContext(ctx, q).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// waitCached reads q until the Shield serves it from its cache (the first
// reads run unshared until the server's verdict is known), checking that
// every read answers want.
func waitCached(ctx context.Context, t testing.TB, db *sql.DB, q string, want int64) {
	t.Helper()
	sh := sqlflight.ShieldOf(db)
	for i := 0; ; i++ {
		before := sh.Stats().FreshHits
		if n := queryInt(ctx, t, db, q); n != want {
			t.Fatalf("%s = %d, want %d", q, n, want)
		}
		if sh.Stats().FreshHits > before {
			return
		}
		if i > 200 || ctx.Err() != nil {
			t.Fatalf("%s never served from the cache", q)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestOtherDriversNonStandardStrings: a server that reads backslashes as
// escapes in '…' (standard_conforming_strings = off) hides no call from the
// scanner through lib/pq either: the literal below calls nextval there.
func TestOtherDriversNonStandardStrings(t *testing.T) {
	dsn := postgresDSN(t)
	admin := openRaw(t, dsn)
	ctx := testContext(t, time.Minute)
	seq := "drv_seq_" + uniqueID(t)
	mustExec(t, admin, `CREATE SEQUENCE `+seq)
	t.Cleanup(func() { _, _ = admin.Exec(`DROP SEQUENCE IF EXISTS ` + seq) })
	db, _ := openParent(t, "libpq", withDSNParams(t, dsn, "standard_conforming_strings", "off"),
		sqlflight.Options{Default: sqlflight.Policy{Soft: time.Minute}})
	q := `SELECT 'a\' , ', nextval($$` + seq + `$$) -- '`
	seen := map[int64]bool{}
	for range 6 {
		var s string
		var n int64
		if err := db.QueryRowContext(ctx, q).Scan(&s, &n); err != nil {
			t.Fatal(err)
		}
		if seen[n] {
			t.Fatalf("nextval's value %d was served twice", n)
		}
		seen[n] = true
	}
}
