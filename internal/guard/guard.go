// Package guard protects one database from the work sent to it: a circuit
// breaker that stops sending work to a database found unavailable, and a
// limiter that bounds the requests running at once, with a queue timeout.
// The driver gives each database (each scope) a breaker and limiters of its
// own, so one database's outage or slowness never refuses another's work.
//
// # The breaker
//
// A Breaker has three states. Closed, it lets every request through and
// counts the consecutive requests that found the database unavailable;
// Config.Failures of them in a row open it. Open, it refuses every request
// at once (Allow reports ok false) for Config.Timeout from the moment it
// opened. The first Allow after that turns it half-open: it lets at most
// Config.Probes requests through at a time, each a probe, and refuses the
// rest. A probe that went well closes it; a probe that found the database
// unavailable opens it again for another Config.Timeout. A probe that has
// not reported for a whole Config.Timeout counts as lost (its caller
// panicked, say) and gives its place to another, so that a half-open
// breaker is never stuck.
//
// What counts as a failure is the caller's decision, not this package's:
// Config.Classify tells, for the error of each request, whether it says the
// database is unavailable (Unavailable), that it answered (Healthy, which
// is also what a request error such as a syntax error or a constraint
// violation means), or nothing about it (Neutral: the caller's own
// cancellation, a request admitted but never sent). A Healthy outcome
// resets the count of consecutive failures; a Neutral one leaves the count
// and the state alone and gives a probe's place back, so that only a probe
// that ran can close the breaker. Failures of requests that are not probes
// count towards opening only while the breaker is closed.
//
// # The limiter
//
// A Limiter is a counting semaphore: a request takes one of its slots and
// gives it back when done. Acquire waits for a slot until its context ends
// or the limiter's queue timeout passes, whichever comes first, and tells
// the two apart (the context's error, or ErrFull). TryAcquire never waits.
// Waiters are served in the order they came, and while any waits
// TryAcquire fails, so that those who wait are not overtaken.
//
// # One database's guard
//
// A Scope puts the two together for one database: foreground and
// background limiters and a breaker classified by Classify, whose words for
// the database's health are IsUnavailable, OwnCancellation, ErrNotRun,
// ErrDeadSession, ErrOriginTimeout and ConnectFailure. Enter admits an
// origin query (breaker, then a foreground slot), Background a refresh
// (only at once, only while closed), Warm a pre-warming query (closed, and
// waits for a background slot), Admit any other statement (breaker only);
// a Ticket's Exit gives its slot back and records the outcome. The Scope
// counts what it refuses into the counters its ScopeConfig names.
//
// # Concurrency and time
//
// Every method of both types is safe for concurrent use. A Breaker's state
// is read without a lock on the hot path (a closed breaker's Allow and a
// Healthy Record of a request that is not a probe take no lock). The
// breaker reads the time only from Config.Clock, so that tests move a fake
// clock instead of sleeping; the limiter's queue timeout is a context
// deadline, measured by the runtime's timers, not by a Clock.
//
// The Breaker and the Limiter do not retry, do not count what they refuse
// (their caller does, as it knows what was refused; Scope is such a
// caller), and does not decide which requests
// go through it: a caller that lets a request bypass the breaker (a
// statement inside a transaction, say) simply does not ask it.
package guard

import "time"

// Clock tells the time to a Breaker: real time (time.Now) in production,
// a fake clock in tests.
type Clock interface{ Now() time.Time }

// systemClock is the Clock of a Breaker configured without one.
type systemClock struct{}

// Now returns time.Now().
func (systemClock) Now() time.Time { return time.Now() }
