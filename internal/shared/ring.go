package shared

import "github.com/sqlflight/sqlflight/internal/seal"

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
