package guard_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight/internal/guard"
)

func TestLimiterTryAcquire(t *testing.T) {
	l := guard.NewLimiter(2, time.Hour)
	if !l.TryAcquire() || !l.TryAcquire() {
		t.Fatal("a free slot refused")
	}
	if l.TryAcquire() {
		t.Fatal("a third slot of two")
	}
	l.Release()
	if !l.TryAcquire() {
		t.Fatal("a slot given back was not free")
	}
}

func TestLimiterQueueTimeout(t *testing.T) {
	l := guard.NewLimiter(1, time.Millisecond)
	if l.QueueTimeout() != time.Millisecond {
		t.Fatalf("QueueTimeout %v", l.QueueTimeout())
	}
	if err := l.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The only slot is never given back: the wait ends with the queue
	// timeout, and says so.
	err := l.Acquire(context.Background())
	if !errors.Is(err, guard.ErrFull) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want ErrFull, got %v", err)
	}
}

func TestLimiterContextEndsFirst(t *testing.T) {
	l := guard.NewLimiter(1, time.Hour)
	if !l.TryAcquire() {
		t.Fatal("a free slot refused")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Acquire(ctx) }()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) || errors.Is(err, guard.ErrFull) {
		t.Fatalf("want the context's error, got %v", err)
	}
	// The caller's deadline is the context's too, not the queue's.
	dctx, dcancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer dcancel()
	if err := l.Acquire(dctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want the context's deadline, got %v", err)
	}
}

func TestLimiterWaiterGetsTheSlotGivenBack(t *testing.T) {
	l := guard.NewLimiter(1, time.Hour)
	if !l.TryAcquire() {
		t.Fatal("a free slot refused")
	}
	done := make(chan error, 1)
	go func() { done <- l.Acquire(context.Background()) }()
	l.Release()
	if err := <-done; err != nil {
		t.Fatalf("the waiter did not get the slot given back: %v", err)
	}
	if l.TryAcquire() {
		t.Fatal("the waiter's slot was free")
	}
}

func TestLimiterEndedContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// With a queue timeout, a free slot is taken at once.
	queued := guard.NewLimiter(1, time.Hour)
	if err := queued.Acquire(ctx); err != nil {
		t.Fatalf("a free slot refused to an ended context: %v", err)
	}
	if err := queued.Acquire(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("want the context's error, got %v", err)
	}
	// Without one, an ended context is refused even if a slot is free.
	unqueued := guard.NewLimiter(1, 0)
	if unqueued.QueueTimeout() != 0 {
		t.Fatalf("QueueTimeout %v", unqueued.QueueTimeout())
	}
	if err := unqueued.Acquire(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("want the context's error, got %v", err)
	}
	if !unqueued.TryAcquire() {
		t.Fatal("a refused Acquire took the slot")
	}
}

func TestLimiterWithoutQueueTimeoutWaitsForTheContext(t *testing.T) {
	l := guard.NewLimiter(1, 0)
	if err := l.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- l.Acquire(context.Background()) }()
	l.Release()
	if err := <-done; err != nil {
		t.Fatalf("the waiter did not get the slot given back: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	if err := l.Acquire(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want the context's deadline, got %v", err)
	}
}
