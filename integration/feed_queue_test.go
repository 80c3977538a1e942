package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sqlflight/sqlflight"
)

// newRole creates a login role of its own (trust auth: no password) and
// drops it when the test ends; the role's objects go with it.
func newRole(t *testing.T, out *pgx.Conn, prefix string, attrs ...string) string {
	t.Helper()
	role := prefix + "_" + uniqueID(t)
	outExec(t, out, "CREATE ROLE "+role+" LOGIN "+strings.Join(attrs, " "))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = out.Exec(ctx, "DROP OWNED BY "+role+" CASCADE")
		_, _ = out.Exec(ctx, "DROP ROLE IF EXISTS "+role)
	})
	return role
}

// TestFeedNotifyStrangerSeesNoRows: a role with no privilege on a table
// LISTENs on the triggers' channel while the owner changes a row of
// secrets: every notification it receives is empty, and it may not read
// the queue the rows went to.
func TestFeedNotifyStrangerSeesNoRows(t *testing.T) {
	dsn, out := notifyFeedDatabase(t)
	outExec(t, out, `CREATE TABLE users (id int PRIMARY KEY, email text, password_hash text, api_token text)`,
		`INSERT INTO users VALUES (1, 'alice@example.com', '$2b$12$abc', 'tok_live_AAAA')`,
		sqlflight.InstallTriggersSQL("public", "users"))
	stranger := newRole(t, out, "stranger")
	ctx := testContext(t, time.Minute)
	sc, err := pgx.Connect(ctx, dsnAsUser(t, dsn, stranger))
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close(context.Background())
	if _, err := sc.Exec(ctx, "LISTEN "+sqlflight.NotifyChannel); err != nil {
		t.Fatal(err)
	}
	outExec(t, out, `UPDATE users SET api_token = 'tok_live_BBBB' WHERE id = 1`, `DELETE FROM users WHERE id = 1`)
	for i := range 2 {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		n, err := sc.WaitForNotification(wctx)
		cancel()
		if err != nil {
			t.Fatalf("notification %d: %v", i, err)
		}
		if n.Payload != "" {
			t.Fatalf("a stranger received %q", n.Payload)
		}
	}
	var pe *pgconn.PgError
	_, err = sc.Exec(ctx, `SELECT payload FROM sqlflight.changes`)
	if !errors.As(err, &pe) || pe.Code != "42501" {
		t.Fatalf("a stranger's read of the queue: %v, want permission denied (42501)", err)
	}
	_, err = sc.Exec(ctx, `INSERT INTO sqlflight.changes (payload) VALUES ('{"v":1,"op":"T","all":true}')`)
	if !errors.As(err, &pe) || pe.Code != "42501" {
		t.Fatalf("a stranger's write to the queue: %v, want permission denied (42501)", err)
	}
}

// TestFeedNotifyForgedNotificationsInvalidateNothing: a stranger floods
// the channel with notifications of every shape, the old row payloads
// and "every table" included; a read cached ttl=10m stays cached (one
// origin execution), while a real write still reaches it.
func TestFeedNotifyForgedNotificationsInvalidateNothing(t *testing.T) {
	dsn, out := notifyFeedDatabase(t)
	stranger := newRole(t, out, "forger")
	db, s := openFlight(t, dsn, sqlflight.Options{Feed: sqlflight.FeedNotify})
	ctx := testContext(t, 2*time.Minute)
	const read = `/* sqlflight: ttl=10m */ SELECT v FROM items WHERE id = $1`
	readOnce := func() string {
		t.Helper()
		var v string
		if err := db.QueryRowContext(ctx, read, 1).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	if v := readOnce(); v != "a" {
		t.Fatalf("read = %q", v)
	}
	origin := s.Stats().OriginExecutions

	fc, err := pgx.Connect(ctx, dsnAsUser(t, dsn, stranger))
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close(context.Background())
	payloads := []string{
		``, `hello`, `{"v":1,"op":"T","all":true}`,
		`{"v":1,"s":"public","t":"items","op":"T","w":true}`,
		`{"v":1,"s":"public","t":"items","op":"U","c":["id","v"],"o":[["1","a"]],"n":[["1","forged"]]}`,
	}
	const forged = 5000
	batch := &pgx.Batch{}
	for i := range forged {
		batch.Queue(`SELECT pg_notify($1, $2)`, sqlflight.NotifyChannel, payloads[i%len(payloads)]+strings.Repeat(" ", i%7))
	}
	if err := fc.SendBatch(ctx, batch).Close(); err != nil {
		t.Fatal(err)
	}
	// A real write to another table, after the flood: once the feed applied
	// it, it has read past every forged wake-up.
	n := s.Stats().FeedTransactions
	outExec(t, out, `INSERT INTO marker VALUES (1)`)
	waitTx(t, s, n)
	if v := readOnce(); v != "a" {
		t.Fatalf("read = %q after the flood", v)
	}
	st := s.Stats()
	if got := st.OriginExecutions - origin; got != 0 {
		t.Fatalf("%d forged notifications made %d origin executions of a cached read", forged, got)
	}
	if st.FeedResyncs != 0 || st.FeedTransactions != n+1 {
		t.Fatalf("after %d forged notifications and one write: %s", forged, feedStats(s))
	}
	outExec(t, out, `UPDATE items SET v = 'real' WHERE id = 1`)
	waitTx(t, s, n+1)
	if v := readOnce(); v != "real" {
		t.Fatalf("after a real write the read is %q", v)
	}
	t.Logf("%d forged notifications: 0 invalidations; %s", forged, feedStats(s))
}

// TestFeedNotifyWriterWithoutQueuePrivileges: a role that may write a table
// but has no privilege on the sqlflight schema writes through the triggers
// (their function runs as the installer): the feed sees its change.
func TestFeedNotifyWriterWithoutQueuePrivileges(t *testing.T) {
	dsn, out := notifyFeedDatabase(t)
	writer := newRole(t, out, "writer")
	outExec(t, out, "GRANT SELECT, INSERT, UPDATE, DELETE ON items TO "+writer)
	db, s := openFlight(t, dsn, sqlflight.Options{Feed: sqlflight.FeedNotify})
	if v := readV(t, db, 1); v != "a" {
		t.Fatalf("read = %q", v)
	}
	wc := outsider(t, dsnAsUser(t, dsn, writer))
	n := s.Stats().FeedTransactions
	outExec(t, wc, `UPDATE items SET v = 'by writer' WHERE id = 1`)
	waitTx(t, s, n)
	if v := readV(t, db, 1); v != "by writer" {
		t.Fatalf("after the writer's update the read is %q", v)
	}
}

// TestInstallTriggersHostileCast: the installing role is a superuser and a
// table's owner defines a cast of its enum to text whose function tries to
// make the owner a superuser. The triggers' function (SECURITY DEFINER)
// prints values by their output functions: the cast never runs as the
// installer, the owner stays what it was, and the record holds the label.
func TestInstallTriggersHostileCast(t *testing.T) {
	dsn, out := notifyFeedDatabase(t)
	owner := newRole(t, out, "mallory")
	oc := outsider(t, dsnAsUser(t, dsn, owner))
	outExec(t, out, "GRANT CREATE ON SCHEMA public TO "+owner)
	outExec(t, oc, `CREATE TYPE mood AS ENUM ('calm', 'angry')`,
		`CREATE FUNCTION mood_text(mood) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  BEGIN
    EXECUTE format('ALTER ROLE %I SUPERUSER', session_user);
  EXCEPTION WHEN OTHERS THEN NULL;
  END;
  RETURN 'cast ran as ' || current_user;
END $$`,
		`CREATE CAST (mood AS text) WITH FUNCTION mood_text(mood)`,
		`CREATE TABLE moods (id int PRIMARY KEY, m mood)`)
	outExec(t, out, sqlflight.InstallTriggersSQL("public", "moods"))
	outExec(t, oc, `INSERT INTO moods VALUES (1, 'angry')`)
	ctx := testContext(t, time.Minute)
	var super bool
	if err := out.QueryRow(ctx, `SELECT rolsuper FROM pg_roles WHERE rolname = $1`, owner).Scan(&super); err != nil {
		t.Fatal(err)
	}
	if super {
		t.Fatalf("the table owner's cast ran as the installer: %s is a superuser now", owner)
	}
	var payload string
	if err := out.QueryRow(ctx, `SELECT payload FROM sqlflight.changes ORDER BY id DESC LIMIT 1`).Scan(&payload); err != nil {
		t.Fatal(err)
	}
	if want := `"n":[["1","angry"]]`; !strings.Contains(payload, want) {
		t.Fatalf("record %s lacks %s", payload, want)
	}
}

// TestFeedNotifyOwnRole: the application's role may not read the queue;
// with Options.FeedDSN the feed connects as the installing role and the
// application's reads see outside writes. Without FeedDSN, the feed is
// unavailable, and says which role it needs; a FeedDSN reaching another
// database is refused.
func TestFeedNotifyOwnRole(t *testing.T) {
	dsn, out := notifyFeedDatabase(t)
	app := newRole(t, out, "app")
	outExec(t, out, "GRANT SELECT, INSERT, UPDATE, DELETE ON items, marker TO "+app)
	appDSN := dsnAsUser(t, dsn, app)

	db, _ := openFlight(t, appDSN, sqlflight.Options{Feed: sqlflight.FeedNotify})
	err := db.PingContext(testContext(t, time.Minute))
	if !errors.Is(err, sqlflight.ErrFeedUnavailable) || !strings.Contains(err.Error(), "FeedDSN") {
		t.Fatalf("a feed as a role that may not read the queue: %v", err)
	}

	db, s := openFlight(t, appDSN, sqlflight.Options{Feed: sqlflight.FeedNotify, FeedDSN: dsn})
	if v := readV(t, db, 1); v != "a" {
		t.Fatalf("read = %q", v)
	}
	n := s.Stats().FeedTransactions
	outExec(t, out, `UPDATE items SET v = 'outside' WHERE id = 1`)
	waitTx(t, s, n)
	if v := readV(t, db, 1); v != "outside" {
		t.Fatalf("after an outside write the read is %q", v)
	}

	other := postgresDSN(t) // the test database: another database of the server
	db, _ = openFlight(t, appDSN, sqlflight.Options{Feed: sqlflight.FeedNotify, FeedDSN: other})
	err = db.PingContext(testContext(t, time.Minute))
	if !errors.Is(err, sqlflight.ErrFeedUnavailable) || !strings.Contains(err.Error(), "another database") {
		t.Fatalf("a FeedDSN of another database: %v", err)
	}
	if strings.Contains(fmt.Sprint(err), other) {
		t.Fatalf("the error shows the FeedDSN: %v", err)
	}
}

// TestFeedNotifyOtherDrivers: a scope of lib/pq has no pgx connection to
// give its feed: without Options.FeedDSN its first Connect says so; with
// it, outside writes reach its cached reads.
func TestFeedNotifyOtherDrivers(t *testing.T) {
	dsn, out := notifyFeedDatabase(t)
	db, _ := openParent(t, "libpq", dsn, sqlflight.Options{Feed: sqlflight.FeedNotify})
	err := db.PingContext(testContext(t, time.Minute))
	if !errors.Is(err, sqlflight.ErrFeedUnavailable) || !strings.Contains(err.Error(), "FeedDSN") {
		t.Fatalf("lib/pq without FeedDSN: %v", err)
	}
	db, s := openParent(t, "libpq", dsn, sqlflight.Options{Feed: sqlflight.FeedNotify, FeedDSN: dsn})
	if v := readV(t, db, 1); v != "a" {
		t.Fatalf("read = %q", v)
	}
	n := s.Stats().FeedTransactions
	outExec(t, out, `UPDATE items SET v = 'outside' WHERE id = 1`)
	waitTx(t, s, n)
	if v := readV(t, db, 1); v != "outside" {
		t.Fatalf("after an outside write the read through lib/pq is %q", v)
	}
}

// TestFeedReplicationOwnRole: the application's role lacks REPLICATION;
// its replication feed fails without Options.FeedDSN and runs with one
// (a role that has it), and outside writes reach the cached reads.
func TestFeedReplicationOwnRole(t *testing.T) {
	dsn := feedDatabase(t, true)
	out := outsider(t, dsn)
	outExec(t, out, `CREATE TABLE items (id int PRIMARY KEY, v text)`, `INSERT INTO items VALUES (1, 'a')`)
	app := newRole(t, out, "app")
	outExec(t, out, "GRANT SELECT, INSERT, UPDATE, DELETE ON items TO "+app)
	appDSN := dsnAsUser(t, dsn, app)

	db, _ := openFlight(t, appDSN, feedOptions())
	if err := db.PingContext(testContext(t, time.Minute)); !errors.Is(err, sqlflight.ErrFeedUnavailable) || !strings.Contains(err.Error(), "REPLICATION") {
		t.Fatalf("a replication feed as a role without REPLICATION: %v", err)
	}
	opts := feedOptions()
	opts.FeedDSN = dsn
	db, s := openFlight(t, appDSN, opts)
	if v := readV(t, db, 1); v != "a" {
		t.Fatalf("read = %q", v)
	}
	n := s.Stats().FeedTransactions
	outExec(t, out, `UPDATE items SET v = 'outside' WHERE id = 1`)
	waitTx(t, s, n)
	if v := readV(t, db, 1); v != "outside" {
		t.Fatalf("after an outside write the read is %q", v)
	}
}
