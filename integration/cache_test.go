package integration

import (
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight"
)

// The cache tests run on the real clock: TTLs are real and short. Nothing
// asserts how long anything took. Executions are counted by PostgreSQL
// itself (a sequence bumped inside a plpgsql function) and by the Shield's
// counters; the bounds on them are derived from the elapsed time the test
// measured around the work, in the direction that keeps them sound.

// cacheStats formats the cache counters of a Stats snapshot.
func cacheStats(s sqlflight.Stats) string {
	return fmt.Sprintf("fresh=%d stale=%d neg=%d misses=%d fills=%d refreshes=%d refreshFail=%d staleIfError=%d invalidations=%d; %s",
		s.FreshHits, s.StaleHits, s.NegativeHits, s.Misses, s.Fills, s.Refreshes, s.RefreshFailures, s.StaleIfError,
		s.Invalidations, statsString(s))
}

// settleShield waits until no origin query of sh runs any more (background
// refreshes included), so that counts read afterwards are final.
func settleShield(t testing.TB, sh *sqlflight.Shield) {
	t.Helper()
	waitUntil(t, 30*time.Second, func() string { return "origin queries to finish: " + statsString(sh.Stats()) },
		func() bool { return sh.Stats().InFlight == 0 })
}

// expiryHerdTail is the work of the expiry herd's function after it counted
// the call: ~20 ms, then one value.
const expiryHerdTail = `PERFORM pg_sleep(0.02);
	RETURN 42;`

// TestExpiryHerd: 200 readers keep reading one cached key, paced, for about
// fifteen soft periods. The entry goes stale every soft period and is served
// stale while one background refresh runs: PostgreSQL sees one execution per
// period at most, plus the initial fill, and no reader waits on the
// database once the entry exists.
func TestExpiryHerd(t *testing.T) {
	base := postgresDSN(t)
	admin := openRaw(t, base)
	const (
		readers  = 200
		pace     = 5 * time.Millisecond // between two reads of one reader
		duration = 1500 * time.Millisecond
		soft     = 100 * time.Millisecond
	)

	run := func(t *testing.T, dsn, annotation string) (execs, elapsedPeriods int64, elapsed time.Duration, st sqlflight.Stats) {
		ctx := testContext(t, testTimeout)
		g := newGateFunc(t, admin, dsn, "expiry", "int", expiryHerdTail)
		query := fmt.Sprintf(`/* sqlflight: %[1]s pure=%[2]s */ SELECT %[2]s()`, annotation, g.fn)
		db, sh := openFlight(t, dsn)

		var (
			wg    sync.WaitGroup
			reads atomic.Int64
			errs  = newErrBudget(t, 5)
			lats  = make([][]time.Duration, readers)
			start = make(chan struct{})
			// The readers go on for duration after the first read returned
			// (the initial fill), however long that took on a busy machine.
			endMu sync.Mutex
			end   time.Time
		)
		over := func() bool {
			endMu.Lock()
			defer endMu.Unlock()
			return !end.IsZero() && time.Now().After(end)
		}
		for i := range readers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for !over() && ctx.Err() == nil {
					begin := time.Now()
					var v int64
					err := db.QueryRowContext(ctx, query).Scan(&v)
					lats[i] = append(lats[i], time.Since(begin))
					reads.Add(1)
					switch {
					case err != nil:
						errs.Errorf("read: %v", err)
						return
					case v != 42:
						errs.Errorf("read %d, want 42", v)
					}
					endMu.Lock()
					if end.IsZero() {
						end = time.Now().Add(duration)
					}
					endMu.Unlock()
					time.Sleep(pace)
				}
			}()
		}
		// Every execution is started by a read made in [t0, t1].
		t0 := time.Now()
		close(start)
		wg.Wait()
		elapsed = time.Since(t0)
		settleShield(t, sh)

		execs = g.calls(t, admin)
		st = sh.Stats()
		var all []time.Duration
		for _, l := range lats {
			all = append(all, l...)
		}
		n := reads.Load()
		elapsedPeriods = int64(elapsed / soft)
		if served := st.FreshHits + st.StaleHits + st.Misses; served != uint64(n) {
			t.Errorf("fresh+stale+misses = %d for %d reads: %s", served, n, cacheStats(st))
		}
		// Only a reader's first read can find no entry: the entry never
		// expires (hard=10s) during the test.
		if st.Misses > readers {
			t.Errorf("%d reads missed the cache, want ≤ %d (the initial herd): %s", st.Misses, readers, cacheStats(st))
		}
		if uint64(execs) != st.OriginExecutions {
			t.Errorf("PostgreSQL counted %d executions, the Shield %d", execs, st.OriginExecutions)
		}
		t.Logf("%d reads in %v (%d soft periods); %d executions in PostgreSQL; %d reads waited on the database (misses; %d of them followers), %d served from the cache (%d fresh, %d stale); read latency %s",
			n, elapsed.Round(time.Millisecond), elapsedPeriods, execs, st.Misses, st.Followers, st.FreshHits+st.StaleHits,
			st.FreshHits, st.StaleHits, latencies(all))
		t.Logf("%s", cacheStats(st))
		return execs, elapsedPeriods, elapsed, st
	}

	forEachExecMode(t, base, func(t *testing.T, dsn string) {
		// beta=0 turns XFetch's early refresh off: every refresh then starts
		// at least soft after the fill before it, and that fill came after
		// the start of the previous execution. So with the first read at t0
		// and the last at t1, refresh k starts no earlier than t0 + k·soft:
		// executions ≤ 1 + floor((t1−t0)/soft).
		t.Run("beta=0", func(t *testing.T) {
			execs, periods, _, st := run(t, dsn, "soft=100ms hard=10s jitter=0% beta=0")
			if execs > periods+1 {
				t.Errorf("%d executions in %d soft periods, want ≤ %d (one refresh per period plus the initial fill): %s",
					execs, periods, periods+1, cacheStats(st))
			}
			if execs < 2 || st.Refreshes < 1 {
				t.Errorf("%d executions, %d refreshes: the stale entry was never refreshed: %s", execs, st.Refreshes, cacheStats(st))
			}
		})
	})

	// With the default beta (1), XFetch may start a refresh before soft,
	// but never in the first half of the fresh window: each refresh starts
	// at least soft/2 after the fill before it, so executions ≤
	// 1 + floor(2·(t1−t0)/soft) ≤ 2·periods + 2. (Before that cap, every one
	// of the thousands of hits per period drew its own chance and the key
	// was refreshed back to back: 60 executions in 15 periods here.)
	//
	// It also checks what holds in any case: the key never has two
	// executions at once (each sleeps 20 ms in PostgreSQL), so executions
	// ≤ 1 + (t1−t0)/20ms.
	t.Run("default_beta", func(t *testing.T) {
		execs, periods, elapsed, st := run(t, base, "soft=100ms hard=10s jitter=0%")
		if limit := 1 + int64(elapsed/(20*time.Millisecond)); execs > limit {
			t.Errorf("%d executions in %v, want ≤ %d (executions of one key never overlap): %s", execs, elapsed, limit, cacheStats(st))
		}
		if limit := 2*periods + 2; execs > limit {
			t.Errorf("%d executions in %d soft periods (%.1f per period), want ≤ %d: an early refresh (beta=1) started in the first half of a fresh window: %s",
				execs, periods, float64(execs)/float64(max(periods, 1)), limit, cacheStats(st))
		}
		if execs < 2 {
			t.Errorf("%d executions: the entry was never refreshed: %s", execs, cacheStats(st))
		}
	})
}

// TestCachedReadYourWrites: a query cached for an hour, and a writer that
// updates the row through the same *sql.DB and reads it back at once, while
// other goroutines keep the cached query hot. The writer always reads its
// own value: a write through the Shield makes every older entry and flight
// unusable. The same holds for a write committed in a transaction; inside
// the transaction the read goes to the transaction itself.
func TestCachedReadYourWrites(t *testing.T) {
	base := postgresDSN(t)
	admin := openRaw(t, base)
	const (
		plainWrites = 300
		txWrites    = 100
		bgReaders   = 8
	)
	forEachExecMode(t, base, func(t *testing.T, dsn string) {
		ctx := testContext(t, testTimeout)
		table := "ryw_" + uniqueID(t)
		mustExec(t, admin,
			fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, v bigint NOT NULL)`, table),
			fmt.Sprintf(`INSERT INTO %s VALUES (1, 0)`, table))
		cleanupExec(t, admin, "DROP TABLE IF EXISTS "+table)
		query := fmt.Sprintf(`/* sqlflight: ttl=1h */ SELECT v FROM %s WHERE id = 1`, table)
		update := fmt.Sprintf(`UPDATE %s SET v = $1 WHERE id = 1`, table)
		db, sh := openFlight(t, dsn)
		// With database/sql's default of two idle connections, the pool
		// closes most virtual connections after use, and with them their
		// real ones: nearly every write would connect anew.
		db.SetMaxIdleConns(bgReaders + 2)

		var (
			started    atomic.Int64 // the highest value an UPDATE was sent for
			bgReads    atomic.Int64
			regressed  atomic.Int64 // a background reader saw a value below one it saw before
			errs       = newErrBudget(t, 5)
			stop       = make(chan struct{})
			wg         sync.WaitGroup
			stopOnce   sync.Once
			stopReader = func() { stopOnce.Do(func() { close(stop) }); wg.Wait() }
		)
		defer stopReader()
		for range bgReaders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var last int64
				for {
					select {
					case <-stop:
						return
					default:
					}
					var v int64
					if err := db.QueryRowContext(ctx, query).Scan(&v); err != nil {
						errs.Errorf("background read: %v", err)
						return
					}
					bgReads.Add(1)
					if hi := started.Load(); v < 0 || v > hi {
						errs.Errorf("background read %d: no UPDATE set that value (highest sent: %d)", v, hi)
					}
					if v < last {
						regressed.Add(1)
					}
					last = v
					time.Sleep(100 * time.Microsecond) // leave the writer some CPU
				}
			}()
		}

		read := func(q queryer) int64 {
			t.Helper()
			var v int64
			if err := q.QueryRowContext(ctx, query).Scan(&v); err != nil {
				t.Fatalf("read: %v", err)
			}
			return v
		}
		for i := int64(1); i <= plainWrites; i++ {
			started.Store(i)
			if _, err := db.ExecContext(ctx, update, i); err != nil {
				t.Fatalf("update %d: %v", i, err)
			}
			if v := read(db); v != i {
				t.Fatalf("after UPDATE to %d through the Shield, the cached query returned %d: %s", i, v, cacheStats(sh.Stats()))
			}
		}
		for i := int64(plainWrites + 1); i <= plainWrites+txWrites; i++ {
			started.Store(i)
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.ExecContext(ctx, update, i); err != nil {
				_ = tx.Rollback()
				t.Fatalf("update %d in a transaction: %v", i, err)
			}
			if v := read(tx); v != i {
				_ = tx.Rollback()
				t.Fatalf("inside the transaction after UPDATE to %d, the query returned %d", i, v)
			}
			if err := tx.Commit(); err != nil {
				t.Fatalf("commit %d: %v", i, err)
			}
			if v := read(db); v != i {
				t.Fatalf("after committing UPDATE to %d, the cached query returned %d: %s", i, v, cacheStats(sh.Stats()))
			}
		}
		// The cached query still caches: once the readers stopped, with no
		// write since the last fill, ten reads are ten fresh hits.
		stopReader()
		settleShield(t, sh)
		before := sh.Stats()
		for range 10 {
			if v := read(db); v != plainWrites+txWrites {
				t.Fatalf("final read %d", v)
			}
		}
		st := sh.Stats()
		if hits, misses := st.FreshHits-before.FreshHits, st.Misses-before.Misses; hits != 10 || misses != 0 {
			t.Errorf("ten reads with no write since the last fill: %d fresh hits, %d misses, want 10 and 0: %s",
				hits, misses, cacheStats(st))
		}
		if st.FreshHits == 0 {
			t.Errorf("the cached query was never served from the cache: %s", cacheStats(st))
		}
		t.Logf("%d writes (%d in transactions), %d background reads (%d saw a value below one they had seen); %s",
			plainWrites+txWrites, txWrites, bgReads.Load(), regressed.Load(), cacheStats(st))
	})
}

// versionSpan is when the write that produced one version of a row ran:
// its UPDATE was sent at start and its commit was known at end.
type versionSpan struct{ start, end time.Time }

// versionLog records the versions of each row as the writers committed them.
type versionLog struct {
	mu   sync.Mutex
	rows map[int][]versionSpan // id → spans by version (index 0: the initial row)
}

func (l *versionLog) add(id int, version int64, start, end time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.rows[id]
	for int64(len(s)) <= version {
		s = append(s, versionSpan{})
	}
	if !s[version].end.IsZero() {
		return fmt.Errorf("row %d: version %d committed twice", id, version)
	}
	s[version] = versionSpan{start, end}
	l.rows[id] = s
	return nil
}

type versionRead struct {
	id         int
	version    int64
	start, end time.Time
}

// TestCacheDifferential: writers change a small table — some through the
// Shield, some behind its back on raw pgx — while readers read it through a
// cached query with a declared staleness (soft=50ms hard=200ms, no jitter).
// Each write bumps a version column and records when it ran. Afterwards
// every read is checked against that history:
//
//   - the version it returned is one PostgreSQL held (0 … final), and its
//     write had been sent before the read returned;
//   - it is not older than the hard bound: the entry served at time L ≥
//     read start was filled at F > L − hard, from a snapshot taken at most d
//     before F, so the version was current at some moment after
//     start − hard − d, hence the next version committed after that. A read
//     fails the check only when the next version's write had already
//     returned (so committed) before start − hard − slack, where slack
//     bounds d (the origin's own time plus scheduling) generously;
//   - right after a writer's own write through the Shield, its read returns
//     that version or a newer one (read-your-writes), checked inline.
func TestCacheDifferential(t *testing.T) {
	base := postgresDSN(t)
	admin := openRaw(t, base)
	const (
		rows        = 5 // rows 1–4 are read all the time, row 5 now and then
		hard        = 200 * time.Millisecond
		slack       = 100 * time.Millisecond
		duration    = 1500 * time.Millisecond
		readers     = 6
		shieldWrite = 2 // writers through the Shield
		rawWrite    = 1 // writers on raw pgx, unseen by the Shield
	)
	forEachExecMode(t, base, func(t *testing.T, dsn string) {
		ctx := testContext(t, testTimeout)
		table := "diff_" + uniqueID(t)
		mustExec(t, admin,
			fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, version bigint NOT NULL)`, table),
			fmt.Sprintf(`INSERT INTO %s SELECT g, 0 FROM generate_series(1, %d) AS g`, table, rows))
		cleanupExec(t, admin, "DROP TABLE IF EXISTS "+table)
		// Odd rows go through a query without XFetch (beta=0), so that
		// their entries are served stale while they refresh; even rows
		// through one with the default early refresh. Row 5 is read
		// rarely, so its entry also expires (past hard) between reads.
		body := fmt.Sprintf(`SELECT version FROM %s WHERE id = $1`, table)
		queries := [2]string{
			"/* sqlflight: soft=50ms hard=200ms jitter=0% */ " + body,
			"/* sqlflight: soft=50ms hard=200ms jitter=0% beta=0 */ " + body,
		}
		queryFor := func(id int) string { return queries[id%2] }
		update := fmt.Sprintf(`UPDATE %s SET version = version + 1 WHERE id = $1 RETURNING version`, table)
		db, sh := openFlight(t, dsn)
		raw := openRaw(t, dsn)

		log := &versionLog{rows: map[int][]versionSpan{}}
		var (
			wg        sync.WaitGroup
			errs      = newErrBudget(t, 5)
			mu        sync.Mutex
			reads     []versionRead
			rywChecks atomic.Int64
		)
		end := time.Now().Add(duration)
		// A write through the Shield invalidates the whole table, so those
		// are rarer than soft on average: entries live long enough to go
		// stale while the raw writer changes rows behind the Shield's back.
		writer := func(through *sql.DB, checkRYW bool, minPause, maxPause int) {
			defer wg.Done()
			for time.Now().Before(end) && ctx.Err() == nil {
				time.Sleep(time.Duration(minPause+rand.IntN(maxPause-minPause)) * time.Millisecond)
				id := 1 + rand.IntN(rows)
				start := time.Now()
				var v int64
				if err := through.QueryRowContext(ctx, update, id).Scan(&v); err != nil {
					errs.Errorf("update row %d: %v", id, err)
					return
				}
				if err := log.add(id, v, start, time.Now()); err != nil {
					errs.Errorf("%v", err)
				}
				if !checkRYW {
					continue
				}
				var got int64
				if err := db.QueryRowContext(ctx, queryFor(id), id).Scan(&got); err != nil {
					errs.Errorf("read row %d after writing version %d: %v", id, v, err)
					return
				}
				rywChecks.Add(1)
				if got < v {
					errs.Errorf("row %d: wrote version %d through the Shield, then read version %d: %s", id, v, got, cacheStats(sh.Stats()))
				}
			}
		}
		for range shieldWrite {
			wg.Add(1)
			go writer(db, true, 40, 250)
		}
		for range rawWrite {
			wg.Add(1)
			go writer(raw, false, 5, 30)
		}
		reader := func(pick func() int, pause func() time.Duration) {
			defer wg.Done()
			var mine []versionRead
			defer func() {
				mu.Lock()
				reads = append(reads, mine...)
				mu.Unlock()
			}()
			for time.Now().Before(end) && ctx.Err() == nil {
				id := pick()
				start := time.Now()
				var v int64
				if err := db.QueryRowContext(ctx, queryFor(id), id).Scan(&v); err != nil {
					errs.Errorf("read row %d: %v", id, err)
					return
				}
				mine = append(mine, versionRead{id, v, start, time.Now()})
				time.Sleep(pause())
			}
		}
		for range readers {
			wg.Add(1)
			go reader(func() int { return 1 + rand.IntN(rows-1) }, func() time.Duration { return time.Millisecond })
		}
		wg.Add(1)
		go reader(func() int { return rows }, func() time.Duration { return time.Duration(150+rand.IntN(200)) * time.Millisecond })
		wg.Wait()
		settleShield(t, sh)

		// Every version of every row must have been recorded once.
		final := map[int]int64{}
		func() {
			r, err := admin.QueryContext(ctx, fmt.Sprintf(`SELECT id, version FROM %s`, table))
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			for r.Next() {
				var id int
				var v int64
				if err := r.Scan(&id, &v); err != nil {
					t.Fatal(err)
				}
				final[id] = v
			}
			if err := r.Err(); err != nil {
				t.Fatal(err)
			}
		}()
		writes := 0
		for id := 1; id <= rows; id++ {
			spans := log.rows[id]
			if int64(len(spans)) != final[id]+1 && !(len(spans) == 0 && final[id] == 0) {
				t.Fatalf("row %d: %d versions recorded, final version %d", id, len(spans)-1, final[id])
			}
			for v := int64(1); v <= final[id]; v++ {
				if spans[v].end.IsZero() {
					t.Fatalf("row %d: version %d was never recorded", id, v)
				}
				writes++
			}
		}

		var (
			bad        int
			worstAge   time.Duration // how long before a read began its version had surely been replaced
			staleReads int
		)
		for _, r := range reads {
			spans := log.rows[r.id]
			if r.version < 0 || r.version > final[r.id] {
				errs.Errorf("row %d: read version %d, which PostgreSQL never held (final %d)", r.id, r.version, final[r.id])
				bad++
				continue
			}
			if r.version > 0 && !spans[r.version].start.Before(r.end) {
				errs.Errorf("row %d: read version %d before its write was sent", r.id, r.version)
				bad++
				continue
			}
			if r.version == final[r.id] {
				continue
			}
			replaced := spans[r.version+1].end // the next version had committed by then
			age := r.start.Sub(replaced)
			if age > 0 {
				staleReads++
				worstAge = max(worstAge, age)
			}
			if age > hard+slack {
				errs.Errorf("row %d: read version %d at %v, but version %d had committed %v before the read began (hard %v, slack %v)",
					r.id, r.version, r.start.Format("15:04:05.000"), r.version+1, age.Round(time.Millisecond), hard, slack)
				bad++
			}
		}
		st := sh.Stats()
		if len(reads) == 0 || writes == 0 {
			t.Fatalf("%d reads, %d writes: the test did nothing", len(reads), writes)
		}
		if st.FreshHits+st.StaleHits == 0 {
			t.Errorf("no read was served from the cache: %s", cacheStats(st))
		}
		t.Logf("%d writes, %d reads (%d of a version already replaced before the read began; worst by %v; bound %v + slack %v), %d read-your-writes checks, %d bad; %s",
			writes, len(reads), staleReads, worstAge.Round(time.Millisecond), hard, slack, rywChecks.Load(), bad, cacheStats(st))
	})
}

// TestNegativeCacheIntegration: lookups of missing ids return sql.ErrNoRows
// from a cached empty result (neg=1s), once per id in PostgreSQL; an INSERT
// through the Shield shows at once; an INSERT behind the Shield's back shows
// once the empty result expired.
func TestNegativeCacheIntegration(t *testing.T) {
	base := postgresDSN(t)
	admin := openRaw(t, base)
	const neg = time.Second
	forEachExecMode(t, base, func(t *testing.T, dsn string) {
		ctx := testContext(t, testTimeout)
		table, seq, fn := countedLookup(t, admin, "neg", "(1, 'one')")
		// The function reads the table; tables= says so to the Shield.
		query := fmt.Sprintf(`/* sqlflight: ttl=1m neg=1s jitter=0%% tables=%[1]s pure=%[2]s */ SELECT id, label FROM %[2]s($1)`, table, fn)
		db, sh := openFlight(t, dsn)
		execs := func() int64 { return sequenceCalls(t, admin, seq) }
		lookup := func(want int) (string, error) {
			var got int
			var label string
			err := db.QueryRowContext(ctx, query, want).Scan(&got, &label)
			if err == nil && got != want {
				t.Fatalf("looked up %d, got row %d", want, got)
			}
			return label, err
		}
		missing := func(want int) {
			t.Helper()
			if label, err := lookup(want); !errors.Is(err, sql.ErrNoRows) {
				t.Fatalf("lookup %d: got (%q, %v), want sql.ErrNoRows", want, label, err)
			}
		}

		// One missing id, twenty times.
		const repeats = 20
		t0 := time.Now()
		for range repeats {
			missing(404)
		}
		elapsed := time.Since(t0)
		// Each execution past the first needs the empty result to have
		// expired, a full neg after the fill before it (fills come after t0).
		limit := 1 + int64(elapsed/neg)
		if n := execs(); n < 1 || n > limit {
			t.Errorf("%d lookups of a missing id in %v: %d executions, want 1..%d: %s", repeats, elapsed, n, limit, cacheStats(sh.Stats()))
		}
		if st := sh.Stats(); limit == 1 && st.NegativeHits != repeats-1 {
			t.Errorf("negative hits %d, want %d: %s", st.NegativeHits, repeats-1, cacheStats(st))
		}

		// Other missing ids: one execution each.
		before := execs()
		t1 := time.Now()
		for range 3 {
			for want := 1000; want < 1005; want++ {
				missing(want)
			}
		}
		if n, limit := execs()-before, 5*(1+int64(time.Since(t1)/neg)); n < 5 || n > limit {
			t.Errorf("5 missing ids looked up 3 times each: %d executions, want 5..%d", n, limit)
		}

		// An INSERT through the Shield shows at once.
		if _, err := db.ExecContext(ctx, fmt.Sprintf(`INSERT INTO %s VALUES (404, 'found')`, table)); err != nil {
			t.Fatal(err)
		}
		before = execs()
		if label, err := lookup(404); err != nil || label != "found" {
			t.Fatalf("after INSERT through the Shield: (%q, %v), want the new row: %s", label, err, cacheStats(sh.Stats()))
		}
		if n := execs() - before; n != 1 {
			t.Errorf("the read after the INSERT ran %d times in PostgreSQL, want 1", n)
		}
		// And is cached in turn.
		beforeHits := sh.Stats().FreshHits
		if label, err := lookup(404); err != nil || label != "found" {
			t.Fatalf("second read of the new row: (%q, %v)", label, err)
		}
		if sh.Stats().FreshHits != beforeHits+1 {
			t.Errorf("the found row was not served from the cache: %s", cacheStats(sh.Stats()))
		}

		// An INSERT behind the Shield's back shows when the empty result
		// expires, not before. The empty result is filled after t2, so it is
		// fresh until after t2+neg: a lookup that starts before then must
		// still get it. (After that, either answer is possible.)
		t2 := time.Now()
		missing(405)
		if _, err := admin.ExecContext(ctx, fmt.Sprintf(`INSERT INTO %s VALUES (405, 'behind')`, table)); err != nil {
			t.Fatal(err)
		}
		lookupStart := time.Now()
		label, err := lookup(405)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err == nil && label == "behind":
			if lookupStart.Sub(t2) < neg {
				t.Errorf("the row inserted behind the Shield showed %v after the empty result was cached (neg=%v): it was not served from the negative cache: %s",
					lookupStart.Sub(t2), neg, cacheStats(sh.Stats()))
			}
		default:
			t.Fatalf("lookup 405: (%q, %v)", label, err)
		}
		time.Sleep(neg + neg/10) // real TTL: past neg for any fill before now
		if label, err := lookup(405); err != nil || label != "behind" {
			t.Fatalf("after neg expired: (%q, %v), want the row inserted behind the Shield", label, err)
		}
		t.Logf("%d executions in PostgreSQL; %s", execs(), cacheStats(sh.Stats()))
	})
}
