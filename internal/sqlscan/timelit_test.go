package sqlscan

import (
	"strings"
	"testing"
)

func TestTimeWord(t *testing.T) {
	yes := []string{"now", "NOW", "Now", " now ", "\tnow\n", "today", "tomorrow", "yesterday",
		"today 10:00", "10:00 today", "today,10:00", "today+02", "today10:00", "today_10:00",
		"tomorrow midnight", "now UTC", "now+1", "now()", "{now,today}", "[yesterday,tomorrow)",
		`{"d":"today"}`, "(1,now)", "allballs today", "Today Tomorrow",
		// The server rejects these, or reads them as text: counted anyway (letters delimit runs).
		"right now", "nowé", "now1", "1now"}
	no := []string{"", "epoch", "infinity", "-infinity", "allballs", "2001-02-03", "2001-02-03 04:05:06",
		"nowhere", "knowledge", "todays", "tod", "n ow", "to day", "no'w", "todayT10:00",
		"xnow", "snow", "current", "yesterdays", "tomorrows", "J2451187", "10:00"}
	for _, s := range yes {
		if !TimeWord(s) {
			t.Errorf("TimeWord(%q) = false, want true", s)
		}
	}
	for _, s := range no {
		if TimeWord(s) {
			t.Errorf("TimeWord(%q) = true, want false", s)
		}
	}
}

func TestTimeLiterals(t *testing.T) {
	cases := []struct {
		sql     string
		lit     bool    // Result.TimeLiteral
		verdict Verdict // Result.Verdict
		reason  string  // a substring of Reason
	}{
		{"SELECT 'now'::timestamptz", true, InFlightOnly, "time literal 'now' (time-dependent)"},
		{"SELECT date 'today'", true, InFlightOnly, "time literal 'today'"},
		{"SELECT timestamp 'tomorrow'", true, InFlightOnly, "time literal 'tomorrow'"},
		{"SELECT * FROM t WHERE d = 'yesterday'", true, InFlightOnly, "time literal 'yesterday'"},
		{"SELECT * FROM t WHERE d > ' NOW '", true, InFlightOnly, "time literal 'now'"},
		{"SELECT 'Today 10:00'::timestamp, 'now()'::date", true, InFlightOnly, "'today'"},
		{"SELECT '{now,today}'::date[], '[yesterday,tomorrow)'::daterange", true, InFlightOnly, "'now'"},
		{`SELECT * FROM jsonb_populate_record(null::t, '{"d":"today"}')`, true, InFlightOnly, "'today'"},
		{`SELECT E'n\x6fw'::date`, true, InFlightOnly, "'now'"},
		{`SELECT E'\156ow'::date, e'to\u0064ay'::date`, true, InFlightOnly, "'now'"},
		{`SELECT U&'\006Eow'::date`, true, InFlightOnly, "'now'"},
		{`SELECT U&'!006Eow' UESCAPE '!'`, true, InFlightOnly, "'now'"},
		{"SELECT $$now$$::date, $x$today$x$::date", true, InFlightOnly, "'now'"},
		{"SELECT 'no'\n'w'::date", true, InFlightOnly, "'now'"},
		{"SELECT 'to' -- a comment\n  'day'::date", true, InFlightOnly, "'today'"},
		{"SELECT N'now'::date", true, InFlightOnly, "'now'"},
		{"SELECT now(), 'today'::date", true, InFlightOnly, "calls now (time-dependent)"},
		{"SELECT my_fn('now')", true, OptIn, "unknown function my_fn"},
		{"SELECT nextval('now')", true, Never, "nextval"},
		{"INSERT INTO t VALUES ('now')", true, Never, "write: INSERT"},
		{"WITH x AS (SELECT 'today'::date AS d) SELECT * FROM x", true, InFlightOnly, "'today'"},
		{"SELECT 'no''w', 'nowhere', 'knowledge', 'epoch'::date, 'infinity'::timestamp, '2020-01-01'::date", false, Shareable, ""},
		{"SELECT B'101', X'0A'", false, Shareable, ""},
		{"SELECT 1 -- now\n, 2 /* today */", false, Shareable, ""},
		{`SELECT "now", today FROM t`, false, Shareable, ""},
		{"SELECT $now$x$now$", false, Shareable, ""},
	}
	for _, tc := range cases {
		r := Parse(tc.sql)
		if r.TimeLiteral != tc.lit || r.Verdict != tc.verdict || !strings.Contains(r.Reason, tc.reason) {
			t.Errorf("%q: TimeLiteral %v, %v (%s); want %v, %v (%s)", tc.sql, r.TimeLiteral, r.Verdict, r.Reason, tc.lit, tc.verdict, tc.reason)
		}
	}
	// Under standard_conforming_strings = off a plain string's escapes are decoded too.
	if r := ParseNonStandard(`SELECT 'n\x6fw'::date`); !r.TimeLiteral || r.Verdict != InFlightOnly {
		t.Errorf("non-standard 'n\\x6fw': TimeLiteral %v %v", r.TimeLiteral, r.Verdict)
	}
	if r := Parse(`SELECT 'n\x6fw'`); r.TimeLiteral {
		t.Error(`standard 'n\x6fw' is no time word`)
	}
}
