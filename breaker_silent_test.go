package sqlflight

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// silentServer accepts TCP connections and never answers: a database host
// that hangs. It counts the connections it accepted.
type silentServer struct {
	ln       net.Listener
	accepted atomic.Int64
	mu       sync.Mutex
	conns    []net.Conn
}

func newSilentServer(t *testing.T) *silentServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &silentServer{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.accepted.Add(1)
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		s.mu.Lock()
		for _, c := range s.conns {
			_ = c.Close()
		}
		s.mu.Unlock()
	})
	return s
}

// TestBreakerOpensOnASilentServer: connects that run into connect_timeout
// (a server that accepts and never answers) count as failures of the
// database like refused ones; once the breaker is open, statements are
// refused at once and no longer dial the server.
func TestBreakerOpensOnASilentServer(t *testing.T) {
	srv := newSilentServer(t)
	cfg, err := pgx.ParseConfig(fmt.Sprintf("postgres://postgres@%s/test?sslmode=disable&connect_timeout=1", srv.ln.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	s := New(Options{BreakerFailures: 2, BreakerTimeout: time.Hour})
	defer s.Close()
	db := s.OpenDB(stdlib.GetConnector(*cfg))
	defer db.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var failures int
	for i := 0; i < 10; i++ {
		var n int
		err := db.QueryRowContext(ctx, "SELECT 1").Scan(&n)
		if err == nil {
			t.Fatal("a silent server answered")
		}
		if errors.Is(err, ErrCircuitOpen) {
			break
		}
		failures++
	}
	if failures > 4 {
		t.Fatalf("%d statements waited for the silent server before the breaker opened (BreakerFailures = 2)", failures)
	}
	st := s.Stats()
	var open bool
	for _, b := range st.Breakers {
		open = open || b.State == "open"
	}
	if !open {
		t.Fatalf("breakers %+v: none open after %d connect timeouts", st.Breakers, failures)
	}
	dialed := srv.accepted.Load()
	// A herd on the open breaker: refused at once, nobody dials.
	var wg sync.WaitGroup
	var refused atomic.Int64
	for range 50 {
		wg.Go(func() {
			var n int
			if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&n); errors.Is(err, ErrCircuitOpen) {
				refused.Add(1)
			}
		})
	}
	wg.Wait()
	if refused.Load() != 50 {
		t.Fatalf("%d of 50 statements refused by the open breaker", refused.Load())
	}
	if got := srv.accepted.Load(); got != dialed {
		t.Fatalf("the open breaker let %d connects reach the silent server", got-dialed)
	}
}

// TestCallerCancellationIsNotAConnectFailure: a caller that gives up while
// its connect is in progress says nothing of the database.
func TestCallerCancellationIsNotAConnectFailure(t *testing.T) {
	srv := newSilentServer(t)
	cfg, err := pgx.ParseConfig(fmt.Sprintf("postgres://postgres@%s/test?sslmode=disable&connect_timeout=30", srv.ln.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	s := New(Options{BreakerFailures: 1, BreakerTimeout: time.Hour})
	defer s.Close()
	db := s.OpenDB(stdlib.GetConnector(*cfg))
	defer db.Close()
	for range 3 {
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			for srv.accepted.Load() == 0 {
				time.Sleep(time.Millisecond)
			}
			cancel()
		}()
		var n int
		err := db.QueryRowContext(ctx, "SELECT 1").Scan(&n)
		cancel()
		if err == nil || errors.Is(err, ErrCircuitOpen) {
			t.Fatalf("err = %v, want the caller's cancellation", err)
		}
	}
	for name, b := range s.Stats().Breakers {
		if b.State != "closed" {
			t.Fatalf("breaker %s is %s after callers cancelled their own connects", name, b.State)
		}
	}
}
