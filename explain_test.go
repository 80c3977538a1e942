package sqlflight

import (
	"context"
	"strings"
	"testing"
	"time"
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
