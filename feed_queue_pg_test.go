package sqlflight

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/sqlflight/sqlflight/internal/feed"
)

// triggerFixture is a schema of its own with a table that has the change
// triggers installed; everything is dropped when the test ends.
type triggerFixture struct {
	admin  *pgx.Conn
	schema string
	qtable string // the table, quoted for SQL
}

// newTriggerFixture creates the schema and the table and installs the
// triggers on it.
func newTriggerFixture(t *testing.T) *triggerFixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var b [5]byte
	_, _ = rand.Read(b[:])
	f := &triggerFixture{schema: "feed_shield_" + hex.EncodeToString(b[:])}
	f.qtable = pgx.Identifier{f.schema, "items"}.Sanitize()
	admin, err := pgx.Connect(ctx, postgresDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	f.admin = admin
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.Exec(ctx, UninstallTriggersSQL(f.schema)); err != nil {
			t.Logf("uninstall: %v", err)
		}
		if _, err := admin.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{f.schema}.Sanitize()+" CASCADE"); err != nil {
			t.Logf("drop schema: %v", err)
		}
		_ = admin.Close(ctx)
	})
	f.exec(t, "CREATE SCHEMA "+pgx.Identifier{f.schema}.Sanitize(),
		"CREATE TABLE "+f.qtable+" (id int PRIMARY KEY, v text)",
		InstallTriggersSQL(f.schema, "items"))
	return f
}

func (f *triggerFixture) exec(t *testing.T, stmts ...string) {
	t.Helper()
	for _, s := range stmts {
		if _, err := f.admin.Exec(context.Background(), s); err != nil {
			t.Fatalf("exec %.200q: %v", s, err)
		}
	}
}

// TestFeedNotifyDownWhenTriggersGone: a Shield's notify feed whose
// triggers are dropped goes down with a log line saying so, then follows
// the triggers that are left (and resyncs).
func TestFeedNotifyDownWhenTriggersGone(t *testing.T) {
	t.Cleanup(feed.SetRhythmForTest(20*time.Millisecond, 0))
	f := newTriggerFixture(t)
	f.exec(t, "CREATE TABLE "+pgx.Identifier{f.schema, "other"}.Sanitize()+" (id int PRIMARY KEY)",
		InstallTriggersSQL(f.schema, "other"))
	var logs syncBuffer
	s := New(Options{Feed: FeedNotify, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	defer s.Close()
	cfg, err := pgx.ParseConfig(postgresDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	db := s.OpenDB(stdlib.GetConnector(*cfg))
	defer db.Close()
	if err := db.Ping(); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.FeedState != feed.Current {
		t.Fatalf("feed %q", st.FeedState)
	}
	f.exec(t, "DROP TRIGGER sqlflight_insert ON "+f.qtable)
	waitFor(t, "the feed down and back", func() bool {
		st := s.Stats()
		return st.FeedErrors >= 1 && st.FeedResyncs >= 1 && st.FeedState == feed.Current
	})
	out := logs.String()
	if !strings.Contains(out, "change feed down") || !strings.Contains(out, "dropped or disabled") {
		t.Fatalf("log:\n%s", out)
	}
}
