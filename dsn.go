package sqlflight

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlflight/sqlflight/internal/annotation"
)

// dsnPrefix marks the DSN parameters that configure sqlflight itself. They
// are removed before the DSN reaches the wrapped driver.
const dsnPrefix = "sqlflight."

// ErrBadDSN is wrapped by the error of opening a DSN whose sqlflight.*
// parameters are unknown or malformed.
var ErrBadDSN = errors.New("sqlflight: bad DSN parameter")

// splitDSN removes the sqlflight.* parameters from dsn, in URL form
// (postgres://…?sqlflight.max_bytes=128MiB) or key=value form
// (host=… sqlflight.max_bytes=128MiB), and returns them apart.
func splitDSN(dsn string) (string, map[string]string, error) {
	if !strings.Contains(dsn, dsnPrefix) {
		return dsn, nil, nil
	}
	params := map[string]string{}
	if isURL(dsn) {
		// By hand rather than with url.Parse, which refuses URLs that the
		// parent accepts (several hosts, a '/' in the password): the rest of
		// the DSN is kept byte for byte.
		base, query, ok := strings.Cut(dsn, "?")
		if !ok {
			return dsn, params, nil
		}
		query, frag, hasFrag := strings.Cut(query, "#")
		var kept []string
		for kv := range strings.SplitSeq(query, "&") {
			rawKey, rawVal, _ := strings.Cut(kv, "=")
			key, err := url.QueryUnescape(rawKey)
			if name, ok := strings.CutPrefix(key, dsnPrefix); ok && err == nil {
				v, err := url.QueryUnescape(rawVal)
				if err != nil {
					return "", nil, fmt.Errorf("%w: %s%s: malformed escape in its value", ErrBadDSN, dsnPrefix, name)
				}
				if _, dup := params[name]; dup {
					return "", nil, repeatedParam(name)
				}
				params[name] = v
				continue
			}
			if kv != "" {
				kept = append(kept, kv)
			}
		}
		out := base
		if len(kept) > 0 {
			out += "?" + strings.Join(kept, "&")
		}
		if hasFrag {
			out += "#" + frag
		}
		return out, params, nil
	}
	var kept []string
	for _, f := range keywordValues(dsn) {
		if name, ok := strings.CutPrefix(f.key, dsnPrefix); ok {
			if !f.closed {
				// Never quoted: the rest may hold the fleet's secret.
				return "", nil, fmt.Errorf("%w: %s%s: a quote is not closed", ErrBadDSN, dsnPrefix, name)
			}
			if _, dup := params[name]; dup {
				return "", nil, repeatedParam(name)
			}
			params[name] = f.val
			continue
		}
		kept = append(kept, f.raw)
	}
	return strings.Join(kept, " "), params, nil
}

// kvField is one setting of a keyword/value DSN: as written, its keyword
// and value, and whether its quote, if any, was closed.
type kvField struct {
	raw, key, val string
	closed        bool
}

// keywordValues splits a keyword/value DSN as libpq (and pgx) read it:
// spaces around '=', a value in single quotes (which may hold spaces) or
// bare, a backslash escaping the next byte. A word without '=' is a field
// of its own, without a value.
func keywordValues(dsn string) []kvField {
	isSpace := func(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' }
	skip := func(i int) int {
		for i < len(dsn) && isSpace(dsn[i]) {
			i++
		}
		return i
	}
	var fields []kvField
	for i := skip(0); i < len(dsn); i = skip(i) {
		start := i
		for i < len(dsn) && dsn[i] != '=' && !isSpace(dsn[i]) {
			i++
		}
		f := kvField{key: dsn[start:i], closed: true}
		if j := skip(i); j < len(dsn) && dsn[j] == '=' {
			i = skip(j + 1)
			var val []byte
			if i < len(dsn) && dsn[i] == '\'' {
				f.closed = false
				for i++; i < len(dsn); {
					c := dsn[i]
					i++
					if c == '\'' {
						f.closed = true
						break
					}
					if c == '\\' && i < len(dsn) {
						c = dsn[i]
						i++
					}
					val = append(val, c)
				}
			} else {
				for i < len(dsn) && !isSpace(dsn[i]) {
					c := dsn[i]
					i++
					if c == '\\' && i < len(dsn) {
						c = dsn[i]
						i++
					}
					val = append(val, c)
				}
			}
			f.val = string(val)
		}
		f.raw = dsn[start:i]
		fields = append(fields, f)
	}
	return fields
}

// isURL reports whether dsn is in URL form (scheme://…).
func isURL(dsn string) bool {
	i := strings.Index(dsn, "://")
	if i <= 0 {
		return false
	}
	for _, r := range dsn[:i] {
		if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '+' || r == '-' || r == '.') {
			return false
		}
	}
	return true
}

// applyDSN sets the Options fields named by DSN parameters.
func applyDSN(o *Options, params map[string]string) error {
	for k, v := range params {
		var err error
		switch k {
		case "max_bytes":
			o.MaxBytes, err = annotation.Bytes(v)
		case "neg_max_bytes":
			o.NegMaxBytes, err = annotation.Bytes(v)
		case "max_result_bytes":
			o.MaxResultBytes, err = annotation.Bytes(v)
		case "max_result_rows":
			o.MaxResultRows, err = positiveInt(v)
		case "max_conns":
			o.MaxConns, err = positiveInt(v)
		case "max_inflight":
			o.MaxInflight, err = positiveInt(v)
		case "max_refreshes":
			o.MaxRefreshes, err = positiveInt(v)
		case "breaker_failures":
			o.BreakerFailures, err = positiveInt(v)
		case "breaker_probes":
			o.BreakerProbes, err = positiveInt(v)
		case "origin_timeout":
			o.OriginTimeout, err = annotation.Duration(v)
		case "queue_timeout":
			o.QueueTimeout, err = annotation.Duration(v)
		case "breaker_timeout":
			o.BreakerTimeout, err = annotation.Duration(v)
		case "max_stale":
			o.MaxStale, err = time.ParseDuration(v)
		case "writes_when_open":
			o.WritesWhenOpen, err = strconv.ParseBool(v)
		case "key_prefix":
			o.KeyPrefix = v
		case "redis_timeout":
			o.RedisTimeout, err = annotation.Duration(v)
		case "lease_ttl":
			o.LeaseTTL, err = annotation.Duration(v)
		case "shared_secret":
			o.SharedSecret = v // never in an error: nothing here can fail
		case "shared_previous_secret":
			o.SharedPreviousSecret = v
		case "shared_encrypt":
			o.SharedEncrypt, err = strconv.ParseBool(v)
		case "insecure_trust_shared_tier":
			o.InsecureTrustSharedTier, err = strconv.ParseBool(v)
		case "feed":
			o.Feed, err = parseFeedMode(v)
		case "feed_publication":
			o.FeedPublication = v
			if !validPublication(v) {
				err = errors.New("1 to 63 letters, digits, '_' or '$'")
			}
		case "feed_dsn":
			if _, perr := pgx.ParseConfig(v); perr != nil {
				return fmt.Errorf("%w: %sfeed_dsn does not parse as a PostgreSQL DSN (the value is not shown)", ErrBadDSN, dsnPrefix)
			}
			o.FeedDSN = v
		case "feed_lease_ttl":
			o.FeedLeaseTTL, err = annotation.Duration(v)
		case "strict":
			o.Strict, err = strconv.ParseBool(v)
		case "default":
			// A whole default policy in annotation syntax, e.g. "soft=30s hard=5m".
			var a annotation.Annotation
			if a, err = annotation.Parse(strings.ReplaceAll(v, ",", " ")); err == nil {
				o.Default = Policy(a.Merge(annotation.Fields(o.Default)))
			}
		default:
			return fmt.Errorf("%w: unknown parameter %s%s", ErrBadDSN, dsnPrefix, k)
		}
		if err != nil {
			return badParam(k, v, err)
		}
	}
	return nil
}

func positiveInt(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err == nil && n <= 0 {
		err = errors.New("must be positive")
	}
	return n, err
}

// redactURL hides the user information (user name and password) of a URL
// for error messages, also when the URL does not parse (a password may
// hold '/', '@', ':' or a bad escape).
func redactURL(s string) string {
	if u, err := url.Parse(s); err == nil && u.Opaque == "" {
		if u.User == nil {
			return s
		}
		if _, ok := u.User.Password(); ok {
			return u.Redacted()
		}
		return s
	}
	start, at := userinfo(s)
	if at < 0 {
		return s[:start] + "xxxxx" // no '@': whatever follows may be a password
	}
	return s[:start] + "xxxxx" + s[at:]
}

// userinfo finds by hand where the user information of URL s begins (after
// "scheme://", or the scheme's ':') and ends (the last '@', or -1).
func userinfo(s string) (start, at int) {
	if i := strings.Index(s, "://"); i >= 0 {
		start = i + 3
	} else if i := strings.IndexByte(s, ':'); i >= 0 {
		start = i + 1
	}
	at = strings.LastIndexByte(s, '@')
	if at < start {
		at = -1
	}
	return start, at
}

// redactIn removes from text (an error's, which may quote URL s) the user
// information of s, as written and unescaped. If the password is so short
// that removing it would garble the text, the text is replaced as a whole.
func redactIn(text, s string) string {
	if u, err := url.Parse(s); err == nil && u.Opaque == "" && u.User == nil {
		return text // nothing secret in s
	}
	start, at := userinfo(s)
	if at < 0 {
		if rest := s[start:]; rest != "" && strings.Contains(text, rest) {
			return "(error text not shown: it may hold the password)"
		}
		return text
	}
	info := s[start:at]
	secrets := []string{info}
	if _, pass, ok := strings.Cut(info, ":"); ok {
		secrets = append(secrets, pass)
	}
	for _, x := range secrets[:len(secrets):len(secrets)] {
		if un, err := url.PathUnescape(x); err == nil && un != x {
			secrets = append(secrets, un)
		}
	}
	for _, x := range secrets {
		if x == "" || !strings.Contains(text, x) {
			continue
		}
		if len(x) < 4 {
			return "(error text not shown: it may hold the password)"
		}
		text = strings.ReplaceAll(text, x, "xxxxx")
	}
	return text
}

// badParam is the error of a malformed DSN parameter k=v. It shows the
// value, unless the parameter's name speaks of a secret: then neither the
// value nor err (which may quote it) is shown.
func badParam(k, v string, err error) error {
	if secretParam(k) {
		return fmt.Errorf("%w: %s%s: malformed (the value is not shown)", ErrBadDSN, dsnPrefix, k)
	}
	return wrapf("%w: %s%s=%s: %v", ErrBadDSN, dsnPrefix, k, v, err)
}

// secretParam reports whether a DSN parameter's value must never be shown:
// its name speaks of a secret or a password.
func secretParam(name string) bool {
	n := strings.ToLower(name)
	return strings.Contains(n, "secret") || strings.Contains(n, "password") || strings.HasSuffix(n, "dsn")
}
