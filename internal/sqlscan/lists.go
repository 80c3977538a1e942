package sqlscan

// Long lists of constants: a 7 MB IN list or a multi-row VALUES holds millions of tokens that
// tell the classifier nothing. The lexer keeps the first listKeep constant elements of a run
// and the last one, and drops the elements in between as it goes, so that scanning such a text
// costs memory in proportion to the rest of the statement (and its normalized text), not to
// the number of constants.
//
// An element is what a comma separates, at one level of parentheses or brackets. It is
// constant when every token in it, nested groups included, is a number, a $n parameter, a sign
// (+ or -), parentheses or brackets, commas, or a plain '…' string on one line that holds no
// clock-relative word (see TimeWord): nothing in it names a relation, a function or a type,
// and nothing in it can make the statement time-dependent, so the statement's kind, tables,
// writes, functions and verdict are those of the text with the element left out. Normalized is
// built from the source text and keeps every element.

// listKeep is how many constant elements of a run are kept before the lexer drops the next.
const listKeep = 16

// listDepth bounds the levels tracked; deeper groups make their enclosing element non-constant.
const listDepth = 64

// listLevel is the state of one level of parentheses or brackets.
type listLevel struct {
	elemStart int  // index in toks of the current element's first token
	dirty     bool // the current element holds a non-constant token
	groupOdd  bool // the group (every element so far) holds a non-constant token
	run       int  // constant elements in a row just before the current one
}

// lists tracks the levels of the text being lexed.
type lists struct {
	levels []listLevel
	deep   int // groups opened beyond listDepth, not tracked
}

func (l *lists) reset() {
	l.levels = append(l.levels[:0], listLevel{})
	l.deep = 0
}

// constant reports whether the token t, just lexed, may be part of a constant element.
func (lx *lexer) constant(t *token) bool {
	switch t.kind {
	case tNumber, tParam:
		return true
	case tOp:
		return t.end-t.pos == 1 && (lx.src[t.pos] == '-' || lx.src[t.pos] == '+')
	case tString:
		if t.flags&flagPlain == 0 || lx.nonStd {
			return false
		}
		for _, c := range []byte(lx.src[t.pos:t.end]) {
			if c == '\n' || c == '\r' {
				return false
			}
		}
		_, timeWord := timeWordIn(lx.src[t.pos:t.end])
		return !timeWord
	}
	return false
}

// list updates the levels for the token t about to be appended, and reports whether it must be
// dropped instead: t is the comma after a constant element that extends a long enough run (the
// element has then been removed from toks already).
func (lx *lexer) list(t *token) (drop bool) {
	l := &lx.lists
	top := &l.levels[len(l.levels)-1]
	switch t.kind {
	case tLParen, tLBrack:
		if l.deep > 0 || len(l.levels) >= listDepth {
			l.deep++
			top.dirty, top.groupOdd = true, true
			return false
		}
		l.levels = append(l.levels, listLevel{elemStart: len(lx.toks) + 1})
		return false
	case tRParen, tRBrack:
		if l.deep > 0 {
			l.deep--
			return false
		}
		if len(l.levels) > 1 {
			inner := l.levels[len(l.levels)-1]
			l.levels = l.levels[:len(l.levels)-1]
			top = &l.levels[len(l.levels)-1]
			if inner.dirty || inner.groupOdd {
				top.dirty, top.groupOdd = true, true
			}
		}
		return false
	case tComma:
		if l.deep > 0 {
			return false
		}
		if top.dirty || top.elemStart >= len(lx.toks) {
			top.run = 0
		} else if top.run >= listKeep {
			lx.toks = lx.toks[:top.elemStart] // the previous comma ends the list so far
			return true
		} else {
			top.run++
		}
		top.dirty = false
		top.elemStart = len(lx.toks) + 1
		return false
	}
	if l.deep == 0 && !lx.constant(t) {
		top.dirty, top.groupOdd = true, true
	}
	return false
}
