package sqlflight

import (
	"fmt"
	"strconv"
	"strings"
)

// dsnMayNotWeaken refuses the DSN parameters that would weaken what the
// code's Options (code) and shared tier (codeTier) set for the shared
// tier: the code's word beats the DSN's. With Options.SharedSecret set, a
// DSN may not give sqlflight.shared_secret or sqlflight.shared_previous_secret
// (another secret, or none) nor sqlflight.insecure_trust_shared_tier=true;
// with Options.SharedEncrypt, not sqlflight.shared_encrypt=false; with a
// tier given by Shared, not sqlflight.shared (another tier). The error
// wraps ErrBadDSN and names the key, never its value.
func dsnMayNotWeaken(code *Options, codeTier bool, params map[string]string) error {
	refuse := func(key, why string) error {
		return fmt.Errorf("%w: %s%s: %s", ErrBadDSN, dsnPrefix, key, why)
	}
	if code.SharedSecret != "" {
		for _, k := range []string{"shared_secret", "shared_previous_secret"} {
			if _, ok := params[k]; ok {
				return refuse(k, "Options set SharedSecret; a DSN may not change it")
			}
		}
		if v, ok := params["insecure_trust_shared_tier"]; ok && !isFalse(v) {
			return refuse("insecure_trust_shared_tier", "Options set SharedSecret; a DSN may not trust the tier without it")
		}
	}
	if code.SharedEncrypt {
		if v, ok := params["shared_encrypt"]; ok && !isTrue(v) {
			return refuse("shared_encrypt", "Options set SharedEncrypt; a DSN may not turn it off")
		}
	}
	if code.FeedDSN != "" {
		if _, ok := params["feed_dsn"]; ok {
			return refuse("feed_dsn", "Options set FeedDSN; a DSN may not change it")
		}
	}
	if codeTier {
		if _, ok := params["shared"]; ok {
			return refuse("shared", "the code gave the Shield its shared tier; a DSN may not replace it")
		}
	}
	return nil
}

// isTrue and isFalse report whether v parses as that boolean; a value that
// parses as neither is left to applyDSN's error.
func isTrue(v string) bool { b, err := strconv.ParseBool(strings.TrimSpace(v)); return err == nil && b }
func isFalse(v string) bool {
	b, err := strconv.ParseBool(strings.TrimSpace(v))
	return err == nil && !b
}
