package main

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight"
	"github.com/sqlflight/sqlflight/internal/leaktest"
)

func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }

// gate returns a hold function that, in the protected ways, keeps the origin
// execution running until every caller of the wave waits on its flight, so
// that one execution is the only correct outcome whatever the timing; the
// unprotected way sleeps latency.
func gate(t *testing.T, callers int, latency time.Duration) func(int, *sqlflight.Shield) {
	return func(_ int, s *sqlflight.Shield) {
		if s == nil {
			time.Sleep(latency)
			return
		}
		deadline := time.Now().Add(30 * time.Second)
		for s.Stats().Waiting < int64(callers) {
			if time.Now().After(deadline) {
				t.Errorf("only %d of %d callers waiting on the flight after 30s", s.Stats().Waiting, callers)
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// TestDemoCoalescesHerd plays the three ways on a single wave in-process,
// with the origin gated in the protected ways.
func TestDemoCoalescesHerd(t *testing.T) {
	const (
		callers = 50
		latency = 20 * time.Millisecond
	)
	cfg := demoConfig{
		callers: callers, interval: 10 * time.Millisecond, duration: 10 * time.Millisecond, latency: latency,
		soft: time.Minute, hard: time.Minute, conns: 0, bucket: 10 * time.Millisecond,
	}
	cfg.hold = gate(t, callers, latency)

	var out bytes.Buffer
	results, err := playDemo(context.Background(), &out, cfg)
	t.Logf("progress:\n%s", &out)
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 3 {
		t.Fatalf("got %d way results, want 3", len(results))
	}
	var table bytes.Buffer
	writeComparison(&table, results)
	t.Logf("results:\n%s", &table)

	raw, shared, ttl := results[wayRaw], results[wayCoalesce], results[wayTTL]
	for _, r := range results {
		if r.errors != 0 {
			t.Errorf("%s: %d errors, e.g. %v", r.name, r.errors, r.firstErr)
		}
		if r.callers != callers || r.waves != 1 {
			t.Errorf("%s: %d callers in %d waves, want %d in 1", r.name, r.callers, r.waves, callers)
		}
	}
	if raw.origin != callers {
		t.Errorf("unprotected way: %d origin executions, want one per caller: %d", raw.origin, callers)
	}
	if raw.stats != nil {
		t.Errorf("unprotected way has sqlflight stats")
	}
	if shared.peak != 1 || shared.origin != 1 {
		t.Errorf("coalescing way: %d origin executions counted in SQLite, %d at once; want 1, 1", shared.origin, shared.peak)
	}
	if st := shared.stats; st == nil {
		t.Errorf("coalescing way has no stats")
	} else if st.Flights != 1 || st.Followers != callers-1 || st.OriginExecutions != 1 || st.Bypassed != 0 {
		t.Errorf("coalescing stats: flights %d, followers %d, origin executions %d, bypassed %d; want 1, %d, 1, 0",
			st.Flights, st.Followers, st.OriginExecutions, st.Bypassed, callers-1)
	}
	if ttl.origin != 1 {
		t.Errorf("TTL way: %d origin executions, want 1", ttl.origin)
	}
	if err := verdict(io.Discard, results); err != nil {
		t.Errorf("verdict: %v", err)
	}
}

// TestDemoPacedHerd plays the three ways on a paced workload of several
// waves; it checks counts only. Every unprotected call reaches the database;
// the cached way, whose entries outlive the run, reaches it less often.
func TestDemoPacedHerd(t *testing.T) {
	const (
		callers = 10
		waves   = 10
	)
	cfg := demoConfig{
		callers: callers, interval: 20 * time.Millisecond, duration: waves * 20 * time.Millisecond,
		latency: 5 * time.Millisecond, soft: 30 * time.Millisecond, hard: time.Minute,
		conns: 4, bucket: 20 * time.Millisecond, progress: 50 * time.Millisecond,
	}
	var out bytes.Buffer
	results, err := playDemo(context.Background(), &out, cfg)
	t.Logf("progress:\n%s", &out)
	if err != nil {
		t.Fatal(err)
	}
	var table bytes.Buffer
	writeComparison(&table, results)
	t.Logf("results:\n%s", &table)

	raw, shared, ttl := results[wayRaw], results[wayCoalesce], results[wayTTL]
	for _, r := range results {
		if r.errors != 0 {
			t.Errorf("%s: %d errors, e.g. %v", r.name, r.errors, r.firstErr)
		}
		var sum int64
		calls := 0
		for _, b := range r.buckets {
			sum += b.origin
			calls += b.calls
		}
		if sum != r.origin || calls != r.callers {
			t.Errorf("%s: buckets hold %d origin executions and %d callers, want %d and %d", r.name, sum, calls, r.origin, r.callers)
		}
	}
	if raw.origin != callers*waves {
		t.Errorf("unprotected way: %d origin executions, want one per call: %d", raw.origin, callers*waves)
	}
	if shared.origin < 1 || shared.origin > raw.origin {
		t.Errorf("coalescing way: %d origin executions, want 1 to %d", shared.origin, raw.origin)
	}
	if ttl.origin < 1 || ttl.origin >= raw.origin {
		t.Errorf("TTL way: %d origin executions, want at least 1 and fewer than the unprotected way's %d", ttl.origin, raw.origin)
	}

	path := filepath.Join(t.TempDir(), "chart.svg")
	if err := writeChartFile(path, cfg, results); err != nil {
		t.Fatal(err)
	}
	checkSVG(t, path, results)
}

// checkSVG parses the chart at path as XML and checks that it is an SVG
// naming every way.
func checkSVG(t *testing.T, path string, results []herdResult) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(bytes.NewReader(data))
	var (
		root  string
		depth int
		paths int
		text  strings.Builder
	)
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("chart is not well-formed XML: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if depth == 0 {
				root = tok.Name.Local
				if tok.Name.Space != "http://www.w3.org/2000/svg" {
					t.Errorf("root element in namespace %q, want SVG's", tok.Name.Space)
				}
			}
			if tok.Name.Local == "path" {
				paths++
			}
			depth++
		case xml.EndElement:
			depth--
		case xml.CharData:
			text.Write(tok)
		}
	}
	if root != "svg" || depth != 0 {
		t.Errorf("chart root %q, final depth %d; want svg, 0", root, depth)
	}
	if paths < len(results) {
		t.Errorf("chart has %d paths, want at least one per way", paths)
	}
	want := []string{"time since the way started (s)"}
	for _, r := range results {
		want = append(want, r.name)
	}
	for _, want := range want {
		if !strings.Contains(text.String(), want) {
			t.Errorf("chart text lacks %q", want)
		}
	}
}

// TestDemoCommand runs the command end to end on a tiny workload.
func TestDemoCommand(t *testing.T) {
	chart := filepath.Join(t.TempDir(), "demo.svg")
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"demo", "-callers", "5", "-interval", "10ms", "-duration", "50ms",
		"-latency", "1ms", "-soft", "20ms", "-hard", "1m", "-chart", chart}, &stdout, &stderr)
	t.Logf("output:\n%s%s", &stdout, &stderr)
	if code != exitOK {
		t.Fatalf("exit %d, want %d", code, exitOK)
	}
	for _, want := range []string{"way 3/3: soft/hard TTL", "| **origin queries** (counted by the database)", "chart: " + chart} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if _, err := os.Stat(chart); err != nil {
		t.Errorf("chart not written: %v", err)
	}
}

// TestDemoPostgres plays a small paced herd against the Postgres of
// SQLFLIGHT_POSTGRES_DSN, counted by Postgres itself.
func TestDemoPostgres(t *testing.T) {
	dsn := os.Getenv("SQLFLIGHT_POSTGRES_DSN")
	if dsn == "" {
		if os.Getenv("SQLFLIGHT_REQUIRE_INTEGRATION") == "1" {
			t.Fatal("SQLFLIGHT_POSTGRES_DSN is not set but SQLFLIGHT_REQUIRE_INTEGRATION=1")
		}
		t.Skip("SQLFLIGHT_POSTGRES_DSN is not set")
	}
	const (
		callers = 10
		waves   = 5
	)
	cfg := demoConfig{
		callers: callers, interval: 30 * time.Millisecond, duration: waves * 30 * time.Millisecond,
		latency: 5 * time.Millisecond, soft: 40 * time.Millisecond, hard: time.Minute,
		conns: 4, bucket: 30 * time.Millisecond, dsn: dsn,
	}
	var out bytes.Buffer
	results, err := playDemo(context.Background(), &out, cfg)
	t.Logf("progress:\n%s", &out)
	if err != nil {
		t.Fatal(err)
	}
	raw, ttl := results[wayRaw], results[wayTTL]
	for _, r := range results {
		if r.errors != 0 {
			t.Errorf("%s: %d errors, e.g. %v", r.name, r.errors, r.firstErr)
		}
	}
	if raw.origin != callers*waves {
		t.Errorf("unprotected way: %d origin executions counted by Postgres, want %d", raw.origin, callers*waves)
	}
	if ttl.origin < 1 || ttl.origin >= raw.origin {
		t.Errorf("TTL way: %d origin executions, want at least 1 and fewer than %d", ttl.origin, raw.origin)
	}
	// The peak is measured by Postgres too (from the runs slow_price notes).
	for _, r := range results {
		if r.peak < 1 || r.peak > r.origin || r.peak > int64(cfg.conns) {
			t.Errorf("%s: peak %d for %d origin executions on %d connections", r.name, r.peak, r.origin, cfg.conns)
		}
	}
	if p := results[wayCoalesce].peak; p != 1 {
		t.Errorf("coalescing way: %d executions at once, want 1", p)
	}
	var tbl strings.Builder
	writeComparison(&tbl, results)
	if !strings.Contains(tbl.String(), "| origin queries running at once (peak)") {
		t.Errorf("the Postgres table lacks the peak row:\n%s", tbl.String())
	}
}

// TestMakeBuckets checks how samples and callers fall into buckets.
func TestMakeBuckets(t *testing.T) {
	ms := time.Millisecond
	bs := makeBuckets(10*ms, []int64{2, 5}, 6,
		[]time.Duration{1 * ms, 2 * ms, 15 * ms, 31 * ms},
		[]time.Duration{4 * ms, 8 * ms, 3 * ms, 1 * ms})
	want := []bucket{{origin: 2, calls: 2, p99: 8 * ms}, {origin: 3, calls: 1, p99: 3 * ms}, {origin: 1}, {calls: 1, p99: 1 * ms}}
	if len(bs) != len(want) {
		t.Fatalf("got %d buckets %+v, want %+v", len(bs), bs, want)
	}
	for i := range want {
		if bs[i] != want[i] {
			t.Errorf("bucket %d: %+v, want %+v", i, bs[i], want[i])
		}
	}
}

// TestVerdict checks which outcomes the demo reports as sqlflight bugs.
func TestVerdict(t *testing.T) {
	raw := herdResult{name: "no protection", callers: 1000, waves: 1, origin: 1000, peak: 1000}
	ttl := herdResult{name: "soft/hard TTL", callers: 1000, waves: 1, origin: 1, peak: 1}
	for _, c := range []struct {
		name   string
		shared herdResult
		ttl    herdResult
		bug    bool
	}{
		{"one flight", herdResult{callers: 1000, waves: 1, origin: 1, peak: 1}, ttl, false},
		{"sequential stragglers", herdResult{callers: 1000, waves: 1, origin: handful + 20, peak: 1}, ttl, false},
		{"one flight per wave", herdResult{callers: 1000, waves: 20, origin: 20, peak: 1}, ttl, false},
		{"overlapping flights", herdResult{callers: 1000, waves: 1, origin: 2, peak: 2}, ttl, true},
		{"no coalescing", herdResult{callers: 1000, waves: 1, origin: 600, peak: 1}, ttl, true},
		{"failed caller", herdResult{callers: 1000, waves: 1, origin: 1, peak: 1, errors: 1, firstErr: errors.New("boom")}, ttl, true},
		{"failed cached caller", herdResult{callers: 1000, waves: 1, origin: 1, peak: 1},
			herdResult{callers: 1000, waves: 1, origin: 1, errors: 1, firstErr: errors.New("boom")}, true},
		{"peak unknown", herdResult{callers: 1000, waves: 1, origin: 1, peak: -1}, ttl, false},
	} {
		var out bytes.Buffer
		err := verdict(&out, []herdResult{raw, c.shared, c.ttl})
		if (err != nil) != c.bug {
			t.Errorf("%s: verdict error %v, want a bug reported: %v", c.name, err, c.bug)
		}
	}
}

func TestPercentile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i))
	}
	for _, c := range []struct {
		in   []time.Duration
		p    int
		want time.Duration
	}{
		{d, 50, 50}, {d, 99, 99}, {d, 100, 100}, {d[:1], 50, 1}, {d[:1], 99, 1}, {d[:10], 99, 10}, {d[:10], 50, 5},
	} {
		if got := percentile(c.in, c.p); got != c.want {
			t.Errorf("percentile(n=%d, %d) = %d, want %d", len(c.in), c.p, got, c.want)
		}
	}
}

func TestNiceStep(t *testing.T) {
	for _, c := range []struct {
		span float64
		n    int
		want float64
	}{
		{6, 8, 1}, {2.1, 8, 0.5}, {5000, 6, 1000}, {0, 5, 1}, {0.3, 6, 0.05},
	} {
		if got := niceStep(c.span, c.n); got != c.want {
			t.Errorf("niceStep(%g, %d) = %g, want %g", c.span, c.n, got, c.want)
		}
	}
}

// TestUsage checks dispatch and exit codes without playing a herd.
func TestUsage(t *testing.T) {
	for _, c := range []struct {
		args     []string
		code     int
		contains string // in stdout+stderr
	}{
		{nil, exitUsage, "Commands:"},
		{[]string{"-h"}, exitOK, "demo"},
		{[]string{"help"}, exitOK, "demo"},
		{[]string{"frobnicate"}, exitUsage, `unknown command "frobnicate"`},
		{[]string{"demo", "-h"}, exitOK, "-callers"},
		{[]string{"demo", "-h"}, exitOK, "-dsn"},
		{[]string{"demo", "-nope"}, exitUsage, "flag provided but not defined"},
		{[]string{"demo", "-callers", "0"}, exitUsage, "-callers must be at least 1"},
		{[]string{"demo", "-latency", "-1s"}, exitUsage, "-latency must not be negative"},
		{[]string{"demo", "-interval", "0"}, exitUsage, "-interval must be positive"},
		{[]string{"demo", "-duration", "1ms"}, exitUsage, "-duration must be at least -interval"},
		{[]string{"demo", "-soft", "2s", "-hard", "1s"}, exitUsage, "-soft <= -hard"},
		{[]string{"demo", "-conns", "-1"}, exitUsage, "-conns must not be negative"},
		{[]string{"demo", "-dsn", "mysql://x"}, exitUsage, "postgres:// URL"},
		{[]string{"demo", "extra"}, exitUsage, "unexpected arguments"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), c.args, &stdout, &stderr)
		out := stdout.String() + stderr.String()
		if code != c.code || !strings.Contains(out, c.contains) {
			t.Errorf("sqlflight %q: exit %d, want %d; output %q should contain %q", c.args, code, c.code, out, c.contains)
		}
	}
}

// TestChartLogAxisHasNoZero: the origin panel's log axis is labelled 1, 10,
// 100, …, never 0.
func TestChartLogAxisHasNoZero(t *testing.T) {
	cfg := demoConfig{callers: 10, interval: 100 * time.Millisecond, duration: time.Second, latency: time.Millisecond,
		bucket: 100 * time.Millisecond}
	rs := []herdResult{{name: "no protection", buckets: []bucket{{origin: 0}, {origin: 150, calls: 10, p99: time.Second}}}}
	var b strings.Builder
	if err := writeChart(&b, cfg, rs); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`text-anchor="end">1<`, `text-anchor="end">10<`, `text-anchor="end">1000<`} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("chart lacks the tick %s", want)
		}
	}
	if strings.Contains(b.String(), `text-anchor="end">0<`) {
		t.Error("the log axis has a 0 tick")
	}
}

// TestVerdictSaysWhyCoalescingOpensConnections: the demo's output explains
// the real connections the coalescing way opened.
func TestVerdictSaysWhyCoalescingOpensConnections(t *testing.T) {
	raw := herdResult{name: "no protection", callers: 2000, waves: 20, origin: 2000, peak: 20}
	shared := herdResult{name: "coalescing only", callers: 2000, waves: 20, origin: 20, peak: 1,
		stats: &sqlflight.Stats{RealConnsOpened: 19}}
	ttl := herdResult{name: "soft/hard TTL", callers: 2000, waves: 20, origin: 10, peak: 1}
	var b strings.Builder
	if err := verdict(&b, []herdResult{raw, shared, ttl}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "coalescing only opened 19 real connections") || !strings.Contains(b.String(), "each wave's leader") {
		t.Errorf("output does not say why:\n%s", b.String())
	}
}

// TestDemoDeploy plays the deploy scenario on the embedded database: a
// cold restart sends one origin per product in its first wave; the
// pre-warmed one none, after warming every product at most warmConc at
// once; no caller fails.
func TestDemoDeploy(t *testing.T) {
	cfg := demoConfig{
		callers: 40, interval: 10 * time.Millisecond, duration: 30 * time.Millisecond, latency: 5 * time.Millisecond,
		soft: time.Minute, hard: time.Minute, bucket: 10 * time.Millisecond, scenario: "deploy", warmConc: 2,
	}
	var out bytes.Buffer
	results, err := playDeploy(context.Background(), &out, cfg)
	t.Logf("progress:\n%s", &out)
	if err != nil {
		t.Fatal(err)
	}
	cold, warm := results[deployCold], results[deployWarm]
	keys := int64(len(products))
	// Cold, each hot key is a miss at once: one origin each, or (a caller
	// that looked in the cache before its key's flight began and came to
	// the flights after it ended) one more.
	if cold.firstWave < keys || cold.warmOrigin != 0 {
		t.Errorf("cold restart: %d origins in the first wave, want at least %d", cold.firstWave, keys)
	}
	if warm.warmOrigin != keys || warm.warmPeak > int64(cfg.warmConc) || warm.firstWave != 0 || warm.origin != 0 {
		t.Errorf("pre-warmed restart: warming ran %d (at most %d at once, cap %d); then %d in the first wave, %d in all",
			warm.warmOrigin, warm.warmPeak, cfg.warmConc, warm.firstWave, warm.origin)
	}
	var table bytes.Buffer
	writeDeployComparison(&table, results)
	if err := deployVerdict(&table, results); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "origin queries in the first wave") {
		t.Errorf("table:\n%s", &table)
	}
	svg := filepath.Join(t.TempDir(), "deploy.svg")
	if err := writeChartFile(svg, cfg, results); err != nil {
		t.Fatal(err)
	}
	checkSVG(t, svg, results)
}
