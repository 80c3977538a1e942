// Package stats counts what a Shield's statements cost the database and
// how they were served, in bounded memory and with atomics on the hot path:
// duration histograms, the table of statements (a Space-Saving top-K) with
// each statement's hottest keys and plan, the repeats of a key that the
// advisor weighs, the counters of policy names, the bypasses by reason, the
// writes per table, the advisor's rule for a TTL, and the recent load that
// the live page draws.
//
// # What it guarantees
//
// Memory is bounded whatever the workload: a Table counts at most
// StatementCapacity (256) statements, each with at most HotKeyCapacity (8)
// hot keys, texts cut at MaxStatementText (2 KiB) and arguments in print cut
// at MaxArgText (64 bytes) each and MaxArgsText (256 bytes) in all; a
// statement's Repeats table is 256 words; TableWrites counts at most
// MaxWriteTables (4096) tables apart and Names MaxNames (1000) names; a
// LoadSeries holds LoadSamples (301) samples; Bypasses holds one counter
// per reason its caller names. A Statement is at most 1.5 KiB and a Repeats table 2.3 KiB (the
// README states the bound from these sizes).
//
// Concurrency: every method of Durations, Table, Statement, Repeats,
// TableWrites, Names, Bypasses and LoadSeries is safe for concurrent use; a Table finds and
// counts a statement it already holds without a lock. Histogram,
// StatementStats, HotKey, NameStats and Advice are plain values
// (snapshots).
//
// # What is approximate
//
// Statement calls are a Space-Saving count (Metwally, Agrawal and El
// Abbadi, 2005): a statement that enters a full table takes the place of
// the one with the fewest calls and inherits that count as its Error, so
// the true calls lie between Calls-Error and Calls, Error is at most
// calls/StatementCapacity, and every statement with more than
// 1/StatementCapacity of all calls is counted. Hot keys are a Space-Saving
// of their own whose new keys are admitted only when no other caller holds
// the statement's lock (a sample: heavy keys are still found). Repeats
// forgets a key whose slot another key takes, so repeats are undercounted,
// never invented. Latencies are sampled (one call in SampleEvery) and
// quantiles are bucket bounds. A snapshot reads each counter with atomics,
// not all of them at one instant.
//
// # What it does not do
//
// It does not decide how a statement is served, nor tell the time on its
// own (but for the latency of a call its caller began timing, and
// LoadSeries' ticker): the caller names each call's Outcome and Plan and
// passes the time (a Clock, a time.Time) where a statement is admitted, a
// key's repeat seen or a load sample taken. It never logs nor exports the arguments it keeps
// in print; hiding them is the caller's business.
package stats
