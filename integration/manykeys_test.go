package integration

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlflight/sqlflight"
	"github.com/sqlflight/sqlflight/redistier"
)

// behindLock runs first(), then, once its statement waits for the lock on
// table that another session holds, rest(i) for i < n on goroutines of
// their own; it releases the lock once pending reads wait in the Shield's
// batches (Stats.BatchPending) and waits for every read to return. No
// clock is involved: the reads gather behind a statement the server holds.
func behindLock(t *testing.T, admin *sql.DB, sh *sqlflight.Shield, table string, pending int, first func(), rest func(i int), n int) {
	t.Helper()
	ctx := testContext(t, time.Minute)
	lock, err := admin.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lock.Rollback() }()
	if _, err := lock.ExecContext(ctx, "LOCK TABLE "+table+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(first)
	waitFor(t, ctx, "the first read to wait for the lock", func() bool {
		var n int
		err := admin.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%'||$1||'%' AND query NOT LIKE '%pg_stat_activity%'`, table).Scan(&n)
		return err == nil && n > 0
	})
	for i := range n {
		wg.Go(func() { rest(i) })
	}
	waitFor(t, ctx, fmt.Sprintf("%d reads to wait in a batch", pending), func() bool { return sh.Stats().BatchPending >= int64(pending) })
	if err := lock.Rollback(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
}

// waitFor polls cond until it holds, or fails the test when ctx ends.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("gave up waiting for %s", what)
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// TestManyKeysOtherDrivers: the reads of many ids of one statement, by a
// parameter and inlined as bun writes them, gather behind the statement in
// flight and run as one statement through every PostgreSQL driver, each
// caller reading its own row; an absent id reads none.
func TestManyKeysOtherDrivers(t *testing.T) {
	dsn := postgresDSN(t)
	admin := openRaw(t, dsn)
	table := "manykeys_drv_" + uniqueID(t)
	const rows = 300
	mustExec(t, admin, fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, v text NOT NULL)`, table),
		fmt.Sprintf(`INSERT INTO %s SELECT g, 'v' || g FROM generate_series(1, %d) g`, table, rows))
	cleanupExec(t, admin, "DROP TABLE IF EXISTS "+table)
	shapes := map[string]func(id int) (string, []any){
		"parameter": func(id int) (string, []any) {
			return fmt.Sprintf(`SELECT id, v FROM %s WHERE id = $1`, table), []any{id}
		},
		// An ORDER BY of an output column's name means what it meant: the
		// key appended to the select list has a name of its own.
		"ordered": func(id int) (string, []any) {
			return fmt.Sprintf(`SELECT id, v FROM %s WHERE id = $1 ORDER BY id, v`, table), []any{id}
		},
		"inlined": func(id int) (string, []any) {
			return fmt.Sprintf(`SELECT "t"."id", "t"."v" FROM %s AS "t" WHERE ("t"."id" = %d)`, table, id), nil
		},
	}
	for _, parent := range append([]string{"pgx"}, otherParents...) {
		for name, shape := range shapes {
			t.Run(parent+"/"+name, func(t *testing.T) {
				var db *sql.DB
				var sh *sqlflight.Shield
				if parent == "pgx" {
					db, sh = openFlight(t, dsn, holdBatches(nil)...)
				} else {
					db, sh = openParent(t, parent, dsn, holdBatches(nil)...)
				}
				ctx := testContext(t, time.Minute)
				read := func(id int) error {
					q, args := shape(id)
					rs, err := db.QueryContext(ctx, q, args...)
					if err != nil {
						return fmt.Errorf("id %d: %w", id, err)
					}
					defer rs.Close()
					var got []string
					for rs.Next() {
						var gid int
						var v string
						if err := rs.Scan(&gid, &v); err != nil {
							return err
						}
						got = append(got, fmt.Sprintf("%d=%s", gid, v))
					}
					if err := rs.Err(); err != nil {
						return err
					}
					want := ""
					if id <= rows {
						want = fmt.Sprintf("%d=v%d", id, id)
					}
					if strings.Join(got, ",") != want {
						return fmt.Errorf("id %d: rows %q, want %q", id, got, want)
					}
					return nil
				}
				if err := read(1); err != nil { // the verdict
					t.Fatal(err)
				}
				const n = 120 // 100 present ids, 20 absent
				ids := func(i int) int {
					if i < 100 {
						return 2 + i
					}
					return rows + 1 + i
				}
				errs := make(chan error, n+1)
				before := sh.Stats()
				behindLock(t, admin, sh, table, n, func() { errs <- read(1) }, func(i int) { errs <- read(ids(i)) }, n)
				close(errs)
				for err := range errs {
					if err != nil {
						t.Error(err)
					}
				}
				st := sh.Stats()
				if execs := st.OriginExecutions - before.OriginExecutions; execs != 2 {
					t.Errorf("%d origin executions for %d ids behind one statement, want 2 (it, and one batch)", execs, n)
				}
				if st.Batches-before.Batches != 1 || st.BatchedReads-before.BatchedReads != n {
					t.Errorf("batches %d answering %d reads, want 1 answering %d", st.Batches-before.Batches, st.BatchedReads-before.BatchedReads, n)
				}
			})
		}
	}
}

// TestManyKeysSharedTier: with a shared tier, the members of a batch each
// hold their key's lease while they wait, and the batch's rows go to the
// tier key by key: another instance then reads every key from the tier
// (its L1 keeps nothing), and the database sees no statement of its own.
func TestManyKeysSharedTier(t *testing.T) {
	dsn := postgresDSN(t)
	admin := openRaw(t, dsn)
	table := "manykeys_tier_" + uniqueID(t)
	mustExec(t, admin, fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, v text NOT NULL)`, table),
		fmt.Sprintf(`INSERT INTO %s SELECT g, 'v' || g FROM generate_series(1, 100) g`, table))
	cleanupExec(t, admin, "DROP TABLE IF EXISTS "+table)
	rdb, prefix := redisNamespace(t, "sqlflight-manykeys")
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	open := func(o sqlflight.Options) (*sql.DB, *sqlflight.Shield) {
		o.KeyPrefix, o.SharedSecret, o.BatchMaxWait = prefix, fleetSecret, -1
		s := sqlflight.New(o, sqlflight.Shared(redistier.New(rdb)))
		db := sql.OpenDB(s.SharedConnector(stdlib.GetConnector(*cfg), "manykeys"))
		t.Cleanup(func() { _ = db.Close(); _ = s.Close() })
		return db, s
	}
	filler, fs := open(sqlflight.Options{})
	reader, rs := open(sqlflight.Options{MaxBytes: 1, NegMaxBytes: 1})
	ctx := testContext(t, time.Minute)
	q := fmt.Sprintf(`/* sqlflight: ttl=1h jitter=0%% */ SELECT id, v FROM %s WHERE id = $1`, table)
	read := func(db *sql.DB, id int) error {
		var gid int
		var v string
		if err := db.QueryRowContext(ctx, q, id).Scan(&gid, &v); err != nil {
			return fmt.Errorf("id %d: %w", id, err)
		}
		if gid != id || v != fmt.Sprintf("v%d", id) {
			return fmt.Errorf("id %d: got %d %q", id, gid, v)
		}
		return nil
	}
	if err := read(filler, 1); err != nil {
		t.Fatal(err)
	}
	const n = 40
	errs := make(chan error, n+1)
	before := fs.Stats()
	behindLock(t, admin, fs, table, n, func() { errs <- read(filler, 2) }, func(i int) { errs <- read(filler, 10+i) }, n)
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	st := fs.Stats()
	if st.Batches-before.Batches != 1 || st.OriginExecutions-before.OriginExecutions != 2 {
		t.Fatalf("%d batches, %d origin executions; want 1 and 2; %s", st.Batches-before.Batches, st.OriginExecutions-before.OriginExecutions, statsString(st))
	}
	// Every key the batch answered is in the tier: the other instance's
	// reads are its hits, not the database's.
	for i := range n {
		id := 10 + i
		waitUntil(t, 10*time.Second, func() string { return fmt.Sprintf("id %d in the shared tier", id) }, func() bool {
			before := rs.Stats()
			if err := read(reader, id); err != nil {
				t.Fatal(err)
			}
			after := rs.Stats()
			return after.SharedHits > before.SharedHits && after.OriginExecutions == before.OriginExecutions
		})
	}
}
