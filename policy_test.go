package sqlflight

import (
	"context"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight/internal/sqlscan"
)

func TestAnnotationOverridesContextOverridesDefault(t *testing.T) {
	s := New(Options{Default: Policy{MaxRows: 10, Wait: time.Second}})
	c := &conn{s: s.engine, sc: s.newScope()}
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
