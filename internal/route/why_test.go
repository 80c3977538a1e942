package route_test

import (
	"testing"
	"time"

	"github.com/sqlflight/sqlflight/internal/route"
	"github.com/sqlflight/sqlflight/internal/sqlscan"
)

// Detail says what makes a statement unshareable or unverified, from the
// verdict when it is known, else from the scanner.
func TestWhyDetail(t *testing.T) {
	sel := sqlscan.Parse("SELECT a FROM t")
	vol := sqlscan.Parse("SELECT random()")
	for _, c := range []struct {
		name string
		why  route.Why
		want string
	}{
		{"unvouched", route.Why{Reason: route.ReasonNotShareable, Scan: sel, Known: true, Unvouched: []string{"f", "g"},
			PerSession: []string{"x"}}, ": calls f, g (volatile; only the statement's pure= entry can vouch for it)"},
		{"per session", route.Why{Reason: route.ReasonNotShareable, Scan: sel, Known: true, PerSession: []string{"current_user"}},
			": reads current_user (per-session value)"},
		{"failed verdict", route.Why{Reason: route.ReasonUnverified, Scan: sel, Known: true, Failed: true, Err: "timed out"},
			": timed out"},
		{"verdict unknown", route.Why{Reason: route.ReasonUnverified, Scan: sel, Failed: true, Err: "timed out"}, ""},
		{"scanner's reason", route.Why{Reason: route.ReasonNotShareable, Scan: vol}, ": " + vol.Reason},
		{"other reason", route.Why{Reason: route.ReasonTx, Scan: vol}, ""},
	} {
		if got := c.why.Detail(); got != c.want {
			t.Errorf("%s: Detail = %q, want %q", c.name, got, c.want)
		}
	}
	if vol.Reason == "" {
		t.Fatal("the scanner gives no reason for a volatile call")
	}
}

// NotCached names the first thing that keeps a shared statement out of
// the cache.
func TestWhyNotCached(t *testing.T) {
	sel := sqlscan.Parse("SELECT a FROM t")
	now := sqlscan.Parse("SELECT now()")
	for _, c := range []struct {
		why  route.Why
		want string
	}{
		{route.Why{Scan: sel, NoCache: true, Soft: time.Second}, "not cached: nocache"},
		{route.Why{Scan: sel}, "not cached: no TTL (coalesced only)"},
		{route.Why{Scan: now, Soft: time.Second}, "not cached: " + now.Reason + " (annotate a TTL in the statement to cache it)"},
		{route.Why{Scan: sel, Soft: time.Second, Known: true, TimeDependent: true},
			"not cached: depends on the clock (annotate a TTL in the statement to cache it)"},
		{route.Why{Scan: sel, Soft: time.Second, Known: true, Volatile: true},
			"not cached: calls user functions that are not IMMUTABLE (annotate a TTL in the statement to cache it)"},
		{route.Why{Scan: sel, Soft: time.Second, TimeDependent: true, UserFunctions: true},
			"not cached: an argument is a date/time word that follows the clock (annotate a TTL in the statement to cache it)"},
	} {
		if got := c.why.NotCached(); got != c.want {
			t.Errorf("%+v: NotCached = %q, want %q", c.why, got, c.want)
		}
	}
}
