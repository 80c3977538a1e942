package integration

import (
	"context"
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
