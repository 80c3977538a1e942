package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestDemoCoalescesHerd plays both herds in-process. In the sqlflight herd
// slow_price holds the origin until every caller waits on the flight, so
// exactly one execution is the only correct outcome, whatever the timing.
func TestDemoCoalescesHerd(t *testing.T) {
	const (
		callers = 50
		latency = 20 * time.Millisecond
	)
	cfg := demoConfig{callers: callers, latency: latency}
	cfg.hold = func(s *sqlflight.Shield) {
		if s == nil { // the unprotected herd
			time.Sleep(latency)
			return
		}
		deadline := time.Now().Add(30 * time.Second)
		for s.Stats().Waiting < callers {
			if time.Now().After(deadline) {
				t.Errorf("only %d of %d callers waiting on the flight after 30s", s.Stats().Waiting, callers)
				return
			}
			time.Sleep(time.Millisecond)
		}
	}

	var out bytes.Buffer
	results, err := playDemo(context.Background(), &out, cfg)
	t.Logf("progress:\n%s", &out)
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 2 {
		t.Fatalf("got %d herd results, want 2", len(results))
	}
	raw, shared := results[0], results[1]
	var table bytes.Buffer
	writeComparison(&table, results)
	t.Logf("results:\n%s", &table)

	if raw.errors != 0 {
		t.Errorf("unprotected herd: %d errors, e.g. %v", raw.errors, raw.firstErr)
	}
	if raw.stats != nil {
		t.Errorf("unprotected herd has sqlflight stats")
	}
	if shared.errors != 0 {
		t.Errorf("sqlflight herd: %d errors, e.g. %v", shared.errors, shared.firstErr)
	}
	if shared.peak != 1 {
		t.Errorf("sqlflight herd: %d origin executions at once, want 1", shared.peak)
	}
	if shared.origin != 1 {
		t.Errorf("sqlflight herd: %d origin executions counted in SQLite, want 1", shared.origin)
	}
	// The Shield's first Connect opens a real connection to learn the
	// driver's shape; the flight's leader, often another virtual connection,
	// may open a second one. Followers never open any.
	if shared.realConns < 1 || shared.realConns > 2 {
		t.Errorf("sqlflight herd: %d SQLite connections opened, want 1 or 2", shared.realConns)
	}
	if st := shared.stats; st == nil {
		t.Errorf("sqlflight herd has no stats")
	} else if st.RealConnsOpened != uint64(shared.realConns) {
		t.Errorf("sqlflight counted %d real connections opened, SQLite %d", st.RealConnsOpened, shared.realConns)
	} else if st.Flights != 1 || st.Followers != callers-1 || st.OriginExecutions != 1 || st.Bypassed != 0 {
		t.Errorf("sqlflight stats: flights %d, followers %d, origin executions %d, bypassed %d; want 1, %d, 1, 0",
			st.Flights, st.Followers, st.OriginExecutions, st.Bypassed, callers-1)
	}
	if err := verdict(&bytes.Buffer{}, raw, shared); err != nil {
		t.Errorf("verdict: %v", err)
	}
}

// TestVerdict checks which herd outcomes the demo reports as sqlflight bugs.
func TestVerdict(t *testing.T) {
	raw := herdResult{name: "no protection", callers: 1000, origin: 1000, peak: 1000}
	for _, c := range []struct {
		name   string
		shared herdResult
		bug    bool
	}{
		{"one flight", herdResult{callers: 1000, origin: 1, peak: 1}, false},
		{"sequential stragglers", herdResult{callers: 1000, origin: handful + 20, peak: 1}, false},
		{"overlapping flights", herdResult{callers: 1000, origin: 2, peak: 2}, true},
		{"no coalescing", herdResult{callers: 1000, origin: 600, peak: 1}, true},
		{"failed caller", herdResult{callers: 1000, origin: 1, peak: 1, errors: 1, firstErr: errors.New("boom")}, true},
	} {
		var out bytes.Buffer
		err := verdict(&out, raw, c.shared)
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
		{[]string{"demo", "-nope"}, exitUsage, "flag provided but not defined"},
		{[]string{"demo", "-callers", "0"}, exitUsage, "-callers must be at least 1"},
		{[]string{"demo", "-latency", "-1s"}, exitUsage, "-latency must not be negative"},
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
