package sqlflight

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight/internal/annotation"
)

func TestExplain(t *testing.T) {
	s := New()
	for _, tc := range []struct {
		sql            string
		shared, cached bool
		reason         string
	}{
		{"SELECT * FROM products WHERE id = $1", true, false, "no TTL"},
		{"/* sqlflight: soft=30s hard=5m */ SELECT * FROM products WHERE id = $1", true, true, ""},
		{"SELECT now()", true, false, "no TTL"},
		{"UPDATE products SET n = 1", false, false, "write"},
		{"SELECT * FROM products FOR UPDATE", false, false, "FOR UPDATE"},
		{"SELECT my_fn()", false, false, "my_fn"},
		{"/* sqlflight: coalesce */ SELECT my_fn()", false, false, "my_fn"},
		{"/* sqlflight: ttl=1m */ SELECT my_fn()", false, false, "my_fn"},
		{"/* sqlflight: coalesce pure=my_fn */ SELECT my_fn()", true, false, ""},
		{"/* sqlflight: sfot=1s */ SELECT 1", false, false, "bad annotation"},
	} {
		x := s.Explain(context.Background(), tc.sql)
		if x.Shared != tc.shared || x.Cached != tc.cached || !strings.Contains(x.Reason, tc.reason) {
			t.Errorf("%s: shared %v cached %v reason %q", tc.sql, x.Shared, x.Cached, x.Reason)
		}
	}
	x := s.Explain(WithTTL(context.Background(), time.Minute, time.Hour), "SELECT a FROM t")
	if !x.Cached || x.Policy.Hard != time.Hour || x.Tables[0] != "t" || x.Fingerprint == "" || !x.Fleet {
		t.Errorf("%+v", x)
	}
	if x := s.Explain(context.Background(), "/* sqlflight: ttl=1m pure=my_fn */ SELECT my_fn()"); !x.Cached || x.Fleet {
		t.Errorf("unknown tables, yet fleet-wide: %+v", x)
	}
	if x := s.Explain(context.Background(), "/* sqlflight: ttl=1m tables=a pure=my_fn */ SELECT my_fn()"); !x.Fleet {
		t.Errorf("tables named, yet not fleet-wide: %+v", x)
	}
	if x := s.Explain(context.Background(), "SELECT a FROM t"); x.Fleet {
		t.Errorf("uncached, yet fleet-wide: %+v", x)
	}
}

// TestExplainReasonSaysWhatTheStatementIs: a statement that is not
// read-only without being a write is not labelled "write"; the bypass
// counter it would count under is a field of its own.
func TestExplainReasonSaysWhatTheStatementIs(t *testing.T) {
	s := New()
	defer s.Close()
	for _, tc := range []struct{ sql, reason, bypass string }{
		{"SELECT random()", "calls random (volatile)", "write"},
		{"garbage here", "not a query: GARBAGE", "write"},
		{"BEGIN", "transaction control: BEGIN", "write"},
		{"UPDATE products SET n = 1", "write: UPDATE", "write"},
		{"SELECT my_fn()", "not shareable: calls unknown function my_fn", "not shareable"},
		{"SELECT a FROM t", "not cached: no TTL (coalesced only)", ""},
	} {
		x := s.Explain(context.Background(), tc.sql)
		if x.Reason != tc.reason || x.Bypass != tc.bypass {
			t.Errorf("%s: reason %q bypass %q, want %q and %q", tc.sql, x.Reason, x.Bypass, tc.reason, tc.bypass)
		}
	}
}

// TestExplainNamedTables: the tables an annotation names are what a read
// reads and what a write writes, shared or not.
func TestExplainNamedTables(t *testing.T) {
	s := New()
	defer s.Close()
	for _, tc := range []struct{ sql, reads, writes string }{
		{"/* sqlflight: tables=products */ SELECT * FROM v", "products", ""},
		{"/* sqlflight: ttl=1m tables=products,prices */ SELECT my_fn()", "products,prices", ""},
		{"/* sqlflight: tables=products */ SELECT random()", "products", ""},
		{"-- sqlflight: tables=products\nUPDATE x SET a = 1", "x", "products"},
	} {
		x := s.Explain(context.Background(), tc.sql)
		if strings.Join(x.Tables, ",") != tc.reads || !x.TablesKnown || strings.Join(x.Writes, ",") != tc.writes {
			t.Errorf("%q: reads %v (known %v), writes %v; want reads %s, writes %q",
				tc.sql, x.Tables, x.TablesKnown, x.Writes, tc.reads, tc.writes)
		}
	}
}

// TestExplanationJSON: durations are Go duration strings, lists are never
// null, and the encoding reads back.
func TestExplanationJSON(t *testing.T) {
	s := New()
	defer s.Close()
	x := s.Explain(context.Background(), "/* sqlflight: soft=30s hard=5m wait=250ms */ SELECT 1")
	b, err := json.Marshal(x)
	if err != nil {
		t.Fatal(err)
	}
	out := string(b)
	for _, want := range []string{`"soft":"30s"`, `"hard":"5m0s"`, `"wait":"250ms"`, `"tables":[]`, `"writes":[]`,
		`"functions":[]`, `"unknown_functions":[]`} {
		if !strings.Contains(out, want) {
			t.Errorf("JSON lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "null") {
		t.Errorf("JSON has null:\n%s", out)
	}
	var back Explanation
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Policy.Soft != 30*time.Second || back.Policy.Hard != 5*time.Minute || back.Policy.Wait != 250*time.Millisecond ||
		back.Fingerprint != x.Fingerprint {
		t.Errorf("read back %+v\nfrom %s", back, out)
	}
	// A number of nanoseconds (the old encoding) still reads.
	if err := json.Unmarshal([]byte(`{"policy":{"soft":1000000000}}`), &back); err != nil || back.Policy.Soft != time.Second {
		t.Errorf("nanoseconds: %v, soft %v", err, back.Policy.Soft)
	}
}

// TestPolicyJSONMirrorsPolicy: the encoding of an Explanation's policy has
// every field of Policy, so a field added to Policy is not lost.
func TestPolicyJSONMirrorsPolicy(t *testing.T) {
	p, j := reflect.TypeOf(Policy{}), reflect.TypeOf(annotation.JSON{})
	if p.NumField() != j.NumField() {
		t.Fatalf("Policy has %d fields, its JSON form %d", p.NumField(), j.NumField())
	}
	for i := 0; i < p.NumField(); i++ {
		if p.Field(i).Name != j.Field(i).Name || p.Field(i).Tag != j.Field(i).Tag {
			t.Errorf("field %d: %s %q vs %s %q", i, p.Field(i).Name, p.Field(i).Tag, j.Field(i).Name, j.Field(i).Tag)
		}
	}
	full := Policy{Soft: 1, Hard: 2, Neg: 3, Jitter: 4, Beta: 5, MaxRows: 6, MaxBytes: 7, Wait: 8, Timeout: 9,
		Tables: []string{"t"}, Name: "n", Coalesce: true, NoCoalesce: true, NoCache: true, Off: true}
	if got := Policy(annotation.ToJSON(annotation.Fields(full)).Fields()); !reflect.DeepEqual(got, full) {
		t.Errorf("round trip %+v, want %+v", got, full)
	}
}
