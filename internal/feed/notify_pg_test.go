package feed

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// notifyFixture is a table with the change triggers installed, in a schema
// of its own, and a running Listen whose changes arrive on got.
type notifyFixture struct {
	admin  *pgx.Conn
	schema string
	table  string // as the server names it: schema.table
	qtable string // quoted for SQL
	got    chan []Change
	done   chan error
	cancel context.CancelFunc
	pid    uint32 // the listener's backend
	// resyncs counts the listener's resyncs.
	resyncs atomic.Int64
}

// newNotifyFixture creates the schema and the table (with odd identifiers),
// installs the triggers and starts listening. Everything is dropped when
// the test ends.
func newNotifyFixture(t *testing.T) *notifyFixture {
	t.Helper()
	dsn := postgresDSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	var b [5]byte
	_, _ = rand.Read(b[:])
	f := &notifyFixture{schema: `notify "feed" ` + hex.EncodeToString(b[:]), got: make(chan []Change, 100), done: make(chan error, 1)}
	f.table = f.schema + `.Odd "T".x`
	f.qtable = pgx.Identifier{f.schema, `Odd "T".x`}.Sanitize()
	admin, err := pgx.Connect(ctx, dsn)
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
		"CREATE TABLE "+f.qtable+` (id int PRIMARY KEY, "v x" text, n int, blob bytea)`,
		InstallTriggersSQL(f.schema, `Odd "T".x`))

	listener, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	f.pid = listener.PgConn().PID()
	lctx, lcancel := context.WithCancel(ctx)
	f.cancel = lcancel
	ready := make(chan struct{})
	go func() {
		f.done <- Listen(lctx, listener, &listenerSink{t: t, f: f, ready: ready})
	}()
	t.Cleanup(func() {
		lcancel()
		<-f.done
		_ = listener.Close(context.Background())
	})
	select {
	case <-ready:
	case err := <-f.done:
		f.done <- err
		t.Fatalf("Listen ended before it was ready: %v", err)
	}
	return f
}

// listenerSink is the fixture's Sink: a listener's changes go to got, its
// resyncs are counted; a listener never reapplies nor catches up.
type listenerSink struct {
	t     *testing.T
	f     *notifyFixture
	ready chan struct{}
}

func (k *listenerSink) Ready()                         { close(k.ready) }
func (k *listenerSink) Apply(cs []Change, _ time.Time) { k.f.got <- cs }
func (k *listenerSink) Reapply([]Change)               { k.t.Error("a listener reapplied changes") }
func (k *listenerSink) CaughtUp()                      { k.t.Error("a listener reported catching up") }
func (k *listenerSink) Resync()                        { k.f.resyncs.Add(1) }
func (k *listenerSink) Warn(msg string, err error)     { k.t.Logf("%s: %v", msg, err) }

func (f *notifyFixture) exec(t *testing.T, stmts ...string) {
	t.Helper()
	for _, s := range stmts {
		if _, err := f.admin.Exec(context.Background(), s); err != nil {
			t.Fatalf("exec %.200q: %v", s, err)
		}
	}
}

// next returns the changes of the next notification.
func (f *notifyFixture) next(t *testing.T) []Change {
	t.Helper()
	select {
	case cs := <-f.got:
		return cs
	case err := <-f.done:
		f.done <- err
		t.Fatalf("Listen ended: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("no notification within 30s")
	}
	return nil
}

func (f *notifyFixture) expect(t *testing.T, want string) {
	t.Helper()
	if got := changeString(f.next(t)); got != want {
		t.Errorf("changes\n got %s\nwant %s", got, want)
	}
}

// TestListenReportsOutsideWrites: writes made by a plain pgx client
// arrive as the rows they changed, NULLs and odd identifiers and values
// included; a rolled-back transaction sends nothing; a multi-row UPDATE
// reports every old and new row; an oversized change degrades to the key
// columns, then to the whole table; a TRUNCATE is whole.
func TestListenReportsOutsideWrites(t *testing.T) {
	f := newNotifyFixture(t)
	tbl := fmt.Sprintf("%q", f.table)
	row := func(side string, kv ...string) string {
		var parts []string
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == "<null>" {
				parts = append(parts, fmt.Sprintf("%q=<null>", kv[i]))
			} else {
				parts = append(parts, fmt.Sprintf("%q=%q", kv[i], kv[i+1]))
			}
		}
		m := "{" + strings.Join(parts, " ") + "}"
		if side == "old" {
			return "[" + tbl + " whole=false old=" + m + " new=-]"
		}
		return "[" + tbl + " whole=false old=- new=" + m + "]"
	}
	odd := "it's \"quoted\"\nline 2 \\ 日本 🎉"

	f.exec(t, "INSERT INTO "+f.qtable+` VALUES (1, 'plain', NULL, '\x00ff'), (2, `+sqlLiteral(odd)+`, 7, NULL)`)
	f.expect(t, row("new", "id", "1", "n", "<null>", "v x", "plain")+row("new", "id", "2", "n", "7", "v x", odd))

	// A rolled-back transaction sends nothing: the next notification is
	// the marker's.
	f.exec(t, "BEGIN", "INSERT INTO "+f.qtable+" VALUES (3, 'rolled back')", "UPDATE "+f.qtable+" SET n = 0", "ROLLBACK")
	f.exec(t, "DELETE FROM "+f.qtable+" WHERE id = 1")
	f.expect(t, row("old", "id", "1", "n", "<null>", "v x", "plain"))

	f.exec(t, "INSERT INTO "+f.qtable+" VALUES (3, NULL, 3)")
	f.expect(t, row("new", "id", "3", "n", "3", "v x", "<null>"))
	f.exec(t, "UPDATE "+f.qtable+` SET "v x" = 'same', n = NULL`)
	got := f.next(t)
	if len(got) != 4 {
		t.Fatalf("multi-row UPDATE: %d changes, want 4: %s", len(got), changeString(got))
	}
	s := changeString(got)
	for _, want := range []string{
		row("old", "id", "2", "n", "7", "v x", odd), row("old", "id", "3", "n", "3", "v x", "<null>"),
		row("new", "id", "2", "n", "<null>", "v x", "same"), row("new", "id", "3", "n", "<null>", "v x", "same"),
	} {
		if !strings.Contains(s, want) {
			t.Errorf("multi-row UPDATE: %s lacks %s", s, want)
		}
	}

	// A transaction's statements arrive at its commit, in order.
	f.exec(t, "BEGIN", "DELETE FROM "+f.qtable+" WHERE id = 2", "UPDATE "+f.qtable+" SET n = 9 WHERE id = 3", "COMMIT")
	f.expect(t, row("old", "id", "2", "n", "<null>", "v x", "same"))
	f.expect(t, row("old", "id", "3", "n", "<null>", "v x", "same")+row("new", "id", "3", "n", "9", "v x", "same"))

	// A value over 256 bytes is unknown; rows too many for all columns
	// report their keys; more than 1000 rows report the whole table.
	f.exec(t, "UPDATE "+f.qtable+" SET \"v x\" = repeat('y', 300) WHERE id = 3")
	f.expect(t, row("old", "id", "3", "n", "9", "v x", "same")+row("new", "id", "3", "n", "9"))
	f.exec(t, "INSERT INTO "+f.qtable+" SELECT g, repeat('z', 200) FROM generate_series(10, 59) g")
	got = f.next(t)
	if len(got) != 50 || len(got[0].New) != 1 || got[0].New["id"] == nil || *got[0].New["id"] != "10" {
		t.Errorf("50 rows of 200 bytes: want their keys alone, got %.300s", changeString(got))
	}
	f.exec(t, "INSERT INTO "+f.qtable+" SELECT g FROM generate_series(100, 1100) g")
	f.expect(t, "["+tbl+" whole=true old=- new=-]")

	// A statement that changed nothing sends nothing; TRUNCATE is whole.
	f.exec(t, "UPDATE "+f.qtable+" SET n = 1 WHERE false", "TRUNCATE "+f.qtable)
	f.expect(t, "["+tbl+" whole=true old=- new=-]")

	// Anyone's notification on the channel is a wake-up and nothing more:
	// it makes the listener read the queue, which holds only what the
	// triggers wrote.
	f.exec(t, "NOTIFY "+NotifyChannel+", 'hello'", "NOTIFY "+NotifyChannel+`, '{"v":1,"op":"T","all":true}'`)
	f.exec(t, "INSERT INTO "+f.qtable+" VALUES (4, 'after')")
	f.expect(t, row("new", "id", "4", "n", "<null>", "v x", "after"))
	if n := f.resyncs.Load(); n != 0 {
		t.Errorf("%d resyncs", n)
	}

	select {
	case cs := <-f.got:
		t.Errorf("unexpected notification: %s", changeString(cs))
	default:
	}
	f.cancel()
	if err := <-f.done; !errors.Is(err, context.Canceled) {
		t.Errorf("Listen returned %v after its context ended, want context.Canceled", err)
	}
	f.done <- nil
}

// TestListenEndsWhenTheConnectionFails: a listener whose backend is
// terminated returns an error that is not its context's.
func TestListenEndsWhenTheConnectionFails(t *testing.T) {
	f := newNotifyFixture(t)
	f.exec(t, fmt.Sprintf("SELECT pg_terminate_backend(%d)", f.pid))
	select {
	case err := <-f.done:
		if err == nil || errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "waiting for change notifications") {
			t.Errorf("Listen returned %v after its connection died", err)
		}
		f.done <- err
	case <-time.After(30 * time.Second):
		t.Fatal("Listen still running 30s after its backend was terminated")
	}
}

// TestListenPartitions: a write to a partition reports its parent
// too, and a write through the parent reports the partitions.
func TestListenPartitions(t *testing.T) {
	f := newNotifyFixture(t)
	q := func(name string) string { return pgx.Identifier{f.schema, name}.Sanitize() }
	f.exec(t, "CREATE TABLE "+q("p")+" (id int PRIMARY KEY, v text) PARTITION BY RANGE (id)",
		"CREATE TABLE "+q("p1")+" PARTITION OF "+q("p")+" FOR VALUES FROM (0) TO (10)",
		InstallTriggersSQL(f.schema, "p"))
	f.exec(t, "INSERT INTO "+q("p")+" VALUES (1, 'a')")
	p, p1 := fmt.Sprintf("%q", f.schema+".p"), fmt.Sprintf("%q", f.schema+".p1")
	f.expect(t, "["+p+` whole=false old=- new={"id"="1" "v"="a"}]`+"["+p1+` whole=false old=- new={"id"="1" "v"="a"}]`)
	f.exec(t, "DELETE FROM "+q("p1"))
	f.expect(t, "["+p1+` whole=false old={"id"="1" "v"="a"} new=-]`+"["+p+` whole=false old={"id"="1" "v"="a"} new=-]`)
}
