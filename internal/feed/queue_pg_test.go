package feed

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// setVar sets *p to v for the test.
func setVar[T any](t *testing.T, p *T, v T) {
	old := *p
	*p = v
	t.Cleanup(func() { *p = old })
}

// TestListenInterleavedCommits: a transaction that wrote first and
// commits last is read after one that wrote later and committed first:
// the listener reads what its last snapshot did not see committed, not
// what follows the last id it read.
func TestListenInterleavedCommits(t *testing.T) {
	f := newNotifyFixture(t)
	ctx := context.Background()
	slow, err := pgx.Connect(ctx, postgresDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close(ctx)
	for _, s := range []string{"BEGIN", "INSERT INTO " + f.qtable + " VALUES (20, 'slow')"} {
		if _, err := slow.Exec(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	f.exec(t, "INSERT INTO "+f.qtable+" VALUES (21, 'fast')")
	if got := changeString(f.next(t)); !strings.Contains(got, `"id"="21"`) {
		t.Fatalf("first read %s, want the committed row 21", got)
	}
	if _, err := slow.Exec(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	if got := changeString(f.next(t)); !strings.Contains(got, `"id"="20"`) {
		t.Fatalf("after the slow transaction's commit %s, want row 20", got)
	}
	if n := f.resyncs.Load(); n != 0 {
		t.Errorf("%d resyncs", n)
	}
}

// TestListenTriggersGone: a trigger dropped or disabled ends the
// listener with an ErrUnavailable that says so.
func TestListenTriggersGone(t *testing.T) {
	setVar(t, &feedCheckInterval, 0)
	setVar(t, &queuePoll, 20*time.Millisecond)
	for _, how := range []string{"DROP TRIGGER sqlflight_update ON %s", "ALTER TABLE %s DISABLE TRIGGER sqlflight_delete"} {
		f := newNotifyFixture(t)
		f.exec(t, strings.ReplaceAll(how, "%s", f.qtable))
		select {
		case err := <-f.done:
			f.done <- err
			if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "dropped or disabled") {
				t.Errorf("%s: listener ended with %v", how, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: the listener still runs", how)
		}
	}
}

// TestListenTrimsTheQueue: records every listener has read are
// trimmed.
func TestListenTrimsTheQueue(t *testing.T) {
	setVar(t, &queueKeep, 0)
	setVar(t, &queuePoll, 20*time.Millisecond)
	f := newNotifyFixture(t)
	f.exec(t, "INSERT INTO "+f.qtable+" VALUES (1, 'a'), (2, 'b')")
	f.next(t)
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		if err := f.admin.QueryRow(context.Background(), `SELECT count(*) FROM sqlflight.changes WHERE strpos(payload, $1) > 0`,
			`"s":`+strconv.Quote(f.schema)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d read records still queued", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestListenResyncs: a backlog larger than a read takes, or reads
// further apart than maxReadGap, resync instead of applying.
func TestListenResyncs(t *testing.T) {
	setVar(t, &maxQueueRead, 3)
	f := newNotifyFixture(t)
	f.exec(t, "DO $$ BEGIN FOR i IN 1..5 LOOP INSERT INTO "+f.qtable+" VALUES (i); END LOOP; END $$")
	waitFor(t, "a resync", func() bool { return f.resyncs.Load() == 1 })
	select {
	case cs := <-f.got:
		t.Fatalf("a backlog resyncs, yet %s was applied", changeString(cs))
	default:
	}
	setVar(t, &maxQueueRead, 10000)
	setVar(t, &maxReadGap, 0)
	f.exec(t, "INSERT INTO "+f.qtable+" VALUES (6)")
	waitFor(t, "a second resync", func() bool { return f.resyncs.Load() == 2 })
}

// TestTriggersTrimWithoutAFeed: with no feed running, writers trim records
// older than an hour now and then, never waiting for one another.
func TestTriggersTrimWithoutAFeed(t *testing.T) {
	f := newNotifyFixture(t)
	f.cancel() // no feed trims
	f.exec(t, `INSERT INTO sqlflight.changes (at, payload) SELECT now() - interval '2 hours', 'old ' || g FROM generate_series(1, 5) g`)
	// Each statement runs the trigger once; each run trims with
	// probability 1/1000: 15000 statements miss with probability e^-15.
	f.exec(t, "DO $$ BEGIN FOR i IN 1..15000 LOOP INSERT INTO "+f.qtable+" VALUES (i); END LOOP; END $$")
	var n int
	if err := f.admin.QueryRow(context.Background(), `SELECT count(*) FROM sqlflight.changes WHERE payload LIKE 'old %'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d records older than an hour left after 15000 writes", n)
	}
}
