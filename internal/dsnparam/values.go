package dsnparam

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/sqlflight/sqlflight/internal/errtext"
)

// PositiveInt parses v as an integer above zero.
func PositiveInt(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err == nil && n <= 0 {
		err = errors.New("must be positive")
	}
	return n, err
}

// Malformed is the error (wrapping ErrBad) of a parameter k whose value v
// did not parse (err). It shows the value, unless the parameter's name
// speaks of a secret (Secret): then neither v nor err, which may quote it,
// is shown.
func Malformed(k, v string, err error) error {
	if Secret(k) {
		return fmt.Errorf("%w: %s%s: malformed (the value is not shown)", ErrBad, Prefix, k)
	}
	return errtext.Wrapf("%w: %s%s=%s: %v", ErrBad, Prefix, k, v, err)
}

// Unknown is the error (wrapping ErrBad) of a parameter that configures
// nothing.
func Unknown(k string) error { return fmt.Errorf("%w: unknown parameter %s%s", ErrBad, Prefix, k) }

// Code is what the code (the Shield's Options and its tier) set that a DSN
// may not weaken.
type Code struct {
	SharedSecret  bool // Options.SharedSecret is set
	SharedEncrypt bool // Options.SharedEncrypt is true
	FeedDSN       bool // Options.FeedDSN is set
	Tier          bool // a tier was given in code (Shared)
}

// MayNotWeaken refuses the parameters that would weaken what the code set
// for the shared tier and the feed: the code's word beats the DSN's. With a
// shared secret, a DSN may not give shared_secret or shared_previous_secret
// (another secret, or none) nor insecure_trust_shared_tier=true; with
// SharedEncrypt, not shared_encrypt=false; with a FeedDSN, not feed_dsn;
// with a tier given in code, not shared (another tier). The error wraps
// ErrBad and names the key, never its value. A value that parses as no
// boolean is left to the parameter's own parsing.
func MayNotWeaken(c Code, params map[string]string) error {
	refuse := func(key, why string) error {
		return fmt.Errorf("%w: %s%s: %s", ErrBad, Prefix, key, why)
	}
	if c.SharedSecret {
		for _, k := range []string{"shared_secret", "shared_previous_secret"} {
			if _, ok := params[k]; ok {
				return refuse(k, "Options set SharedSecret; a DSN may not change it")
			}
		}
		if v, ok := params["insecure_trust_shared_tier"]; ok && !is(v, false) {
			return refuse("insecure_trust_shared_tier", "Options set SharedSecret; a DSN may not trust the tier without it")
		}
	}
	if c.SharedEncrypt {
		if v, ok := params["shared_encrypt"]; ok && !is(v, true) {
			return refuse("shared_encrypt", "Options set SharedEncrypt; a DSN may not turn it off")
		}
	}
	if c.FeedDSN {
		if _, ok := params["feed_dsn"]; ok {
			return refuse("feed_dsn", "Options set FeedDSN; a DSN may not change it")
		}
	}
	if c.Tier {
		if _, ok := params["shared"]; ok {
			return refuse("shared", "the code gave the Shield its shared tier; a DSN may not replace it")
		}
	}
	return nil
}

// is reports whether v parses as the boolean want.
func is(v string, want bool) bool {
	b, err := strconv.ParseBool(strings.TrimSpace(v))
	return err == nil && b == want
}
