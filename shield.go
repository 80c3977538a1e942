package sqlflight

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sqlflight/sqlflight/internal/annotation"
	"github.com/sqlflight/sqlflight/internal/errtext"
	"github.com/sqlflight/sqlflight/internal/guard"
	"github.com/sqlflight/sqlflight/internal/logx"
	"github.com/sqlflight/sqlflight/internal/memo"
	"github.com/sqlflight/sqlflight/internal/rowlevel"
	"github.com/sqlflight/sqlflight/internal/stats"
)

// Errors callers may branch on with errors.Is.
var (
	// ErrBadAnnotation is wrapped by the error of a statement whose
	// sqlflight annotation is malformed, when Options.Strict is set. Without
	// Strict such a statement runs unshared and a warning is logged.
	ErrBadAnnotation = annotation.ErrBad

	// ErrOriginPanicked is wrapped by the error every waiter of a flight
	// receives when the origin query panicked or called runtime.Goexit. The
	// process goes on; the flight is gone.
	ErrOriginPanicked = errors.New("sqlflight: origin query panicked")

	// ErrOriginTimeout is wrapped, together with context.DeadlineExceeded, by
	// the error of a shared query whose origin ran past its timeout budget
	// (Options.OriginTimeout or the timeout= annotation).
	ErrOriginTimeout = guard.ErrOriginTimeout
)

// errPrefix begins the text of every error of this package, once.
const errPrefix = errtext.Prefix

// wrapf is fmt.Errorf for the errors of this package, saying "sqlflight:"
// once (errtext.Wrapf).
var wrapf = errtext.Wrapf

// Defaults of Options.
const (
	DefaultMaxResultRows  = 10_000
	DefaultMaxResultBytes = 8 << 20
	DefaultOriginTimeout  = 30 * time.Second
	DefaultMaxBytes       = 64 << 20
	// tooLargeMemory is how long a key whose result was too large to share
	// goes straight to the database without forming a flight.
	tooLargeMemory = 30 * time.Second
)

// Options configure a Shield. The zero value is ready to use. Options is
// itself an Option: pass it to New, OpenDB or Register.
type Options struct {
	// Default is the policy of statements that no annotation, context
	// policy or rule configures. Its zero value coalesces shareable
	// statements and caches nothing.
	Default Policy

	// Rules configure statements by the tables they read or by their
	// normalized text, below annotations and context policies and above
	// Default; the first rule that matches wins.
	Rules []Rule

	// MaxResultRows and MaxResultBytes bound a result that may be shared;
	// larger results go to their own caller only, and the key bypasses
	// sharing for 30 s, unless the limits in force for a later read are
	// larger than those its result exceeded. Zero means DefaultMaxResultRows and
	// DefaultMaxResultBytes. Annotations (maxrows=, maxbytes=) and policies
	// override them per statement.
	MaxResultRows  int
	MaxResultBytes int64

	// MaxBytes bounds the in-process result cache (estimated bytes); zero
	// means DefaultMaxBytes. NegMaxBytes bounds the cache of empty results
	// apart from it, so that lookups of missing keys cannot evict useful
	// entries; zero means MaxBytes/8.
	MaxBytes    int64
	NegMaxBytes int64

	// MaxStale is how long past its hard deadline a cached result may still
	// be served when the query to refresh it fails (stale-if-error); zero
	// means the entry's own hard TTL, a negative value never.
	MaxStale time.Duration

	// MaxConns caps the real database connections of each scope (DSN:
	// sqlflight.max_conns); zero means no cap. Virtual connections — what
	// database/sql's pool holds — cost no database connection until work
	// reaches the database, so cap real ones here and leave database/sql's
	// pool large (a capped database/sql pool also caps the callers that can
	// wait in one flight). Work that needs a real connection while MaxConns
	// are open waits, on its context, for one to be freed, or to be lent by
	// a virtual connection whose session cannot matter (see docs/connections.md,
	// "Real connections"); as with SetMaxOpenConns, one goroutine that holds
	// a connection (a transaction, a sql.Conn) and waits for another can
	// wait until its context ends. The change feed's own connection is not
	// counted.
	MaxConns int

	// MaxInflight bounds the origin queries of shared reads running at once
	// on each scope (each DSN or connector: each database), and the reads
	// that leave a flight to query themselves; zero means
	// DefaultMaxInflight, sized for a typical pool. A read waits for a slot
	// until its context ends or QueueTimeout (zero: DefaultQueueTimeout)
	// passes, then gets a cached result within MaxStale or ErrOverloaded.
	// Writes, bypassed statements and statements inside transactions do not
	// take slots. MaxRefreshes (zero: MaxInflight/4) bounds background
	// refreshes apart, so that they never starve foreground reads.
	MaxInflight  int
	MaxRefreshes int
	QueueTimeout time.Duration

	// While a read of a single-table SELECT keyed by one equality (WHERE
	// id = $1) is in flight, the reads of the same statement that miss
	// with other keys gather and then run together as one statement for
	// every key (WHERE id = ANY(…)); each caller gets its own rows, and
	// each key is cached and invalidated as its own entry (see
	// docs/batching.md). BatchMaxKeys bounds the keys of one batch (zero:
	// DefaultBatchMaxKeys). BatchMaxWait bounds how long a batch waits for
	// the statement in flight before it starts beside it (zero:
	// DefaultBatchMaxWait; negative: as long as that statement runs), so
	// that a slow read of one key holds the others up by no more. NoBatch
	// turns batching off, as the nobatch annotation does for one statement.
	BatchMaxKeys int
	BatchMaxWait time.Duration
	NoBatch      bool

	// Each scope has a circuit breaker of its own, so that one database's
	// outage never refuses another's statements. It opens after
	// BreakerFailures (zero: 5) consecutive errors that mean the database
	// is unavailable, failed connection attempts included (the first
	// connection of a scope too), refuses work with ErrCircuitOpen for
	// BreakerTimeout (zero: 5s), then lets BreakerProbes (zero: 1) probes
	// through, each on a connection found alive (a kept one is pinged and,
	// if dead, replaced): a success closes it, a failure opens it again.
	// While open, reads get a cached result within MaxStale if there is
	// one; writes fail fast too unless WritesWhenOpen is set.
	BreakerFailures int
	BreakerTimeout  time.Duration
	BreakerProbes   int
	WritesWhenOpen  bool

	// Clock tells the time to the cache and the breaker; nil means the
	// system clock. Tests move a fake clock instead of sleeping.
	Clock Clock

	// OriginTimeout bounds a shared origin query, which runs detached from
	// every caller's context. Zero means DefaultOriginTimeout.
	OriginTimeout time.Duration

	// Strict makes a malformed annotation an error wrapping ErrBadAnnotation
	// instead of a warning.
	Strict bool

	// Logger receives warnings (malformed annotations, panics in the origin
	// path). Nil means slog.Default() as it is when each line is logged, so
	// that slog.SetDefault in main (before or after the Shield is made)
	// takes effect. Shield.SetLogger replaces it later, for the Shield of
	// sql.Open("sqlflight", …) too.
	Logger *slog.Logger

	// The shared tier (see SharedTier and Shared; package redistier, or
	// the DSN parameter sqlflight.shared=redis://host:6379/0).
	//
	// KeyPrefix namespaces everything the Shield keeps in the tier (zero:
	// DefaultKeyPrefix); instances share results, leases and invalidations
	// only under the same prefix. RedisTimeout bounds every call to the
	// tier (zero: DefaultRedisTimeout): a call that takes longer counts as
	// a failure, and after a few in a row the Shield runs on its in-process
	// cache alone, without an error to any caller, until a probe finds the
	// tier back. LeaseTTL is the longest an instance holds a key's lease
	// (zero: DefaultLeaseTTL; never more than the origin's timeout): if the
	// holder dies, another instance may query after it.
	KeyPrefix    string
	RedisTimeout time.Duration
	LeaseTTL     time.Duration

	// SharedSecret is the fleet's secret: the same on every instance, at
	// least MinSharedSecret bytes (use 32 random bytes), kept like a
	// password and never derived from the DSN. Everything the Shield reads
	// from the shared tier must carry a MAC under a key derived from it:
	// values (bound to their key, version and deadlines) and invalidation
	// messages. A value that fails is a miss (Stats.SharedForged), a
	// message that fails is ignored (Stats.InvalidationsRejected). Without
	// it a Shield with a shared tier refuses every connection with
	// ErrNoSharedSecret, unless InsecureTrustSharedTier is set.
	//
	// SharedPreviousSecret, while the fleet moves to a new SharedSecret, is
	// the old one: what it sealed is still read, nothing is written under
	// it. Give every instance the new secret with the old one as previous,
	// then drop the previous one.
	SharedSecret         string
	SharedPreviousSecret string

	// SharedEncrypt encrypts the values the Shield writes to the tier
	// (AES-256-GCM under a key derived from SharedSecret, bound to the key,
	// namespace and version), so that reading Redis does not give the
	// rows. Instances read encrypted and unencrypted values alike.
	SharedEncrypt bool

	// InsecureTrustSharedTier runs a shared tier without SharedSecret: the
	// Shield then trusts Redis completely — whoever can write to it can
	// make every instance serve rows of their choosing and ignore or invent
	// invalidations. Only for a Redis that nobody else can reach.
	InsecureTrustSharedTier bool

	// Feed follows every committed change to a PostgreSQL database, by
	// any client, and invalidates what it may have changed (DSN:
	// sqlflight.feed=replication or sqlflight.feed=notify): FeedReplication
	// reads the logical replication stream, FeedNotify the notifications
	// of the triggers `sqlflight triggers install` creates. Each scope
	// runs one feed on a connection of its own; with a shared tier, one
	// instance of the fleet runs it for all (see FeedMode and docs/feed.md,
	// "Change feed"). The first Connect of a scope fails with an error
	// wrapping ErrFeedUnavailable when the feed cannot be established.
	// Entries keep their TTLs whatever the feed does: a feed that is down
	// or late never makes an entry fresher than its TTL allows.
	Feed FeedMode

	// FeedPublication names the publication a replication feed reads
	// (DSN: sqlflight.feed_publication); zero means
	// DefaultFeedPublication. It must exist: the feed never makes one.
	// Changes to tables outside it are not seen.
	FeedPublication string

	// FeedDSN is a PostgreSQL DSN (URL or key=value, as pgx reads it) for
	// the feed's own connection (DSN: sqlflight.feed_dsn, URL-encoded),
	// so that the feed may run as a role of its own: a replication feed's
	// role needs the REPLICATION attribute, a notify feed's must be the
	// role that installed the triggers (it reads their queue), and the
	// application's role then needs neither. It must reach the scope's
	// database: a feed whose connection reaches another fails with
	// ErrFeedUnavailable. Zero: the feed connects as the scope's
	// connections do, which takes a pgx (v5) parent; a scope of another
	// driver (lib/pq, pgx v4, bun's pgdriver) needs FeedDSN for a feed.
	// Its value (a password) is never shown in an error, a log line or
	// Stats.
	FeedDSN string

	// FeedLeaseTTL is how long the lease of a fleet's feed holder lasts
	// unless renewed (DSN: sqlflight.feed_lease_ttl; zero:
	// DefaultFeedLeaseTTL): when the holder dies, another instance takes
	// the feed over after at most this long.
	FeedLeaseTTL time.Duration

	// NoStatementStats turns off the per-statement statistics
	// (Shield.Statements, Shield.Advice); they cost a few atomic
	// operations per statement.
	NoStatementStats bool
}

// An Option configures a Shield. Options is the Option of this package;
// packages that plug into a Shield (a shared tier, metrics) provide others.
type Option interface{ apply(*Shield) }

func (o Options) apply(s *Shield) { s.opts = o }

// Shield is a namespace of sharing: it owns the flights of identical
// in-flight queries, the read-your-writes epochs of the tables written
// through it, and its counters. Every *sql.DB opened through the same Shield
// takes part; queries share results only within one scope (one DSN or one
// connector), so two users or databases never see each other's rows.
type Shield struct {
	// The Shield's own methods are its API; everything they run on, and
	// what the connections of its scopes call, is the engine's.
	*engine
}

// engine is what a Shield runs on: its options, logger, flights, epochs,
// store, counters, scopes, shared tier, feeds and statistics. Its methods
// are the read path (read.go), the write path (write.go), routing
// (route.go) and the glue of the mechanisms in internal/.
type engine struct {
	opts Options
	// shield is the Shield over this engine (ShieldOf).
	shield *Shield
	// log is what the Shield logs through: its handler resolves, at each
	// line, the logger of SetLogger or Options.Logger, else slog.Default().
	log    *slog.Logger
	logger atomic.Pointer[slog.Logger] // nil: slog.Default() at logging time

	flights flightGroup
	batches batchGroup // batch groups of many keys (batch.go)
	workers workers    // run the origin queries (read.go)
	epochs  epochs
	rowCols rowlevel.Columns // column classes of tables, for row-level invalidation
	store   store
	stats   counters

	scopeSeq atomic.Uint64
	scopes   sync.Map    // id → *scope: each has its own guard (breaker.go)
	named    namedScopes // the scopes of pgx configurations (poolscope.go)
	// schemaGen moves on every DDL through the Shield: verdicts and write
	// closures learned before it are forgotten.
	schemaGen atomic.Uint64

	// tooLarge remembers the keys whose results were too large to share,
	// each with the limits the result exceeded: a key skips sharing only
	// while the limits in force are within those, so that an annotation or
	// a policy that raises maxrows= or maxbytes= shares the key at once. It
	// keeps digests of the keys: two keys of one digest are taken for one
	// another, and a read then goes unshared for a while.
	tooLarge memo.Expiring[limits]
	warned   logx.Limiter // fingerprints already warned about

	tierImpl    SharedTier // given by Shared
	tier        *tierState // nil without a shared tier
	tierRelease func()     // gives back a tier opened from a DSN, or nil
	// tierErr refuses every connection: a tier was given without a usable
	// secret (ErrNoSharedSecret).
	tierErr error

	feedStats feedCounters // the change feeds of its scopes

	load stats.LoadSeries // recent load, for the live page (livepage.go)

	// Per-statement statistics and the writes per table the advisor
	// weighs (stmtstats.go, advice.go), since started.
	statements stmtTable
	writes     stats.TableWrites
	started    time.Time
}

// New returns a Shield configured by opts (later options win).
func New(opts ...Option) *Shield {
	s := &Shield{engine: new(engine)}
	s.shield = s
	for _, o := range opts {
		o.apply(s)
	}
	s.logger.Store(s.opts.Logger)
	s.log = logx.New(&s.logger)
	resolveDefaults(&s.opts)
	s.started = s.opts.Clock.Now()
	s.flights.Now, s.flights.Seq, s.flights.Late = s.opts.Clock.Now, s.epochs.Now, &s.stats.lateFollowers
	s.tooLarge.Init(4096)
	s.warned.Init(4096)
	s.workers.init()
	s.initBatches()
	if s.tierImpl != nil {
		s.attachTier(s.tierImpl)
	}
	return s
}

// SetLogger makes l receive the Shield's warnings from now on, in place of
// Options.Logger; nil means slog.Default() as it is when each line is
// logged. It is safe to call at any time, from any goroutine. It is the way
// to give a logger to the Shield behind sql.Open("sqlflight", …):
//
//	sqlflight.Default().SetLogger(logger)
func (s *Shield) SetLogger(l *slog.Logger) { s.logger.Store(l) }

// Stats are cumulative counters and current gauges of a Shield.
type Stats struct {
	Queries   uint64 // statements seen (queries and execs, prepared or not)
	Bypassed  uint64 // statements sent straight to the real connection
	Flights   uint64 // shared flights started (leaders)
	Followers uint64 // callers that joined a running flight instead of querying
	// LateFollowers counts followers (among Followers) that took the result
	// of a flight that had just ended while its herd still drained: some
	// caller of the flight had not given its connection back yet, or the
	// follower had waited in a capped database/sql pool's queue for a
	// connection a caller of the flight gave back (see docs/connections.md, "Capped
	// pools").
	LateFollowers    uint64
	OriginExecutions uint64 // shared-flight queries that reached the database (a batch is one)
	OriginErrors     uint64 // shared-flight queries that failed
	TooLarge         uint64 // shared results over MaxRows/MaxBytes, handed to their own caller
	WaitExpired      uint64 // followers that stopped waiting after wait= and queried themselves
	BadAnnotations   uint64 // statements with a malformed annotation
	Panics           uint64 // panics and Goexits caught in the origin path
	Invalidations    uint64 // write events that bumped table epochs

	// Batches of many keys (Options.BatchMaxKeys): Batches counts the
	// batches' statements that answered reads (BatchSizes tells how many),
	// BatchedReads the reads (flights: one per key and arrival) they
	// answered, BatchSaved the statements they saved (BatchedReads -
	// Batches), BatchLargest the most reads one answered, and BatchAlone
	// the reads a batch could not answer, which ran their own statement
	// (a result over its limits, or the batch failed on a value).
	// BatchPending is a gauge: the reads waiting in a batch that has not
	// started or runs.
	Batches, BatchedReads, BatchSaved, BatchLargest, BatchAlone uint64
	BatchPending                                                int64
	// BatchSizes counts the batches by the reads they answered: "1",
	// "2-4", "5-16", "17-64", "65-256", "257+".
	BatchSizes map[string]uint64

	FreshHits       uint64 // cached results served fresh
	StaleHits       uint64 // cached results served stale while a refresh runs
	NegativeHits    uint64 // cached empty results served
	Misses          uint64 // cacheable reads that found no usable entry
	Fills           uint64 // results stored in the cache
	Refreshes       uint64 // background refreshes started (stale or early)
	RefreshFailures uint64
	StaleIfError    uint64 // cached results served because the query to refresh them failed (or was refused)

	Shed uint64 // reads refused for want of an origin slot (ErrOverloaded or a stale result)
	// Each scope (each DSN or connector: each database and user) has a
	// circuit breaker of its own. BreakerRejected and BreakerTransitions
	// are summed over them; BreakerState is the worst of theirs ("open",
	// then "half-open", then "closed"); BreakerOpen counts the scopes
	// whose breaker is not closed, and Breakers tells each scope's, keyed
	// by its label: "database@host:port" for a pgx DSN, a
	// SharedConnector's name, or "scope N" (never a password).
	BreakerRejected    uint64 // statements refused by an open circuit breaker
	BreakerTransitions uint64
	BreakerState       string // "closed", "open" or "half-open"
	BreakerOpen        int    // gauge: scopes whose breaker is open or half-open
	Breakers           map[string]BreakerStats
	// BreakerProbeRedials are half-open probes whose kept connection had
	// died with the outage: it was closed, and the probe ran on a new one.
	BreakerProbeRedials uint64

	// Bypasses by reason, every one of them:
	//   - "exec": an Exec (never shared, whatever it runs);
	//   - "transaction": inside a transaction;
	//   - "session": on a connection whose session changed (SET, temporary
	//     tables, LISTEN, …) until DISCARD ALL, or under another scope;
	//   - "write": a statement that may write;
	//   - "not shareable": volatile or per-session values, several
	//     statements in one text, or functions a text-only parent cannot
	//     vouch for;
	//   - "unverified": the server's verdict could not be had;
	//   - "policy": off, nocoalesce without a cache, or a follower that
	//     stopped waiting after wait=;
	//   - "arguments": arguments that cannot be part of a key or be kept
	//     for a detached origin;
	//   - "too large": a result over maxrows=/maxbytes= (MaxResultRows,
	//     MaxResultBytes), and its key for 30 s after, while the limits in
	//     force are no larger;
	//   - "busy connection": the connection still has a result open;
	//   - "bad annotation": a malformed annotation (without Strict).
	BypassReasons map[string]uint64

	// OriginDuration is how long shared origin queries took (query and
	// materialization); FollowerWait how long followers waited for them.
	OriginDuration Histogram
	FollowerWait   Histogram

	// Names are the counters of each policy name (name= annotations),
	// at most 1000 of them; later names count under "_other".
	Names map[string]NameStats

	// OriginPerMissEvent is origin executions per miss event (a flight or a
	// background refresh): 1 when every miss event reached the database
	// once, whatever the number of callers behind it.
	OriginPerMissEvent float64

	CacheEntries int64 // gauge: results the cache holds (empty ones included)
	CacheBytes   int64 // gauge: their estimated bytes

	// The shared tier (zero without one).
	SharedState string // "up", "down" (running on L1 alone), or "" without a tier
	// SharedTrusted is true when the tier is trusted without a secret
	// (InsecureTrustSharedTier, from Options or the DSN): whoever can write
	// to it can make this Shield serve rows of their choosing.
	SharedTrusted       bool
	SharedTransitions   uint64 // times the tier went down or came back
	SharedHits          uint64 // results taken from the tier (into L1) instead of the database
	SharedMisses        uint64 // flights that found no usable result in the tier
	SharedWrites        uint64 // results written to the tier
	SharedSuperseded    uint64 // writes refused because the tier held a newer version
	SharedErrors        uint64 // calls to the tier that failed or timed out
	SharedDecodeErrors  uint64 // values in the tier that could not be read or failed authentication (treated as misses)
	SharedForged        uint64 // … of those, values whose MAC failed, or whose version no Acquire handed out
	SharedSkipped       uint64 // reads that left the tier alone: a write to their tables waits to be published
	LeasesAcquired      uint64 // leases this instance took to query for the fleet
	LeaseWaits          uint64 // flights that waited for another instance's lease holder
	LeaseWaitExpired    uint64 // … and stopped waiting after wait= to query themselves
	InvalidationsSent   uint64 // writes published to the other instances
	InvalidationsHeard  uint64 // writes of other instances applied here
	InvalidationResyncs uint64 // times the subscription was re-made and L1 dropped everything
	// InvalidationsRejected are messages on the bus that did not parse or
	// whose MAC failed: ignored (they never drop L1).
	InvalidationsRejected uint64

	Waiting         int64  // gauge: callers currently waiting on a flight
	InFlight        int64  // gauge: flights currently running
	RealConns       int64  // gauge: real database connections currently open
	RealConnsOpened uint64 // real database connections opened
	// RealConnsLent counts real connections a virtual connection took from
	// another whose session could not matter (idle in database/sql's pool,
	// or waiting in a flight) instead of opening one; RealConnWaits counts
	// waits for a real connection under Options.MaxConns.
	RealConnsLent uint64
	RealConnWaits uint64

	// The server's verdicts (PostgreSQL parents): statement shapes probed,
	// probes that failed (those statements ran unshared), and how long a
	// probe took.
	Probes        uint64
	ProbeFailures uint64
	ProbeDuration Histogram

	// Pre-warming (Shield.Prewarm): keys queried and cached, keys cached
	// from the shared tier's values, keys skipped (already cached, in
	// flight, refused with their statement, too large, no tier value),
	// and keys whose origin query failed.
	PrewarmReplayed uint64
	PrewarmLoaded   uint64
	PrewarmSkipped  uint64
	PrewarmFailed   uint64

	// The change feed (Options.Feed; zero without one). FeedState is
	// "starting", "current" (streaming, caught up), "lagging" (streaming,
	// over a second behind), "down" (failed; it is opened again after a
	// back-off) or "standby" (another instance of the fleet holds it);
	// with several scopes, the worst of theirs. FeedLag is how far behind
	// the server the feed was at its last applied transaction (0 once the
	// server said it is caught up). FeedDelay is the distribution of that
	// delay, from each transaction's commit (server clock) to its
	// invalidations. FeedResyncs counts the streams established again,
	// each of which dropped every cached entry; FeedErrors the failures,
	// FeedLastError the last one's class (a SQLSTATE or a kind, never its
	// message).
	FeedState        string
	FeedLag          time.Duration
	FeedTransactions uint64 // committed transactions applied
	FeedChanges      uint64 // changed rows (and truncated tables) applied
	FeedResyncs      uint64
	FeedErrors       uint64
	FeedLastError    string
	FeedDelay        Histogram
}

// Stats returns a snapshot of s's counters.
func (s *Shield) Stats() Stats {
	st := s.stats.snapshot()
	s.breakerSnapshot(&st)
	if events := st.Flights + st.Refreshes; events > 0 {
		st.OriginPerMissEvent = float64(st.OriginExecutions) / float64(events)
	}
	s.store.Flush() // what waits in the batch counts
	st.CacheEntries = s.store.Entries()
	st.CacheBytes = s.store.Bytes()
	if ts := s.tier; ts != nil {
		c := &ts.Stats
		st.SharedState = ts.Status()
		st.SharedTrusted = ts.TrustMessages
		st.SharedTransitions = ts.Transitions()
		st.SharedHits, st.SharedMisses = c.Hits.Load(), c.Misses.Load()
		st.SharedWrites, st.SharedSuperseded = c.Writes.Load(), c.Superseded.Load()
		st.SharedErrors, st.SharedDecodeErrors = ts.Errors(), c.DecodeErrors.Load()
		st.SharedSkipped = c.SkippedPending.Load()
		st.LeasesAcquired, st.LeaseWaits, st.LeaseWaitExpired = c.Leases.Load(), c.LeaseWaits.Load(), c.LeaseExpired.Load()
		st.InvalidationsSent, st.InvalidationsHeard = ts.Published(), c.Received.Load()
		st.InvalidationResyncs = c.Resyncs.Load()
		st.SharedForged, st.InvalidationsRejected = c.Forged.Load(), c.Rejected.Load()
	}
	s.feedSnapshot(&st)
	return st
}

// BreakerStats are one scope's circuit breaker in Stats.
type BreakerStats struct {
	State       string // "closed", "open" or "half-open"
	Rejected    uint64 // statements of the scope refused while it was open
	Transitions uint64
}

// breakerSnapshot fills in the breakers of s's scopes.
func (s *engine) breakerSnapshot(st *Stats) {
	var scopes []*scope
	seen := map[string]int{}
	s.scopes.Range(func(_, v any) bool {
		sc := v.(*scope)
		scopes = append(scopes, sc)
		seen[sc.name()]++
		return true
	})
	st.Breakers = make(map[string]BreakerStats, len(scopes))
	worst := breakerClosed
	for _, sc := range scopes {
		g := &sc.guard
		state := g.Breaker.State()
		b := BreakerStats{State: state.String(), Rejected: g.Rejected(), Transitions: g.Breaker.Transitions()}
		st.BreakerTransitions += b.Transitions
		if state != breakerClosed {
			st.BreakerOpen++
		}
		if state == breakerOpen || (state == breakerHalfOpen && worst == breakerClosed) {
			worst = state
		}
		name := sc.name()
		if seen[name] > 1 { // two users of one database, say
			name = fmt.Sprintf("%s #%d", name, sc.id)
		}
		st.Breakers[name] = b
	}
	st.BreakerState = worst.String()
}

type counters struct {
	queries, flights, followers, originExecs, originErrors          atomic.Uint64
	tooLarge, waitExpired, badAnnotations, panics, invalidations    atomic.Uint64
	freshHits, staleHits, negHits, misses, fills                    atomic.Uint64
	refreshes, refreshFailures, staleIfError, shed, breakerRejected atomic.Uint64
	realOpened, probes, probeFailures, probeRedials                 atomic.Uint64
	realWaits, realsLent, lateFollowers                             atomic.Uint64
	prewarmReplayed, prewarmLoaded, prewarmSkipped, prewarmFailed   atomic.Uint64
	batches, batchedReads, batchLargest, batchAlone                 atomic.Uint64
	waiting, inFlight, realConns, batchPending                      atomic.Int64

	bypassed stats.Bypasses // statements sent straight to the real connection, by reason
	// batchSizes counts batches by the reads they answered (batchSizeLabels).
	batchSizes [len(batchSizeLabels)]atomic.Uint64

	originDuration, followerWait, probeDuration stats.Durations
	names                                       stats.Names
}

func (c *counters) snapshot() Stats {
	st := Stats{
		Queries:             c.queries.Load(),
		Bypassed:            c.bypassed.Total(),
		Flights:             c.flights.Load(),
		Followers:           c.followers.Load(),
		LateFollowers:       c.lateFollowers.Load(),
		OriginExecutions:    c.originExecs.Load(),
		OriginErrors:        c.originErrors.Load(),
		TooLarge:            c.tooLarge.Load(),
		WaitExpired:         c.waitExpired.Load(),
		BadAnnotations:      c.badAnnotations.Load(),
		Panics:              c.panics.Load(),
		Invalidations:       c.invalidations.Load(),
		FreshHits:           c.freshHits.Load(),
		StaleHits:           c.staleHits.Load(),
		NegativeHits:        c.negHits.Load(),
		Misses:              c.misses.Load(),
		Fills:               c.fills.Load(),
		Refreshes:           c.refreshes.Load(),
		RefreshFailures:     c.refreshFailures.Load(),
		StaleIfError:        c.staleIfError.Load(),
		Shed:                c.shed.Load(),
		BreakerRejected:     c.breakerRejected.Load(),
		BreakerProbeRedials: c.probeRedials.Load(),
		BypassReasons:       c.bypassed.Reasons(),
		OriginDuration:      c.originDuration.Snapshot(),
		FollowerWait:        c.followerWait.Snapshot(),
		Names:               map[string]NameStats{},
		Waiting:             c.waiting.Load(),
		InFlight:            c.inFlight.Load(),
		RealConns:           c.realConns.Load(),
		RealConnsOpened:     c.realOpened.Load(),
		RealConnsLent:       c.realsLent.Load(),
		RealConnWaits:       c.realWaits.Load(),
		Probes:              c.probes.Load(),
		ProbeFailures:       c.probeFailures.Load(),
		ProbeDuration:       c.probeDuration.Snapshot(),
		PrewarmReplayed:     c.prewarmReplayed.Load(),
		PrewarmLoaded:       c.prewarmLoaded.Load(),
		PrewarmSkipped:      c.prewarmSkipped.Load(),
		PrewarmFailed:       c.prewarmFailed.Load(),
		Batches:             c.batches.Load(),
		BatchedReads:        c.batchedReads.Load(),
		BatchLargest:        c.batchLargest.Load(),
		BatchAlone:          c.batchAlone.Load(),
		BatchPending:        c.batchPending.Load(),
	}
	if st.BatchedReads > st.Batches {
		st.BatchSaved = st.BatchedReads - st.Batches
	}
	st.BatchSizes = make(map[string]uint64, len(batchSizeLabels))
	for i, l := range batchSizeLabels {
		if n := c.batchSizes[i].Load(); n > 0 {
			st.BatchSizes[l] = n
		}
	}
	for name, ns := range c.names.Snapshot() {
		st.Names[name] = NameStats(ns)
	}
	return st
}
