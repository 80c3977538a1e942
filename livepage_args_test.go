package sqlflight

import (
	"context"
	"database/sql/driver"
	"encoding/json"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/sqlflight/sqlflight/internal/livepage"
	"github.com/sqlflight/sqlflight/internal/redact"
)

// Values of other users that the live page must not show by default: an
// argument of a hot key, and literals of a statement's text.
const (
	secretArg    = "sess-7f3a9c-alice@example.com"
	otherArg     = "sess-0b21de-carol@example.com"
	secretLit    = "lit-secret-bob@example.com"
	secretNumber = "987654321"
	// Inlined values (an ORM's): the statement's shape holds none of them.
	inlineA, inlineB = "424242421", "535353531"
)

// A cached statement keyed by a session token, an uncached one (the
// advisor lists it) with literals in its text (cast: its shape keeps them),
// called with the same token, and one whose values are inlined.
const (
	argsCached = "/* sqlflight: soft=10s hard=1m jitter=0% */ SELECT n FROM sessions WHERE token = $1"
	argsLit    = "SELECT n FROM accounts WHERE email = $1 AND note <> '" + secretLit + "'::text AND id <> " + secretNumber + "::bigint"
	argsInline = "SELECT n FROM accounts WHERE id = "
)

var pageHash = regexp.MustCompile(`^#[0-9a-f]{12}$`)

// argsShield returns a Shield that ran argsCached and argsLit with the
// secret values, and its page handler with opts.
func argsShield(t *testing.T) *Shield {
	t.Helper()
	d := &fakeDriver{onQuery: func(context.Context, string, []driver.NamedValue) (driver.Rows, error) {
		return oneRow(int64(1)), nil
	}}
	db, s := openFake(t, d, Options{Clock: newFakeClock(), Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(func() { _ = s.Close() })
	for range 3 {
		readN(t, db, argsCached, secretArg)
	}
	for range 2 {
		readN(t, db, argsCached, otherArg)
	}
	for range 4 {
		readN(t, db, argsLit, secretArg)
	}
	readN(t, db, argsInline+inlineA)
	readN(t, db, argsInline+inlineB)
	return s
}

// argsPage is the part of the JSON the tests read.
type argsPage struct {
	Statements    []livepage.Line
	Advice        []Advice
	ShowArguments bool `json:"show_arguments"`
}

func getArgsPage(t *testing.T, s *Shield, o LivePageOptions) (argsPage, string, string) {
	t.Helper()
	h := HandlerWith(s, o)
	js := getLive(t, h, "/json").Body.String()
	html := getLive(t, h, "/").Body.String()
	var p argsPage
	if err := json.Unmarshal([]byte(js), &p); err != nil {
		t.Fatal(err)
	}
	return p, js, html
}

// statementOn returns the page's line of the statement whose text is q:
// of its shape.
func statementOn(t *testing.T, s *Shield, p argsPage, q string, show bool) livepage.Line {
	t.Helper()
	want := s.Explain(context.Background(), q).Shape
	if !show {
		want, _ = redact.NewHasher(s.statements.ValueKey()).Text(want, "")
	}
	for _, st := range p.Statements {
		if st.SQL == want {
			return st
		}
	}
	t.Fatalf("no statement %q on the page: %+v", want, p.Statements)
	return livepage.Line{}
}

// TestLivePageHidesArguments: by default neither the JSON nor the HTML
// holds an argument of a hot key or a literal of a statement's text; each
// shows as a keyed hash, one value as one hash (across statements and
// requests), and the fingerprint of a text with literals is hashed too.
func TestLivePageHidesArguments(t *testing.T) {
	s := argsShield(t)
	p, js, html := getArgsPage(t, s, LivePageOptions{})
	for _, secret := range []string{secretArg, otherArg, secretLit, secretNumber, inlineA, inlineB, "alice@", "carol@", "bob@"} {
		if strings.Contains(js, secret) {
			t.Errorf("the JSON shows %q:\n%s", secret, js)
		}
		if strings.Contains(html, secret) {
			t.Errorf("the HTML shows %q", secret)
		}
	}
	if p.ShowArguments {
		t.Error("show_arguments is true by default")
	}

	cached := statementOn(t, s, p, argsCached, false)
	lit := statementOn(t, s, p, argsLit, false)
	if len(cached.HotKeys) != 2 || len(lit.HotKeys) != 1 {
		t.Fatalf("hot keys %+v and %+v, want 2 and 1", cached.HotKeys, lit.HotKeys)
	}
	hashes := map[string]bool{}
	for _, k := range append(slices.Clone(cached.HotKeys), lit.HotKeys...) {
		if len(k.Args) != 1 || !pageHash.MatchString(k.Args[0]) || !pageHash.MatchString(k.Hash) {
			t.Fatalf("hot key %+v: want hashes", k)
		}
		hashes[k.Args[0]] = true
	}
	secretHash := cached.HotKeys[0].Args[0] // 3 calls, the hottest
	if secretHash != lit.HotKeys[0].Args[0] || len(hashes) != 2 {
		t.Errorf("one value, two hashes, or two values, one hash: %v (the secret's %s, %s)", hashes, secretHash, lit.HotKeys[0].Args[0])
	}
	if !strings.Contains(html, secretHash) {
		t.Errorf("the HTML does not show the hash %s", secretHash)
	}

	// The text keeps its shape and parameters; its literals are hashes,
	// and so is its fingerprint (FNV of the text, it would let one guess a
	// literal); a text without literals keeps its fingerprint.
	shape := regexp.MustCompile(`^SELECT n FROM accounts WHERE email = \$1 AND note <> '(#[0-9a-f]{12})'::text AND id <> (#[0-9a-f]{12})::bigint$`)
	if !shape.MatchString(lit.SQL) {
		t.Errorf("text with literals shows as %q", lit.SQL)
	}
	ctx := context.Background()
	if !pageHash.MatchString(lit.Fingerprint) || cached.Fingerprint != s.Explain(ctx, argsCached).Fingerprint {
		t.Errorf("fingerprints %q (with literals) and %q (without, want %q)", lit.Fingerprint, cached.Fingerprint, s.Explain(ctx, argsCached).Fingerprint)
	}
	i := slices.IndexFunc(p.Advice, func(a Advice) bool { return a.SQL == lit.SQL })
	if i < 0 || p.Advice[i].Fingerprint != lit.Fingerprint {
		t.Errorf("the advice on the text with literals is not hashed alike: %+v", p.Advice)
	}
	// Inlined values: one statement, its shape, which holds no value (its
	// fingerprint neither: it shows as it is, as Explain says it).
	inline := statementOn(t, s, p, argsInline+inlineA, false)
	if inline.SQL != argsInline+"$1" || inline.Calls != 2 ||
		inline.Fingerprint != s.Explain(ctx, argsInline+inlineB).Fingerprint {
		t.Errorf("inlined values: %+v, fingerprint %s", inline, s.Explain(ctx, argsInline+inlineB).Fingerprint)
	}

	// The same hashes on the next request.
	p2, _, _ := getArgsPage(t, s, LivePageOptions{})
	if again := statementOn(t, s, p2, argsCached, false); again.HotKeys[0].Args[0] != secretHash ||
		statementOn(t, s, p2, argsLit, false).Fingerprint != lit.Fingerprint {
		t.Errorf("hashes changed between requests: %+v", again.HotKeys)
	}

	// The Go API, seen by the application only, keeps the values.
	var kept bool
	for _, st := range s.Statements() {
		for _, k := range st.HotKeys {
			kept = kept || slices.Contains(k.Args, `"`+secretArg+`"`)
		}
	}
	if !kept {
		t.Error("Shield.Statements lost the arguments")
	}
}

// TestLivePageHashesAreKeyed: the page's hashes are under a key of the
// Shield: another Shield shows the same value as another hash, and no
// hash is the plain SHA-256 or HMAC-SHA256 under an empty key of what it
// hides, so that nobody can find a value by hashing guesses.
func TestLivePageHashesAreKeyed(t *testing.T) {
	a, b := argsShield(t), argsShield(t)
	pa, _, _ := getArgsPage(t, a, LivePageOptions{})
	pb, _, _ := getArgsPage(t, b, LivePageOptions{})
	ha := statementOn(t, a, pa, argsCached, false).HotKeys[0].Args[0]
	hb := statementOn(t, b, pb, argsCached, false).HotKeys[0].Args[0]
	if ha == hb {
		t.Errorf("two Shields show %q as one hash %s", secretArg, ha)
	}
	unkeyed := redact.NewHasher(nil).Sum(redact.DomainArg, `"`+secretArg+`"`)
	if ha == unkeyed || hb == unkeyed {
		t.Errorf("the hash %s is the unkeyed one", unkeyed)
	}
}

// TestLivePageShowArguments: with LivePageOptions.ShowArguments the page
// shows the arguments, the texts and their fingerprints as they are.
func TestLivePageShowArguments(t *testing.T) {
	s := argsShield(t)
	p, js, html := getArgsPage(t, s, LivePageOptions{ShowArguments: true})
	for _, v := range []string{secretArg, otherArg, secretLit, secretNumber} {
		if !strings.Contains(js, v) || !strings.Contains(html, v) {
			t.Errorf("ShowArguments: %q not shown", v)
		}
	}
	lit := statementOn(t, s, p, argsLit, true)
	if !p.ShowArguments || lit.Fingerprint != s.Explain(context.Background(), argsLit).Fingerprint ||
		len(lit.HotKeys) != 1 || lit.HotKeys[0].Args[0] != `"`+secretArg+`"` {
		t.Errorf("ShowArguments: %+v", lit)
	}
}

// TestLivePageTrusted: a shared tier trusted without a secret shows in the
// JSON (stats.SharedTrusted) and as a warning on the page; a Shield whose
// tier has a secret, or that has none, shows no warning.
func TestLivePageTrusted(t *testing.T) {
	discard := slog.New(slog.DiscardHandler)
	trusted := New(Options{InsecureTrustSharedTier: true, Logger: discard}, Shared(newMemTier(newFakeClock())))
	sealed := New(Options{SharedSecret: testSecret, Logger: discard}, Shared(newMemTier(newFakeClock())))
	none := New(Options{Logger: discard})
	for _, s := range []*Shield{trusted, sealed, none} {
		t.Cleanup(func() { _ = s.Close() })
	}
	const warning = `<div class="alert" id="trusted" role="alert">The shared tier is trusted without a secret`
	for _, c := range []struct {
		name string
		s    *Shield
		want bool
	}{{"trusted", trusted, true}, {"secret", sealed, false}, {"no tier", none, false}} {
		h := Handler(c.s)
		var page struct{ Stats map[string]any }
		if err := json.NewDecoder(getLive(t, h, "/json").Body).Decode(&page); err != nil {
			t.Fatal(err)
		}
		html := getLive(t, h, "/").Body.String()
		if page.Stats["SharedTrusted"] != c.want || strings.Contains(html, warning) != c.want ||
			strings.Contains(html, "trusted without a secret</b>") != c.want ||
			strings.Contains(html, `id="trusted" role="alert" hidden>`) == c.want {
			t.Errorf("%s: SharedTrusted %v, want %v; page:\n%s", c.name, page.Stats["SharedTrusted"], c.want, html[:min(len(html), 4000)])
		}
	}
}
