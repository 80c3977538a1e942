package sqlflight

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/sqlflight/sqlflight/internal/seal"
)

// The fleet's hot set: one hot set in the shared tier, under the Shield's
// namespace, sealed with the fleet secret like every value there. Each
// instance merges its own into it (PublishHotSet); a new instance reads it
// to fill its cache from the tier's values (Prewarm with FromFleet).

// fleetHotSetTTL is how long the fleet's hot set lives in the tier after
// its last publication.
const fleetHotSetTTL = 24 * time.Hour

// fleetHotSetKey is the tier key of the fleet's hot set: a digest, like
// every key there.
var fleetHotSetKey = func() string {
	sum := sha256.Sum256([]byte("sqlflight/hotset/1"))
	return hex.EncodeToString(sum[:16])
}()

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
	own := s.hotSet(defaultHotStatements, hotKeyCapacity)
	fleet, err := s.fleetHotSet(ctx, maxHotStatements, hotKeyCapacity)
	if err != nil {
		return err
	}
	merged := mergeHotSets(fleet, own, defaultHotStatements, hotKeyCapacity)
	body, err := json.Marshal(merged)
	if err != nil {
		return err
	}
	return ts.call(ctx, func(ctx context.Context) error {
		seq, err := ts.t.NextSeq(ctx, ts.ns)
		if err != nil {
			return err
		}
		// Always encrypted, whatever SharedEncrypt says: the hot set holds
		// the arguments of the hottest keys (often session tokens).
		ring := *ts.ring
		ring.Encrypt = true
		data := ring.SealValue(append(make([]byte, seal.Prefix, seal.Prefix+len(body)), body...), ts.ns, fleetHotSetKey, seq)
		_, err = ts.t.Store(ctx, ts.ns, fleetHotSetKey, data, seq, fleetHotSetTTL)
		return err
	})
}

// fleetHotSet reads the fleet's hot set from the tier: an empty one when
// there is none, or when it cannot be read or fails authentication
// (counted as Stats.SharedDecodeErrors, and SharedForged).
func (s *Shield) fleetHotSet(ctx context.Context, n, m int) (*hotSet, error) {
	ts := s.tier
	empty := &hotSet{Format: hotSetFormat, Version: hotSetVersion}
	var v SharedValue
	if err := ts.call(ctx, func(ctx context.Context) error {
		var err error
		v, err = ts.t.Fetch(ctx, ts.ns, fleetHotSetKey, nil)
		return err
	}); err != nil {
		return nil, err
	}
	if v.Data == nil {
		return empty, nil
	}
	body, err := ts.ring.OpenValue(v.Data, ts.ns, fleetHotSetKey, v.Version)
	if err == nil && len(body) > maxHotSetBytes {
		err = fmt.Errorf("%w: over %d bytes", ErrBadHotSet, maxHotSetBytes)
	}
	var hs *hotSet
	if err == nil {
		hs, err = parseHotSet(body, n, m)
	}
	if err != nil {
		ts.stats.decodeErrors.Add(1)
		if err == seal.ErrForged {
			ts.stats.forged.Add(1)
		}
		s.warnEvery("hotset", "", "sqlflight: the fleet's hot set in the shared tier cannot be read; ignored", errAttr(err))
		return empty, nil
	}
	return hs, nil
}

// mergeHotSets merges b into a (statements by fingerprint and text, keys by
// arguments, each with the larger count) and keeps the n hottest
// statements with their m hottest keys.
func mergeHotSets(a, b *hotSet, n, m int) *hotSet {
	out := &hotSet{Format: hotSetFormat, Version: hotSetVersion, Saved: b.Saved}
	index := map[string]int{}
	for _, hs := range []*hotSet{a, b} {
		for _, st := range hs.Statements {
			id := st.Fingerprint + "\x00" + st.Text
			i, ok := index[id]
			if !ok {
				index[id] = len(out.Statements)
				st.Keys = slices.Clone(st.Keys)
				out.Statements = append(out.Statements, st)
				continue
			}
			mergeKeys(&out.Statements[i], st)
		}
	}
	slices.SortStableFunc(out.Statements, func(x, y hotStatement) int { return cmp.Compare(y.Calls, x.Calls) })
	out.Statements = out.Statements[:min(n, len(out.Statements))]
	for i := range out.Statements {
		keys := out.Statements[i].Keys
		slices.SortStableFunc(keys, func(x, y hotKeyArgs) int { return cmp.Compare(y.Calls, x.Calls) })
		out.Statements[i].Keys = keys[:min(m, len(keys))]
	}
	return out
}

// mergeKeys merges the keys and count of st into into.
func mergeKeys(into *hotStatement, st hotStatement) {
	into.Calls = max(into.Calls, st.Calls)
	into.Policy = st.Policy
	for _, k := range st.Keys {
		j := slices.IndexFunc(into.Keys, func(o hotKeyArgs) bool { return slices.EqualFunc(o.Args, k.Args, sameArg) })
		if j < 0 {
			into.Keys = append(into.Keys, k)
			continue
		}
		into.Keys[j].Calls = max(into.Keys[j].Calls, k.Calls)
	}
}

func sameArg(a, b typedValue) bool {
	return a.T == b.T && (a.V == nil) == (b.V == nil) && (a.V == nil || *a.V == *b.V)
}
