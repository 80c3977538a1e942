package sqlflight

import (
	"context"
	"strings"

	"github.com/sqlflight/sqlflight/internal/sqlscan"
)

// Explanation is what a Shield makes of one statement on a clean connection
// outside a transaction: the scanner's view, the effective policy, and
// whether it would be shared and cached, with the reason when not.
type Explanation struct {
	SQL         string `json:"sql"`
	Normalized  string `json:"normalized"`
	Fingerprint string `json:"fingerprint"`
	Kind        string `json:"kind"`
	Statements  int    `json:"statements"`
	ReadOnly    bool   `json:"read_only"`
	Verdict     string `json:"verdict"` // "shareable", "in-flight-only", "opt-in" or "never"
	Shared      bool   `json:"shared"`
	Cached      bool   `json:"cached"`
	// Fleet tells whether, with a shared tier, the result would be shared
	// across instances too (cached, with the tables it reads known).
	Fleet       bool     `json:"fleet"`
	Reason      string   `json:"reason,omitempty"` // why not shared, or not cached
	Tables      []string `json:"tables"`
	Writes      []string `json:"writes"`
	TablesKnown bool     `json:"tables_known"`
	Functions   []string `json:"functions"`
	Unknown     []string `json:"unknown_functions"`
	Annotation  string   `json:"annotation,omitempty"`
	Error       string   `json:"error,omitempty"` // a malformed annotation or unscannable text
	Policy      Policy   `json:"policy"`
}

// Explain tells how s would route query under ctx (its context policy
// applies). Functions the scanner does not know count as unvouched: Explain
// does not ask the database about them.
func (s *Shield) Explain(ctx context.Context, query string) Explanation {
	r := sqlscan.Parse(query)
	x := Explanation{
		SQL: query, Normalized: r.Normalized, Fingerprint: fingerprint(r.Normalized), Kind: r.Kind.String(),
		Statements: len(r.Statements), ReadOnly: r.ReadOnly, Verdict: r.Verdict.String(), Reason: r.Reason,
		Tables: r.Tables, Writes: r.Writes, TablesKnown: r.TablesKnown, Functions: r.Functions, Unknown: r.Unknown,
		Annotation: r.Annotation, Error: r.Err,
	}
	if r.HasAnnotation {
		if _, err := parseAnnotation(r.Annotation); err != nil {
			x.Error = err.Error()
		}
	}
	// A virtual connection that is clean, and knows no function volatility.
	c := &conn{s: s, sc: &scope{}}
	reason, p, _ := s.routeQuiet(ctx, c, r)
	x.Policy = p.pol
	switch {
	case reason != "":
		x.Reason = reason + reasonDetail(reason, r)
		if reason == bypassWrite && strings.HasPrefix(r.Reason, reason) {
			x.Reason = r.Reason
		}
	default:
		x.Shared = true
		x.Cached = p.cache
		x.Fleet = p.cache && (r.TablesKnown || p.pol.Tables != nil)
		x.Reason = ""
		if !p.cache {
			x.Reason = noCacheReason(p, r)
		}
	}
	return x
}

func reasonDetail(reason string, r *sqlscan.Result) string {
	if (reason == bypassNotShareable || reason == bypassWrite) && r.Reason != "" && !strings.HasPrefix(r.Reason, reason) {
		return ": " + r.Reason
	}
	return ""
}

func noCacheReason(p plan, r *sqlscan.Result) string {
	switch {
	case p.pol.NoCache:
		return "not cached: nocache"
	case p.pol.Soft <= 0:
		return "not cached: no TTL (coalesced only)"
	case r.Verdict != sqlscan.Shareable:
		return "not cached: " + r.Reason + " (annotate a TTL in the statement to cache it)"
	}
	return ""
}
