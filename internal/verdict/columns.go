package verdict

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ColClass is how a column's values are compared and put in canonical
// form: row-level invalidation tags only columns of a class other than
// ClassNone.
type ColClass uint8

// The column classes.
const (
	ClassNone ColClass = iota // not taggable
	ClassInt                  // int2, int4, int8: decimal
	ClassText                 // text, varchar with a deterministic collation: the bytes
	ClassUUID                 // uuid: lower-case 8-4-4-4-12
	ClassBool                 // bool: "t" or "f"
)

// ClassOfType is the class of a column or parameter of type oid, ClassNone
// for every type but int2, int4, int8, text, varchar, uuid and bool (a
// domain over one of them is ClassNone: its OID is its own).
func ClassOfType(oid uint32) ColClass {
	switch oid {
	case 20, 21, 23:
		return ClassInt
	case 25, 1043:
		return ClassText
	case 2950:
		return ClassUUID
	case 16:
		return ClassBool
	}
	return ClassNone
}

// columnsQuery describes the columns of every relation whose name folds to
// $1 (epochs share one name over schemas and case): their type, whether they
// are generated, whether their collation compares bytes, and the relation's
// kind.
const columnsQuery = `SELECT a.attname::text, a.atttypid::oid, a.attgenerated <> '',
       COALESCE(co.collisdeterministic, true), c.relkind::text
FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
LEFT JOIN pg_catalog.pg_collation co ON co.oid = a.attcollation
WHERE pg_catalog.lower(c.relname) = $1`

// QueryColumns returns the taggable columns of the tables named table (a
// lower-case bare name, as epochs key it): a column is taggable when it has
// the same taggable class in every plain or partitioned table of that name
// and is neither generated nor (text) of a nondeterministic collation; a
// name that also names another kind of relation (a view, a foreign table)
// has none, and so does a name the catalog does not know.
func QueryColumns(ctx context.Context, conn Session, table string) (map[string]ColClass, error) {
	rows, err := conn.Query(ctx, columnsQuery, table)
	if err != nil {
		return nil, err
	}
	cols := map[string]ColClass{}
	conflict := map[string]bool{}
	other := false
	for _, row := range rows {
		if len(row) != 5 || row[0] == nil || row[1] == nil || row[2] == nil || row[3] == nil || row[4] == nil {
			return nil, errors.New("sqlflight: unexpected answer to the columns query")
		}
		name, kind := *row[0], *row[4]
		t, err := strconv.ParseUint(*row[1], 10, 32)
		if err != nil {
			return nil, fmt.Errorf("sqlflight: column type %q: %w", *row[1], err)
		}
		typ := uint32(t)
		generated, deterministic := *row[2] == "t", *row[3] == "t"
		if kind != "r" && kind != "p" {
			other = true
		}
		cl := ClassOfType(typ)
		if generated || (cl == ClassText && !deterministic) {
			cl = ClassNone
		}
		if old, ok := cols[name]; ok && old != cl {
			conflict[name] = true
		}
		cols[name] = cl
	}
	out := map[string]ColClass{}
	if other {
		return out, nil
	}
	for name, cl := range cols {
		if cl != ClassNone && !conflict[name] {
			out[name] = cl
		}
	}
	return out, nil
}

// CanonText puts s, a value in text form (a literal's, the feed's), in the
// canonical form of class, or reports false (always for ClassNone, and for
// any text the class's canonical form cannot be sure of: " 5" is not an
// int).
func CanonText(class ColClass, s string) (string, bool) {
	switch class {
	case ClassInt:
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return "", false
		}
		return strconv.FormatInt(n, 10), true
	case ClassText:
		return s, true
	case ClassUUID:
		return CanonUUID(s)
	case ClassBool:
		switch strings.ToLower(s) {
		case "t", "true":
			return "t", true
		case "f", "false":
			return "f", true
		}
	}
	return "", false
}

// CanonUUID accepts the forms PostgreSQL's uuid input does (upper or lower
// case, hyphens between groups of four digits, braces) as far as they are
// unambiguous, and returns the standard lower-case form.
func CanonUUID(s string) (string, bool) {
	if len(s) >= 2 && s[0] == '{' && s[len(s)-1] == '}' {
		s = s[1 : len(s)-1]
	}
	var hex [32]byte
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '-' && n > 0 && n%4 == 0 && i+1 < len(s) && s[i+1] != '-':
			continue
		case '0' <= c && c <= '9', 'a' <= c && c <= 'f':
		case 'A' <= c && c <= 'F':
			c += 'a' - 'A'
		default:
			return "", false
		}
		if n == 32 {
			return "", false
		}
		hex[n] = c
		n++
	}
	if n != 32 {
		return "", false
	}
	h := string(hex[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32], true
}

// CanonArg puts an argument's value in the canonical form of class, or
// reports false for a type whose encoding it does not know for sure (a
// float for an int, []byte for a uuid: sent as its 16 raw bytes).
func CanonArg(class ColClass, v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return CanonText(class, x)
	case []byte:
		if class == ClassUUID {
			return "", false // sent as the 16 raw bytes
		}
		return CanonText(class, string(x))
	}
	switch class {
	case ClassInt:
		switch x := v.(type) {
		case int64:
			return strconv.FormatInt(x, 10), true
		case int:
			return strconv.FormatInt(int64(x), 10), true
		case int32:
			return strconv.FormatInt(int64(x), 10), true
		case int16:
			return strconv.FormatInt(int64(x), 10), true
		case int8:
			return strconv.FormatInt(int64(x), 10), true
		case uint32:
			return strconv.FormatUint(uint64(x), 10), true
		case uint16:
			return strconv.FormatUint(uint64(x), 10), true
		case uint8:
			return strconv.FormatUint(uint64(x), 10), true
		}
	case ClassUUID:
		if b, ok := v.([16]byte); ok {
			const digits = "0123456789abcdef"
			var h [32]byte
			for i, c := range b {
				h[2*i], h[2*i+1] = digits[c>>4], digits[c&15]
			}
			s := string(h[:])
			return s[0:8] + "-" + s[8:12] + "-" + s[12:16] + "-" + s[16:20] + "-" + s[20:32], true
		}
	case ClassBool:
		if b, ok := v.(bool); ok {
			if b {
				return "t", true
			}
			return "f", true
		}
	}
	return "", false
}
