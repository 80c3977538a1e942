package integration

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/redis/go-redis/v9"

	"github.com/sqlflight/sqlflight"
	"github.com/sqlflight/sqlflight/redistier"
)

// The shared tier does not trust Redis: each test here attacks it as
// somebody who can write to Redis would, through a raw client, and checks
// that no instance serves a row the database did not give.

// fleetSecret is the fleet secret of the integration tests' shared tiers.
const fleetSecret = "integration-fleet-secret-32bytes"

// trustFleet is a table, a Redis namespace, an attacker's client, and
// instances of one fleet on them (each its own Shield and Redis client).
type trustFleet struct {
	table, prefix, scope string
	admin                *sql.DB
	attacker             *redis.Client
	cfg                  *pgx.ConnConfig
	addr                 string
}

type trustNode struct {
	db *sql.DB
	s  *sqlflight.Shield
}

func newTrustFleet(t *testing.T) *trustFleet {
	t.Helper()
	dsn := postgresDSN(t)
	addr := redisAddr(t)
	id := uniqueID(t)
	f := &trustFleet{table: "sqlflight_trust_" + id, prefix: "sqlflight-trust:" + id + ":", scope: "trust-" + id, addr: addr}
	f.admin = openRaw(t, dsn)
	mustExec(t, f.admin,
		fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, label text NOT NULL)`, f.table),
		fmt.Sprintf(`INSERT INTO %s VALUES (1, 'old'), (2, 'other')`, f.table))
	cleanupExec(t, f.admin, fmt.Sprintf(`DROP TABLE IF EXISTS %s`, f.table))
	f.attacker = redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() {
		flushRedisPrefix(t, addr, f.prefix)
		_ = f.attacker.Close()
	})
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	f.cfg = cfg
	return f
}

// node starts an instance of the fleet; noL1 makes its L1 keep nothing, so
// that every read of it goes to the tier.
func (f *trustFleet) node(t *testing.T, noL1 bool, o sqlflight.Options) trustNode {
	t.Helper()
	o.KeyPrefix = f.prefix
	if o.RedisTimeout == 0 {
		o.RedisTimeout = time.Second
	}
	if o.LeaseTTL == 0 {
		o.LeaseTTL = 2 * time.Second
	}
	if o.SharedSecret == "" {
		o.SharedSecret = fleetSecret
	}
	if noL1 {
		o.MaxBytes, o.NegMaxBytes = 1, 1
	}
	rdb := redis.NewClient(&redis.Options{Addr: f.addr, ContextTimeoutEnabled: true, MaxRetries: 1})
	s := sqlflight.New(o, sqlflight.Shared(redistier.New(rdb)))
	db := sql.OpenDB(s.SharedConnector(stdlib.GetConnector(*f.cfg), f.scope))
	t.Cleanup(func() {
		_ = db.Close()
		_ = s.Close()
		_ = rdb.Close()
	})
	return trustNode{db: db, s: s}
}

func (f *trustFleet) query() string {
	return fmt.Sprintf(`/* sqlflight: ttl=1h */ SELECT label FROM %s WHERE id = $1`, f.table)
}

// read reads row id's label through n.
func (f *trustFleet) read(t *testing.T, n trustNode, id int) string {
	t.Helper()
	var label string
	if err := n.db.QueryRowContext(testContext(t, 30*time.Second), f.query(), id).Scan(&label); err != nil {
		t.Fatalf("read %d: %v", id, err)
	}
	return label
}

// fill reads row id through n and waits until n wrote it to the tier; it
// returns the value's Redis key.
func (f *trustFleet) fill(t *testing.T, n trustNode, id int) string {
	t.Helper()
	before := f.valueKeys(t)
	w := n.s.Stats().SharedWrites
	f.read(t, n, id)
	waitUntil(t, 10*time.Second, func() string { return "the write to the tier" },
		func() bool { return n.s.Stats().SharedWrites > w })
	for k := range f.valueKeys(t) {
		if !before[k] {
			return k
		}
	}
	t.Fatal("no new value in Redis")
	return ""
}

func (f *trustFleet) valueKeys(t *testing.T) map[string]bool {
	t.Helper()
	keys := map[string]bool{}
	for _, k := range redisKeys(t, f.addr, f.prefix+"v:") { // keys under the prefix
		keys[k] = true
	}
	return keys
}

// TestTierForgedValueIsNotServed: a value copied by the attacker from one
// key (row 2) to another (row 1), and a value altered in place, are not
// served: the MAC binds a value to its key and its bytes.
func TestTierForgedValueIsNotServed(t *testing.T) {
	f := newTrustFleet(t)
	a, b := f.node(t, false, sqlflight.Options{}), f.node(t, true, sqlflight.Options{})
	ctx := testContext(t, time.Minute)
	k1 := f.fill(t, a, 1)
	k2 := f.fill(t, a, 2)
	v2, err := f.attacker.HGetAll(ctx, k2).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.attacker.HSet(ctx, k1, "v", v2["v"], "d", v2["d"]).Err(); err != nil {
		t.Fatal(err)
	}
	if got := f.read(t, b, 1); got != "old" {
		t.Fatalf("row 1 read %q: the attacker's value was served", got)
	}
	if st := b.s.Stats(); st.SharedForged == 0 || st.SharedHits != 0 {
		t.Fatalf("the forged value was not counted: %+v", st)
	}

	// Altered in place: the label's bytes changed.
	d := []byte(v2["d"])
	i := strings.Index(string(d), "other")
	if i < 0 {
		t.Fatal("the label is not in the value in clear")
	}
	copy(d[i:], "OTHER")
	if err := f.attacker.HSet(ctx, k2, "d", d).Err(); err != nil {
		t.Fatal(err)
	}
	if got := f.read(t, b, 2); got != "other" {
		t.Fatalf("row 2 read %q: an altered value was served", got)
	}
}

// TestTierVersionPinDoesNotHoldAKey: a version set to the largest number
// (HSET … v 18446744073709551615) neither keeps the old value served after
// a write nor stops the fleet from storing the new one.
func TestTierVersionPinDoesNotHoldAKey(t *testing.T) {
	f := newTrustFleet(t)
	a, b, c := f.node(t, false, sqlflight.Options{}), f.node(t, true, sqlflight.Options{}), f.node(t, true, sqlflight.Options{})
	ctx := testContext(t, time.Minute)
	k1 := f.fill(t, a, 1)
	if err := f.attacker.HSet(ctx, k1, "v", "18446744073709551615").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.db.ExecContext(ctx, fmt.Sprintf(`UPDATE %s SET label = 'new' WHERE id = 1`, f.table)); err != nil {
		t.Fatal(err)
	}
	w := b.s.Stats().SharedWrites
	if got := f.read(t, b, 1); got != "new" {
		t.Fatalf("read %q after the write: the pinned value was served", got)
	}
	waitUntil(t, 10*time.Second, func() string { return fmt.Sprintf("B's write over the pinned version: %+v", b.s.Stats()) },
		func() bool { return b.s.Stats().SharedWrites > w })
	if v, _ := f.attacker.HGet(ctx, k1, "v").Result(); v == "18446744073709551615" {
		t.Fatal("the pinned version is still in Redis")
	}
	if got := f.read(t, c, 1); got != "new" || c.s.Stats().SharedHits != 1 || c.s.Stats().OriginExecutions != 0 {
		t.Fatalf("another instance read %q: %+v", got, c.s.Stats())
	}
}

// TestTierEpochTamperingDoesNotBringBackOldRows: after a write, the
// attacker puts the old value back and deletes (or lowers) the table's
// field of the epochs hash. Instances that saw the write — the writer, and
// one that heard its message — refuse the old value.
func TestTierEpochTamperingDoesNotBringBackOldRows(t *testing.T) {
	f := newTrustFleet(t)
	a, b := f.node(t, true, sqlflight.Options{}), f.node(t, true, sqlflight.Options{})
	ctx := testContext(t, time.Minute)
	k1 := f.fill(t, a, 1)
	old, err := f.attacker.HGetAll(ctx, k1).Result()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.db.ExecContext(ctx, fmt.Sprintf(`UPDATE %s SET label = 'new' WHERE id = 1`, f.table)); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, func() string { return "B hears the write" },
		func() bool { return b.s.Stats().InvalidationsHeard > 0 })
	for _, tamper := range []struct {
		name  string
		epoch func() error
	}{
		{"deleted", func() error { return f.attacker.HDel(ctx, f.prefix+"epochs", f.table).Err() }},
		{"lowered", func() error { return f.attacker.HSet(ctx, f.prefix+"epochs", f.table, "1").Err() }},
	} {
		for _, n := range []struct {
			name string
			node trustNode
		}{{"writer", a}, {"listener", b}} {
			if err := tamper.epoch(); err != nil {
				t.Fatal(err)
			}
			if err := f.attacker.HSet(ctx, k1, "v", old["v"], "d", old["d"]).Err(); err != nil {
				t.Fatal(err)
			}
			if got := f.read(t, n.node, 1); got != "new" {
				t.Fatalf("epoch %s, the %s read %q: the overwritten value came back", tamper.name, n.name, got)
			}
		}
	}
}

// TestTierForgedMessagesChangeNothing: messages published on the channel by
// the attacker — garbage, the old format, the new format with a made-up
// tag, a flood of unique table names — drop no L1 entry and are counted.
func TestTierForgedMessagesChangeNothing(t *testing.T) {
	f := newTrustFleet(t)
	a := f.node(t, false, sqlflight.Options{})
	ctx := testContext(t, time.Minute)
	f.fill(t, a, 1)
	msgs := []string{
		"garbage",
		fmt.Sprintf("999999\nsqlflight/1 tables\n\"x\"\n%q", f.table),
		fmt.Sprintf("sqlflight/2 999999999999 tables 00112233445566778899aabbccddeeff\n\"x\"\n%q", f.table),
		"sqlflight/2 999999999999 all 00112233445566778899aabbccddeeff\n\"x\"",
	}
	for i := range 2000 {
		msgs = append(msgs, fmt.Sprintf("sqlflight/2 %d tables 00112233445566778899aabbccddeeff\n\"x\"\n\"flood_%d\"", 1e12+i, i))
	}
	for _, m := range msgs {
		if err := f.attacker.Publish(ctx, f.prefix+"invalidate", m).Err(); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, 10*time.Second, func() string { return fmt.Sprintf("the messages heard: %+v", a.s.Stats()) },
		func() bool { return a.s.Stats().InvalidationsRejected == uint64(len(msgs)) })
	before := a.s.Stats()
	if got := f.read(t, a, 1); got != "old" {
		t.Fatal(got)
	}
	st := a.s.Stats()
	if st.FreshHits != before.FreshHits+1 || st.OriginExecutions != before.OriginExecutions ||
		st.InvalidationsHeard != 0 || st.InvalidationResyncs != 0 {
		t.Fatalf("a forged message dropped L1: before %+v, after %+v", before, st)
	}
}

// TestTierLeaseWithoutTTLDoesNotBlock: a lease key written without an
// expiry (SET … without PX) is taken as absent: the next miss takes the
// lease and queries at once instead of waiting for a holder that does not
// exist.
func TestTierLeaseWithoutTTLDoesNotBlock(t *testing.T) {
	f := newTrustFleet(t)
	a, b := f.node(t, false, sqlflight.Options{}), f.node(t, true, sqlflight.Options{})
	ctx := testContext(t, time.Minute)
	k1 := f.fill(t, a, 1)
	key := strings.TrimPrefix(k1, f.prefix+"v:")
	if err := f.attacker.Del(ctx, k1).Err(); err != nil {
		t.Fatal(err)
	}
	if err := f.attacker.Set(ctx, f.prefix+"lease:"+key, "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got := f.read(t, b, 1); got != "old" {
		t.Fatal(got)
	}
	if st := b.s.Stats(); st.LeasesAcquired != 1 || st.LeaseWaits != 0 || st.LeaseWaitExpired != 0 || st.OriginExecutions != 1 {
		t.Fatalf("the miss waited for a lease nobody holds: %+v", st)
	}
}

// TestTierEncryptedValues: with SharedEncrypt the rows are not in Redis in
// clear, and another instance of the fleet reads them.
func TestTierEncryptedValues(t *testing.T) {
	f := newTrustFleet(t)
	a := f.node(t, false, sqlflight.Options{SharedEncrypt: true})
	b := f.node(t, true, sqlflight.Options{SharedEncrypt: true})
	ctx := testContext(t, time.Minute)
	k1 := f.fill(t, a, 2)
	d, err := f.attacker.HGet(ctx, k1, "d").Result()
	if err != nil || strings.Contains(d, "other") || strings.Contains(d, "label") {
		t.Fatalf("the value holds the row in clear (%v)", err)
	}
	if got := f.read(t, b, 2); got != "other" || b.s.Stats().SharedHits != 1 {
		t.Fatalf("read %q: %+v", got, b.s.Stats())
	}
}

// TestTierNeedsASecretThroughTheDSN: a DSN naming a shared tier without
// sqlflight.shared_secret does not open; the error names the parameter and
// holds no secret.
func TestTierNeedsASecretThroughTheDSN(t *testing.T) {
	pg, raddr := postgresDSN(t), redisAddr(t)
	prefix := "sqlflight-trust:" + uniqueID(t) + ":"
	t.Cleanup(func() { flushRedisPrefix(t, raddr, prefix) })
	err := openErr(t, withDSNParams(t, pg, "sqlflight.shared", redisTarget(raddr), "sqlflight.key_prefix", prefix))
	if !errors.Is(err, sqlflight.ErrNoSharedSecret) || !strings.Contains(err.Error(), "sqlflight.shared_secret") {
		t.Fatalf("open without a secret: %v", err)
	}
}

// TestTierUnderPerApplicationACL: the tier works for a Redis user that may
// touch only its application's keys and channels (~prefix* &prefix*), as
// docs/security.md recommends for a Redis shared between applications: reads
// are shared, writes invalidate the other instance, and the user can reach
// nothing outside its prefix.
func TestTierUnderPerApplicationACL(t *testing.T) {
	pg, raddr := postgresDSN(t), redisAddr(t)
	f := newTrustFleet(t)
	ctx := testContext(t, time.Minute)
	user := "sqlflight_acl_" + uniqueID(t)
	pass := uniqueID(t) + uniqueID(t)
	if err := f.attacker.Do(ctx, "ACL", "SETUSER", user, "reset", "on", ">"+pass,
		"~"+f.prefix+"*", "&"+f.prefix+"*", "+@all", "-@dangerous").Err(); err != nil {
		t.Fatalf("ACL SETUSER: %v", err)
	}
	t.Cleanup(func() { _ = f.attacker.Do(context.Background(), "ACL", "DELUSER", user).Err() })

	target := "redis://" + url.UserPassword(user, pass).String() + "@" + raddr + "/0"
	// Two instances: DSNs that differ only in a sqlflight parameter have
	// Shields of their own and the same fleet-wide scope.
	open := func(kv ...string) (*sql.DB, *sqlflight.Shield) {
		return openDSN(t, withDSNParams(t, pg, append(sharedParams(target, f.prefix, "application_name", "sqlflight_acl"), kv...)...))
	}
	dbA, shA := open()
	dbB, shB := open("sqlflight.max_bytes", "1") // B's L1 keeps nothing
	if shA == shB || shA == nil {
		t.Fatal("the two DSNs share a Shield")
	}
	q := f.query()
	read := func(db *sql.DB) string {
		var s string
		if err := db.QueryRowContext(ctx, q, 1).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	if got := read(dbA); got != "old" {
		t.Fatal(got)
	}
	waitUntil(t, 10*time.Second, func() string { return fmt.Sprintf("A's write to the tier: %+v", shA.Stats()) },
		func() bool { return shA.Stats().SharedWrites == 1 })
	if got := read(dbB); got != "old" || shB.Stats().SharedHits != 1 || shB.Stats().OriginExecutions != 0 {
		t.Fatalf("B read %q: %+v", got, shB.Stats())
	}
	if _, err := dbA.ExecContext(ctx, fmt.Sprintf(`UPDATE %s SET label = 'new' WHERE id = 1`, f.table)); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, func() string { return "B hears A's write" },
		func() bool { return shB.Stats().InvalidationsHeard == 1 })
	if got := read(dbB); got != "new" {
		t.Fatalf("B read %q after A's write", got)
	}
	for _, sh := range []*sqlflight.Shield{shA, shB} {
		if st := sh.Stats(); st.SharedErrors != 0 || st.SharedState != "up" || st.InvalidationsRejected != 0 {
			t.Fatalf("the tier failed under the ACL: %+v", st)
		}
	}
	// The user reaches nothing outside its prefix.
	u := redis.NewClient(&redis.Options{Addr: raddr, Username: user, Password: pass})
	defer u.Close()
	if err := u.Set(ctx, "sqlflight-trust-outside:"+user, "x", time.Second).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("a write outside the prefix: %v", err)
	}
	if err := u.Publish(ctx, "sqlflight:invalidate", "x").Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("a publish outside the prefix: %v", err)
	}
}

// writeHeard sets row 1's label to "new" through writer and waits until
// listener heard the write.
func (f *trustFleet) writeHeard(t *testing.T, writer, listener trustNode) {
	t.Helper()
	heard := listener.s.Stats().InvalidationsHeard
	if _, err := writer.db.ExecContext(testContext(t, 30*time.Second), fmt.Sprintf(`UPDATE %s SET label = 'new' WHERE id = 1`, f.table)); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, func() string { return "the listener hears the write" },
		func() bool { return listener.s.Stats().InvalidationsHeard > heard })
}

// readsNew checks that the writer and the listener of a write that set row
// 1's label to "new" both read it so.
func (f *trustFleet) readsNew(t *testing.T, writer, listener trustNode) {
	t.Helper()
	for _, n := range []struct {
		name string
		node trustNode
	}{{"writer", writer}, {"listener", listener}} {
		if got := f.read(t, n.node, 1); got != "new" {
			t.Fatalf("the %s read %q: a value older than the write it saw was served", n.name, got)
		}
	}
}

// TestTierLoweredCounterDoesNotBringBackOldRows: the attacker lowers the
// fleet's counter (and its base) below the version of a stored value before
// a write, so that the write takes a number below that version, then puts
// the counter back up. Neither the writer nor an instance that heard the
// write may serve the value the write made stale.
func TestTierLoweredCounterDoesNotBringBackOldRows(t *testing.T) {
	f := newTrustFleet(t)
	a, b := f.node(t, true, sqlflight.Options{}), f.node(t, true, sqlflight.Options{})
	ctx := testContext(t, time.Minute)
	k1 := f.fill(t, a, 1)
	v, err := f.attacker.HGet(ctx, k1, "v").Uint64()
	if err != nil {
		t.Fatal(err)
	}
	epochs := f.prefix + "epochs"
	low := strconv.FormatUint(v-1000, 10)
	if err := f.attacker.HSet(ctx, epochs, "\x00base", low, "\x00seq", low).Err(); err != nil {
		t.Fatal(err)
	}
	f.writeHeard(t, a, b)
	// The counter back above the value's version, so that it is "one the
	// fleet handed out".
	if err := f.attacker.HSet(ctx, epochs, "\x00seq", strconv.FormatUint(v+1000, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	f.readsNew(t, a, b)
}

// TestTierRaisedCounterDoesNotOutliveAWrite: the attacker raises the fleet's
// counter an hour ahead before a read fills the tier, so that the value
// would take a version above the number of a later write, then lowers the
// counter for the write and raises it again. No instance serves the value
// after the write.
func TestTierRaisedCounterDoesNotOutliveAWrite(t *testing.T) {
	f := newTrustFleet(t)
	a, b := f.node(t, true, sqlflight.Options{}), f.node(t, true, sqlflight.Options{})
	ctx := testContext(t, time.Minute)
	f.fill(t, a, 2) // makes the counter
	epochs := f.prefix + "epochs"
	now, err := f.attacker.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	ahead := strconv.FormatInt(now.Add(time.Hour).UnixMicro(), 10)
	if err := f.attacker.HSet(ctx, epochs, "\x00seq", ahead).Err(); err != nil {
		t.Fatal(err)
	}
	if got := f.read(t, a, 1); got != "old" {
		t.Fatal(got)
	}
	waitUntil(t, 10*time.Second, func() string { return "A's lease given back" }, func() bool {
		return len(redisKeys(t, f.addr, f.prefix+"lease:")) == 0
	})
	base, err := f.attacker.HGet(ctx, epochs, "\x00base").Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.attacker.HSet(ctx, epochs, "\x00seq", base).Err(); err != nil {
		t.Fatal(err)
	}
	f.writeHeard(t, a, b)
	if err := f.attacker.HSet(ctx, epochs, "\x00seq", ahead).Err(); err != nil {
		t.Fatal(err)
	}
	f.readsNew(t, a, b)
}

// TestTierLongInvalidationReachesTheFleet: a write to many tables with long
// names (each within the bounds of a message's names) is still heard by
// the other instances: its message must not be longer than a subscriber
// reads, or their in-process caches would keep what it made stale.
func TestTierLongInvalidationReachesTheFleet(t *testing.T) {
	f := newTrustFleet(t)
	a, b := f.node(t, false, sqlflight.Options{}), f.node(t, false, sqlflight.Options{})
	f.fill(t, a, 1)
	if got := f.read(t, b, 1); got != "old" {
		t.Fatal(got)
	}
	// Changed behind sqlflight's back, then invalidated by hand.
	mustExec(t, f.admin, fmt.Sprintf(`UPDATE %s SET label = 'new' WHERE id = 1`, f.table))
	tables := []string{f.table}
	for i := range 255 {
		tables = append(tables, fmt.Sprintf("t%03d_%s", i, strings.Repeat("x", 250)))
	}
	heard, rejected := b.s.Stats().InvalidationsHeard, b.s.Stats().InvalidationsRejected
	a.s.Invalidate(tables...)
	waitUntil(t, 10*time.Second, func() string { return fmt.Sprintf("B hears the write: %+v", b.s.Stats()) },
		func() bool {
			st := b.s.Stats()
			return st.InvalidationsHeard > heard || st.InvalidationsRejected > rejected
		})
	if st := b.s.Stats(); st.InvalidationsRejected > rejected {
		t.Fatalf("B rejected the fleet's own invalidation: %+v", st)
	}
	if got := f.read(t, b, 1); got != "new" {
		t.Fatalf("B read %q after the invalidation", got)
	}
}

// TestTierDecodeBombsCostLittle: values an attacker writes into Redis under
// a key a real read uses — 8 MB of empty result sets, a 30 MB column, a
// body of unknown time-zone names, each behind a genuine value's header
// bytes — are misses that cost the reader little memory: a value longer
// than the reader's limits is refused before anything else, a shorter one
// fails its MAC before it is decoded. The row is then read from the
// database and served right. (The value itself crosses the network whole:
// a few copies of it are allocated to receive it.)
func TestTierDecodeBombsCostLittle(t *testing.T) {
	f := newTrustFleet(t)
	// B has time to fetch a 30 MB value (a leader's look in the tier may
	// take half the lease's TTL; under -race a second was not always
	// enough): the bomb is to be refused by its decoding, not by a timeout.
	a := f.node(t, false, sqlflight.Options{})
	b := f.node(t, true, sqlflight.Options{MaxResultBytes: 1 << 20, RedisTimeout: 20 * time.Second, LeaseTTL: 40 * time.Second})
	ctx := testContext(t, time.Minute)
	k1 := f.fill(t, a, 1)
	genuine, err := f.attacker.HGet(ctx, k1, "d").Bytes()
	if err != nil {
		t.Fatal(err)
	}
	zones := bytes.Repeat([]byte("\x08Mars/Olympus_Mons"), 200_000)
	for _, bomb := range []struct {
		name string
		data []byte
	}{
		{"8 MB of empty sets", append(slices.Clone(genuine[:24]), make([]byte, 8<<20)...)},
		{"30 MB column", append(slices.Clone(genuine[:24]), bytes.Repeat([]byte{'x'}, 30<<20)...)},
		{"unknown zones", append(slices.Clone(genuine[:24]), zones...)},
		{"short garbage", append(slices.Clone(genuine[:24]), zones[:4096]...)},
	} {
		if err := f.attacker.HSet(ctx, k1, "d", bomb.data).Err(); err != nil {
			t.Fatal(err)
		}
		forged, decodeErrors := b.s.Stats().SharedForged, b.s.Stats().SharedDecodeErrors
		writes := b.s.Stats().SharedWrites + b.s.Stats().SharedSuperseded
		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		got := f.read(t, b, 1)
		runtime.ReadMemStats(&m1)
		if got != "old" {
			t.Fatalf("%s: read %q", bomb.name, got)
		}
		st := b.s.Stats()
		if st.SharedHits != 0 || st.SharedDecodeErrors == decodeErrors {
			t.Fatalf("%s: not refused as unreadable: %+v", bomb.name, st)
		}
		// The Redis client reads a value whole (its reply buffer, then the
		// string and bytes it hands over): a few copies of it, refused
		// before any decoding — never the hundreds of times its size a
		// decode would cost.
		total := int64(m1.TotalAlloc - m0.TotalAlloc)
		t.Logf("%s (%d bytes): forged %d → %d, %d bytes allocated by the read (%.1f× the value)",
			bomb.name, len(bomb.data), forged, st.SharedForged, total, float64(total)/float64(len(bomb.data)))
		if total > 5*int64(len(bomb.data))+4<<20 {
			t.Errorf("%s: the read allocated %d bytes for a value of %d", bomb.name, total, len(bomb.data))
		}
		// B stores what it read from the database in the background: let it
		// land before the next bomb replaces it.
		waitUntil(t, 10*time.Second, func() string { return fmt.Sprintf("B's write to the tier: %+v", b.s.Stats()) },
			func() bool { st := b.s.Stats(); return st.SharedWrites+st.SharedSuperseded > writes })
	}
}
