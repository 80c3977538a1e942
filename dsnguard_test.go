package sqlflight

import (
	"bytes"
	"errors"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/sqlflight/sqlflight/internal/dsnparam"
)

// TestDSNMayNotWeakenTheCodesTier: a DSN may not undo what Options and
// Shared set for the shared tier; each such key is refused by name.
func TestDSNMayNotWeakenTheCodesTier(t *testing.T) {
	s := New(Options{SharedSecret: testSecret, SharedEncrypt: true}, Shared(newMemTier(newFakeClock())))
	t.Cleanup(func() { _ = s.Close() })
	d := s.Wrap(&fakeDriver{})
	for _, c := range []struct{ dsn, key string }{
		{"db=1 sqlflight.shared_secret= sqlflight.insecure_trust_shared_tier=true", "shared_secret"},
		{"db=1 sqlflight.insecure_trust_shared_tier=true", "insecure_trust_shared_tier"},
		{"db=1 sqlflight.shared_secret=" + testSecretDSN, "shared_secret"},
		{"db=1 sqlflight.shared_previous_secret=" + testSecretDSN, "shared_previous_secret"},
		{"db=1 sqlflight.shared_encrypt=false", "shared_encrypt"},
		{"db=1 sqlflight.shared=memtest://other", "shared"},
		{"postgres://h/db?sqlflight.insecure_trust_shared_tier=1", "insecure_trust_shared_tier"},
	} {
		c0, err := d.Open(c.dsn)
		if err == nil {
			_ = c0.Close()
		}
		if !errors.Is(err, ErrBadDSN) || !strings.Contains(err.Error(), dsnPrefix+c.key+":") {
			t.Errorf("%s: %v; want ErrBadDSN naming %s", c.dsn, err, c.key)
		}
		if err != nil && strings.Contains(err.Error(), testSecretDSN) {
			t.Errorf("%s: the error shows the secret: %v", c.dsn, err)
		}
	}
	// What strengthens, or restates, the code's word is accepted.
	for _, dsn := range []string{"db=2 sqlflight.shared_encrypt=true sqlflight.insecure_trust_shared_tier=false", "db=3 sqlflight.max_bytes=1MiB"} {
		c, err := d.Open(dsn)
		if err != nil {
			t.Fatalf("%s: %v", dsn, err)
		}
		_ = c.Close()
	}
}

// syncBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

const trustedWarning = "trusted without a secret"

// TestTrustedTierIsVisible: a tier trusted without a secret shows in Stats
// and is logged once each time a scope attaches to it.
func TestTrustedTierIsVisible(t *testing.T) {
	var buf syncBuffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	s := New(Options{InsecureTrustSharedTier: true, Logger: log}, Shared(newMemTier(newFakeClock())))
	t.Cleanup(func() { _ = s.Close() })
	if !s.Stats().SharedTrusted {
		t.Fatal("Stats.SharedTrusted is false for a trusted tier")
	}
	d := s.Wrap(&fakeDriver{})
	for _, dsn := range []string{"db=1", "db=1", "db=2"} { // two scopes
		c, err := d.Open(dsn)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.Close()
	}
	if n := strings.Count(buf.String(), trustedWarning); n != 2 {
		t.Fatalf("%d warnings for two scopes:\n%s", n, buf.String())
	}

	// Through a DSN that may set it (the code gave no secret).
	var buf2 syncBuffer
	d2 := New(Options{Logger: slog.New(slog.NewTextHandler(&buf2, nil))}).Wrap(&fakeDriver{})
	dsn := "db=3 sqlflight.shared=memtest://trusted sqlflight.insecure_trust_shared_tier=true"
	e, err := d2.(*wrappedDriver).scopeFor(dsn, d2)
	if err != nil {
		t.Fatal(err)
	}
	e.release()
	t.Cleanup(func() { _ = e.s.shield.Close() })
	if !e.s.shield.Stats().SharedTrusted || strings.Count(buf2.String(), trustedWarning) != 1 {
		t.Fatalf("DSN's trusted tier: Stats.SharedTrusted %v, log:\n%s", e.s.shield.Stats().SharedTrusted, buf2.String())
	}

	// With a secret: not trusted, nothing logged.
	var buf3 syncBuffer
	s3 := New(Options{SharedSecret: testSecret, Logger: slog.New(slog.NewTextHandler(&buf3, nil))}, Shared(newMemTier(newFakeClock())))
	t.Cleanup(func() { _ = s3.Close() })
	c, err := s3.Wrap(&fakeDriver{}).Open("db=4")
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	if s3.Stats().SharedTrusted || strings.Contains(buf3.String(), trustedWarning) {
		t.Fatalf("a tier with a secret shows as trusted:\n%s", buf3.String())
	}
}

// TestFeedDSNParameter: sqlflight.feed_dsn sets Options.FeedDSN; one that
// does not parse is refused without showing it; a DSN may not replace the
// code's FeedDSN.
func TestFeedDSNParameter(t *testing.T) {
	const feed = "postgres://feeder:s3cr3t-pw@db.internal:5432/app"
	var o Options
	if err := applyDSN(&o, map[string]string{"feed_dsn": feed}); err != nil || o.FeedDSN != feed {
		t.Fatalf("feed_dsn: %v, FeedDSN %q", err, o.FeedDSN)
	}
	const bad = "postgres://feeder:s3cr3t-pw@db.internal:notaport/app"
	err := applyDSN(&o, map[string]string{"feed_dsn": bad})
	if !errors.Is(err, ErrBadDSN) || strings.Contains(err.Error(), "s3cr3t") {
		t.Fatalf("a malformed feed_dsn: %v", err)
	}
	_, _, err = dsnparam.Split("postgres://h/db?sqlflight.feed_dsn=" + url.QueryEscape(feed) + "&sqlflight.feed_dsn=x")
	if !errors.Is(err, ErrBadDSN) || strings.Contains(err.Error(), "s3cr3t") {
		t.Fatalf("a repeated feed_dsn: %v", err)
	}
	code := Options{FeedDSN: feed}
	err = dsnparam.MayNotWeaken(dsnparam.Code{SharedSecret: code.SharedSecret != "", SharedEncrypt: code.SharedEncrypt, FeedDSN: code.FeedDSN != ""}, map[string]string{"feed_dsn": "postgres://other@h/app"})
	if !errors.Is(err, ErrBadDSN) || !strings.Contains(err.Error(), "feed_dsn") {
		t.Fatalf("a DSN replacing the code's FeedDSN: %v", err)
	}
	if !dsnparam.Secret("feed_dsn") {
		t.Fatal("feed_dsn's value may be shown")
	}
}
