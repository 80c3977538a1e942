package integration

import (
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sqlflight/sqlflight"
	_ "github.com/sqlflight/sqlflight/redistier" // the redis:// scheme of sqlflight.shared
)

// TestDSNParameters: sqlflight.* parameters in a pgx DSN configure a Shield
// of that DSN's own, never reach pgx, and an unknown one fails sql.Open.
func TestDSNParameters(t *testing.T) {
	// A DSN of this run's own: the registered driver keeps one Shield per DSN.
	dsn := withDSNParams(t, postgresDSN(t), "sqlflight.default", "soft=1m,hard=2m", "sqlflight.max_inflight", "7",
		"application_name", "sqlflight_dsn_"+uniqueID(t))
	db, err := sql.Open("sqlflight", dsn)
	if err != nil {
		t.Fatal(err)
	}
	sh := sqlflight.ShieldOf(db)
	t.Cleanup(func() {
		_ = db.Close()
		_ = sh.Close()
	})
	if sh == nil || sh == sqlflight.Default() {
		t.Fatal("the DSN's parameters did not make a Shield of its own")
	}
	ctx := testContext(t, testTimeout)
	for range 3 {
		var n int
		if err := db.QueryRowContext(ctx, "SELECT 41 + 1").Scan(&n); err != nil || n != 42 {
			t.Fatalf("%v %d", err, n)
		}
	}
	if st := sh.Stats(); st.FreshHits != 2 || st.OriginExecutions != 1 {
		t.Fatalf("the DSN's default policy did not cache: %s", statsString(st))
	}
	if _, err := sql.Open("sqlflight", withDSNParams(t, postgresDSN(t), "sqlflight.max_byts", "1")); !errors.Is(err, sqlflight.ErrBadDSN) {
		t.Fatalf("an unknown parameter opened: %v", err)
	}
}

// openDSN opens dsn through the registered driver and returns the *sql.DB
// and its Shield (one of the DSN's own); both are closed when the test ends.
// Closing the Shield stops its subscription to the tier's invalidations.
func openDSN(t *testing.T, dsn string) (*sql.DB, *sqlflight.Shield) {
	t.Helper()
	db, err := sql.Open("sqlflight", dsn)
	if err != nil {
		t.Fatalf("open %s: %v", redactDSN(dsn), err)
	}
	sh := sqlflight.ShieldOf(db)
	t.Cleanup(func() {
		_ = db.Close()
		if sh != nil && sh != sqlflight.Default() {
			_ = sh.Close()
		}
	})
	if sh == nil || sh == sqlflight.Default() {
		t.Fatal("the DSN's parameters did not make a Shield of its own")
	}
	return db, sh
}

// openErr returns the error of opening dsn through the registered driver:
// that of sql.Open, or else that of the first use (Ping).
func openErr(t *testing.T, dsn string) error {
	t.Helper()
	db, err := sql.Open("sqlflight", dsn)
	if err != nil {
		return err
	}
	defer func() {
		if sh := sqlflight.ShieldOf(db); sh != nil && sh != sqlflight.Default() {
			_ = sh.Close()
		}
		_ = db.Close()
	}()
	return db.PingContext(testContext(t, time.Minute))
}

// redisTarget is the sqlflight.shared URL of the Redis server at addr. The
// tier it opens is closed when the last Shield using it is (goleak in
// TestMain checks that the client's goroutines are gone).
func redisTarget(addr string) string { return "redis://" + addr + "/0" }

// sharedParams are the DSN parameters of a shared tier at target under
// prefix, followed by kv.
func sharedParams(target, prefix string, kv ...string) []string {
	return append([]string{
		"sqlflight.shared", target,
		"sqlflight.key_prefix", prefix,
		"sqlflight.shared_secret", fleetSecret,
		"sqlflight.redis_timeout", "200ms",
		"sqlflight.lease_ttl", "2s",
	}, kv...)
}

// redisKeys returns the keys under prefix.
func redisKeys(t *testing.T, addr, prefix string) []string {
	t.Helper()
	ctx := testContext(t, 30*time.Second)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	var keys []string
	iter := rdb.Scan(ctx, 0, prefix+"*", 500).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatalf("redis scan: %v", err)
	}
	return keys
}

// TestDSNSharedTier: sqlflight.shared=redis://… gives the DSN's Shield a
// shared tier. A cached read is written to Redis under the key prefix, with
// key names that say nothing of the table or the arguments; a second
// Shield of the same database (the same DSN but for a sqlflight.*
// parameter spelled differently: another Shield, the same fleet-wide
// scope) reads it from Redis without querying; and a write through the
// second reaches the first.
func TestDSNSharedTier(t *testing.T) {
	pg, raddr := postgresDSN(t), redisAddr(t)
	id := uniqueID(t)
	prefix := "sqlflight:dsn_test:" + id + ":"
	t.Cleanup(func() { flushRedisPrefix(t, raddr, prefix) }) // after the Shields are closed

	admin := openRaw(t, pg)
	table := "public.sqlflight_l2dsn_" + id
	mustExec(t, admin,
		fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, label text NOT NULL, n int NOT NULL)`, table),
		fmt.Sprintf(`INSERT INTO %s VALUES (1, 'needle_%s', 10), (2, 'other', 20)`, table, id))
	cleanupExec(t, admin, fmt.Sprintf(`DROP TABLE IF EXISTS %s`, table))

	target := redisTarget(raddr)
	app := "sqlflight_l2dsn_" + id
	dsnA := withDSNParams(t, pg, sharedParams(target, prefix, "application_name", app)...)
	// The same parameters, lease_ttl spelled otherwise: a DSN string (so a
	// Shield) of its own, the same DSN once the sqlflight.* parameters
	// are stripped (so the same results in the tier).
	dsnB := withDSNParams(t, pg, sharedParams(target, prefix, "application_name", app, "sqlflight.lease_ttl", "2000ms")...)

	ctx := testContext(t, testTimeout)
	arg := "needle_" + id
	query := fmt.Sprintf(`/* sqlflight: soft=30s */ SELECT id, n FROM %s WHERE label = $1`, table)
	read := func(db *sql.DB) (int, int) {
		t.Helper()
		var gotID, n int
		if err := db.QueryRowContext(ctx, query, arg).Scan(&gotID, &n); err != nil {
			t.Fatalf("read: %v", err)
		}
		return gotID, n
	}

	dbA, shA := openDSN(t, dsnA)
	if st := shA.Stats(); st.SharedState != "up" {
		t.Fatalf("SharedState %q before any read, want up", st.SharedState)
	}
	if gotID, n := read(dbA); gotID != 1 || n != 10 {
		t.Fatalf("read %d, %d; want 1, 10", gotID, n)
	}
	// The write to the tier follows the caller's answer.
	waitUntil(t, 10*time.Second, func() string { return fmt.Sprintf("SharedWrites = 1: %+v", shA.Stats()) },
		func() bool { return shA.Stats().SharedWrites == 1 })
	if st := shA.Stats(); st.SharedState != "up" || st.SharedMisses != 1 || st.LeasesAcquired != 1 ||
		st.OriginExecutions != 1 || st.SharedErrors != 0 {
		t.Fatalf("after a cached read: %+v", st)
	}

	keys := redisKeys(t, raddr, prefix)
	var values int
	for _, k := range keys {
		name := strings.ToLower(strings.TrimPrefix(k, prefix))
		if strings.HasPrefix(name, "v:") {
			values++
		}
		for _, secret := range []string{"sqlflight_l2dsn", id, arg, "needle", "label"} {
			if strings.Contains(name, secret) {
				t.Errorf("key %q names %q", k, secret)
			}
		}
	}
	if values != 1 {
		t.Fatalf("%d values under %s (keys %q), want 1", values, prefix, keys)
	}

	dbB, shB := openDSN(t, dsnB)
	if shB == shA {
		t.Fatal("two DSN strings share a Shield")
	}
	if gotID, n := read(dbB); gotID != 1 || n != 10 {
		t.Fatalf("second Shield read %d, %d; want 1, 10", gotID, n)
	}
	if st := shB.Stats(); st.SharedHits != 1 || st.OriginExecutions != 0 {
		t.Fatalf("the second Shield did not take the result from the tier: %+v", st)
	}

	// A write through B is published; A hears it and drops its copy.
	mustExec(t, dbB, fmt.Sprintf(`UPDATE %s SET n = 11 WHERE id = 1`, table))
	if st := shB.Stats(); st.InvalidationsSent != 1 {
		t.Fatalf("the write was not published: %+v", st)
	}
	waitUntil(t, 10*time.Second, func() string { return fmt.Sprintf("A hears B's write: %+v", shA.Stats()) },
		func() bool { return shA.Stats().InvalidationsHeard >= 1 })
	if gotID, n := read(dbA); gotID != 1 || n != 11 {
		t.Fatalf("after B's write, A read %d, %d; want 1, 11", gotID, n)
	}
	if st := shA.Stats(); st.OriginExecutions != 2 || st.SharedErrors != 0 {
		t.Fatalf("A did not query again after B's write: %+v", st)
	}
}

// TestDSNSharedUnknownScheme: a sqlflight.shared URL of a scheme no tier
// registered fails to open, with an error that names the scheme.
func TestDSNSharedUnknownScheme(t *testing.T) {
	dsn := withDSNParams(t, postgresDSN(t), "sqlflight.shared", "nope://x",
		"application_name", "sqlflight_dsn_"+uniqueID(t))
	err := openErr(t, dsn)
	if !errors.Is(err, sqlflight.ErrBadDSN) {
		t.Fatalf("opened, or failed without ErrBadDSN: %v", err)
	}
	if !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("the error does not name the scheme: %v", err)
	}
}

// TestDSNSharedBadRedisTimeout: a malformed sqlflight.redis_timeout fails
// to open with ErrBadDSN.
func TestDSNSharedBadRedisTimeout(t *testing.T) {
	pg, raddr := postgresDSN(t), redisAddr(t)
	for _, v := range []string{"soon", "200", "-1s"} {
		t.Run(v, func(t *testing.T) {
			id := uniqueID(t)
			dsn := withDSNParams(t, pg, sharedParams(redisTarget(raddr), "sqlflight:dsn_test:"+id+":",
				"sqlflight.redis_timeout", v, "application_name", "sqlflight_dsn_"+id)...)
			err := openErr(t, dsn)
			if !errors.Is(err, sqlflight.ErrBadDSN) {
				t.Fatalf("redis_timeout=%s: opened, or failed without ErrBadDSN: %v", v, err)
			}
			if !strings.Contains(err.Error(), "redis_timeout") {
				t.Errorf("the error does not name the parameter: %v", err)
			}
		})
	}
}

// TestDSNSharedRedisUnreachable: with no Redis where sqlflight.shared
// points, reads still succeed, without an error to any caller, and after a
// few failed calls the Shield runs on its in-process cache alone.
func TestDSNSharedRedisUnreachable(t *testing.T) {
	pg := postgresDSN(t)
	id := uniqueID(t)
	admin := openRaw(t, pg)
	table := "public.sqlflight_l2down_" + id
	mustExec(t, admin,
		fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY)`, table),
		fmt.Sprintf(`INSERT INTO %s SELECT generate_series(1, 50)`, table))
	cleanupExec(t, admin, fmt.Sprintf(`DROP TABLE IF EXISTS %s`, table))

	// Port 1: nothing listens there, connections are refused at once.
	dsn := withDSNParams(t, pg, sharedParams(redisTarget("127.0.0.1:1"), "sqlflight:dsn_test:"+id+":",
		"application_name", "sqlflight_l2down_"+id)...)
	db, sh := openDSN(t, dsn)

	ctx := testContext(t, testTimeout)
	query := fmt.Sprintf(`/* sqlflight: soft=30s */ SELECT id FROM %s WHERE id = $1`, table)
	reads := 0
	for i := 1; i <= 20 && sh.Stats().SharedState != "down"; i++ {
		var got int
		if err := db.QueryRowContext(ctx, query, i).Scan(&got); err != nil || got != i {
			t.Fatalf("read %d with Redis unreachable: %v, %d", i, err, got)
		}
		reads++
	}
	st := sh.Stats()
	if st.SharedState != "down" {
		t.Fatalf("the tier is not down after %d reads of distinct keys: %+v", reads, st)
	}
	t.Logf("down after %d reads; %d tier errors", reads, st.SharedErrors)
	// Down, the tier is left alone: reads go on, and cached ones are served
	// from the in-process cache.
	for i := 1; i <= reads+5; i++ {
		var got int
		if err := db.QueryRowContext(ctx, query, i).Scan(&got); err != nil || got != i {
			t.Fatalf("read %d with the tier down: %v, %d", i, err, got)
		}
	}
	st = sh.Stats()
	if st.SharedErrors == 0 || st.SharedWrites != 0 || st.SharedHits != 0 || st.OriginErrors != 0 {
		t.Fatalf("with Redis unreachable: %+v", st)
	}
	if st.FreshHits < uint64(reads) {
		t.Errorf("%d fresh hits after reading %d keys twice: the in-process cache did not serve", st.FreshHits, reads)
	}
}

// TestDSNSharedURLHidesPassword: a sqlflight.shared Redis URL whose
// password makes it unparsable ('/', a bad escape) or ambiguous ('@', ':'),
// or whose path go-redis refuses, fails to open without the password in
// the error.
func TestDSNSharedURLHidesPassword(t *testing.T) {
	pg := postgresDSN(t)
	for _, pw := range []string{"pa/ss-w0rd", "pa%zzss-w0rd", "p@ss-w0rd", "pa:ss-w0rd", "p@s/s:%zz-w0rd"} {
		for _, target := range []string{
			"redis://user:" + pw + "@127.0.0.1:1/0",
			"redis://user:" + pw + "@127.0.0.1:1/not-a-db",
		} {
			dsn := withDSNParams(t, pg, "sqlflight.shared", target, "application_name", "sqlflight_dsn_"+uniqueID(t))
			err := openErr(t, dsn)
			if err == nil {
				continue // an ambiguous URL that parses to another password opens (lazily)
			}
			if strings.Contains(err.Error(), "w0rd") {
				t.Errorf("the error shows the password: %v", err)
			}
		}
	}
}
