package verdict

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlflight/sqlflight/internal/sqlscan"
)

// Function is one function a statement really calls, as the server
// resolves it.
type Function struct {
	Schema     string `json:"schema,omitempty"` // its namespace, "pg_catalog" for a built-in
	Name       string `json:"name"`             // its name, without the arguments (overloads count as one)
	Volatility string `json:"volatility"`       // "immutable", "stable" or "volatile"
	Builtin    bool   `json:"builtin"`          // part of PostgreSQL itself
	// Opaque functions have bodies the server cannot see into (plpgsql, C,
	// a string SQL body): they may read any table.
	Opaque bool `json:"opaque,omitempty"`
	// PerSession: its value belongs to the session (it is in the
	// Statement's PerSession).
	PerSession bool `json:"per_session,omitempty"`
}

// Statement is what PostgreSQL says a statement calls and reads.
type Statement struct {
	// Functions are the functions it calls, one per schema and name (the
	// most volatile overload's volatility), sorted.
	Functions []Function `json:"functions"`
	// Tables are the base relations the statement reads, views expanded
	// (lower-case bare names, as epochs key them).
	Tables []string `json:"tables"`
	// TablesKnown is false when an opaque function may read any table.
	TablesKnown bool `json:"tables_known"`
	// Volatile names the VOLATILE functions called that no pure= entry
	// vouches for: the statement is never shared and counts as a write.
	Volatile []string `json:"volatile"`
	// PerSession names values that belong to the session (never shared).
	PerSession []string `json:"per_session"`
	// TimeDependent: the result depends on the clock.
	TimeDependent bool `json:"time_dependent"`
	// UserFunctions: it calls functions that are not part of PostgreSQL
	// (cached only under the statement's own TTL: their declared volatility
	// is the user's word, not the server's).
	UserFunctions bool `json:"user_functions"`
}

// Built-in functions whose values belong to the session (or connection):
// never shared across sessions, whatever pg_proc says.
var perSessionFuncs = map[string]bool{
	"pg_prepared_statement": true, "pg_cursor": true, "inet_client_addr": true, "inet_client_port": true,
	"inet_server_addr": true, "inet_server_port": true, "pg_backend_pid": true, "pg_my_temp_schema": true,
	"pg_is_other_temp_schema": true, "txid_current_if_assigned": true, "pg_current_xact_id_if_assigned": true,
	"pg_trigger_depth": true, "pg_listening_channels": true, "pg_get_backend_memory_contexts": true,
	"pg_backend_memory_contexts": true, "lastval": true, "currval": true, "pg_current_xact_id": true,
	"txid_current": true, "pg_stat_get_backend_idset": true, "pg_notification_queue_usage": true,
	"pg_stat_get_snapshot_timestamp": true, "pg_stat_get_xact_tuples_inserted": true,
	"pg_stat_get_xact_numscans": true, "pg_stat_get_xact_function_calls": true, "pg_stat_get_xact_blocks_fetched": true,
	"pg_stat_get_xact_tuples_updated": true, "pg_stat_get_xact_tuples_deleted": true, "pg_stat_get_xact_tuples_returned": true,
	"pg_stat_get_xact_tuples_fetched": true, "pg_stat_get_xact_tuples_hot_updated": true, "pg_stat_get_xact_blocks_hit": true,
	"pg_stat_get_xact_function_total_time": true, "pg_stat_get_xact_function_self_time": true,
}

// readsNamedTables are built-ins that read tables named by their arguments
// at run time, which no catalog dependency shows.
var readsNamedTables = map[string]bool{
	"table_to_xml": true, "table_to_xmlschema": true, "table_to_xml_and_xmlschema": true,
	"schema_to_xml": true, "schema_to_xmlschema": true, "schema_to_xml_and_xmlschema": true,
	"database_to_xml": true, "database_to_xmlschema": true, "database_to_xml_and_xmlschema": true,
}

// RunsSQL reports whether the built-in function name (without its schema)
// runs SQL (or changes large objects) given at run time: whatever that SQL
// calls may write any table.
func RunsSQL(name string) bool {
	switch name {
	case "query_to_xml", "query_to_xmlschema", "query_to_xml_and_xmlschema", "cursor_to_xml",
		"cursor_to_xmlschema", "ts_stat":
		return true
	}
	return strings.HasPrefix(name, "dblink") || strings.HasPrefix(name, "lo_")
}

// tempSchemaFuncs name the session's temporary schema. The catalog's own
// views (information_schema) call them only to hide other sessions'
// temporary objects, which a clean session (one that made none) never
// sees: reached through a view they do not make a read per-session; called
// by the statement itself they do.
var tempSchemaFuncs = map[string]bool{"pg_my_temp_schema": true, "pg_is_other_temp_schema": true}

// timeFuncs are built-ins whose value follows the clock (STABLE ones; the
// VOLATILE ones are never shared anyway).
var timeFuncs = map[string]bool{
	"now": true, "statement_timestamp": true, "transaction_timestamp": true, "current_timestamp": true,
	"current_date": true, "current_time": true, "localtime": true, "localtimestamp": true, "age": true,
	"pg_postmaster_start_time": true, "pg_conf_load_time": true, "clock_timestamp": true, "timeofday": true,
}

const probeName = "sqlflight_probe"

// ErrNoProbe is wrapped by Probe's error when the server refuses the probe
// itself (a hot standby, a read-only default, or no TEMPORARY privilege):
// that error wraps the server's too (SQLState finds its code); asking the
// same server again will not help.
var ErrNoProbe = errors.New("sqlflight: the server cannot be asked for its verdict")

// catalogMode runs the fixed catalog queries as prepared statements, cached
// per connection, whatever exec mode the DSN chose (the simple protocol
// cannot carry arguments when standard_conforming_strings is off).
const catalogMode = pgx.QueryExecModeCacheStatement

// depsQuery follows the probe function's recorded dependencies: relations
// (a view through its _RETURN rule), functions (their SQL-standard bodies
// too) and operators (to their functions). Built-ins are pinned and never
// recorded; their names come from the texts it returns.
const depsQuery = `WITH RECURSIVE root AS (
  SELECT p.oid FROM pg_catalog.pg_proc p
  WHERE p.proname = '` + probeName + `' AND p.pronamespace = pg_catalog.pg_my_temp_schema()
), n(cls, obj) AS (
  SELECT 'pg_catalog.pg_proc'::pg_catalog.regclass::oid, root.oid FROM root
  UNION
  SELECT e.cls, e.obj FROM n, LATERAL (
    SELECT d.refclassid AS cls, d.refobjid AS obj FROM pg_catalog.pg_depend d
    WHERE d.classid = n.cls AND d.objid = n.obj
      AND n.cls IN ('pg_catalog.pg_proc'::pg_catalog.regclass, 'pg_catalog.pg_rewrite'::pg_catalog.regclass,
                    'pg_catalog.pg_constraint'::pg_catalog.regclass)
      AND d.refclassid IN ('pg_catalog.pg_class'::pg_catalog.regclass, 'pg_catalog.pg_proc'::pg_catalog.regclass,
                           'pg_catalog.pg_operator'::pg_catalog.regclass, 'pg_catalog.pg_type'::pg_catalog.regclass)
    UNION ALL
    -- a domain runs its CHECK constraints (and its base domain's)
    SELECT 'pg_catalog.pg_constraint'::pg_catalog.regclass, c.oid FROM pg_catalog.pg_constraint c
    WHERE n.cls = 'pg_catalog.pg_type'::pg_catalog.regclass AND c.contypid = n.obj
    UNION ALL
    SELECT 'pg_catalog.pg_type'::pg_catalog.regclass, t.typbasetype FROM pg_catalog.pg_type t
    WHERE n.cls = 'pg_catalog.pg_type'::pg_catalog.regclass AND t.oid = n.obj AND t.typbasetype <> 0
    UNION ALL
    SELECT 'pg_catalog.pg_rewrite'::pg_catalog.regclass, r.oid FROM pg_catalog.pg_rewrite r
    WHERE n.cls = 'pg_catalog.pg_class'::pg_catalog.regclass AND r.ev_class = n.obj AND r.rulename = '_RETURN'
    UNION ALL
    SELECT 'pg_catalog.pg_proc'::pg_catalog.regclass, o.oprcode::oid FROM pg_catalog.pg_operator o
    WHERE n.cls = 'pg_catalog.pg_operator'::pg_catalog.regclass AND o.oid = n.obj AND o.oprcode <> 0
  ) e
)
SELECT 'r'::text, c.relname::text, c.relkind::text, c.relpersistence = 't', ns.nspname::text,
       CASE WHEN c.relkind = 'v' THEN pg_catalog.pg_get_viewdef(c.oid) END, c.relrowsecurity
FROM n JOIN pg_catalog.pg_class c ON n.cls = 'pg_catalog.pg_class'::pg_catalog.regclass AND c.oid = n.obj
JOIN pg_catalog.pg_namespace ns ON ns.oid = c.relnamespace
UNION ALL
SELECT 'f'::text, p.proname::text,
       -- the most volatile overload of the name: the one a differently typed argument reaches
       (SELECT max(o.provolatile::text) FROM pg_catalog.pg_proc o WHERE o.proname = p.proname AND o.pronamespace = p.pronamespace),
       p.oid < 16384, ns.nspname::text,
       CASE WHEN p.prosqlbody IS NOT NULL THEN pg_catalog.pg_get_functiondef(p.oid) END,
       p.prosqlbody IS NULL AND p.provolatile <> 'i'
FROM n JOIN pg_catalog.pg_proc p ON n.cls = 'pg_catalog.pg_proc'::pg_catalog.regclass AND p.oid = n.obj
JOIN pg_catalog.pg_namespace ns ON ns.oid = p.pronamespace`

// builtinQuery returns the most volatile overload of each named function
// in pg_catalog ('i' < 's' < 'v').
const builtinQuery = `SELECT proname::text, max(provolatile::text) FROM pg_catalog.pg_proc
WHERE pronamespace = 'pg_catalog'::pg_catalog.regnamespace AND proname = ANY($1::text::text[]) GROUP BY proname`

// Probe plans r on conn and returns the server's verdict and the
// parameter types (OIDs, in order). The fixed catalog queries are prepared
// once per connection (pgx's statement cache); the probe function's text is
// new each time and goes through the extended protocol, which runs exactly
// one statement whatever the text holds. Everything runs in one
// transaction that is rolled back, whatever happens; conn is Clean
// afterwards unless its connection failed. An error (ErrNoProbe among
// them) means no verdict: the statement is to be judged unknown.
func Probe(ctx context.Context, conn Session, r *sqlscan.Result) (Statement, []uint32, error) {
	var sv Statement
	body := probeBody(r)
	// Everything runs in one transaction that is rolled back, under short
	// timeouts: a lock held by a caller's own transaction (ALTER, LOCK,
	// TRUNCATE before a read) fails the probe at once instead of stalling it.
	if err := conn.Exec(ctx, "BEGIN"); err != nil {
		return sv, nil, err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = conn.Exec(rctx, "ROLLBACK")
	}()
	for _, q := range []string{"SET LOCAL statement_timeout = '5s'", "SET LOCAL lock_timeout = '200ms'"} {
		if err := conn.Exec(ctx, q); err != nil {
			return sv, nil, err
		}
	}
	params, types, err := conn.ParamTypes(ctx, body)
	if err != nil {
		return sv, nil, err
	}
	create := "CREATE FUNCTION pg_temp." + probeName + "(" + strings.Join(types, ", ") +
		") RETURNS SETOF record LANGUAGE sql BEGIN ATOMIC\n" + body + "\n;\nEND"
	if err := conn.Exec(ctx, create); err != nil {
		if code := SQLState(err); code == "25006" || code == "42501" {
			// A hot standby, a read-only default, or no TEMPORARY privilege:
			// this server cannot be asked at all.
			return sv, nil, fmt.Errorf("%w: %w", ErrNoProbe, err)
		}
		return sv, nil, err
	}
	deps, err := conn.Query(ctx, depsQuery)
	if err != nil {
		return sv, nil, err
	}
	var texts []string
	tables := map[string]bool{}
	sv.TablesKnown = true
	for _, row := range deps {
		if len(row) != 7 || row[0] == nil || row[1] == nil || row[2] == nil || row[3] == nil || row[4] == nil || row[6] == nil {
			return sv, nil, errors.New("sqlflight: unexpected answer to the dependency query")
		}
		kind, name, attr, schema := *row[0], *row[1], *row[2], *row[4]
		flag, opaque := *row[3] == "t", *row[6] == "t"
		if row[5] != nil {
			texts = append(texts, *row[5])
		}
		switch kind {
		case "r":
			if attr == "v" {
				continue // expanded through its rule
			}
			tables[tableKey(name)] = true
			if flag {
				sv.PerSession = append(sv.PerSession, schema+"."+name)
			}
			if opaque {
				// Row-level security: its policies may read other tables.
				sv.TablesKnown = false
			}
		case "f":
			if name == probeName && !flag {
				continue
			}
			sv.Functions = append(sv.Functions, Function{Schema: schema, Name: name,
				Volatility: volatilityName(attr), Builtin: flag, Opaque: opaque && !flag})
		}
	}
	names := map[string]bool{}
	own := map[string]bool{} // functions the statement's own text calls
	for _, f := range r.Functions {
		own[strings.TrimPrefix(f, "pg_catalog.")] = true
	}
	scans := []*sqlscan.Result{r}
	for _, t := range texts {
		scans = append(scans, sqlscan.Parse(t))
	}
	for _, x := range scans {
		if x.Verdict == sqlscan.InFlightOnly {
			sv.TimeDependent = true
		}
		for _, f := range x.Functions {
			if strings.Contains(f, ".") {
				after, ok := strings.CutPrefix(f, "pg_catalog.")
				if !ok {
					continue // a user function: pg_depend has it
				}
				f = after
			}
			names[f] = true
		}
		for _, t := range x.Tables {
			// Pinned catalogs (pg_class, …) are never recorded as
			// dependencies; the texts name them.
			if strings.HasPrefix(t, "pg_") {
				tables[tableKey(t)] = true
			}
		}
	}
	if len(names) > 0 {
		list := make([]string, 0, len(names))
		for n := range names {
			list = append(list, n)
		}
		slices.Sort(list)
		rows, err := conn.Query(ctx, builtinQuery, TextArray(list))
		if err != nil {
			return sv, nil, err
		}
		for _, row := range rows {
			if len(row) != 2 || row[0] == nil || row[1] == nil {
				return sv, nil, errors.New("sqlflight: unexpected answer to the built-ins query")
			}
			sv.Functions = append(sv.Functions, Function{Schema: "pg_catalog", Name: *row[0],
				Volatility: volatilityName(*row[1]), Builtin: true})
		}
	}
	sv.Functions = dedupFunctions(sv.Functions)
	for _, f := range sv.Functions {
		full := f.Schema + "." + f.Name
		switch {
		case f.Builtin && perSessionFuncs[f.Name] && (!tempSchemaFuncs[f.Name] || own[f.Name]):
			sv.PerSession = append(sv.PerSession, full)
		case f.Volatility == "volatile":
			sv.Volatile = append(sv.Volatile, full)
		}
		if f.Builtin && timeFuncs[f.Name] {
			sv.TimeDependent = true
		}
		if f.Builtin && (readsNamedTables[f.Name] || RunsSQL(f.Name)) {
			sv.TablesKnown = false // it reads tables named at run time
		}
		if !f.Builtin {
			sv.UserFunctions = true
			if f.Opaque {
				sv.TablesKnown = false
			}
		}
	}
	for i := range sv.Functions {
		sv.Functions[i].PerSession = slices.Contains(sv.PerSession, sv.Functions[i].Schema+"."+sv.Functions[i].Name)
	}
	for t := range tables {
		sv.Tables = append(sv.Tables, t)
	}
	slices.Sort(sv.Tables)
	return sv, params, nil
}

// probeBody is the statement as a function body: without trailing
// semicolons (a trailing line comment ends at the newline the caller adds).
func probeBody(r *sqlscan.Result) string {
	return strings.TrimRight(r.Normalized, " \t\r\n;")
}

// volatilityName names pg_proc.provolatile's letter.
func volatilityName(v string) string {
	switch v {
	case "i":
		return "immutable"
	case "s":
		return "stable"
	}
	return "volatile"
}

// dedupFunctions keeps one entry per schema and name, the most volatile.
func dedupFunctions(fs []Function) []Function {
	rank := map[string]int{"immutable": 0, "stable": 1, "volatile": 2}
	slices.SortFunc(fs, func(a, b Function) int {
		if c := strings.Compare(a.Schema+"."+a.Name, b.Schema+"."+b.Name); c != 0 {
			return c
		}
		return rank[b.Volatility] - rank[a.Volatility]
	})
	return slices.CompactFunc(fs, func(a, b Function) bool { return a.Schema == b.Schema && a.Name == b.Name })
}
