package feed

import (
	"strconv"
	"strings"
)

// NotifyChannel is the channel the triggers notify and Listen LISTENs on
// (the root's NotifyChannel). Its notifications are wake-ups and carry
// nothing: whoever sends one costs a listener one read of the queue.
const NotifyChannel = "sqlflight_changes"

// TriggerSchema is the schema that holds the triggers' function and their
// queue (the root's TriggerSchema). It belongs to sqlflight: uninstalling
// drops it when nothing else is left in it.
const TriggerSchema = "sqlflight"

// TriggerFunction is the triggers' function, as regprocedure input
// (to_regprocedure finds it, or NULL when it is not installed).
const TriggerFunction = TriggerSchema + ".notify_changes()"

// feedVersion is the comment the install puts on the triggers' function:
// a feed refuses a function without it (an earlier install, whose triggers
// notify rows instead of queueing them).
const feedVersion = "sqlflight change feed 2"

// The queue the triggers append to (see InstallTriggersSQL).
const (
	queueTable = TriggerSchema + ".changes"
	// queueTrimAge: records a running writer trims at random when no
	// feed trims them (a feed trims its own read records sooner).
	queueTrimAge = "1 hour"
)

// lockSQL serializes installs and uninstalls of the triggers in a database
// (two instances deploying at once): the catalog's IF NOT EXISTS and OR
// REPLACE are not safe against a concurrent transaction doing the same (a
// duplicate key in pg_namespace, a tuple concurrently updated). The lock
// is the script's transaction's: held until it commits.
const lockSQL = "SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('sqlflight change triggers'));\n"

// triggerFunctionSQL creates (or replaces) the queue and the function the
// triggers run.
const triggerFunctionSQL = `DO $sqlflight$
BEGIN
  IF EXISTS (SELECT FROM pg_catalog.pg_namespace
              WHERE nspname = 'sqlflight' AND nspowner <> (SELECT oid FROM pg_catalog.pg_roles WHERE rolname = current_user)) THEN
    RAISE EXCEPTION 'sqlflight: the schema "sqlflight" belongs to another role: refusing to install into it (its owner could drop the triggers'' function); drop it or install as its owner';
  END IF;
END
$sqlflight$;

CREATE SCHEMA IF NOT EXISTS sqlflight;
REVOKE ALL ON SCHEMA sqlflight FROM PUBLIC;

-- The queue of change records: readable by the installing role alone.
-- Unlogged: a crash empties it, and every feed connection dies with the
-- server and resyncs.
CREATE UNLOGGED TABLE IF NOT EXISTS sqlflight.changes (
  id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  xid     xid8 NOT NULL DEFAULT pg_catalog.pg_current_xact_id(),
  at      timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
  payload text NOT NULL
);
CREATE INDEX IF NOT EXISTS changes_xid ON sqlflight.changes (xid);
REVOKE ALL ON TABLE sqlflight.changes FROM PUBLIC;

-- SECURITY DEFINER: the writer's role may not read or write the queue.
-- Everything below is schema-qualified or resolved in pg_catalog first;
-- values are printed by their types' output functions (format('%s')),
-- never through a cast a table's owner could define.
CREATE OR REPLACE FUNCTION sqlflight.notify_changes() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan -- its catalog queries' plans, planned once per session
AS $sqlflight$
DECLARE
  max_rows    constant int := 1000; -- rows reported per side
  max_value   constant int := 256;  -- longest value text reported, in bytes
  max_payload constant int := 7999; -- a record's payload
  head    text;
  related text;
  cols    text;
  names   text;
  o       text;
  n       text;
  o_count bigint := 0;
  n_count bigint := 0;
  payload text;
  keys_only boolean := false;
BEGIN
  head := '{"v":1,"s":' || to_json(TG_TABLE_SCHEMA::text)::text
       || ',"t":' || to_json(TG_TABLE_NAME::text)::text
       || ',"op":"' || left(TG_OP, 1) || '"';
  IF EXISTS (SELECT FROM pg_class WHERE oid = TG_RELID AND (relkind = 'p' OR relispartition)) THEN
    SELECT '[' || string_agg(json_build_array(ns.nspname, c.relname)::text, ',' ORDER BY ns.nspname, c.relname) || ']' INTO related
      FROM (SELECT relid FROM pg_partition_ancestors(TG_RELID)
            UNION SELECT relid FROM pg_partition_tree(TG_RELID)) r
      JOIN pg_class c ON c.oid = r.relid
      JOIN pg_namespace ns ON ns.oid = c.relnamespace
     WHERE r.relid <> TG_RELID;
    IF related IS NOT NULL THEN
      head := head || ',"r":' || related;
    END IF;
  END IF;

  IF TG_OP <> 'TRUNCATE' THEN
    LOOP
      SELECT string_agg(format('CASE WHEN pg_catalog.num_nulls(%1$I) = 1 THEN NULL::pg_catalog.json'
                               ' WHEN pg_catalog.octet_length(pg_catalog.format(''%%s'', %1$I)) > %2$s THEN ''false''::pg_catalog.json'
                               ' ELSE pg_catalog.to_json(pg_catalog.format(''%%s'', %1$I)) END',
                               a.attname, max_value), ',' ORDER BY a.attnum),
             '[' || string_agg(to_json(a.attname::text)::text, ',' ORDER BY a.attnum) || ']'
        INTO cols, names
        FROM pg_attribute a
        JOIN pg_type ty ON ty.oid = a.atttypid
       WHERE a.attrelid = TG_RELID AND a.attnum > 0 AND NOT a.attisdropped
         AND (a.attnum = ANY (SELECT unnest(i.indkey) FROM pg_index i WHERE i.indrelid = TG_RELID AND i.indisprimary)
              OR (NOT keys_only AND (ty.typcategory IN ('B', 'D', 'E', 'I', 'N', 'S', 'T') OR ty.oid = 'uuid'::regtype)));
      EXIT WHEN cols IS NULL;
      IF TG_OP IN ('UPDATE', 'DELETE') THEN
        EXECUTE format('SELECT ''['' || pg_catalog.string_agg(pg_catalog.array_to_json(ARRAY[%s]::pg_catalog.json[])::text, '','') || '']'', pg_catalog.count(*) FROM (SELECT * FROM sqlflight_old LIMIT %s) x',
                       cols, max_rows + 1) INTO o, o_count;
      END IF;
      IF TG_OP IN ('UPDATE', 'INSERT') THEN
        EXECUTE format('SELECT ''['' || pg_catalog.string_agg(pg_catalog.array_to_json(ARRAY[%s]::pg_catalog.json[])::text, '','') || '']'', pg_catalog.count(*) FROM (SELECT * FROM sqlflight_new LIMIT %s) x',
                       cols, max_rows + 1) INTO n, n_count;
      END IF;
      IF o_count = 0 AND n_count = 0 THEN
        RETURN NULL; -- no row changed
      END IF;
      EXIT WHEN o_count > max_rows OR n_count > max_rows;
      payload := head || ',"c":' || names || coalesce(',"o":' || o, '') || coalesce(',"n":' || n, '') || '}';
      EXIT WHEN octet_length(payload) <= max_payload;
      payload := NULL;
      EXIT WHEN keys_only;
      keys_only := true;
    END LOOP;
  END IF;

  IF payload IS NULL THEN
    payload := head || ',"w":true}';
    IF octet_length(payload) > max_payload THEN
      payload := '{"v":1,"op":"' || left(TG_OP, 1) || '","all":true}';
    END IF;
  END IF;
  INSERT INTO sqlflight.changes (payload) VALUES (payload);
  -- Now and then a writer trims what no feed trimmed (none runs), without
  -- waiting for another's locks.
  IF random() < 0.001 THEN
    DELETE FROM sqlflight.changes WHERE id IN (
      SELECT q.id FROM sqlflight.changes q WHERE q.at < now() - interval '` + queueTrimAge + `'
       ORDER BY q.id LIMIT 1000 FOR UPDATE SKIP LOCKED);
  END IF;
  -- A wake-up: the same empty payload, so one per transaction.
  PERFORM pg_notify('sqlflight_changes', '');
  RETURN NULL;
END
$sqlflight$;

REVOKE ALL ON FUNCTION sqlflight.notify_changes() FROM PUBLIC;
COMMENT ON FUNCTION sqlflight.notify_changes() IS '` + feedVersion + `';
`

// triggerTargets is the PL/pgSQL that sets rels to the tables a DO block
// works on: the named tables of the schema (all of its tables when none is
// named) and every partition below them. It raises an error naming the
// schema or a table that does not exist.
const triggerTargets = `
  IF NOT EXISTS (SELECT FROM pg_catalog.pg_namespace WHERE nspname = target_schema) THEN
    RAISE EXCEPTION 'sqlflight: schema "%" does not exist', target_schema;
  END IF;
  IF target_tables IS NOT NULL THEN
    SELECT string_agg(format('%I', t), ', ') INTO missing
      FROM unnest(target_tables) t
     WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace ns ON ns.oid = c.relnamespace
                        WHERE ns.nspname = target_schema AND c.relname = t AND c.relkind IN ('r', 'p'));
    IF missing IS NOT NULL THEN
      RAISE EXCEPTION 'sqlflight: no table % in schema "%"', missing, target_schema;
    END IF;
  END IF;
  SELECT coalesce(array_agg(DISTINCT x.oid), '{}') INTO rels FROM (
    SELECT c.oid FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace ns ON ns.oid = c.relnamespace
     WHERE ns.nspname = target_schema AND c.relkind IN ('r', 'p')
       AND (target_tables IS NULL OR c.relname = ANY (target_tables))
  ) base, LATERAL (SELECT base.oid UNION SELECT relid FROM pg_catalog.pg_partition_tree(base.oid)) x(oid);`

// triggerDefs are the triggers created on each table: name, event,
// transition tables.
var triggerDefs = [...][3]string{
	{"sqlflight_insert", "INSERT", "REFERENCING NEW TABLE AS sqlflight_new"},
	{"sqlflight_update", "UPDATE", "REFERENCING OLD TABLE AS sqlflight_old NEW TABLE AS sqlflight_new"},
	{"sqlflight_delete", "DELETE", "REFERENCING OLD TABLE AS sqlflight_old"},
	{"sqlflight_truncate", "TRUNCATE", ""},
}

// InstallTriggersSQL returns the SQL that installs the change triggers on
// tables of schema ("" means public): the named tables, or every table of
// the schema (as it stands when the SQL runs) when none is named, and every
// partition of a partitioned table among them (the root's
// InstallTriggersSQL documents the payload and the guarantees). Table names
// are spelled as the catalog spells them and quoted as literals, so no name
// can escape the script. The SQL creates TriggerSchema, its queue and its
// function if needed, and replaces the triggers the tables already have:
// running it again is harmless, and so is running it from two sessions at
// once (the second waits for the first). It is a script of several
// statements for one simple-protocol Exec (one transaction); it fails,
// changing nothing,
// when the schema or a named table does not exist or the user may not
// create triggers on a table, or TriggerSchema belongs to another role.
func InstallTriggersSQL(schema string, tables ...string) string {
	var b strings.Builder
	b.WriteString("-- sqlflight: change triggers for the NOTIFY feed (channel " + NotifyChannel + ")\n")
	b.WriteString(lockSQL)
	b.WriteString(triggerFunctionSQL)
	var body strings.Builder
	body.WriteString("\nDECLARE\n")
	writeTargetDecls(&body, schema, tables)
	body.WriteString("BEGIN")
	body.WriteString(triggerTargets)
	body.WriteString("\n  FOREACH rel IN ARRAY rels LOOP\n")
	for _, d := range triggerDefs {
		body.WriteString("    IF EXISTS (SELECT FROM pg_catalog.pg_trigger WHERE tgrelid = rel AND tgname = '" + d[0] + "') THEN\n")
		body.WriteString("      EXECUTE format('DROP TRIGGER " + d[0] + " ON %s', rel::regclass);\n    END IF;\n")
		body.WriteString("    EXECUTE format('CREATE TRIGGER " + d[0] + " AFTER " + d[1] + " ON %s ")
		if d[2] != "" {
			body.WriteString(d[2] + " ")
		}
		body.WriteString("FOR EACH STATEMENT EXECUTE FUNCTION sqlflight.notify_changes()', rel::regclass);\n")
	}
	body.WriteString("  END LOOP;\nEND\n")
	b.WriteString("\nDO " + dollarQuote(body.String()) + ";\n")
	return b.String()
}

// UninstallTriggersSQL returns the SQL that removes the change triggers
// from tables of schema ("" means public): the named tables and their
// partitions, or every table of the schema when none is named. When no
// table of the database has the triggers any more, it also drops the
// function, the queue and TriggerSchema (the schema only if nothing else
// is left in it). Running it again is harmless; it fails when the schema
// or a named table does not exist.
func UninstallTriggersSQL(schema string, tables ...string) string {
	var b strings.Builder
	b.WriteString("-- sqlflight: remove the change triggers of the NOTIFY feed\n")
	b.WriteString(lockSQL)
	var body strings.Builder
	body.WriteString("\nDECLARE\n")
	writeTargetDecls(&body, schema, tables)
	body.WriteString("  fn oid := pg_catalog.to_regprocedure('" + TriggerFunction + "');\nBEGIN")
	body.WriteString(triggerTargets)
	body.WriteString(`
  IF fn IS NULL THEN
    RETURN;
  END IF;
  FOR rel, trig IN SELECT t.tgrelid, t.tgname FROM pg_catalog.pg_trigger t
                    WHERE t.tgfoid = fn AND t.tgrelid = ANY (rels) LOOP
    EXECUTE format('DROP TRIGGER %I ON %s', trig, rel::regclass);
  END LOOP;
  IF NOT EXISTS (SELECT FROM pg_catalog.pg_trigger WHERE tgfoid = fn) THEN
    BEGIN
      DROP FUNCTION sqlflight.notify_changes();
    EXCEPTION WHEN dependent_objects_still_exist THEN
      RETURN; -- an install elsewhere committed meanwhile: keep the function
    END;
    DROP TABLE IF EXISTS sqlflight.changes;
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace ns ON ns.oid = c.relnamespace WHERE ns.nspname = 'sqlflight')
       AND NOT EXISTS (SELECT FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace ns ON ns.oid = p.pronamespace WHERE ns.nspname = 'sqlflight')
       AND NOT EXISTS (SELECT FROM pg_catalog.pg_type ty JOIN pg_catalog.pg_namespace ns ON ns.oid = ty.typnamespace WHERE ns.nspname = 'sqlflight') THEN
      DROP SCHEMA sqlflight;
    END IF;
  END IF;
END
`)
	b.WriteString("DO " + dollarQuote(body.String()) + ";\n")
	return b.String()
}

// writeTargetDecls declares the DO block's variables: the schema, the named
// tables (NULL for all), the target relations and the loop variables.
func writeTargetDecls(b *strings.Builder, schema string, tables []string) {
	if schema == "" {
		schema = "public"
	}
	b.WriteString("  target_schema text := " + sqlLiteral(schema) + ";\n  target_tables text[] := ")
	if len(tables) == 0 {
		b.WriteString("NULL")
	} else {
		b.WriteString("ARRAY[")
		for i, t := range tables {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(sqlLiteral(t))
		}
		b.WriteString("]::text[]")
	}
	b.WriteString(";\n  rels oid[];\n  rel oid;\n  trig name;\n  missing text;\n")
}

// sqlLiteral quotes s as an escape string literal, which reads the same
// whatever standard_conforming_strings says.
func sqlLiteral(s string) string {
	s = strings.ReplaceAll(s, `\`, `\\`)
	s = strings.ReplaceAll(s, `'`, `''`)
	return "E'" + s + "'"
}

// dollarQuote quotes body as a dollar-quoted string whose tag does not
// occur in body, so that no name written into body can close it.
func dollarQuote(body string) string {
	tag := "$sqlflight$"
	for i := 1; strings.Index(body+tag, tag) != len(body); i++ {
		tag = "$sqlflight" + strconv.Itoa(i) + "$"
	}
	return tag + body + tag
}
