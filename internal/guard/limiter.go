package guard

import (
	"context"
	"errors"
	"time"

	"golang.org/x/sync/semaphore"
)

// ErrFull is the error of an Acquire that waited for the whole queue
// timeout without a slot freeing up (its context still live). Its text is
// the driver's own, as the driver returns it as is (sqlflight.ErrOverloaded).
var ErrFull = errors.New("sqlflight: overloaded: no origin slot free")

// Limiter bounds the requests running at once (see the package
// documentation). Make one with NewLimiter.
type Limiter struct {
	sem          *semaphore.Weighted
	queueTimeout time.Duration
}

// NewLimiter returns a Limiter of slots slots whose Acquire waits at most
// queueTimeout; a queueTimeout of zero or less means no timeout of its
// own (Acquire waits as long as its context lets it).
func NewLimiter(slots int, queueTimeout time.Duration) *Limiter {
	return &Limiter{sem: semaphore.NewWeighted(int64(slots)), queueTimeout: queueTimeout}
}

// QueueTimeout returns the longest an Acquire waits (zero or less: no
// limit of the limiter's own).
func (l *Limiter) QueueTimeout() time.Duration { return l.queueTimeout }

// TryAcquire takes a slot if one is free and nobody waits for one, without
// waiting, and reports whether it did.
func (l *Limiter) TryAcquire() bool { return l.sem.TryAcquire(1) }

// Acquire takes a slot, waiting until one frees up, ctx ends or the queue
// timeout passes. It returns nil with the slot, ctx.Err() if ctx ended
// first, or ErrFull if the queue timeout passed first. With a queue
// timeout, a free slot is taken even if ctx has already ended; without
// one, an ended ctx is refused even if a slot is free.
func (l *Limiter) Acquire(ctx context.Context) error {
	if l.queueTimeout <= 0 {
		return l.sem.Acquire(ctx, 1)
	}
	if l.sem.TryAcquire(1) {
		return nil
	}
	qctx, cancel := context.WithTimeout(ctx, l.queueTimeout)
	err := l.sem.Acquire(qctx, 1)
	cancel()
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return ErrFull
}

// Release gives back a slot taken by TryAcquire or Acquire; releasing a
// slot that was not taken panics.
func (l *Limiter) Release() { l.sem.Release(1) }
