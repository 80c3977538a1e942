package route_test

import (
	"database/sql/driver"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight/internal/annotation"
	"github.com/sqlflight/sqlflight/internal/route"
	"github.com/sqlflight/sqlflight/internal/sqlscan"
)

// input returns an Input for query on an idle connection under no policy.
func input(t *testing.T, query string) route.Input {
	t.Helper()
	r := sqlscan.Scan(query)
	in := route.Input{Scan: r}
	if r.HasAnnotation {
		p := annotation.Of(r)
		in.Annotated = p.Err == nil
		if in.Annotated {
			in.Annotation = p.A
		}
	}
	return in
}

// verdict returns an Input.Verdict that hands out v and counts its calls.
func verdict(v route.Verdict, ok bool, calls *int) func() (route.Verdict, bool) {
	return func() (route.Verdict, bool) {
		*calls++
		return v, ok
	}
}

// TestDecideReasons checks each reason Decide gives, and that the verdict is
// asked for only when every earlier test has passed.
func TestDecideReasons(t *testing.T) {
	verified := route.Verdict{Verified: true, Tables: []string{"t"}, TablesKnown: true}
	cases := []struct {
		name      string
		query     string
		edit      func(*route.Input)
		v         route.Verdict
		noVerdict bool // the verdict reports none to be had
		want      string
		asked     int
	}{
		{name: "shared", query: "SELECT a FROM t", v: verified, want: "", asked: 1},
		{name: "bad annotation", query: "/* sqlflight: ttl=banana */ SELECT a FROM t", want: route.ReasonBadAnnotation},
		{name: "transaction", query: "SELECT a FROM t", edit: func(in *route.Input) { in.Conn.InTx = true }, want: route.ReasonTx},
		{name: "tainted", query: "SELECT a FROM t", edit: func(in *route.Input) { in.Conn.Tainted = true }, want: route.ReasonSession},
		{name: "scoped, no scope", query: "SELECT a FROM t", edit: func(in *route.Input) {
			in.Conn.Scoped, in.Conn.SessionScope = true, "a"
		}, want: route.ReasonSession},
		{name: "scoped, other scope", query: "SELECT a FROM t", edit: func(in *route.Input) {
			in.Conn.Scoped, in.Conn.SessionScope, in.Conn.ScopeSet, in.Conn.Scope = true, "a", true, "b"
		}, want: route.ReasonSession},
		{name: "scoped, same scope", query: "SELECT a FROM t", edit: func(in *route.Input) {
			in.Conn.Scoped, in.Conn.SessionScope, in.Conn.ScopeSet, in.Conn.Scope = true, "a", true, "a"
		}, v: verified, want: "", asked: 1},
		{name: "write", query: "UPDATE t SET a = 1", want: route.ReasonWrite},
		{name: "never", query: "SELECT a FROM t TABLESAMPLE SYSTEM (1)", want: route.ReasonNotShareable},
		{name: "busy", query: "SELECT a FROM t", edit: func(in *route.Input) { in.Conn.OpenRows = true }, want: route.ReasonBusy},
		{name: "policy off", query: "SELECT a FROM t", edit: func(in *route.Input) { in.Base.Off = true }, want: route.ReasonPolicy},
		{name: "nocoalesce", query: "SELECT a FROM t", edit: func(in *route.Input) { in.Base.NoCoalesce = true }, v: verified, want: route.ReasonPolicy, asked: 1},
		{name: "unverified", query: "SELECT a FROM t", v: route.Verdict{}, want: route.ReasonUnverified, asked: 1},
		{name: "volatile unvouched", query: "SELECT f(a) FROM t", v: route.Verdict{Verified: true, Volatile: []string{"public.f"}}, want: route.ReasonNotShareable, asked: 1},
		{name: "volatile vouched", query: "/* sqlflight: pure=f */ SELECT f(a) FROM t", v: route.Verdict{Verified: true, Volatile: []string{"public.f"}}, want: "", asked: 1},
		{name: "per session", query: "SELECT a FROM t", v: route.Verdict{Verified: true, PerSession: []string{"current_user"}}, want: route.ReasonNotShareable, asked: 1},
		{name: "opt-in on text", query: "SELECT f(a) FROM t", noVerdict: true, want: route.ReasonNotShareable, asked: 1},
		{name: "opt-in vouched on text", query: "/* sqlflight: pure=f */ SELECT f(a) FROM t", noVerdict: true, want: "", asked: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := input(t, tc.query)
			if tc.edit != nil {
				tc.edit(&in)
			}
			calls := 0
			in.Verdict = verdict(tc.v, !tc.noVerdict, &calls)
			p := route.Decide(in)
			if p.Reason != tc.want {
				t.Errorf("Decide(%q).Reason = %q, want %q", tc.query, p.Reason, tc.want)
			}
			if calls != tc.asked {
				t.Errorf("verdict asked %d times, want %d", calls, tc.asked)
			}
			if wantVerified := calls > 0 && !tc.noVerdict && tc.v.Verified && p.Reason != route.ReasonNotShareable; p.Verified != wantVerified {
				t.Errorf("Verified = %v, want %v", p.Verified, wantVerified)
			}
			if g := route.Gate(in.Scan, in.Annotated, in.Conn); g != "" && g != p.Reason {
				t.Errorf("Gate = %q, Decide = %q", g, p.Reason)
			}
		})
	}
}

// TestReasonStrings pins the reason strings, which the stats, the docs and
// the Prometheus exporter name.
func TestReasonStrings(t *testing.T) {
	got := []string{route.ReasonExec, route.ReasonTx, route.ReasonSession, route.ReasonWrite,
		route.ReasonNotShareable, route.ReasonUnverified, route.ReasonPolicy, route.ReasonArgs,
		route.ReasonTooLarge, route.ReasonBusy, route.ReasonBadAnnotation}
	want := []string{"exec", "transaction", "session", "write", "not shareable", "unverified",
		"policy", "arguments", "too large", "busy connection", "bad annotation"}
	if !slices.Equal(got, want) {
		t.Fatalf("reasons = %q, want %q", got, want)
	}
}

// TestDecideCache checks when a shared read is cached: a TTL, nothing
// following the clock unless the statement states its own TTL.
func TestDecideCache(t *testing.T) {
	verified := route.Verdict{Verified: true, Tables: []string{"t"}, TablesKnown: true}
	cases := []struct {
		name  string
		query string
		base  annotation.Fields
		args  []driver.NamedValue
		v     route.Verdict
		cache bool
	}{
		{name: "no ttl", query: "SELECT a FROM t", v: verified, cache: false},
		{name: "context ttl", query: "SELECT a FROM t", base: annotation.Fields{Soft: time.Minute}, v: verified, cache: true},
		{name: "nocache", query: "SELECT a FROM t", base: annotation.Fields{Soft: time.Minute, NoCache: true}, v: verified, cache: false},
		{name: "time dependent", query: "SELECT a FROM t", base: annotation.Fields{Soft: time.Minute},
			v: route.Verdict{Verified: true, TimeDependent: true}, cache: false},
		{name: "time dependent, own ttl", query: "/* sqlflight: ttl=1m */ SELECT a FROM t",
			v: route.Verdict{Verified: true, TimeDependent: true}, cache: true},
		{name: "user functions", query: "SELECT a FROM t", base: annotation.Fields{Soft: time.Minute},
			v: route.Verdict{Verified: true, UserFunctions: true}, cache: false},
		{name: "time argument", query: "SELECT a FROM t WHERE d < $1", base: annotation.Fields{Soft: time.Minute},
			args: []driver.NamedValue{{Ordinal: 1, Value: "now"}}, v: verified, cache: false},
		{name: "time argument bytes", query: "SELECT a FROM t WHERE d < $1", base: annotation.Fields{Soft: time.Minute},
			args: []driver.NamedValue{{Ordinal: 1, Value: []byte("today")}}, v: verified, cache: false},
		{name: "plain argument", query: "SELECT a FROM t WHERE d < $1", base: annotation.Fields{Soft: time.Minute},
			args: []driver.NamedValue{{Ordinal: 1, Value: "2020-01-01"}}, v: verified, cache: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := input(t, tc.query)
			in.Base, in.Args = tc.base, tc.args
			calls := 0
			in.Verdict = verdict(tc.v, true, &calls)
			p := route.Decide(in)
			if p.Reason != "" {
				t.Fatalf("Reason = %q, want shared", p.Reason)
			}
			if p.Cache != tc.cache {
				t.Errorf("Cache = %v, want %v", p.Cache, tc.cache)
			}
			// Only a TTL of the statement's own caches what its verdict
			// does not let a TTL cache.
			if !p.Cacheable && p.Cache && in.Annotation.Fields.Soft == 0 {
				t.Errorf("not cacheable, yet cached under the base policy's TTL")
			}
		})
	}
}

// TestDecidePrecedence checks that the annotation overrides the base policy
// field by field, and that tables= names the dependencies.
func TestDecidePrecedence(t *testing.T) {
	in := input(t, "/* sqlflight: ttl=2m tables=u */ SELECT a FROM t")
	in.Base = annotation.Fields{Soft: time.Minute, MaxRows: 7}
	p := route.Decide(in)
	if p.Reason != "" || p.Policy.Soft != 2*time.Minute || p.Policy.MaxRows != 7 {
		t.Fatalf("plan = %+v, want shared with soft 2m and maxrows 7", p)
	}
	if !p.Known || !slices.Equal(p.Tables, []string{"u"}) {
		t.Errorf("tables = %q (known %v), want [u]", p.Tables, p.Known)
	}
	// A bypass before the policy carries none.
	in.Conn.InTx = true
	if p := route.Decide(in); p.Policy.Soft != 0 {
		t.Errorf("policy of a bypassed statement = %+v, want zero", p.Policy)
	}
}

// TestRuleMatches checks rule matching: tables without regard to case or
// schema, the pattern on the normalized text, both when both are set.
func TestRuleMatches(t *testing.T) {
	re := regexp.MustCompile(`^SELECT`)
	cases := []struct {
		rule   []string
		match  *regexp.Regexp
		tables []string
		text   string
		want   bool
	}{
		{nil, nil, []string{"t"}, "SELECT 1", false},
		{[]string{"public.T"}, nil, []string{"t"}, "SELECT 1", true},
		{[]string{"u"}, nil, []string{"t"}, "SELECT 1", false},
		{nil, re, nil, "SELECT 1", true},
		{nil, re, nil, "WITH x AS (SELECT 1) SELECT 1", false},
		{[]string{"t"}, re, []string{"t"}, "WITH x", false},
	}
	for _, tc := range cases {
		if got := route.RuleMatches(tc.rule, tc.match, tc.tables, tc.text); got != tc.want {
			t.Errorf("RuleMatches(%q, %v, %q, %q) = %v, want %v", tc.rule, tc.match, tc.tables, tc.text, got, tc.want)
		}
	}
}

// TestHelpers checks the pure helpers.
func TestHelpers(t *testing.T) {
	if !route.PureNames([]string{`"F"`}, "public.f") || route.PureNames([]string{"g"}, "public.f") {
		t.Error("PureNames")
	}
	if !route.AllPure(nil, nil) || route.AllPure([]string{"f"}, []string{"f", "g"}) {
		t.Error("AllPure")
	}
	if got := route.VolatileUnvouched([]string{"a.f", "a.g"}, []string{"f"}); !slices.Equal(got, []string{"a.g"}) {
		t.Errorf("VolatileUnvouched = %q", got)
	}
	if got := route.Union([]string{"b", "a"}, []string{"a", "c"}); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("Union = %q", got)
	}
	if !route.ExplainRuns(sqlscan.Scan("EXPLAIN (ANALYSE) SELECT 1")) || route.ExplainRuns(sqlscan.Scan("EXPLAIN SELECT 1")) {
		t.Error("ExplainRuns")
	}
	if !route.RollbackTo(sqlscan.Scan("ROLLBACK TO SAVEPOINT s")) || route.RollbackTo(sqlscan.Scan("SAVEPOINT s")) {
		t.Error("RollbackTo")
	}
	for q, want := range map[string]bool{
		"CREATE TABLE x (a int)":      true,
		"CREATE TEMP TABLE x (a int)": false,
		"VACUUM t":                    false,
		"CALL p()":                    true,
		"SELECT 1":                    false,
	} {
		r := sqlscan.Scan(q)
		if got := route.ChangesSchema(r, &r.Statements[0]); got != want {
			t.Errorf("ChangesSchema(%q) = %v, want %v", q, got, want)
		}
	}
}
