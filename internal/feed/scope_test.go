package feed_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sqlflight/sqlflight/internal/feed"
)

// cache is a feed.Cache that records what it is asked: the fleet's lease
// is never held, and the servers are the test's.
type cache struct {
	mu      sync.Mutex
	applied [][]feed.Change
	leased  []string

	want, got feed.Server
	known     bool
}

func (c *cache) Lease(ctx context.Context, key string, ttl time.Duration) (feed.Lease, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.leased = append(c.leased, key)
	return feed.Lease{}, false, nil
}

func (c *cache) Renew(ctx context.Context, key string, l feed.Lease, ttl time.Duration) (bool, error) {
	return false, nil
}

func (c *cache) Release(ctx context.Context, key string, l feed.Lease) error { return nil }

func (c *cache) Apply(cs []feed.Change) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.applied = append(c.applied, cs)
}

func (c *cache) Server() (feed.Server, bool) { return c.want, c.known }

func (c *cache) Identify(ctx context.Context, pc *pgconn.PgConn) (feed.Server, bool, error) {
	return c.got, true, nil
}

// TestParseMode: the two modes in any case, "" for none, and an error
// naming both for anything else.
func TestParseMode(t *testing.T) {
	for in, want := range map[string]string{"Replication": feed.ModeReplication, "NOTIFY": feed.ModeNotify, "": ""} {
		if got, err := feed.ParseMode(in); err != nil || got != want {
			t.Errorf("ParseMode(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if got, err := feed.ParseMode("wal"); err == nil || got != "" || err.Error() != `want "replication" or "notify"` {
		t.Errorf("ParseMode(wal) = %q, %v", got, err)
	}
}

// TestScopeHostRefuses: a scope that cannot have a feed says why, with an
// error wrapping ErrUnavailable that never shows the DSN; the publication
// matters only to a replication feed, and "" is the default one.
func TestScopeHostRefuses(t *testing.T) {
	const dsn = "postgres://127.0.0.1/test"
	for _, c := range []struct {
		sc     feed.Scope
		reason string
	}{
		{feed.Scope{Mode: "wal", DSN: dsn}, `unknown Options.Feed "wal"`},
		{feed.Scope{Mode: feed.ModeReplication, DSN: dsn, Publication: "a'b"}, "Options.FeedPublication must be"},
		{feed.Scope{Mode: feed.ModeNotify, DSN: "postgres://secret@[::1"}, "Options.FeedDSN does not parse"},
		{feed.Scope{Mode: feed.ModeNotify}, "needs a pgx connection"},
	} {
		h, err := c.sc.Host(&cache{})
		r, _ := feed.Reason(err)
		if h != nil || !errors.Is(err, feed.ErrUnavailable) || !strings.Contains(r, c.reason) || strings.Contains(err.Error(), "secret") {
			t.Errorf("%+v: %v, %v; want a reason %q", c.sc, h, err, c.reason)
		}
	}
	for _, sc := range []feed.Scope{
		{Mode: feed.ModeReplication, DSN: dsn},
		{Mode: feed.ModeNotify, DSN: dsn, Publication: "a'b"},
	} {
		if _, err := sc.Host(&cache{}); err != nil {
			t.Errorf("%+v: %v", sc, err)
		}
	}
}

// TestScopeConfig: a scope's Config carries its mode, and in a fleet a
// lease key derived from the fleet's name (the same in every instance and
// every version) with the default TTL unless one is set.
func TestScopeConfig(t *testing.T) {
	var g feed.Group
	cfg := feed.Scope{Mode: feed.ModeNotify, Group: &g}.Config()
	if cfg.Mode != feed.ModeNotify || cfg.Fleet != "" || cfg.LeaseTTL != 0 || cfg.Group != &g {
		t.Errorf("without a fleet: %+v", cfg)
	}
	sum := sha256.Sum256([]byte("sqlflight feed\x00app"))
	cfg = feed.Scope{Mode: feed.ModeNotify, Fleet: "app"}.Config()
	if cfg.Fleet != "feed-"+hex.EncodeToString(sum[:]) || cfg.LeaseTTL != feed.DefaultLeaseTTL {
		t.Errorf("in a fleet: %+v", cfg)
	}
	if cfg := (feed.Scope{Mode: feed.ModeNotify, Fleet: "app", LeaseTTL: time.Second}).Config(); cfg.LeaseTTL != time.Second {
		t.Errorf("LeaseTTL %v", cfg.LeaseTTL)
	}
}

// TestScopeHost: the Host of a scope resyncs by applying a change of any
// table, counts the scope's connections with Live, and logs through the
// scope's Logger with the error described by ErrAttr, never by its text.
func TestScopeHost(t *testing.T) {
	var logs bytes.Buffer
	c := &cache{}
	h, err := feed.Scope{Mode: feed.ModeNotify, DSN: "postgres://127.0.0.1/test", Live: func() int64 { return 3 },
		Logger:  slog.New(slog.NewTextHandler(&logs, nil)),
		ErrAttr: func(err error) slog.Attr { return slog.String("error", "described") }}.Host(c)
	if err != nil {
		t.Fatal(err)
	}
	h.Bump()
	if len(c.applied) != 1 || len(c.applied[0]) != 1 || c.applied[0][0].Table != "" {
		t.Errorf("Bump applied %+v, want one change of any table", c.applied)
	}
	h.Apply([]feed.Change{{Table: "public.items", Whole: true}})
	if len(c.applied) != 2 || c.applied[1][0].Table != "public.items" {
		t.Errorf("Apply applied %+v", c.applied)
	}
	if h.Live() != 3 {
		t.Errorf("Live %d", h.Live())
	}
	h.Log(slog.LevelWarn, "change feed down", "mode", "notify", "error", errors.New("row alice broke"))
	if out := logs.String(); !strings.Contains(out, "mode=notify") || !strings.Contains(out, "error=described") || strings.Contains(out, "alice") {
		t.Errorf("log: %s", out)
	}
}

// TestScopeStartStandby: in a fleet whose lease another instance holds,
// Start returns a standby feed, in its Group, having asked for the lease
// under the scope's key.
func TestScopeStartStandby(t *testing.T) {
	var g feed.Group
	c := &cache{}
	sc := feed.Scope{Mode: feed.ModeNotify, DSN: "postgres://127.0.0.1/test", Fleet: "app", Live: func() int64 { return 1 },
		Logger: slog.New(slog.DiscardHandler), ErrAttr: func(error) slog.Attr { return slog.Attr{} }, Group: &g}
	f, err := sc.Start(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Stop()
	if f.State() != feed.Standby || g.Snapshot().State != feed.Standby {
		t.Errorf("state %q, group's %q", f.State(), g.Snapshot().State)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.leased) == 0 || c.leased[0] != sc.Config().Fleet {
		t.Errorf("leased %q, want %q", c.leased, sc.Config().Fleet)
	}
}

// TestScopeSameServer: a feed with a DSN of its own streams only from the
// scope's database: its stream fails when the connection's server says
// another database, or when the scope's server is not known.
func TestScopeSameServer(t *testing.T) {
	dsn := feed.PostgresDSN(t)
	for _, c := range []struct {
		c      *cache
		reason string
	}{
		{&cache{want: feed.Server{Database: "1"}, got: feed.Server{Database: "2"}, known: true}, "Options.FeedDSN reaches another database"},
		{&cache{want: feed.Server{Database: "1", System: "a"}, got: feed.Server{Database: "1", System: "b"}, known: true}, "Options.FeedDSN reaches another database"},
		{&cache{got: feed.Server{Database: "1"}}, "cannot tell whether Options.FeedDSN reaches"},
	} {
		h, err := feed.Scope{Mode: feed.ModeNotify, DSN: dsn}.Host(c.c)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = h.Stream(ctx, nopSink{})
		cancel()
		if r, _ := feed.Reason(err); !strings.HasPrefix(r, c.reason) {
			t.Errorf("%+v: %v, want %q", c.c, err, c.reason)
		}
	}
}

// nopSink is a Sink that ignores everything.
type nopSink struct{}

func (nopSink) Ready()                         {}
func (nopSink) Apply([]feed.Change, time.Time) {}
func (nopSink) Reapply([]feed.Change)          {}
func (nopSink) CaughtUp()                      {}
func (nopSink) Resync()                        {}
func (nopSink) Warn(string, error)             {}
