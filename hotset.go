package sqlflight

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/sqlflight/sqlflight/internal/hotset"
	"github.com/sqlflight/sqlflight/internal/stats"
)

// The hot set: the hottest keys of the statements a Shield caches, saved
// so that a new instance can warm its cache before it takes traffic
// (prewarm.go). Its file format, the seal and the typed arguments are
// internal/hotset's.

// hotSetLimits are what a hot set read from a file or the fleet keeps:
// what SaveHotSet writes (texts of 16 KiB, the hot keys a statement keeps,
// arguments in 1 KiB).
var hotSetLimits = hotset.Limits{Text: maxWarmText, Keys: hotKeyCapacity, ArgBytes: maxWarmArgs}

// ErrBadHotSet is wrapped by the error of Prewarm when its hot set cannot
// be read: not JSON, another format or version, or over its bounds.
var ErrBadHotSet = hotset.ErrBad

// ErrHotSetUnsealed is wrapped by the error of Prewarm when the hot set it
// is given (PrewarmOptions.From) does not carry a seal that verifies under
// the Shield's fleet secret (Options.SharedSecret, or
// SharedPreviousSecret): the seal is missing, its MAC is wrong (the file
// was changed after SaveHotSet wrote it, or sealed under another secret),
// or the Shield has no secret to check it with. Nothing of such a file is
// replayed, unless PrewarmOptions.TrustFile says that only the
// application can write it.
var ErrHotSetUnsealed = hotset.ErrUnsealed

// SaveHotSet writes the Shield's hot set to w: its 32 hottest statements
// that are shared and cached under a TTL, each with its hottest keys
// whose arguments are plain values within 1 KiB (at most 8 per
// statement), in the JSON format docs/operations.md describes ("Pre-warming after
// a deploy"). Statements whose text exceeds 16 KiB are left out. Call it
// on shutdown, and give the file to Prewarm in the next instance. The
// snapshot holds the arguments of the hottest keys: keep it as you keep
// the application's logs, or better.
//
// With a fleet secret (Options.SharedSecret), the hot set is sealed: a
// MAC under a key derived from the secret covers its exact bytes, and
// Prewarm replays it only if the MAC verifies under SharedSecret or
// SharedPreviousSecret. Without a secret it is written unsealed, and
// Prewarm refuses it (ErrHotSetUnsealed) unless PrewarmOptions.TrustFile
// is set. A secret shorter than MinSharedSecret is an error wrapping
// ErrNoSharedSecret, and nothing is written.
func (s *Shield) SaveHotSet(w io.Writer) error {
	keys, err := hotSetKeys(&s.opts)
	if err != nil {
		return err
	}
	hs := s.hotSet(hotset.DefaultStatements, hotKeyCapacity)
	if len(keys) == 0 {
		enc := json.NewEncoder(w)
		enc.SetIndent("", " ")
		return enc.Encode(hs)
	}
	_, err = w.Write(hotset.Seal(hs, keys[0]))
	return err
}

// hotSetKeys returns the hot set keys of o's secrets, the current one
// first (it seals) and then the previous one (it only verifies): none
// without a secret, or an error wrapping ErrNoSharedSecret for a secret
// shorter than MinSharedSecret.
func hotSetKeys(o *Options) ([][]byte, error) {
	switch {
	case o.SharedSecret == "":
		return nil, nil
	case len(o.SharedSecret) < MinSharedSecret:
		return nil, fmt.Errorf("%w: SharedSecret is shorter than %d bytes: the hot set cannot be sealed", ErrNoSharedSecret, MinSharedSecret)
	case o.SharedPreviousSecret != "" && len(o.SharedPreviousSecret) < MinSharedSecret:
		return nil, fmt.Errorf("%w: SharedPreviousSecret is shorter than %d bytes", ErrNoSharedSecret, MinSharedSecret)
	}
	keys := [][]byte{hotset.SealKey(o.SharedSecret)}
	if o.SharedPreviousSecret != "" && o.SharedPreviousSecret != o.SharedSecret {
		keys = append(keys, hotset.SealKey(o.SharedPreviousSecret))
	}
	return keys, nil
}

// hotSet returns the Shield's hot set: at most n statements of at most m
// keys each.
func (s *Shield) hotSet(n, m int) *hotset.Set {
	hs := &hotset.Set{Format: hotset.Format, Version: hotset.Version, Saved: s.opts.Clock.Now().UTC(), Statements: []hotset.Statement{}}
	for _, st := range s.statements.Snapshot() {
		if len(hs.Statements) >= n {
			break
		}
		p := st.Plan()
		if st.WarmText() == "" || p == nil || p.Reason != "" || !p.Cache {
			continue
		}
		hst := hotset.Statement{Fingerprint: st.Fingerprint(), Text: st.WarmText(), Policy: p.Policy(), Calls: st.Calls()}
		for _, k := range st.HotKeys() {
			raw, warm := stats.WarmArgs(k)
			if !warm || len(hst.Keys) >= m {
				continue
			}
			hst.Keys = append(hst.Keys, hotset.KeyArgs{Calls: k.Calls, Args: hotset.EncodeArgs(raw), Raw: raw})
		}
		if len(hst.Keys) > 0 {
			hs.Statements = append(hs.Statements, hst)
		}
	}
	return hs
}
