package integration

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/sqlflight/sqlflight"
)

// TestPrewarmAfterRestart: an instance reads hot keys and saves its hot
// set; a new instance that starts cold under a wave of reads (one caller
// per hot key, released together) sends one origin per hot key to the
// database at once; one that pre-warms from the snapshot first (at most
// `conc` origins at once) serves the same wave with no origin at all, and
// no error. Origins are counted by the database (a sequence the lookup
// function bumps); "the first second" is the first wave.
func TestPrewarmAfterRestart(t *testing.T) {
	base := postgresDSN(t)
	admin := openRaw(t, base)
	forEachExecMode(t, base, func(t *testing.T, dsn string) {
		ctx := testContext(t, testTimeout)
		const hot, conc = 8, 4 // 8: the hot keys kept per statement
		var values []string
		for k := 1; k <= hot; k++ {
			values = append(values, fmt.Sprintf("(%d, 'item %d')", k, k))
		}
		table, seq, fn := countedLookup(t, admin, "warm", strings.Join(values, ", "))
		q := fmt.Sprintf(`/* sqlflight: ttl=5m tables=%[1]s pure=%[2]s */ SELECT id, label FROM %[2]s($1)`, table, fn)

		old, a := openFlight(t, dsn)
		for k := 1; k <= hot; k++ { // one after another: each key is counted
			for range 3 {
				var id int
				var label string
				if err := old.QueryRowContext(ctx, q, k).Scan(&id, &label); err != nil {
					t.Fatal(err)
				}
			}
		}
		var snap bytes.Buffer
		if err := a.SaveHotSet(&snap); err != nil {
			t.Fatal(err)
		}

		// A cold restart: one origin per hot key in the first wave.
		cold, _ := openFlight(t, dsn)
		before := sequenceCalls(t, admin, seq)
		if errs := wave(ctx, t, cold, q, hot); errs != 0 {
			t.Fatalf("%d errors", errs)
		}
		coldOrigins := sequenceCalls(t, admin, seq) - before

		// A restart that pre-warms before it takes the wave.
		warm, b := openFlight(t, dsn)
		before = sequenceCalls(t, admin, seq)
		rep, err := b.Prewarm(ctx, sqlflight.PrewarmOptions{DB: warm, From: bytes.NewReader(snap.Bytes()), TrustFile: true,
			Concurrency: conc, TrustAnnotations: true})
		if err != nil || rep.Replayed != hot || rep.Failed != 0 {
			t.Fatalf("Prewarm: %+v, %v", rep, err)
		}
		warmed := sequenceCalls(t, admin, seq) - before
		if errs := wave(ctx, t, warm, q, hot); errs != 0 {
			t.Fatalf("%d errors", errs)
		}
		firstWave := sequenceCalls(t, admin, seq) - before - warmed
		t.Logf("origins in the first wave: cold %d, pre-warmed %d (pre-warming ran %d, at most %d at once)",
			coldOrigins, firstWave, warmed, conc)
		if coldOrigins != hot || warmed != hot || firstWave > conc || firstWave != 0 {
			t.Fatalf("cold %d, warmed %d, first wave after pre-warming %d", coldOrigins, warmed, firstWave)
		}
		if st := b.Stats(); st.PrewarmReplayed != hot || st.FreshHits != hot {
			t.Errorf("stats: %d replayed, %d fresh hits", st.PrewarmReplayed, st.FreshHits)
		}
	})
}

// wave reads each of keys 1..n once, from n goroutines released together,
// and returns the errors.
func wave(ctx context.Context, t *testing.T, db *sql.DB, q string, n int) int {
	var wg sync.WaitGroup
	var mu sync.Mutex
	errs := 0
	start := make(chan struct{})
	for k := 1; k <= n; k++ {
		wg.Go(func() {
			<-start
			var id int
			var label string
			if err := db.QueryRowContext(ctx, q, k).Scan(&id, &label); err != nil || id != k {
				mu.Lock()
				errs++
				mu.Unlock()
				t.Errorf("key %d: %d, %v", k, id, err)
			}
		})
	}
	close(start)
	wg.Wait()
	return errs
}

// TestPrewarmRefusesHostileSnapshot: a snapshot is untrusted input. Writes,
// statements whose server verdict forbids sharing, and statements that
// vouch for a VOLATILE function with pure= are refused: the function never
// runs and the table is unchanged.
func TestPrewarmRefusesHostileSnapshot(t *testing.T) {
	dsn := postgresDSN(t)
	admin := openRaw(t, dsn)
	ctx := testContext(t, testTimeout)
	table, seq, fn := countedLookup(t, admin, "hostile", "(1, 'one')")
	statements := []string{
		fmt.Sprintf(`/* sqlflight: ttl=1h */ UPDATE %s SET label = 'pwned' WHERE id = $1`, table),
		fmt.Sprintf(`/* sqlflight: ttl=1h */ SELECT id, label FROM %s($1)`, fn),               // VOLATILE, not vouched
		fmt.Sprintf(`/* sqlflight: ttl=1h pure=%[1]s */ SELECT id, label FROM %[1]s($1)`, fn), // vouched by the snapshot
		fmt.Sprintf(`/* sqlflight: ttl=1h */ SELECT id, label FROM %s WHERE id = $1 FOR UPDATE`, table),
		fmt.Sprintf(`/* sqlflight: ttl=1h */ SELECT pg_advisory_lock($1)`),
	}
	var sts []map[string]any
	for _, s := range statements {
		sts = append(sts, map[string]any{"fingerprint": "x", "text": s, "calls": 1000,
			"keys": []any{map[string]any{"calls": 1000, "args": []any{map[string]string{"t": "int64", "v": "1"}}}}})
	}
	data, _ := json.Marshal(map[string]any{"format": "sqlflight-hotset", "version": 1, "statements": sts})
	db, s := openFlight(t, dsn)
	rep, err := s.Prewarm(ctx, sqlflight.PrewarmOptions{DB: db, From: bytes.NewReader(data), TrustFile: true})
	if err != nil || rep.Refused != len(statements) || rep.Replayed != 0 {
		t.Fatalf("%+v %v", rep, err)
	}
	var label string
	if err := admin.QueryRowContext(ctx, fmt.Sprintf(`SELECT label FROM %s WHERE id = 1`, table)).Scan(&label); err != nil || label != "one" {
		t.Fatalf("table changed: %q %v", label, err)
	}
	if n := sequenceCalls(t, admin, seq); n != 0 {
		t.Fatalf("the volatile function ran %d times", n)
	}
}
