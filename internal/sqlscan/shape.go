package sqlscan

import (
	"slices"
	"strings"
)

// Statement shapes. ORMs that inline values make a new text per value
// (WHERE (id = 4), WHERE (id = 5)); the shape of a text is what those texts
// have in common: its normalized text with every constant whose value
// cannot change what the server concludes about the statement written as a
// placeholder, the way pg_stat_statements shows them ($n numbered after the
// highest parameter of the text). The lexer finds the constants as it goes
// (shaper, called for every token) and parse writes the shape at the end.
//
// A constant is replaced only where both the scanner and the server read
// it as a value and nothing else:
//
//   - a number made of decimal digits (with a fraction or an exponent, or
//     neither), or a plain '…' string on one line holding no clock-relative
//     word (TimeWord) and, when standard_conforming_strings is off, no
//     backslash;
//   - after an operator, '(', ',', '[', or AND, OR, BETWEEN, LIKE, ILIKE,
//     THEN, ELSE, WHEN, LIMIT, OFFSET, SELECT; and before an operator, ')',
//     ',', ']', ';', the end, or AND, OR, THEN, ELSE, END, WHEN, LIMIT,
//     OFFSET, FROM, WHERE, ORDER, GROUP, HAVING, UNION, INTERSECT, EXCEPT,
//     IS, NOT, IN, LIKE, ILIKE, BETWEEN, ESCAPE;
//   - not inside an ORDER BY, GROUP BY or PARTITION BY list (ORDER BY 2
//     names an output column), DISTINCT ON (…), a type's modifiers
//     (::numeric(10, 2), AS varchar(3), timestamp(3)), or the arguments of
//     nextval, setval and currval; and not a string whose text the
//     classifier reads (the sequence a call of nextval or setval names,
//     however the function is written: "nextval"('s')), so that what the
//     scanner derives from a constant is the same for every text of a
//     shape.
//
// So a cast or typed constant ('x'::regclass, 5::bigint, date 'today',
// interval '1 day', CAST('1' AS int), 'a' COLLATE "C"), an E'…', B'…',
// X'…', U&'…', N'…' or dollar-quoted string, a string continued on another
// line, a hexadecimal, octal, binary or underscored number (read otherwise
// before PostgreSQL 16), and anything in a place not listed stays as it
// is. TRUE, FALSE and NULL are keywords and stay too. A sign before a
// number stays an operator of the shape (WHERE id = -4 is WHERE id = -$1).
// Texts of statements other than queries and DML (whose constants are not
// always values: DEFAULT 'x', a column's length), texts that do not lex,
// and texts over shapeMaxSQL are their own shape: Shape and ShapeKey are
// Normalized.
//
// What the server infers from a constant is its type, and the type is
// kept: each placeholder has a class, in ShapeKey, that says which type
// PostgreSQL gives the constant: int4 for an integer up to 2147483647, int8
// for one up to 9223372036854775807, numeric for larger ones and those
// with a fraction or an exponent (an integer whose type depends on its
// sign, 2147483648 or 9223372036854775808, stays as it is), and unknown for
// a string, whose type the context decides. Two texts of one ShapeKey are
// the same statement but for the values of constants of the same types, at
// places where a value only is read: the server resolves the same
// functions, operators, casts and relations for both.

// shapeMaxSQL bounds the texts that get a shape of their own: a longer one
// is its own shape (it is not memoized either, and its constants may be
// many).
const shapeMaxSQL = memoMaxSQL

// shapeMaxDepth bounds the parentheses the shaper follows; deeper texts are
// their own shape.
const shapeMaxDepth = 256

// Placeholder classes: the type PostgreSQL gives the constant replaced.
const (
	shapeInt     = 'i' // an integer that is an int4 whatever its sign
	shapeBigint  = 'b' // an integer that is an int8 whatever its sign
	shapeNumeric = 'n' // a numeric
	shapeString  = 's' // a plain string: unknown, typed by its context
)

// shapeWord is what the shaper makes of a word.
type shapeWord uint8

const (
	swOther shapeWord = iota // any other word, or not a word
	swAnd
	swOr
	swBetween
	swLike // LIKE, ILIKE
	swThen
	swElse
	swWhen
	swEnd
	swLimit
	swOffset
	swSelect
	swFrom
	swWhere
	swOrder
	swGroup
	swPartition
	swBy
	swHaving
	swWindow
	swFetch
	swFor
	swReturning
	swSetOp // UNION, INTERSECT, EXCEPT
	swIs
	swNot
	swIn
	swEscape
	swDistinct
	swOn
	swAs
	swType         // a type name that takes modifiers: numeric, varchar, timestamp, …
	swSequence     // nextval, setval, currval
	swMaterialized // WITH x AS [NOT] MATERIALIZED (…)
	swOp           // an operator (not a lone '$')
)

// shapeTok is what the shaper remembers of a token.
type shapeTok struct {
	kind tokKind
	word shapeWord
}

// shapeSpan is a constant to replace: its bytes in the normalized text,
// its position in the source, and its class.
type shapeSpan struct {
	start, end int32
	pos        int
	class      byte
}

// shapeLevel is the shaper's state at one level of parentheses or
// brackets.
type shapeLevel struct {
	keep bool // no constant of the group is replaced
	by   bool // an ORDER BY, GROUP BY or PARTITION BY list is open here
}

// shaper finds the constants of a text as it is lexed.
type shaper struct {
	on      bool
	spans   []shapeSpan
	pend    shapeSpan // a constant whose next token decides
	pending bool
	prev    shapeTok
	prev2   shapeTok
	// typeName: 1 right after :: or AS, 2 inside a name after them (a
	// '(' then opens the type's modifiers).
	typeName uint8
	levels   []shapeLevel
}

func (sh *shaper) reset(on bool) {
	sh.on = on
	sh.spans = sh.spans[:0]
	sh.pending = false
	sh.prev, sh.prev2 = shapeTok{}, shapeTok{}
	sh.typeName = 0
	sh.levels = append(sh.levels[:0], shapeLevel{})
}

// shapeWordOf returns what the shaper makes of the token src (of kind) with
// keyword k.
func shapeWordOf(kind tokKind, src string, k keyword) shapeWord {
	switch kind {
	case tOp:
		if src == "$" {
			return swOther
		}
		return swOp
	case tIdent:
	default:
		return swOther
	}
	switch k.id {
	case kwNone:
		switch len(src) {
		case 7:
			if equalFoldASCII("nextval", src) || equalFoldASCII("currval", src) {
				return swSequence
			}
		case 6:
			if equalFoldASCII("setval", src) {
				return swSequence
			}
		}
		return swOther
	case kwReserved:
		switch len(src) {
		case 2:
			if equalFoldASCII("in", src) {
				return swIn
			}
		case 3:
			if equalFoldASCII("and", src) {
				return swAnd
			}
		case 4:
			if equalFoldASCII("else", src) {
				return swElse
			}
		}
		return swOther
	case kwOperatorLk:
		if equalFoldASCII("like", src) || equalFoldASCII("ilike", src) {
			return swLike
		}
		return swOther
	case kwConstruct:
		if equalFoldASCII("between", src) {
			return swBetween
		}
		return swOther
	case kwTypeName, kwTime, kwVarying, kwSecond:
		return swType
	}
	switch k.id {
	case kwOr:
		return swOr
	case kwThen:
		return swThen
	case kwWhen:
		return swWhen
	case kwEnd:
		return swEnd
	case kwLimit:
		return swLimit
	case kwOffset:
		return swOffset
	case kwSelect:
		return swSelect
	case kwFrom:
		return swFrom
	case kwWhere:
		return swWhere
	case kwOrder:
		return swOrder
	case kwGroup:
		return swGroup
	case kwPartition:
		return swPartition
	case kwBy:
		return swBy
	case kwHaving:
		return swHaving
	case kwWindow:
		return swWindow
	case kwFetch:
		return swFetch
	case kwFor:
		return swFor
	case kwReturning:
		return swReturning
	case kwUnion, kwIntersect, kwExcept:
		return swSetOp
	case kwIs:
		return swIs
	case kwNot:
		return swNot
	case kwEscape:
		return swEscape
	case kwDistinct:
		return swDistinct
	case kwOn:
		return swOn
	case kwAs:
		return swAs
	case kwMaterialized:
		return swMaterialized
	}
	return swOther
}

// before reports whether a constant may be replaced after t.
func (t shapeTok) before() bool {
	switch t.kind {
	case tLParen, tComma, tLBrack:
		return true
	case tOp, tIdent:
		switch t.word {
		case swOp, swAnd, swOr, swBetween, swLike, swThen, swElse, swWhen, swLimit, swOffset, swSelect:
			return true
		}
	}
	return false
}

// after reports whether a constant may be replaced before t (its kind is 0
// at the end of the text).
func (t shapeTok) after() bool {
	switch t.kind {
	case 0, tRParen, tComma, tRBrack, tSemi:
		return true
	case tOp, tIdent:
		switch t.word {
		case swOp, swAnd, swOr, swThen, swElse, swEnd, swWhen, swLimit, swOffset, swFrom, swWhere,
			swOrder, swGroup, swHaving, swSetOp, swIs, swNot, swIn, swLike, swBetween, swEscape:
			return true
		}
	}
	return false
}

// shapeToken follows the token src[start:end] (of kind, with flags and
// keyword k), just written to the normalized text.
func (lx *lexer) shapeToken(kind tokKind, start, end int, flags uint8, k keyword) {
	sh := &lx.shp
	cur := shapeTok{kind: kind, word: shapeWordOf(kind, lx.src[start:end], k)}
	if sh.pending {
		sh.pending = false
		if cur.after() {
			sh.spans = append(sh.spans, sh.pend)
		}
	}
	top := &sh.levels[len(sh.levels)-1]
	switch kind {
	case tNumber, tString:
		if top.keep || top.by || !sh.prev.before() {
			break
		}
		if c := lx.constClass(kind, start, end, flags); c != 0 {
			n := len(lx.norm)
			sh.pend = shapeSpan{start: int32(n - (end - start)), end: int32(n), pos: start, class: c}
			sh.pending = true
		}
	case tLParen, tLBrack:
		if len(sh.levels) >= shapeMaxDepth {
			sh.on = false // too deep to follow: the text is its own shape
			return
		}
		keep := top.keep || top.by || sh.prev.word == swSequence || sh.prev.word == swType ||
			(sh.prev.word == swOn && sh.prev2.word == swDistinct) ||
			(sh.typeName == 2 && (sh.prev.kind == tIdent || sh.prev.kind == tQIdent))
		sh.levels = append(sh.levels, shapeLevel{keep: keep})
	case tRParen, tRBrack:
		if len(sh.levels) > 1 {
			sh.levels = sh.levels[:len(sh.levels)-1]
		}
	case tSemi:
		sh.levels = append(sh.levels[:0], shapeLevel{})
	case tIdent:
		switch cur.word {
		case swBy:
			if w := sh.prev.word; w == swOrder || w == swGroup || w == swPartition {
				top.by = true
			}
		case swLimit, swOffset, swFetch, swFor, swHaving, swWindow, swSetOp, swReturning:
			top.by = false
		}
	}
	switch kind {
	case tCast:
		sh.typeName = 1
	case tIdent:
		switch {
		case cur.word == swAs:
			sh.typeName = 1
		case cur.word == swType:
			sh.typeName = 2
		case k.flags&kfStop != 0 || cur.word == swMaterialized:
			sh.typeName = 0
		case sh.typeName != 0:
			sh.typeName = 2
		}
	case tQIdent:
		if sh.typeName != 0 {
			sh.typeName = 2
		}
	case tDot: // a qualified name goes on
	default:
		sh.typeName = 0
	}
	sh.prev2, sh.prev = sh.prev, cur
}

// shapeEnd ends the shaper's pass over the text.
func (lx *lexer) shapeEnd() {
	sh := &lx.shp
	if sh.pending {
		sh.pending = false
		if (shapeTok{}).after() {
			sh.spans = append(sh.spans, sh.pend)
		}
	}
}

// constClass returns the class of the constant src[start:end] (of kind,
// with flags), or 0 when it is not replaced.
func (lx *lexer) constClass(kind tokKind, start, end int, flags uint8) byte {
	s := lx.src[start:end]
	if kind == tNumber {
		return numberClass(s)
	}
	if flags&flagPlain == 0 || strings.ContainsAny(s, "\n\r") {
		return 0
	}
	if lx.nonStd && strings.IndexByte(s, '\\') >= 0 {
		return 0 // escapes may hide a time word
	}
	if _, timeWord := timeWordIn(s); timeWord {
		return 0
	}
	return shapeString
}

// numberClass returns the class of the numeric constant s, or 0 when it is
// not replaced: one of another base or with underscores (read otherwise
// before PostgreSQL 16), or an integer whose type depends on its sign.
func numberClass(s string) byte {
	frac := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case isDigit(c):
		case c == '.' || c == 'e' || c == 'E' || ((c == '+' || c == '-') && i > 0 && (s[i-1] == 'e' || s[i-1] == 'E')):
			frac = true
		default:
			return 0
		}
	}
	if frac {
		return shapeNumeric
	}
	var v uint64
	for i := 0; i < len(s); i++ {
		d := uint64(s[i] - '0')
		if v > (1<<64-1-d)/10 {
			return shapeNumeric // beyond uint64: beyond int8 either way
		}
		v = v*10 + d
	}
	switch {
	case v <= 1<<31-1:
		return shapeInt
	case v == 1<<31:
		return 0 // int8, and int4 once negated
	case v <= 1<<63-1:
		return shapeBigint
	case v == 1<<63:
		return 0 // numeric, and int8 once negated
	}
	return shapeNumeric
}

// shape returns the shape and the shape key of the text whose normalized
// text is norm and whose highest parameter is params: norm and norm when no
// constant is replaced. The constants at the source positions keep (whose
// text the classifier read: a sequence's name) stay.
func (lx *lexer) shape(norm string, params int, keep []int) (shape, key string) {
	spans := lx.shp.spans
	if len(keep) > 0 {
		spans = slices.DeleteFunc(spans, func(sp shapeSpan) bool { return slices.Contains(keep, sp.pos) })
	}
	if !lx.shp.on || len(spans) == 0 {
		return norm, norm
	}
	var b strings.Builder
	b.Grow(len(norm) + 8*len(spans) + 1 + len(spans))
	last := 0
	var num [20]byte
	for i, sp := range spans {
		s, e := int(sp.start), int(sp.end)
		b.WriteString(norm[last:s])
		if s > 0 && (isIdentCont(norm[s-1])) {
			b.WriteByte(' ') // THEN'x': the placeholder must not join the word
		}
		b.WriteByte('$')
		b.Write(appendUint(num[:0], uint64(params+1+i)))
		if e < len(norm) && isIdentCont(norm[e]) {
			b.WriteByte(' ')
		}
		last = e
	}
	b.WriteString(norm[last:])
	n := b.Len()
	b.WriteByte(0)
	for _, sp := range spans {
		b.WriteByte(sp.class)
	}
	key = b.String()
	return key[:n], key
}

// appendUint appends the decimal digits of v.
func appendUint(b []byte, v uint64) []byte {
	var tmp [20]byte
	i := len(tmp)
	for {
		i--
		tmp[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			break
		}
	}
	return append(b, tmp[i:]...)
}

// shapeKinds reports whether r's statements are of the kinds that get a
// shape: queries and DML, whose constants are values (a DDL's are not
// always: DEFAULT 'x', a column's length).
func shapeKinds(r *Result) bool {
	if r.Err != "" || len(r.Statements) == 0 {
		return false
	}
	for i := range r.Statements {
		switch r.Statements[i].Kind {
		case KindSelect, KindInsert, KindUpdate, KindDelete, KindMerge:
		default:
			return false
		}
	}
	return true
}
