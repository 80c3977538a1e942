package sqlscan

import (
	"context"
	"slices"
	"testing"
)

// The statement of the brief: with standard_conforming_strings = off the backslash escapes
// the second quote, the string runs to the quote after the comma, and nextval is called.
const hiddenNextval = `SELECT 'a\' , ', nextval($$s$$) -- '`

func TestScanNonStandard(t *testing.T) {
	r := ScanNonStandard(hiddenNextval)
	if r.Verdict != Never || !slices.Contains(r.Functions, "nextval") || r.ReadOnly {
		t.Fatalf("non-standard: %v (%s) functions %q: want Never calling nextval", r.Verdict, r.Reason, r.Functions)
	}
	if s := Scan(hiddenNextval); s.Verdict != Shareable || len(s.Functions) != 0 {
		t.Fatalf("standard: %v (%s) functions %q: want Shareable, no call", s.Verdict, s.Reason, s.Functions)
	}
	if ScanNonStandard(hiddenNextval) != r {
		t.Error("ScanNonStandard does not memoize")
	}
	if Scan(hiddenNextval) == r {
		t.Error("Scan and ScanNonStandard share a memo entry")
	}

	cases := []struct {
		sql           string
		std, nonStd   Verdict
		stdFn, nonFns []string
	}{
		{hiddenNextval, Shareable, Never, nil, []string{"nextval"}},
		{`SELECT N'x\' , ', pg_sleep(1) -- '`, Shareable, Never, nil, []string{"pg_sleep"}},
		{`SELECT 'it\'s'`, Never, Shareable, nil, nil}, // standard: 'it\' then s' unterminated
		{`SELECT 'a\\' , nextval('s')`, Never, Never, []string{"nextval"}, []string{"nextval"}},
		{`SELECT 'a\\', lower('x')`, Shareable, Shareable, []string{"lower"}, []string{"lower"}},
		{`SELECT E'a\' , ', 1`, Shareable, Shareable, nil, nil},
		// standard: 'a\' continues with ' , ' on the next line, then setval is called;
		// non-standard: the escaped quote keeps the first string open across the newline.
		{"SELECT 'a\\'\n' , ', setval('s', 1) -- '", Never, Shareable, []string{"setval"}, nil},
		// standard: one string up to the third quote pair, then now(); non-standard: the
		// string ends early and the text after it is a string holding "now".
		{`SELECT 'x''y\'' , ', now() -- '`, InFlightOnly, InFlightOnly, []string{"now"}, nil},
		{`SELECT B'1\' , ', nextval('s')`, Never, Never, nil, nil}, // bit strings take no escapes: unterminated
		{`SELECT 'a\'; DELETE FROM t; --'`, Never, Shareable, nil, nil},
		{`SELECT $$a\$$, 'b\'c'`, Never, Shareable, nil, nil},
	}
	for _, tc := range cases {
		s, n := Parse(tc.sql), ParseNonStandard(tc.sql)
		if s.Verdict != tc.std || !slices.Equal(s.Functions, tc.stdFn) {
			t.Errorf("standard %q: %v (%s) %q; want %v %q", tc.sql, s.Verdict, s.Reason, s.Functions, tc.std, tc.stdFn)
		}
		if n.Verdict != tc.nonStd || !slices.Equal(n.Functions, tc.nonFns) {
			t.Errorf("non-standard %q: %v (%s) %q; want %v %q", tc.sql, n.Verdict, n.Reason, n.Functions, tc.nonStd, tc.nonFns)
		}
	}
	// A sequence literal with escapes is written, but its name is not read: tables unknown.
	if r := ParseNonStandard(`SELECT nextval('my\_seq')`); r.Verdict != Never || r.TablesKnown {
		t.Errorf("nextval with escapes: %v known %v", r.Verdict, r.TablesKnown)
	}
}

// topLevelItems counts the select-list items of a SELECT as the scanner lexes it (top-level
// commas + 1), in the given string mode.
func topLevelItems(sql string, nonStd bool) int {
	var lx lexer
	lx.nonStd = nonStd
	lx.run(sql)
	n, depth := 1, 0
	for _, t := range lx.toks {
		switch t.kind {
		case tLParen, tLBrack:
			depth++
		case tRParen, tRBrack:
			depth--
		case tComma:
			if depth == 0 {
				n++
			}
		}
	}
	return n
}

// TestNonStandardAgainstServer runs texts whose meaning depends on standard_conforming_strings
// on a live server in both settings and compares the number of result columns with the
// scanner's reading of the same text in the same mode.
func TestNonStandardAgainstServer(t *testing.T) {
	db := liveDB(t)
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	texts := []string{
		`SELECT 'a\' , ', 1 -- '`,
		`SELECT 'a\\' , 'b'`,
		`SELECT N'a\' , ', 1 -- '`,
		`SELECT E'a\' , ', 1`,
		"SELECT 'a\\'\n' , ', 1 -- '",
		`SELECT 'x''y\'' , ', 2 -- '`,
		`SELECT 'q\\\' , ', 3 -- '`,
		`SELECT '\x27' , ', 4 -- '`,
		`SELECT $$a\$$, 'b\'c' , ', 5 -- '`,
	}
	compared := 0
	for _, mode := range []string{"off", "on"} {
		if _, err := conn.ExecContext(ctx, "SET standard_conforming_strings = "+mode); err != nil {
			t.Fatal(err)
		}
		for _, sql := range texts {
			rows, err := conn.QueryContext(ctx, sql)
			if err != nil {
				// The server rejects it in this mode: the scanner must not call it shareable.
				r := Parse(sql)
				if mode == "off" {
					r = ParseNonStandard(sql)
				}
				if r.Verdict != Never {
					t.Errorf("standard_conforming_strings=%s %q: server error %v, scanner verdict %v", mode, sql, err, r.Verdict)
				}
				continue
			}
			cols, err := rows.Columns()
			rows.Close()
			if err != nil {
				t.Fatal(err)
			}
			compared++
			if got := topLevelItems(sql, mode == "off"); got != len(cols) {
				t.Errorf("standard_conforming_strings=%s %q: server has %d columns, scanner reads %d items", mode, sql, len(cols), got)
			}
		}
	}
	if _, err := conn.ExecContext(ctx, "RESET standard_conforming_strings"); err != nil {
		t.Fatal(err)
	}
	if compared < len(texts) {
		t.Fatalf("only %d of %d runs compared", compared, 2*len(texts))
	}
}
