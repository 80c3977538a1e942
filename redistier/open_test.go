package redistier

import (
	"context"
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// closedPort returns a loopback address where nothing listens.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// TestOpenRefusedFailsAtOnce: a tier opened from a URL where nothing
// listens reports the refusal itself (which the Shield takes for a certain
// failure), not a timeout. (Without DialerRetries 1, go-redis dials five
// times 100 ms apart first, which outlasts the Shield's RedisTimeout and
// turns the refusal into a timeout: see TestOpenSchemes for the option,
// integration's TestRedisRefusedTakesTheTierDownAtOnce for the Shield.)
func TestOpenRefusedFailsAtOnce(t *testing.T) {
	for _, scheme := range []string{"redis", "redis+cluster"} {
		t.Run(scheme, func(t *testing.T) {
			st, err := open(scheme + "://" + closedPort(t) + "/0")
			if err != nil {
				t.Fatal(err)
			}
			tier := st.(*Tier)
			defer tier.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err = tier.Fetch(ctx, "refused:", "k", []string{"t"})
			if !errors.Is(err, syscall.ECONNREFUSED) {
				t.Fatalf("Fetch = %v; want a refused connection", err)
			}
		})
	}
}

// TestOpenSchemes: redis+cluster and redis+sentinel URLs make the clients
// go-redis parses them into, and keep what the URL sets itself.
func TestOpenSchemes(t *testing.T) {
	for _, tc := range []struct {
		url  string
		want string // the client's type
	}{
		{"redis://127.0.0.1:1/0", "*redis.Client"},
		{"REDIS://127.0.0.1:1/0", "*redis.Client"},
		{"redis+cluster://127.0.0.1:1?addr=127.0.0.1:2&addr=127.0.0.1:3", "*redis.ClusterClient"},
		{"rediss+cluster://127.0.0.1:1", "*redis.ClusterClient"},
		{"redis+sentinel://127.0.0.1:1?master_name=main&addr=127.0.0.1:2", "*redis.Client"},
	} {
		c, err := newClientOf(tc.url)
		if err != nil {
			t.Fatalf("%s: %v", tc.url, err)
		}
		if got := typeName(c); got != tc.want {
			t.Errorf("%s: a %s, want a %s", tc.url, got, tc.want)
		}
		_ = c.Close()
	}
	c, err := newClientOf("redis+cluster://127.0.0.1:1?addr=127.0.0.1:2&max_retries=4&dialer_retries=3")
	if err != nil {
		t.Fatal(err)
	}
	o := c.(*redis.ClusterClient).Options()
	if len(o.Addrs) != 2 || o.MaxRetries != 4 || o.DialerRetries != 3 || !o.ContextTimeoutEnabled {
		t.Fatalf("cluster options: %v %d %d %v", o.Addrs, o.MaxRetries, o.DialerRetries, o.ContextTimeoutEnabled)
	}
	_ = c.Close()
	c, err = newClientOf("redis://127.0.0.1:1/0")
	if err != nil {
		t.Fatal(err)
	}
	if o := c.(*redis.Client).Options(); o.MaxRetries != 1 || o.DialerRetries != 1 || !o.ContextTimeoutEnabled {
		t.Fatalf("options: %d %d %v", o.MaxRetries, o.DialerRetries, o.ContextTimeoutEnabled)
	}
	_ = c.Close()

	for _, bad := range []string{
		"redis+sentinel://127.0.0.1:26379",             // no master_name
		"redis+cluster://127.0.0.1:1?addr=nohostport",  // a bad seed
		"redis+cluster://127.0.0.1:1?no_such_option=1", // go-redis refuses it
		"redis+foo://127.0.0.1:1",
		"memcache+cluster://127.0.0.1:1",
	} {
		if c, err := newClientOf(bad); err == nil {
			_ = c.Close()
			t.Errorf("%s: accepted", bad)
		}
	}
	// A URL that does not parse is not quoted back: its password with it.
	_, err = newClientOf("redis+cluster://user:s3cret@[::1/0")
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("bad URL: %v", err)
	}
}

func typeName(v any) string {
	switch v.(type) {
	case *redis.Client:
		return "*redis.Client"
	case *redis.ClusterClient:
		return "*redis.ClusterClient"
	}
	return "other"
}

// TestOpenRetriesWithoutPause: a client made from a URL retries at once
// (go-redis otherwise sleeps 10 to 30 ms before its retry, which the first
// read of a tier whose Redis refuses connections pays on top of its query)
// and bounds a dial by defaultDialTimeout, on every scheme, unless the URL
// sets them.
func TestOpenRetriesWithoutPause(t *testing.T) {
	type tuned struct{ min, max, dial time.Duration }
	options := func(c redis.UniversalClient) tuned {
		switch c := c.(type) {
		case *redis.Client:
			o := c.Options()
			return tuned{o.MinRetryBackoff, o.MaxRetryBackoff, o.DialTimeout}
		case *redis.ClusterClient:
			o := c.Options()
			return tuned{o.MinRetryBackoff, o.MaxRetryBackoff, o.DialTimeout}
		}
		t.Fatalf("a %T", c)
		return tuned{}
	}
	for _, tc := range []struct {
		url  string
		want tuned
	}{
		// go-redis reads -1 as "no pause" and keeps it as 0.
		{"redis://127.0.0.1:1/0", tuned{0, 0, defaultDialTimeout}},
		{"redis+cluster://127.0.0.1:1?addr=127.0.0.1:2", tuned{0, 0, defaultDialTimeout}},
		{"redis+sentinel://127.0.0.1:1?master_name=main", tuned{0, 0, defaultDialTimeout}},
		{"redis://127.0.0.1:1/0?min_retry_backoff=5ms&max_retry_backoff=50ms&dial_timeout=3s", tuned{5 * time.Millisecond, 50 * time.Millisecond, 3 * time.Second}},
		{"redis+cluster://127.0.0.1:1?min_retry_backoff=5ms&max_retry_backoff=50ms&dial_timeout=3s", tuned{5 * time.Millisecond, 50 * time.Millisecond, 3 * time.Second}},
	} {
		c, err := newClientOf(tc.url)
		if err != nil {
			t.Fatalf("%s: %v", tc.url, err)
		}
		if got := options(c); got != tc.want {
			t.Errorf("%s: retry pause %v to %v, dial timeout %v; want %v to %v, %v", tc.url,
				got.min, got.max, got.dial, tc.want.min, tc.want.max, tc.want.dial)
		}
		_ = c.Close()
	}
}
