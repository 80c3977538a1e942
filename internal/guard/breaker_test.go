package guard_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight/internal/fakeclock"
	"github.com/sqlflight/sqlflight/internal/guard"
	"github.com/sqlflight/sqlflight/internal/leaktest"
)

func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }

// fakeClock is a Clock that moves only when a test moves it.
type fakeClock = fakeclock.Clock

func newFakeClock() *fakeClock { return fakeclock.New() }

// The errors of the tests, classified by classify.
var (
	errDown    = errors.New("down")    // Unavailable
	errSyntax  = errors.New("syntax")  // Healthy: the database answered
	errGaveUp  = errors.New("gave up") // Neutral
	errUnknown = errors.New("unknown") // Healthy
)

func classify(err error) guard.Outcome {
	switch err {
	case errDown:
		return guard.Unavailable
	case errGaveUp:
		return guard.Neutral
	}
	return guard.Healthy
}

// transitions records a breaker's changes of state.
type transitions struct {
	mu  sync.Mutex
	got []string
}

func (tr *transitions) on(from, to guard.State) {
	tr.mu.Lock()
	tr.got = append(tr.got, from.String()+">"+to.String())
	tr.mu.Unlock()
}

func (tr *transitions) String() string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	s := ""
	for i, t := range tr.got {
		if i > 0 {
			s += " "
		}
		s += t
	}
	return s
}

func newBreaker(clk *fakeClock, failures, probes int, tr *transitions) *guard.Breaker {
	c := guard.Config{Failures: failures, Timeout: time.Second, Probes: probes, Clock: clk, Classify: classify}
	if tr != nil {
		c.OnChange = tr.on
	}
	return guard.NewBreaker(c)
}

// pass runs one request through b that ends with err, and reports whether
// it was let through.
func pass(b *guard.Breaker, err error) bool {
	probe, ok := b.Allow()
	if ok {
		b.Record(probe, err)
	}
	return ok
}

// open opens b, a closed breaker of failures failures.
func open(t *testing.T, b *guard.Breaker, failures int) {
	t.Helper()
	for range failures {
		pass(b, errDown)
	}
	if b.State() != guard.Open {
		t.Fatalf("breaker %v after %d failures", b.State(), failures)
	}
}

func TestBreakerOpensOnConsecutiveFailuresOnly(t *testing.T) {
	clk := newFakeClock()
	var tr transitions
	b := newBreaker(clk, 3, 1, &tr)
	// Healthy outcomes, errors of the request's own included, reset the count.
	for _, err := range []error{nil, errSyntax, errUnknown} {
		pass(b, errDown)
		pass(b, errDown)
		pass(b, err)
	}
	if b.State() != guard.Closed || b.Transitions() != 0 {
		t.Fatalf("breaker %v (%d transitions) after failures never 3 in a row", b.State(), b.Transitions())
	}
	pass(b, errDown)
	pass(b, errDown)
	if !pass(b, errDown) {
		t.Fatal("a closed breaker refused a request")
	}
	if b.State() != guard.Open || b.Transitions() != 1 || tr.String() != "closed>open" {
		t.Fatalf("breaker %v, %d transitions (%s) after 3 failures in a row", b.State(), b.Transitions(), tr.String())
	}
	if probe, ok := b.Allow(); ok || probe {
		t.Fatalf("an open breaker let a request through (probe %v)", probe)
	}
}

func TestBreakerNeutralOutcomesCountNothing(t *testing.T) {
	b := newBreaker(newFakeClock(), 3, 1, nil)
	pass(b, errDown)
	pass(b, errDown)
	for range 10 {
		pass(b, errGaveUp) // neither resets the count nor adds to it
	}
	if b.State() != guard.Closed {
		t.Fatalf("neutral outcomes opened the breaker: %v", b.State())
	}
	pass(b, errDown)
	if b.State() != guard.Open {
		t.Fatalf("a neutral outcome reset the count of failures: %v", b.State())
	}
}

func TestBreakerStaysOpenForItsTimeout(t *testing.T) {
	clk := newFakeClock()
	var tr transitions
	b := newBreaker(clk, 1, 1, &tr)
	open(t, b, 1)
	clk.Add(time.Second - time.Nanosecond)
	if pass(b, nil) {
		t.Fatal("the breaker let a request through before its timeout")
	}
	if b.State() != guard.Open {
		t.Fatalf("breaker %v before its timeout", b.State())
	}
	clk.Add(time.Nanosecond)
	probe, ok := b.Allow()
	if !ok || !probe {
		t.Fatalf("no probe after the timeout (ok %v, probe %v)", ok, probe)
	}
	if b.State() != guard.HalfOpen || tr.String() != "closed>open open>half-open" {
		t.Fatalf("breaker %v (%s) while its probe runs", b.State(), tr.String())
	}
	if pass(b, nil) {
		t.Fatal("a half-open breaker let a second request through while its probe runs")
	}
	b.Record(probe, nil)
	if b.State() != guard.Closed || tr.String() != "closed>open open>half-open half-open>closed" {
		t.Fatalf("a healthy probe left the breaker %v (%s)", b.State(), tr.String())
	}
	if probe, ok := b.Allow(); !ok || probe {
		t.Fatalf("a closed breaker: ok %v, probe %v", ok, probe)
	}
}

func TestBreakerFailedProbeReopensForAnotherTimeout(t *testing.T) {
	clk := newFakeClock()
	b := newBreaker(clk, 1, 1, nil)
	open(t, b, 1)
	clk.Add(time.Second)
	probe, ok := b.Allow()
	if !ok || !probe {
		t.Fatal("no probe after the timeout")
	}
	clk.Add(time.Second / 2)
	b.Record(probe, errDown)
	if b.State() != guard.Open {
		t.Fatalf("a failed probe left the breaker %v", b.State())
	}
	clk.Add(time.Second - time.Nanosecond) // 1.5s after it first opened
	if pass(b, nil) {
		t.Fatal("a failed probe did not start another timeout")
	}
	clk.Add(time.Nanosecond)
	if probe, ok := b.Allow(); !ok || !probe {
		t.Fatal("no probe after the second timeout")
	}
}

func TestBreakerClosesOnlyOnAProbeThatRan(t *testing.T) {
	clk := newFakeClock()
	b := newBreaker(clk, 1, 1, nil)
	open(t, b, 1)
	clk.Add(time.Second)
	probe, ok := b.Allow()
	if !ok || !probe {
		t.Fatal("no probe after the timeout")
	}
	b.Record(probe, errGaveUp) // it never reached the database
	if b.State() != guard.HalfOpen {
		t.Fatalf("a probe that did not run left the breaker %v", b.State())
	}
	// Its place is given back at once: another probe may go now.
	probe, ok = b.Allow()
	if !ok || !probe {
		t.Fatal("a probe that did not run kept its place")
	}
	b.Record(probe, errSyntax) // the database answered, with an error of the request's
	if b.State() != guard.Closed {
		t.Fatalf("a probe that ran and was answered left the breaker %v", b.State())
	}
}

func TestBreakerLetsConfigProbesRunAtOnce(t *testing.T) {
	clk := newFakeClock()
	b := newBreaker(clk, 1, 3, nil)
	open(t, b, 1)
	clk.Add(time.Second)
	var probes []bool
	for range 3 {
		probe, ok := b.Allow()
		if !ok || !probe {
			t.Fatalf("probe %d of 3 refused", len(probes)+1)
		}
		probes = append(probes, probe)
	}
	if pass(b, nil) {
		t.Fatal("a fourth probe while three run")
	}
	b.Record(probes[0], errGaveUp)
	probe, ok := b.Allow()
	if !ok || !probe {
		t.Fatal("a probe's place given back was not taken")
	}
	b.Record(probe, nil)
	if b.State() != guard.Closed {
		t.Fatalf("breaker %v after a healthy probe", b.State())
	}
	// The probes still running report into a closed breaker.
	b.Record(probes[1], nil)
	b.Record(probes[2], nil)
	if b.State() != guard.Closed {
		t.Fatalf("late healthy probes left the breaker %v", b.State())
	}
}

func TestLostProbeDoesNotWedgeTheBreaker(t *testing.T) {
	clk := newFakeClock()
	b := newBreaker(clk, 1, 1, nil)
	b.Record(false, errDown)
	clk.Add(time.Second)
	if probe, ok := b.Allow(); !ok || !probe {
		t.Fatal("no probe after the timeout")
	}
	// That probe's caller panicked: it never reports.
	if _, ok := b.Allow(); ok {
		t.Fatal("a second probe while the first runs")
	}
	clk.Add(time.Second)
	probe, ok := b.Allow()
	if !ok || !probe {
		t.Fatal("a lost probe wedged the breaker half-open")
	}
	// The lost probe's place is the new one's: once that is given back,
	// a probe may go again at once.
	b.Record(probe, errGaveUp)
	if probe, ok := b.Allow(); !ok || !probe {
		t.Fatal("a lost probe still held its place")
	}
}

func TestBreakerLateFailuresOfOrdinaryRequests(t *testing.T) {
	clk := newFakeClock()
	var tr transitions
	b := newBreaker(clk, 1, 1, &tr)
	// Two requests let through while closed; one fails and opens it.
	p1, ok1 := b.Allow()
	p2, ok2 := b.Allow()
	if !ok1 || !ok2 || p1 || p2 {
		t.Fatal("a closed breaker refused, or took a request for a probe")
	}
	b.Record(p1, errDown)
	b.Record(p2, errDown) // late: the breaker is open already
	clk.Add(time.Second / 2)
	if pass(b, nil) {
		t.Fatal("a late failure changed the open breaker's timeout")
	}
	clk.Add(time.Second / 2)
	probe, ok := b.Allow()
	if !ok || !probe {
		t.Fatal("no probe after the timeout")
	}
	b.Record(false, errDown) // another late one, from before the breaker opened
	if b.State() != guard.HalfOpen {
		t.Fatalf("a failure that was no probe moved a half-open breaker to %v", b.State())
	}
	b.Record(probe, nil)
	if b.State() != guard.Closed || b.Transitions() != 3 {
		t.Fatalf("breaker %v, transitions %s", b.State(), tr.String())
	}
	// The closed breaker starts its count again.
	pass(b, nil)
	pass(b, errDown)
	if b.State() != guard.Open {
		t.Fatalf("breaker %v after a failure (Failures 1)", b.State())
	}
}

func TestBreakerZeroConfig(t *testing.T) {
	// No Clock (time.Now), no Classify (every error a failure), Failures
	// and Probes 0 (1).
	b := guard.NewBreaker(guard.Config{Timeout: time.Hour})
	pass(b, nil)
	if b.State() != guard.Closed {
		t.Fatalf("a success opened the breaker: %v", b.State())
	}
	pass(b, errSyntax)
	if b.State() != guard.Open {
		t.Fatalf("without Classify, an error left the breaker %v", b.State())
	}
	if pass(b, nil) {
		t.Fatal("the open breaker let a request through")
	}
}

func TestStateString(t *testing.T) {
	for s, want := range map[guard.State]string{
		guard.Closed: "closed", guard.Open: "open", guard.HalfOpen: "half-open", guard.State(7): "closed",
	} {
		if got := s.String(); got != want {
			t.Errorf("State(%d).String() = %q, want %q", int(s), got, want)
		}
	}
}

func TestBreakerConcurrentProbes(t *testing.T) {
	clk := newFakeClock()
	b := newBreaker(clk, 1, 2, nil)
	open(t, b, 1)
	clk.Add(time.Second)
	// Many callers at once: exactly Probes of them probe, and the others
	// are refused, whatever the interleaving.
	var probes, refused atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 64 {
		wg.Go(func() {
			<-start
			probe, ok := b.Allow()
			switch {
			case ok && probe:
				probes.Add(1)
			case !ok:
				refused.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	if probes.Load() != 2 || refused.Load() != 62 {
		t.Fatalf("%d probes, %d refused of 64 callers (Probes 2)", probes.Load(), refused.Load())
	}
}

func TestBreakerConcurrentRecords(t *testing.T) {
	clk := newFakeClock()
	b := newBreaker(clk, 1000, 1, nil)
	// 999 failures and healthy answers racing never open it unless 1000
	// failures come in a row; 1000 failures alone do.
	var wg sync.WaitGroup
	for i := range 999 {
		wg.Go(func() {
			if i%2 == 0 {
				pass(b, errDown)
			} else {
				pass(b, nil)
			}
		})
	}
	wg.Wait()
	if b.State() != guard.Closed {
		t.Fatalf("breaker %v after 999 requests", b.State())
	}
	pass(b, nil)
	for range 1000 {
		wg.Go(func() { pass(b, errDown) })
	}
	wg.Wait()
	if b.State() != guard.Open || b.Transitions() != 1 {
		t.Fatalf("breaker %v, %d transitions after 1000 concurrent failures", b.State(), b.Transitions())
	}
}
