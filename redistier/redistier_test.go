package redistier

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sqlflight/sqlflight/internal/leaktest"

	"github.com/sqlflight/sqlflight"
)

func TestMain(m *testing.M) {
	leaktest.VerifyTestMain(m)
}

// redisAddr is the test server's address (SQLFLIGHT_REDIS_ADDR); tests skip
// without one, or fail under SQLFLIGHT_REQUIRE_INTEGRATION=1.
func redisAddr(t *testing.T) string {
	t.Helper()
	addr := os.Getenv("SQLFLIGHT_REDIS_ADDR")
	if addr == "" {
		if os.Getenv("SQLFLIGHT_REQUIRE_INTEGRATION") == "1" {
			t.Fatal("SQLFLIGHT_REDIS_ADDR is not set and SQLFLIGHT_REQUIRE_INTEGRATION=1")
		}
		t.Skip("SQLFLIGHT_REDIS_ADDR is not set (e.g. 127.0.0.1:6379): no Redis to test against")
	}
	return addr
}

// newClient returns a client of addr, closed when the test ends.
func newClient(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// newNS returns a namespace of the test's own; its keys are deleted when the
// test ends (before c is closed).
func newNS(t *testing.T, c *redis.Client) string {
	t.Helper()
	ns := fmt.Sprintf("test:%d:%s:", time.Now().UnixNano(), t.Name())
	t.Cleanup(func() {
		ctx := context.Background()
		iter := c.Scan(ctx, 0, globEscape(ns)+"*", 100).Iterator()
		var keys []string
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if err := iter.Err(); err != nil {
			t.Errorf("scan %s*: %v", ns, err)
		}
		if len(keys) > 0 {
			if err := c.Del(ctx, keys...).Err(); err != nil {
				t.Errorf("del: %v", err)
			}
		}
	})
	return ns
}

// globEscape quotes the characters special to SCAN MATCH.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\^`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// setup returns a Tier on a fresh client and namespace.
func setup(t *testing.T) (*Tier, *redis.Client, string) {
	t.Helper()
	c := newClient(t, redisAddr(t))
	ns := newNS(t, c)
	tier := New(c)
	t.Cleanup(func() { _ = tier.Close() })
	return tier, c, ns
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// recorder collects what a subscription delivers.
type recorder struct{ ch chan sqlflight.Invalidation }

func newRecorder() *recorder { return &recorder{ch: make(chan sqlflight.Invalidation, 1000)} }

func (r *recorder) fn(inv sqlflight.Invalidation) { r.ch <- inv }

func (r *recorder) next(t *testing.T) sqlflight.Invalidation {
	t.Helper()
	select {
	case inv := <-r.ch:
		return inv
	case <-time.After(10 * time.Second):
		t.Fatal("no invalidation within 10s")
		return sqlflight.Invalidation{}
	}
}

func (r *recorder) none(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case inv := <-r.ch:
		t.Fatalf("unexpected invalidation %+v", inv)
	case <-time.After(d):
	}
}

// publish publishes inv as a Shield does: a sequence number first, then the
// message (with a made-up tag: the tier carries it, the Shield checks it).
func publish(ctx context.Context, tier *Tier, ns string, inv sqlflight.Invalidation) (uint64, error) {
	seq, err := tier.NextSeq(ctx, ns)
	if err != nil {
		return 0, err
	}
	inv.Seq, inv.Tag = seq, []byte{0xde, 0xad}
	return seq, tier.Publish(ctx, ns, inv)
}

func TestFetch(t *testing.T) {
	tier, c, ns := setup(t)
	ctx := ctxT(t)
	tables := []string{"a", "b"}

	sv, err := tier.Fetch(ctx, ns, "k", tables)
	if err != nil {
		t.Fatal(err)
	}
	if sv.Data != nil || sv.Version != 0 || !slices.Equal(sv.Epochs, []uint64{0, 0, 0}) {
		t.Fatalf("miss: got %+v", sv)
	}

	v := version(t, tier, ns)
	if ok, err := tier.Store(ctx, ns, "k", []byte("result"), v, time.Minute); err != nil || !ok {
		t.Fatalf("Store = %v, %v", ok, err)
	}
	seqB, err := publish(ctx, tier, ns, sqlflight.Invalidation{Tables: []string{"b"}})
	if err != nil {
		t.Fatal(err)
	}
	seqAll, err := publish(ctx, tier, ns, sqlflight.Invalidation{All: true})
	if err != nil {
		t.Fatal(err)
	}
	if seqAll <= seqB {
		t.Fatalf("sequence went from %d to %d", seqB, seqAll)
	}
	sv, err = tier.Fetch(ctx, ns, "k", tables)
	if err != nil {
		t.Fatal(err)
	}
	if string(sv.Data) != "result" || sv.Version != v || !slices.Equal(sv.Epochs, []uint64{0, seqB, seqAll}) {
		t.Fatalf("hit: got data %q version %d epochs %v; want epochs [0 %d %d]", sv.Data, sv.Version, sv.Epochs, seqB, seqAll)
	}

	// No tables: just the all-tables epoch.
	sv, err = tier.Fetch(ctx, ns, "k", nil)
	if err != nil || !slices.Equal(sv.Epochs, []uint64{seqAll}) {
		t.Fatalf("Fetch without tables = %+v, %v", sv, err)
	}

	// An empty result is a hit, not a miss.
	ve := version(t, tier, ns)
	if _, err := tier.Store(ctx, ns, "empty", nil, ve, time.Minute); err != nil {
		t.Fatal(err)
	}
	sv, err = tier.Fetch(ctx, ns, "empty", nil)
	if err != nil || sv.Data == nil || len(sv.Data) != 0 || sv.Version != ve {
		t.Fatalf("empty value: got %+v, %v", sv, err)
	}

	// Values this tier did not write are misses.
	c.HSet(ctx, ns+"v:junk", "v", "not-a-number", "d", "x")
	c.HSet(ctx, ns+"v:half", "v", "3")
	for _, k := range []string{"junk", "half"} {
		sv, err = tier.Fetch(ctx, ns, k, nil)
		if err != nil || sv.Data != nil {
			t.Fatalf("%s: got %+v, %v; want a miss", k, sv, err)
		}
	}

	// A broken epoch is an error, not a zero.
	c.HSet(ctx, ns+"epochs", "a", "garbage")
	if _, err := tier.Fetch(ctx, ns, "k", tables); err == nil {
		t.Fatal("Fetch with a broken epoch: no error")
	}
}

func TestStoreVersions(t *testing.T) {
	tier, c, ns := setup(t)
	ctx := ctxT(t)
	store := func(data string, version uint64) bool {
		t.Helper()
		ok, err := tier.Store(ctx, ns, "k", []byte(data), version, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	get := func() sqlflight.SharedValue { // what is stored, as is
		t.Helper()
		vd, err := c.HMGet(ctx, ns+"v:k", "v", "d").Result()
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.ParseUint(vd[0].(string), 10, 64)
		return sqlflight.SharedValue{Data: []byte(vd[1].(string)), Version: n}
	}

	if !store("five", 5) {
		t.Fatal("first store refused")
	}
	if store("three", 3) {
		t.Fatal("older version overwrote newer")
	}
	if store("five again", 5) {
		t.Fatal("equal version overwrote")
	}
	if sv := get(); string(sv.Data) != "five" || sv.Version != 5 {
		t.Fatalf("got %q v%d, want five v5", sv.Data, sv.Version)
	}
	if !store("ten", 10) { // more digits, and "10" < "5" as strings
		t.Fatal("newer version refused")
	}
	if sv := get(); string(sv.Data) != "ten" || sv.Version != 10 {
		t.Fatalf("got %q v%d, want ten v10", sv.Data, sv.Version)
	}

	// Versions beyond a double's precision still compare exactly.
	big := uint64(1) << 60
	if !store("big", big) || !store("big+1", big+1) || store("big again", big) {
		t.Fatal("large versions compared wrongly")
	}
	if sv := get(); string(sv.Data) != "big+1" || sv.Version != big+1 {
		t.Fatalf("got %q v%d", sv.Data, sv.Version)
	}

	pttl, err := c.PTTL(ctx, ns+"v:k").Result()
	if err != nil || pttl <= 0 || pttl > time.Minute {
		t.Fatalf("PTTL = %v, %v; want in (0, 1m]", pttl, err)
	}

	// A tiny TTL still sets an expiry.
	if _, err := tier.Store(ctx, ns, "short", []byte("x"), 1, time.Microsecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if n, _ := c.Exists(ctx, ns+"v:short").Result(); n != 0 {
		t.Fatal("value with a sub-millisecond TTL did not expire")
	}
}

// TestForgedVersionDoesNotPinAKey: a version above the fleet sequence (no
// Acquire handed it out) is written by someone else; the next Store
// overwrites it, and Fetch never returns it.
func TestForgedVersionDoesNotPinAKey(t *testing.T) {
	tier, c, ns := setup(t)
	ctx := ctxT(t)
	v := version(t, tier, ns)
	if ok, err := tier.Store(ctx, ns, "k", []byte("old"), v, time.Minute); err != nil || !ok {
		t.Fatalf("Store = %v, %v", ok, err)
	}
	if err := c.HSet(ctx, ns+"v:k", "v", "18446744073709551615").Err(); err != nil {
		t.Fatal(err)
	}
	if sv, err := tier.Fetch(ctx, ns, "k", nil); err != nil || sv.Data != nil {
		t.Fatalf("a version above the sequence was fetched: %+v, %v", sv, err)
	}
	v2 := version(t, tier, ns)
	if ok, err := tier.Store(ctx, ns, "k", []byte("new"), v2, time.Minute); err != nil || !ok {
		t.Fatalf("Store over a forged version = %v, %v; want written", ok, err)
	}
	if sv, err := tier.Fetch(ctx, ns, "k", nil); err != nil || string(sv.Data) != "new" || sv.Version != v2 || sv.Seq < v2 {
		t.Fatalf("after the store: %+v, %v", sv, err)
	}
	// A version within the sequence still wins over an older one.
	if ok, _ := tier.Store(ctx, ns, "k", []byte("older"), v, time.Minute); ok {
		t.Fatal("an older version overwrote a newer one")
	}
}

// TestSequenceFollowsTheClock: numbers never fall behind Redis's clock,
// whatever the counter in Redis says (a write takes a number above every
// version handed out before it, even after somebody lowered the counter),
// and no version is handed out from a counter run ahead of the clock.
func TestSequenceFollowsTheClock(t *testing.T) {
	tier, c, ns := setup(t)
	ctx := ctxT(t)
	v := version(t, tier, ns)
	low := strconv.FormatUint(v-1_000_000, 10)
	if err := c.HSet(ctx, ns+"epochs", "\x00base", low, "\x00seq", low).Err(); err != nil {
		t.Fatal(err)
	}
	seq, err := tier.NextSeq(ctx, ns)
	if err != nil || seq <= v {
		t.Fatalf("NextSeq after the counter was lowered = %d, %v; want above %d", seq, err, v)
	}
	if l, err := tier.Acquire(ctx, ns, "k", time.Second); err != nil || l.Version <= seq {
		t.Fatalf("Acquire after the counter was lowered = %+v, %v; want above %d", l, err, seq)
	}

	now, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	ahead := uint64(now.Add(time.Hour).UnixMicro())
	if err := c.HSet(ctx, ns+"epochs", "\x00seq", ahead).Err(); err != nil {
		t.Fatal(err)
	}
	if l, err := tier.Acquire(ctx, ns, "k2", time.Second); err == nil {
		t.Fatalf("Acquire from a counter an hour ahead of the clock = %+v; want an error", l)
	}
	if n, _ := c.Exists(ctx, ns+"lease:k2").Result(); n != 0 {
		t.Fatal("a lease was taken with a refused version")
	}
	// Writes still take numbers (above every version handed out).
	if seq, err := tier.NextSeq(ctx, ns); err != nil || seq <= ahead {
		t.Fatalf("NextSeq from a counter ahead = %d, %v", seq, err)
	}
}

// TestPublishNeverLowersAnEpoch: writers take their numbers first and
// publish after, so they may publish out of order; an epoch keeps the
// highest number published for it.
func TestPublishNeverLowersAnEpoch(t *testing.T) {
	tier, _, ns := setup(t)
	ctx := ctxT(t)
	first, err := tier.NextSeq(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}
	second, err := tier.NextSeq(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}
	for _, seq := range []uint64{second, first} {
		if err := tier.Publish(ctx, ns, sqlflight.Invalidation{Tables: []string{"t"}, All: true, Seq: seq, Tag: []byte{1}}); err != nil {
			t.Fatal(err)
		}
	}
	sv, err := tier.Fetch(ctx, ns, "k", []string{"t"})
	if err != nil || !slices.Equal(sv.Epochs, []uint64{second, second}) {
		t.Fatalf("epochs %v, %v; want both at %d", sv.Epochs, err, second)
	}
}

// TestLeaseWithoutTTLIsTaken: a lease key nobody will ever release (written
// without an expiry, or with one longer than any lease) does not block the
// key: Acquire takes the first, and cuts the second down to its own TTL.
func TestLeaseWithoutTTLIsTaken(t *testing.T) {
	tier, c, ns := setup(t)
	ctx := ctxT(t)
	if err := c.Set(ctx, ns+"lease:k", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	l, err := tier.Acquire(ctx, ns, "k", time.Second)
	if err != nil || !l.Held {
		t.Fatalf("Acquire over a lease without TTL = %+v, %v; want held", l, err)
	}
	if pttl, _ := c.PTTL(ctx, ns+"lease:k").Result(); pttl <= 0 || pttl > time.Second {
		t.Fatalf("lease PTTL = %v", pttl)
	}
	if err := c.Set(ctx, ns+"lease:long", "x", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if l, err := tier.Acquire(ctx, ns, "long", 50*time.Millisecond); err != nil || l.Held {
		t.Fatalf("Acquire over a live lease = %+v, %v; want not held", l, err)
	}
	if pttl, _ := c.PTTL(ctx, ns+"lease:long").Result(); pttl <= 0 || pttl > 50*time.Millisecond {
		t.Fatalf("a lease of an hour was left at %v", pttl)
	}
}

func TestAcquireRelease(t *testing.T) {
	tier, c, ns := setup(t)
	ctx := ctxT(t)

	l1, err := tier.Acquire(ctx, ns, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	l2, err := tier.Acquire(ctx, ns, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if !l1.Held || l2.Held {
		t.Fatalf("held: first %v, second %v; want true, false", l1.Held, l2.Held)
	}
	if l1.Version == 0 || l2.Version <= l1.Version {
		t.Fatalf("versions %d then %d; want increasing", l1.Version, l2.Version)
	}
	if len(l1.Token) != 32 || l1.Token == l2.Token {
		t.Fatalf("tokens %q, %q", l1.Token, l2.Token)
	}
	if tok, _ := c.Get(ctx, ns+"lease:k").Result(); tok != l1.Token {
		t.Fatalf("lease key holds %q, want %q", tok, l1.Token)
	}
	if pttl, _ := c.PTTL(ctx, ns+"lease:k").Result(); pttl <= 0 {
		t.Fatalf("lease PTTL = %v", pttl)
	}

	// Releasing a lease not held, or with another token, leaves it.
	if err := tier.Release(ctx, ns, "k", l2); err != nil {
		t.Fatal(err)
	}
	if err := tier.Release(ctx, ns, "k", sqlflight.Lease{Held: true, Token: "someone else"}); err != nil {
		t.Fatal(err)
	}
	if n, _ := c.Exists(ctx, ns+"lease:k").Result(); n != 1 {
		t.Fatal("lease released with a wrong token")
	}
	if err := tier.Release(ctx, ns, "k", l1); err != nil {
		t.Fatal(err)
	}
	if n, _ := c.Exists(ctx, ns+"lease:k").Result(); n != 0 {
		t.Fatal("lease not released by its holder")
	}

	// An expired lease can be taken by another instance, and the first
	// holder's late release leaves the new one alone.
	short, err := tier.Acquire(ctx, ns, "e", 30*time.Millisecond)
	if err != nil || !short.Held {
		t.Fatalf("Acquire = %+v, %v", short, err)
	}
	time.Sleep(80 * time.Millisecond)
	next, err := tier.Acquire(ctx, ns, "e", time.Minute)
	if err != nil || !next.Held {
		t.Fatalf("after expiry: Acquire = %+v, %v", next, err)
	}
	if err := tier.Release(ctx, ns, "e", short); err != nil {
		t.Fatal(err)
	}
	if tok, _ := c.Get(ctx, ns+"lease:e").Result(); tok != next.Token {
		t.Fatal("a stale holder released the new lease")
	}

	// Publish and Acquire share the sequence.
	seq, err := publish(ctx, tier, ns, sqlflight.Invalidation{Tables: []string{"t"}})
	if err != nil || seq <= next.Version {
		t.Fatalf("Publish = %d, %v; want above %d", seq, err, next.Version)
	}
}

func TestPublishSubscribe(t *testing.T) {
	tier, _, ns := setup(t)
	ctx := ctxT(t)
	rec := subscribed(t, tier, ns)

	odd := []string{`plain`, `"quoted"`, "new\nline", "tab\there", `back\slash`, "ünïcødé 表", "nul\x00byte", "bad\xffutf8", "", "*"}
	seq, err := publish(ctx, tier, ns, sqlflight.Invalidation{Tables: odd, Source: "instance-1"})
	if err != nil {
		t.Fatal(err)
	}
	inv := rec.next(t)
	if inv.Resync || inv.All || inv.Seq != seq || inv.Source != "instance-1" || !slices.Equal(inv.Tables, odd) {
		t.Fatalf("got %+v; want seq %d, source instance-1, tables %q", inv, seq, odd)
	}
	sv, err := tier.Fetch(ctx, ns, "k", odd)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range sv.Epochs[:len(odd)] {
		if e != seq {
			t.Errorf("epoch of %q = %d, want %d", odd[i], e, seq)
		}
	}

	seq, err = publish(ctx, tier, ns, sqlflight.Invalidation{All: true, Source: "line\nbreak"})
	if err != nil {
		t.Fatal(err)
	}
	inv = rec.next(t)
	if !inv.All || inv.Seq != seq || inv.Source != "line\nbreak" || len(inv.Tables) != 0 {
		t.Fatalf("got %+v; want all, seq %d", inv, seq)
	}

	// Other namespaces are not heard.
	if _, err := publish(ctx, tier, ns+"other:", sqlflight.Invalidation{All: true}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tier.client.Del(context.Background(), ns+"other:seq", ns+"other:epochs").Err() })
	rec.none(t, 100*time.Millisecond)
}

// TestMalformedMessageIsReported: a message the tier cannot read reaches
// the Shield as Malformed (which counts and ignores it), never as a Resync
// (which would drop every instance's L1).
func TestMalformedMessageIsReported(t *testing.T) {
	tier, c, ns := setup(t)
	ctx := ctxT(t)
	rec := subscribed(t, tier, ns)
	for _, msg := range []string{"garbage", "1\nsqlflight/99 all\n\"\"", "x\nsqlflight/1 all\n\"\"",
		"sqlflight/2 0 all 00\n\"\"", "sqlflight/2 5 all zz\n\"\"", "sqlflight/2 5 some 00\n\"\"",
		"sqlflight/2 5 all 00\nunquoted", "sqlflight/2 5 tables 00\n\"s\"\nunquoted",
		"sqlflight/2 5 tables 00\n\"s\"" + strings.Repeat("\n\"t\"", maxMessageTables+1),
		"sqlflight/2 5 tables 00\n\"" + strings.Repeat("x", maxMessageBytes) + "\""} {
		if err := c.Publish(ctx, ns+"invalidate", msg).Err(); err != nil {
			t.Fatal(err)
		}
		if inv := rec.next(t); !inv.Malformed || inv.Resync {
			t.Fatalf("%.40q: got %+v, want Malformed", msg, inv)
		}
	}
}

func TestResyncAfterConnectionKilled(t *testing.T) {
	tier, c, ns := setup(t)
	ctx := ctxT(t)
	rec := subscribed(t, tier, ns)

	seq, err := publish(ctx, tier, ns, sqlflight.Invalidation{Tables: []string{"t"}})
	if err != nil {
		t.Fatal(err)
	}
	if inv := rec.next(t); inv.Seq != seq || inv.Resync {
		t.Fatalf("before the kill: got %+v", inv)
	}

	killed, err := c.ClientKillByFilter(ctx, "TYPE", "pubsub").Result()
	if err != nil || killed == 0 {
		t.Fatalf("CLIENT KILL TYPE pubsub = %d, %v", killed, err)
	}

	// What comes next is a Resync, before any message.
	if inv := rec.next(t); !inv.Resync {
		t.Fatalf("after the kill: got %+v, want a resync first", inv)
	}
	seq, err = publish(ctx, tier, ns, sqlflight.Invalidation{Tables: []string{"u"}})
	if err != nil {
		t.Fatal(err)
	}
	if inv := rec.next(t); inv.Resync || inv.Seq != seq || !slices.Equal(inv.Tables, []string{"u"}) {
		t.Fatalf("after the resync: got %+v, want seq %d", inv, seq)
	}
	rec.none(t, 100*time.Millisecond) // one resync only
}

func TestSubscribeWhileRedisDown(t *testing.T) {
	addr := redisAddr(t)
	p := newProxy(t, addr)
	p.refuse.Store(true)
	setTimings(t, 200*time.Millisecond, time.Second)

	direct := newClient(t, addr)
	ns := newNS(t, direct)
	tier := New(newClient(t, p.addr()))
	defer tier.Close()

	rec := newRecorder()
	begin := time.Now()
	stop, err := tier.Subscribe(ns, rec.fn)
	if err != nil {
		t.Fatalf("Subscribe while Redis is down: %v", err)
	}
	defer stop()
	if d := time.Since(begin); d > 2*time.Second {
		t.Fatalf("Subscribe took %v while Redis was down", d)
	}
	rec.none(t, 100*time.Millisecond)

	p.refuse.Store(false)
	if inv := rec.next(t); !inv.Resync {
		t.Fatalf("got %+v, want a resync once the subscription works", inv)
	}
	seq, err := publish(ctxT(t), New(direct), ns, sqlflight.Invalidation{Tables: []string{"t"}})
	if err != nil {
		t.Fatal(err)
	}
	if inv := rec.next(t); inv.Seq != seq {
		t.Fatalf("got %+v, want seq %d", inv, seq)
	}
}

func TestSilentConnectionReplaced(t *testing.T) {
	addr := redisAddr(t)
	p := newProxy(t, addr)
	setTimings(t, time.Second, 100*time.Millisecond)

	direct := newClient(t, addr)
	ns := newNS(t, direct)
	tier := New(newClient(t, p.addr()))
	defer tier.Close()
	pub := New(direct)

	rec := subscribed(t, tier, ns)

	// Idle beyond the health interval: pings keep the subscription as is.
	time.Sleep(350 * time.Millisecond)
	rec.none(t, 0)

	p.blackhole() // the connection stays open but nothing goes through
	if inv := rec.next(t); !inv.Resync {
		t.Fatalf("got %+v, want a resync after the connection went silent", inv)
	}
	seq, err := publish(ctxT(t), pub, ns, sqlflight.Invalidation{All: true})
	if err != nil {
		t.Fatal(err)
	}
	if inv := rec.next(t); inv.Seq != seq || !inv.All {
		t.Fatalf("got %+v, want seq %d", inv, seq)
	}
}

func TestStop(t *testing.T) {
	tier, _, ns := setup(t)
	ctx := ctxT(t)
	rec := newRecorder()
	stop, err := tier.Subscribe(ns, rec.fn)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(stop)
	}
	wg.Wait()
	stop()
	if _, err := publish(ctx, tier, ns, sqlflight.Invalidation{All: true}); err != nil {
		t.Fatal(err)
	}
	rec.none(t, 100*time.Millisecond)

	// Close stops what is left, and later subscriptions fail.
	_, err = tier.Subscribe(ns, rec.fn)
	if err != nil {
		t.Fatal(err)
	}
	if err := tier.Close(); err != nil {
		t.Fatal(err)
	}
	if err := tier.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := tier.Subscribe(ns, rec.fn); !errors.Is(err, errClosed) {
		t.Fatalf("Subscribe after Close: %v", err)
	}
	// The client is the caller's: still open.
	if err := tier.client.Ping(ctx).Err(); err != nil {
		t.Fatalf("client closed by Close: %v", err)
	}
}

func TestOpen(t *testing.T) {
	addr := redisAddr(t)
	st, err := open("redis://" + addr + "/0")
	if err != nil {
		t.Fatal(err)
	}
	tier := st.(*Tier)
	defer tier.Close()
	if !tier.ownClient {
		t.Fatal("opened tier does not own its client")
	}
	ns := newNS(t, newClient(t, addr))
	ctx := ctxT(t)
	if _, err := tier.Store(ctx, ns, "k", []byte("x"), version(t, tier, ns), time.Minute); err != nil {
		t.Fatal(err)
	}
	if sv, err := tier.Fetch(ctx, ns, "k", nil); err != nil || string(sv.Data) != "x" {
		t.Fatalf("Fetch = %+v, %v", sv, err)
	}
	if err := tier.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := tier.Fetch(ctx, ns, "k", nil); !errors.Is(err, redis.ErrClosed) {
		t.Fatalf("Fetch after Close = %v; want the client closed", err)
	}

	if _, err := open("redis://" + addr + "/notadb"); err == nil {
		t.Fatal("open accepted a bad database number")
	}
}

func TestInvalidationEncoding(t *testing.T) {
	for _, inv := range []sqlflight.Invalidation{
		{Source: "s"},
		{All: true},
		{Tables: []string{"a", "b\nc", "\"", "\xff", ""}, Source: "ü"},
	} {
		inv.Seq, inv.Tag = 42, []byte{1, 2, 0xff}
		got, err := decodeInvalidation(encodeInvalidation(inv))
		if err != nil {
			t.Fatal(err)
		}
		if got.Seq != inv.Seq || got.All != inv.All || got.Source != inv.Source || !slices.Equal(got.Tables, inv.Tables) ||
			!bytes.Equal(got.Tag, inv.Tag) {
			t.Errorf("round trip of %+v gave %+v", inv, got)
		}
		if strings.Count(encodeInvalidation(inv), "\n") != 1+len(inv.Tables) {
			t.Errorf("%+v: a string was not kept on its line", inv)
		}
	}
	for _, bad := range []string{"", "1", "1\nsqlflight/1 all", "1\nsqlflight/1 all\nsource", "1\nsqlflight/1 some\n\"\"",
		"-1\nsqlflight/1 all\n\"\"", "sqlflight/2 1 all\n\"\"", "sqlflight/2 1 all 0g\n\"\"", "sqlflight/2 1 all 00 x\n\"\"",
		"sqlflight/2 -1 all 00\n\"\"", "sqlflight/2 1 all 00"} {
		if _, err := decodeInvalidation(bad); err == nil {
			t.Errorf("%q decoded", bad)
		}
	}
}

// setTimings shortens the subscription timings for a test.
func setTimings(t *testing.T, wait, health time.Duration) {
	oldWait, oldHealth := subscribeWait, healthInterval
	subscribeWait, healthInterval = wait, health
	t.Cleanup(func() { subscribeWait, healthInterval = oldWait, oldHealth })
}

// proxy forwards TCP connections to a Redis server; it can refuse new
// connections, or silence the ones open.
type proxy struct {
	ln     net.Listener
	target string
	refuse atomic.Bool

	mu     sync.Mutex
	closed bool
	pairs  []*pair
	wg     sync.WaitGroup
}

type pair struct {
	a, b   net.Conn
	silent atomic.Bool
}

func newProxy(t *testing.T, target string) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		a, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.refuse.Load() {
			_ = a.Close()
			continue
		}
		b, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = a.Close()
			continue
		}
		pr := &pair{a: a, b: b}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_, _ = a.Close(), b.Close()
			return
		}
		p.pairs = append(p.pairs, pr)
		p.wg.Add(2)
		p.mu.Unlock()
		go p.pipe(pr, a, b)
		go p.pipe(pr, b, a)
	}
}

// pipe copies from src to dst, dropping what it reads while the pair is
// silent.
func (p *proxy) pipe(pr *pair, dst, src net.Conn) {
	defer p.wg.Done()
	defer pr.a.Close()
	defer pr.b.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !pr.silent.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF, a reset or a close: the pair is done either way
		}
	}
}

// blackhole silences every connection open now; new ones work.
func (p *proxy) blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pr := range p.pairs {
		pr.silent.Store(true)
	}
}

func (p *proxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	p.closed = true
	for _, pr := range p.pairs {
		_ = pr.a.Close()
		_ = pr.b.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// subscribed subscribes a new recorder to ns; the subscription stops when
// the test ends.
func subscribed(t *testing.T, tier *Tier, ns string) *recorder {
	t.Helper()
	rec := newRecorder()
	stop, err := tier.Subscribe(ns, rec.fn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return rec
}

// slowStartProxy is a proxy to target that holds what a client sends for
// the first 400 ms of each connection.
func slowStartProxy(t *testing.T, target string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { _ = ln.Close(); <-done })
	go func() {
		defer close(done)
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				_ = c.Close()
			}
		}()
		for {
			a, err := ln.Accept()
			if err != nil {
				return
			}
			b, err := net.Dial("tcp", target)
			if err != nil {
				_ = a.Close()
				continue
			}
			conns = append(conns, a, b)
			go func() { time.Sleep(400 * time.Millisecond); _, _ = io.Copy(b, a) }()
			go func() { _, _ = io.Copy(a, b) }()
		}
	}()
	return ln.Addr().String()
}

// A Subscribe that returns before Redis confirms it reports a Resync with the
// confirmation: writes published meanwhile were missed.
func TestSlowSubscribeResyncs(t *testing.T) {
	addr := redisAddr(t)
	setTimings(t, 100*time.Millisecond, 10*time.Second)
	direct := newClient(t, addr)
	ns := newNS(t, direct)
	tier := New(newClient(t, slowStartProxy(t, addr)))
	defer tier.Close()
	pub := New(direct)

	rec := newRecorder()
	begin := time.Now()
	stop, err := tier.Subscribe(ns, rec.fn)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if d := time.Since(begin); d > 5*time.Second {
		t.Fatalf("Subscribe took %v", d)
	}
	// The Shield is live now; a write elsewhere is published before Redis saw the SUBSCRIBE.
	lost, err := publish(ctxT(t), pub, ns, sqlflight.Invalidation{Tables: []string{"t"}})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(700 * time.Millisecond)
	if _, err := publish(ctxT(t), pub, ns, sqlflight.Invalidation{Tables: []string{"u"}}); err != nil {
		t.Fatal(err)
	}
	inv := rec.next(t)
	if !inv.Resync && inv.Seq != lost {
		t.Errorf("write %d was lost and no Resync was delivered", lost)
	}
}

// version returns a version of the fleet sequence, as a lease holder gets
// one (the sequence starts when first used).
func version(t *testing.T, tier *Tier, ns string) uint64 {
	t.Helper()
	l, err := tier.Acquire(ctxT(t), ns, "version", time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	return l.Version
}

// Values written before the sequence and epochs were lost (evicted) are
// never served: the new sequence starts above them.
func TestEvictedEpochsServeNothingOlder(t *testing.T) {
	tier, c, ns := setup(t)
	ctx := ctxT(t)
	v := version(t, tier, ns)
	if _, err := tier.Store(ctx, ns, "k", []byte("old"), v, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := publish(ctx, tier, ns, sqlflight.Invalidation{Tables: []string{"t"}}); err != nil {
		t.Fatal(err)
	}
	// The write made "old" stale for readers of t; then Redis evicts the
	// epochs (and the sequence with them).
	if err := c.Del(ctx, ns+"epochs").Err(); err != nil {
		t.Fatal(err)
	}
	if sv, err := tier.Fetch(ctx, ns, "k", []string{"t"}); err != nil || sv.Data != nil {
		t.Fatalf("without epochs: %+v, %v; want a miss", sv, err)
	}
	time.Sleep(2 * time.Millisecond) // Redis's clock moves on
	w := version(t, tier, ns)        // a new sequence begins
	if w <= v {
		t.Fatalf("new sequence %d not above the old %d", w, v)
	}
	if sv, err := tier.Fetch(ctx, ns, "k", []string{"t"}); err != nil || sv.Data != nil {
		t.Fatalf("a value from before the eviction was served: %+v, %v", sv, err)
	}
	if _, err := tier.Store(ctx, ns, "k", []byte("new"), w, time.Minute); err != nil {
		t.Fatal(err)
	}
	if sv, err := tier.Fetch(ctx, ns, "k", []string{"t"}); err != nil || string(sv.Data) != "new" {
		t.Fatalf("%+v, %v", sv, err)
	}
}

// FuzzInvalidation feeds the message decoder anything: it never panics,
// never reads a message over its bounds, and what it reads encodes back to
// a message that reads the same.
func FuzzInvalidation(f *testing.F) {
	f.Add(encodeInvalidation(sqlflight.Invalidation{Seq: 7, Tag: []byte{1}, Source: "s", Tables: []string{"a", "b\nc"}}))
	f.Add(encodeInvalidation(sqlflight.Invalidation{Seq: 1 << 63, All: true, Tag: make([]byte, 16)}))
	f.Add("sqlflight/2 5 tables 00\n\"s\"\n\"\\xff\"")
	f.Add("garbage")
	f.Fuzz(func(t *testing.T, msg string) {
		inv, err := decodeInvalidation(msg)
		if err != nil {
			return
		}
		if len(msg) > maxMessageBytes || len(inv.Tables) > maxMessageTables || inv.Seq == 0 || len(inv.Tag) == 0 {
			t.Fatalf("%d bytes, %d tables, seq %d, %d-byte tag accepted", len(msg), len(inv.Tables), inv.Seq, len(inv.Tag))
		}
		re := encodeInvalidation(inv)
		if len(re) > maxMessageBytes {
			return // quoted anew, longer than it came (a raw string with tabs)
		}
		again, err := decodeInvalidation(re)
		if err != nil || again.Seq != inv.Seq || again.All != inv.All || again.Source != inv.Source ||
			!slices.Equal(again.Tables, inv.Tables) || !bytes.Equal(again.Tag, inv.Tag) {
			t.Fatalf("%+v re-encoded reads %+v, %v", inv, again, err)
		}
	})
}
