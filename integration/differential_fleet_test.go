package integration

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/redis/go-redis/v9"

	"github.com/sqlflight/sqlflight"
	"github.com/sqlflight/sqlflight/redistier"
)

// The fleet workloads of TestDifferential: readers and writers spread over
// instances of one fleet (each its own Shield and Redis client) that share
// one Redis namespace (a KeyPrefix of their own) and one scope name, so that
// they share values in Redis and hear each other's writes.
//
// What counts as a violation across a fleet. A read on instance X returns
// version v of an object; version v+1 was made by a write through instance
// W. The check is exact, with no time window of its own: every instance's
// tier is wrapped, which records when each of its Publish calls began and
// returned (and the fleet sequence number it carried) and when its
// subscription callback returned for each message (the Shield applies a
// message in that callback, so from then on X's epochs know the write).
// Each instance has one writer goroutine, so a write's messages are the
// publications its instance began while the write ran.
//
//   - ryw: X == W and the write returned before the read began (as in one
//     process).
//   - heard: X != W and X had applied the write's message before the read
//     began: from then on no L1 entry, flight or tier value older than the
//     write may answer X. A message X never received counts as applied when
//     X subscribed if it was published before (X never had the old value in
//     L1: everything X holds it took after it subscribed, from Redis, whose
//     epochs already knew the write), or when X resynchronized after it;
//     otherwise it is reported as lost-msg (and reads that depend on it are
//     not judged by it).
//   - tier: X is an "exact" instance — no L1 (MaxBytes 1) and one reader,
//     so no flight or entry of X outlives a read: every value it returns was
//     fetched from Redis after the read began or queried by the read itself
//     — and the write's publication returned before the read began. This is
//     the tier's own guarantee ("no instance takes from the tier a result
//     computed before a write whose publication has returned"), checked
//     without waiting for any message.
//   - stale: as in one process, older than the reader's own policy allows
//     (+ diffSlack): a message that is slow to arrive must not keep a value
//     past the reader's TTL either.
//
// Anything else is the fleet's documented window: an instance with L1 that
// has not yet heard a write may serve what it held before (L1, or a flight
// that started before). The report gives how long messages took to arrive
// (from the publication's return to the callback's).
//
// Instances join mid-run (a third of the way): they never heard the
// messages before, so only Redis's epochs keep them from older values.

// diffFleet is a fleet workload's instances.
type diffFleet struct {
	layout  []diffNodeSpec
	nodes   []*diffFleetNode // by index in layout; joiners once they joined
	readers []int            // reader → instance
	writers []int            // writer → instance
	prefix  string
	scope   string
	addr    string
	cfg     *pgx.ConnConfig
	clock   atomic.Pointer[func() int64]

	// Filled by settle.
	lost    int
	unpub   int
	pubInfo [][]diffPubInfo // per object, per version
	known   [][][]diffKnown // per instance, per object, per version: suffix minimum
	tierMin [][]int64       // per object, per version: suffix minimum of publication returns
	latency []int64         // message delivery times (callback return − publication return)
}

// diffNodeSpec is one instance of a fleet workload.
type diffNodeSpec struct {
	name    string
	noL1    bool // its L1 keeps nothing
	readers int
	writer  bool // one writer goroutine on it
	joins   bool // starts a third of the way through the run
}

// diffFleetNode is a running instance.
type diffFleetNode struct {
	spec  diffNodeSpec
	db    *sql.DB
	s     *sqlflight.Shield
	tier  *diffRecTier
	ready chan struct{} // closed when it runs
}

// exact reports whether every read of n is judged by the tier's guarantee.
func (n *diffFleetNode) exact() bool { return n.spec.noL1 && n.spec.readers == 1 }

// diffPubInfo is what the fleet learned of one committed version.
type diffPubInfo struct {
	ret  int64 // the latest return of its publications (MaxInt64: none found)
	pubs []diffPub
}

// diffKnown is, for version v of an object on one instance, the earliest
// time at which the instance knew of a write making version v or later, and
// which version that was.
type diffKnown struct {
	at  int64
	ver int64
}

func (f *diffFleet) now() int64 {
	if n := f.clock.Load(); n != nil {
		return (*n)()
	}
	return 0
}

// diffFleetRows: the rows workload spread over a fleet.
func diffFleetRows(t *testing.T, admin *sql.DB, id string) *diffClass {
	f := &diffFleet{
		layout: []diffNodeSpec{
			{name: "A", readers: 2, writer: true},
			{name: "B", readers: 2, writer: true},
			{name: "C (no L1)", noL1: true, readers: 1, writer: true},
			{name: "J (joins)", readers: 2, joins: true},
			{name: "K (joins, no L1)", noL1: true, readers: 1, joins: true},
		},
		prefix: "sqlflight-dfleet:" + id + ":",
		scope:  "dfleet-" + id,
		addr:   redisAddr(t),
	}
	t.Cleanup(func() { flushRedisPrefix(t, f.addr, f.prefix) })
	for i, n := range f.layout {
		for range n.readers {
			f.readers = append(f.readers, i)
		}
		if n.writer {
			f.writers = append(f.writers, i)
		}
	}
	c := &diffClass{
		catches: "row-level invalidation across instances sharing Redis: a row write's message applied, or its epochs in Redis, " +
			"and a read still older (by id, by tenant, IN lists, transactions; instances joining mid-run)",
		readers:  len(f.readers),
		writers:  len(f.writers),
		policies: []uint8{polCoalesce, polCtxTTL, polSoftHard, polDefault, polTTL1s},
		fleet:    f,
	}
	rowsWorkload(t, admin, c, "dif_fr_"+id, 18, 6)
	return c
}

// open starts the instances that run from the beginning.
func (f *diffFleet) open(t *testing.T, c *diffClass) {
	cfg, err := pgx.ParseConfig(c.dsn)
	if err != nil {
		t.Fatal(err)
	}
	f.cfg = cfg
	f.nodes = make([]*diffFleetNode, len(f.layout))
	for i, spec := range f.layout {
		f.nodes[i] = &diffFleetNode{spec: spec, ready: make(chan struct{})}
		if !spec.joins {
			f.start(t, i)
		}
	}
}

// join starts the instances that join mid-run.
func (f *diffFleet) join(t *testing.T) {
	for i, spec := range f.layout {
		if spec.joins {
			f.start(t, i)
		}
	}
}

func (f *diffFleet) start(t *testing.T, i int) {
	n := f.nodes[i]
	o := sqlflight.Options{
		Default: diffDefault, MaxRefreshes: 2,
		KeyPrefix: f.prefix, SharedSecret: fleetSecret,
		RedisTimeout: 2 * time.Second, LeaseTTL: 2 * time.Second,
	}
	if n.spec.noL1 {
		o.MaxBytes, o.NegMaxBytes = 1, 1
	}
	rdb := redis.NewClient(&redis.Options{Addr: f.addr, ContextTimeoutEnabled: true, MaxRetries: 1})
	n.tier = &diffRecTier{SharedTier: redistier.New(rdb), fleet: f, heard: map[uint64]int64{}}
	n.s = sqlflight.New(o, sqlflight.Shared(n.tier))
	n.db = sql.OpenDB(n.s.SharedConnector(stdlib.GetConnector(*f.cfg), f.scope))
	pool := min(n.spec.readers, 2)
	if n.spec.writer {
		pool++
	}
	poolSize(n.db, pool)
	t.Cleanup(func() {
		_ = n.db.Close()
		_ = n.s.Close()
		_ = rdb.Close()
	})
	if st := n.s.Stats(); st.SharedState != "up" {
		t.Fatalf("instance %s: shared tier %q", n.spec.name, st.SharedState)
	}
	close(n.ready)
}

// writerOn returns writer i's instance and handle.
func (f *diffFleet) writerOn(i int) (uint8, *sql.DB) {
	return uint8(f.writers[i]), f.nodes[f.writers[i]].db
}

// readerOn returns reader r's instance and handle once the instance runs,
// or a nil handle if the run stopped first.
func (f *diffFleet) readerOn(r int, stop *atomic.Bool) (uint8, *sql.DB) {
	n := f.nodes[f.readers[r]]
	for {
		select {
		case <-n.ready:
			return uint8(f.readers[r]), n.db
		case <-time.After(20 * time.Millisecond):
			if stop.Load() {
				return 0, nil
			}
		}
	}
}

// diffPub is one publication through an instance's tier.
type diffPub struct {
	call, ret int64
	seq       uint64
}

// diffRecTier records an instance's publications and when it applied each
// message it heard.
type diffRecTier struct {
	sqlflight.SharedTier
	fleet *diffFleet

	mu         sync.Mutex
	pubs       []diffPub
	heard      map[uint64]int64 // seq → when the Shield's callback returned
	resyncs    []int64
	subscribed int64
	frozen     bool // the run is over: record nothing more
}

func (r *diffRecTier) Publish(ctx context.Context, ns string, inv sqlflight.Invalidation) error {
	call := r.fleet.now()
	err := r.SharedTier.Publish(ctx, ns, inv)
	ret := r.fleet.now()
	if err == nil {
		r.mu.Lock()
		r.pubs = append(r.pubs, diffPub{call: call, ret: ret, seq: inv.Seq})
		r.mu.Unlock()
	}
	return err
}

func (r *diffRecTier) Subscribe(ns string, fn func(sqlflight.Invalidation)) (func(), error) {
	stop, err := r.SharedTier.Subscribe(ns, func(inv sqlflight.Invalidation) {
		fn(inv)
		at := r.fleet.now()
		r.mu.Lock()
		defer r.mu.Unlock()
		switch {
		case r.frozen:
		case inv.Resync:
			r.resyncs = append(r.resyncs, at)
		case inv.Malformed:
		default:
			if _, ok := r.heard[inv.Seq]; !ok {
				r.heard[inv.Seq] = at
			}
		}
	})
	r.mu.Lock()
	r.subscribed = r.fleet.now()
	r.mu.Unlock()
	return stop, err
}

// heardAt is when the instance knew of publication p: see the comment at
// the top of the file. ok is false for a message it lost.
func (r *diffRecTier) heardAt(p diffPub) (at int64, ok bool) {
	if h, ok := r.heard[p.seq]; ok {
		return h, true
	}
	if p.call < r.subscribed {
		return r.subscribed, true
	}
	for _, rs := range r.resyncs {
		if rs >= p.call {
			return rs, true
		}
	}
	return math.MaxInt64, false
}

// settle waits (a bounded time) for every message to reach every instance
// that listened when it was published, then derives, per object version,
// its publications and when each instance knew of it.
func (f *diffFleet) settle(c *diffClass) {
	missing := func() int {
		var pubs []diffPub
		for _, w := range f.nodes {
			if w.tier != nil {
				w.tier.mu.Lock()
				pubs = append(pubs, w.tier.pubs...)
				w.tier.mu.Unlock()
			}
		}
		n := 0
		for _, x := range f.nodes {
			if x.tier == nil {
				continue
			}
			x.tier.mu.Lock()
			for _, p := range pubs {
				if _, ok := x.tier.heardAt(p); !ok {
					n++
				}
			}
			x.tier.mu.Unlock()
		}
		return n
	}
	for deadline := time.Now().Add(10 * time.Second); missing() > 0 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	for _, x := range f.nodes {
		if x.tier != nil {
			// The instances' subscriptions may still call back: from now
			// on they record nothing (the check reads what they did).
			x.tier.mu.Lock()
			x.tier.frozen = true
			x.tier.mu.Unlock()
		}
	}

	// Each instance's publications, in order of their calls.
	for _, w := range f.nodes {
		if w.tier != nil {
			slices.SortFunc(w.tier.pubs, func(a, b diffPub) int { return int(a.call - b.call) })
		}
	}
	f.pubInfo = make([][]diffPubInfo, len(c.objs))
	f.tierMin = make([][]int64, len(c.objs))
	f.known = make([][][]diffKnown, len(f.nodes))
	for x := range f.nodes {
		f.known[x] = make([][]diffKnown, len(c.objs))
	}
	lostSeen := map[[2]uint64]bool{}
	for oi, o := range c.objs {
		vs := len(o.ret)
		info := make([]diffPubInfo, vs)
		for v := 1; v < vs; v++ {
			w := f.nodes[o.by[v]]
			lo := sortSearchPubs(w.tier.pubs, o.start[v])
			info[v].ret = math.MaxInt64
			for _, p := range w.tier.pubs[lo:] {
				if p.call > o.ret[v] {
					break
				}
				info[v].pubs = append(info[v].pubs, p)
				if info[v].ret == math.MaxInt64 || p.ret > info[v].ret {
					info[v].ret = p.ret
				}
			}
			if len(info[v].pubs) == 0 {
				f.unpub++
			}
		}
		f.pubInfo[oi] = info
		tm := make([]int64, vs+1)
		tm[vs] = math.MaxInt64
		for v := vs - 1; v >= 1; v-- {
			tm[v] = min(tm[v+1], info[v].ret)
		}
		f.tierMin[oi] = tm
		for x, n := range f.nodes {
			kn := make([]diffKnown, vs+1)
			kn[vs] = diffKnown{at: math.MaxInt64, ver: -1}
			for v := vs - 1; v >= 1; v-- {
				at := int64(math.MaxInt64)
				switch {
				case n.tier == nil:
				case int(o.by[v]) == x:
					at = o.ret[v]
				case len(info[v].pubs) > 0:
					at = math.MinInt64
					for _, p := range info[v].pubs {
						h, ok := n.tier.heardAt(p)
						if !ok && !lostSeen[[2]uint64{uint64(x), p.seq}] {
							lostSeen[[2]uint64{uint64(x), p.seq}] = true
							f.lost++
							c.violation(vFleetLost, fmt.Sprintf("instance %s never applied message %d (published by %s at [%s, %s], subscribed at %s): %s version %d",
								n.spec.name, p.seq, f.nodes[o.by[v]].spec.name, ms(p.call), ms(p.ret), ms(n.tier.subscribed), o.name, v))
						}
						at = max(at, h)
					}
				}
				kn[v] = kn[v+1]
				if at < kn[v].at {
					kn[v] = diffKnown{at: at, ver: int64(v)}
				}
			}
			f.known[x][oi] = kn
		}
	}
	// Delivery times: from a publication's return to each other instance
	// applying it.
	for wi, w := range f.nodes {
		if w.tier == nil {
			continue
		}
		for _, p := range w.tier.pubs {
			for xi, x := range f.nodes {
				if xi == wi || x.tier == nil {
					continue
				}
				if h, ok := x.tier.heard[p.seq]; ok {
					f.latency = append(f.latency, h-p.ret)
				}
			}
		}
	}
	slices.Sort(f.latency)
}

// sortSearchPubs returns the index of the first publication called at or
// after t (pubs sorted by call).
func sortSearchPubs(pubs []diffPub, t int64) int {
	i, _ := slices.BinarySearchFunc(pubs, t, func(p diffPub, t int64) int {
		switch {
		case p.call < t:
			return -1
		case p.call > t:
			return 1
		}
		return 0
	})
	return i
}

// judge says whether r's value v of object oi breaks the fleet's rules.
func (f *diffFleet) judge(c *diffClass, r *diffRead, oi int, v int64) (string, string) {
	o := c.objs[oi]
	x := int(r.inst)
	k := f.known[x][oi][v+1]
	if k.at < r.start {
		if int(o.by[k.ver]) == x {
			return vRYW, fmt.Sprintf("version %d (%s through this instance, %s) returned at %s, %v before the read began",
				k.ver, o.via[k.ver], f.nodes[x].spec.name, ms(o.ret[k.ver]), time.Duration(r.start-o.ret[k.ver]))
		}
		return vFleetHeard, fmt.Sprintf("instance %s knew of version %d (%s through %s; messages %v) at %s, %v before the read began",
			f.nodes[x].spec.name, k.ver, o.via[k.ver], f.nodes[o.by[k.ver]].spec.name, seqs(f.pubInfo[oi][k.ver].pubs), ms(k.at), time.Duration(r.start-k.at))
	}
	if f.nodes[x].exact() {
		if p := f.tierMin[oi][v+1]; p < r.start {
			return vFleetTier, fmt.Sprintf("instance %s (no L1, one reader) returned a value older than a write whose publication returned at %s, %v before the read began",
				f.nodes[x].spec.name, ms(p), time.Duration(r.start-p))
		}
	}
	return "", ""
}

func seqs(ps []diffPub) []uint64 {
	out := make([]uint64, len(ps))
	for i, p := range ps {
		out[i] = p.seq
	}
	return out
}

// report logs each instance's counters and the messages' delivery times.
func (f *diffFleet) report(t *testing.T) {
	for _, n := range f.nodes {
		if n.s == nil {
			t.Logf("instance %s: never started", n.spec.name)
			continue
		}
		st := n.s.Stats()
		t.Logf("instance %s: sharedHits=%d sharedMisses=%d sharedWrites=%d invalidationsHeard=%d rejected=%d; %s",
			n.spec.name, st.SharedHits, st.SharedMisses, st.SharedWrites, st.InvalidationsHeard, st.InvalidationsRejected, statsString(st))
	}
	q := func(p float64) time.Duration {
		if len(f.latency) == 0 {
			return 0
		}
		return time.Duration(f.latency[min(len(f.latency)-1, int(p*float64(len(f.latency))))])
	}
	t.Logf("messages applied by other instances: %d; from the publication's return: p50 %v, p99 %v, max %v; lost %d; writes without a publication found %d",
		len(f.latency), q(0.5), q(0.99), q(1), f.lost, f.unpub)
	if f.unpub > 0 {
		t.Logf("NOTE: %d writes had no publication (Redis slow or down: published later as table writes); reads of them were not judged by the fleet's rules", f.unpub)
	}
}

// onInstance names the instance that served r, in a fleet workload.
func (c *diffClass) onInstance(r *diffRead) string {
	if c.fleet == nil {
		return ""
	}
	return " on instance " + c.fleet.nodes[r.inst].spec.name
}

// around describes the history of o near version v and, in a fleet
// workload, where each version was written, published and applied.
func (c *diffClass) around(o *diffObj, v int64) string {
	s := o.around(v)
	f := c.fleet
	if f == nil || f.pubInfo == nil {
		return s
	}
	oi := slices.Index(c.objs, o)
	lo, hi := max(v-2, 1), min(v+3, o.cur())
	for u := lo; u <= hi; u++ {
		info := f.pubInfo[oi][u]
		s += fmt.Sprintf("\n\t  v%d through %s: messages %v, published by %s;", u, f.nodes[o.by[u]].spec.name, seqs(info.pubs), ms(info.ret))
		for xi, x := range f.nodes {
			if xi == int(o.by[u]) || x.tier == nil {
				continue
			}
			at := int64(math.MinInt64)
			for _, p := range info.pubs {
				h, _ := x.tier.heardAt(p)
				at = max(at, h)
			}
			if len(info.pubs) > 0 {
				s += fmt.Sprintf(" %s knew at %s", x.spec.name, ms(at))
			}
		}
	}
	return s
}
