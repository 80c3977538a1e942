package sqlflight

import (
	"context"
	"database/sql/driver"
	"runtime"
	"sync"
	"testing"
)

// virtualConnector returns a wrapped connector on a fake parent whose scope
// has already opened its first real connection, which stays open (a virtual
// connection holds it) for the benchmark: every later Connect is virtual,
// as in a pool that grows under a herd.
func virtualConnector(b *testing.B) driver.Connector {
	b.Helper()
	s := New()
	b.Cleanup(func() { _ = s.Close() })
	c := s.Connector(dsnConnector{drv: &fakeDriver{}, dsn: "fake"})
	first, err := c.Connect(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = first.Close() })
	return c
}

// connectClose opens a virtual connection on c and closes it.
func connectClose(b *testing.B, c driver.Connector) {
	vc, err := c.Connect(context.Background())
	if err != nil {
		b.Error(err)
		return
	}
	if err := vc.Close(); err != nil {
		b.Error(err)
	}
}

// BenchmarkVirtualConnect is what database/sql pays for a new connection
// when the scope already knows its parent: Connect and Close of a virtual
// connection, no real connection opened.
func BenchmarkVirtualConnect(b *testing.B) {
	c := virtualConnector(b)
	b.ReportAllocs()
	for b.Loop() {
		connectClose(b, c)
	}
}

// BenchmarkVirtualConnectGoroutine runs each op on a fresh goroutine and
// waits for it, as database/sql opens connections on its caller's
// goroutine: the difference between connect and idle (a goroutine doing
// nothing) is the Connect and the growth of the new goroutine's stack it
// causes. stack-B/goroutine is the stack a goroutine holds after the op.
func BenchmarkVirtualConnectGoroutine(b *testing.B) {
	for _, bc := range []struct {
		name string
		op   func(*testing.B, driver.Connector)
	}{
		{"idle", func(*testing.B, driver.Connector) {}},
		{"connect", connectClose},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c := virtualConnector(b)
			b.ReportAllocs()
			var wg sync.WaitGroup
			for b.Loop() {
				wg.Add(1)
				go func() {
					defer wg.Done()
					bc.op(b, c)
				}()
				wg.Wait()
			}
			b.StopTimer()
			b.ReportMetric(stackPerGoroutine(func() { bc.op(b, c) }), "stack-B/goroutine")
		})
	}
}

// stackPerGoroutine starts many goroutines that each run op and then wait,
// and returns the stack memory they hold, per goroutine: the starting
// stack, or what op grew it to.
func stackPerGoroutine(op func()) float64 {
	const n = 1024
	runtime.GC() // frees the stack spans cached by goroutines gone before
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var ran, done sync.WaitGroup
	release := make(chan struct{})
	for range n {
		ran.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			op()
			ran.Done()
			<-release
		}()
	}
	ran.Wait()
	runtime.ReadMemStats(&after)
	close(release)
	done.Wait()
	return float64(int64(after.StackInuse)-int64(before.StackInuse)) / n
}
