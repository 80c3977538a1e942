package integration

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlflight/sqlflight"
)

// TestNotifyTriggersKeepShieldWritesNarrow: the NOTIFY feed's triggers only
// notify, so a write through the Shield to a table that has them still
// invalidates that table alone, not every table as a user trigger does.
func TestNotifyTriggersKeepShieldWritesNarrow(t *testing.T) {
	base := postgresDSN(t)
	admin := openRaw(t, base)
	schema, setup := newSchema(t, admin, base)
	mustExec(t, setup,
		`CREATE TABLE watched (id int PRIMARY KEY, v text NOT NULL)`,
		`CREATE TABLE other (id int PRIMARY KEY, v text NOT NULL)`,
		`INSERT INTO watched VALUES (1, 'one')`,
		`INSERT INTO other VALUES (1, 'eins')`,
		sqlflight.InstallTriggersSQL(schema))
	cleanupExec(t, admin, sqlflight.UninstallTriggersSQL(schema))
	c := newCachedRead(t, withDSNParams(t, base, "search_path", schema+",public"))

	c.warm(`SELECT v FROM other WHERE id = 1`)
	c.warm(`SELECT v FROM watched WHERE id = 1`)
	c.write(`UPDATE watched SET v = 'uno' WHERE id = 1`)
	c.expect("UPDATE watched", "uno", `SELECT v FROM watched WHERE id = 1`)
	hits := c.sh.Stats().FreshHits
	c.expect("UPDATE watched", "eins", `SELECT v FROM other WHERE id = 1`)
	if c.sh.Stats().FreshHits != hits+1 {
		t.Errorf("a write to a table with the NOTIFY triggers emptied the cached read of another table: %s", statsString(c.sh.Stats()))
	}
}

// TestNotifyTriggersInstallUninstall, in a database of its own (the function
// and its schema are database-wide): install covers every table of the
// schema and the partitions of a partitioned table, is idempotent, notifies
// at commit and never for a rolled-back transaction, with a record of the
// change in the queue; uninstall removes the triggers, the function, the
// queue and the schema; a second uninstall is harmless.
func TestNotifyTriggersInstallUninstall(t *testing.T) {
	base := postgresDSN(t)
	ctx := testContext(t, testTimeout)
	admin := openRaw(t, base)
	db := "notify_" + uniqueID(t)
	mustExec(t, admin, "CREATE DATABASE "+db)
	cleanupExec(t, admin, "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)")
	u, err := url.Parse(base)
	if err != nil {
		t.Skipf("the DSN is not a URL: %v", err)
	}
	u.Path = "/" + db
	conn, err := pgx.Connect(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	exec := func(stmts ...string) {
		t.Helper()
		for _, s := range stmts {
			if _, err := conn.Exec(ctx, s); err != nil {
				t.Fatalf("exec %s: %v", abbrev(s), err)
			}
		}
	}
	count := func(query string) int {
		t.Helper()
		var n int
		if err := conn.QueryRow(ctx, query).Scan(&n); err != nil {
			t.Fatalf("%s: %v", abbrev(query), err)
		}
		return n
	}
	const ours = `SELECT count(*)::int FROM pg_trigger WHERE tgname LIKE 'sqlflight\_%'`
	exec(`CREATE SCHEMA app`,
		`CREATE TABLE app.items (id int PRIMARY KEY, name text)`,
		`CREATE TABLE app."Mixed Case" (k text PRIMARY KEY)`,
		`CREATE TABLE app.events (id int, at date) PARTITION BY RANGE (at)`,
		`CREATE TABLE app.events_2024 PARTITION OF app.events FOR VALUES FROM ('2024-01-01') TO ('2025-01-01')`,
		`CREATE TABLE public.untouched (id int)`)
	for range 2 {
		exec(sqlflight.InstallTriggersSQL("app"))
		if n := count(ours); n != 4*4 {
			t.Fatalf("%d triggers after install, want 16 (four on each of the four tables of app)", n)
		}
	}

	listener, err := pgx.Connect(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close(context.Background())
	if _, err := listener.Exec(ctx, "LISTEN "+sqlflight.NotifyChannel); err != nil {
		t.Fatal(err)
	}
	exec(`BEGIN`, `INSERT INTO app.items VALUES (1, 'rolled back')`, `ROLLBACK`,
		`INSERT INTO app.events VALUES (7, '2024-06-01')`)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	n, err := listener.WaitForNotification(wctx)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	if n.Payload != "" {
		t.Errorf("the notification carries %q: a wake-up carries nothing", n.Payload)
	}
	// The change itself is a record of the queue, and the rolled-back
	// insert left none.
	want := `{"v":1,"s":"app","t":"events","op":"I","r":[["app", "events_2024"]],"c":["id","at"],"n":[["7","2024-06-01"]]}`
	rows, err := conn.Query(ctx, `SELECT payload FROM sqlflight.changes ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	records, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(records) != 1 || records[0] != want {
		t.Errorf("queue %q\nwant [%s] (nothing for the rolled-back insert)", records, want)
	}

	exec(sqlflight.UninstallTriggersSQL("app", "items"))
	if n := count(ours); n != 3*4 {
		t.Fatalf("%d triggers after uninstalling one table, want 12", n)
	}
	exec(sqlflight.UninstallTriggersSQL("app"))
	if n := count(ours); n != 0 {
		t.Fatalf("%d triggers after uninstall", n)
	}
	if n := count(`SELECT count(*)::int FROM pg_namespace WHERE nspname = 'sqlflight'`); n != 0 {
		t.Fatal("the sqlflight schema is left after uninstall")
	}
	exec(sqlflight.UninstallTriggersSQL("app"))

	_, err = conn.Exec(ctx, sqlflight.InstallTriggersSQL("nowhere"))
	if err == nil || !strings.Contains(err.Error(), `schema "nowhere" does not exist`) {
		t.Errorf("install in a missing schema: %v", err)
	}
	if n := count(`SELECT count(*)::int FROM pg_namespace WHERE nspname = 'sqlflight'`); n != 0 {
		t.Fatal("a failed install left the sqlflight schema")
	}
}
