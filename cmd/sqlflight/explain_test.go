package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlflight/sqlflight"
)

// explainCmd runs "sqlflight explain args..." in-process with in as standard
// input and returns the exit code and both outputs.
func explainCmd(t *testing.T, in string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	old := explainStdin
	explainStdin = strings.NewReader(in)
	t.Cleanup(func() { explainStdin = old })
	var out, errOut bytes.Buffer
	code = run(context.Background(), append([]string{"explain"}, args...), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestExplainVerdicts(t *testing.T) {
	for _, tc := range []struct {
		name  string
		sql   string
		want  []string
		avoid []string
	}{
		{
			name: "cached annotated select",
			sql:  "/* sqlflight: soft=30s hard=5m */ SELECT * FROM products WHERE id = $1",
			want: []string{"kind:        SELECT", "shared:      yes", "cached:      yes", "reads:       products",
				"fingerprint: ", "policy:      soft=30s hard=5m0s"},
			avoid: []string{"jitter", "nocache"},
		},
		{
			name: "update",
			sql:  "UPDATE products SET n = 1",
			want: []string{"kind:        UPDATE", "shared:      no: write", "cached:      no",
				"writes:      products"},
		},
		{
			name: "select for update",
			sql:  "SELECT * FROM products FOR UPDATE",
			want: []string{"shared:      no:", "FOR UPDATE", "cached:      no"},
		},
		{
			name: "bad annotation",
			sql:  "/* sqlflight: sfot=1s */ SELECT 1",
			want: []string{"shared:      no: bad annotation", "cached:      no", "error:", "sfot"},
		},
		{
			name:  "unknown function",
			sql:   "SELECT my_fn(), now() FROM t",
			want:  []string{"shared:      no:", "my_fn (unknown", "now"},
			avoid: []string{"now (unknown"},
		},
		{
			name: "coalesced only",
			sql:  "SELECT a FROM t",
			want: []string{"shared:      yes", "cached:      no: no TTL", "policy:      defaults"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := explainCmd(t, "", tc.sql)
			if code != exitOK || errOut != "" {
				t.Fatalf("exit %d, stderr %q", code, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			for _, a := range tc.avoid {
				if strings.Contains(out, a) {
					t.Errorf("output has %q:\n%s", a, out)
				}
			}
		})
	}
}

func TestExplainJSON(t *testing.T) {
	const q = "/* sqlflight: soft=30s hard=5m name=product */ SELECT * FROM products WHERE id = $1"
	code, out, errOut := explainCmd(t, "", "-json", q)
	if code != exitOK || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	var x sqlflight.Explanation
	if err := json.Unmarshal([]byte(out), &x); err != nil {
		t.Fatalf("-json output does not parse: %v\n%s", err, out)
	}
	if !strings.Contains(out, "\n  \"sql\"") {
		t.Errorf("-json output is not indented:\n%s", out)
	}
	s := sqlflight.New()
	defer s.Close()
	want := s.Explain(context.Background(), q)
	if x.SQL != q || !x.Shared || !x.Cached || x.Fingerprint != want.Fingerprint ||
		x.Policy.Soft != 30*time.Second || x.Policy.Hard != 5*time.Minute || x.Policy.Name != "product" {
		t.Errorf("parsed %+v\nwant %+v", x, want)
	}
}

func TestExplainStdin(t *testing.T) {
	for _, args := range [][]string{nil, {"-"}, {"-json", "-"}} {
		code, out, errOut := explainCmd(t, "UPDATE products SET n = 1\n", args...)
		if code != exitOK || errOut != "" {
			t.Fatalf("%q: exit %d, stderr %q", args, code, errOut)
		}
		if !strings.Contains(out, "UPDATE") || !strings.Contains(out, "products") {
			t.Errorf("%q: output does not explain the statement from stdin:\n%s", args, out)
		}
	}
}

func TestExplainUsage(t *testing.T) {
	for _, tc := range []struct {
		in   string
		args []string
	}{
		{"", []string{"SELECT 1", "SELECT 2"}},
		{"", []string{"-nope", "SELECT 1"}},
		{"  \n", nil},
		{"", []string{""}},
	} {
		code, out, errOut := explainCmd(t, tc.in, tc.args...)
		if code != exitUsage || out != "" || errOut == "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 and a message", tc.args, code, out, errOut)
		}
	}
	if code, _, errOut := explainCmd(t, "", "-h"); code != exitOK || !strings.Contains(errOut, "Usage: sqlflight explain") {
		t.Errorf("-h: exit %d, stderr %q", code, errOut)
	}
}

// TestExplainServerVerdict: with -dsn the verdict is the server's: a view
// over a VOLATILE function is refused although the text names no function,
// and a delete says which tables its cascade reaches.
func TestExplainServerVerdict(t *testing.T) {
	dsn := os.Getenv("SQLFLIGHT_POSTGRES_DSN")
	if dsn == "" {
		if os.Getenv("SQLFLIGHT_REQUIRE_INTEGRATION") == "1" {
			t.Fatal("SQLFLIGHT_POSTGRES_DSN is not set but SQLFLIGHT_REQUIRE_INTEGRATION=1")
		}
		t.Skip("SQLFLIGHT_POSTGRES_DSN is not set")
	}
	admin, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	id := strconv.FormatInt(time.Now().UnixNano(), 36)
	parent, child, fn, view := "xp_"+id, "xc_"+id, "xf_"+id, "xv_"+id
	for _, s := range []string{
		"CREATE TABLE " + parent + " (id int PRIMARY KEY)",
		"CREATE TABLE " + child + " (id int PRIMARY KEY, p int REFERENCES " + parent + " ON DELETE CASCADE)",
		"CREATE FUNCTION " + fn + "() RETURNS int LANGUAGE plpgsql AS $$BEGIN RETURN 1; END$$",
		"CREATE VIEW " + view + " AS SELECT id, " + fn + "() AS f FROM " + parent,
	} {
		if _, err := admin.Exec(s); err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		_, _ = admin.Exec("DROP VIEW IF EXISTS " + view)
		_, _ = admin.Exec("DROP FUNCTION IF EXISTS " + fn + "()")
		_, _ = admin.Exec("DROP TABLE IF EXISTS " + child + ", " + parent)
	}()

	code, out, errOut := explainCmd(t, "", "-dsn", dsn, "SELECT * FROM "+view)
	if code != 0 || !strings.Contains(out, "shared:      no") || !strings.Contains(out, fn+" (volatile, opaque body)") {
		t.Errorf("view over a volatile function: code %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = explainCmd(t, "", "-json", "-dsn", dsn, "DELETE FROM "+parent)
	var x sqlflight.Explanation
	if err := json.Unmarshal([]byte(out), &x); code != 0 || err != nil {
		t.Fatalf("code %d, %v\n%s%s", code, err, out, errOut)
	}
	if strings.Join(x.WriteClosure, ",") != child+","+parent || x.WritesAll {
		t.Errorf("write closure %v (all %v), want the cascade's child and the parent", x.WriteClosure, x.WritesAll)
	}
	code, out, _ = explainCmd(t, "", "SELECT * FROM "+view)
	if code != 0 || !strings.Contains(out, "the server was not asked") {
		t.Errorf("without -dsn the verdict must say it is provisional:\n%s", out)
	}
}

// TestExplainAnnotationArgument: SQL that begins with docs/commands.md's
// "-- sqlflight: …" annotation is the statement, not a flag, and flags may
// come after the statement.
func TestExplainAnnotationArgument(t *testing.T) {
	const q = "-- sqlflight: ttl=1m tables=products\nSELECT * FROM v"
	for _, args := range [][]string{
		{q},
		{"-json", q},
		{q, "-json"},
		{q, "--json"},
		{"-json", "--", q},
		{"--sqlflight: ttl=1m tables=products\nSELECT * FROM v", "-json"},
	} {
		code, out, errOut := explainCmd(t, "", args...)
		if code != exitOK || errOut != "" {
			t.Errorf("%q: exit %d, stderr %q", args, code, errOut)
			continue
		}
		if strings.Contains(strings.Join(args, " "), "json") {
			var x sqlflight.Explanation
			if err := json.Unmarshal([]byte(out), &x); err != nil || !x.Cached || strings.Join(x.Tables, ",") != "products" {
				t.Errorf("%q: %v %+v", args, err, x)
			}
		} else if !strings.Contains(out, "cached:      yes") || !strings.Contains(out, "reads:       products\n") {
			t.Errorf("%q:\n%s", args, out)
		}
	}
	// A value flag after the statement takes the next argument.
	code, _, errOut := explainCmd(t, "", "SELECT 1", "-dsn")
	if code != exitUsage || !strings.Contains(errOut, "flag needs an argument: -dsn") {
		t.Errorf("-dsn without its value: exit %d, stderr %q", code, errOut)
	}
	// Two statements: the message names what it got.
	code, _, errOut = explainCmd(t, "", "SELECT 1", "SELECT 2", "-json")
	if code != exitUsage || !strings.Contains(errOut, `got 2 arguments ("SELECT 1", "SELECT 2")`) {
		t.Errorf("two statements: exit %d, stderr %q", code, errOut)
	}
}

// TestExplainLabels: a statement that is not a write is not labelled one;
// the bypass counter it falls under is named as such.
func TestExplainLabels(t *testing.T) {
	for _, tc := range []struct{ sql, want string }{
		{"SELECT random()", `shared:      no: calls random (volatile) (not known to be read-only: counted under bypass reason "write")`},
		{"garbage here", "shared:      no: not a query: GARBAGE ("},
		{"UPDATE products SET n = 1", "shared:      no: write: UPDATE\n"},
		{"/* sqlflight: ttl=1m tables=products */ SELECT my_fn()", "reads:       products\n"},
	} {
		code, out, errOut := explainCmd(t, "", tc.sql)
		if code != exitOK || errOut != "" || !strings.Contains(out, tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want %q in\n%s", tc.sql, code, errOut, tc.want, out)
		}
		if strings.Contains(out, "no: write: calls") || strings.Contains(out, "no: write: not a query") {
			t.Errorf("%s: labelled a write:\n%s", tc.sql, out)
		}
	}
}

// TestExplainJSONShape: durations are Go duration strings and empty lists
// are [] in -json output.
func TestExplainJSONShape(t *testing.T) {
	code, out, errOut := explainCmd(t, "", "-json", "/* sqlflight: soft=30s hard=5m */ SELECT 1")
	if code != exitOK || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	for _, want := range []string{`"soft": "30s"`, `"hard": "5m0s"`, `"writes": []`, `"unknown_functions": []`} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "null") {
		t.Errorf("output has null:\n%s", out)
	}
}
