// Package dsnparam reads the sqlflight.* parameters of a DSN and hides
// what a DSN may hold of secrets.
//
// Split takes the parameters out of a DSN in URL form
// (postgres://…?sqlflight.max_bytes=128MiB) or keyword/value form
// (host=… sqlflight.max_bytes=128MiB), reading the latter as libpq does,
// and leaves the rest of the DSN byte for byte for the wrapped driver. A
// parameter given twice, a malformed escape, or an unclosed quote is an
// error wrapping ErrBad, which names the parameter and never shows a value
// (nor, for an unclosed quote, anything after it). RedactURL and RedactIn
// hide the user information of a URL, also one that does not parse; Secret
// says which parameters' values are never shown.
package dsnparam

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// Prefix marks the DSN parameters that configure sqlflight itself. They
// are removed before the DSN reaches the wrapped driver.
const Prefix = "sqlflight."

// ErrBad is wrapped by the error of a DSN whose sqlflight.* parameters are
// unknown or malformed (the root's ErrBadDSN is this very value).
var ErrBad = errors.New("sqlflight: bad DSN parameter")

// Split removes the sqlflight.* parameters from dsn, in URL form
// (postgres://…?sqlflight.max_bytes=128MiB) or key=value form
// (host=… sqlflight.max_bytes=128MiB), and returns them apart.
func Split(dsn string) (string, map[string]string, error) {
	if !strings.Contains(dsn, Prefix) {
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
			if name, ok := strings.CutPrefix(key, Prefix); ok && err == nil {
				v, err := url.QueryUnescape(rawVal)
				if err != nil {
					return "", nil, fmt.Errorf("%w: %s%s: malformed escape in its value", ErrBad, Prefix, name)
				}
				if _, dup := params[name]; dup {
					return "", nil, Repeated(name)
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
		if name, ok := strings.CutPrefix(f.key, Prefix); ok {
			if !f.closed {
				// Never quoted: the rest may hold the fleet's secret.
				return "", nil, fmt.Errorf("%w: %s%s: a quote is not closed", ErrBad, Prefix, name)
			}
			if _, dup := params[name]; dup {
				return "", nil, Repeated(name)
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

// RedactURL hides the user information (user name and password) of a URL
// for error messages, also when the URL does not parse (a password may
// hold '/', '@', ':' or a bad escape).
func RedactURL(s string) string {
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

// RedactIn removes from text (an error's, which may quote URL s) the user
// information of s, as written and unescaped. If the password is so short
// that removing it would garble the text, the text is replaced as a whole.
func RedactIn(text, s string) string {
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

// Secret reports whether a DSN parameter's value must never be shown:
// its name speaks of a secret or a password.
func Secret(name string) bool {
	n := strings.ToLower(name)
	return strings.Contains(n, "secret") || strings.Contains(n, "password") || strings.HasSuffix(n, "dsn")
}

// Repeated is the error of a sqlflight.* parameter given twice: which
// of two values was meant is not guessed.
func Repeated(name string) error {
	return fmt.Errorf("%w: %s%s is given more than once", ErrBad, Prefix, name)
}
