package sqlscan

import "testing"

func TestNormalize(t *testing.T) {
	cases := []struct{ in, want string }{
		{"SELECT 1", "SELECT 1"},
		{"  SELECT   *\n\tFROM  t  -- c\n WHERE a = 'x  y'  ;  ", "SELECT * FROM t WHERE a = 'x  y'"},
		{"SELECT/* c */1", "SELECT 1"},
		{"SELECT /* a /* nested */ b */ 1", "SELECT 1"},
		{"/* sqlflight: ttl=5s */ SELECT * FROM Products WHERE Id = $1", "SELECT * FROM Products WHERE Id = $1"},
		{"-- sqlflight: coalesce\nSELECT 1", "SELECT 1"},
		{"select  \"Mixed  Case\"  from T", "select \"Mixed  Case\" from T"},
		{"SELECT $f$  a  \n b $f$ ,  $$ -- x $$", "SELECT $f$  a  \n b $f$ , $$ -- x $$"},
		{"SELECT E'a\\'  b' ,U&'\\0041  '", "SELECT E'a\\'  b' ,U&'\\0041  '"},
		{"SELECT 1;;", "SELECT 1"},
		{"SELECT 1 ; SELECT 2 ;\n ; ", "SELECT 1 ; SELECT 2"},
		{";SELECT 1", ";SELECT 1"},
		{"SELECT 'a'   \n  -- c\n  'b'", "SELECT 'a'\n'b'"},
		{"SELECT 'a'\r\n'b' 'c'", "SELECT 'a'\n'b' 'c'"},
		{"SELECT 'a' /* c */\n 'b'", "SELECT 'a' 'b'"},
		{"SELECT 1 +-- c\n2", "SELECT 1 + 2"},
		{"SELECT a/**/b, $1/**/x, e/**/'y'", "SELECT a b, $1 x, e 'y'"},
		{"SELECT 1 /* unterminated", "SELECT 1 /* unterminated"},
		{"SELECT 'unterminated  ", "SELECT 'unterminated  "},
		{"  /* only */ ", ""},
		{"", ""},
	}
	for _, tc := range cases {
		got := Parse(tc.in).Normalized
		if got != tc.want {
			t.Errorf("Normalized(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if again := Parse(got).Normalized; again != got {
			t.Errorf("not idempotent: %q -> %q -> %q", tc.in, got, again)
		}
	}
}

// TestNormalizeEquivalent checks that texts differing only in comments and whitespace
// outside literals normalize identically, and that literal differences survive.
func TestNormalizeEquivalent(t *testing.T) {
	same := [][]string{
		{
			"SELECT * FROM t WHERE a = $1",
			"  SELECT *\nFROM t\n\tWHERE a = $1;",
			"/* sqlflight: ttl=5s */ SELECT * FROM t -- c\n WHERE a = $1 /* x */",
			"SELECT/**/*/**/FROM t WHERE a = $1 ; ;",
		},
		{"SELECT 'a'\n'b'", "SELECT 'a' -- sqlflight: ttl=1s\n\n  'b'"},
	}
	for _, group := range same {
		want := Parse(group[0]).Normalized
		for _, s := range group[1:] {
			if got := Parse(s).Normalized; got != want {
				t.Errorf("Normalized(%q) = %q, want %q", s, got, want)
			}
		}
	}
	different := [][2]string{
		{"SELECT 'a b'", "SELECT 'a  b'"},
		{"SELECT $$a b$$", "SELECT $$a  b$$"},
		{`SELECT "a b"`, `SELECT "a  b"`},
		{"SELECT a", "SELECT A"},
		{"SELECT 'a'\n'b'", "SELECT 'a' 'b'"},
	}
	for _, d := range different {
		if Parse(d[0]).Normalized == Parse(d[1]).Normalized {
			t.Errorf("%q and %q normalize identically", d[0], d[1])
		}
	}
}

// TestNormalizedAliasesSource checks that a text that is already normalized is not copied.
func TestNormalizedAliasesSource(t *testing.T) {
	src := "SELECT * FROM t WHERE id = $1"
	allocs := testing.AllocsPerRun(10, func() { _ = Parse(src) })
	r := Parse(src)
	if r.Normalized != src {
		t.Fatalf("Normalized %q", r.Normalized)
	}
	t.Logf("Parse allocations: %.0f", allocs)
}
