package batch

import (
	"database/sql/driver"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sqlflight/sqlflight/internal/epoch"
	"github.com/sqlflight/sqlflight/internal/sqlscan"
	"github.com/sqlflight/sqlflight/internal/verdict"
)

// Shape is what the server said of a statement shape that a Plan needs.
type Shape struct {
	// Table is the one table its reads depend on (epoch.TableKey), and
	// Class the class of each of its columns the catalog told (ClassNone:
	// none that compares as its canonical text).
	Table string
	Class func(col string) verdict.ColClass
	// Params are its parameters' type OIDs.
	Params []uint32
	// Builtin: every function it calls is PostgreSQL's own (one of the
	// user's may be an aggregate).
	Builtin bool
}

// A Plan is what one text runs as for many keys at once. It is read-only
// once made.
type Plan struct {
	// Why says why the text's reads do not batch; "" when they do.
	Why string
	// Col is the key column and Class how its values compare.
	Col   string
	Class verdict.ColClass
	// Param is the key's $n, 0 for a constant of the text whose canonical
	// value Lit is.
	Param int
	Lit   string
	// Array is the $n of the keys' array in SQL (Param, or the text's
	// highest parameter + 1), SQL the text reading every key at once (the
	// key column appended to its select list, where each row's key is),
	// and Group the text with its key's value cut out: what the texts of
	// one batch group have in common.
	Array int
	SQL   string
	Group string
	// lo and hi bound an integer key: its parameter's type's range.
	lo, hi int64
}

// arrayTypes names the types of the key parameters a batch casts its
// keys' array to.
var arrayTypes = map[uint32]string{20: "int8", 21: "int2", 23: "int4", 25: "text", 1043: "varchar", 2950: "uuid"}

// NewPlan returns the plan of r, a text of the shape sh, whose strings
// are non-standard if nonStd. The key is the last condition that may key a
// batch (sqlscan.BatchOf) on a column of class int, text or uuid: a
// parameter of a type of the same class, an integer constant of an int
// column, or a string constant of a text or uuid column (a '5' for an int
// column is read as the column's type, whose range the class does not
// tell).
func NewPlan(r *sqlscan.Result, sh Shape, nonStd bool) *Plan {
	p := &Plan{}
	if !sh.Builtin {
		p.Why = "calls a function that is not PostgreSQL's own (it may aggregate)"
		return p
	}
	form, why := sqlscan.BatchOf(r.Normalized, nonStd)
	if form == nil {
		p.Why = why
		return p
	}
	if epoch.TableKey(form.Table) != sh.Table {
		p.Why = "depends on another table than the one it reads"
		return p
	}
	for i := len(form.Keys) - 1; i >= 0; i-- {
		k := form.Keys[i]
		class := sh.Class(k.Column)
		var typ string
		switch k.Value.Kind {
		case sqlscan.OpParam:
			n := k.Value.Param
			if n < 1 || n > len(sh.Params) || verdict.ClassOfType(sh.Params[n-1]) != class {
				continue
			}
			if typ = arrayTypes[sh.Params[n-1]]; typ == "" {
				continue
			}
			p.Param, p.Array = n, n
			p.lo, p.hi = intRange(sh.Params[n-1])
		case sqlscan.OpNumber:
			lit, ok := verdict.CanonText(class, k.Value.Text)
			if class != verdict.ClassInt || !ok {
				continue
			}
			// An int4 or int8 constant: compared with an int8 of the same
			// value, the column matches the same rows.
			typ, p.Lit, p.Array = "int8", lit, r.Params+1
			p.lo, p.hi = math.MinInt64, math.MaxInt64
		case sqlscan.OpString:
			if class != verdict.ClassText && class != verdict.ClassUUID {
				continue
			}
			lit, ok := canon(class, k.Value.Text)
			if !ok {
				continue
			}
			typ, p.Lit, p.Array = "text", lit, r.Params+1
			if class == verdict.ClassUUID {
				typ = "uuid"
			}
		}
		if typ == "" {
			continue
		}
		p.Col, p.Class = k.Column, class
		p.SQL = form.Rewrite(r.Normalized, k, p.Array, typ)
		p.Group = r.Normalized[:k.Val[0]] + "\x00" + r.Normalized[k.Val[1]:]
		return p
	}
	p.Why = "no condition compares a column of a batchable type (an integer, a text of a deterministic collation, a uuid) with one value"
	return p
}

// intRange is the range of an integer parameter type.
func intRange(oid uint32) (int64, int64) {
	switch oid {
	case 21:
		return math.MinInt16, math.MaxInt16
	case 23:
		return math.MinInt32, math.MaxInt32
	}
	return math.MinInt64, math.MaxInt64
}

// canon is the canonical form of a text key of class, or false if a batch
// cannot carry it: a NUL byte or invalid UTF-8, which the server refuses
// (alone, the read gets its own error).
func canon(class verdict.ColClass, s string) (string, bool) {
	if class == verdict.ClassText && (strings.IndexByte(s, 0) >= 0 || !utf8.ValidString(s)) {
		return "", false
	}
	return verdict.CanonText(class, s)
}

// KeyOf returns the canonical value of the key of a read with args, or
// false if the read cannot be a member of a batch: its key is NULL, of a
// type the driver might send otherwise than as its text (a []byte uuid is
// its 16 bytes), a text the server would refuse, or an integer outside its
// parameter's type (alone, each fails with its own error).
func (p *Plan) KeyOf(args []driver.NamedValue) (string, bool) {
	if p.Param == 0 {
		return p.Lit, true
	}
	n := p.Param
	if n > len(args) || args[n-1].Ordinal != n || args[n-1].Name != "" || args[n-1].Value == nil {
		return "", false
	}
	var s string
	var ok bool
	switch x := args[n-1].Value.(type) {
	case string:
		s, ok = canon(p.Class, x)
	case []byte:
		if p.Class == verdict.ClassUUID {
			return "", false
		}
		s, ok = canon(p.Class, string(x))
	default:
		s, ok = verdict.CanonArg(p.Class, x)
	}
	if !ok {
		return "", false
	}
	if p.Class == verdict.ClassInt {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v < p.lo || v > p.hi {
			return "", false
		}
	}
	return s, true
}

// RowKey returns the canonical value of a row's key column as the driver
// returned it, or false.
func (p *Plan) RowKey(v driver.Value) (string, bool) {
	switch x := v.(type) {
	case string:
		return verdict.CanonText(p.Class, x)
	case []byte:
		return verdict.CanonText(p.Class, string(x))
	case nil:
		return "", false
	}
	return verdict.CanonArg(p.Class, v)
}

// Args returns the arguments of the batch of keys: args (a member's; the
// other arguments are the same for every member) with the keys' array
// literal (verdict.TextArray) in place of the key, or after them for a
// constant key.
func (p *Plan) Args(args []driver.NamedValue, keys []string) []driver.NamedValue {
	out := make([]driver.NamedValue, 0, len(args)+1)
	out = append(out, args...)
	arr := driver.NamedValue{Ordinal: p.Array, Value: verdict.TextArray(keys)}
	if p.Param != 0 {
		out[p.Param-1] = arr
	} else {
		out = append(out, arr)
	}
	return out
}
