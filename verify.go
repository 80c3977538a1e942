package sqlflight

import (
	"context"
	"crypto/sha256"
	"database/sql/driver"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlflight/sqlflight/internal/key"
	"github.com/sqlflight/sqlflight/internal/sqlscan"
)

// The server's word. The scanner only filters: what it calls never
// shareable stays never, and everything it would share is confirmed by
// PostgreSQL's catalog once per statement shape and scope before its result
// is shared. The probe plans the statement as the body of a temporary
// SQL-standard function (BEGIN ATOMIC … END), with its parameters typed as
// the server infers them, inside a transaction that is always rolled back,
// on a spare connection of the scope; the function's recorded dependencies
// (pg_depend, through views' rewrite rules, operators and SQL-standard
// function bodies, recursively) name the user functions and relations it
// really reaches, and the deparsed texts (the body, view definitions,
// SQL-standard function bodies) name the built-in functions, which the
// catalog pins and so never records as dependencies.

// FunctionVerdict is one function a statement really calls, as the server
// resolves it.
type FunctionVerdict struct {
	Schema     string `json:"schema,omitempty"`
	Name       string `json:"name"`
	Volatility string `json:"volatility"` // "immutable", "stable" or "volatile"
	Builtin    bool   `json:"builtin"`    // part of PostgreSQL itself
	// Opaque functions have bodies the server cannot see into (plpgsql, C,
	// a string SQL body): they may read any table.
	Opaque     bool `json:"opaque,omitempty"`
	PerSession bool `json:"per_session,omitempty"`
}

// ServerVerdict is what PostgreSQL says a statement calls and reads.
type ServerVerdict struct {
	Functions []FunctionVerdict `json:"functions"`
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

// verdict is the server's word on one statement shape in one scope. ready
// is closed once the fields are set.
type verdict struct {
	ready chan struct{}
	done  atomic.Bool // ready is closed (read without a select on the hit path)
	gen   uint64      // the Shield's schema generation it was learned under

	err     error     // the probe failed: the statement runs unshared
	retryAt time.Time // the verdict is asked again after this

	sv     ServerVerdict
	tables []string // what a shared result depends on: the server's base tables and the names in the text
	params []uint32 // parameter type OIDs
	// rows is the statement's row filter, when its reads may be tagged
	// by the rows they select (row-level invalidation).
	rows *readFilter
}

func (v *verdict) known() bool { return v.done.Load() }

// publish makes v known.
func (v *verdict) publish() {
	v.done.Store(true)
	close(v.ready)
}

// volatileUnvouched reports the volatile functions that pure does not name.
func (v *verdict) volatileUnvouched(pure []string) []string {
	if len(pure) == 0 {
		return v.sv.Volatile
	}
	var out []string
	for _, f := range v.sv.Volatile {
		if !pureNames(pure, f) {
			out = append(out, f)
		}
	}
	return out
}

// pureNames reports whether the pure= entries name fn ("schema.name" or a
// bare name, compared without regard to case).
func pureNames(pure []string, fn string) bool {
	bare := fn
	if i := strings.LastIndexByte(fn, '.'); i >= 0 {
		bare = fn[i+1:]
	}
	for _, p := range pure {
		p = strings.ToLower(strings.Trim(p, `"`))
		if p == strings.ToLower(fn) || p == strings.ToLower(bare) {
			return true
		}
	}
	return false
}

// verdictMemo remembers a scope's verdicts in bounded memory; a new memo
// replaces it when it is full or the schema changed.
type verdictMemo struct {
	gen   uint64
	m     sync.Map // memoKey(normalized SQL) → *verdict
	n     atomic.Int64
	bytes atomic.Int64 // of the keys
}

// memoKey is the memo's key for a normalized text: the text itself when it
// is short, a SHA-256 digest of it otherwise, so that a statement of
// megabytes is not kept for as long as its verdict stands. The two kinds
// never meet: no normalized text starts with a NUL byte.
func memoKey(normalized string) string {
	if len(normalized) <= maxVerdictKey {
		return normalized
	}
	sum := sha256.Sum256([]byte(normalized))
	return "\x00" + string(sum[:])
}

const (
	maxVerdicts = 8192
	// maxVerdictKey is the longest text the memo keeps as its key; longer
	// ones are kept as digests. maxVerdictBytes bounds the keys' bytes.
	maxVerdictKey   = 1024
	maxVerdictBytes = 4 << 20
	// verdictWait bounds how long a caller waits for the probe of a new
	// shape before running it unshared.
	verdictWait = 2 * time.Second
	// maxPendingProbes bounds the probes a scope keeps waiting or running.
	maxPendingProbes = 64
	// probeTimeout bounds one probe on the server.
	probeTimeout = 5 * time.Second
	// retryFailedProbe is how long a failed verdict stands.
	retryFailedProbe = 5 * time.Second
	// verdictMaxAge is how long a verdict stands: DDL through the Shield
	// forgets it at once, DDL by anyone else after this.
	verdictMaxAge = 10 * time.Minute
	// maxProbes bounds the probes a scope runs at once.
	maxProbes = 2
)

// verdictOf returns the scope's verdict on r, starting a probe when there
// is none (or a failed one expired). It returns nil when the parent is not
// PostgreSQL: its verdicts are the scanner's alone.
func (sc *scope) verdictOf(s *Shield, r *sqlscan.Result) *verdict {
	if !sc.serverVerdicts() {
		return nil
	}
	if plainText(r) {
		return plainVerdict
	}
	gen := s.schemaGen.Load()
	memo := sc.verdicts.Load()
	if memo == nil || memo.gen != gen {
		fresh := &verdictMemo{gen: gen}
		if sc.verdicts.CompareAndSwap(memo, fresh) {
			memo = fresh
		} else {
			memo = sc.verdicts.Load()
		}
	}
	key := memoKey(r.Normalized)
	if x, ok := memo.m.Load(key); ok {
		v := x.(*verdict)
		if !v.known() || time.Now().Before(v.retryAt) {
			return v
		}
		// A failed verdict stands a few seconds, a good one verdictMaxAge
		// (the schema may change behind the Shield's back): ask again.
		nv := &verdict{ready: make(chan struct{}), gen: gen}
		if memo.m.CompareAndSwap(key, v, nv) {
			sc.startProbe(s, nv, r)
			return nv
		}
		x, _ = memo.m.Load(key)
		if x == nil {
			return v
		}
		return x.(*verdict)
	}
	if memo.n.Add(1) > maxVerdicts || memo.bytes.Add(int64(len(key))) > maxVerdictBytes {
		sc.verdicts.CompareAndSwap(memo, &verdictMemo{gen: gen})
		memo = sc.verdicts.Load()
	}
	nv := &verdict{ready: make(chan struct{}), gen: gen}
	x, loaded := memo.m.LoadOrStore(key, nv)
	if loaded {
		return x.(*verdict)
	}
	sc.startProbe(s, nv, r)
	return nv
}

// startProbe runs v's probe in the background, unless too many wait
// already (an application that inlines its values makes a new shape per
// call): then v fails at once, briefly, and the statement runs unshared.
func (sc *scope) startProbe(s *Shield, v *verdict, r *sqlscan.Result) {
	if sc.pending.Add(1) > maxPendingProbes {
		sc.pending.Add(-1)
		s.stats.probeFailures.Add(1)
		v.err = errProbesBusy
		v.retryAt = time.Now().Add(time.Second)
		v.publish()
		return
	}
	go func() {
		defer sc.pending.Add(-1)
		sc.probe(s, v, r)
	}()
}

var errProbesBusy = errors.New("sqlflight: too many statement shapes wait for the server's verdict")

// plainVerdict is the verdict on a statement with nothing for the server to
// resolve.
var plainVerdict = func() *verdict {
	v := &verdict{ready: make(chan struct{}), sv: ServerVerdict{TablesKnown: true}, tables: []string{}}
	v.publish()
	return v
}()

// plainText reports whether r leaves the server nothing to resolve: a
// SELECT of numbers and parameters alone (SELECT 1, SELECT $1, $2). No
// relation, function, operator, cast (a domain's CHECK, a user cast) or
// attribute notation can hide in it.
func plainText(r *sqlscan.Result) bool {
	if len(r.Statements) != 1 || r.Kind != sqlscan.KindSelect || len(r.Tables) != 0 || len(r.Functions) != 0 {
		return false
	}
	rest, ok := strings.CutPrefix(r.Normalized, "SELECT ")
	if !ok {
		rest, ok = strings.CutPrefix(r.Normalized, "select ")
	}
	return ok && strings.Trim(rest, "0123456789$, ") == ""
}

// serverVerdicts reports whether the scope's server can be asked for
// verdicts: a PostgreSQL that accepts the probe.
func (sc *scope) serverVerdicts() bool { return sc.postgres && !sc.textOnly.Load() }

// awaitVerdict waits for v on ctx, at most verdictWait, and reports
// whether it is known (failed ones included).
func awaitVerdict(ctx context.Context, v *verdict) bool {
	if v.known() {
		return true
	}
	t := time.NewTimer(verdictWait)
	defer t.Stop()
	select {
	case <-v.ready:
		return true
	case <-ctx.Done():
	case <-t.C:
	}
	return false
}

// awaitVerdict is awaitVerdict on c's caller. Under Options.MaxConns its
// real connection is lendable meanwhile: the probe may need it.
func (c *conn) awaitVerdict(ctx context.Context, v *verdict) bool {
	if v.known() || c.sc.spare.max <= 0 {
		return awaitVerdict(ctx, v)
	}
	c.offer()
	defer c.withdraw()
	return awaitVerdict(ctx, v)
}

// probe asks the server for v and publishes it.
func (sc *scope) probe(s *Shield, v *verdict, r *sqlscan.Result) {
	defer v.publish()
	defer func() {
		if p := recover(); p != nil {
			v.err = wrapf("sqlflight: statement probe panicked: %v", p)
			v.retryAt = time.Now().Add(retryFailedProbe)
		}
	}()
	sc.probes <- struct{}{}
	defer func() { <-sc.probes }()
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	start := time.Now()
	v.retryAt = time.Now().Add(verdictMaxAge)
	err := sc.withSpare(ctx, s, func(conn catalogSession) error {
		sv, params, err := probeStatement(ctx, conn, r)
		if err == nil {
			v.sv, v.params, v.tables = sv, params, union(sv.Tables, r.Tables)
			v.rows = sc.learnRows(ctx, s, conn, r, v)
		}
		return err
	})
	s.stats.probes.Add(1)
	s.stats.probeDuration.observe(time.Since(start))
	if errors.Is(err, errNoProbe) && !sc.textOnly.Swap(true) {
		s.log.Warn("sqlflight: the server refuses the probe (a hot standby, a read-only default, or no TEMPORARY privilege); this scope's verdicts are the scanner's alone",
			"error", errorClass(errors.Unwrap(err)))
	}
	if err != nil {
		s.stats.probeFailures.Add(1)
		v.err = err
		v.retryAt = time.Now().Add(retryFailedProbe)
		s.warnEvery("probe", r.Normalized, "sqlflight: the server's verdict on a statement could not be had; it runs unshared",
			"error", errorClass(err), "fingerprint", key.Fingerprint(r.Normalized))
	}
}

// withSpare runs f on a spare real connection of the scope (never a
// caller's) and gives it back, broken if f failed in a way that may have
// left the session dirty.
func (sc *scope) withSpare(ctx context.Context, s *Shield, f func(catalogSession) error) error {
	rc, _, err := sc.anyReal(ctx, s)
	if err != nil {
		return err
	}
	broken := true // unless f returns normally and leaves the session idle
	defer func() { sc.spare.put(rc, broken, s) }()
	c := catalogOf(rc)
	err = f(c)
	broken = !c.clean()
	return err
}

// noteConn learns what a new real connection tells about the server:
// standard_conforming_strings off makes backslashes escapes in '…'.
func (sc *scope) noteConn(rc driver.Conn) {
	if c, ok := rc.(*stdlib.Conn); ok {
		if c.Conn().PgConn().ParameterStatus("standard_conforming_strings") == "off" {
			sc.nonStandard.Store(true)
		}
		return
	}
	if !sc.postgres {
		return
	}
	// Another PostgreSQL driver: the setting is asked (a session may
	// change it, but a new connection starts with the server's default).
	ctx, cancel := context.WithTimeout(context.Background(), detectTimeout)
	defer cancel()
	rows, err := (&driverCatalog{rc: rc}).query(ctx, `SELECT pg_catalog.current_setting('standard_conforming_strings')`)
	if err == nil && len(rows) == 1 && len(rows[0]) == 1 && rows[0][0] != nil && *rows[0][0] == "off" {
		sc.nonStandard.Store(true) // as a pgx connection's ParameterStatus says it
	}
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

// runsSQL reports whether a built-in runs SQL (or changes large objects)
// given at run time: whatever that SQL calls may write any table.
func runsSQL(name string) bool {
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

// errNoProbe: the server refuses the probe itself (read-only, or no
// TEMPORARY privilege); the scope falls back to the scanner's verdicts.
var errNoProbe = errors.New("sqlflight: the server cannot be asked for its verdict")

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

// probeStatement plans r on conn and returns the server's verdict and the
// parameter types. The fixed catalog queries are prepared once per
// connection (pgx's statement cache); the probe function's text is new
// each time and goes through the extended protocol, which runs exactly one
// statement whatever the text holds.
func probeStatement(ctx context.Context, conn catalogSession, r *sqlscan.Result) (ServerVerdict, []uint32, error) {
	var sv ServerVerdict
	body := probeBody(r)
	// Everything runs in one transaction that is rolled back, under short
	// timeouts: a lock held by a caller's own transaction (ALTER, LOCK,
	// TRUNCATE before a read) fails the probe at once instead of stalling it.
	if err := conn.exec(ctx, "BEGIN"); err != nil {
		return sv, nil, err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = conn.exec(rctx, "ROLLBACK")
	}()
	for _, q := range []string{"SET LOCAL statement_timeout = '5s'", "SET LOCAL lock_timeout = '200ms'"} {
		if err := conn.exec(ctx, q); err != nil {
			return sv, nil, err
		}
	}
	params, types, err := conn.paramTypes(ctx, body)
	if err != nil {
		return sv, nil, err
	}
	create := "CREATE FUNCTION pg_temp." + probeName + "(" + strings.Join(types, ", ") +
		") RETURNS SETOF record LANGUAGE sql BEGIN ATOMIC\n" + body + "\n;\nEND"
	if err := conn.exec(ctx, create); err != nil {
		if code := sqlState(err); code == "25006" || code == "42501" {
			// A hot standby, a read-only default, or no TEMPORARY privilege:
			// this server cannot be asked at all.
			return sv, nil, fmt.Errorf("%w: %w", errNoProbe, err)
		}
		return sv, nil, err
	}
	deps, err := conn.query(ctx, depsQuery)
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
			sv.Functions = append(sv.Functions, FunctionVerdict{Schema: schema, Name: name,
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
		rows, err := conn.query(ctx, builtinQuery, textArray(list))
		if err != nil {
			return sv, nil, err
		}
		for _, row := range rows {
			if len(row) != 2 || row[0] == nil || row[1] == nil {
				return sv, nil, errors.New("sqlflight: unexpected answer to the built-ins query")
			}
			sv.Functions = append(sv.Functions, FunctionVerdict{Schema: "pg_catalog", Name: *row[0],
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
		if f.Builtin && (readsNamedTables[f.Name] || runsSQL(f.Name)) {
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
func dedupFunctions(fs []FunctionVerdict) []FunctionVerdict {
	rank := map[string]int{"immutable": 0, "stable": 1, "volatile": 2}
	slices.SortFunc(fs, func(a, b FunctionVerdict) int {
		if c := strings.Compare(a.Schema+"."+a.Name, b.Schema+"."+b.Name); c != 0 {
			return c
		}
		return rank[b.Volatility] - rank[a.Volatility]
	})
	return slices.CompactFunc(fs, func(a, b FunctionVerdict) bool { return a.Schema == b.Schema && a.Name == b.Name })
}

// Write closures: the tables a write to a table may change in the same
// statement, learned once per table and scope.

// closure is what a write to one table may change.
type closure struct {
	tables []string
	all    bool // triggers, rules or a view: any table
}

// closureQuery follows cascading foreign keys and inheritance from the
// named tables, and tells which of them have user triggers or rules. The
// NOTIFY feed's triggers (InstallTriggersSQL) write nothing and do not
// count.
const closureQuery = `WITH RECURSIVE w(rel) AS (
  SELECT c.oid FROM pg_catalog.pg_class c WHERE c.relname = ANY($1::text::text[])
  UNION
  SELECT x.rel FROM w, LATERAL (
    SELECT con.conrelid AS rel FROM pg_catalog.pg_constraint con
    WHERE con.contype = 'f' AND con.confrelid = w.rel
      AND (con.confdeltype IN ('c', 'n', 'd') OR con.confupdtype IN ('c', 'n', 'd'))
    UNION ALL SELECT i.inhparent FROM pg_catalog.pg_inherits i WHERE i.inhrelid = w.rel
    UNION ALL SELECT i.inhrelid FROM pg_catalog.pg_inherits i WHERE i.inhparent = w.rel
  ) x
)
SELECT c.relname::text,
  c.relkind IN ('v', 'f')
  OR EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t WHERE t.tgrelid = c.oid AND NOT t.tgisinternal
    AND t.tgfoid IS DISTINCT FROM pg_catalog.to_regprocedure('` + triggerFunction + `')::oid)
  OR EXISTS (SELECT 1 FROM pg_catalog.pg_rewrite r WHERE r.ev_class = c.oid AND r.rulename <> '_RETURN')
FROM w JOIN pg_catalog.pg_class c ON c.oid = w.rel`

type closureMemo struct {
	gen uint64
	mu  sync.Mutex
	m   map[string]closure
}

// writeClosure returns the tables a write to tables may change, and false
// when that may be any table. On PostgreSQL it asks the catalog once per
// table (on a spare connection); elsewhere the tables are what they are.
func (sc *scope) writeClosure(ctx context.Context, s *Shield, tables []string) ([]string, bool) {
	if !sc.postgres || len(tables) == 0 {
		return tables, true
	}
	gen := s.schemaGen.Load()
	memo := sc.closures.Load()
	if memo == nil || memo.gen != gen {
		fresh := &closureMemo{gen: gen, m: map[string]closure{}}
		if !sc.closures.CompareAndSwap(memo, fresh) {
			fresh = sc.closures.Load()
		}
		memo = fresh
	}
	out := slices.Clone(tables)
	var missing []string
	memo.mu.Lock()
	for _, t := range tables {
		cl, ok := memo.m[tableKey(t)]
		switch {
		case !ok:
			missing = append(missing, t)
		case cl.all:
			memo.mu.Unlock()
			return nil, false
		default:
			out = append(out, cl.tables...)
		}
	}
	memo.mu.Unlock()
	if len(missing) == 0 {
		return out, true
	}
	// Lookups share the probes' slots: concurrent writers after a schema
	// change must not each open a spare connection.
	wait := time.NewTimer(time.Second)
	defer wait.Stop()
	select {
	case sc.probes <- struct{}{}:
		defer func() { <-sc.probes }()
	case <-ctx.Done():
		return nil, false
	case <-wait.C:
		return nil, false // busy: any table
	}
	learned := make(map[string]closure, len(missing))
	err := sc.withSpare(ctx, s, func(conn catalogSession) error {
		for _, t := range missing {
			cl, err := queryClosure(ctx, conn, t)
			if err != nil {
				return err
			}
			learned[tableKey(t)] = cl
		}
		return nil
	})
	if err != nil {
		return nil, false // unknown: any table
	}
	memo.mu.Lock()
	if len(memo.m) > maxVerdicts {
		clear(memo.m)
	}
	for k, cl := range learned {
		memo.m[k] = cl
	}
	memo.mu.Unlock()
	for _, cl := range learned {
		if cl.all {
			return nil, false
		}
		out = append(out, cl.tables...)
	}
	slices.Sort(out)
	return slices.Compact(out), true
}

func queryClosure(ctx context.Context, conn catalogSession, table string) (closure, error) {
	name := strings.Trim(table, `"`)
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		name = name[i+1:]
	}
	// The scanner keeps quoted names exact and folds the others; epochs
	// fold every name, so ask for both spellings.
	rows, err := conn.query(ctx, closureQuery, textArray([]string{name, strings.ToLower(name)}))
	if err != nil {
		return closure{}, err
	}
	var cl closure
	for _, row := range rows {
		if len(row) != 2 || row[0] == nil || row[1] == nil {
			return closure{}, errors.New("sqlflight: unexpected answer to the closure query")
		}
		cl.tables = append(cl.tables, tableKey(*row[0]))
		cl.all = cl.all || *row[1] == "t"
	}
	return cl, nil
}

// textArray is list as a PostgreSQL array literal of text.
func textArray(list []string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, s := range list {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		for _, r := range s {
			if r == '"' || r == '\\' {
				b.WriteByte('\\')
			}
			b.WriteRune(r)
		}
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

// learnRows returns the row filter of the verdict v on r, learning the
// classes of its table's columns from the catalog (the Shield remembers
// them for the writes and changes to that table), or nil when its reads
// are judged by their table.
func (sc *scope) learnRows(ctx context.Context, s *Shield, conn catalogSession, r *sqlscan.Result, v *verdict) *readFilter {
	rf, table := readFilterOf(r, sc.nonStandard.Load())
	if rf == nil {
		return nil
	}
	cols, err := queryColumns(ctx, conn, table)
	if err != nil {
		return nil
	}
	s.rowCols.set(table, cols, v.gen)
	return newReadFilter(rf, table, cols, v.params)
}
