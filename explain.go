package sqlflight

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"

	"github.com/sqlflight/sqlflight/internal/annotation"
	"github.com/sqlflight/sqlflight/internal/key"
	"github.com/sqlflight/sqlflight/internal/route"
	"github.com/sqlflight/sqlflight/internal/sqlscan"
)

// Explanation is what a Shield makes of one statement on a clean connection
// outside a transaction: the scanner's view, the effective policy, and
// whether it would be shared and cached, with the reason when not.
type Explanation struct {
	SQL        string `json:"sql"`
	Normalized string `json:"normalized"`
	// Shape is the statement shape: the normalized text with the constants
	// that do not change what the server concludes written as $n
	// placeholders numbered after its parameters (WHERE (id = 4) is
	// WHERE (id = $1)), Normalized itself when there is none. The server's
	// verdict is asked once per shape, and the statistics (Statement) count
	// the shape; the cache keys the normalized text and its arguments.
	Shape string `json:"shape"`
	// Fingerprint is the shape's (Shield.Statements' and the logs').
	Fingerprint string `json:"fingerprint"`
	Kind        string `json:"kind"`
	Statements  int    `json:"statements"`
	ReadOnly    bool   `json:"read_only"`
	Verdict     string `json:"verdict"` // "shareable", "in-flight-only", "opt-in" or "never"
	Shared      bool   `json:"shared"`
	Cached      bool   `json:"cached"`
	// Fleet tells whether, with a shared tier, the result would be shared
	// across instances too (cached, with the tables it reads known).
	Fleet bool `json:"fleet"`
	// Reason says why not shared (what the statement is: "write: UPDATE",
	// "transaction control: BEGIN", "calls random (volatile)"), or why
	// not cached.
	Reason string `json:"reason,omitempty"`
	// Bypass is the Stats.BypassReasons key a call would count under when
	// it is not shared ("write" for every statement not known to be
	// read-only, writes or not); empty when it is shared.
	Bypass      string   `json:"bypass,omitempty"`
	Tables      []string `json:"tables"`
	Writes      []string `json:"writes"`
	TablesKnown bool     `json:"tables_known"`
	Functions   []string `json:"functions"`
	Unknown     []string `json:"unknown_functions"`
	Annotation  string   `json:"annotation,omitempty"`
	Error       string   `json:"error,omitempty"` // a malformed annotation or unscannable text
	Policy      Policy   `json:"policy"`

	// Verified says the server's verdict is included (Server); otherwise
	// Provisional says why the verdict is the scanner's alone.
	Verified    bool           `json:"verified"`
	Provisional string         `json:"provisional,omitempty"`
	Server      *ServerVerdict `json:"server,omitempty"`
	// What the statement may change when it runs: WritesAll, any table
	// (DDL, triggers, rules, volatile functions, unknown targets); else
	// the tables in WriteClosure (cascading foreign keys and inheritance
	// included).
	WriteClosure []string `json:"write_closure,omitempty"`
	WritesAll    bool     `json:"writes_all,omitempty"`

	// Batch is the column the reads of a shared statement are batched on
	// when many keys miss at once (WHERE id = $1: "id"), "" when they are
	// not; BatchReason then says why not. Only the server's verdict
	// (ExplainDB) tells: the column's type and collation are the server's.
	Batch       string `json:"batch,omitempty"`
	BatchReason string `json:"batch_reason,omitempty"`

	// Statement is the statement's statistics (Shield.Statements), when
	// the Shield counts it.
	Statement *StatementStats `json:"statement,omitempty"`
}

// Explain tells how s would route query under ctx (its context policy
// applies), on the scanner's word alone: the server is not asked, so the
// verdict is provisional (Verified is false). ExplainDB asks the server.
func (s *Shield) Explain(ctx context.Context, query string) Explanation {
	c := &conn{s: s.engine, sc: &scope{}} // clean, and of no server
	x := s.explain(ctx, c, sqlscan.Parse(query), query, false)
	x.Provisional = "the scanner's verdict alone: the server was not asked (ExplainDB, or sqlflight explain -dsn)"
	return x
}

// ExplainDB tells how the Shield behind db would route query on a clean
// connection of db outside a transaction, with the server's verdict: on
// PostgreSQL it asks the catalog what the statement really calls and reads
// (waiting for the answer), and for a write what it may change. On other
// parents the verdict is the scanner's alone, and Provisional says so. It
// fails if db was not opened through sqlflight or no connection can be had.
func ExplainDB(ctx context.Context, db *sql.DB, query string) (Explanation, error) {
	s := ShieldOf(db)
	if s == nil {
		return Explanation{}, errors.New("sqlflight: ExplainDB: db was not opened through sqlflight")
	}
	dc, err := db.Conn(ctx)
	if err != nil {
		return Explanation{}, err
	}
	defer dc.Close()
	var sc *scope
	if err := dc.Raw(func(d any) error {
		if b, ok := d.(connBase); ok {
			sc = b.virtual().sc
			return nil
		}
		return errors.New("sqlflight: ExplainDB: not a sqlflight connection")
	}); err != nil {
		return Explanation{}, err
	}
	c := &conn{s: s.engine, sc: sc} // clean, outside a transaction
	x := s.explain(ctx, c, c.scan(query), query, true)
	switch {
	case !sc.postgres:
		x.Provisional = "text only: the parent driver is not PostgreSQL, so no catalog can confirm the scanner's verdict"
	case !sc.verdicts.Asks():
		x.Provisional = "text only: the server refuses the probe (a hot standby, a read-only default, or no TEMPORARY privilege)"
	}
	return x, nil
}

func (s *engine) explain(ctx context.Context, c *conn, r *sqlscan.Result, query string, ask bool) Explanation {
	x := Explanation{
		SQL: query, Normalized: r.Normalized, Shape: r.Shape, Fingerprint: key.Fingerprint(r.ShapeKey), Kind: r.Kind.String(),
		Statements: len(r.Statements), ReadOnly: r.ReadOnly, Verdict: r.Verdict.String(), Reason: r.Reason,
		Tables: r.Tables, Writes: r.Writes, TablesKnown: r.TablesKnown, Functions: r.Functions, Unknown: r.Unknown,
		Annotation: r.Annotation, Error: r.Err, Statement: s.statements.Export(r.ShapeKey),
	}
	if r.HasAnnotation {
		if _, err := annotation.Parse(r.Annotation); err != nil {
			x.Error = err.Error()
		}
	}
	f := s.routeQuiet(ctx, c, r, ask)
	if ask && f.v == nil && c.sc.verdicts.Asks() && len(r.Statements) == 1 && r.Kind == sqlscan.KindSelect {
		// Not a candidate for sharing, but the verdict still says what it
		// calls and whether it may write.
		f.v = c.sc.verdicts.Of(r)
	}
	if v := f.v; v != nil && v.Await(ctx) {
		if v.Err != nil {
			x.Error = "the server's verdict could not be had: " + errText.Class(v.Err)
		} else {
			sv := v.Server
			x.Verified = true
			x.Server = &sv
			x.Server.Volatile = v.VolatileUnvouched(f.a.Pure)
			x.Tables = f.tables
			x.TablesKnown = f.known
		}
	}
	x.Policy = f.plan.pol
	why := route.Why{Reason: f.reason, Scan: r, Soft: f.plan.pol.Soft, NoCache: f.plan.pol.NoCache}
	if v := f.v; v != nil && v.Known() {
		why.Known, why.Failed = true, v.Err != nil
		if v.Err != nil {
			why.Err = errText.Class(v.Err)
		}
		why.Unvouched, why.PerSession = v.VolatileUnvouched(f.a.Pure), v.Server.PerSession
		why.TimeDependent, why.UserFunctions, why.Volatile = v.Server.TimeDependent, v.Server.UserFunctions, len(v.Server.Volatile) > 0
	}
	switch reason := f.reason; {
	case reason == bypassWrite:
		// Not known to be read-only: say what the statement is, a write or
		// not (a volatile function, a transaction, session state, text
		// that is not a query).
		x.Bypass, x.Reason = reason, r.Reason
		if x.Reason == "" {
			x.Reason = "not known to be read-only"
		}
	case reason != "":
		x.Bypass, x.Reason = reason, reason+why.Detail()
	default:
		x.Shared = true
		x.Cached = f.plan.cache
		x.Fleet = f.plan.cache && f.known
		x.Reason = ""
		if !f.plan.cache {
			x.Reason = why.NotCached()
		}
		x.Batch, x.BatchReason = s.explainBatch(c, f)
	}
	// Tables named by the policy (a tables= annotation, a rule) are what a
	// read reads and what a write changes, shared or not.
	named := f.plan.pol.Tables
	if named == nil && f.a.Set&annotation.SetTables != 0 {
		named = f.a.Fields.Tables // bypassed before the policy was resolved
	}
	switch {
	case named == nil:
	case r.ReadOnly || x.Shared || r.Kind == sqlscan.KindSelect:
		x.Tables, x.TablesKnown = named, true
	default:
		x.Writes = named
	}
	// What it may write, for a statement that ran through this connection.
	var all bool
	var closure []string
	for i := range r.Statements {
		if w, ok := c.writeOf(ctx, &fate{r: r, a: f.a, v: f.v}, &r.Statements[i]); ok {
			all = all || !w.known
			closure = append(closure, w.tables...)
		}
	}
	if all {
		x.WritesAll = true
	} else if len(closure) > 0 {
		x.WriteClosure = route.Union(closure, nil)
	}
	return x
}

// MarshalJSON encodes x with its policy's durations as Go duration strings
// ("30s", "5m0s") and every list as a list, empty or not (never null).
func (x Explanation) MarshalJSON() ([]byte, error) {
	type plain Explanation // without these methods
	v := struct {
		plain
		Policy annotation.JSON `json:"policy"`
		Server *ServerVerdict  `json:"server,omitempty"`
	}{plain: plain(x), Policy: annotation.ToJSON(annotation.Fields(x.Policy))}
	for _, l := range []*[]string{&v.Tables, &v.Writes, &v.Functions, &v.Unknown} {
		if *l == nil {
			*l = []string{}
		}
	}
	if x.Server != nil {
		sv := *x.Server
		if sv.Functions == nil {
			sv.Functions = []FunctionVerdict{}
		}
		for _, l := range []*[]string{&sv.Tables, &sv.Volatile, &sv.PerSession} {
			if *l == nil {
				*l = []string{}
			}
		}
		v.Server = &sv
	}
	return json.Marshal(v)
}

// UnmarshalJSON decodes what MarshalJSON encodes; a policy duration may
// also be a number of nanoseconds.
func (x *Explanation) UnmarshalJSON(b []byte) error {
	type plain Explanation
	v := struct {
		*plain
		Policy annotation.JSON `json:"policy"`
	}{plain: (*plain)(x)}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	x.Policy = Policy(v.Policy.Fields())
	return nil
}

// explainBatch tells whether the reads of f, a shared statement, batch, on
// which column, or why not.
func (s *engine) explainBatch(c *conn, f *fate) (col, why string) {
	v := f.v
	switch {
	case s.opts.NoBatch:
		return "", "batching is off (Options.NoBatch)"
	case f.plan.pol.NoBatch:
		return "", "batching is off for the statement (nobatch)"
	case v == nil || !v.Known():
		return "", "only the server's verdict tells (ExplainDB)"
	case v.Err != nil:
		return "", "the server's verdict could not be had"
	case !f.known || len(f.tables) != 1:
		return "", "reads more than one table"
	}
	tb := c.sc.batchPlan(v, f.r)
	if tb.p.Why != "" {
		return "", tb.p.Why
	}
	if _, refused := c.sc.batchRefused.Load(v); refused {
		return "", "the server refused its batched form"
	}
	return tb.p.Col, ""
}
