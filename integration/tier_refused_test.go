package integration

import (
	"bytes"
	"context"
	"database/sql"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight"
	"github.com/sqlflight/sqlflight/redistier"
)

// firstReads is the number of distinct reads a scope makes in the
// first-read measurements below.
const firstReads = 10

// refusedAddr returns a loopback address where nothing listens: a port that
// was listened on and closed.
func refusedAddr(tb testing.TB) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// openFirstReads opens dsn with sql.Open (a Shield of its own, and its
// shared tier if the DSN names one), makes n distinct reads through it and
// closes it, returning how long the first read and all of them took.
func openFirstReads(tb testing.TB, dsn string, n int) (first, all time.Duration) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	db, err := sql.Open("sqlflight", dsn)
	if err != nil {
		tb.Fatal(err)
	}
	sh := sqlflight.ShieldOf(db)
	defer func() {
		_ = db.Close()
		if sh != nil && sh != sqlflight.Default() {
			_ = sh.Close()
		}
	}()
	for i := range n {
		var got int
		if err := db.QueryRowContext(ctx, `/* sqlflight: ttl=30s */ SELECT $1::int`, i).Scan(&got); err != nil || got != i {
			tb.Fatalf("read %d: %v, %d", i, err, got)
		}
		if i == 0 {
			first = time.Since(start)
		}
	}
	return first, time.Since(start)
}

// debugLines is a slog.Handler that keeps the messages and "line"
// attributes of what it is handed.
type debugLines struct {
	mu    sync.Mutex
	lines []string
}

func (h *debugLines) Enabled(context.Context, slog.Level) bool { return true }
func (h *debugLines) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *debugLines) WithGroup(string) slog.Handler            { return h }
func (h *debugLines) Handle(_ context.Context, r slog.Record) error {
	line := r.Level.String() + " " + r.Message
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "line" {
			line += ": " + a.Value.String()
		}
		return true
	})
	h.mu.Lock()
	h.lines = append(h.lines, line)
	h.mu.Unlock()
	return nil
}

// count returns how many lines contain s.
func (h *debugLines) count(s string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, l := range h.lines {
		if strings.Contains(l, s) {
			n++
		}
	}
	return n
}

// refusedFirstReads opens a DSN whose shared tier is a Redis address where
// nothing listens, makes firstReads distinct reads through it, checks that
// each was answered by the database and that the tier went down once, and
// returns the Shield's Stats.
func refusedFirstReads(t *testing.T) sqlflight.Stats {
	t.Helper()
	id := uniqueID(t)
	dsn := withDSNParams(t, postgresDSN(t), "sqlflight.shared", redisTarget(refusedAddr(t)),
		"sqlflight.key_prefix", "sqlflight:refusedfirst:"+id+":", "sqlflight.shared_secret", fleetSecret,
		"application_name", "sqlflight_refusedfirst_"+id)
	db, sh := openDSN(t, dsn)
	ctx := testContext(t, testTimeout)
	for i := range firstReads {
		var got int
		if err := db.QueryRowContext(ctx, `/* sqlflight: soft=30s */ SELECT $1::int`, i).Scan(&got); err != nil || got != i {
			t.Fatalf("read %d with Redis refusing: %v, %d", i, err, got)
		}
	}
	st := sh.Stats()
	// Every read reached the database; the first refusal took the tier
	// down, and it stayed down (a probe that fails is no transition).
	if st.OriginExecutions != firstReads || st.OriginErrors != 0 || st.SharedState != "down" ||
		st.SharedTransitions != 1 || st.SharedErrors == 0 {
		t.Fatalf("after %d reads with Redis refusing: %s", firstReads, statsString(st))
	}
	return st
}

// TestRefusedTierLinesGoToSetLogger: go-redis's own lines about the
// refused dials of a DSN's tier go to the logger redistier.SetLogger set,
// at debug level.
func TestRefusedTierLinesGoToSetLogger(t *testing.T) {
	h := &debugLines{}
	redistier.SetLogger(slog.New(h))
	t.Cleanup(func() { redistier.SetLogger(nil) })
	refusedFirstReads(t)
	if h.count("DEBUG redistier: go-redis: redis: connection pool: failed to dial after 1 attempts") == 0 {
		t.Fatalf("no go-redis line of a failed dial reached redistier's logger: %q", h.lines)
	}
}

// TestRefusedTierStderrQuiet: a process whose DSN's tier refuses
// connections prints the Shield's one warning that the tier is down, and
// none of go-redis's own lines (go-redis writes them to standard error
// unless its logger is replaced). It reads the standard error of a child
// process that makes the reads.
func TestRefusedTierStderrQuiet(t *testing.T) {
	if os.Getenv("SQLFLIGHT_REFUSED_CHILD") == "1" {
		refusedFirstReads(t)
		return
	}
	postgresDSN(t) // skips (or fails) here without PostgreSQL, not in the child
	ctx := testContext(t, testTimeout)
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestRefusedTierStderrQuiet$", "-test.count=1")
	cmd.Env = append(os.Environ(), "SQLFLIGHT_REFUSED_CHILD=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("child: %v\n%s\n%s", err, stdout.String(), stderr.String())
	}
	out := stderr.String()
	if strings.Contains(out, "redis: ") || strings.Contains(out, "failed to dial") {
		t.Fatalf("go-redis wrote to standard error:\n%s", out)
	}
	if n := strings.Count(out, "sqlflight: shared tier unavailable"); n != 1 {
		t.Fatalf("the Shield warned %d times that the tier was down, want once:\n%s", n, out)
	}
}

// BenchmarkFirstReadsRefusedTier measures what a scope's first reads cost
// (sql.Open, a Shield of the DSN's own, its first connection to PostgreSQL
// and firstReads distinct reads) without a shared tier and with one whose
// Redis refuses connections. Each iteration opens both, in turns, so that
// the load of the machine weighs on both alike; it reports the medians:
// ms/first-none and ms/first-refused for the first read (the open
// included), ms/reads-none and ms/reads-refused for all of them, and
// ms/extra the median of the refused tier's extra cost over the same
// iteration's run without one.
func BenchmarkFirstReadsRefusedTier(b *testing.B) {
	pg := postgresDSN(b)
	refused := []string{"sqlflight.shared", redisTarget(refusedAddr(b)), "sqlflight.shared_secret", fleetSecret}
	id := uniqueID(b)
	var firstNone, firstRefused, allNone, allRefused, extra []float64
	i := 0
	run := func(kv []string) (first, all float64) {
		i++
		// A DSN of its own each time: a new scope, a new Shield, a new
		// tier client.
		kv = append([]string{"sqlflight.key_prefix", "sqlflight:firstreads:" + id + ":" + strconv.Itoa(i) + ":"}, kv...)
		f, a := openFirstReads(b, withDSNParams(b, pg, kv...), firstReads)
		return float64(f) / 1e6, float64(a) / 1e6
	}
	for b.Loop() {
		var fn, an, fr, ar float64
		if i%4 == 0 {
			fn, an = run(nil)
			fr, ar = run(refused)
		} else {
			fr, ar = run(refused)
			fn, an = run(nil)
		}
		firstNone, allNone = append(firstNone, fn), append(allNone, an)
		firstRefused, allRefused = append(firstRefused, fr), append(allRefused, ar)
		extra = append(extra, ar-an)
	}
	b.ReportMetric(median(firstNone), "ms/first-none")
	b.ReportMetric(median(firstRefused), "ms/first-refused")
	b.ReportMetric(median(allNone), "ms/reads-none")
	b.ReportMetric(median(allRefused), "ms/reads-refused")
	b.ReportMetric(median(extra), "ms/extra")
}

// median returns the median of xs (which it sorts).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	if n := len(xs); n%2 == 0 {
		return (xs[n/2-1] + xs[n/2]) / 2
	}
	return xs[len(xs)/2]
}
