package sqlflight

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/sqlflight/sqlflight/internal/hotset"
	"github.com/sqlflight/sqlflight/internal/seal"
	"github.com/sqlflight/sqlflight/internal/shared"
)

// The fleet's hot set: one hot set in the shared tier, under the Shield's
// namespace, sealed with the fleet secret like every value there. Each
// instance merges its own into it (PublishHotSet); a new instance reads it
// to fill its cache from the tier's values (Prewarm with FromFleet). Its
// key and life in the tier (FleetKey, FleetTTL) and the merge are
// internal/hotset's.

// PublishHotSet merges the Shield's hot set (see SaveHotSet) into the
// fleet's hot set in the shared tier: statements and keys are matched by
// fingerprint and arguments, each keeps the larger of the two call counts
// (so that publishing again counts nothing twice), and the 32 hottest
// statements with their 8 hottest keys are kept, for 24 hours after the
// last publication. Two instances that publish at once may lose one
// another's merge: the fleet's hot set is a hint, never a guarantee. It
// fails with ErrNoSharedTier without a shared tier, or with the tier's
// error; call it every few minutes and on shutdown.
func (s *Shield) PublishHotSet(ctx context.Context) error {
	ts := s.tier
	if ts == nil {
		return fmt.Errorf("%w: PublishHotSet", ErrNoSharedTier)
	}
	own := hotset.Build(&s.statements, s.opts.Clock.Now(), hotset.DefaultStatements, hotKeyCapacity)
	fleet, err := s.fleetHotSet(ctx, hotset.MaxStatements, hotKeyCapacity)
	if err != nil {
		return err
	}
	merged := hotset.Merge(fleet, own, hotset.DefaultStatements, hotKeyCapacity)
	body, err := json.Marshal(merged)
	if err != nil {
		return err
	}
	return ts.Call(ctx, func(ctx context.Context) error {
		seq, err := ts.T.NextSeq(ctx, ts.NS)
		if err != nil {
			return err
		}
		// Always encrypted, whatever SharedEncrypt says: the hot set holds
		// the arguments of the hottest keys (often session tokens).
		ring := *ts.Ring
		ring.Encrypt = true
		data := ring.SealValue(append(make([]byte, seal.Prefix, seal.Prefix+len(body)), body...), ts.NS, hotset.FleetKey, seq)
		_, err = ts.T.Store(ctx, ts.NS, hotset.FleetKey, data, seq, hotset.FleetTTL)
		return err
	})
}

// fleetHotSet reads the fleet's hot set from the tier: an empty one when
// there is none, or when it cannot be read or fails authentication
// (counted as Stats.SharedDecodeErrors, and SharedForged).
func (s *engine) fleetHotSet(ctx context.Context, n, m int) (*hotset.Set, error) {
	ts := s.tier
	empty := &hotset.Set{Format: hotset.Format, Version: hotset.Version}
	v, err := shared.CallFor(ts.State, ctx, func(ctx context.Context) (SharedValue, error) {
		return ts.T.Fetch(ctx, ts.NS, hotset.FleetKey, nil)
	})
	if err != nil {
		return nil, err
	}
	if v.Data == nil {
		return empty, nil
	}
	body, err := ts.Ring.OpenValue(v.Data, ts.NS, hotset.FleetKey, v.Version)
	var hs *hotset.Set
	if err == nil {
		hs, err = hotset.Parse(body, n, m, hotset.Kept)
	}
	if err != nil {
		ts.Stats.DecodeErrors.Add(1)
		if err == seal.ErrForged {
			ts.Stats.Forged.Add(1)
		}
		s.warned.Warn(s.log, "hotset", "", "sqlflight: the fleet's hot set in the shared tier cannot be read; ignored", errText.Attr(err))
		return empty, nil
	}
	return hs, nil
}
