package sqlflight

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight/internal/feed"
	pgverdict "github.com/sqlflight/sqlflight/internal/verdict"
)

// Renew makes memTier a Leaser: compare-and-extend.
func (m *memTier) Renew(ctx context.Context, ns, key string, l Lease, ttl time.Duration) (bool, error) {
	if err := m.check(ctx); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.leases[ns+key]
	if !ok || e.token != l.Token || !l.Held || !m.clock.Now().Before(e.until) {
		return false, nil
	}
	e.until = m.clock.Now().Add(ttl)
	m.leases[ns+key] = e
	return true, nil
}

// TestFeedDSNParams: sqlflight.feed, feed_publication and feed_lease_ttl
// set their Options; bad values are ErrBadDSN.
func TestFeedDSNParams(t *testing.T) {
	var o Options
	if err := applyDSN(&o, map[string]string{"feed": "replication", "feed_publication": "app_pub", "feed_lease_ttl": "2s"}); err != nil {
		t.Fatal(err)
	}
	if o.Feed != FeedReplication || o.FeedPublication != "app_pub" || o.FeedLeaseTTL != 2*time.Second {
		t.Fatalf("options %+v", o)
	}
	if err := applyDSN(&o, map[string]string{"feed": "notify"}); err != nil || o.Feed != FeedNotify {
		t.Fatalf("notify: %v %q", err, o.Feed)
	}
	for k, v := range map[string]string{"feed": "wal", "feed_publication": "a'b", "feed_lease_ttl": "soon"} {
		if err := applyDSN(&o, map[string]string{k: v}); !errors.Is(err, ErrBadDSN) {
			t.Errorf("%s=%s: %v, want ErrBadDSN", k, v, err)
		}
	}
}

// TestFeedStateStartingWithoutScope: a Shield with a feed reports it
// starting until a scope connects; one without reports no state.
func TestFeedStateStartingWithoutScope(t *testing.T) {
	s := New(Options{Feed: FeedReplication})
	defer s.Close()
	if st := s.Stats(); st.FeedState != "starting" {
		t.Fatalf("FeedState %q before any Connect, want starting", st.FeedState)
	}
	if st := New().Stats(); st.FeedState != "" {
		t.Fatalf("FeedState %q without a feed", st.FeedState)
	}
}

// TestFeedNeedsPostgres: a Shield with a feed refuses the first Connect of
// a scope that is not PostgreSQL through pgx, with ErrFeedUnavailable.
func TestFeedNeedsPostgres(t *testing.T) {
	s := New(Options{Feed: FeedReplication})
	defer s.Close()
	d := &fakeDriver{}
	db := sql.OpenDB(dsnConnector{drv: s.Wrap(d), dsn: "fake"})
	defer db.Close()
	err := db.Ping()
	if !errors.Is(err, ErrFeedUnavailable) || !strings.Contains(err.Error(), "pgx") {
		t.Fatalf("Ping: %v, want ErrFeedUnavailable naming pgx", err)
	}
}

// TestFeedUnavailableIsTheFeedsError: ErrFeedUnavailable is the feed
// package's error, the same value under the same text, so errors.Is holds
// whichever of the two an error wraps.
func TestFeedUnavailableIsTheFeedsError(t *testing.T) {
	if ErrFeedUnavailable != feed.ErrUnavailable || ErrFeedUnavailable.Error() != "sqlflight: change feed unavailable" {
		t.Fatalf("ErrFeedUnavailable %q is not the feed's error", ErrFeedUnavailable)
	}
	err := feed.Unavailable(nil, "no triggers")
	if !errors.Is(err, ErrFeedUnavailable) || err.Error() != "sqlflight: change feed unavailable: no triggers" {
		t.Fatalf("feed.Unavailable: %v", err)
	}
}

// streamHost is the Host of a scope's feed over its feedHost whose stream
// is the test's: each stream hands its sink to the test and runs until its
// context ends, or ends at once with fail's error when set.
type streamHost struct {
	feed.Host
	sinks chan feed.Sink
	fail  error
}

// scopeHost returns the Host of the feed of a scope of s in mode, over the
// scope's feedHost, as startFeed makes it (with a DSN of its own: no
// connection is ever opened).
func scopeHost(t *testing.T, s *Shield, mode FeedMode) feed.Host {
	t.Helper()
	sc := &scope{}
	h, err := feed.Scope{Mode: string(mode), DSN: "postgres://127.0.0.1/test", Live: sc.live.Load,
		Logger: s.log, ErrAttr: errText.Attr, Classify: errText.Class, Group: &s.feedStats}.Host(&feedHost{s: s.engine, sc: sc})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// Stream hands sink over, establishes the stream and waits for its end.
func (h streamHost) Stream(ctx context.Context, sink feed.Sink) error {
	if h.fail != nil {
		return h.fail
	}
	sink.Ready()
	h.sinks <- sink
	<-ctx.Done()
	return ctx.Err()
}

// TestFeedSinkAppliesAndCounts: what a source reports reaches the Shield
// through its feedHost: Apply invalidates and counts a transaction and its
// changes, Reapply invalidates without counting, Resync drops everything
// and counts a resync, a late transaction makes the feed lagging and
// CaughtUp current again, all in Stats; and the changes keep their table,
// rows and wholeness: a change of one row of a table whose column classes
// are known ends the reads of that row alone, a whole change every read
// of the table.
func TestFeedSinkAppliesAndCounts(t *testing.T) {
	s := New()
	defer s.Close()
	h := streamHost{Host: scopeHost(t, s, FeedReplication), sinks: make(chan feed.Sink, 1)}
	f := feed.New(h, feed.Config{Mode: string(FeedReplication), Classify: errText.Class, Group: &s.feedStats})
	if err := f.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.feedStats.Add(f)
	k := <-h.sinks
	changed := func(do func(), table string) bool {
		seq := s.epochs.Now()
		do()
		return !s.epochs.UnchangedFor(seq, []string{table}, true, nil)
	}
	v := "5"
	if !changed(func() {
		k.Apply([]feed.Change{{Table: "public.items", New: map[string]*string{"id": &v}}, {Table: "public.other", Whole: true}}, time.Time{})
	}, "items") {
		t.Error("Apply did not invalidate the table")
	}
	if st := s.Stats(); st.FeedTransactions != 1 || st.FeedChanges != 2 || st.FeedState != feed.Current {
		t.Errorf("after Apply: %d transactions, %d changes, state %q", st.FeedTransactions, st.FeedChanges, st.FeedState)
	}
	if !changed(func() { k.Reapply([]feed.Change{{Table: "public.items", Whole: true}}) }, "items") {
		t.Error("Reapply did not invalidate the table")
	}
	if changed(func() { k.Reapply([]feed.Change{{Table: "public.other", Whole: true}}) }, "items") {
		t.Error("a change of another table invalidated items")
	}
	if !changed(k.Resync, "items") {
		t.Error("Resync did not invalidate")
	}
	if st := s.Stats(); st.FeedTransactions != 1 || st.FeedChanges != 2 || st.FeedResyncs != 1 {
		t.Errorf("after Reapply and Resync: %d transactions, %d changes, %d resyncs", st.FeedTransactions, st.FeedChanges, st.FeedResyncs)
	}
	k.Apply([]feed.Change{{Table: "public.other", Whole: true}}, time.Now().Add(-time.Hour))
	if st := s.Stats(); st.FeedState != feed.Lagging || st.FeedLag < time.Hour || st.FeedDelay.Count != 1 {
		t.Errorf("after a late transaction: state %q, lag %v, %d delays", st.FeedState, st.FeedLag, st.FeedDelay.Count)
	}
	k.CaughtUp()
	if st := s.Stats(); st.FeedState != feed.Current || st.FeedLag != 0 {
		t.Errorf("after CaughtUp: state %q, lag %v", st.FeedState, st.FeedLag)
	}
	s.rowCols.Set("items", map[string]pgverdict.ColClass{"id": pgverdict.ClassInt}, s.schemaGen.Load())
	id5, id6 := tagged("items", []string{"id"}, []string{"5"}), tagged("items", []string{"id"}, []string{"6"})
	seq := s.epochs.Now()
	k.Apply([]feed.Change{{Table: "s.items", Old: map[string]*string{"id": nil}, New: map[string]*string{"id": &v}}}, time.Time{})
	if s.epochs.UnchangedFor(seq, []string{"items"}, true, id5) || !s.epochs.UnchangedFor(seq, []string{"items"}, true, id6) {
		t.Error("a change of the row id = 5 did not end the read of id = 5 alone")
	}
	seq = s.epochs.Now()
	k.Apply([]feed.Change{{Table: "s.items", Whole: true}}, time.Time{})
	if s.epochs.UnchangedFor(seq, []string{"items"}, true, id6) {
		t.Error("a whole change of the table left the read of id = 6")
	}
}

// TestFeedHostLogsNoErrorText: the log line of a feed that goes down
// describes its error by its class alone (the host's errText.Attr), never by
// its text, which may quote data; the error's class is Stats'
// FeedLastError.
func TestFeedHostLogsNoErrorText(t *testing.T) {
	var logs syncBuffer
	s := New(Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	defer s.Close()
	secret := errors.New("row alice@example.com broke the stream")
	h := streamHost{Host: scopeHost(t, s, FeedNotify), fail: secret}
	f := feed.New(h, feed.Config{Mode: string(FeedNotify), Classify: errText.Class, Group: &s.feedStats})
	s.feedStats.Add(f)
	if err := f.Start(context.Background()); err != secret {
		t.Fatalf("Start: %v, want the stream's error", err)
	}
	out := logs.String()
	if !strings.Contains(out, "change feed down") || !strings.Contains(out, "mode=notify") ||
		!strings.Contains(out, "error.type=") || strings.Contains(out, "alice") {
		t.Fatalf("log:\n%s", out)
	}
	if st := s.Stats(); st.FeedState != feed.Down || st.FeedErrors != 1 || st.FeedLastError != errText.Class(secret) {
		t.Fatalf("Stats: state %q, %d errors, last %q", st.FeedState, st.FeedErrors, st.FeedLastError)
	}
}

// TestFeedConstantsAreTheFeeds: the exported modes and defaults of the
// feed are the ones the feed package reads and applies.
func TestFeedConstantsAreTheFeeds(t *testing.T) {
	if string(FeedReplication) != feed.ModeReplication || string(FeedNotify) != feed.ModeNotify || FeedNone != "" {
		t.Errorf("modes %q, %q, %q", FeedReplication, FeedNotify, FeedNone)
	}
	if DefaultFeedPublication != feed.DefaultPublication || DefaultFeedLeaseTTL != feed.DefaultLeaseTTL {
		t.Errorf("defaults %q, %v", DefaultFeedPublication, DefaultFeedLeaseTTL)
	}
	if NotifyChannel != feed.NotifyChannel || TriggerSchema != feed.TriggerSchema {
		t.Errorf("channel %q, schema %q", NotifyChannel, TriggerSchema)
	}
}
