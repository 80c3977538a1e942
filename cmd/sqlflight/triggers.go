package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/sqlflight/sqlflight"
)

// runTriggers is the triggers subcommand: it installs or removes the change
// triggers of the NOTIFY feed, or prints their SQL.
func runTriggers(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("triggers", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dsn := fs.String("dsn", "", "the PostgreSQL DSN (postgres://…) to install on or uninstall from")
	schema := fs.String("schema", "public", "the schema of the tables")
	down := fs.Bool("uninstall", false, "with sql: print the SQL that removes the triggers")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: sqlflight triggers install   -dsn postgres://… [-schema public] [table…]
       sqlflight triggers uninstall -dsn postgres://… [-schema public] [table…]
       sqlflight triggers sql [-uninstall] [-schema public] [table…]

The NOTIFY change feed (sqlflight.feed=notify) needs triggers on the tables
whose writes it must see: statement-level AFTER INSERT, UPDATE, DELETE and
TRUNCATE triggers that notify the channel `+sqlflight.NotifyChannel+` at commit with the
changed rows, and their function in the schema `+sqlflight.TriggerSchema+`.

install    creates them on the named tables of the schema, or on all its
           tables when none is named (and on every partition of a
           partitioned table); run it again after creating tables
uninstall  removes them from those tables; the function and its schema go
           when no table has the triggers any more
sql        prints the SQL instead, for a migration tool (-uninstall: the SQL
           that removes them)

Both are idempotent and run as one transaction. Table names are spelled as
the catalog spells them (case-sensitive, unquoted). Creating triggers needs
the owner of each table.

Flags:
`)
		fs.PrintDefaults()
	}
	if len(args) == 0 {
		fs.Usage()
		return errUsage
	}
	action := args[0]
	switch action {
	case "-h", "-help", "--help", "help":
		fs.Usage()
		return flag.ErrHelp
	case "install", "uninstall", "sql":
	default:
		return fmt.Errorf("%w: unknown action %q: want install, uninstall or sql", errUsage, action)
	}
	if err := fs.Parse(args[1:]); err != nil {
		if err == flag.ErrHelp {
			return err
		}
		return errUsage
	}
	if *schema == "" {
		return fmt.Errorf("%w: -schema is empty", errUsage)
	}
	tables := fs.Args()
	for _, t := range tables {
		if t == "" || strings.ContainsRune(t, 0) {
			return fmt.Errorf("%w: a table name is empty or contains a NUL byte", errUsage)
		}
	}
	if *down && action != "sql" {
		return fmt.Errorf("%w: -uninstall goes with sql (use the uninstall action)", errUsage)
	}
	script := sqlflight.InstallTriggersSQL(*schema, tables...)
	if action == "uninstall" || *down {
		script = sqlflight.UninstallTriggersSQL(*schema, tables...)
	}
	if action == "sql" {
		if *dsn != "" {
			return fmt.Errorf("%w: sql prints the SQL and connects nowhere: drop -dsn", errUsage)
		}
		_, err := io.WriteString(stdout, script)
		return err
	}
	if *dsn == "" {
		return fmt.Errorf("%w: %s needs -dsn postgres://…", errUsage, action)
	}
	cfg, err := pgx.ParseConfig(*dsn)
	if err != nil {
		return fmt.Errorf("%w: -dsn: %v", errUsage, err)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connecting: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	// A script without arguments goes as one simple-protocol query, which
	// the server runs as one transaction.
	if _, err := conn.Exec(ctx, script); err != nil {
		return fmt.Errorf("%s: %w", action, err)
	}
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(DISTINCT t.tgrelid) FROM pg_catalog.pg_trigger t
		WHERE t.tgfoid = pg_catalog.to_regprocedure('`+sqlflight.TriggerSchema+`.notify_changes()')`).Scan(&n); err != nil {
		return fmt.Errorf("counting the tables with triggers: %w", err)
	}
	if action == "install" {
		fmt.Fprintf(stdout, "installed the change triggers on %s; %d tables of the database have them\n", what(*schema, tables), n)
	} else {
		fmt.Fprintf(stdout, "removed the change triggers from %s; %d tables of the database have them\n", what(*schema, tables), n)
	}
	return nil
}

// what names the tables an action worked on.
func what(schema string, tables []string) string {
	if len(tables) == 0 {
		return fmt.Sprintf("every table of schema %q", schema)
	}
	q := make([]string, len(tables))
	for i, t := range tables {
		q[i] = fmt.Sprintf("%q", t)
	}
	return fmt.Sprintf("%s in schema %q", strings.Join(q, ", "), schema)
}
