// Package dbqueue tells whether database/sql handed a connection to a
// caller that waited in its queue, from inside the driver's ResetSession.
//
// database/sql gives a connection going back to its pool (putConn) to a
// caller waiting for one, if any, before anything else can take it; the
// waiter then resets the session (ResetSession) on the branch of
// (*DB).conn that received it from the queue. A caller that takes a free
// connection resets it on another branch. Nothing else tells the two apart,
// so the first reset that needs to know calibrates (Calibrated): a private
// pool of one connection is made to hand one to a waiting caller and one
// to a new caller, and the call stacks above ResetSession are compared. If they do
// not differ in (*DB).conn — another database/sql than the one this was
// written against — FromQueue answers false: a caller is then never taken
// for a queued one (see flightGroup.joinOrLead).
//
// FromQueue must be called directly by the driver connection's
// ResetSession (the frames above it are what it compares); a wrapper that
// forwards ResetSession adds a frame, and its callers are then never taken
// for queued ones. It is safe for concurrent use.
package dbqueue

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
)

// queueStack is the stack above ResetSession on the queue's branch, down to
// the first frame where it differs from the free connection's; nil when
// the calibration failed.
var queueStack struct {
	once sync.Once
	pcs  []uintptr
}

// resetCallers fills pcs with the stack of the ResetSession that called
// it, from database/sql's first frame: calibration's ResetSession calls it
// as the driver's calls FromQueue, directly, so that the frames line up. (A
// wrapper above sqlflight that forwards ResetSession adds a frame: its
// callers are then never taken for queued ones.)
//
//go:noinline
func resetCallers(pcs []uintptr) int {
	return runtime.Callers(3, pcs) // runtime.Callers, resetCallers, ResetSession
}

// FromQueue reports whether the ResetSession that called it runs for a
// caller database/sql handed the connection to from its queue.
//
//go:noinline
func FromQueue() bool {
	queueStack.once.Do(calibrateQueue)
	want := queueStack.pcs
	if want == nil {
		return false
	}
	var buf [4]uintptr
	pcs := buf[:min(len(want), len(buf))]
	n := runtime.Callers(3, pcs) // runtime.Callers, fromQueue, ResetSession
	return n == len(want) && slices.Equal(pcs, want)
}

// calibrateQueue learns the queue's branch once (see the package doc).
func calibrateQueue() {
	var p probeConnector
	p.stacks = make(chan []uintptr, 2)
	db := sql.OpenDB(&p)
	defer db.Close()
	db.SetMaxOpenConns(1)
	ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
	defer cancel()
	first, err := db.Conn(ctx)
	if err != nil {
		return
	}
	got := make(chan *sql.Conn, 1)
	go func() {
		c, err := db.Conn(ctx) // waits in the queue
		if err != nil {
			c = nil
		}
		got <- c
	}()
	for i := 0; db.Stats().WaitCount == 0; i++ {
		if ctx.Err() != nil {
			first.Close()
			<-got
			return
		}
		if i < 1000 {
			runtime.Gosched() // the waiter needs a moment, not a timer's
		} else {
			time.Sleep(100 * time.Microsecond)
		}
	}
	first.Close() // handed to the waiter: ResetSession on the queue's branch
	second := <-got
	if second == nil {
		return
	}
	queued := <-p.stacks
	second.Close()
	third, err := db.Conn(ctx) // the free connection: the other branch
	if err != nil {
		return
	}
	third.Close()
	free := <-p.stacks
	queueStack.pcs = queueDifference(queued, free)
}

// queueDifference returns queued up to its first frame that differs from
// free, if that frame is in (*DB).conn; else nil.
func queueDifference(queued, free []uintptr) []uintptr {
	for i := range min(len(queued), len(free)) {
		if queued[i] == free[i] {
			continue
		}
		fn := runtime.FuncForPC(queued[i] - 1)
		if fn == nil || !strings.HasSuffix(fn.Name(), "database/sql.(*DB).conn") {
			return nil
		}
		if i >= 4 {
			return nil // deeper than fromQueue looks
		}
		return slices.Clone(queued[:i+1])
	}
	return nil
}

// probeConnector makes the calibration's connections, which only record
// the stack of each ResetSession.
type probeConnector struct {
	stacks chan []uintptr
}

func (p *probeConnector) Connect(context.Context) (driver.Conn, error) { return probeConn{p}, nil }
func (p *probeConnector) Driver() driver.Driver                        { return nil }

type probeConn struct{ p *probeConnector }

func (probeConn) Prepare(string) (driver.Stmt, error) { return nil, driver.ErrSkip }
func (probeConn) Close() error                        { return nil }
func (probeConn) Begin() (driver.Tx, error)           { return nil, driver.ErrSkip }

func (c probeConn) ResetSession(context.Context) error {
	var pcs [8]uintptr
	n := resetCallers(pcs[:])
	select {
	case c.p.stacks <- slices.Clone(pcs[:n]):
	default:
	}
	return nil
}

// Calibrated reports whether the calibration tells the queue's branch
// apart, calibrating if it has not yet: if not, FromQueue always answers
// false.
func Calibrated() bool {
	queueStack.once.Do(calibrateQueue)
	return queueStack.pcs != nil
}
