package sqlflight

import (
	"time"

	"github.com/sqlflight/sqlflight/internal/shared"
)

// tierState is a Shield's side of its shared tier (package shared, whose
// door says when the tier is used, when it is down, what is never lost and
// what is read from it), in the tier's own types.
type tierState = shared.Tier[RowPins, Invalidation, SharedValue, Lease]

// attachTier starts s's use of t: its subscription to other instances'
// writes. Without a usable secret it sets s.tierErr instead, and every
// connection of s fails with it.
func (s *engine) attachTier(t SharedTier) {
	o := &s.opts
	ring, trust, err := shared.Secrets{Secret: o.SharedSecret, Previous: o.SharedPreviousSecret, Encrypt: o.SharedEncrypt,
		Insecure: o.InsecureTrustSharedTier, Min: MinSharedSecret, None: ErrNoSharedSecret}.Ring()
	if err != nil {
		s.tierErr = err
		return
	}
	c := shared.TierConfig{NS: o.KeyPrefix, Timeout: o.RedisTimeout, LeaseTTL: o.LeaseTTL, Clock: o.Clock,
		Ring: ring, TrustMessages: trust, Epochs: &s.epochs}
	if c.NS == "" {
		c.NS = DefaultKeyPrefix
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultRedisTimeout
	}
	if c.LeaseTTL <= 0 {
		c.LeaseTTL = DefaultLeaseTTL
	}
	c.Down = func(err error, retryIn time.Duration) {
		s.log.Warn("sqlflight: shared tier unavailable; running on the in-process cache alone",
			"namespace", c.NS, errText.Attr(err), "retry_in", retryIn)
	}
	c.Up = func() { s.log.Warn("sqlflight: shared tier is back", "namespace", c.NS) }
	ts := shared.NewTier[RowPins, Invalidation, SharedValue, Lease](t, c)
	if err := ts.Subscribe(); err != nil {
		// Without hearing other instances' writes, L1 could serve results
		// they made stale: the tier is not used at all.
		s.log.Error("sqlflight: shared tier disabled: cannot subscribe to invalidations", errText.Attr(err))
		return
	}
	s.tier = ts
}
