package sqlflight

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight/internal/sqlscan"
)

func TestParseAnnotation(t *testing.T) {
	a, err := parseAnnotation("soft=30s hard=5m neg=5s jitter=10% beta=2 maxrows=50 maxbytes=512KiB wait=200ms timeout=2s tables=products,prices name=product_page coalesce")
	if err != nil {
		t.Fatal(err)
	}
	want := Policy{
		Soft: 30 * time.Second, Hard: 5 * time.Minute, Neg: 5 * time.Second, Jitter: 0.10, Beta: 2,
		MaxRows: 50, MaxBytes: 512 << 10, Wait: 200 * time.Millisecond, Timeout: 2 * time.Second,
		Name: "product_page", Coalesce: true,
	}
	got := a.p
	if len(got.Tables) != 2 || got.Tables[0] != "products" || got.Tables[1] != "prices" {
		t.Fatalf("tables %q", got.Tables)
	}
	got.Tables = nil
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}

	for text, check := range map[string]func(Policy) bool{
		"ttl=1m":              func(p Policy) bool { return p.Soft == time.Minute && p.Hard == time.Minute },
		"jitter=0%":           func(p Policy) bool { return p.Jitter < 0 },
		"beta=0":              func(p Policy) bool { return p.Beta < 0 },
		"maxbytes=8MiB":       func(p Policy) bool { return p.MaxBytes == 8<<20 },
		"maxbytes=1000":       func(p Policy) bool { return p.MaxBytes == 1000 },
		"off":                 func(p Policy) bool { return p.Off },
		"nocache":             func(p Policy) bool { return p.NoCache },
		"nocoalesce":          func(p Policy) bool { return p.NoCoalesce },
		"  soft=1s\thard=2s ": func(p Policy) bool { return p.Soft == time.Second && p.Hard == 2*time.Second },
	} {
		a, err := parseAnnotation(text)
		if err != nil || !check(a.p) {
			t.Errorf("%q: %+v %v", text, a.p, err)
		}
	}
}

func TestParseAnnotationRejects(t *testing.T) {
	for _, text := range []string{
		"sfot=30s", "soft=30", "soft=-1s", "soft=", "hard=1s soft=2s", "jitter=10", "jitter=150%",
		"beta=-1", "beta=x", "maxrows=0", "maxrows=ten", "maxbytes=8MB", "maxbytes=-1KiB",
		"tables=a,,b", "coalesce nocoalesce", "cache", "wait=forever",
	} {
		if _, err := parseAnnotation(text); !errors.Is(err, ErrBadAnnotation) {
			t.Errorf("%q: err = %v, want ErrBadAnnotation", text, err)
		}
	}
}

func TestAnnotationOverridesContextOverridesDefault(t *testing.T) {
	s := New(Options{Default: Policy{MaxRows: 10, Wait: time.Second}})
	c := &conn{s: s, sc: s.newScope()}
	r := scanFor(t, "/* sqlflight: maxrows=3 */ SELECT n FROM items")
	f := new(fate)
	err := s.route(context.Background(), c, r, nil, f)
	p := f.plan.pol
	if err != nil || p.MaxRows != 3 || p.Wait != time.Second {
		t.Fatalf("annotation over default: %+v %v", p, err)
	}
	ctx := WithPolicy(context.Background(), Policy{MaxRows: 7, Wait: 2 * time.Second})
	_ = s.route(ctx, c, r, nil, f)
	p = f.plan.pol
	if p.MaxRows != 3 || p.Wait != 2*time.Second {
		t.Fatalf("annotation over context: %+v", p)
	}
	_ = s.route(ctx, c, scanFor(t, "SELECT n FROM items"), nil, f)
	p = f.plan.pol
	if p.MaxRows != 7 {
		t.Fatalf("context over default: %+v", p)
	}
}

func TestWithPolicyRejectsInvalid(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic for hard < soft")
		}
	}()
	WithPolicy(context.Background(), Policy{Soft: time.Minute, Hard: time.Second})
}

func scanFor(t *testing.T, q string) *sqlscan.Result {
	t.Helper()
	return sqlscan.Scan(q)
}
