package sqlflight

import (
	"encoding/json"
	"io"

	"github.com/sqlflight/sqlflight/internal/hotset"
)

// The hot set: the hottest keys of the statements a Shield caches, saved
// so that a new instance can warm its cache before it takes traffic
// (prewarm.go). Its file format, the seal, the typed arguments and its
// building from the statement statistics are internal/hotset's.

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
	keys, err := hotset.SealKeys(s.opts.SharedSecret, s.opts.SharedPreviousSecret, MinSharedSecret, ErrNoSharedSecret)
	if err != nil {
		return err
	}
	hs := hotset.Build(&s.statements, s.opts.Clock.Now(), hotset.DefaultStatements, hotKeyCapacity)
	if len(keys) == 0 {
		enc := json.NewEncoder(w)
		enc.SetIndent("", " ")
		return enc.Encode(hs)
	}
	_, err = w.Write(hotset.Seal(hs, keys[0]))
	return err
}
