package shared

import (
	"fmt"

	"github.com/sqlflight/sqlflight/internal/seal"
)

// NewRing returns the keys of a fleet's secret (seal.Derive) and, if
// previous is set and not the same, of its previous one, which values and
// messages are still checked with while a rotation goes on; values are
// sealed with AES-GCM when encrypt. It checks no length: the caller
// refuses secrets too short to be one.
func NewRing(secret, previous string, encrypt bool) *seal.Ring {
	ring := &seal.Ring{Current: seal.Derive([]byte(secret)), Encrypt: encrypt}
	if previous != "" && previous != secret {
		ring.Previous = seal.Derive([]byte(previous))
	}
	return ring
}

// InsecureRing returns the keys of a tier trusted without a secret: keys
// everybody knows, which detect corruption, not forgery. It is not meant
// to authenticate anything, and its values are not encrypted.
func InsecureRing() *seal.Ring { return &seal.Ring{Current: insecureKeys} }

// insecureKeys seal the values of a tier trusted without a secret.
var insecureKeys = seal.Derive([]byte("sqlflight: no secret, the tier is trusted"))

// Secrets are a fleet's secrets as a Shield's Options hold them.
type Secrets struct {
	Secret, Previous string
	Encrypt          bool
	// Insecure trusts the tier without a secret
	// (Options.InsecureTrustSharedTier).
	Insecure bool
	// Min is the length of the shortest secret accepted
	// (MinSharedSecret); None is wrapped by every refusal
	// (ErrNoSharedSecret).
	Min  int
	None error
}

// Ring returns the keys of s's secrets (NewRing), or an error wrapping
// s.None (it never holds a secret). Without a secret and with s.Insecure,
// values are sealed under a key everybody knows (InsecureRing: it detects
// corruption, not forgery) and messages are not checked (trustMessages).
func (s Secrets) Ring() (ring *seal.Ring, trustMessages bool, err error) {
	switch {
	case s.Secret == "" && s.Insecure:
		if s.Encrypt {
			return nil, false, fmt.Errorf("%w: SharedEncrypt needs one", s.None)
		}
		return InsecureRing(), true, nil
	case s.Secret == "":
		return nil, false, fmt.Errorf("%w; set InsecureTrustSharedTier (sqlflight.insecure_trust_shared_tier=true) only if nobody else can write to the tier", s.None)
	case len(s.Secret) < s.Min:
		return nil, false, fmt.Errorf("%w: SharedSecret is shorter than %d bytes", s.None, s.Min)
	case s.Previous != "" && len(s.Previous) < s.Min:
		return nil, false, fmt.Errorf("%w: SharedPreviousSecret is shorter than %d bytes", s.None, s.Min)
	}
	return NewRing(s.Secret, s.Previous, s.Encrypt), false, nil
}
