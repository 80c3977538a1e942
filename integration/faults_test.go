package integration

// Fault tests: sqlflight talks to PostgreSQL through a faultProxy
// (proxy_test.go) that adds latency, cuts every connection, or kills a
// connection mid-result, while an admin connection goes straight to the
// server. Each test is bounded in time and asserts on counts and outcomes
// only; the durations it logs (look for "MEASURED") are for docs/measurements.md's
// "When the database is sick" table, never for assertions.

import (
	"context"
	"crypto/md5"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight"
)

// callTimeout bounds one statement of a fault test: a statement that hangs
// this long is a failure, never a wait.
const callTimeout = 5 * time.Second

// guardStats formats the guard's and the cache's counters, then the rest.
func guardStats(s sqlflight.Stats) string {
	return fmt.Sprintf("breaker=%s transitions=%d rejected=%d shed=%d staleIfError=%d staleHits=%d freshHits=%d misses=%d fills=%d refreshes=%d refreshFailures=%d | %s",
		s.BreakerState, s.BreakerTransitions, s.BreakerRejected, s.Shed, s.StaleIfError, s.StaleHits, s.FreshHits,
		s.Misses, s.Fills, s.Refreshes, s.RefreshFailures, statsString(s))
}

// errKind names an outcome for tallies: the sqlflight errors by name, others
// by their (abbreviated) text.
func errKind(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, sqlflight.ErrCircuitOpen):
		return "ErrCircuitOpen"
	case errors.Is(err, sqlflight.ErrOverloaded):
		return "ErrOverloaded"
	case errors.Is(err, sqlflight.ErrOriginTimeout):
		return "ErrOriginTimeout"
	}
	s := err.Error()
	if len(s) > 160 {
		s = s[:157] + "..."
	}
	return s
}

// tally counts outcomes by kind.
type tally struct {
	mu sync.Mutex
	m  map[string]int
}

func (t *tally) add(kind string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[string]int{}
	}
	t.m[kind]++
}

func (t *tally) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	keys := make([]string, 0, len(t.m))
	for k := range t.m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "\n\t%5d × %s", t.m[k], k)
	}
	return b.String()
}

// readKV runs a query returning one (int, text) row.
func readKV(ctx context.Context, db *sql.DB, query string, arg int) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	var k int
	var v string
	err := db.QueryRowContext(ctx, query, arg).Scan(&k, &v)
	return k, v, err
}

// kvQuery returns a shareable query answering (k, prefix-k) for $1 = k.
func kvQuery(annotation, prefix string) string {
	return fmt.Sprintf(`/* sqlflight: %s */ SELECT k, '%s' || k::text AS v FROM (SELECT $1::int AS k) AS s`, annotation, prefix)
}

// waitIdle waits until no origin query of sh runs any more.
func waitIdle(t *testing.T, sh *sqlflight.Shield) {
	t.Helper()
	waitUntil(t, 15*time.Second, func() string { return "no flight in progress: " + guardStats(sh.Stats()) },
		func() bool { return sh.Stats().InFlight == 0 })
}

// 1. Latency: the semaphore bounds what reaches the database, and the
// callers beyond it are shed quickly instead of piling up.
func TestLatencyHerdRespectsMaxInflight(t *testing.T) {
	dsn := postgresDSN(t)
	admin := openRaw(t, dsn)
	ctx := testContext(t, time.Minute)

	// The function logs when it ran; overlaps are computed afterwards from
	// Postgres' own clock.
	id := uniqueID(t)
	logTable, fn := "public.fault_runs_"+id, "public.fault_work_"+id
	mustExec(t, admin,
		fmt.Sprintf(`CREATE TABLE %s (k int NOT NULL, t0 timestamptz NOT NULL, t1 timestamptz NOT NULL)`, logTable),
		fmt.Sprintf(`CREATE FUNCTION %s(k int) RETURNS int LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
	started timestamptz := clock_timestamp();
BEGIN
	PERFORM pg_sleep(0.2);
	INSERT INTO %s VALUES (k, started, clock_timestamp());
	RETURN k;
END
$fn$`, fn, logTable))
	cleanupExec(t, admin, fmt.Sprintf(`DROP FUNCTION IF EXISTS %s(int)`, fn), fmt.Sprintf(`DROP TABLE IF EXISTS %s`, logTable))

	const (
		maxInflight = 4
		herd        = 40
		latency     = 200 * time.Millisecond
	)
	proxy, pdsn := newFaultProxy(t, dsn)
	db, sh := openFlight(t, pdsn, sqlflight.Options{MaxInflight: maxInflight, QueueTimeout: 100 * time.Millisecond})
	if _, _, err := readKV(ctx, db, kvQuery("name=warm", "w"), 1); err != nil {
		t.Fatalf("warm-up read: %v", err)
	}
	proxy.SetLatency(latency)

	// Distinct arguments: 40 keys, 40 flights, none can coalesce.
	query := fmt.Sprintf(`/* sqlflight: coalesce pure=%[1]s name=fault_herd */ SELECT %[1]s($1::int)`, fn)
	type outcome struct {
		k, got int
		err    error
		lat    time.Duration
	}
	out := make([]outcome, herd)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range herd {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := &out[i]
			o.k = 1000 + i
			<-start
			cctx, cancel := context.WithTimeout(ctx, callTimeout)
			defer cancel()
			begin := time.Now()
			o.err = db.QueryRowContext(cctx, query, o.k).Scan(&o.got)
			o.lat = time.Since(begin)
		}()
	}
	close(start)
	wg.Wait()
	waitIdle(t, sh)
	st := sh.Stats()

	var shedLat, okLat []time.Duration
	succeeded := map[int]bool{}
	kinds := &tally{}
	for _, o := range out {
		kinds.add(errKind(o.err))
		switch {
		case o.err == nil && o.got == o.k:
			okLat = append(okLat, o.lat)
			succeeded[o.k] = true
		case o.err == nil:
			t.Errorf("key %d: got %d", o.k, o.got)
		case errors.Is(o.err, sqlflight.ErrOverloaded):
			shedLat = append(shedLat, o.lat)
		default:
			t.Errorf("key %d: unexpected error: %v", o.k, o.err)
		}
	}

	// What Postgres saw: which keys ran, and the most that ran at once.
	var maxOverlap int
	if err := admin.QueryRowContext(ctx, fmt.Sprintf(`
		SELECT coalesce(max(n), 0) FROM (
			SELECT (SELECT count(*) FROM %[1]s b WHERE b.t0 <= a.t0 AND b.t1 > a.t0) AS n FROM %[1]s a) AS o`,
		logTable)).Scan(&maxOverlap); err != nil {
		t.Fatalf("overlap: %v", err)
	}
	rows, err := admin.QueryContext(ctx, fmt.Sprintf(`SELECT k FROM %s ORDER BY k`, logTable))
	if err != nil {
		t.Fatal(err)
	}
	var ran []int
	for rows.Next() {
		var k int
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		ran = append(ran, k)
	}
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}

	t.Logf("outcomes of %d distinct reads:%s", herd, kinds)
	t.Logf("MEASURED latency herd (+%v per server reply, MaxInflight=%d, QueueTimeout=100ms): %d served, %d shed; "+
		"shed callers returned in %s; served callers in %s; max concurrent origin executions seen by Postgres: %d",
		latency, maxInflight, len(okLat), len(shedLat), latencies(shedLat), latencies(okLat), maxOverlap)
	t.Logf("stats: %s", guardStats(st))

	if maxOverlap > maxInflight {
		t.Errorf("Postgres ran %d origin executions at once; MaxInflight is %d", maxOverlap, maxInflight)
	}
	if len(shedLat) == 0 {
		t.Errorf("no caller got ErrOverloaded: %d callers, %d slots, queue timeout 100ms, each origin ≥ %v", herd, maxInflight, latency)
	}
	if st.Shed < uint64(len(shedLat)) || st.Shed == 0 {
		t.Errorf("Stats().Shed = %d, %d callers got ErrOverloaded", st.Shed, len(shedLat))
	}
	if len(okLat) == 0 {
		t.Errorf("no caller was served")
	}
	// A shed read never reached the database, and a served one ran once.
	seen := map[int]int{}
	for _, k := range ran {
		seen[k]++
	}
	for k, n := range seen {
		if !succeeded[k] {
			t.Errorf("key %d ran %d time(s) in Postgres but its caller was not served", k, n)
		} else if n != 1 {
			t.Errorf("key %d ran %d times in Postgres", k, n)
		}
	}
	for k := range succeeded {
		if seen[k] == 0 {
			t.Errorf("key %d was served but never ran in Postgres", k)
		}
	}
}

// cutCall is one read of the cut test: when, how long, and what it got.
type cutCall struct {
	at    time.Time
	lat   time.Duration
	err   error
	wrong string
}

// 2. A cut: cached keys answer stale, uncached ones fail, fast once the
// breaker is open, and nothing piles up.
func TestCutServesStaleAndOpensBreaker(t *testing.T) {
	dsn := postgresDSN(t)
	ctx := testContext(t, time.Minute)
	proxy, pdsn := newFaultProxy(t, dsn)
	const failures = 3
	opts := sqlflight.Options{MaxStale: time.Hour, BreakerFailures: failures, BreakerTimeout: time.Second}
	db, sh := openFlight(t, pdsn, opts)

	cachedQ := kvQuery("soft=100ms hard=200ms name=fault_cached", "cached-")
	liveQ := kvQuery("name=fault_live", "live-")
	const cachedKey = 7
	if k, v, err := readKV(ctx, db, cachedQ, cachedKey); err != nil || k != cachedKey || v != "cached-7" {
		t.Fatalf("warm the cached key: %d %q %v", k, v, err)
	}
	for i := range 3 {
		if _, _, err := readKV(ctx, db, liveQ, i); err != nil {
			t.Fatalf("warm-up read: %v", err)
		}
	}
	if st := sh.Stats(); st.Fills != 1 || st.BreakerState != "closed" {
		t.Fatalf("after warm-up: %s", guardStats(st))
	}
	waitIdle(t, sh)
	goroutinesBefore := runtime.NumGoroutine()

	const (
		cachedReaders = 3
		liveReaders   = 3
		cutFor        = 2500 * time.Millisecond
	)
	cutAt := time.Now()
	proxy.Cut()
	deadline := cutAt.Add(cutFor)

	var openedAt atomic.Int64 // first time the breaker was seen open, ns after the cut
	stopWatch := make(chan struct{})
	var watch sync.WaitGroup
	watch.Add(1)
	go func() {
		defer watch.Done()
		for {
			if sh.Stats().BreakerState == "open" {
				openedAt.CompareAndSwap(0, int64(time.Since(cutAt)))
			}
			select {
			case <-stopWatch:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()

	var nextLive atomic.Int64
	nextLive.Store(100_000)
	cached := make([][]cutCall, cachedReaders)
	live := make([][]cutCall, liveReaders)
	var wg sync.WaitGroup
	run := func(calls *[]cutCall, read func() (string, error)) {
		defer wg.Done()
		for time.Now().Before(deadline) {
			begin := time.Now()
			wrong, err := read()
			*calls = append(*calls, cutCall{at: begin, lat: time.Since(begin), err: err, wrong: wrong})
			time.Sleep(5 * time.Millisecond)
		}
	}
	for i := range cachedReaders {
		wg.Add(1)
		go run(&cached[i], func() (string, error) {
			k, v, err := readKV(ctx, db, cachedQ, cachedKey)
			if err == nil && (k != cachedKey || v != "cached-7") {
				return fmt.Sprintf("(%d, %q)", k, v), nil
			}
			return "", err
		})
	}
	for i := range liveReaders {
		wg.Add(1)
		go run(&live[i], func() (string, error) {
			n := int(nextLive.Add(1))
			k, v, err := readKV(ctx, db, liveQ, n)
			if err == nil && (k != n || v != "live-"+strconv.Itoa(n)) {
				return fmt.Sprintf("(%d, %q) for %d", k, v, n), nil
			}
			return "", err
		})
	}
	wg.Wait()
	close(stopWatch)
	watch.Wait()
	waitIdle(t, sh)
	st := sh.Stats()

	// Cached key: every read answered, with the cached row.
	var cachedLat []time.Duration
	cachedKinds := &tally{}
	for _, calls := range cached {
		for _, c := range calls {
			cachedKinds.add(errKind(c.err))
			cachedLat = append(cachedLat, c.lat)
			if c.err != nil {
				t.Errorf("cached-key read at cut+%v failed: %v", c.at.Sub(cutAt).Round(time.Millisecond), c.err)
			} else if c.wrong != "" {
				t.Errorf("cached-key read at cut+%v returned %s", c.at.Sub(cutAt).Round(time.Millisecond), c.wrong)
			}
		}
	}
	// Uncached keys: all failed; once the breaker opened, with
	// ErrCircuitOpen, except the few probes it lets through.
	var openLat, otherLat []time.Duration
	liveKinds := &tally{}
	var liveCalls int
	for _, calls := range live {
		for _, c := range calls {
			liveCalls++
			liveKinds.add(errKind(c.err))
			switch {
			case c.err == nil:
				t.Errorf("uncached read at cut+%v succeeded while the database was cut off", c.at.Sub(cutAt).Round(time.Millisecond))
			case errors.Is(c.err, sqlflight.ErrCircuitOpen):
				openLat = append(openLat, c.lat)
			default:
				otherLat = append(otherLat, c.lat)
			}
		}
	}
	t.Logf("cached-key reads during the cut:%s", cachedKinds)
	t.Logf("uncached reads during the cut:%s", liveKinds)
	t.Logf("stats: %s", guardStats(st))
	opened := time.Duration(openedAt.Load())
	t.Logf("MEASURED cut (%v, BreakerFailures=%d, BreakerTimeout=%v): breaker open %v after the cut; "+
		"stale answers for the cached key in %s; uncached reads refused with ErrCircuitOpen in %s; "+
		"uncached reads that reached for the database (before opening, and probes) failed in %s",
		cutFor, failures, opts.BreakerTimeout, opened.Round(time.Millisecond), latencies(cachedLat), latencies(openLat), latencies(otherLat))

	if opened == 0 {
		t.Errorf("the breaker was never seen open during a %v cut", cutFor)
	}
	if len(openLat) == 0 {
		t.Errorf("no uncached read failed with ErrCircuitOpen")
	}
	if st.StaleIfError == 0 {
		t.Errorf("Stats().StaleIfError = 0 after a cut with a cached key past its hard TTL")
	}
	// Only these reads may reach for the database: those that passed a
	// closed breaker before it opened (each reader at most once past the
	// threshold), and one probe per BreakerProbes after each half-open
	// transition.
	if bound := failures + cachedReaders + liveReaders + int(st.BreakerTransitions); len(otherLat) > bound {
		t.Errorf("%d of %d uncached reads failed with another error than ErrCircuitOpen; at most %d should reach a cut-off database",
			len(otherLat), liveCalls, bound)
	}

	// Nothing piles up: once every reader is back, the goroutines are
	// about as many as before the cut.
	const slack = 10
	var goroutinesAfter int
	end := time.Now().Add(5 * time.Second)
	for {
		goroutinesAfter = runtime.NumGoroutine()
		if goroutinesAfter <= goroutinesBefore+slack || time.Now().After(end) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("goroutines: %d before the cut, %d after", goroutinesBefore, goroutinesAfter)
	if goroutinesAfter > goroutinesBefore+slack {
		buf := make([]byte, 1<<20)
		t.Errorf("goroutines grew across the cut: %d before, %d after\n%s", goroutinesBefore, goroutinesAfter, buf[:runtime.Stack(buf, true)])
	}
}

// 3. Recovery: once the database is back, the breaker lets one probe
// through after BreakerTimeout and closes; reads and cache fills flow.
func TestRecoveryAfterCut(t *testing.T) {
	dsn := postgresDSN(t)
	ctx := testContext(t, time.Minute)
	proxy, pdsn := newFaultProxy(t, dsn)
	opts := sqlflight.Options{MaxStale: time.Hour, BreakerFailures: 3, BreakerTimeout: time.Second}
	db, sh := openFlight(t, pdsn, opts)

	cachedQ := kvQuery("soft=100ms hard=200ms name=fault_cached", "cached-")
	liveQ := kvQuery("name=fault_live", "live-")
	var next atomic.Int64
	next.Store(200_000)
	readLive := func() error {
		n := int(next.Add(1))
		k, v, err := readKV(ctx, db, liveQ, n)
		if err == nil && (k != n || v != "live-"+strconv.Itoa(n)) {
			return fmt.Errorf("wrong row (%d, %q) for %d", k, v, n)
		}
		return err
	}
	if _, _, err := readKV(ctx, db, cachedQ, 7); err != nil {
		t.Fatalf("warm the cached key: %v", err)
	}
	for range 3 {
		if err := readLive(); err != nil {
			t.Fatalf("warm-up read: %v", err)
		}
	}
	waitIdle(t, sh)
	fillsBefore := sh.Stats().Fills

	// Cut, and read until the breaker opens.
	proxy.Cut()
	cutAt := time.Now()
	for sh.Stats().BreakerState != "open" {
		if time.Since(cutAt) > 15*time.Second {
			t.Fatalf("the breaker did not open in 15s of cut: %s", guardStats(sh.Stats()))
		}
		if err := readLive(); err == nil {
			t.Fatal("a read succeeded through a cut proxy")
		}
		time.Sleep(5 * time.Millisecond)
	}
	openedAt := time.Now()
	transitionsAtOpen := sh.Stats().BreakerTransitions

	// Restore at once: the breaker keeps refusing until its timeout, then
	// probes.
	proxy.Restore(t)
	restoredAt := time.Now()

	const (
		readers = 3
		steady  = 10 // consecutive successes each reader needs at the end
	)
	var (
		firstOK  atomic.Int64 // ns after restore
		closedAt atomic.Int64 // ns after restore, first seen closed
		kinds    tally
		wg       sync.WaitGroup
		streaks  [readers]atomic.Int64
	)
	stop := make(chan struct{})
	for i := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				err := readLive()
				kinds.add(errKind(err))
				if err == nil {
					firstOK.CompareAndSwap(0, int64(time.Since(restoredAt)))
					streaks[i].Add(1)
				} else {
					streaks[i].Store(0)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	recovered := func() bool {
		if sh.Stats().BreakerState == "closed" {
			closedAt.CompareAndSwap(0, int64(time.Since(restoredAt)))
		} else {
			return false
		}
		for i := range streaks {
			if streaks[i].Load() < steady {
				return false
			}
		}
		return true
	}
	deadline := time.Now().Add(15 * time.Second)
	for !recovered() && time.Now().Before(deadline) {
		time.Sleep(2 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	ok := recovered()

	// The cache fills again: the expired cached key is read through.
	var fillsAfter uint64
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if k, v, err := readKV(ctx, db, cachedQ, 7); err != nil || k != 7 || v != "cached-7" {
			t.Errorf("cached-key read after recovery: %d %q %v", k, v, err)
			break
		}
		if fillsAfter = sh.Stats().Fills; fillsAfter > fillsBefore {
			break
		}
	}
	waitIdle(t, sh)
	st := sh.Stats()
	t.Logf("reads after the restore:%s", &kinds)
	t.Logf("stats: %s", guardStats(st))
	t.Logf("MEASURED recovery (BreakerTimeout=%v): breaker opened %v after the cut; database restored right after; "+
		"first successful read %v after the restore (%v after the breaker opened); breaker closed %v after the restore",
		opts.BreakerTimeout, openedAt.Sub(cutAt).Round(time.Millisecond),
		time.Duration(firstOK.Load()).Round(time.Millisecond),
		(time.Duration(firstOK.Load()) + restoredAt.Sub(openedAt)).Round(time.Millisecond),
		time.Duration(closedAt.Load()).Round(time.Millisecond))

	if !ok {
		t.Fatalf("no recovery within 15s of the restore: breaker %s, streaks %d/%d/%d",
			st.BreakerState, streaks[0].Load(), streaks[1].Load(), streaks[2].Load())
	}
	// closed → open, open → half-open, half-open → closed at least.
	if st.BreakerTransitions < transitionsAtOpen+2 {
		t.Errorf("breaker transitions: %d at opening, %d after recovery; want at least 2 more (half-open, closed)",
			transitionsAtOpen, st.BreakerTransitions)
	}
	if fillsAfter <= fillsBefore {
		t.Errorf("the cache did not fill again after recovery: Fills %d before the cut, %d after", fillsBefore, fillsAfter)
	}
}

// bigRows and bigPayload describe the result of the reset test: several
// MB, in rows of 2 KiB.
const bigRows = 2000

func bigPayload(g int) string {
	sum := md5.Sum([]byte(strconv.Itoa(g)))
	return strings.Repeat(hex.EncodeToString(sum[:]), 64)
}

// bigOutcome is what one caller of the big query got.
type bigOutcome struct {
	rows    int    // rows read before the end or the error
	wrong   string // the first row that was not the expected one
	err     error
	partial bool // no error, yet not the whole result
}

func (o bigOutcome) complete() bool { return o.err == nil && o.wrong == "" && o.rows == bigRows }

func readBig(ctx context.Context, db *sql.DB, query string, round int, want []string) (o bigOutcome) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	rows, err := db.QueryContext(ctx, query, round)
	if err != nil {
		o.err = err
		return o
	}
	defer rows.Close()
	for rows.Next() {
		var r, g int
		var payload string
		if err := rows.Scan(&r, &g, &payload); err != nil {
			o.err = err
			return o
		}
		o.rows++
		if o.wrong == "" && (r != round || g != o.rows || payload != want[g-1]) {
			o.wrong = fmt.Sprintf("row %d: round %d, g %d, payload of %d bytes", o.rows, r, g, len(payload))
		}
	}
	o.err = rows.Err()
	o.partial = o.err == nil && !o.complete()
	return o
}

// 4. A connection killed mid-result: every caller gets an error or the
// whole result, and only whole results are cached.
func TestResetMidResultNeverShared(t *testing.T) {
	want := make([]string, bigRows)
	for g := range want {
		want[g] = bigPayload(g + 1)
	}
	forEachExecMode(t, postgresDSN(t), func(t *testing.T, dsn string) {
		ctx := testContext(t, 2*time.Minute)
		proxy, pdsn := newFaultProxy(t, dsn)
		// The breaker stays out of it: every failure here is a broken
		// connection, and the test is about results, not the breaker.
		db, sh := openFlight(t, pdsn, sqlflight.Options{BreakerFailures: 1_000_000})
		query := fmt.Sprintf(`/* sqlflight: ttl=1m name=fault_big */ SELECT $1::int AS round, g, repeat(md5(g::text), 64) AS payload
			FROM generate_series(1, %d) AS g ORDER BY g`, bigRows)
		if _, _, err := readKV(ctx, db, kvQuery("name=warm", "w"), 1); err != nil {
			t.Fatalf("warm-up read: %v", err)
		}

		faults := []struct {
			name  string
			limit int64
			rst   bool
		}{
			{"FIN after 64KiB", 64 << 10, false},
			{"RST after 64KiB", 64 << 10, true},
			{"FIN after 1MiB", 1 << 20, false},
			{"RST after 2MiB", 2 << 20, true},
			{"RST after 3.5MiB", 3584 << 10, true},
		}
		const callers = 6
		successRounds := 0
		kinds := &tally{}
		for round, f := range faults {
			proxy.ArmLimit(f.limit, f.rst)
			out := make([]bigOutcome, callers)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i := range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					out[i] = readBig(ctx, db, query, round, want)
				}()
			}
			close(start)
			wg.Wait()
			waitIdle(t, sh)
			ok, errAfterRows := 0, 0
			for i, o := range out {
				kinds.add(errKind(o.err))
				switch {
				case o.complete():
					ok++
				case o.err != nil:
					if o.rows > 0 {
						errAfterRows++
					}
				default:
					t.Errorf("%s: caller %d got a partial or wrong result without an error: %d of %d rows, %s",
						f.name, i, o.rows, bigRows, o.wrong)
				}
			}
			if ok > 0 {
				successRounds++
			}
			t.Logf("%s: %d of %d callers got the whole result, %d an error (%d of them after some rows); connections killed so far: %d",
				f.name, ok, callers, callers-ok, errAfterRows, proxy.killed.Load())
		}
		proxy.ArmLimit(0, false)
		faulted := sh.Stats()
		t.Logf("outcomes under faults:%s", kinds)
		t.Logf("stats after the faults: %s", guardStats(faulted))
		if k := proxy.killed.Load(); k < int64(len(faults)) {
			t.Errorf("the proxy killed %d connections mid-result; want at least one per round (%d)", k, len(faults))
		}
		if faulted.Fills > uint64(successRounds) {
			t.Errorf("Fills = %d after the faults, but only %d rounds produced a whole result", faulted.Fills, successRounds)
		}

		// Healthy again: each key reads whole, from a new fill (or from a
		// fill of a whole result), then from the cache.
		for pass, name := range []string{"first read after healing", "second read (cached)"} {
			for round := range faults {
				if o := readBig(ctx, db, query, round, want); !o.complete() {
					t.Errorf("%s of round %d: %d of %d rows, wrong %q, error %v", name, round, o.rows, bigRows, o.wrong, o.err)
				}
			}
			waitIdle(t, sh)
			st := sh.Stats()
			switch pass {
			case 0:
				if wantFills := faulted.Fills + uint64(len(faults)-successRounds); st.Fills != wantFills {
					t.Errorf("Fills = %d after healing; want %d (%d before, one per key that had no whole result)", st.Fills, wantFills, faulted.Fills)
				}
			case 1:
				if st.FreshHits < faulted.FreshHits+uint64(len(faults)) {
					t.Errorf("FreshHits = %d; want at least %d: the healed results should be cached", st.FreshHits, faulted.FreshHits+uint64(len(faults)))
				}
			}
		}
		t.Logf("stats at the end: %s", guardStats(sh.Stats()))
	})
}

// 5. Writes across a cut: no acknowledged write is lost, and (with the
// extended protocol) none refused by the breaker was applied. A failed
// write may have committed all the same — the reply was lost with the
// connection — so failures are only counted: absent, or ambiguous.
func TestWritesDuringCut(t *testing.T) {
	forEachExecMode(t, postgresDSN(t), func(t *testing.T, dsn string) {
		ctx := testContext(t, 2*time.Minute)
		admin := openRaw(t, dsn)
		table := "public.fault_writes_" + uniqueID(t)
		mustExec(t, admin, fmt.Sprintf(`CREATE TABLE %s (id bigint PRIMARY KEY, writer int NOT NULL)`, table))
		cleanupExec(t, admin, fmt.Sprintf(`DROP TABLE IF EXISTS %s`, table))

		proxy, pdsn := newFaultProxy(t, dsn)
		opts := sqlflight.Options{BreakerFailures: 3, BreakerTimeout: 500 * time.Millisecond}
		db, sh := openFlight(t, pdsn, opts)
		insert := fmt.Sprintf(`INSERT INTO %s (id, writer) VALUES ($1, $2)`, table)
		liveQ := kvQuery("name=fault_live", "live-")
		if _, err := db.ExecContext(ctx, insert, 0, 0); err != nil {
			t.Fatalf("warm-up write: %v", err)
		}

		type write struct {
			id    int64
			err   error
			phase int32
			lat   time.Duration
		}
		const (
			writers        = 4
			healthy        = 500 * time.Millisecond
			cutFor         = 1500 * time.Millisecond
			ackedAfterWant = 40
		)
		var (
			phase      atomic.Int32 // 0 healthy, 1 cut, 2 restored
			nextID     atomic.Int64
			ackedAfter atomic.Int64
			mu         sync.Mutex
			writes     []write
			readKinds  tally
			wg         sync.WaitGroup
			firstAck   atomic.Int64 // ns after the restore
			restoredAt time.Time
		)
		stop := make(chan struct{})
		stopped := func() bool {
			select {
			case <-stop:
				return true
			default:
				return false
			}
		}
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !stopped() {
					id := nextID.Add(1)
					ph := phase.Load()
					cctx, cancel := context.WithTimeout(ctx, callTimeout)
					begin := time.Now()
					_, err := db.ExecContext(cctx, insert, id, w+1)
					lat := time.Since(begin)
					cancel()
					if err == nil && ph == 2 {
						ackedAfter.Add(1)
						mu.Lock()
						firstAck.CompareAndSwap(0, int64(time.Since(restoredAt)))
						mu.Unlock()
					}
					mu.Lock()
					writes = append(writes, write{id: id, err: err, phase: ph, lat: lat})
					mu.Unlock()
					time.Sleep(5 * time.Millisecond)
				}
			}()
		}
		// One reader, so that the breaker sees the cut as reads do.
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 300_000; !stopped(); n++ {
				_, _, err := readKV(ctx, db, liveQ, n)
				readKinds.add(fmt.Sprintf("phase %d: %s", phase.Load(), errKind(err)))
				time.Sleep(5 * time.Millisecond)
			}
		}()

		time.Sleep(healthy)
		phase.Store(1)
		proxy.Cut()
		time.Sleep(cutFor)
		mu.Lock()
		restoredAt = time.Now()
		mu.Unlock()
		proxy.Restore(t)
		phase.Store(2)
		deadline := time.Now().Add(15 * time.Second)
		for ackedAfter.Load() < ackedAfterWant && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		close(stop)
		wg.Wait()
		waitIdle(t, sh)
		st := sh.Stats()

		present := map[int64]bool{}
		rows, err := admin.QueryContext(ctx, fmt.Sprintf(`SELECT id FROM %s`, table))
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				t.Fatal(err)
			}
			present[id] = true
		}
		if err := rows.Close(); err != nil {
			t.Fatal(err)
		}

		var acked, refused, refusedPresent, ambiguous, failed int
		simple := strings.Contains(dsn, "simple_protocol")
		var cutLat []time.Duration
		kinds := &tally{}
		attempted := map[int64]bool{0: true}
		for _, w := range writes {
			attempted[w.id] = true
			kinds.add(fmt.Sprintf("phase %d: %s", w.phase, errKind(w.err)))
			if w.phase == 1 {
				cutLat = append(cutLat, w.lat)
			}
			switch {
			case w.err == nil:
				acked++
				if !present[w.id] {
					t.Errorf("write %d was acknowledged but its row is not in the table", w.id)
				}
			case errors.Is(w.err, sqlflight.ErrCircuitOpen):
				refused++
				if present[w.id] {
					// Sound only if the driver never reports ErrBadConn
					// for a statement it sent: database/sql would re-run
					// the write on another connection, which the open
					// breaker refuses. pgx's simple protocol does report
					// that (seen here, also without sqlflight).
					if simple {
						refusedPresent++
						t.Logf("write %d: ErrCircuitOpen, yet committed (an earlier attempt that pgx reported as ErrBadConn): %v", w.id, w.err)
					} else {
						t.Errorf("write %d was refused with ErrCircuitOpen, yet its row is in the table", w.id)
					}
				}
			case present[w.id]:
				ambiguous++ // failed as seen by the caller, committed all the same
				t.Logf("ambiguous write %d (phase %d, %v): %v", w.id, w.phase, w.lat.Round(time.Microsecond), w.err)
			default:
				failed++
			}
		}
		for id := range present {
			if !attempted[id] {
				t.Errorf("row %d is in the table but was never written", id)
			}
		}
		t.Logf("writes:%s", kinds)
		t.Logf("reads:%s", &readKinds)
		t.Logf("stats: %s", guardStats(st))
		t.Logf("MEASURED writes across a %v cut (BreakerFailures=%d, BreakerTimeout=%v): %d writes, %d acknowledged (all present), "+
			"%d refused by the open breaker (%d of them present), %d failed and absent, %d ambiguous (failed, yet committed); "+
			"writes during the cut returned in %s; first acknowledged write %v after the restore",
			cutFor, opts.BreakerFailures, opts.BreakerTimeout, len(writes), acked, refused, refusedPresent, failed, ambiguous,
			latencies(cutLat), time.Duration(firstAck.Load()).Round(time.Millisecond))
		if n := ackedAfter.Load(); n < ackedAfterWant {
			t.Errorf("only %d writes were acknowledged in the 15s after the restore; want %d", n, ackedAfterWant)
		}
		if refused+failed+ambiguous == 0 {
			t.Errorf("no write failed during a %v cut: the fault was not exercised", cutFor)
		}
	})
}

// 5b. While the breaker is open, statements that do not share — writes,
// bypassed reads, transactions — are refused with ErrCircuitOpen before
// anything reaches for the database (Options: "writes fail fast too unless
// WritesWhenOpen is set"). The breaker is kept open for the whole test by
// a long BreakerTimeout, and the test checks that it did not move.
func TestStatementsRefusedWhileBreakerOpen(t *testing.T) {
	dsn := postgresDSN(t)
	ctx := testContext(t, time.Minute)
	admin := openRaw(t, dsn)
	table := "public.fault_refused_" + uniqueID(t)
	mustExec(t, admin, fmt.Sprintf(`CREATE TABLE %s (id bigint PRIMARY KEY)`, table))
	cleanupExec(t, admin, fmt.Sprintf(`DROP TABLE IF EXISTS %s`, table))

	proxy, pdsn := newFaultProxy(t, dsn)
	db, sh := openFlight(t, pdsn, sqlflight.Options{BreakerFailures: 3, BreakerTimeout: time.Minute})
	insert := fmt.Sprintf(`INSERT INTO %s (id) VALUES ($1)`, table)
	liveQ := kvQuery("name=fault_live", "live-")
	// Several pooled connections with a real connection each, so that the
	// statements below meet both kinds: with a (dead) real connection and
	// without one.
	var warm sync.WaitGroup
	for i := range 4 {
		warm.Add(1)
		go func() {
			defer warm.Done()
			if _, err := db.ExecContext(ctx, insert, -1-i); err != nil {
				t.Errorf("warm-up write: %v", err)
			}
		}()
	}
	warm.Wait()

	proxy.Cut()
	for n := 400_000; sh.Stats().BreakerState != "open"; n++ {
		if n > 400_000+1000 {
			t.Fatalf("the breaker did not open: %s", guardStats(sh.Stats()))
		}
		_, _, _ = readKV(ctx, db, liveQ, n)
	}
	before := sh.Stats()

	type attempt struct {
		what string
		err  error
	}
	var attempts []attempt
	for i := range 10 {
		_, err := db.ExecContext(ctx, insert, i+1)
		attempts = append(attempts, attempt{fmt.Sprintf("INSERT %d", i+1), err})
		rows, err := db.QueryContext(ctx, `/* sqlflight: off */ SELECT 1`)
		if err == nil {
			_ = rows.Close()
		}
		attempts = append(attempts, attempt{"bypassed read", err})
		tx, err := db.BeginTx(ctx, nil)
		if err == nil {
			_ = tx.Rollback()
		}
		attempts = append(attempts, attempt{"BeginTx", err})
	}
	after := sh.Stats()
	if after.BreakerState != "open" || after.BreakerTransitions != before.BreakerTransitions {
		t.Fatalf("the breaker moved during the test (precondition): before %s; after %s", guardStats(before), guardStats(after))
	}
	kinds := &tally{}
	for _, a := range attempts {
		kinds.add(a.what[:min(len(a.what), 6)] + ": " + errKind(a.err))
		if !errors.Is(a.err, sqlflight.ErrCircuitOpen) {
			t.Errorf("%s while the breaker was open: got %v; want an error wrapping ErrCircuitOpen", a.what, a.err)
		}
	}
	t.Logf("outcomes while open:%s", kinds)
	t.Logf("stats: %s", guardStats(after))

	proxy.Restore(t)
	var n int
	if err := admin.QueryRowContext(ctx, fmt.Sprintf(`SELECT count(*) FROM %s WHERE id > 0`, table)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d writes refused while the breaker was open are in the table", n)
	}
}
