// Package redact hides values in what an operator's page shows: the
// arguments of hot keys and the literals of statement texts become keyed
// hashes, so that the same value shows the same hash within one process
// and cannot be guessed offline by hashing candidates.
//
// MaskLiterals follows PostgreSQL's lexical rules, and where a text may be
// read two ways (standard_conforming_strings off, unterminated tokens) it
// hides the more. Keywords, identifiers, quoted identifiers, operators and
// parameters stay as they are.
package redact

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"io"
	"strings"
)

// Domains of the page's hashes, so that a value never shows as the hash
// of a value of another kind.
const (
	DomainArg         = 'a' // an argument, as printArgs prints it
	DomainLiteral     = 'l' // a literal of a text, as written
	DomainKey         = 'k' // a hot key's hash
	DomainFingerprint = 'f' // a statement's fingerprint
)

// Hasher hashes values: "#" and the first 12 hex digits (48 bits) of
// HMAC-SHA256 under a key, in a domain. One per request: it is not safe
// for concurrent use.
type Hasher struct {
	mac hash.Hash
	buf []byte
}

// NewHasher returns a Hasher under key (keep it secret: whoever has it
// can test guesses against the hashes).
func NewHasher(key []byte) *Hasher {
	return &Hasher{mac: hmac.New(sha256.New, key)}
}

// Sum returns the hash of v in domain d.
func (vh *Hasher) Sum(d byte, v string) string {
	vh.mac.Reset()
	vh.mac.Write([]byte{d})
	_, _ = io.WriteString(vh.mac, v)
	vh.buf = vh.mac.Sum(vh.buf[:0])
	return "#" + hex.EncodeToString(vh.buf[:6])
}

// Text returns sql with its literals hashed (MaskLiterals) and, when it
// held any, the hash of its fingerprint fp in place of fp (a fingerprint
// is an unkeyed hash of the text: a literal could be guessed from it).
func (vh *Hasher) Text(sql, fp string) (string, string) {
	out, masked := MaskLiterals(sql, func(lit string) string { return vh.Sum(DomainLiteral, lit) })
	if masked {
		fp = vh.Sum(DomainFingerprint, fp)
	}
	return out, fp
}

// MaskLiterals returns sql (PostgreSQL's lexical rules) with each literal
// replaced by mask of its text: a string constant ('…', E'…', U&'…',
// B'…', X'…', $tag$…$tag$) becomes '<mask>', a number <mask>, a comment
// /*<mask>*/ or --<mask>; it reports whether it replaced any. Keywords,
// identifiers, quoted identifiers, operators and parameters ($1, ?) stay.
//
// Where the text may be read two ways it masks the more: a string constant
// that standard_conforming_strings = off would end elsewhere (a \'
// inside) is masked with everything after it, and so is anything left
// unterminated.
func MaskLiterals(sql string, mask func(lit string) string) (string, bool) {
	var b strings.Builder
	b.Grow(len(sql))
	masked := false
	escape := false // the token before is the identifier E: an escape string follows
	for i := 0; i < len(sql); {
		c := sql[i]
		var next byte
		if i+1 < len(sql) {
			next = sql[i+1]
		}
		wasEscape := escape
		escape = false
		switch {
		case c == '\'':
			end := stringEnd(sql, i, wasEscape)
			b.WriteString("'" + mask(sql[i:end]) + "'")
			masked, i = true, end
		case c == '"':
			end := quotedEnd(sql, i+1, '"')
			if end < 0 { // unterminated: what follows may be anything
				b.WriteString(`"` + mask(sql[i:]) + `"`)
				return b.String(), true
			}
			b.WriteString(sql[i:end])
			i = end
		case c == '$' && isDigit(next):
			j := i + 1
			for j < len(sql) && isDigit(sql[j]) {
				j++
			}
			b.WriteString(sql[i:j])
			i = j
		case c == '$':
			tag, ok := dollarTag(sql, i)
			if !ok {
				b.WriteByte(c)
				i++
				continue
			}
			end := len(sql)
			if k := strings.Index(sql[i+len(tag):], tag); k >= 0 {
				end = i + len(tag) + k + len(tag)
			}
			b.WriteString("'" + mask(sql[i:end]) + "'")
			masked, i = true, end
		case c == '-' && next == '-':
			end := len(sql)
			if k := strings.IndexByte(sql[i:], '\n'); k >= 0 {
				end = i + k
			}
			b.WriteString("--" + mask(sql[i:end]))
			masked, i = true, end
		case c == '/' && next == '*':
			end := blockCommentEnd(sql, i)
			b.WriteString("/*" + mask(sql[i:end]) + "*/")
			masked, i = true, end
		case isIdentStart(c):
			j := i + 1
			for j < len(sql) && (isIdentStart(sql[j]) || isDigit(sql[j]) || sql[j] == '$') {
				j++
			}
			escape = j == i+1 && (c == 'E' || c == 'e')
			b.WriteString(sql[i:j])
			i = j
		case isDigit(c) || c == '.' && isDigit(next):
			j := i + 1
			for j < len(sql) {
				d := sql[j]
				if isDigit(d) || isIdentStart(d) || d == '.' ||
					(d == '+' || d == '-') && (sql[j-1] == 'e' || sql[j-1] == 'E') {
					j++
					continue
				}
				break
			}
			b.WriteString(mask(sql[i:j]))
			masked, i = true, j
		default:
			b.WriteByte(c)
			i++
		}
	}
	return b.String(), masked
}

// stringEnd returns where the string constant whose quote is at sql[i]
// ends (after its closing quote), or len(sql). An escape string (E'…')
// ends by the rules of backslash escapes; any other ends by the standard
// rules when a backslash-escaping server (standard_conforming_strings =
// off) would end it at the same place, and at len(sql) otherwise.
func stringEnd(sql string, i int, escape bool) int {
	esc := escapedEnd(sql, i+1)
	if escape {
		return esc
	}
	std := quotedEnd(sql, i+1, '\'')
	if std < 0 || std != esc {
		return len(sql)
	}
	return std
}

// quotedEnd returns the index after the quote q that closes a quoted text
// starting at sql[from] (a doubled quote stands for one), or -1.
func quotedEnd(sql string, from int, q byte) int {
	for j := from; j < len(sql); j++ {
		if sql[j] != q {
			continue
		}
		if j+1 < len(sql) && sql[j+1] == q {
			j++
			continue
		}
		return j + 1
	}
	return -1
}

// escapedEnd is quotedEnd for a string constant with backslash escapes,
// or len(sql).
func escapedEnd(sql string, from int) int {
	for j := from; j < len(sql); j++ {
		switch sql[j] {
		case '\\':
			j++
		case '\'':
			if j+1 < len(sql) && sql[j+1] == '\'' {
				j++
				continue
			}
			return j + 1
		}
	}
	return len(sql)
}

// dollarTag returns the tag ($$ or $name$) of a dollar-quoted string
// constant starting at sql[i], if one does.
func dollarTag(sql string, i int) (string, bool) {
	for j := i + 1; j < len(sql); j++ {
		c := sql[j]
		switch {
		case c == '$':
			return sql[i : j+1], true
		case isIdentStart(c), isDigit(c) && j > i+1:
		default:
			return "", false
		}
	}
	return "", false
}

// blockCommentEnd returns the index after the block comment (nested, as
// PostgreSQL's) starting at sql[i], or len(sql).
func blockCommentEnd(sql string, i int) int {
	depth := 0
	for j := i; j+1 < len(sql); j++ {
		switch {
		case sql[j] == '/' && sql[j+1] == '*':
			depth++
			j++
		case sql[j] == '*' && sql[j+1] == '/':
			depth--
			j++
			if depth == 0 {
				return j + 1
			}
		}
	}
	return len(sql)
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// isIdentStart reports whether c may begin an identifier: a letter, _ or a
// byte of a multibyte UTF-8 character.
func isIdentStart(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '_' || c >= 0x80
}
