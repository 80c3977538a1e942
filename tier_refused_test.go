package sqlflight

import (
	"context"
	"log/slog"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/sqlflight/sqlflight/internal/shared"
)

// refusedTier is a memTier whose server refuses connections while
// refusing is set: every call fails as a dial to a port where nothing
// listens does.
type refusedTier struct {
	*memTier
}

func refusedDial() error {
	return &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
}

func (r refusedTier) Fetch(ctx context.Context, ns, key string, tables []string) (SharedValue, error) {
	if r.fail.Load() {
		r.calls.Add(1)
		return SharedValue{}, refusedDial()
	}
	return r.memTier.Fetch(ctx, ns, key, tables)
}

// TestRefusedTierGoesDownAtOnce: a refused connection is a certain failure:
// the first one takes the tier down (no two more callers pay for it), and
// the log says "connection refused", not an error type alone.
func TestRefusedTierGoesDownAtOnce(t *testing.T) {
	logs := &logBuffer{}
	mt := newMemTier(newFakeClock())
	mt.fail.Store(true)
	f := fleetOn(t, 1, refusedTier{mt}, mt.clock, Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if n := readN(t, f[0].db, ttlQuery, 1); n < 1 {
		t.Fatal(n)
	}
	st := f[0].s.Stats()
	if st.SharedState != "down" || st.SharedErrors != 1 || st.SharedTransitions != 1 {
		t.Fatalf("after one refused call: %+v", st)
	}
	calls := mt.calls.Load()
	for i := 2; i <= 5; i++ {
		if n := readN(t, f[0].db, ttlQuery, i); n < 1 {
			t.Fatal(n)
		}
	}
	if c := mt.calls.Load(); c != calls {
		t.Fatalf("the tier was called %d more times while down", c-calls)
	}
	out := logs.String()
	if !strings.Contains(out, "shared tier unavailable") || !strings.Contains(out, `error.what="connection refused"`) {
		t.Fatalf("log does not say the connection was refused:\n%s", out)
	}
	// Back once it listens again.
	mt.fail.Store(false)
	mt.clock.Add(shared.BackoffMax)
	readN(t, f[0].db, ttlQuery, 100)
	if st := f[0].s.Stats(); st.SharedState != "up" || st.SharedTransitions != 2 {
		t.Fatalf("after the probe: %+v", st)
	}
}

// TestErrWhatConnectionRefused: a refused dial is described as such, and
// nothing of its address reaches the description.
func TestErrWhatConnectionRefused(t *testing.T) {
	err := &net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 6379},
		Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	if got := errText.What(err); got != "connection refused" {
		t.Fatalf("errText.What = %q", got)
	}
	if got := errText.Class(err); got != "connection refused" {
		t.Fatalf("errText.Class = %q", got)
	}
}
