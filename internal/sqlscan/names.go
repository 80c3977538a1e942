package sqlscan

import "strings"

// Token helpers and identifier resolution shared by the statement parsers and the walker.

// kwAt returns the keyword at j if it is an unquoted word inside [.., hi) and not the
// attribute of a qualified name (t.select is a column, not SELECT).
func (a *analyzer) kwAt(j, hi int) kwID {
	if j < 0 || j >= hi || a.toks[j].kind != tIdent {
		return kwNone
	}
	if j > 0 && a.toks[j-1].kind == tDot {
		return kwNone
	}
	return a.toks[j].kw
}

func (a *analyzer) kindAt(j, hi int) tokKind {
	if j < 0 || j >= hi {
		return 0
	}
	return a.toks[j].kind
}

// isRelName reports whether token j can be (the first part of) a relation name.
func (a *analyzer) isRelName(j, hi int) bool {
	if j >= hi {
		return false
	}
	t := &a.toks[j]
	return t.kind == tQIdent || (t.kind == tIdent && (t.kwf&kfNotRel == 0 || (j > 0 && a.toks[j-1].kind == tDot)))
}

// chainEnd returns the index of the last identifier of the qualified name starting at j
// (a, a.b, a.b.c …).
func (a *analyzer) chainEnd(j, hi int) int {
	for j+2 < hi && a.toks[j+1].kind == tDot && isName(a.toks[j+2].kind) {
		j += 2
	}
	return j
}

// after returns the index following the group opened at j (j+1 if j does not open one).
func (a *analyzer) after(j int) int {
	if j < len(a.toks) && (a.toks[j].kind == tLParen || a.toks[j].kind == tLBrack) {
		return a.match[j] + 1
	}
	return j + 1
}

func isName(k tokKind) bool { return k == tIdent || k == tQIdent }

// name returns the identifier at j as Postgres resolves it: unquoted names lower-cased
// (ASCII only), quoted names exact, U& escapes decoded; truncated to 63 bytes.
func (a *analyzer) name(j int) string {
	t := &a.toks[j]
	s := a.src[t.pos:t.end]
	switch t.kind {
	case tIdent:
		return clip(lowerASCII(s))
	case tQIdent:
		if t.flags&flagUnicode != 0 {
			s = s[2:] // U&
			if k := strings.LastIndexByte(s, '"'); k > 0 {
				s = s[:k+1] // drop the UESCAPE clause
			}
			return clip(decodeUnicode(unquote(s, '"'), t.esc))
		}
		return clip(unquote(s, '"'))
	}
	return ""
}

// unquote strips the quote q around s and undoubles inner quotes. An unterminated s (no
// closing quote) keeps its tail.
func unquote(s string, q byte) string {
	if len(s) >= 2 && s[len(s)-1] == q {
		s = s[1 : len(s)-1]
	} else if len(s) >= 1 {
		s = s[1:]
	}
	dq := string([]byte{q, q})
	if strings.Contains(s, dq) {
		s = strings.ReplaceAll(s, dq, dq[:1])
	}
	return s
}

func lowerASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; 'A' <= c && c <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if 'A' <= b[j] && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}

// clip truncates a name to 63 bytes without splitting a UTF-8 sequence, like Postgres.
func clip(s string) string {
	if len(s) <= nameLimit {
		return s
	}
	n := nameLimit
	for n > 0 && s[n]&0xC0 == 0x80 { // s[n] continues a sequence: back off to its start
		n--
	}
	return s[:n]
}

// decodeUnicode resolves the escapes of a U&"…" identifier (\XXXX, \+XXXXXX, \\ with the
// default escape, or the UESCAPE character). Invalid escapes are kept as written (Postgres
// rejects the identifier, so the text never runs).
func decodeUnicode(s string, esc byte) string {
	if esc == 0 {
		esc = '\\'
	}
	if strings.IndexByte(s, esc) < 0 {
		return s
	}
	var b strings.Builder
	hex := func(h string) (rune, bool) {
		var r rune
		for i := 0; i < len(h); i++ {
			c := h[i]
			var d byte
			switch {
			case isDigit(c):
				d = c - '0'
			case 'a' <= c|0x20 && c|0x20 <= 'f':
				d = (c | 0x20) - 'a' + 10
			default:
				return 0, false
			}
			r = r<<4 | rune(d)
		}
		return r, true
	}
	var high rune
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != esc {
			b.WriteByte(c)
			continue
		}
		var r rune
		var ok bool
		switch {
		case i+1 < len(s) && s[i+1] == esc:
			b.WriteByte(esc)
			i++
			continue
		case i+7 < len(s) && s[i+1] == '+':
			r, ok = hex(s[i+2 : i+8])
			if ok {
				i += 7
			}
		case i+4 < len(s):
			r, ok = hex(s[i+1 : i+5])
			if ok {
				i += 4
			}
		}
		if !ok {
			b.WriteByte(c)
			continue
		}
		switch {
		case r >= 0xD800 && r <= 0xDBFF:
			high = r
			continue
		case r >= 0xDC00 && r <= 0xDFFF && high != 0:
			r = (high-0xD800)<<10 + (r - 0xDC00) + 0x10000
		}
		high = 0
		b.WriteRune(r)
	}
	return b.String()
}

// upperWord returns the word at j in upper case, for reasons ("?" if j is not an unquoted
// word: a reason never quotes literals, which normalization may reformat).
func (a *analyzer) upperWord(j int) string {
	t := &a.toks[j]
	if t.kind != tIdent {
		return "?"
	}
	w := a.src[t.pos:t.end]
	if len(w) > 32 {
		w = w[:32]
	}
	return strings.ToUpper(w)
}
