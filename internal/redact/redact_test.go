package redact_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/sqlflight/sqlflight/internal/redact"
)

// TestMaskLiterals: every literal of a text is masked, by PostgreSQL's
// lexical rules, and nothing else; where a text reads two ways, the more.
func TestMaskLiterals(t *testing.T) {
	for _, c := range []struct {
		sql, want string
		lits      []string
	}{
		{`SELECT 1`, `SELECT <>`, []string{`1`}},
		{`SELECT t1.c2, a$b FROM t1 WHERE x = $12 AND y = ? AND z = :name`, `SELECT t1.c2, a$b FROM t1 WHERE x = $12 AND y = ? AND z = :name`, nil},
		{`SELECT 'x''y', E'a\'b', 'c' FROM t`, `SELECT '<>', E'<>', '<>' FROM t`, []string{`'x''y'`, `'a\'b'`, `'c'`}},
		{`SELECT e'\\', B'0101', X'1F', N'n', U&'d\0061t' FROM t`, `SELECT e'<>', B'<>', X'<>', N'<>', U&'<>' FROM t`,
			[]string{`'\\'`, `'0101'`, `'1F'`, `'n'`, `'d\0061t'`}},
		// With standard_conforming_strings = off the first literal would
		// end at the third quote: everything after its start is masked.
		{`SELECT 'a\' AND x = 'secret' FROM t`, `SELECT '<>'`, []string{`'a\' AND x = 'secret' FROM t`}},
		{`SELECT 'C:\dir\' || x FROM t`, `SELECT '<>'`, []string{`'C:\dir\' || x FROM t`}},
		{`SELECT 'C:\dir' FROM t`, `SELECT '<>' FROM t`, []string{`'C:\dir'`}},
		{`SELECT $$it's$$, $tag$ a $x$ 'b' $tag$ FROM t`, `SELECT '<>', '<>' FROM t`, []string{`$$it's$$`, `$tag$ a $x$ 'b' $tag$`}},
		{`SELECT "Co""l", "x'y" FROM "T" WHERE n = 'é' AND café = 2`, `SELECT "Co""l", "x'y" FROM "T" WHERE n = '<>' AND café = <>`, []string{`'é'`, `2`}},
		{`SELECT 1.5e-3, .5, 0x1F, 1_000, a[3] FROM t LIMIT 10`, `SELECT <>, <>, <>, <>, a[<>] FROM t LIMIT <>`,
			[]string{`1.5e-3`, `.5`, `0x1F`, `1_000`, `3`, `10`}},
		{"SELECT a /* x /* y */ z */ FROM t -- tail\nWHERE b", "SELECT a /*<>*/ FROM t --<>\nWHERE b", []string{`/* x /* y */ z */`, `-- tail`}},
		{`SELECT 'abc`, `SELECT '<>'`, []string{`'abc`}},
		{`SELECT "abc`, `SELECT "<>"`, []string{`"abc`}},
		{`SELECT $q$ abc`, `SELECT '<>'`, []string{`$q$ abc`}},
		{`SELECT a /* abc`, `SELECT a /*<>*/`, []string{`/* abc`}},
		{`SELECT $ FROM t WHERE x = $a`, `SELECT $ FROM t WHERE x = $a`, nil},
	} {
		var lits []string
		got, masked := redact.MaskLiterals(c.sql, func(l string) string {
			lits = append(lits, l)
			return "<>"
		})
		if got != c.want || masked != (len(c.lits) > 0) || !slices.Equal(lits, c.lits) {
			t.Errorf("%s:\n got %s (%v) %q\nwant %s %q", c.sql, got, masked, lits, c.want, c.lits)
		}
	}
}

// TestHasherIsKeyedAndDomained: a hash depends on the key and the domain,
// and is "#" and 12 hex digits.
func TestHasherIsKeyedAndDomained(t *testing.T) {
	a, b := redact.NewHasher([]byte("key a")), redact.NewHasher([]byte("key b"))
	h := a.Sum(redact.DomainArg, "alice@example.com")
	if len(h) != 13 || h[0] != '#' || strings.Trim(h[1:], "0123456789abcdef") != "" {
		t.Fatalf("hash %q", h)
	}
	if h != a.Sum(redact.DomainArg, "alice@example.com") {
		t.Error("the same value hashed twice differs")
	}
	if h == b.Sum(redact.DomainArg, "alice@example.com") || h == a.Sum(redact.DomainLiteral, "alice@example.com") {
		t.Error("another key or domain gives the same hash")
	}
	text, fp := a.Text("SELECT * FROM t WHERE email = 'alice@example.com'", "0123456789abcdef")
	if strings.Contains(text, "alice") || fp == "0123456789abcdef" {
		t.Errorf("Text left %q, %q", text, fp)
	}
	if text, fp := a.Text("SELECT * FROM t WHERE id = $1", "0123456789abcdef"); text != "SELECT * FROM t WHERE id = $1" || fp != "0123456789abcdef" {
		t.Errorf("a text without literals changed: %q, %q", text, fp)
	}
}
