package sqlscan

import (
	"math"
	"strings"
)

// errNUL is the lexing error of a text containing a NUL byte.
const errNUL = "NUL byte in SQL text"

// tokKind is the lexical class of a token. Comments and whitespace are not tokens.
type tokKind uint8

const (
	tIdent  tokKind = iota + 1 // unquoted identifier or keyword
	tQIdent                    // "quoted" or U&"quoted" identifier
	tString                    // '…', E'…', B'…', X'…', N'…', U&'…' (with continuations)
	tDollar                    // $tag$…$tag$
	tNumber                    // numeric constant
	tParam                     // $n
	tOp                        // operator, or any other single character
	tLParen                    // (
	tRParen                    // )
	tLBrack                    // [
	tRBrack                    // ]
	tComma                     // ,
	tSemi                      // ;
	tDot                       // .
	tCast                      // ::
	tColon                     // :
)

// Token flags.
const (
	flagUnicode uint8 = 1 << iota // U&"…" identifier or U&'…' string
	flagPlain                     // a '…' string without prefix or continuation
)

// token is one lexical token: a span of the source plus what the classifier needs.
type token struct {
	pos, end int   // byte span in the source (end exclusive), UESCAPE clause included
	kw       kwID  // keyword id of an unquoted identifier (kwNone otherwise)
	kwf      uint8 // keyword flags (kfStop, kfNotCall)
	kind     tokKind
	flags    uint8
	esc      byte // escape character of a U& token (0: the default backslash)
}

// lexer turns SQL text into tokens and, in the same pass, builds the normalized text and
// collects annotations, the highest parameter number and the first lexing error.
// It runs in linear time and never panics on any input.
type lexer struct {
	src     string
	toks    []token
	norm    []byte // normalized text being built
	sep     bool   // whitespace or a comment was seen since the last token
	keep    int    // len(norm) after the last token that is not ';' (trailing ';' are cut)
	annos   []string
	hasAnno bool
	params  int
	err     string
	unicode bool  // a U& token was seen: merge UESCAPE clauses afterwards
	nonStd  bool  // standard_conforming_strings=off: '…' and N'…' take backslash escapes like E'…'
	lists   lists // long lists of constants (lists.go)
	// keepLists keeps every element of long constant lists (Filter needs
	// each value of an IN list).
	keepLists bool
	// shaping finds the constants of the text's shape (shape.go), for a
	// text up to shapeMaxSQL.
	shaping bool
	shp     shaper
}

func (lx *lexer) reset(src string) {
	lx.src = src
	lx.toks = lx.toks[:0]
	lx.norm = lx.norm[:0]
	lx.sep = false
	lx.keep = 0
	lx.annos = lx.annos[:0]
	lx.hasAnno = false
	lx.params = 0
	lx.err = ""
	lx.unicode = false
	lx.lists.reset()
	lx.shp.reset(lx.shaping && len(src) <= shapeMaxSQL)
}

// run lexes src completely.
func (lx *lexer) run(src string) {
	lx.reset(src)
	if cap(lx.norm) < len(src) {
		// The normalized text is never longer than the source: one allocation, not a
		// growing slice's many (which cost five times a huge text).
		lx.norm = make([]byte, 0, len(src))
	}
	if strings.IndexByte(src, 0) >= 0 {
		// The wire protocol ends the query at a NUL: the server would run a prefix of it.
		lx.fail(errNUL)
	}
	n := len(src)
	for i := 0; i < n; {
		c := src[i]
		switch {
		case isSpace(c):
			lx.sep = true
			i++
		case c == '-' && i+1 < n && src[i+1] == '-':
			i = lx.lineComment(i)
		case c == '/' && i+1 < n && src[i+1] == '*':
			i = lx.blockComment(i)
		case c == '\'':
			i = lx.str(i, i, lx.nonStd, 0)
		case c == '"':
			i = lx.qident(i, i, 0)
		case c == '$':
			i = lx.dollar(i)
		case isIdentStart(c):
			i = lx.word(i)
		case isDigit(c) || (c == '.' && i+1 < n && isDigit(src[i+1])):
			i = lx.number(i)
		default:
			i = lx.punct(i)
		}
	}
	if lx.shp.on {
		lx.shapeEnd()
	}
	lx.norm = lx.norm[:lx.keep]
	if lx.unicode {
		lx.mergeUescape()
	}
}

func (lx *lexer) fail(msg string) {
	if lx.err == "" {
		lx.err = msg
	}
}

// write appends src[start:end] to the normalized text, preceded by one space when whitespace
// or a comment separated it from the previous token.
func (lx *lexer) write(start, end int) {
	if lx.sep && len(lx.norm) > 0 {
		lx.norm = append(lx.norm, ' ')
	}
	lx.sep = false
	lx.norm = append(lx.norm, lx.src[start:end]...)
}

// push records a token whose text has already been written to the normalized text.
func (lx *lexer) push(kind tokKind, start, end int, flags uint8) {
	lx.pushWord(kind, start, end, flags, keyword{})
}

// pushWord is push for a token that may be a keyword (k).
func (lx *lexer) pushWord(kind tokKind, start, end int, flags uint8, k keyword) {
	t := token{pos: start, end: end, kind: kind, flags: flags, kw: k.id, kwf: k.flags}
	if lx.keepLists || !lx.list(&t) {
		lx.toks = append(lx.toks, t)
	}
	if kind != tSemi {
		lx.keep = len(lx.norm)
	}
	if lx.shp.on {
		lx.shapeToken(kind, start, end, flags, k)
	}
}

// emit writes and records a token.
func (lx *lexer) emit(kind tokKind, start, end int) int {
	lx.write(start, end)
	lx.push(kind, start, end, 0)
	return end
}

// lineComment handles "--" up to (not including) the end of the line.
func (lx *lexer) lineComment(i int) int {
	s := lx.src
	end := i + 2
	for end < len(s) && s[end] != '\n' && s[end] != '\r' {
		end++
	}
	lx.comment(s[i+2 : end])
	lx.sep = true
	return end
}

// blockComment handles a /* … */ comment; they nest, as in Postgres.
func (lx *lexer) blockComment(i int) int {
	s := lx.src
	depth := 1
	p := i + 2
	for p < len(s) {
		switch {
		case s[p] == '/' && p+1 < len(s) && s[p+1] == '*':
			depth++
			p += 2
		case s[p] == '*' && p+1 < len(s) && s[p+1] == '/':
			depth--
			p += 2
			if depth == 0 {
				lx.comment(s[i+2 : p-2])
				lx.sep = true
				return p
			}
		default:
			p++
		}
	}
	// Unterminated: keep it verbatim so that the normalized text keeps the error.
	lx.fail("unterminated block comment")
	lx.write(i, len(s))
	lx.keep = len(lx.norm)
	return len(s)
}

// annotationPrefix starts an annotation comment (matched case-insensitively).
const annotationPrefix = "sqlflight:"

// comment records the text of a comment as an annotation when it starts with "sqlflight:".
func (lx *lexer) comment(text string) {
	t := strings.TrimLeft(text, " \t\n\r\f\v")
	if len(t) < len(annotationPrefix) || !strings.EqualFold(t[:len(annotationPrefix)], annotationPrefix) {
		return
	}
	lx.hasAnno = true
	if a := strings.TrimSpace(t[len(annotationPrefix):]); a != "" {
		lx.annos = append(lx.annos, a)
	}
}

// str lexes a quoted string whose prefix starts at start and whose opening quote is at q.
// esc selects the backslash escapes of E'…' strings. Strings separated only by whitespace containing a
// newline continue each other (Postgres' quotecontinue); the continuation gap is normalized
// to a single newline, which keeps the continuation.
func (lx *lexer) str(start, q int, esc bool, flags uint8) int {
	s := lx.src
	n := len(s)
	if start == q {
		flags |= flagPlain
	}
	piece := start
	p := q + 1
	first := true
	for {
		for p < n {
			c := s[p]
			if c == '\'' {
				if p+1 < n && s[p+1] == '\'' {
					p += 2
					continue
				}
				break
			}
			if esc && c == '\\' {
				p += 2
				continue
			}
			p++
		}
		if first {
			lx.write(piece, min(p+1, n))
			first = false
		} else {
			lx.norm = append(lx.norm, s[piece:min(p+1, n)]...)
		}
		if p >= n {
			lx.fail("unterminated string literal")
			lx.push(tString, start, n, flags)
			return n
		}
		end := p + 1
		next, ok := lx.continuation(end)
		if !ok {
			lx.push(tString, start, end, flags)
			return end
		}
		flags &^= flagPlain
		lx.norm = append(lx.norm, '\n')
		piece = next
		p = next + 1
	}
}

// continuation reports whether the string that ended at p continues with another quoted
// piece, following Postgres' rule: horizontal whitespace or "--" comments, one newline, then
// whitespace or "--" comments ended by a newline, then a quote. It returns the quote's index.
func (lx *lexer) continuation(p int) (int, bool) {
	s := lx.src
	n := len(s)
	i := p
	for i < n {
		c := s[i]
		if c == ' ' || c == '\t' || c == '\f' || c == '\v' {
			i++
			continue
		}
		if c == '-' && i+1 < n && s[i+1] == '-' {
			for i < n && s[i] != '\n' && s[i] != '\r' {
				i++
			}
			continue
		}
		break
	}
	if i >= n || (s[i] != '\n' && s[i] != '\r') {
		return 0, false
	}
	i++
	for i < n {
		c := s[i]
		if isSpace(c) {
			i++
			continue
		}
		if c == '-' && i+1 < n && s[i+1] == '-' {
			for i < n && s[i] != '\n' && s[i] != '\r' {
				i++
			}
			if i >= n {
				return 0, false
			}
			continue
		}
		break
	}
	if i >= n || s[i] != '\'' {
		return 0, false
	}
	// The gap is part of the string token: its comments may still be annotations.
	for j := p; j < i; j++ {
		if s[j] == '-' && j+1 < i && s[j+1] == '-' {
			k := j + 2
			for k < i && s[k] != '\n' && s[k] != '\r' {
				k++
			}
			lx.comment(s[j+2 : k])
			j = k
		}
	}
	return i, true
}

// qident lexes a quoted identifier whose prefix starts at start and opening quote is at q.
func (lx *lexer) qident(start, q int, flags uint8) int {
	s := lx.src
	p := q + 1
	for p < len(s) {
		if s[p] == '"' {
			if p+1 < len(s) && s[p+1] == '"' {
				p += 2
				continue
			}
			lx.write(start, p+1)
			lx.push(tQIdent, start, p+1, flags)
			return p + 1
		}
		p++
	}
	lx.fail("unterminated quoted identifier")
	lx.write(start, len(s))
	lx.push(tQIdent, start, len(s), flags)
	return len(s)
}

// dollar lexes a parameter ($1), a dollar-quoted string ($$…$$, $tag$…$tag$) or a lone '$'.
func (lx *lexer) dollar(i int) int {
	s := lx.src
	n := len(s)
	j := i + 1
	if j < n && isDigit(s[j]) {
		v := 0
		for j < n && isDigit(s[j]) {
			if v < math.MaxInt32/10 {
				v = v*10 + int(s[j]-'0')
			} else {
				v = math.MaxInt32
			}
			j++
		}
		lx.params = max(lx.params, v)
		return lx.emit(tParam, i, j)
	}
	if j < n && s[j] == '$' {
		return lx.dollarBody(i, j+1)
	}
	if j < n && isDolqStart(s[j]) {
		k := j + 1
		for k < n && isDolqCont(s[k]) {
			k++
		}
		if k < n && s[k] == '$' {
			return lx.dollarBody(i, k+1)
		}
	}
	return lx.emit(tOp, i, i+1) // Postgres returns the '$' alone; the rest lexes on
}

// dollarBody finds the closing tag of a dollar quote whose opening tag is src[i:body].
func (lx *lexer) dollarBody(i, body int) int {
	s := lx.src
	tag := s[i:body]
	k := strings.Index(s[body:], tag)
	if k < 0 {
		lx.fail("unterminated dollar-quoted string")
		return lx.emit(tDollar, i, len(s))
	}
	return lx.emit(tDollar, i, body+k+len(tag))
}

// word lexes an identifier or keyword, or a prefixed string or identifier: E'…', B'…',
// X'…', N'…', U&'…', U&"…".
func (lx *lexer) word(i int) int {
	s := lx.src
	n := len(s)
	if i+1 < n {
		switch s[i] | 0x20 {
		case 'e':
			if s[i+1] == '\'' {
				return lx.str(i, i+1, true, 0)
			}
		case 'n':
			if s[i+1] == '\'' {
				return lx.str(i, i+1, lx.nonStd, 0) // NCHAR then an ordinary '…' string
			}
		case 'b', 'x':
			if s[i+1] == '\'' {
				return lx.str(i, i+1, false, 0)
			}
		case 'u':
			if s[i+1] == '&' && i+2 < n {
				switch s[i+2] {
				case '\'':
					lx.unicode = true
					return lx.str(i, i+2, false, flagUnicode)
				case '"':
					lx.unicode = true
					return lx.qident(i, i+2, flagUnicode)
				}
			}
		}
	}
	j := i + 1
	for j < n && isIdentCont(s[j]) {
		j++
	}
	lx.write(i, j)
	lx.pushWord(tIdent, i, j, 0, lookupKeyword(s[i:j]))
	return j
}

// number lexes a numeric constant: 42, 4.2, .42, 4e2, 1_000, 0x2A, 0o52, 0b101010.
// A letter right after it starts a new token (as in Postgres before 15).
func (lx *lexer) number(i int) int {
	s := lx.src
	n := len(s)
	j := i
	if s[j] == '0' && j+2 < n {
		var ok func(byte) bool
		switch s[j+1] | 0x20 {
		case 'x':
			ok = isHexDigit
		case 'o':
			ok = func(c byte) bool { return '0' <= c && c <= '7' }
		case 'b':
			ok = func(c byte) bool { return c == '0' || c == '1' }
		}
		if ok != nil && ok(s[j+2]) {
			j += 3
			for j < n && (ok(s[j]) || (s[j] == '_' && j+1 < n && ok(s[j+1]))) {
				j++
			}
			return lx.emit(tNumber, i, j)
		}
	}
	digits := func() {
		for j < n && (isDigit(s[j]) || (s[j] == '_' && j+1 < n && isDigit(s[j+1]))) {
			j++
		}
	}
	digits()
	if j < n && s[j] == '.' && !(j+1 < n && s[j+1] == '.') {
		j++
		digits()
	}
	if j < n && (s[j]|0x20) == 'e' {
		k := j + 1
		if k < n && (s[k] == '+' || s[k] == '-') {
			k++
		}
		if k < n && isDigit(s[k]) {
			j = k
			digits()
		}
	}
	return lx.emit(tNumber, i, j)
}

// punct lexes punctuation and operators. An operator stops before "--" or "/*".
func (lx *lexer) punct(i int) int {
	s := lx.src
	n := len(s)
	switch c := s[i]; c {
	case '(':
		return lx.emit(tLParen, i, i+1)
	case ')':
		return lx.emit(tRParen, i, i+1)
	case '[':
		return lx.emit(tLBrack, i, i+1)
	case ']':
		return lx.emit(tRBrack, i, i+1)
	case ',':
		return lx.emit(tComma, i, i+1)
	case ';':
		return lx.emit(tSemi, i, i+1)
	case '.':
		return lx.emit(tDot, i, i+1)
	case ':':
		if i+1 < n && s[i+1] == ':' {
			return lx.emit(tCast, i, i+2)
		}
		if i+1 < n && s[i+1] == '=' {
			return lx.emit(tOp, i, i+2)
		}
		return lx.emit(tColon, i, i+1)
	default:
		if !isOpChar(c) {
			return lx.emit(tOp, i, i+1)
		}
		j := i + 1
		for j < n && isOpChar(s[j]) {
			if j+1 < n && ((s[j] == '-' && s[j+1] == '-') || (s[j] == '/' && s[j+1] == '*')) {
				break
			}
			j++
		}
		return lx.emit(tOp, i, j)
	}
}

// mergeUescape folds "UESCAPE 'c'" into the preceding U& token: Postgres treats
// U&"…" UESCAPE '!' as one identifier (so U&"…" UESCAPE '!' ( is a function call).
func (lx *lexer) mergeUescape() {
	out := lx.toks[:0]
	toks := lx.toks
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		if t.flags&flagUnicode != 0 && i+2 < len(toks) && toks[i+1].kw == kwUescape &&
			toks[i+2].kind == tString && toks[i+2].flags&flagPlain != 0 {
			lit := lx.src[toks[i+2].pos:toks[i+2].end]
			if len(lit) == 3 {
				t.esc = lit[1]
			} else {
				t.esc = 0xff // invalid: Postgres rejects it; decoding will fail
			}
			t.end = toks[i+2].end
			i += 2
		}
		out = append(out, t)
	}
	lx.toks = out
}

// annotation returns the collected annotation texts joined by single spaces.
func (lx *lexer) annotation() string {
	switch len(lx.annos) {
	case 0:
		return ""
	case 1:
		return lx.annos[0]
	}
	return strings.Join(lx.annos, " ")
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func isHexDigit(c byte) bool {
	return isDigit(c) || ('a' <= c|0x20 && c|0x20 <= 'f')
}

func isLetter(c byte) bool { return 'a' <= c|0x20 && c|0x20 <= 'z' }

// isIdentStart: [A-Za-z\200-\377_]
func isIdentStart(c byte) bool { return isLetter(c) || c == '_' || c >= 0x80 }

// isIdentCont: [A-Za-z\200-\377_0-9\$]
func isIdentCont(c byte) bool { return isIdentStart(c) || isDigit(c) || c == '$' }

// isDolqStart: [A-Za-z\200-\377_]
func isDolqStart(c byte) bool { return isIdentStart(c) }

// isDolqCont: [A-Za-z\200-\377_0-9]
func isDolqCont(c byte) bool { return isIdentStart(c) || isDigit(c) }

// isOpChar: Postgres' op_chars.
func isOpChar(c byte) bool {
	switch c {
	case '~', '!', '@', '#', '^', '&', '|', '`', '?', '+', '-', '*', '/', '%', '<', '>', '=':
		return true
	}
	return false
}
