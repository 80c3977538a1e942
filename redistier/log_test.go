package redistier

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// lineLog is a slog.Handler that keeps the go-redis lines it is handed,
// with their level.
type lineLog struct {
	mu    sync.Mutex
	lines []loggedLine
}

type loggedLine struct {
	level slog.Level
	text  string
}

func (h *lineLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *lineLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *lineLog) WithGroup(string) slog.Handler            { return h }
func (h *lineLog) Handle(_ context.Context, r slog.Record) error {
	l := loggedLine{level: r.Level}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "line" {
			l.text = a.Value.String()
		}
		return true
	})
	if r.Message != "redistier: go-redis" {
		l.text = "not a go-redis line: " + r.Message
	}
	h.mu.Lock()
	h.lines = append(h.lines, l)
	h.mu.Unlock()
	return nil
}

// dialFailures returns the lines that say a dial failed.
func (h *lineLog) dialFailures() []loggedLine {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []loggedLine
	for _, l := range h.lines {
		if strings.Contains(l.text, "failed to dial") {
			out = append(out, l)
		}
	}
	return out
}

// useLogger routes go-redis's lines to a new lineLog until the test ends,
// then restores the default.
func useLogger(t *testing.T) *lineLog {
	t.Helper()
	h := &lineLog{}
	SetLogger(slog.New(h))
	t.Cleanup(func() { SetLogger(nil) })
	return h
}

// refusedFetches opens a tier as the redis:// DSN path does, on an address
// where nothing listens, makes n Fetches (every one must fail, refused)
// and returns the number of dials they made.
func refusedFetches(t *testing.T, n int) int64 {
	t.Helper()
	var dials atomic.Int64
	c, err := newClientDial("redis://"+closedPort(t)+"/0", func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	})
	if err != nil {
		t.Fatal(err)
	}
	tier := New(c)
	tier.ownClient = true
	defer tier.Close()
	for range n {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := tier.Fetch(ctx, "refused:", "k", []string{"t"})
		cancel()
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("Fetch = %v; want a refused connection", err)
		}
	}
	return dials.Load()
}

// maxRefusedDials bounds the dials of one refused Fetch: go-redis runs a
// pipeline on two paths (full duplex, then pooled), each tried twice
// (MaxRetries 1), each dialing once (DialerRetries 1).
const maxRefusedDials = 4

// TestRefusedFetchDialsFewTimes: a Fetch on a tier opened from a URL where
// nothing listens dials at most maxRefusedDials times (with go-redis's
// defaults it would dial 5 times per attempt, 100 ms apart, and try 4
// times).
func TestRefusedFetchDialsFewTimes(t *testing.T) {
	const n = 3
	if d := refusedFetches(t, n); d < n || d > n*maxRefusedDials {
		t.Fatalf("%d refused Fetches dialed %d times, want %d to %d", n, d, n, n*maxRefusedDials)
	}
}

// TestGoRedisLinesReachSetLogger: go-redis's own lines (one for every dial
// that failed) go to the logger SetLogger set, at debug level.
func TestGoRedisLinesReachSetLogger(t *testing.T) {
	h := useLogger(t)
	dials := refusedFetches(t, 3)
	lines := h.dialFailures()
	if int64(len(lines)) != dials {
		t.Fatalf("%d lines of failed dials for %d dials: %+v", len(lines), dials, lines)
	}
	for _, l := range lines {
		if l.level != slog.LevelDebug || !strings.Contains(l.text, "after 1 attempts") {
			t.Fatalf("line %+v: want a debug line of one dial attempt", l)
		}
	}
}

// TestGoRedisLinesDefaultToSlogDebug: without SetLogger, go-redis's lines
// go to slog.Default() at debug level (which its default handler drops),
// and SetLogger(nil) restores that.
func TestGoRedisLinesDefaultToSlogDebug(t *testing.T) {
	SetLogger(slog.New(slog.DiscardHandler))
	SetLogger(nil)
	h := &lineLog{}
	prev := slog.Default()
	slog.SetDefault(slog.New(h))
	t.Cleanup(func() { slog.SetDefault(prev) })
	dials := refusedFetches(t, 1)
	if lines := h.dialFailures(); int64(len(lines)) != dials || lines[0].level != slog.LevelDebug {
		t.Fatalf("slog.Default() got %+v for %d dials", lines, dials)
	}
}

// TestGoRedisLinesOffStderr: a process that uses a tier whose Redis
// refuses connections prints none of go-redis's lines to standard error
// (go-redis's own logger writes them there). It runs the Fetches in a
// child process, whose standard error it reads.
func TestGoRedisLinesOffStderr(t *testing.T) {
	if os.Getenv("REDISTIER_STDERR_CHILD") == "1" {
		refusedFetches(t, 3)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestGoRedisLinesOffStderr$", "-test.count=1")
	cmd.Env = append(os.Environ(), "REDISTIER_STDERR_CHILD=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("child: %v\n%s", err, stderr.String())
	}
	if s := stderr.String(); strings.Contains(s, "redis:") || strings.Contains(s, "failed to dial") {
		t.Fatalf("go-redis wrote to standard error:\n%s", s)
	}
}
