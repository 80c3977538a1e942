package sqlscan

import (
	"strings"
	"unicode/utf8"
)

// Clock-relative date/time input. PostgreSQL's date/time input functions read the special words
// now, today, tomorrow and yesterday relative to the transaction's clock: 'now'::timestamptz,
// date 'today', timestamp 'tomorrow', WHERE d = 'yesterday' (an unknown-typed literal coerced
// to the column's type) all evaluate to different values on different days. The words are
// found wherever the input parser splits fields: 'today 10:00', ' now ', 'now()', 'today_',
// 'now UTC'::time, and inside composite values: '{now,today}'::date[],
// '[yesterday,tomorrow)'::daterange, a JSON document read by jsonb_populate_record. The
// scanner cannot see a literal's type, so it counts every string constant holding such a word.

// TimeWord reports whether s, read by PostgreSQL as a date or time (directly, or as an element of
// an array, range, composite or JSON value), may depend on the clock: whether it contains one of
// the words now, today, tomorrow or yesterday (any letter case) as a whole run of ASCII letters.
// The server's date/time parser splits its input into fields at every character that is not a
// letter, so "today 10:00", " NOW ", "now()" and "{today}" count and "nowhere" or "knowledge"
// do not. The test errs on the side of "yes": a text column compared with 'right now' counts too.
//
// The driver uses it for bound argument values: a statement whose arguments hold such a word is
// time-dependent, like one whose text does (Result.TimeLiteral).
func TimeWord(s string) bool {
	_, ok := timeWordIn(s)
	return ok
}

// timeWordIn returns the first clock-relative word of s, lower-cased.
func timeWordIn(s string) (string, bool) {
	for i := 0; i < len(s); {
		if !isLetter(s[i]) {
			i++
			continue
		}
		j := i + 1
		for j < len(s) && isLetter(s[j]) {
			j++
		}
		if w := timeWordRun(s[i:j]); w != "" {
			return w, true
		}
		i = j
	}
	return "", false
}

// timeWordRun returns the lower-case time word that the letter run w spells, or "".
func timeWordRun(w string) string {
	var t string
	switch len(w) {
	case 3:
		t = "now"
	case 5:
		t = "today"
	case 8:
		t = "tomorrow"
	case 9:
		t = "yesterday"
	default:
		return ""
	}
	if equalFoldASCII(t, w) {
		return t
	}
	return ""
}

// timeLiteral returns the clock-relative word held by the string constant at token j (a '…',
// E'…', N'…', U&'…' string with its continuations, or a dollar-quoted string), or "".
// Bit strings (B'…', X'…') hold digits only.
func (a *analyzer) timeLiteral(j int) string {
	t := &a.toks[j]
	s := a.src[t.pos:t.end]
	if t.kind == tDollar {
		k := strings.IndexByte(s[1:], '$') + 2 // past the opening tag
		body := s[min(k, len(s)):]
		if end := len(body) - k; end >= 0 && strings.HasSuffix(body, s[:k]) {
			body = body[:end]
		}
		w, _ := timeWordIn(body)
		return w
	}
	esc := a.lx.nonStd
	q := 0 // index of the opening quote in s
	switch s[0] | 0x20 {
	case '\'':
	case 'e':
		esc, q = true, 1
	case 'n':
		q = 1
	case 'u':
		q = 2
		esc = false
	default: // b, x
		return ""
	}
	if t.flags&flagUnicode == 0 && !esc && strings.IndexByte(s, '\n') < 0 && strings.IndexByte(s, '\r') < 0 {
		// One piece without escapes: the letter runs of the raw text are those of the value
		// (a doubled quote is no letter).
		w, _ := timeWordIn(s[q:])
		return w
	}
	v := stringValue(s, q, esc)
	if t.flags&flagUnicode != 0 {
		v = decodeUnicode(v, t.esc)
	}
	w, _ := timeWordIn(v)
	return w
}

// stringValue returns the value of the quoted string whose opening quote is s[q]: doubled quotes
// undone, continuation pieces joined, backslash escapes decoded when esc is set (E'…', or every
// string when standard_conforming_strings is off). Whatever follows the last piece (the
// UESCAPE clause of a U& string) is ignored.
func stringValue(s string, q int, esc bool) string {
	b := make([]byte, 0, len(s))
	p := q + 1
	for p < len(s) {
		c := s[p]
		switch {
		case c == '\'' && p+1 < len(s) && s[p+1] == '\'':
			b = append(b, '\'')
			p += 2
		case c == '\'':
			// End of a piece: a continuation follows after whitespace and "--" comments only.
			p++
			for p < len(s) && s[p] != '\'' {
				if s[p] == '-' && p+1 < len(s) && s[p+1] == '-' {
					for p < len(s) && s[p] != '\n' && s[p] != '\r' {
						p++
					}
					continue
				}
				if !isSpace(s[p]) {
					return string(b)
				}
				p++
			}
			p++ // the next piece's opening quote
		case esc && c == '\\' && p+1 < len(s):
			var r rune
			r, p = backslashEscape(s, p+1)
			if r < utf8.RuneSelf {
				b = append(b, byte(r))
			} else {
				b = utf8.AppendRune(b, r)
			}
		default:
			b = append(b, c)
			p++
		}
	}
	return string(b)
}

// backslashEscape decodes the escape whose first character after the backslash is s[p], as
// Postgres does in E'…' strings: \b \f \n \r \t, \ooo octal, \xhh hex, \uXXXX, \UXXXXXXXX; any
// other character stands for itself. It returns the value and the index after the escape.
func backslashEscape(s string, p int) (rune, int) {
	digits := func(p, max int, ok func(byte) bool, base rune) (rune, int) {
		var v rune
		n := 0
		for n < max && p+n < len(s) && ok(s[p+n]) {
			c := s[p+n]
			d := rune(c - '0')
			if !isDigit(c) {
				d = rune(c|0x20-'a') + 10
			}
			v = v*base + d
			n++
		}
		return v, p + n
	}
	isOctal := func(c byte) bool { return '0' <= c && c <= '7' }
	switch c := s[p]; c {
	case 'b':
		return '\b', p + 1
	case 'f':
		return '\f', p + 1
	case 'n':
		return '\n', p + 1
	case 'r':
		return '\r', p + 1
	case 't':
		return '\t', p + 1
	case 'x':
		if p+1 < len(s) && isHexDigit(s[p+1]) {
			v, e := digits(p+1, 2, isHexDigit, 16)
			return v & 0xff, e
		}
	case 'u', 'U':
		n := 4
		if c == 'U' {
			n = 8
		}
		if v, e := digits(p+1, n, isHexDigit, 16); e == p+1+n {
			if !utf8.ValidRune(v) {
				v = utf8.RuneError
			}
			return v, e
		}
	default:
		if isOctal(c) {
			v, e := digits(p, 3, isOctal, 8)
			return v & 0xff, e
		}
	}
	return rune(s[p]), p + 1
}
