package sqlflight

import (
	"context"
	"errors"
	"testing"
	"time"
)

// An origin's timeout fires with ErrOriginTimeout; a timer stopped in time
// serves the next origin, and a second stop meant for the first use (or a
// stop after the timer fired) leaves the next use alone.
func TestOriginTimeoutReusesItsTimer(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	to := startTimeout(time.Millisecond, cancel)
	<-ctx.Done()
	if cause := context.Cause(ctx); !errors.Is(cause, ErrOriginTimeout) {
		t.Fatalf("cause %v, want ErrOriginTimeout", cause)
	}
	to.stop() // after it fired: nothing to do, and the timer is not reused

	first, cancel1 := context.WithCancelCause(context.Background())
	a := startTimeout(time.Hour, cancel1)
	a.stop()
	second, cancel2 := context.WithCancelCause(context.Background())
	b := startTimeout(time.Hour, cancel2)
	a.stop() // the first use's again: must not stop the second's
	if b.ot == a.ot && b.gen == a.gen {
		t.Fatal("two uses of one timer share a generation")
	}
	b.ot.fire() // as if the second's timeout passed
	if cause := context.Cause(second); !errors.Is(cause, ErrOriginTimeout) {
		t.Fatalf("second use: cause %v, want ErrOriginTimeout (a stale stop disarmed it)", cause)
	}
	if first.Err() != nil {
		t.Fatalf("first use ended (%v) though it was stopped in time", context.Cause(first))
	}
	b.stop()
	cancel1(nil)
}
