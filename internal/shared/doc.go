// Package shared is a Shield's side of its shared tier (the Redis tier as
// the Shield sees it): the state machine that decides whether a call goes
// to the tier at all, and the queue of invalidations the tier does not know
// of yet.
//
// # When the tier is used
//
// Every call goes through [State.Call], which bounds it by Config.Timeout
// even if the tier does not honour its context: a call that hangs is
// abandoned (its goroutine runs on, its late answer is dropped) and counts
// as a failure. A caller whose own deadline is near waits at most half of
// what is left of it, then gets [ErrSlow] (so that it has time to query the
// database), while the call runs on to its own timeout and tells the
// breaker how it went: the verdict on the tier is the whole call's, never
// that of a caller who left. A panic in the tier is an error of the tier.
//
// # When the tier is down
//
// Three failures in a row take the tier down, and so does a single refused
// connection (nothing listens where the tier is: a certain failure, not a
// slow one). While it is down, Call returns [ErrDown] at once, without
// calling the tier, and the Shield runs on its in-process cache alone, with
// no error to any caller. After a back-off that starts at 200 ms and
// doubles with every failed probe up to 2 s, one call (the probe) is let
// through; the others are still refused while it runs. A probe that
// succeeds brings the tier back (the back-off starts over); one that fails
// takes it down again for the next back-off. A success that follows a
// failure while the tier is up only resets the count of failures.
//
// # What is never lost
//
// A write is marked with [State.Begin] before the Shield's own epochs move
// and ends with [State.Publish]: from Begin until the fleet knows of it,
// [State.Blocked] reports its tables, so that reads of them leave the tier
// alone (the tier may hold results older than the write that nobody can yet
// tell apart). A write whose publish fails is not dropped: its tables are
// remembered (past 1024 tables, as a write to every table; a write to
// tables not known, as one to every table) and published as a write to them
// as a whole by Config.Flush — after the next call that succeeds, and every
// 500 ms while some wait, even if the Shield makes no other call to the
// tier. A flush forgets only the tables it published: one whose write
// failed again meanwhile stays remembered. Reads of a remembered table stay
// off the tier until it is published. What the package does not do is
// publish a write late with its rows: a late write is a write to its
// tables as a whole.
//
// The helpers [BoundedTables], [BoundRows] and [RowsFlat] bound what one
// invalidation holds (tables, their names' bytes, pinned values), so that
// its message stays within what a subscriber reads: a row write past the
// bounds counts as a write to its table, and a table past them as a write
// to every table, both when publishing and when applying what was heard.
// Bounding refuses more cached values than needed, never fewer.
//
// # Concurrency
//
// A State is safe for concurrent use. At most one flush runs at a time, in
// the background. Config.Down and Config.Up are called outside the State's
// lock, once per transition. [State.Close] stops the retries and waits for
// a running flush; calls in flight end on their own timeouts, and nothing
// is started in the background after it.
//
// The package knows nothing of the Shield's epochs, of the tier's interface
// or of how a message is authenticated: the caller passes what a call does
// (a function of its context) and how waiting writes are published
// (Config.Flush).
package shared
