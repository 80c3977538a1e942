package sqlflight

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight/internal/epoch"
	"github.com/sqlflight/sqlflight/internal/shared"
)

// memTier is a SharedTier in memory, shared by the Shields of a test as
// Redis is by the instances of a fleet. fail makes every call fail; clock
// expires leases and values.
type memTier struct {
	clock         *fakeClock
	fail          atomic.Bool
	heldElsewhere atomic.Bool // no lease is ever granted
	failPublish   atomic.Bool
	calls         atomic.Int64
	fetchGate     atomic.Pointer[chan struct{}] // when set, Fetch waits for it to close

	mu     sync.Mutex
	seq    uint64
	vals   map[string]memVal
	leases map[string]memLease
	// epochs by ns+name (see SharedStore.Fetch): tables, "*", and the
	// coarse ("t\x00c") and tag ("t\x00tc\x00v") epochs of tables' rows;
	// sets are the pin sets of ns+table, at most maxPinSets; tags counts a
	// table's tag epochs, at most maxTags (0: 1<<16) before they are
	// dropped and the table's coarse epoch raised to the sequence.
	epochs  map[string]uint64
	sets    map[string][]pinSet
	tags    map[string]int
	maxTags int
	subs    map[int]func(Invalidation)
	nsub    int
}

type memVal struct {
	data    []byte
	version uint64
	until   time.Time
}

type memLease struct {
	token string
	until time.Time
}

func newMemTier(clk *fakeClock) *memTier {
	return &memTier{clock: clk, vals: map[string]memVal{}, leases: map[string]memLease{}, epochs: map[string]uint64{},
		sets: map[string][]pinSet{}, tags: map[string]int{}, subs: map[int]func(Invalidation){}}
}

var errMemDown = errors.New("memTier: down")

func (m *memTier) check(ctx context.Context) error {
	m.calls.Add(1)
	if m.fail.Load() {
		return errMemDown
	}
	return ctx.Err()
}

func (m *memTier) Fetch(ctx context.Context, ns, key string, tables []string) (SharedValue, error) {
	if g := m.fetchGate.Load(); g != nil {
		select {
		case <-*g:
		case <-ctx.Done():
			return SharedValue{}, ctx.Err()
		}
	}
	if err := m.check(ctx); err != nil {
		return SharedValue{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	v := SharedValue{Epochs: make([]uint64, len(tables)+1)}
	for i, t := range tables {
		table, rest, _ := strings.Cut(t, "\x00")
		if cols, ok := strings.CutPrefix(rest, "p"); ok {
			c := strings.Split(cols, "\x00")
			for _, ps := range m.sets[ns+table] {
				if epoch.Disjoint(ps.cols, c) {
					v.Epochs[i] = max(v.Epochs[i], ps.epoch)
				}
			}
			continue
		}
		v.Epochs[i] = m.epochs[ns+t]
	}
	v.Epochs[len(tables)] = m.epochs[ns+"*"]
	v.Seq = m.seq
	if e, ok := m.vals[ns+key]; ok && m.clock.Now().Before(e.until) {
		v.Data, v.Version = e.data, e.version
	}
	return v, nil
}

func (m *memTier) Store(ctx context.Context, ns, key string, data []byte, version uint64, ttl time.Duration) (bool, error) {
	if err := m.check(ctx); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.vals[ns+key]; ok && m.clock.Now().Before(e.until) && e.version >= version {
		return false, nil
	}
	m.vals[ns+key] = memVal{data: data, version: version, until: m.clock.Now().Add(ttl)}
	return true, nil
}

func (m *memTier) Acquire(ctx context.Context, ns, key string, ttl time.Duration) (Lease, error) {
	if err := m.check(ctx); err != nil {
		return Lease{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.seq++
	l := Lease{Version: m.seq, Token: fmt.Sprint("t", m.seq)}
	if e, ok := m.leases[ns+key]; !m.heldElsewhere.Load() && (!ok || !m.clock.Now().Before(e.until)) {
		m.leases[ns+key] = memLease{token: l.Token, until: m.clock.Now().Add(ttl)}
		l.Held = true
	}
	return l, nil
}

func (m *memTier) Release(ctx context.Context, ns, key string, l Lease) error {
	if err := m.check(ctx); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.leases[ns+key]; ok && e.token == l.Token {
		delete(m.leases, ns+key)
	}
	return nil
}

func (m *memTier) NextSeq(ctx context.Context, ns string) (uint64, error) {
	if err := m.check(ctx); err != nil {
		return 0, err
	}
	if m.failPublish.Load() {
		return 0, errMemDown
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.seq++
	return m.seq, nil
}

func (m *memTier) Publish(ctx context.Context, ns string, inv Invalidation) error {
	if err := m.check(ctx); err != nil {
		return err
	}
	if m.failPublish.Load() {
		return errMemDown
	}
	m.mu.Lock()
	raise := func(name string) { m.epochs[ns+name] = max(m.epochs[ns+name], inv.Seq) }
	if inv.All {
		raise("*")
	}
	for _, t := range inv.Tables {
		raise(t)
		raise(t + "\x00c")
	}
	for _, rp := range inv.Rows {
		raise(rp.Table)
		sets := m.sets[ns+rp.Table]
		i := slices.IndexFunc(sets, func(ps pinSet) bool { return slices.Equal(ps.cols, rp.Columns) })
		switch {
		case i >= 0:
			sets[i].epoch = max(sets[i].epoch, inv.Seq)
		case len(sets) < maxPinSets:
			m.sets[ns+rp.Table] = append(sets, pinSet{cols: rp.Columns, epoch: inv.Seq})
		default:
			raise(rp.Table + "\x00c")
			continue
		}
		for j, c := range rp.Columns {
			for _, v := range rp.Values[j] {
				k := rp.Table + "\x00t" + c + "\x00" + v
				if _, ok := m.epochs[ns+k]; !ok {
					m.tags[ns+rp.Table]++
				}
				raise(k)
			}
		}
		if limit := cmp.Or(m.maxTags, 1<<16); m.tags[ns+rp.Table] > limit {
			for k := range m.epochs {
				if strings.HasPrefix(k, ns+rp.Table+"\x00t") {
					delete(m.epochs, k)
				}
			}
			delete(m.tags, ns+rp.Table)
			m.epochs[ns+rp.Table+"\x00c"] = max(m.epochs[ns+rp.Table+"\x00c"], m.seq)
		}
	}
	var subs []func(Invalidation)
	for _, fn := range m.subs {
		subs = append(subs, fn)
	}
	m.mu.Unlock()
	for _, fn := range subs {
		fn(inv)
	}
	return nil
}

func (m *memTier) Subscribe(ns string, fn func(Invalidation)) (func(), error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.nsub++
	id := m.nsub
	m.subs[id] = fn
	return func() {
		m.mu.Lock()
		delete(m.subs, id)
		m.mu.Unlock()
	}, nil
}

// resync tells every subscriber that messages may have been lost.
func (m *memTier) resync() {
	m.mu.Lock()
	var subs []func(Invalidation)
	for _, fn := range m.subs {
		subs = append(subs, fn)
	}
	m.mu.Unlock()
	for _, fn := range subs {
		fn(Invalidation{Resync: true})
	}
}

// instance is one member of a simulated fleet: its own Shield and its own
// database counter, on the shared memTier.
type instance struct {
	db *sql.DB
	s  *Shield
	c  *counting
}

func fleetOf(t *testing.T, n int, tier *memTier, opts Options) []instance {
	t.Helper()
	return fleetOn(t, n, tier, tier.clock, opts)
}

// fleetOn is fleetOf on any tier.
func fleetOn(t *testing.T, n int, tier SharedTier, clk *fakeClock, opts Options) []instance {
	t.Helper()
	opts.Clock = clk
	if opts.SharedSecret == "" && !opts.InsecureTrustSharedTier {
		opts.SharedSecret = testSecret
	}
	var out []instance
	for range n {
		c := newCounting()
		db, s := openFake(t, c.d, opts, Shared(tier))
		t.Cleanup(func() { _ = s.Close() })
		out = append(out, instance{db: db, s: s, c: c})
	}
	return out
}

// testSecret is the fleet secret of the tests' Shields.
const testSecret = "a test fleet secret, 32 bytes.."

// testSecretDSN is a secret for key=value DSNs (no spaces).
const testSecretDSN = "a-test-fleet-secret-of-32-bytes."

func TestSharedTierServesOtherInstances(t *testing.T) {
	tier := newMemTier(newFakeClock())
	f := fleetOf(t, 3, tier, Options{})
	if n := readShared(t, f[0], ttlQuery, 1); n != 1 {
		t.Fatal(n)
	}
	for _, in := range f[1:] {
		if n := readN(t, in.db, ttlQuery, 1); n != 1 {
			t.Fatalf("other instance read %d, want the shared 1", n)
		}
		if q := in.c.d.queries.Load(); q != 0 {
			t.Fatalf("other instance queried its database %d times", q)
		}
		if st := in.s.Stats(); st.SharedHits != 1 || st.CacheEntries != 1 || st.SharedState != "up" {
			t.Fatalf("%+v", st)
		}
		// The L2 hit filled L1: no further tier call.
		before := tier.calls.Load()
		readN(t, in.db, ttlQuery, 1)
		if tier.calls.Load() != before {
			t.Error("an L1 hit called the tier")
		}
	}
	if st := f[0].s.Stats(); st.LeasesAcquired != 1 || st.SharedWrites != 1 || st.SharedMisses != 1 {
		t.Fatalf("%+v", st)
	}
	// Keys are digests: no SQL, no argument.
	tier.mu.Lock()
	for k := range tier.vals {
		if !strings.HasPrefix(k, DefaultKeyPrefix) || strings.Contains(k, "items") || len(k) != len(DefaultKeyPrefix)+32 {
			t.Errorf("key %q", k)
		}
	}
	tier.mu.Unlock()
}

// TestInstanceWithoutL1SharesThroughTheTier: an instance whose L1 holds
// nothing (MaxBytes 1) still writes what it queried to the tier, and
// another instance reads it from there.
func TestInstanceWithoutL1SharesThroughTheTier(t *testing.T) {
	tier := newMemTier(newFakeClock())
	noL1 := fleetOf(t, 1, tier, Options{MaxBytes: 1})[0]
	other := fleetOf(t, 1, tier, Options{})[0]
	if n := readShared(t, noL1, ttlQuery, 1); n != 1 {
		t.Fatal(n)
	}
	if n := readN(t, other.db, ttlQuery, 1); n != 1 || other.c.d.queries.Load() != 0 {
		t.Fatalf("the other instance read %d after %d queries of its own, want the shared 1", n, other.c.d.queries.Load())
	}
	// The instance without L1 asks the tier each time, never its database.
	if n := readN(t, noL1.db, ttlQuery, 1); n != 1 || noL1.c.d.queries.Load() != 1 {
		t.Fatalf("read %d after %d queries, want the shared 1 after one", n, noL1.c.d.queries.Load())
	}
	if st := noL1.s.Stats(); st.SharedHits != 1 || st.CacheEntries != 0 {
		t.Fatalf("%+v", st)
	}
}

func TestSharedTierKeyPrefixSeparates(t *testing.T) {
	tier := newMemTier(newFakeClock())
	a := fleetOf(t, 1, tier, Options{KeyPrefix: "a:"})
	b := fleetOf(t, 1, tier, Options{KeyPrefix: "b:"})
	readN(t, a[0].db, ttlQuery, 1)
	readN(t, b[0].db, ttlQuery, 1)
	if b[0].c.d.queries.Load() != 1 {
		t.Fatal("instances under different prefixes shared a result")
	}
}

func TestLeaseLoserWaitsForTheHolder(t *testing.T) {
	tier := newMemTier(newFakeClock())
	f := fleetOf(t, 2, tier, Options{})
	g := newGate()
	f[0].c.gate.Store(g)
	f[0].c.n.Store(41) // the gate holds queries after the first: make this one wait
	done := make(chan int64)
	go func() { done <- readN(t, f[0].db, ttlQuery, 1) }()
	waitFor(t, "the holder's query", func() bool { return f[0].s.Stats().LeasesAcquired == 1 })
	got := make(chan int64)
	go func() { got <- readN(t, f[1].db, ttlQuery, 1) }()
	waitFor(t, "the loser's wait", func() bool { return f[1].s.Stats().LeaseWaits == 1 })
	close(g.ch)
	if n := <-done; n != 42 {
		t.Fatal(n)
	}
	if n := <-got; n != 42 {
		t.Fatalf("loser got %d, want the holder's 42", n)
	}
	if q := f[1].c.d.queries.Load(); q != 0 {
		t.Fatalf("loser queried its database %d times", q)
	}
}

func TestLeaseLoserGivesUpAfterWait(t *testing.T) {
	tier := newMemTier(newFakeClock())
	f := fleetOf(t, 1, tier, Options{})
	tier.heldElsewhere.Store(true) // another instance holds every lease and never writes
	q := "/* sqlflight: soft=10s wait=300ms */ SELECT n FROM items WHERE id = $1"
	if n := readN(t, f[0].db, q, 1); n != 1 {
		t.Fatal(n)
	}
	waitFor(t, "the write to the tier", func() bool { return f[0].s.Stats().SharedWrites == 1 })
	st := f[0].s.Stats()
	if st.LeaseWaits != 1 || st.LeaseWaitExpired != 1 || f[0].c.d.queries.Load() != 1 {
		t.Fatalf("%+v", st)
	}
}

func TestWriteInvalidatesEveryInstance(t *testing.T) {
	tier := newMemTier(newFakeClock())
	f := fleetOf(t, 2, tier, Options{})
	readN(t, f[0].db, ttlQuery, 1) // 1: in L2 and A's L1
	readN(t, f[1].db, ttlQuery, 1) // B's L1 from L2
	if _, err := f[0].db.Exec("UPDATE items SET n = n + 1 WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	// B heard of A's write: neither its L1 nor L2 serve the old result.
	if n := readN(t, f[1].db, ttlQuery, 1); n != 1 || f[1].c.d.queries.Load() != 1 {
		t.Fatalf("B read %d after %d queries of its own: want a fresh query", n, f[1].c.d.queries.Load())
	}
	if st := f[1].s.Stats(); st.InvalidationsHeard != 1 {
		t.Fatalf("%+v", st)
	}
	if st := f[0].s.Stats(); st.InvalidationsSent != 1 {
		t.Fatalf("%+v", st)
	}
	// A reads B's new result from L2 (written after the write).
	if n := readN(t, f[0].db, ttlQuery, 1); n != 1 || f[0].c.d.queries.Load() != 1 {
		t.Fatalf("A read %d with %d queries", n, f[0].c.d.queries.Load())
	}
	// Invalidate reaches the fleet too.
	f[1].s.Invalidate("items")
	readN(t, f[0].db, ttlQuery, 1)
	if f[0].c.d.queries.Load() != 2 {
		t.Fatal("Invalidate on B did not drop A's entry")
	}
}

func TestOlderWriteDoesNotOverwriteNewer(t *testing.T) {
	tier := newMemTier(newFakeClock())
	f := fleetOf(t, 3, tier, Options{LeaseTTL: time.Second})
	g := newGate()
	f[0].c.gate.Store(g)
	f[0].c.n.Store(99) // A's query answers 100, after the gate
	done := make(chan int64)
	go func() { done <- readN(t, f[0].db, ttlQuery, 1) }()
	waitFor(t, "A's lease", func() bool { return f[0].s.Stats().LeasesAcquired == 1 })
	tier.clock.Add(2 * time.Second) // A's lease expires: B takes the next one
	if n := readShared(t, f[1], ttlQuery, 1); n != 1 {
		t.Fatal(n)
	}
	close(g.ch)
	if n := <-done; n != 100 {
		t.Fatal(n)
	}
	waitFor(t, "A's refused write", func() bool { return f[0].s.Stats().SharedSuperseded == 1 })
	if st := f[0].s.Stats(); st.SharedWrites != 0 {
		t.Fatalf("A: %+v", st)
	}
	if n := readN(t, f[2].db, ttlQuery, 1); n != 1 {
		t.Fatalf("C read %d: the slow former holder overwrote the newer value", n)
	}
}

func TestTierOutageIsInvisibleAndRecovers(t *testing.T) {
	tier := newMemTier(newFakeClock())
	f := fleetOf(t, 2, tier, Options{})
	tier.fail.Store(true)
	for i := range 5 {
		if n := readN(t, f[0].db, ttlQuery, i); n < 1 {
			t.Fatal(n)
		}
	}
	if st := f[0].s.Stats(); st.SharedState != "down" || st.SharedErrors != shared.Failures || st.SharedTransitions != 1 {
		t.Fatalf("%+v", st)
	}
	// A write while down is published when the tier is back.
	if _, err := f[0].db.Exec("DELETE FROM items WHERE id = 7"); err != nil {
		t.Fatal(err)
	}
	readN(t, f[1].db, ttlQuery, 7) // B fills L1 and L2 (B has not failed yet? it fails too)
	tier.fail.Store(false)
	tier.clock.Add(time.Minute) // past the tier's back-off
	readN(t, f[0].db, ttlQuery, 100)
	st := f[0].s.Stats()
	if st.SharedState != "up" || st.SharedTransitions != 2 || st.InvalidationsSent != 1 {
		t.Fatalf("%+v", st)
	}
	if f[1].s.Stats().InvalidationsHeard != 1 {
		t.Fatal("B did not hear the write made while the tier was down")
	}
}

func TestPendingInvalidationKeepsReadsOffTheTier(t *testing.T) {
	tier := newMemTier(newFakeClock())
	f := fleetOf(t, 2, tier, Options{})
	readN(t, f[1].db, ttlQuery, 1) // L2 holds 1
	tier.failPublish.Store(true)
	if _, err := f[0].db.Exec("UPDATE items SET n = 5"); err != nil { // the publish fails
		t.Fatal(err)
	}
	// A may not take the old L2 value: its write is not published yet.
	if n := readN(t, f[0].db, ttlQuery, 1); n != 1 || f[0].c.d.queries.Load() != 1 {
		t.Fatalf("A read %d with %d queries of its own", n, f[0].c.d.queries.Load())
	}
	if st := f[0].s.Stats(); st.SharedSkipped != 1 || st.InvalidationsSent != 0 {
		t.Fatalf("%+v", st)
	}
	tier.failPublish.Store(false)
	// The next read publishes it first.
	readN(t, f[0].db, ttlQuery, 2)
	if st := f[0].s.Stats(); st.InvalidationsSent != 1 || st.SharedSkipped != 1 {
		t.Fatalf("%+v", st)
	}
	if f[1].s.Stats().InvalidationsHeard != 1 {
		t.Fatal("B never heard the write")
	}
	if n := readN(t, f[1].db, ttlQuery, 1); n != 2 || f[1].c.d.queries.Load() != 2 {
		t.Fatalf("B read %d with %d queries: the old value survived the write", n, f[1].c.d.queries.Load())
	}
}

func TestResyncDropsL1(t *testing.T) {
	tier := newMemTier(newFakeClock())
	f := fleetOf(t, 1, tier, Options{})
	readShared(t, f[0], ttlQuery, 1)
	tier.mu.Lock()
	clear(tier.vals) // so that the next read reaches the database
	tier.mu.Unlock()
	tier.resync()
	readN(t, f[0].db, ttlQuery, 1)
	if q := f[0].c.d.queries.Load(); q != 2 {
		t.Fatalf("queries = %d: a resync must drop L1", q)
	}
	if f[0].s.Stats().InvalidationResyncs != 1 {
		t.Fatal("resync not counted")
	}
}

func TestStaleRefreshOncePerFleet(t *testing.T) {
	tier := newMemTier(newFakeClock())
	f := fleetOf(t, 4, tier, Options{})
	for i, in := range f {
		in.c.n.Store(int64(i) * 100) // instance i answers i*100+1, i*100+2, …
	}
	readShared(t, f[0], ttlQuery, 1)
	for _, in := range f[1:] {
		readN(t, in.db, ttlQuery, 1)
	}
	tier.clock.Add(11 * time.Second) // stale everywhere at once (same deadlines)
	for range 20 {
		for _, in := range f {
			readN(t, in.db, ttlQuery, 1)
		}
		for _, in := range f {
			settle(t, in.s)
		}
		tier.clock.Add(10 * time.Millisecond)
	}
	var total int64
	want := int64(-1)
	for i, in := range f {
		q := in.c.d.queries.Load()
		total += q
		if i == 0 && q == 2 {
			want = 2
		} else if i > 0 && q == 1 {
			want = int64(i)*100 + 1
		}
	}
	if total != 2 {
		t.Fatalf("fleet queries = %d, want 2 (the first fill and one refresh)", total)
	}
	for i, in := range f {
		if n := readN(t, in.db, ttlQuery, 1); n != want {
			t.Errorf("instance %d reads %d after the refresh, want %d", i, n, want)
		}
	}
}

// readShared reads through in and waits until its result is in the tier.
func readShared(t *testing.T, in instance, q string, args ...any) int64 {
	t.Helper()
	w := in.s.Stats().SharedWrites
	n := readN(t, in.db, q, args...)
	waitFor(t, "the write to the tier", func() bool { return in.s.Stats().SharedWrites > w })
	return n
}

func TestCorruptSharedValueIsAMiss(t *testing.T) {
	tier := newMemTier(newFakeClock())
	f := fleetOf(t, 2, tier, Options{})
	readShared(t, f[0], ttlQuery, 1)
	tier.mu.Lock()
	for k, v := range tier.vals {
		d := append([]byte(nil), v.data...)
		d[len(d)-3] ^= 0xff
		v.data = d
		tier.vals[k] = v
	}
	tier.mu.Unlock()
	if n := readN(t, f[1].db, ttlQuery, 1); n != 1 || f[1].c.d.queries.Load() != 1 {
		t.Fatalf("read %d with %d queries: %+v", n, f[1].c.d.queries.Load(), f[1].s.Stats())
	}
	if st := f[1].s.Stats(); st.SharedDecodeErrors == 0 {
		t.Fatalf("%+v", st)
	}
}

// hookTier runs a test's hooks around the calls of a memTier, once each.
type hookTier struct {
	*memTier
	onPublish    atomic.Pointer[func()]
	onAcquire    atomic.Pointer[func()]
	afterAcquire atomic.Pointer[func()]
	afterPublish atomic.Pointer[func()]
}

func (h *hookTier) Publish(ctx context.Context, ns string, inv Invalidation) error {
	if f := h.onPublish.Swap(nil); f != nil {
		(*f)()
	}
	err := h.memTier.Publish(ctx, ns, inv)
	if f := h.afterPublish.Swap(nil); f != nil {
		(*f)()
	}
	return err
}

func (h *hookTier) Acquire(ctx context.Context, ns, key string, ttl time.Duration) (Lease, error) {
	if f := h.onAcquire.Swap(nil); f != nil {
		(*f)()
	}
	l, err := h.memTier.Acquire(ctx, ns, key, ttl)
	if f := h.afterAcquire.Swap(nil); f != nil {
		(*f)()
	}
	return l, err
}

func hookFleet(t *testing.T, n int, ht *hookTier, opts Options) []instance {
	t.Helper()
	return fleetOn(t, n, ht, ht.clock, opts)
}

func TestOwnWriteIsNotUndoneByTheTier(t *testing.T) {
	ht := &hookTier{memTier: newMemTier(newFakeClock())}
	f := hookFleet(t, 2, ht, Options{})
	readShared(t, f[1], ttlQuery, 1) // B's value in L2
	readN(t, f[0].db, ttlQuery, 1)   // A's L1 from L2
	hook := func() {
		done := make(chan struct{})
		go func() { defer close(done); readN(t, f[0].db, ttlQuery, 1) }() // concurrent reader on A
		<-done
	}
	ht.onPublish.Store(&hook)
	if _, err := f[0].db.Exec("UPDATE items SET n = n + 1 WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	readN(t, f[0].db, ttlQuery, 1)
	if q := f[0].c.d.queries.Load(); q == 0 {
		t.Fatalf("RYW violated: A read after its own write without any query (pre-write L2 value in L1)")
	}
}

func TestRefreshFollowerNeverSeesLeaseErrors(t *testing.T) {
	ht := &hookTier{memTier: newMemTier(newFakeClock())}
	f := hookFleet(t, 1, ht, Options{})
	readShared(t, f[0], ttlQuery, 1)
	ht.clock.Add(11 * time.Second) // stale
	ht.heldElsewhere.Store(true)
	errc := make(chan error, 1)
	hook := func() {
		ht.clock.Add(3 * time.Minute) // entry gone (past last)
		fol := f[0].s.Stats().Followers
		go func() {
			var n int64
			errc <- f[0].db.QueryRow(ttlQuery, 1).Scan(&n)
		}()
		waitFor(t, "follower joins the refresh", func() bool { return f[0].s.Stats().Followers > fol })
	}
	ht.onAcquire.Store(&hook)
	readN(t, f[0].db, ttlQuery, 1) // stale hit, starts refresh
	if err := <-errc; err != nil {
		t.Fatalf("caller got a tier error: %v", err)
	}
}

func TestLeaseReleasedWhenLeaderLeaves(t *testing.T) {
	ht := &hookTier{memTier: newMemTier(newFakeClock())}
	f := hookFleet(t, 1, ht, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	hook := func() { cancel() }
	ht.afterAcquire.Store(&hook)
	var n int64
	err := f[0].db.QueryRowContext(ctx, ttlQuery, 1).Scan(&n)
	t.Logf("err=%v", err)
	time.Sleep(50 * time.Millisecond)
	ht.mu.Lock()
	defer ht.mu.Unlock()
	if len(ht.leases) != 0 {
		t.Fatalf("lease leaked: %v", ht.leases)
	}
}

func TestLeaseReleasedWhenBreakerRefuses(t *testing.T) {
	ht := &hookTier{memTier: newMemTier(newFakeClock())}
	f := hookFleet(t, 1, ht, Options{BreakerFailures: 1})
	f[0].c.fail.Store(true)
	var n int64
	err := f[0].db.QueryRow(ttlQuery, 2).Scan(&n)
	t.Logf("first err=%v", err)
	settle(t, f[0].s)
	err = f[0].db.QueryRow(ttlQuery, 1).Scan(&n)
	t.Logf("second err=%v state=%s", err, f[0].s.Stats().BreakerState)
	waitFor(t, "every lease given back", func() bool {
		ht.mu.Lock()
		defer ht.mu.Unlock()
		return len(ht.leases) == 0
	})
}

func TestLeaseReleasedWhenOverloaded(t *testing.T) {
	ht := &hookTier{memTier: newMemTier(newFakeClock())}
	f := hookFleet(t, 1, ht, Options{MaxInflight: 1, QueueTimeout: 20 * time.Millisecond})
	g := newGate()
	f[0].c.gate.Store(g)
	f[0].c.n.Store(5)
	go func() { var n int64; _ = f[0].db.QueryRow(ttlQuery, 2).Scan(&n) }()
	waitFor(t, "slot taken", func() bool { return f[0].s.Stats().InFlight == 1 })
	var n int64
	err := f[0].db.QueryRow(ttlQuery, 1).Scan(&n)
	t.Logf("err=%v", err)
	ht.mu.Lock()
	nl := len(ht.leases)
	ht.mu.Unlock()
	close(g.ch)
	t.Logf("leases while blocked=%d", nl)
	// The other read's origin gives its lease back after it wrote its
	// result to the tier, which is after it stopped counting as in flight.
	waitFor(t, "every lease given back", func() bool {
		ht.mu.Lock()
		defer ht.mu.Unlock()
		return len(ht.leases) == 0
	})
}

func TestNewLeaseHolderLooksAgainBeforeQuerying(t *testing.T) {
	ht := &hookTier{memTier: newMemTier(newFakeClock())}
	f := hookFleet(t, 2, ht, Options{})
	g := newGate()
	f[0].c.gate.Store(g)
	f[0].c.n.Store(41)
	done := make(chan int64)
	go func() { done <- readN(t, f[0].db, ttlQuery, 1) }()
	waitFor(t, "A's lease", func() bool { return f[0].s.Stats().LeasesAcquired == 1 })
	hook := func() {
		close(g.ch)
		waitFor(t, "A stored+released", func() bool {
			ht.mu.Lock()
			defer ht.mu.Unlock()
			return f[0].s.Stats().SharedWrites == 1 && len(ht.leases) == 0
		})
	}
	ht.onAcquire.Store(&hook)
	n := readN(t, f[1].db, ttlQuery, 1)
	<-done
	if q := f[1].c.d.queries.Load(); q != 0 {
		t.Fatalf("B queried its database (%d) though A's value was in L2; got %d", q, n)
	}
}

func TestFlushKeepsWritesThatFailedMeanwhile(t *testing.T) {
	ht := &hookTier{memTier: newMemTier(newFakeClock())}
	f := hookFleet(t, 2, ht, Options{})
	A, B := f[0], f[1]
	ht.fail.Store(true)
	for i := range 4 {
		readN(t, A.db, ttlQuery, 100+i) // failures take A's tier down
	}
	if A.s.Stats().SharedState != "down" {
		t.Fatal("not down")
	}
	if _, err := A.db.Exec("UPDATE items SET n = n + 1 WHERE id = 1"); err != nil { // W1: pending
		t.Fatal(err)
	}
	ht.fail.Store(false)
	ht.clock.Add(time.Second)
	hook := func() {
		// The flush's Publish landed; before its answer, B fills L2 and A writes again (W2).
		done := make(chan struct{})
		go func() {
			defer close(done)
			readShared(t, B, ttlQuery, 1)
			if _, err := A.db.Exec("UPDATE items SET n = n + 1 WHERE id = 1"); err != nil {
				t.Error(err)
			}
		}()
		<-done
	}
	ht.afterPublish.Store(&hook)
	readN(t, A.db, ttlQuery, 7) // probe: flushes W1
	before := A.c.d.queries.Load()
	n := readN(t, A.db, ttlQuery, 1)
	if A.c.d.queries.Load() == before {
		t.Fatalf("A served B's pre-W2 value %d after its own write W2 (W2's invalidation was lost)", n)
	}
}

// hangTier's Fetch hangs while hang is set: until its context ends, or,
// with deaf set, for 300 ms whatever its context says (a client that
// ignores contexts). Publish panics while panicky is set.
type hangTier struct {
	*memTier
	hang, deaf, panicky atomic.Bool
}

func (h *hangTier) Fetch(ctx context.Context, ns, key string, tables []string) (SharedValue, error) {
	if h.hang.Load() {
		if h.deaf.Load() {
			time.Sleep(300 * time.Millisecond) // short enough for goleak's patience

			return SharedValue{}, errors.New("too late")
		}
		<-ctx.Done()
		return SharedValue{}, ctx.Err()
	}
	return h.memTier.Fetch(ctx, ns, key, tables)
}

func (h *hangTier) Publish(ctx context.Context, ns string, inv Invalidation) error {
	if h.panicky.Load() {
		panic("tier bug")
	}
	return h.memTier.Publish(ctx, ns, inv)
}

func TestHungTierFailsNoCaller(t *testing.T) {
	for _, deaf := range []bool{false, true} {
		t.Run(fmt.Sprintf("deaf=%v", deaf), func(t *testing.T) {
			ht := &hangTier{memTier: newMemTier(newFakeClock())}
			c := newCounting()
			db, s := openFake(t, c.d, Options{Clock: ht.clock, SharedSecret: testSecret}, Shared(ht))
			t.Cleanup(func() { _ = s.Close() })
			ht.hang.Store(true)
			ht.deaf.Store(deaf)
			// Callers whose deadline is near wait half of it, then query.
			for i := range 5 {
				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				var n int64
				if err := db.QueryRowContext(ctx, ttlQuery, i).Scan(&n); err != nil {
					t.Fatalf("a caller failed because the tier hung: %v", err)
				}
				cancel()
			}
			// The calls they left ran on to RedisTimeout and told the
			// breaker: the tier goes down.
			waitFor(t, "the tier down", func() bool { return s.Stats().SharedState == "down" })
			// Callers without a deadline are answered too (from the database).
			readN(t, db, ttlQuery, 100)
			if st := s.Stats(); st.SharedErrors < shared.Failures {
				t.Fatalf("%+v", st)
			}
		})
	}
}

func TestPanickingTierIsATierError(t *testing.T) {
	ht := &hangTier{memTier: newMemTier(newFakeClock())}
	c := newCounting()
	db, s := openFake(t, c.d, Options{Clock: ht.clock, SharedSecret: testSecret}, Shared(ht))
	t.Cleanup(func() { _ = s.Close() })
	ht.panicky.Store(true)
	if _, err := db.Exec("UPDATE items SET n = 1"); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		readN(t, db, ttlQuery, i) // flushes the pending write: panics, recovered
	}
	ht.panicky.Store(false)
	ht.clock.Add(time.Minute)
	waitFor(t, "the write published", func() bool {
		readN(t, db, ttlQuery, 1)
		return s.Stats().InvalidationsSent == 1
	})
	if st := s.Stats(); st.SharedState != "up" || st.SharedErrors == 0 {
		t.Fatalf("%+v", st)
	}
}

func TestLoserLeavesTimeToQuery(t *testing.T) {
	ht := &hookTier{memTier: newMemTier(newFakeClock())}
	f := hookFleet(t, 1, ht, Options{})
	ht.heldElsewhere.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	var n int64
	if err := f[0].db.QueryRowContext(ctx, ttlQuery, 1).Scan(&n); err != nil {
		t.Fatalf("a loser whose holder never writes failed instead of querying: %v", err)
	}
	if st := f[0].s.Stats(); st.LeaseWaitExpired != 1 || f[0].c.d.queries.Load() != 1 {
		t.Fatalf("%+v", st)
	}
}

func TestConnectorsShareOnlyUnderTheirOwnName(t *testing.T) {
	tier := newMemTier(newFakeClock())
	s := New(Options{Clock: tier.clock, SharedSecret: testSecret}, Shared(tier))
	t.Cleanup(func() { _ = s.Close() })
	open := func(base int64, name string, plain bool) (*sql.DB, *counting) {
		c := newCounting()
		c.n.Store(base)
		var db *sql.DB
		if plain {
			db = sql.OpenDB(s.Connector(dsnConnector{drv: c.d, dsn: "x"}))
		} else {
			db = sql.OpenDB(s.SharedConnector(dsnConnector{drv: c.d, dsn: "x"}, name))
		}
		t.Cleanup(func() { _ = db.Close() })
		return db, c
	}
	db1, _ := open(0, "tenant1/app", false)
	db2, _ := open(1000, "tenant2/app", false)
	db3, c3 := open(2000, "tenant1/app", false)
	db4, _ := open(3000, "", true)
	w := s.Stats().SharedWrites
	readN(t, db1, ttlQuery, 1)
	waitFor(t, "L2 write", func() bool { return s.Stats().SharedWrites > w })
	if n := readN(t, db2, ttlQuery, 1); n != 1001 {
		t.Fatalf("a connector of another name got connector 1's row %d", n)
	}
	if n := readN(t, db3, ttlQuery, 1); n != 1 || c3.d.queries.Load() != 0 {
		t.Fatalf("a connector of the same name read %d", n)
	}
	if n := readN(t, db4, ttlQuery, 1); n != 3001 {
		t.Fatalf("a plain connector read %d from the shared tier", n)
	}
}

// closingTier is a memTier that counts its Closes.
type closingTier struct {
	*memTier
	closed atomic.Int32
}

func (c *closingTier) Close() error { c.closed.Add(1); return nil }

var opened []*closingTier

func init() {
	RegisterTier("memtest", func(string) (SharedTier, error) {
		t := &closingTier{memTier: newMemTier(newFakeClock())}
		opened = append(opened, t)
		return t, nil
	})
}

func TestDSNTierIsClosedWithItsLastShield(t *testing.T) {
	opened = nil
	s := New()
	d := s.Wrap(&fakeDriver{})
	openShield := func(dsn string) *Shield {
		c, err := d.Open(dsn)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.Close()
		e, err := d.(*wrappedDriver).scopeFor(dsn, d)
		if err != nil {
			t.Fatal(err)
		}
		return e.s.shield
	}
	a := openShield("db=1 sqlflight.shared=memtest://x sqlflight.key_prefix=a: sqlflight.shared_secret=" + testSecretDSN)
	b := openShield("db=2 sqlflight.shared=memtest://x sqlflight.shared_secret=" + testSecretDSN)
	if len(opened) != 1 || a.tierImpl != b.tierImpl {
		t.Fatalf("%d tiers opened for one target", len(opened))
	}
	_ = a.Close()
	if opened[0].closed.Load() != 0 {
		t.Fatal("closed while a Shield still uses it")
	}
	_ = b.Close()
	_ = b.Close()
	if opened[0].closed.Load() != 1 {
		t.Fatalf("closed %d times, want once after the last Shield", opened[0].closed.Load())
	}
	// A DSN opened again gets a new one.
	c := openShield("db=1 sqlflight.shared=memtest://x sqlflight.key_prefix=a: sqlflight.shared_secret=" + testSecretDSN)
	t.Cleanup(func() { _ = c.Close() })
	if c.tierImpl == a.tierImpl || len(opened) != 2 {
		t.Fatal("a closed tier was reused")
	}
	// A bad parameter opens no tier; an unknown scheme names the import.
	if _, err := d.Open("db=3 sqlflight.shared=memtest://y sqlflight.redis_timeout=soon"); !errors.Is(err, ErrBadDSN) || len(opened) != 2 {
		t.Fatalf("%v, %d tiers", err, len(opened))
	}
	if _, err := d.Open("db=4 sqlflight.shared=redis://u:secret@h:1/0"); !errors.Is(err, ErrBadDSN) ||
		!strings.Contains(err.Error(), "redistier") || strings.Contains(err.Error(), "secret") {
		t.Fatalf("%v", err)
	}
}
