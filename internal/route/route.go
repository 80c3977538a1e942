// Package route decides the fate of a read: whether a scanned statement is
// shared (coalesced, and maybe cached) and under which policy, or why it goes
// straight to the database.
//
// Decide is a pure function of plain inputs: the scanner's result, the
// statement's annotation, the policy below the annotation, the connection's
// state and, when one is asked for, a summary of the server's verdict. It
// does no I/O of its own; the only call it makes out is Input.Verdict, once,
// and only for a statement that got past every other test.
//
// Precedence of policies: the statement's annotation (field by field), then
// the context's policy, then the first matching rule (RuleMatches), then the
// default; the caller resolves the last three into Input.Base.
//
// Whatever the policy says, a statement is never shared when it has a
// malformed annotation (ReasonBadAnnotation), runs in a transaction
// (ReasonTx), runs on a session changed under no scope or under another one
// (ReasonSession), may write (ReasonWrite), is never shareable to the scanner,
// calls a VOLATILE function its pure= entry does not vouch for, or calls a
// per-session function (ReasonNotShareable), runs while the connection has
// rows open (ReasonBusy), or has a verdict that cannot be had
// (ReasonUnverified). A policy may turn sharing off (ReasonPolicy) but never
// vouch for a function: only the statement's own pure= entry does. Results of
// time functions, time words, clock-following arguments and user functions
// are cached only under a TTL the statement itself states; otherwise they are
// only coalesced.
//
// The reason strings are part of the public surface (Stats.BypassReasons,
// docs/configuration.md, prom.BypassReasons) and never change.
package route

import (
	"database/sql/driver"
	"regexp"
	"slices"
	"strings"

	"github.com/sqlflight/sqlflight/internal/annotation"
	"github.com/sqlflight/sqlflight/internal/epoch"
	"github.com/sqlflight/sqlflight/internal/sqlscan"
)

// Reasons a statement bypasses sharing. Each one is documented on
// Stats.BypassReasons, in docs/configuration.md ("Options and stats") and
// listed in prom.BypassReasons.
const (
	// ReasonExec is an Exec, which is never shared.
	ReasonExec = "exec"
	// ReasonTx is a statement inside a transaction.
	ReasonTx = "transaction"
	// ReasonSession is a statement on a session changed under no scope, or
	// under another scope than the context's.
	ReasonSession = "session"
	// ReasonWrite is a statement the scanner does not know to be read-only.
	ReasonWrite = "write"
	// ReasonNotShareable is a statement whose functions forbid sharing.
	ReasonNotShareable = "not shareable"
	// ReasonUnverified is a statement whose server verdict is not known in
	// time, or could not be had.
	ReasonUnverified = "unverified"
	// ReasonPolicy is a statement its policy sends straight to the database.
	ReasonPolicy = "policy"
	// ReasonArgs is a statement whose arguments cannot be keyed.
	ReasonArgs = "arguments"
	// ReasonTooLarge is a statement whose text or result is over its limit.
	ReasonTooLarge = "too large"
	// ReasonBusy is a statement run while the connection has rows open.
	ReasonBusy = "busy connection"
	// ReasonBadAnnotation is a statement with a malformed annotation.
	ReasonBadAnnotation = "bad annotation"
)

// Conn is the connection's state a decision reads.
type Conn struct {
	// InTx says a transaction is open (Begin or SQL BEGIN).
	InTx bool
	// Tainted says the session changed in a way no scope covers.
	Tainted bool
	// Scoped says the session was changed under SessionScope.
	Scoped bool
	// SessionScope is the scope the session was changed under, if Scoped.
	SessionScope string
	// ScopeSet and Scope are the context's scope (WithScope).
	ScopeSet bool
	Scope    string
	// OpenRows says rows of another statement are still open on it.
	OpenRows bool
}

// Verdict is the part of the server's verdict a decision reads.
type Verdict struct {
	// Verified says the verdict came in time and without error; when false,
	// the other fields are not read.
	Verified bool
	// Volatile names the VOLATILE user functions it calls.
	Volatile []string
	// PerSession names the functions whose result depends on the session.
	PerSession []string
	// TimeDependent and UserFunctions say its result follows the clock, or
	// comes from user functions.
	TimeDependent bool
	UserFunctions bool
	// Tables are the tables it depends on (known false: any table).
	Tables      []string
	TablesKnown bool
}

// Input is everything a decision depends on.
type Input struct {
	// Scan is the scanner's result for the statement; never nil.
	Scan *sqlscan.Result
	// Annotated says Annotation is the statement's good annotation; with
	// Scan.HasAnnotation set and Annotated false, the annotation is bad.
	Annotated  bool
	Annotation annotation.Annotation
	// Base is the policy below the annotation (context, rule or default).
	Base annotation.Fields
	// Conn is the connection's state.
	Conn Conn
	// Args are the statement's arguments.
	Args []driver.NamedValue
	// Verdict, when not nil, asks for the server's verdict (and waits for
	// it); it is called at most once, and only after every test before it
	// has passed. It reports false when there is no verdict to be had (the
	// statement is then judged on its text, as with a nil Verdict).
	Verdict func() (Verdict, bool)
}

// Plan is what becomes of a statement. The fields past the reason are set as
// far as the decision got: a statement bypassed early carries a zero policy.
type Plan struct {
	// Reason is why it goes straight to the database; "" means it is
	// shared (coalesced, and cached when Cache is set).
	Reason string
	// Policy is its policy, the annotation merged over the base.
	Policy annotation.Fields
	// Cache says its result may be cached under Policy.
	Cache bool
	// Cacheable says its verdict lets a TTL cache it.
	Cacheable bool
	// Tables are the tables it depends on (Known false: any table).
	Tables []string
	Known  bool
	// Verified says the server's verdict was asked for and vouched for it.
	Verified bool
}

// Gate returns the reason a statement bypasses sharing before any policy is
// read ("" when none does): a bad annotation, a transaction, a changed
// session, a write, a statement never shareable, a busy connection, in that
// order. Decide calls it first; a caller may call it to skip resolving the
// base policy.
func Gate(r *sqlscan.Result, annotated bool, c Conn) string {
	switch {
	case !annotated && r.HasAnnotation:
		return ReasonBadAnnotation
	case c.InTx:
		return ReasonTx
	case c.Tainted, c.Scoped && (!c.ScopeSet || c.Scope != c.SessionScope):
		// A session changed under no scope, or under another one.
		return ReasonSession
	case !r.ReadOnly:
		return ReasonWrite
	case r.Verdict == sqlscan.Never:
		return ReasonNotShareable
	case c.OpenRows:
		return ReasonBusy
	}
	return ""
}

// Decide returns the plan for the statement in. It is deterministic in its
// input, and calls in.Verdict at most once: it is Gate, Begin, then (unless
// Begin decided) the verdict and Finish.
func Decide(in Input) Plan {
	var p Plan
	if p.Reason = Gate(in.Scan, in.Annotated, in.Conn); p.Reason != "" {
		return p
	}
	if Begin(&in, &p) {
		return p
	}
	var v Verdict
	asked := false
	if in.Verdict != nil {
		v, asked = in.Verdict()
	}
	Finish(&in, &p, &v, asked)
	return p
}

// Begin is the part of Decide after Gate (which the caller called, and
// which passed) and before the server's verdict: it fills in p from the
// text and the policy, and reports whether p is decided (its Reason set)
// without the verdict. A caller that asks for the verdict itself (rather
// than through Input.Verdict, a closure its state may escape through)
// asks only when Begin reports false, and passes the answer to Finish.
func Begin(in *Input, p *Plan) (done bool) {
	r := in.Scan
	p.Policy = in.Base
	if in.Annotated {
		p.Policy = in.Annotation.Merge(in.Base)
	}
	p.Cacheable = r.Verdict == sqlscan.Shareable // the scanner's word, until the server's
	if p.Policy.Off {
		p.Reason = ReasonPolicy
		return true
	}
	p.Tables, p.Known = r.Tables, r.TablesKnown
	return false
}

// Finish completes the plan p that Begin left undecided, with the server's
// verdict v when asked (asked false: none to be had, the statement is
// judged on its text).
func Finish(in *Input, p *Plan, v *Verdict, asked bool) {
	r, a := in.Scan, &in.Annotation
	pol := &p.Policy
	explicitTTL := in.Annotated && a.Set&annotation.SetSoft != 0 && a.Fields.Soft > 0
	// Results of time functions, time words and user functions are cached
	// only under a TTL the statement itself states.
	cacheable := r.Verdict == sqlscan.Shareable
	if asked {
		// The server's word. No policy vouches for a function; only the
		// statement's own pure= entry does.
		switch {
		case !v.Verified:
			p.Reason = ReasonUnverified
			return
		case len(VolatileUnvouched(v.Volatile, a.Pure)) > 0, len(v.PerSession) > 0:
			p.Reason = ReasonNotShareable
			return
		}
		p.Verified = true
		p.Tables, p.Known = v.Tables, v.TablesKnown
		cacheable = r.Verdict != sqlscan.InFlightOnly && !v.TimeDependent && !v.UserFunctions &&
			len(v.Volatile) == 0
	} else if r.Verdict == sqlscan.OptIn && !AllPure(a.Pure, r.Unknown) {
		// Text only: functions the scanner cannot vouch for may write.
		p.Reason = ReasonNotShareable
		return
	}
	if cacheable && TimeArgs(in.Args) {
		cacheable = false
	}
	p.Cacheable = cacheable
	p.Cache = pol.Soft > 0 && !pol.NoCache && (cacheable || explicitTTL)
	if pol.NoCoalesce && !p.Cache {
		p.Reason = ReasonPolicy
		return
	}
	if pol.Tables != nil {
		p.Tables, p.Known = pol.Tables, true
	}
}

// VolatileUnvouched returns the functions of volatile that pure does not
// name (volatile itself when pure is empty).
func VolatileUnvouched(volatile, pure []string) []string {
	if len(pure) == 0 {
		return volatile
	}
	var out []string
	for _, f := range volatile {
		if !PureNames(pure, f) {
			out = append(out, f)
		}
	}
	return out
}

// PureNames reports whether the pure= entries name fn ("schema.name" or a
// bare name, compared without regard to case or double quotes).
func PureNames(pure []string, fn string) bool {
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

// AllPure reports whether the pure= entries name every function of fns
// (true when fns is empty).
func AllPure(pure, fns []string) bool {
	for _, f := range fns {
		if !PureNames(pure, f) {
			return false
		}
	}
	return true
}

// TimeArgs reports whether an argument is a date/time input that follows
// the clock ('now', 'today', …): the result must not be reused past the
// flight, like now(). Only strings and byte slices of at most 64 bytes are
// looked at.
func TimeArgs(args []driver.NamedValue) bool {
	for i := range args {
		switch v := args[i].Value.(type) {
		case string:
			if len(v) <= 64 && sqlscan.TimeWord(v) {
				return true
			}
		case []byte:
			if len(v) <= 64 && sqlscan.TimeWord(string(v)) {
				return true
			}
		}
	}
	return false
}

// Union returns the sorted union of a and b, each name in its table key
// form (epoch.TableKey), duplicates removed.
func Union(a, b []string) []string {
	out := make([]string, 0, len(a)+len(b))
	for _, t := range a {
		out = append(out, epoch.TableKey(t))
	}
	for _, t := range b {
		out = append(out, epoch.TableKey(t))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// RuleMatches reports whether a rule with the given tables and pattern
// matches a statement reading tables with the normalized text: every
// condition that is set must hold, and a rule with neither matches nothing.
// The rule's tables are compared without regard to case or schema.
func RuleMatches(ruleTables []string, match *regexp.Regexp, tables []string, normalized string) bool {
	if match != nil && !match.MatchString(normalized) {
		return false
	}
	if len(ruleTables) == 0 {
		return match != nil
	}
	for _, want := range ruleTables {
		if i := strings.LastIndexByte(want, '.'); i >= 0 {
			want = want[i+1:]
		}
		for _, t := range tables {
			if strings.EqualFold(t, want) {
				return true
			}
		}
	}
	return false
}

// RollbackTo reports whether r, a single statement of the savepoint kind,
// is ROLLBACK TO SAVEPOINT.
func RollbackTo(r *sqlscan.Result) bool {
	word, _, _ := strings.Cut(r.Normalized, " ")
	return strings.EqualFold(word, "ROLLBACK")
}

// ExplainRuns reports whether an EXPLAIN text may run its statement
// (ANALYZE, in either spelling or option form).
func ExplainRuns(r *sqlscan.Result) bool {
	up := strings.ToUpper(r.Normalized)
	return strings.Contains(up, "ANALYZE") || strings.Contains(up, "ANALYSE")
}

// ChangesSchema reports whether st, a statement of r, may change what the
// server's verdicts describe: DDL (but not VACUUM, ANALYZE, REFRESH,
// CLUSTER, REINDEX, nor a temporary table, which only its own session sees),
// and DO/CALL, whose code may run DDL. In a text of several statements any
// DDL counts.
func ChangesSchema(r *sqlscan.Result, st *sqlscan.Statement) bool {
	switch {
	case st.Kind == sqlscan.KindCall:
		return true
	case st.Kind != sqlscan.KindDDL:
		return false
	case len(r.Statements) != 1:
		return true
	case st.Taints:
		return false // CREATE TEMP …
	}
	word, _, _ := strings.Cut(strings.TrimLeft(r.Normalized, "( "), " ")
	switch strings.ToUpper(word) {
	case "VACUUM", "ANALYZE", "ANALYSE", "REFRESH", "CLUSTER", "REINDEX":
		return false
	}
	return true
}
