package sqlflight

import (
	"context"
	"errors"
	"time"

	"github.com/sqlflight/sqlflight/internal/shared"
)

// A SharedTier is a result cache shared by every instance of an application
// (package redistier provides one on Redis). The Shield keeps its
// in-process cache (L1) in front of it, coalesces in process first, and
// uses the tier for three things: results (SharedStore), leases that let one
// instance of the fleet run the origin query of a key (Leaser), and the
// invalidations that writes through any instance publish (InvalidationBus).
//
// Every method gets the namespace ns (Options.KeyPrefix): a tier keeps
// everything it stores under it, so that fleets (or tests) with different
// prefixes never meet. Keys are opaque hex digests; they never contain SQL
// or arguments. The Shield bounds every call with Options.RedisTimeout and
// treats any error as "the tier is unavailable": it goes on without it.
type SharedTier interface {
	SharedStore
	Leaser
	InvalidationBus
}

// SharedStore holds encoded results.
type SharedStore interface {
	// Fetch returns the value stored under key (Data nil if none) and the
	// fleet epochs of tables: Epochs[i] is the sequence of the last write
	// published for tables[i] (0 if none), and Epochs[len(tables)] that of
	// the last write published for all tables.
	//
	// Besides table names, tables holds the epochs of a table's rows,
	// named by the table (which never holds a NUL), a NUL and a kind:
	//
	//	t "\x00c"                the last write to t whose rows are not known:
	//	                         one published in Invalidation.Tables, or a
	//	                         row write the tier could not record by rows
	//	t "\x00p" c1 "\x00" c2 … the last row write to t pinned on a set of
	//	                         columns none of which is c1, c2, … (sorted)
	//	t "\x00t" c "\x00" v     the last row write to t that pinned value v
	//	                         of column c
	//
	// Every write to t raises the epoch of t, and either its "c" epoch or
	// the epochs of its pin set and its values: a reader of rows of t
	// checks "c", "p" and "t" names instead of t. A tier may answer any of
	// them with a higher epoch than the exact one (it may forget rows,
	// bounding its memory, by raising "c"), never a lower one.
	Fetch(ctx context.Context, ns, key string, tables []string) (SharedValue, error)

	// Store writes data under key for ttl unless the value stored there has
	// a version at least as new and not above the fleet sequence (a version
	// no Acquire handed out is overwritten); it reports whether it wrote.
	Store(ctx context.Context, ns, key string, data []byte, version uint64, ttl time.Duration) (bool, error)
}

// SharedValue is what SharedStore.Fetch returns. The Shield trusts none of
// it: Data must carry the MAC of the fleet secret over the namespace, the
// key and Version; a Version above Seq is refused; and Epochs are checked
// against the writes the Shield knows of itself.
type SharedValue struct {
	Data    []byte
	Version uint64
	Epochs  []uint64
	Seq     uint64 // the fleet sequence when read (0: not known)
}

// Leaser hands out leases on keys and the fleet sequence numbers that
// version results.
type Leaser interface {
	// Acquire takes the next fleet sequence number and tries to take the
	// lease on key for ttl (SET NX PX). Lease.Held reports whether it did;
	// Lease.Version is the sequence number either way.
	Acquire(ctx context.Context, ns, key string, ttl time.Duration) (Lease, error)

	// Release gives the lease back if it still holds lease.Token
	// (compare-and-delete): a lease that expired and was taken by another
	// instance is not released.
	Release(ctx context.Context, ns, key string, lease Lease) error

	// Renew extends the lease on key to ttl from now if it still holds
	// lease.Token (compare-and-pexpire), and reports whether it did: a
	// lease that expired, or was taken by another instance, is not
	// renewed. The change feed's holder renews its lease while it runs.
	Renew(ctx context.Context, ns, key string, lease Lease, ttl time.Duration) (bool, error)
}

// Lease is the outcome of Leaser.Acquire.
type Lease struct {
	Held    bool
	Token   string
	Version uint64
}

// InvalidationBus carries writes between the instances of a fleet.
type InvalidationBus interface {
	// NextSeq takes the next fleet sequence number (the counter Acquire
	// takes its versions from).
	NextSeq(ctx context.Context, ns string) (uint64, error)

	// Publish records inv.Seq, a number NextSeq returned, as the epoch of
	// inv.Tables (of all tables when inv.All) and of the rows inv.Rows pin
	// (see Fetch for the epochs a row write raises) unless the epoch
	// recorded is already higher, so that Fetch reports it from then on,
	// and tells every subscriber, Tag included.
	Publish(ctx context.Context, ns string, inv Invalidation) error

	// Subscribe calls fn with every invalidation published in ns, by any
	// instance, until stop is called. When messages may have been lost (the
	// subscription broke and was made again), it calls fn with Resync set;
	// a message it cannot read, with Malformed set. fn must not block for
	// long.
	Subscribe(ns string, fn func(Invalidation)) (stop func(), err error)
}

// Invalidation is one write, as the bus carries it. The Shield acts only on
// an invalidation whose Tag is the MAC of the fleet secret over the
// namespace, Seq, All, Source, Tables and Rows.
type Invalidation struct {
	Tables    []string // written as a whole (their epochs and their "c" epochs)
	Rows      []RowPins
	All       bool   // a write to tables not known
	Seq       uint64 // from NextSeq
	Source    string // the publishing Shield's instance id
	Tag       []byte // the publisher's MAC; opaque to the bus
	Resync    bool   // not a write: messages may have been lost
	Malformed bool   // not a write: a message the bus could not read (the Shield counts and ignores it)
}

// RowPins is a write to rows of one table that the writer proved have,
// before and after the write, column Columns[i] equal to one of Values[i]
// (or NULL). Columns are sorted and distinct, each column's values sorted
// and distinct; a column pinned to no value touched only NULLs.
type RowPins struct {
	Table   string
	Columns []string
	Values  [][]string
}

// Defaults of the shared-tier Options.
const (
	DefaultKeyPrefix    = "sqlflight:"
	DefaultRedisTimeout = 100 * time.Millisecond
	DefaultLeaseTTL     = 5 * time.Second
)

// Shared plugs a shared tier into a Shield: pass it to New next to Options.
func Shared(t SharedTier) Option { return sharedOption{t} }

type sharedOption struct{ t SharedTier }

func (o sharedOption) apply(s *Shield) { s.tierImpl = o.t }

// A TierOpener opens a shared tier from the value of the sqlflight.shared
// DSN parameter (e.g. redis://127.0.0.1:6379/0).
type TierOpener func(target string) (SharedTier, error)

// tierOpeners are the tiers the sqlflight.shared DSN parameter may name,
// and those opened from DSNs: one tier per target, shared by every DSN
// naming it, closed with the last Shield using it.
var tierOpeners shared.Openers[SharedTier]

// RegisterTier makes a shared tier available to the sqlflight.shared DSN
// parameter under a URL scheme; package redistier registers "redis" and
// "rediss" when imported. It panics if the scheme is taken.
func RegisterTier(scheme string, open TierOpener) { tierOpeners.Register(scheme, open) }

// ErrNoSharedSecret is wrapped by the error of every connection of a Shield
// given a shared tier without a usable Options.SharedSecret (the DSN's
// sqlflight.shared_secret): none, or one shorter than MinSharedSecret
// bytes, with InsecureTrustSharedTier not set. Such a Shield never runs,
// neither without its tier nor with a tier it cannot authenticate.
var ErrNoSharedSecret = errors.New("sqlflight: the shared tier needs a secret (Options.SharedSecret or sqlflight.shared_secret)")

// MinSharedSecret is the shortest Options.SharedSecret (and
// SharedPreviousSecret) accepted, in bytes: 32 random bytes, hex- or
// base64-encoded, are what to use.
const MinSharedSecret = 16
