// Package shared is a Shield's side of its shared tier (the Redis tier as
// the Shield sees it): the state machine that decides whether a call goes
// to the tier at all, the queue of invalidations the tier does not know of
// yet, what a value in the tier holds and how it is read back, the floor
// of the fleet's writes that no value read from the tier may be older
// than, and the Tier that uses them all over the Shield's tier.
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
// # What is read from the tier
//
// Nothing the tier returns is trusted. A value is an [Entry] (a result and
// its filler's deadlines) that [Encode] writes and the caller seals with
// the fleet's keys ([NewRing]; [InsecureRing] for a tier trusted without a
// secret, which detects corruption, not forgery) under the namespace, the
// key ([Key]: a digest of the scope's fleet-wide name and the read's key)
// and the value's version. [Open] reads it back in this order: a value
// longer than the reader's limits allow ([Limits] plus [Framing]) is
// refused before its seal is checked; then the seal (a value of another
// secret, key or version is seal.ErrForged); then the body is decoded
// within the limits (internal/wire: a value that would decode to more is
// refused before it costs more), its deadlines checked in order, and its
// scan types looked up among those this process knows (the driver.Value
// types, the database/sql Null types, those it encoded itself): a name it
// does not know is [ErrUnknownScanType]. Each refusal is an error the
// caller counts as a miss. [Limits] are a reader's own policy's bounds,
// with an eighth and [DecodeSlack] of room, so that a result the origin
// shared is never refused where it is read.
//
// # What the floor admits
//
// A [Floor] keeps the highest fleet sequence number of the writes this
// instance knows of: its own (raised before they are published), those of
// authenticated messages, and the epochs a Fetch reported ([Floor.Learn],
// within the fleet sequence the Fetch read). The tier cannot take them
// back: an epoch it later deletes or lowers lowers nothing. [Floor.Admits]
// admits a value only if its version is above every write known to the
// tables of its read (for a read of rows, [Floor.AdmitsRows]: to its
// table as a whole, to its pin set, to its tags), and version 0 never.
// The floor's memory is bounded like the Shield's epochs (internal/epoch):
// past its bounds it raises coarser floors (a table's, every table's),
// which refuses more values than needed, never fewer. [EpochNames] are
// the names a read checks in the tier, in the forms Learn reads.
//
// # The Shield's tier
//
// A [Tier] puts the above together over the Shield's tier, which it takes
// in the root package's own types, by their shape ([Backend], [Value],
// [Lease], [Message], [Pins]). It publishes a write ([Tier.BeginWrite],
// [Tier.PublishWrite]: a sequence number, then the message's MAC, then
// the floor, then the message) and hears those of other instances
// ([Tier.Hear]: a message that is malformed or fails its MAC, unless
// TierConfig.TrustMessages, changes nothing; one of this instance's own is
// ignored; a resync moves every epoch). It gives a read its key
// ([Tier.ReadKey]: none while the tier may not be called or a write to
// its tables waits), fetches and checks its value ([Tier.Fetch]), stores
// one under its lease's version ([Tier.Store]), and keeps a read's lease
// ([Tier.Acquire], [Tier.Release], best effort even while the tier is
// down; [Tier.Lead], a leader's look, lease and bounded wait for the
// holder). [Secrets] turn a Shield's secrets into its keys, or the error
// that refuses them; [Openers] are the tiers a DSN may name, one per
// target, closed with its last user.
//
// # Concurrency
//
// A State is safe for concurrent use. At most one flush runs at a time, in
// the background. Config.Down and Config.Up are called outside the State's
// lock, once per transition. [State.Close] stops the retries and waits for
// a running flush; calls in flight end on their own timeouts, and nothing
// is started in the background after it. A Tier is safe for concurrent
// use as its State is, but the leases it is given (Acquire, Release,
// Lead) are the caller's, one read's at a time; [Tier.Close] also stops
// its subscription.
//
// A Floor and Openers are safe for concurrent use too; the other helpers
// hold no state but the scan types this process has encoded.
//
// The package knows nothing of the Shield's flights, entries or policies:
// the caller passes what a call does (a function of its context), how a
// value found is judged (Tier.Lead's look), and the bounds a value is read
// within.
package shared
