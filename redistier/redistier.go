// Package redistier is the shared tier of sqlflight on Redis, built on
// go-redis v9: results, leases and the fleet sequence live in Redis keys, and
// invalidations travel over Redis pub/sub.
//
// Wrap a client you own with New and pass the Tier to sqlflight.Shared, or
// import the package for its side effect and name a Redis server in the
// sqlflight.shared DSN parameter:
//
//	import _ "github.com/sqlflight/sqlflight/redistier"
//
//	db, err := sql.Open("sqlflight", "postgres://app@db/app?sqlflight.shared=redis://cache:6379/0")
//
// The schemes, each parsed by go-redis (its query parameters, such as
// dial_timeout or pool_size, go with it; percent-encode the URL inside a
// URL DSN):
//
//	redis://[user:pass@]host:port/db        one server (redis.ParseURL); rediss:// with TLS
//	redis+cluster://[user:pass@]host:port?addr=host2:port2&addr=...
//	                                        Redis Cluster from its seed nodes (redis.ParseClusterURL)
//	redis+sentinel://[user:pass@]host:port?master_name=m&addr=host2:port2&password=...
//	                                        the primary that Sentinel names (redis.ParseFailoverURL;
//	                                        user:pass are the sentinels', password= the primary's)
//
// rediss+cluster and rediss+sentinel use TLS. A client made from a URL has
// ContextTimeoutEnabled, MaxRetries 1, DialerRetries 1, no pause between
// retries (min_retry_backoff and max_retry_backoff -1) and a DialTimeout of
// one second unless the URL sets them (see New): a Redis that refuses
// connections costs a read at most four refused dials, a fraction of a
// millisecond, and then nothing while the Shield holds the tier down.
//
// Under a namespace ns (the Shield's KeyPrefix) the tier keeps:
//
//	ns+"v:"+key      a hash: field v, the version (decimal); field d, the data
//	                 (sealed by the Shield: the tier stores and returns it as is)
//	ns+"lease:"+key  a string: the token of the instance holding the lease
//	ns+"epochs"      a hash: table name -> sequence of its last published write;
//	                 field "*" for the last write to all tables; field "\x00seq",
//	                 the fleet sequence; field "\x00base", where it started;
//	                 per table t, t+"\x00c" its coarse epoch (writes whose rows
//	                 are not known), t+"\x00p" its pin sets (at most 16, each
//	                 with its epoch) and t+"\x00b" the base of its tag hash
//	ns+"tags:"+t     a hash: "column\x00value" -> sequence of the last write
//	                 that pinned it (at most maxTableTags, then dropped and
//	                 t's coarse epoch raised); field "\x00base", as t+"\x00b"
//	                 (a hash evicted alone is noticed: its tags count as
//	                 written up to the fleet sequence)
//	ns+"invalidate"  the pub/sub channel of invalidations
//
// The sequence and the epochs live in one key, so that Redis evicts them
// together (a tag hash is checked against its base there). The sequence follows Redis's clock in microseconds (a number is
// the clock, or one more than the number before if that is higher), and no
// version is handed out from a sequence more than a second ahead of the
// clock: whoever lowers or raises the counter cannot make a write take a
// number below the version of a value read before it. A sequence starts
// from the clock when that key is made: if it was evicted (under an allkeys-* maxmemory policy),
// the new sequence starts above every version written before, and Fetch
// takes no value whose version is not above the base — nothing written
// before the epochs were lost can be served. (A volatile-* policy or
// noeviction keeps the key and the values written under it.)
//
// The Shield trusts nothing it reads here (see sqlflight.Options.SharedSecret);
// the tier helps it against whoever else can write to Redis: Fetch returns
// no value whose version is above the fleet sequence, Store overwrites one,
// an epoch is never lowered by Publish, and a lease key without an expiry
// (no instance writes one) is taken as absent by Acquire. Give the
// application a Redis user of its own, limited to its namespace:
//
//	ACL SETUSER app on >password ~ns* &ns* +@all -@dangerous
//
// go-redis's own log lines (a dial that failed, for every attempt) go to
// the logger SetLogger sets, at debug level, not to standard error: see
// SetLogger.
//
// Leases, Store, NextSeq and Publish are Lua scripts touching several of these keys at
// once. On Redis Cluster, put a hash tag in the namespace (for instance
// "{sqlflight}:") so that they all hash to one slot.
package redistier

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sqlflight/sqlflight"
)

var _ sqlflight.SharedTier = (*Tier)(nil)

func init() {
	for _, scheme := range []string{"redis", "rediss"} {
		sqlflight.RegisterTier(scheme, open)
		sqlflight.RegisterTier(scheme+"+cluster", open)
		sqlflight.RegisterTier(scheme+"+sentinel", open)
	}
}

// open is the sqlflight.TierOpener of the redis and rediss schemes and of
// their +cluster and +sentinel forms: it makes a client of its own from a
// go-redis URL (see ParseTarget).
func open(target string) (sqlflight.SharedTier, error) {
	client, err := newClientOf(target)
	if err != nil {
		return nil, err
	}
	t := New(client)
	t.ownClient = true
	return t, nil
}

// newClientOf makes the go-redis client a target names: redis:// and
// rediss:// with redis.ParseURL (one server), redis+cluster:// with
// redis.ParseClusterURL (seed nodes: the host and addr= parameters),
// redis+sentinel:// with redis.ParseFailoverURL (sentinels: the host and
// addr= parameters; master_name= required).
func newClientOf(target string) (redis.UniversalClient, error) { return newClientDial(target, nil) }

// dialFunc is a go-redis client's Dialer.
type dialFunc = func(ctx context.Context, network, addr string) (net.Conn, error)

// newClientDial is newClientOf with a client that dials with dial (nil:
// go-redis's own dialer); tests count dials with it.
func newClientDial(target string, dial dialFunc) (redis.UniversalClient, error) {
	scheme, rest, ok := strings.Cut(target, "://")
	if !ok {
		return nil, errors.New("redistier: the URL does not parse")
	}
	base, kind, _ := strings.Cut(strings.ToLower(scheme), "+")
	if base != "redis" && base != "rediss" {
		return nil, fmt.Errorf("redistier: scheme %q is not redis, rediss or their +cluster or +sentinel form", scheme)
	}
	u := base + "://" + rest
	// The query, to tell which of the defaults below the URL sets itself.
	q := url.Values{}
	if pu, err := url.Parse(u); err == nil {
		q = pu.Query()
	}
	var client redis.UniversalClient
	switch kind {
	case "":
		opt, err := redis.ParseURL(u)
		if err != nil {
			return nil, parseError(err)
		}
		tune(q, tuning{&opt.ContextTimeoutEnabled, &opt.MaxRetries, &opt.DialerRetries,
			&opt.MinRetryBackoff, &opt.MaxRetryBackoff, &opt.DialTimeout})
		opt.Dialer = dial
		client = redis.NewClient(opt)
	case "cluster":
		opt, err := redis.ParseClusterURL(u)
		if err != nil {
			return nil, parseError(err)
		}
		tune(q, tuning{&opt.ContextTimeoutEnabled, &opt.MaxRetries, &opt.DialerRetries,
			&opt.MinRetryBackoff, &opt.MaxRetryBackoff, &opt.DialTimeout})
		opt.Dialer = dial
		client = redis.NewClusterClient(opt)
	case "sentinel":
		opt, err := redis.ParseFailoverURL(u)
		if err != nil {
			return nil, parseError(err)
		}
		if opt.MasterName == "" {
			return nil, errors.New("redistier: a redis+sentinel URL needs master_name=")
		}
		tune(q, tuning{&opt.ContextTimeoutEnabled, &opt.MaxRetries, &opt.DialerRetries,
			&opt.MinRetryBackoff, &opt.MaxRetryBackoff, &opt.DialTimeout})
		opt.Dialer = dial
		client = redis.NewFailoverClient(opt)
	default:
		return nil, fmt.Errorf("redistier: scheme %q is not redis, rediss or their +cluster or +sentinel form", scheme)
	}
	return client, nil
}

// tuning points at the fields of a go-redis client's options that tune
// sets (redis.Options, redis.ClusterOptions and redis.FailoverOptions each
// have them).
type tuning struct {
	contextTimeout                  *bool
	maxRetries, dialerRetries       *int
	minBackoff, maxBackoff, dialMax *time.Duration
}

// defaultDialTimeout is the DialTimeout of a client made from a URL that
// sets no dial_timeout: go-redis's is 5 s.
const defaultDialTimeout = time.Second

// tune sets what the Shield wants of a client it made, unless the URL's
// query q sets it itself. The Shield bounds every call with a context
// deadline: let it bound the socket reads and writes too. Its breaker
// decides what a failure means: one retry (for a pooled connection that
// died while idle), not go-redis's three, which would hide an outage until
// the deadline; one dial, not go-redis's five 100 ms apart, so that a
// refused connection (nothing listens) fails at once instead of after
// RedisTimeout; no pause before the retry (go-redis waits 10 to 30 ms
// before retrying a refused dial, which a read whose tier refuses
// connections would pay on top of its query); and a dial bounded by
// defaultDialTimeout, not 5 s, for what the Shield's deadline does not
// bound (the subscription, go-redis's own reconnection attempts).
func tune(q url.Values, t tuning) {
	*t.contextTimeout = true
	if !q.Has("max_retries") {
		*t.maxRetries = 1
	}
	if !q.Has("dialer_retries") {
		*t.dialerRetries = 1
	}
	if !q.Has("min_retry_backoff") {
		*t.minBackoff = -1 // go-redis's "none"
	}
	if !q.Has("max_retry_backoff") {
		*t.maxBackoff = -1
	}
	if !q.Has("dial_timeout") {
		*t.dialMax = defaultDialTimeout
	}
}

// parseError is err of a URL that go-redis could not parse, without the
// URL: url.Parse's errors quote it (or a piece of it), the password with it.
func parseError(err error) error {
	if _, ok := errors.AsType[*url.Error](err); ok {
		return errors.New("redistier: the URL does not parse")
	}
	return fmt.Errorf("redistier: %w", err)
}

// Tier is a sqlflight.SharedTier on Redis. It is safe for concurrent use.
type Tier struct {
	client    redis.UniversalClient
	ownClient bool

	mu     sync.Mutex
	closed bool
	subs   map[*subscription]struct{}
}

// New returns a Tier on client: a *redis.Client, a *redis.ClusterClient (put
// a hash tag in the Shield's KeyPrefix, see the package documentation), a
// Sentinel-backed failover client, or any other redis.UniversalClient. The
// caller keeps ownership of client: Close does not close it. Give the
// client ContextTimeoutEnabled (so that the Shield's RedisTimeout bounds its
// socket reads, not only the Shield's wait for them), MaxRetries 1 (a retry
// for a pooled connection that died while idle; the Shield's breaker
// decides what a failure means), DialerRetries 1 (go-redis otherwise
// dials five times, 100 ms apart, before it reports a refused connection:
// the Shield takes the tier down at the first refusal), MinRetryBackoff and
// MaxRetryBackoff -1 (go-redis otherwise sleeps 10 to 30 ms before its
// retry, which the first read of a tier that refuses connections pays) and
// a DialTimeout of about a second (go-redis's is 5 s; the Shield's deadline
// does not bound the subscription's dials).
func New(client redis.UniversalClient) *Tier {
	return &Tier{client: client, subs: map[*subscription]struct{}{}}
}

// Close stops the subscriptions the Tier started and, if the Tier made its
// client itself (the redis:// DSN path), closes the client. It is safe to
// call more than once.
func (t *Tier) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	subs := t.subs
	t.subs = nil
	t.mu.Unlock()

	for s := range subs {
		s.stop()
	}
	if t.ownClient {
		return t.client.Close()
	}
	return nil
}

// Fields of the epochs hash besides tables: writes to all tables, the fleet
// sequence and where it started (no table key contains a NUL).
const (
	allTables = "*"
	seqField  = "\x00seq"
	baseField = "\x00base"
)

// nextSeq is the Lua function that advances the fleet sequence kept in the
// epochs hash k and returns it as Redis prints it (exact, where a Lua
// number would print as 1.7e+15), with Redis's clock in microseconds. A new
// hash starts the sequence at that clock, and the sequence never falls
// behind it: whoever lowers the counter in Redis cannot make a write take a
// number below the version of a value read before it (versions are at
// most the clock plus aheadSlack when they are handed out, see
// acquireScript).
const nextSeq = atLeast + `
local function nextseq(k)
	local t = redis.call('TIME')
	local now = t[1] .. string.format('%06d', tonumber(t[2]))
	if redis.call('HEXISTS', k, '\0seq') == 0 then
		redis.call('HSET', k, '\0base', now, '\0seq', now)
	end
	redis.call('HINCRBY', k, '\0seq', 1)
	local seq = redis.call('HGET', k, '\0seq')
	if not atleast(seq, now) then
		redis.call('HSET', k, '\0seq', now)
		seq = now
	end
	return seq, t
end
`

func valueKey(ns, key string) string { return ns + "v:" + key }
func leaseKey(ns, key string) string { return ns + "lease:" + key }
func epochsKey(ns string) string     { return ns + "epochs" }
func channel(ns string) string       { return ns + "invalidate" }

// Fetch implements sqlflight.SharedStore: one pipelined round trip reads the
// value, the epochs of tables and, for row epochs (see
// sqlflight.SharedStore.Fetch), the pin sets and tags of their tables.
func (t *Tier) Fetch(ctx context.Context, ns, key string, tables []string) (sqlflight.SharedValue, error) {
	// The fields of the epochs hash read (each once), and where each name's
	// epoch comes from.
	fields := make([]string, 0, len(tables)+3)
	index := make(map[string]int, len(tables)+3)
	field := func(f string) int {
		i, ok := index[f]
		if !ok {
			i = len(fields)
			index[f] = i
			fields = append(fields, f)
		}
		return i
	}
	type tagRead struct {
		table string
		base  int      // the epochs field of the tag hash's base
		names []string // "c\x00v"
		at    []int    // the index in tables of each
	}
	type source struct {
		field int    // an epochs field, or -1
		set   string // for a pin-set name: "" (not one) or the columns
		tag   bool
	}
	var tags []*tagRead
	src := make([]source, len(tables))
	for i, name := range tables {
		table, rest, rows := strings.Cut(name, "\x00")
		switch {
		case !rows || rest == "c":
			src[i] = source{field: field(name)}
		case strings.HasPrefix(rest, "p"):
			src[i] = source{field: field(table + pinSetsSuffix), set: "\x00" + rest[1:]}
		case strings.HasPrefix(rest, "t") && strings.Contains(rest[1:], "\x00"):
			j := slices.IndexFunc(tags, func(tr *tagRead) bool { return tr.table == table })
			if j < 0 {
				tags = append(tags, &tagRead{table: table, base: field(table + tagBaseSuffix)})
				j = len(tags) - 1
			}
			tags[j].names = append(tags[j].names, rest[1:])
			tags[j].at = append(tags[j].at, i)
			src[i] = source{field: -1, tag: true}
		default:
			src[i] = source{field: field(name)} // no kind of row epoch: a field of its own
		}
	}
	all := field(allTables)
	baseAt, seqAt := field(baseField), field(seqField)

	pipe := t.client.Pipeline()
	val := pipe.HMGet(ctx, valueKey(ns, key), "v", "d")
	eps := pipe.HMGet(ctx, epochsKey(ns), fields...)
	tagCmds := make([]*redis.SliceCmd, len(tags))
	for j, tr := range tags {
		tagCmds[j] = pipe.HMGet(ctx, tagsKey(ns, tr.table), append([]string{tagBaseField}, tr.names...)...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return sqlflight.SharedValue{}, err
	}

	raw := make([]string, len(fields))
	for i, e := range eps.Val() {
		raw[i], _ = e.(string)
	}
	epoch := func(name, s string) (uint64, error) {
		if s == "" {
			return 0, nil // no write published for it
		}
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			// Reading it as 0 could serve a result the write made stale.
			return 0, fmt.Errorf("redistier: epoch of %q is not a sequence number", name)
		}
		return n, nil
	}
	got := make([]uint64, len(fields))
	for i, f := range fields {
		if strings.HasSuffix(f, pinSetsSuffix) {
			continue
		}
		n, err := epoch(f, raw[i])
		if err != nil {
			return sqlflight.SharedValue{}, err
		}
		got[i] = n
	}
	var sv sqlflight.SharedValue
	sv.Epochs = make([]uint64, len(tables)+1)
	seq := got[seqAt]
	for i, sc := range src {
		switch {
		case sc.tag:
		case sc.set != "":
			ep, err := disjointEpoch(raw[sc.field], strings.Split(sc.set[1:], "\x00"))
			if err != nil {
				return sqlflight.SharedValue{}, err
			}
			sv.Epochs[i] = ep
		default:
			sv.Epochs[i] = got[sc.field]
		}
	}
	for j, tr := range tags {
		vals := tagCmds[j].Val()
		base, _ := vals[0].(string)
		lost := raw[tr.base] != "" && base != raw[tr.base]
		for k, at := range tr.at {
			switch {
			case raw[tr.base] == "":
				// No tag recorded since this sequence began.
			case lost:
				// The tags were evicted: any of them may have been written
				// up to now.
				sv.Epochs[at] = max(seq, 1)
			default:
				s, _ := vals[1+k].(string)
				n, err := epoch(tables[at], s)
				if err != nil {
					return sqlflight.SharedValue{}, err
				}
				sv.Epochs[at] = n
			}
		}
	}
	sv.Epochs[len(tables)] = got[all]
	base := got[baseAt]
	if base == 0 || seq == 0 {
		return sv, nil // no sequence: no value can be told apart from a stale one
	}
	sv.Seq = seq

	vd := val.Val()
	if len(vd) != 2 {
		return sv, nil
	}
	v, vok := vd[0].(string)
	d, dok := vd[1].(string)
	if !vok || !dok {
		return sv, nil
	}
	version, err := strconv.ParseUint(v, 10, 64)
	if err != nil || version <= base || version > seq {
		// Not a value this tier wrote, written before the sequence began,
		// or of a version no Acquire handed out: a miss.
		return sv, nil
	}
	sv.Version = version
	sv.Data = make([]byte, len(d)) // non-nil even when empty
	copy(sv.Data, d)
	return sv, nil
}

// Row epochs of a table t, in the epochs hash and in a hash of its own.
const (
	// t+pinSetsSuffix holds t's pin sets, at most maxPinSets, each as
	// "epoch len columns" (the columns sorted, joined by NULs, len their
	// length in bytes), one after the other.
	pinSetsSuffix = "\x00p"
	// t+tagBaseSuffix holds the base of t's tag hash: its tagBaseField
	// holds the same, unless the hash was evicted (or was made under
	// another sequence).
	tagBaseSuffix = "\x00b"
	tagBaseField  = "\x00base"
	// maxPinSets bounds a table's pin sets: a row write pinned on another
	// set past it raises the table's coarse epoch (t+"\x00c") instead.
	maxPinSets = 16
)

// maxTableTags bounds the tags a table's tag hash holds: past it, the hash
// is dropped and the table's coarse epoch raised to the fleet sequence.
// A variable so that tests can lower it.
var maxTableTags = 16384

// tagsKey is the hash of table's tag epochs: field "column\x00value" ->
// sequence of the last write that pinned it.
func tagsKey(ns, table string) string { return ns + "tags:" + table }

// disjointEpoch returns the highest epoch of the pin sets encoded in s
// that share no column with cols.
func disjointEpoch(s string, cols []string) (uint64, error) {
	var top uint64
	bad := errors.New("redistier: malformed pin sets")
	for s != "" {
		ep, rest, ok := strings.Cut(s, " ")
		if !ok {
			return 0, bad
		}
		ln, rest, ok := strings.Cut(rest, " ")
		n, err := strconv.Atoi(ln)
		if !ok || err != nil || n < 0 || n > len(rest) {
			return 0, bad
		}
		set := strings.Split(rest[:n], "\x00")
		s = rest[n:]
		e, err := strconv.ParseUint(ep, 10, 64)
		if err != nil {
			return 0, bad
		}
		if !slices.ContainsFunc(set, func(c string) bool { return slices.Contains(cols, c) }) {
			top = max(top, e)
		}
	}
	return top, nil
}

// atLeast is the Lua function that reports whether the decimal number a
// (any string: nil or not a number is false) is at least the decimal number
// b, comparing strings (length, then bytes), so that no precision is lost to
// Lua's doubles.
const atLeast = `
local function atleast(a, b)
	if not a or not string.match(a, '^[0-9]+$') then
		return false
	end
	a = string.gsub(a, '^0+(%d)', '%1')
	return #a > #b or (#a == #b and a >= b)
end
`

// storeScript writes a value unless the one stored has a version at least as
// new and not above the fleet sequence (a version above it was handed out by
// no Acquire: somebody else wrote it, and it must not pin the key).
var storeScript = redis.NewScript(atLeast + `
local cur = redis.call('HGET', KEYS[1], 'v')
local new = ARGV[1]
if atleast(cur, new) then
	local seq = redis.call('HGET', KEYS[2], '\0seq')
	if not seq or atleast(seq, cur) then
		return 0
	end
end
redis.call('HSET', KEYS[1], 'v', new, 'd', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
`)

// Store implements sqlflight.SharedStore.
func (t *Tier) Store(ctx context.Context, ns, key string, data []byte, version uint64, ttl time.Duration) (bool, error) {
	n, err := storeScript.Run(ctx, t.client, []string{valueKey(ns, key), epochsKey(ns)},
		strconv.FormatUint(version, 10), data, millis(ttl)).Int()
	if err != nil {
		return false, err
	}
	return n == 1, nil
}

// acquireScript takes the next sequence number and tries to take the lease.
// It returns the sequence number as Redis prints it, so that it stays exact.
// A lease without a TTL (no instance writes one: somebody else did) is taken
// as absent, and one longer than this lease's TTL is cut down to it, so
// that no lease blocks a key for longer than an instance would hold it.
//
// A sequence more than aheadSlack ahead of Redis's clock was not made by
// the fleet (its numbers follow the clock; only an attacker, or a clock
// that stepped back, puts them ahead): no version is handed out, so that
// no value can outlive a write whose number follows the clock.
var acquireScript = redis.NewScript(nextSeq + `
local seq, t = nextseq(KEYS[1])
local limit = string.format('%d', tonumber(t[1]) + tonumber(ARGV[3])) .. string.format('%06d', tonumber(t[2]))
if atleast(seq, limit) then
	return redis.error_reply('the fleet sequence is ahead of the clock of Redis')
end
local ttl = redis.call('PTTL', KEYS[2])
if ttl == -1 then
	redis.call('DEL', KEYS[2])
elseif ttl > tonumber(ARGV[2]) then
	redis.call('PEXPIRE', KEYS[2], ARGV[2])
end
local ok = redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2])
if ok then
	return {seq, 1}
end
return {seq, 0}
`)

// aheadSlack is how far, in whole seconds, the fleet sequence may run ahead
// of Redis's clock (a burst of numbers within one microsecond, a clock
// stepped back a little) before Acquire refuses to hand out versions. A
// value read at most this long before a write could, if the attacker
// raised the counter, be taken for newer than the write.
const aheadSlack = 1

// Acquire implements sqlflight.Leaser. The lease token is 16 random bytes,
// hex-encoded.
func (t *Tier) Acquire(ctx context.Context, ns, key string, ttl time.Duration) (sqlflight.Lease, error) {
	token := newToken()
	res, err := acquireScript.Run(ctx, t.client, []string{epochsKey(ns), leaseKey(ns, key)},
		token, millis(ttl), aheadSlack).Slice()
	if err != nil {
		return sqlflight.Lease{}, err
	}
	if len(res) != 2 {
		return sqlflight.Lease{}, fmt.Errorf("redistier: acquire: unexpected reply %v", res)
	}
	seq, err := parseSeq(res[0])
	if err != nil {
		return sqlflight.Lease{}, fmt.Errorf("redistier: acquire: %w", err)
	}
	held, _ := res[1].(int64)
	return sqlflight.Lease{Held: held == 1, Token: token, Version: seq}, nil
}

var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
	return redis.call('DEL', KEYS[1])
end
return 0
`)

// Release implements sqlflight.Leaser. It does nothing for a lease that was
// not held.
func (t *Tier) Release(ctx context.Context, ns, key string, lease sqlflight.Lease) error {
	if !lease.Held {
		return nil
	}
	return releaseScript.Run(ctx, t.client, []string{leaseKey(ns, key)}, lease.Token).Err()
}

// renewScript extends a lease to ARGV[2] milliseconds if it still holds
// the token ARGV[1] (compare-and-pexpire).
var renewScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
	return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
`)

// Renew implements sqlflight.Leaser. A lease that was not held is not
// renewed.
func (t *Tier) Renew(ctx context.Context, ns, key string, lease sqlflight.Lease, ttl time.Duration) (bool, error) {
	if !lease.Held {
		return false, nil
	}
	n, err := renewScript.Run(ctx, t.client, []string{leaseKey(ns, key)}, lease.Token, millis(ttl)).Int()
	if err != nil {
		return false, err
	}
	return n == 1, nil
}

var nextSeqScript = redis.NewScript(nextSeq + `
return (nextseq(KEYS[1]))
`)

// NextSeq implements sqlflight.InvalidationBus.
func (t *Tier) NextSeq(ctx context.Context, ns string) (uint64, error) {
	res, err := nextSeqScript.Run(ctx, t.client, []string{epochsKey(ns)}).Result()
	if err != nil {
		return 0, err
	}
	seq, err := parseSeq(res)
	if err != nil {
		return 0, fmt.Errorf("redistier: next sequence: %w", err)
	}
	return seq, nil
}

// publishScript records ARGV[2] as the epoch of what a write touched,
// where it is higher than the epoch recorded (two writers may publish out
// of the order of their numbers), and publishes the message ARGV[4] on
// channel ARGV[1]: of all tables when ARGV[3] is "1"; of the ARGV[7]
// tables that follow, and their coarse epochs; then of row writes, each as
// table, pin set (the columns joined by NULs), number of columns and, per
// column, its name, its number of values and the values: the table's epoch,
// its pin set's (or, a new set past ARGV[6] sets, its coarse epoch) and
// its tags', in the table's tag hash (KEYS[1+i] for the i-th row write),
// which holds at most ARGV[5] tags.
var publishScript = redis.NewScript(atLeast + `
local seq = ARGV[2]
local E = KEYS[1]
local function raiseto(k, f, v)
	if not atleast(redis.call('HGET', k, f), v) then
		redis.call('HSET', k, f, v)
	end
end
local function raise(f)
	raiseto(E, f, seq)
end
if ARGV[3] == '1' then
	raise('*')
end
local maxtags, maxsets = tonumber(ARGV[5]), tonumber(ARGV[6])
local i = 8
for _ = 1, tonumber(ARGV[7]) do
	raise(ARGV[i])
	raise(ARGV[i] .. '\0c')
	i = i + 1
end
local r = 1
while i <= #ARGV do
	r = r + 1
	local tk = KEYS[r]
	local t, setkey, ncols = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
	i = i + 3
	raise(t)
	local fleet = redis.call('HGET', E, '\0seq') or seq
	-- The table's pin sets.
	local f = t .. '\0p'
	local s = redis.call('HGET', E, f) or ''
	local out, found, n, j = {}, false, 0, 1
	while j <= #s do
		local a = string.find(s, ' ', j, true)
		local b = string.find(s, ' ', a + 1, true)
		local ep = string.sub(s, j, a - 1)
		local len = tonumber(string.sub(s, a + 1, b - 1))
		local key = string.sub(s, b + 1, b + len)
		j = b + len + 1
		if key == setkey then
			found = true
			if not atleast(ep, seq) then
				ep = seq
			end
		end
		n = n + 1
		out[n] = ep .. ' ' .. #key .. ' ' .. key
	end
	local recorded = true
	if not found then
		if n < maxsets then
			n = n + 1
			out[n] = seq .. ' ' .. #setkey .. ' ' .. setkey
		else
			recorded = false
		end
	end
	if recorded then
		redis.call('HSET', E, f, table.concat(out))
	else
		raise(t .. '\0c')
	end
	-- Its tags.
	local tags = {}
	for _ = 1, ncols do
		local col, nv = ARGV[i], tonumber(ARGV[i + 1])
		i = i + 2
		for _ = 1, nv do
			tags[#tags + 1] = col .. '\0' .. ARGV[i]
			i = i + 1
		end
	end
	if recorded and #tags > 0 then
		local bf = t .. '\0b'
		local base = redis.call('HGET', E, bf)
		if not base or redis.call('HGET', tk, '\0base') ~= base then
			if base then
				-- Its tags were evicted: any may have been written up to now.
				raiseto(E, t .. '\0c', fleet)
			end
			redis.call('DEL', tk)
			redis.call('HSET', tk, '\0base', seq)
			redis.call('HSET', E, bf, seq)
		end
		for _, tag in ipairs(tags) do
			raiseto(tk, tag, seq)
		end
		if redis.call('HLEN', tk) > maxtags + 1 then
			-- Too many: forget them, and end every read of the table's rows
			-- that one of them could have ended.
			raiseto(E, t .. '\0c', fleet)
			redis.call('DEL', tk)
			redis.call('HDEL', E, bf)
		end
	end
end
redis.call('PUBLISH', ARGV[1], ARGV[4])
return 1
`)

// Publish implements sqlflight.InvalidationBus. A table named "*" shares its
// epoch with writes to all tables: reads of it are invalidated more often,
// never less.
func (t *Tier) Publish(ctx context.Context, ns string, inv sqlflight.Invalidation) error {
	all := "0"
	if inv.All {
		all = "1"
	}
	args := make([]any, 0, 7+len(inv.Tables)+8*len(inv.Rows))
	args = append(args, channel(ns), strconv.FormatUint(inv.Seq, 10), all, encodeInvalidation(inv),
		maxTableTags, maxPinSets, len(inv.Tables))
	for _, tbl := range inv.Tables {
		args = append(args, tbl)
	}
	keys := make([]string, 1, 1+len(inv.Rows))
	keys[0] = epochsKey(ns)
	for _, rp := range inv.Rows {
		keys = append(keys, tagsKey(ns, rp.Table))
		args = append(args, rp.Table, strings.Join(rp.Columns, "\x00"), len(rp.Columns))
		for i, c := range rp.Columns {
			var vals []string
			if i < len(rp.Values) {
				vals = rp.Values[i]
			}
			args = append(args, c, len(vals))
			for _, v := range vals {
				args = append(args, v)
			}
		}
	}
	return publishScript.Run(ctx, t.client, keys, args...).Err()
}

// Subscribe implements sqlflight.InvalidationBus. It returns once the
// subscription is confirmed, at once if Redis cannot be reached, or after
// subscribeWait if Redis does not answer: the subscription then keeps trying
// in the background and reports a Resync when it starts working. A connection that stays silent is checked with a
// ping and replaced if Redis does not answer. stop waits for the last call of
// fn to return, so fn must not call it.
func (t *Tier) Subscribe(ns string, fn func(sqlflight.Invalidation)) (stop func(), err error) {
	s := newSubscription(t.client, channel(ns), fn)
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil, errClosed
	}
	t.subs[s] = struct{}{}
	t.mu.Unlock()

	s.start() // does nothing if Close stopped s meanwhile
	return func() {
		t.mu.Lock()
		delete(t.subs, s) // a no-op after Close
		t.mu.Unlock()
		s.stop()
	}, nil
}

var errClosed = errors.New("redistier: tier closed")

// millis is a TTL in whole milliseconds, at least 1.
func millis(d time.Duration) int64 {
	return max(d.Milliseconds(), 1)
}

func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// parseSeq reads a sequence number a script returned as a string.
func parseSeq(v any) (uint64, error) {
	s, ok := v.(string)
	if !ok {
		return 0, fmt.Errorf("sequence number is %T, not a string", v)
	}
	return strconv.ParseUint(s, 10, 64)
}
