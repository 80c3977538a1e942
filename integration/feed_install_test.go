package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlflight/sqlflight"
)

// TestInstallTriggersHostileTableName: a table whose name closes the
// script's dollar quote gets its triggers, and nothing of its name runs as
// SQL.
func TestInstallTriggersHostileTableName(t *testing.T) {
	dsn := feedDatabase(t, false)
	out := outsider(t, dsn)
	name := `$sqlflight$;CREATE TABLE feed_pwned();DO $sqlflight$--`
	outExec(t, out, `CREATE TABLE `+pgx.Identifier{name}.Sanitize()+` (id int PRIMARY KEY)`)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := out.Exec(ctx, sqlflight.InstallTriggersSQL("public", name)); err != nil {
		t.Fatalf("install on %q: %v", name, err)
	}
	var pwned bool
	var n int
	if err := out.QueryRow(ctx, `SELECT to_regclass('public.feed_pwned') IS NOT NULL,
		(SELECT count(*) FROM pg_trigger WHERE tgrelid = $1::regclass AND tgname LIKE 'sqlflight_%')`,
		pgx.Identifier{name}.Sanitize()).Scan(&pwned, &n); err != nil {
		t.Fatal(err)
	}
	if pwned {
		t.Fatal("the table's name ran as SQL: feed_pwned exists")
	}
	if n != 4 {
		t.Fatalf("the table has %d sqlflight triggers, want 4", n)
	}
}

// TestInstallTriggersRefusesForeignSchema: a sqlflight schema that another
// role owns is refused, with an error that says so.
func TestInstallTriggersRefusesForeignSchema(t *testing.T) {
	dsn := feedDatabase(t, false)
	out := outsider(t, dsn)
	role := "feed_owner_" + uniqueID(t)
	outExec(t, out, `CREATE ROLE `+role, `CREATE SCHEMA sqlflight AUTHORIZATION `+role, `CREATE TABLE items (id int PRIMARY KEY)`)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = out.Exec(ctx, `DROP SCHEMA IF EXISTS sqlflight CASCADE`)
		_, _ = out.Exec(ctx, `DROP ROLE IF EXISTS `+role)
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := out.Exec(ctx, sqlflight.InstallTriggersSQL("public"))
	if err == nil || !strings.Contains(err.Error(), "belongs to another role") {
		t.Fatalf("install into a schema %s owns: err = %v, want a refusal", role, err)
	}
	var n int
	if err := out.QueryRow(ctx, `SELECT count(*) FROM pg_trigger WHERE tgrelid = 'items'::regclass`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("a refused install left %d triggers", n)
	}
}

// TestInstallTriggersConcurrently: sessions that install and uninstall the
// triggers at the same moment (instances deploying together) all succeed:
// the scripts wait for each other instead of racing the catalog (CREATE
// SCHEMA IF NOT EXISTS alone fails one of two concurrent creators with a
// duplicate key).
func TestInstallTriggersConcurrently(t *testing.T) {
	dsn := feedDatabase(t, false)
	const sessions, rounds = 4, 5
	conns := make([]*pgx.Conn, sessions)
	for i := range conns {
		conns[i] = outsider(t, dsn)
		outExec(t, conns[i], fmt.Sprintf(`CREATE TABLE feed_conc_%d (id int PRIMARY KEY)`, i))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for round := range rounds {
		for _, script := range []func(string, ...string) string{sqlflight.InstallTriggersSQL, sqlflight.UninstallTriggersSQL} {
			start := make(chan struct{})
			errs := make(chan error, sessions)
			for i, c := range conns {
				go func() {
					<-start
					_, err := c.Exec(ctx, script("public", fmt.Sprintf("feed_conc_%d", i)))
					errs <- err
				}()
			}
			close(start)
			for range sessions {
				if err := <-errs; err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
			}
		}
	}
	var left int
	if err := conns[0].QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname = 'sqlflight'`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Fatal("the last uninstall left the sqlflight schema behind")
	}
}
