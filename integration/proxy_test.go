package integration

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// faultProxy is a loopback TCP proxy that the fault tests put between
// sqlflight and PostgreSQL (or Redis), with knobs for the faults they inject:
//
//   - SetLatency delays every chunk the server sends by a fixed time
//     (pipelined, so it adds latency, not a bandwidth limit);
//   - Cut closes every proxied connection and refuses new ones (connection
//     refused) until Restore listens again on the same address;
//   - ArmLimit lets each connection forward only so many more bytes from
//     the server, then kills it mid-stream: with an RST (SO_LINGER 0) or a
//     plain FIN.
//
// (Toxiproxy v2.5.0 builds here and was tried first, as a library; but its
// toxic goroutines stay blocked on a channel send when a connection is cut
// with data in flight, which the package's goleak check rejects, and its
// reset_peer toxic drops the stream instead of cutting it mid-way. So this
// is a small proxy of our own.)
type faultProxy struct {
	network, upstream string // where PostgreSQL listens
	addr              string // 127.0.0.1:port, the same for the proxy's life

	latency atomic.Int64 // nanoseconds added to each server→client chunk

	mu      sync.Mutex
	ln      net.Listener // nil while cut
	links   map[*proxyLink]struct{}
	limit   int64  // bytes each connection may still forward after arming; 0: off
	gen     uint64 // bumped by every ArmLimit, so connections pick it up once
	rst     bool
	stopped bool

	wg       sync.WaitGroup // every goroutine the proxy started
	accepted atomic.Int64
	killed   atomic.Int64 // connections killed by an armed limit
}

// proxyLink is one proxied client connection and its server connection.
type proxyLink struct {
	client, server net.Conn
	once           sync.Once
}

// close closes both sides once; with rst the client sees a reset, not a FIN.
func (l *proxyLink) close(rst bool) {
	l.once.Do(func() {
		if rst {
			if tc, ok := l.client.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
		}
		_ = l.client.Close()
		_ = l.server.Close()
	})
}

// newFaultProxy starts a proxy in front of the PostgreSQL server of dsn and
// returns it with a DSN that reaches the server through it. It is stopped
// (every goroutine joined) when the test ends.
func newFaultProxy(t testing.TB, dsn string) (*faultProxy, string) {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("parse DSN: %v", err)
	}
	network, upstream := "tcp", net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	if strings.HasPrefix(cfg.Host, "/") { // a Unix socket directory
		network, upstream = "unix", filepath.Join(cfg.Host, fmt.Sprintf(".s.PGSQL.%d", cfg.Port))
	}
	p := newTCPProxy(t, network, upstream)
	_, port, _ := net.SplitHostPort(p.addr)
	return p, withDSNParams(t, dsn, "host", "127.0.0.1", "port", port)
}

// newTCPProxy starts a fault proxy on loopback in front of any server (the
// fleet tests put one in front of Redis); it stops when the test ends.
func newTCPProxy(t testing.TB, network, upstream string) *faultProxy {
	t.Helper()
	p := &faultProxy{network: network, upstream: upstream, links: make(map[*proxyLink]struct{})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy: listen: %v", err)
	}
	p.addr = ln.Addr().String()
	p.mu.Lock()
	p.ln = ln
	p.wg.Add(1)
	p.mu.Unlock()
	go p.serve(ln)
	t.Cleanup(p.stop)
	return p
}

func (p *faultProxy) serve(ln net.Listener) {
	defer p.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return // closed by Cut or stop
		}
		p.accepted.Add(1)
		s, err := net.DialTimeout(p.network, p.upstream, 10*time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		l := &proxyLink{client: c, server: s}
		p.mu.Lock()
		if p.ln != ln { // cut meanwhile
			p.mu.Unlock()
			l.close(false)
			continue
		}
		p.links[l] = struct{}{}
		p.wg.Add(2)
		p.mu.Unlock()
		go p.pumpUp(l)
		go p.pumpDown(l)
	}
}

func (p *faultProxy) forget(l *proxyLink) {
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

// pumpUp copies client → server unchanged.
func (p *faultProxy) pumpUp(l *proxyLink) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := l.client.Read(buf)
		if n > 0 {
			if _, werr := l.server.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	l.close(false)
	p.forget(l)
}

type proxyChunk struct {
	b  []byte
	at time.Time
}

// pumpDown copies server → client: a reader stamps each chunk, a writer
// sends it once the latency has passed and applies an armed limit.
func (p *faultProxy) pumpDown(l *proxyLink) {
	defer p.wg.Done()
	ch := make(chan proxyChunk, 64)
	done := make(chan struct{})
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer close(done)
		var gen uint64
		var remaining int64
		for c := range ch {
			if d := time.Duration(p.latency.Load()); d > 0 {
				if wait := time.Until(c.at.Add(d)); wait > 0 {
					time.Sleep(wait)
				}
			}
			limit, g, rst := p.armed()
			if g != gen {
				gen, remaining = g, limit
			}
			if limit > 0 && int64(len(c.b)) >= remaining {
				_, _ = l.client.Write(c.b[:remaining])
				p.killed.Add(1)
				l.close(rst)
				return
			}
			remaining -= int64(len(c.b))
			if _, err := l.client.Write(c.b); err != nil {
				l.close(false)
				return
			}
		}
	}()
	for {
		buf := make([]byte, 32<<10)
		n, err := l.server.Read(buf)
		if n > 0 {
			select {
			case ch <- proxyChunk{b: buf[:n], at: time.Now()}:
			case <-done:
				err = net.ErrClosed
			}
		}
		if err != nil {
			break
		}
	}
	close(ch)
	<-done
	l.close(false)
	p.forget(l)
}

func (p *faultProxy) armed() (limit int64, gen uint64, rst bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.limit, p.gen, p.rst
}

// SetLatency adds d to every chunk the server sends from now on (0: none).
func (p *faultProxy) SetLatency(d time.Duration) { p.latency.Store(int64(d)) }

// ArmLimit lets every connection, open or new, forward n more bytes from
// the server and then kills it: with an RST when rst, else with a FIN.
// ArmLimit(0, false) disarms.
func (p *faultProxy) ArmLimit(n int64, rst bool) {
	p.mu.Lock()
	p.limit, p.rst = n, rst
	p.gen++
	p.mu.Unlock()
}

// Cut closes every proxied connection and refuses new ones.
func (p *faultProxy) Cut() {
	p.mu.Lock()
	ln := p.ln
	p.ln = nil
	links := p.links
	p.links = make(map[*proxyLink]struct{})
	p.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
	for l := range links {
		l.close(false)
	}
}

// Restore listens again on the proxy's address after a Cut.
func (p *faultProxy) Restore(t testing.TB) {
	t.Helper()
	var ln net.Listener
	var err error
	for range 100 { // the port may linger for a moment
		if ln, err = net.Listen("tcp", p.addr); err == nil || !errors.Is(err, syscall.EADDRINUSE) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("proxy: listen again on %s: %v", p.addr, err)
	}
	p.mu.Lock()
	if p.stopped || p.ln != nil {
		p.mu.Unlock()
		_ = ln.Close()
		t.Fatal("proxy: Restore without a Cut")
	}
	p.ln = ln
	p.wg.Add(1)
	p.mu.Unlock()
	go p.serve(ln)
}

// stop cuts the proxy for good and waits for its goroutines.
func (p *faultProxy) stop() {
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
	p.Cut()
	p.wg.Wait()
}
