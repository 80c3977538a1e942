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

// TestRoutingAllocatesNothing: deciding the fate of a read the scope has
// seen allocates nothing, and the caller's fate stays on its stack (a
// closure handed to route.Decide once took it to the heap on every read:
// 528 bytes and 2 allocations per hit).
func TestRoutingAllocatesNothing(t *testing.T) {
	s := New(Options{Default: Policy{Soft: time.Minute}})
	defer s.Close()
	c := &conn{s: s.engine, sc: s.newScope()}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, q := range []string{"SELECT n FROM items WHERE id = $1", "/* sqlflight: soft=5s */ SELECT n FROM items"} {
		r := scanFor(t, q)
		var sink Policy
		allocs := testing.AllocsPerRun(200, func() {
			var f fate
			if err := s.route(ctx, c, r, nil, &f); err != nil {
				t.Fatal(err)
			}
			sink = f.plan.pol
		})
		if allocs != 0 || sink.Soft == 0 {
			t.Errorf("%q: %v allocations per route (policy %+v), want 0", q, allocs, sink)
		}
	}
}
