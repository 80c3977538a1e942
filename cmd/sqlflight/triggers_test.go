package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlflight/sqlflight"
)

func triggersCmd(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = run(context.Background(), append([]string{"triggers"}, args...), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestTriggersUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{nil, exitUsage, "Usage: sqlflight triggers install"},
		{[]string{"-h"}, exitOK, ""},
		{[]string{"frob"}, exitUsage, `unknown action "frob"`},
		{[]string{"install"}, exitUsage, "install needs -dsn"},
		{[]string{"uninstall", "t"}, exitUsage, "uninstall needs -dsn"},
		{[]string{"install", "-uninstall", "-dsn", "postgres://x"}, exitUsage, "-uninstall goes with sql"},
		{[]string{"sql", "-dsn", "postgres://x"}, exitUsage, "connects nowhere"},
		{[]string{"sql", "-schema", ""}, exitUsage, "-schema is empty"},
		{[]string{"sql", ""}, exitUsage, "table name is empty"},
		{[]string{"sql", "-bogus"}, exitUsage, "flag provided but not defined"},
		{[]string{"install", "-dsn", "mysql://x@y"}, exitUsage, "-dsn"},
	} {
		code, _, stderr := triggersCmd(tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("triggers %q: exit %d, stderr %q; want exit %d and %q", tc.args, code, stderr, tc.code, tc.want)
		}
	}
}

func TestTriggersSQL(t *testing.T) {
	code, out, stderr := triggersCmd("sql", "-schema", "shop", "items", "it's")
	if code != exitOK || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	if out != sqlflight.InstallTriggersSQL("shop", "items", "it's") {
		t.Errorf("sql printed something else than InstallTriggersSQL:\n%s", out)
	}
	for _, want := range []string{"CREATE OR REPLACE FUNCTION sqlflight.notify_changes()", "E'shop'", "E'items', E'it''s'",
		"AFTER TRUNCATE", "REFERENCING OLD TABLE AS sqlflight_old NEW TABLE AS sqlflight_new"} {
		if !strings.Contains(out, want) {
			t.Errorf("install SQL lacks %q", want)
		}
	}
	code, out, _ = triggersCmd("sql", "-uninstall")
	if code != exitOK || out != sqlflight.UninstallTriggersSQL("public") {
		t.Errorf("sql -uninstall: exit %d, printed\n%s", code, out)
	}
}

// TestTriggersInstallUninstall needs a Postgres (SQLFLIGHT_POSTGRES_DSN):
// install is idempotent and covers the schema's tables, uninstall of one
// table leaves the others', uninstall of the rest removes the function and
// its schema; a missing table fails and changes nothing.
func TestTriggersInstallUninstall(t *testing.T) {
	dsn := os.Getenv("SQLFLIGHT_POSTGRES_DSN")
	if dsn == "" {
		if os.Getenv("SQLFLIGHT_REQUIRE_INTEGRATION") == "1" {
			t.Fatal("SQLFLIGHT_POSTGRES_DSN is not set but SQLFLIGHT_REQUIRE_INTEGRATION=1")
		}
		t.Skip("SQLFLIGHT_POSTGRES_DSN is not set")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var b [5]byte
	_, _ = rand.Read(b[:])
	schema := "cli_triggers_" + hex.EncodeToString(b[:])
	q := pgx.Identifier{schema}.Sanitize()
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+q+"; CREATE TABLE "+q+".a (id int PRIMARY KEY); CREATE TABLE "+q+`."B b" (id int)`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = conn.Exec(ctx, sqlflight.UninstallTriggersSQL(schema))
		_, _ = conn.Exec(ctx, "DROP SCHEMA "+q+" CASCADE")
	})
	triggers := func() map[string]int {
		t.Helper()
		rows, err := conn.Query(ctx, `SELECT c.relname::text, count(*)::int FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
			JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND t.tgname LIKE 'sqlflight\_%' GROUP BY 1`, schema)
		if err != nil {
			t.Fatal(err)
		}
		m, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (kv [2]any, err error) {
			var k string
			var v int
			err = r.Scan(&k, &v)
			return [2]any{k, v}, err
		})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int{}
		for _, kv := range m {
			out[kv[0].(string)] = kv[1].(int)
		}
		return out
	}

	code, _, stderr := triggersCmd("install", "-dsn", dsn, "-schema", schema, "a", "missing")
	if code != exitFailure || !strings.Contains(stderr, `no table missing in schema "`+schema+`"`) {
		t.Fatalf("install of a missing table: exit %d, stderr %q", code, stderr)
	}
	if got := triggers(); len(got) != 0 {
		t.Fatalf("a failed install left triggers: %v", got)
	}
	for range 2 {
		code, out, stderr := triggersCmd("install", "-dsn", dsn, "-schema", schema)
		if code != exitOK || !strings.Contains(out, "installed the change triggers on every table of schema") {
			t.Fatalf("install: exit %d, stdout %q, stderr %q", code, out, stderr)
		}
		if got := triggers(); len(got) != 2 || got["a"] != 4 || got["B b"] != 4 {
			t.Fatalf("after install: triggers per table %v, want 4 on a and on \"B b\"", got)
		}
	}
	code, _, stderr = triggersCmd("uninstall", "-dsn", dsn, "-schema", schema, "B b")
	if got := triggers(); code != exitOK || len(got) != 1 || got["a"] != 4 {
		t.Fatalf("uninstall of one table: exit %d (%s), left %v", code, stderr, got)
	}
	if code, _, stderr = triggersCmd("uninstall", "-dsn", dsn, "-schema", schema); code != exitOK {
		t.Fatalf("uninstall: exit %d, stderr %q", code, stderr)
	}
	if got := triggers(); len(got) != 0 {
		t.Fatalf("after uninstall: %v", got)
	}
	if code, _, stderr = triggersCmd("uninstall", "-dsn", dsn, "-schema", schema); code != exitOK {
		t.Fatalf("second uninstall: exit %d, stderr %q", code, stderr)
	}
}
