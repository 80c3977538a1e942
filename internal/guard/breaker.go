package guard

import (
	"sync"
	"sync/atomic"
	"time"
)

// State is the state of a Breaker.
type State int32

// The states of a Breaker (see the package documentation).
const (
	// Closed lets every request through.
	Closed State = iota
	// Open refuses every request until Config.Timeout has passed.
	Open
	// HalfOpen lets Config.Probes probes through at a time.
	HalfOpen
)

// String returns "closed", "open" or "half-open" (and "closed" for a value
// that is none of the three).
func (s State) String() string {
	switch s {
	case Open:
		return "open"
	case HalfOpen:
		return "half-open"
	}
	return "closed"
}

// Outcome is what the error of a request says of the database's health,
// as Config.Classify tells it.
type Outcome int

const (
	// Healthy: the database answered (with a result or with an error of
	// the request's own, such as a syntax error). It resets the count of
	// consecutive failures, and a probe that was Healthy closes a
	// half-open breaker.
	Healthy Outcome = iota
	// Unavailable: the database could not be reached or could not take
	// the work. It counts towards opening a closed breaker, and a probe
	// that was Unavailable opens the breaker again.
	Unavailable
	// Neutral: the error says nothing of the database (the caller gave up,
	// or the request was admitted but never sent). It changes neither the
	// count nor the state; a probe's place is given back.
	Neutral
)

// Config configures a Breaker.
type Config struct {
	// Failures is the number of consecutive Unavailable requests that
	// open a closed breaker; less than 1 counts as 1.
	Failures int
	// Timeout is how long an open breaker refuses every request before it
	// turns half-open, and how long a probe may go without reporting
	// before it counts as lost.
	Timeout time.Duration
	// Probes is the number of probes a half-open breaker lets run at
	// once; less than 1 counts as 1.
	Probes int
	// Clock tells the breaker the time; nil means time.Now.
	Clock Clock
	// Classify tells what a request's error says of the database; nil
	// means that every non-nil error is Unavailable and nil is Healthy.
	// It is called for every Record, with no lock held.
	Classify func(error) Outcome
	// OnChange, if set, is called on every change of state, with the
	// breaker's lock held: it must not call the breaker.
	OnChange func(from, to State)
}

// Breaker is a circuit breaker (see the package documentation). Make one
// with NewBreaker; it must not be copied.
//
// It is not gobreaker: gobreaker reads time.Now itself, and this breaker
// must run on its Config.Clock so that tests move time instead of
// sleeping.
type Breaker struct {
	clock    Clock
	failures int32
	timeout  time.Duration
	probes   int32
	classify func(error) Outcome
	onChange func(from, to State)

	st          atomic.Int32 // State, read without the lock
	consecutive atomic.Int32
	mu          sync.Mutex
	openedAt    time.Time
	probedAt    time.Time
	inProbe     int32
	transitions atomic.Uint64
}

// NewBreaker returns a closed Breaker configured by c.
func NewBreaker(c Config) *Breaker {
	b := &Breaker{clock: c.Clock, failures: int32(max(c.Failures, 1)), timeout: c.Timeout,
		probes: int32(max(c.Probes, 1)), classify: c.Classify, onChange: c.OnChange}
	if b.clock == nil {
		b.clock = systemClock{}
	}
	if b.classify == nil {
		b.classify = anyError
	}
	return b
}

// anyError is the Classify of a Breaker configured without one: every
// error is Unavailable.
func anyError(err error) Outcome {
	if err != nil {
		return Unavailable
	}
	return Healthy
}

// State returns the breaker's state, read without a lock: an open breaker
// whose timeout has passed reads Open until an Allow turns it half-open.
func (b *Breaker) State() State { return State(b.st.Load()) }

// Transitions returns the number of changes of state since the breaker
// was made.
func (b *Breaker) Transitions() uint64 { return b.transitions.Load() }

// Allow reports whether a request may go (ok), and whether it is a probe
// of a half-open breaker. Every request allowed must be reported with
// Record, with the probe Allow returned; a refused one must not.
func (b *Breaker) Allow() (probe, ok bool) {
	if b.State() == Closed {
		return false, true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.State() {
	case Closed:
		return false, true
	case Open:
		if b.clock.Now().Sub(b.openedAt) < b.timeout {
			return false, false
		}
		b.set(HalfOpen)
	}
	now := b.clock.Now()
	if b.inProbe >= b.probes {
		if now.Sub(b.probedAt) < b.timeout {
			return false, false
		}
		// A probe that has not reported for a whole timeout is lost (its
		// caller panicked, say): let another go rather than stay stuck.
		b.inProbe = 0
	}
	b.inProbe++
	b.probedAt = now
	return true, true
}

// Record tells the breaker how a request that Allow let through went: err
// is its error (nil if it succeeded), classified by Config.Classify, and
// probe is what Allow returned for it.
func (b *Breaker) Record(probe bool, err error) {
	verdict := b.classify(err)
	if verdict == Neutral {
		if probe {
			b.mu.Lock()
			b.inProbe--
			b.mu.Unlock()
		}
		return
	}
	down := verdict == Unavailable
	if !probe && !down {
		if b.consecutive.Load() != 0 {
			b.consecutive.Store(0)
		}
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if probe {
		b.inProbe--
		if down {
			b.open()
			return
		}
		b.consecutive.Store(0)
		if b.State() == HalfOpen {
			b.set(Closed)
		}
		return
	}
	if b.consecutive.Add(1) >= b.failures && b.State() == Closed {
		b.open()
	}
}

// open opens the breaker (again) from now on; b.mu is held.
func (b *Breaker) open() {
	b.openedAt = b.clock.Now()
	b.consecutive.Store(0)
	if b.State() != Open {
		b.set(Open)
	}
}

// set moves the breaker to state to and tells OnChange; b.mu is held.
func (b *Breaker) set(to State) {
	from := b.State()
	b.st.Store(int32(to))
	b.transitions.Add(1)
	if b.onChange != nil {
		b.onChange(from, to)
	}
}
