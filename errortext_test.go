package sqlflight

import (
	"context"
	"database/sql/driver"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight/internal/annotation"
)

// checkOnePrefix fails t unless err's text says "sqlflight:" exactly once,
// at its start.
func checkOnePrefix(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error", what)
	}
	if msg := err.Error(); !strings.HasPrefix(msg, errPrefix) || strings.Count(msg, "sqlflight:") != 1 {
		t.Errorf("%s: %q does not say \"sqlflight:\" once, at its start", what, msg)
	}
}

// A malformed annotation's error says "sqlflight:" once, whatever part of
// it failed (the policy's own validation included).
func TestAnnotationErrorsHaveOnePrefix(t *testing.T) {
	_, err := annotation.Parse("soft=5m hard=30s")
	if want := "sqlflight: bad annotation: hard (30s) shorter than soft (5m0s)"; err == nil || err.Error() != want {
		t.Fatalf("error %v, want %q", err, want)
	}
	if !errors.Is(err, ErrBadAnnotation) {
		t.Errorf("%v does not wrap ErrBadAnnotation", err)
	}
	for _, text := range []string{"coalesce nocoalesce", "jitter=150%", "maxrows=-1", "soft=abc", "tables=,", "zzz", "ttl"} {
		_, err := annotation.Parse(text)
		checkOnePrefix(t, text, err)
		if !errors.Is(err, ErrBadAnnotation) {
			t.Errorf("%s: %v does not wrap ErrBadAnnotation", text, err)
		}
	}
	// Under Strict, as a caller gets it.
	db, _ := openFake(t, &fakeDriver{}, Options{Strict: true})
	_, err = db.QueryContext(context.Background(), "/* sqlflight: soft=5m hard=30s */ SELECT n FROM errtext_t")
	checkOnePrefix(t, "strict query", err)
	if !errors.Is(err, ErrBadAnnotation) {
		t.Errorf("strict query: %v does not wrap ErrBadAnnotation", err)
	}
}

// A DSN parameter holding a bad policy says "sqlflight:" once.
func TestDSNErrorsHaveOnePrefix(t *testing.T) {
	var o Options
	err := applyDSN(&o, map[string]string{"default": "soft=5m,hard=30s"})
	checkOnePrefix(t, "sqlflight.default", err)
	if !errors.Is(err, ErrBadDSN) {
		t.Errorf("%v does not wrap ErrBadDSN", err)
	}
	if want := "sqlflight: bad DSN parameter: sqlflight.default=soft=5m,hard=30s: bad annotation: hard (30s) shorter than soft (5m0s)"; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
}

// An origin that panics with an error of this package, or fails with one
// after its timeout, gives its callers one "sqlflight:".
func TestOriginErrorsHaveOnePrefix(t *testing.T) {
	d := &fakeDriver{onQuery: func(ctx context.Context, q string, _ []driver.NamedValue) (driver.Rows, error) {
		if strings.Contains(q, "panics") {
			panic(ErrOverloaded)
		}
		<-ctx.Done()
		return nil, ErrCircuitOpen
	}}
	db, _ := openFake(t, d, Options{OriginTimeout: 20 * time.Millisecond})
	ctx := context.Background()
	_, err := db.QueryContext(ctx, "SELECT n FROM errtext_panics")
	checkOnePrefix(t, "panic", err)
	if !errors.Is(err, ErrOriginPanicked) {
		t.Errorf("%v does not wrap ErrOriginPanicked", err)
	}
	_, err = db.QueryContext(ctx, "SELECT n FROM errtext_slow")
	checkOnePrefix(t, "timeout", err)
	for _, want := range []error{ErrOriginTimeout, context.DeadlineExceeded, ErrCircuitOpen} {
		if !errors.Is(err, want) {
			t.Errorf("%v does not wrap %v", err, want)
		}
	}
}

// wrapf writes an argument's "sqlflight:" only where it leads the message,
// and wraps as fmt.Errorf does.
func TestWrapf(t *testing.T) {
	inner := errors.New("sqlflight: inner")
	for _, c := range []struct {
		err  error
		want string
	}{
		{wrapf("%w: %w", ErrBadDSN, inner), "sqlflight: bad DSN parameter: inner"},
		{wrapf("sqlflight: outer: %w", inner), "sqlflight: outer: inner"},
		{wrapf("%w: %v", ErrOriginPanicked, "sqlflight: a string stays"), "sqlflight: origin query panicked: sqlflight: a string stays"},
		{wrapf("sqlflight: outer: %w", errors.New("plain")), "sqlflight: outer: plain"},
	} {
		if c.err.Error() != c.want {
			t.Errorf("got %q, want %q", c.err, c.want)
		}
	}
	if err := wrapf("%w: %w", ErrBadDSN, inner); !errors.Is(err, ErrBadDSN) || !errors.Is(err, inner) {
		t.Errorf("%v does not wrap both", err)
	}
}

// bypassReasons returns the values of the bypass… constants of route.go.
func bypassReasons(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "route.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, sp := range g.Specs {
			vs := sp.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if !strings.HasPrefix(n.Name, "bypass") || i >= len(vs.Values) {
					continue
				}
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					v, _ := strconv.Unquote(lit.Value)
					reasons = append(reasons, v)
				}
			}
		}
	}
	if len(reasons) < 10 {
		t.Fatalf("found %d bypass reasons in route.go: %q", len(reasons), reasons)
	}
	return reasons
}

// Every reason Stats.BypassReasons can hold is documented: on the field,
// and in "Options and stats" of docs/configuration.md.
func TestBypassReasonsDocumented(t *testing.T) {
	reasons := bypassReasons(t)
	f, err := parser.ParseFile(token.NewFileSet(), "shield.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var doc string
	ast.Inspect(f, func(n ast.Node) bool {
		if fd, ok := n.(*ast.Field); ok && len(fd.Names) == 1 && fd.Names[0].Name == "BypassReasons" {
			doc = strings.Join(strings.Fields(fd.Doc.Text()), " ")
		}
		return true
	})
	readme, err := os.ReadFile("docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	section := string(readme)
	if i := strings.Index(section, "\n## Options and stats"); i >= 0 {
		section = section[i+1:]
		if j := strings.Index(section, "\n## "); j >= 0 {
			section = section[:j]
		}
	} else {
		t.Fatal(`docs/configuration.md has no "## Options and stats"`)
	}
	promSrc, err := os.ReadFile("prom/prom.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reasons {
		if !strings.Contains(string(promSrc), strconv.Quote(r)) {
			t.Errorf("prom.BypassReasons does not list %q", r)
		}
		if !strings.Contains(doc, strconv.Quote(r)) {
			t.Errorf("the doc of Stats.BypassReasons does not name %q", r)
		}
		if !strings.Contains(section, "`"+r+"`") {
			t.Errorf("\"Options and stats\" in docs/configuration.md does not name the bypass reason `%s`", r)
		}
	}
}
