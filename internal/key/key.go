// Package key encodes the keys under which sqlflight shares results, and
// copies the arguments an origin query outlives its caller with.
//
// A key is the connection scope's number, the context's partition, the
// normalized statement and every argument (ordinal, name, type and value),
// each tagged or length-prefixed, so that two statements encode alike only
// when they are the same statement with the same arguments: keys are
// compared whole, never by hash. Values of Go types the driver would send
// differently encode differently (their type names, package paths
// included, are part of the key); a value with no canonical encoding
// (functions, channels, values nested deeper than 16, keys over MaxBytes)
// makes Append report false, and such a statement must not share.
//
// Detach deep-copies arguments so that nothing the caller may reuse (a
// []byte, a map, a pointer's target) is shared with a query that outlives
// it. Everything here is safe for concurrent use.
package key

import (
	"bytes"
	"database/sql/driver"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"time"
)

// MaxBytes bounds a key; statements whose arguments encode larger run
// unshared.
const MaxBytes = 1 << 20

// Partition is what a shared read is keyed under besides its statement:
// the context's scope (sqlflight.WithScope), if any, and whether the
// session was changed under it (no spare connection can stand in for it).
type Partition struct {
	Scope   string
	Set     bool // the context carries a scope
	Session bool // the session was changed under the scope
}

// Partition tags in keys, after the connection scope's number.
const (
	partNone    = 0 // no context scope
	partScope   = 1 // a context scope, on a session nothing changed
	partSession = 2 // a context scope, on a session changed under it
)

// appendPartition encodes p: a tag, then the scope length-prefixed, so that
// no scope encodes like another or like none.
func appendPartition(b []byte, p Partition) []byte {
	switch {
	case !p.Set:
		return append(b, partNone)
	case p.Session:
		b = append(b, partSession)
	default:
		b = append(b, partScope)
	}
	return appendStr(b, p.Scope)
}

// Append appends the key of a statement: the scope, the context's
// partition (WithScope), the normalized SQL and every argument's ordinal,
// name, type and value, each tagged or length-prefixed so that no two
// different statements encode alike. Keys are compared whole, never by
// hash. It reports false if an argument cannot be encoded canonically
// (functions, channels, values nested too deep): such a statement must not
// share.
func Append(b []byte, scope uint64, part Partition, normalized string, args []driver.NamedValue) ([]byte, bool) {
	return AppendExcept(b, scope, part, normalized, args, -1)
}

// AppendExcept is Append with the value of args[skip] encoded as nil
// (none for a skip out of range): the key of what the statements that
// differ only in that argument have in common (a batch group's).
func AppendExcept(b []byte, scope uint64, part Partition, normalized string, args []driver.NamedValue, skip int) ([]byte, bool) {
	b = binary.BigEndian.AppendUint64(b, scope)
	if b = appendPartition(b, part); len(b) > MaxBytes {
		return b, false
	}
	b = appendStr(b, normalized)
	b = binary.AppendUvarint(b, uint64(len(args)))
	for i, a := range args {
		b = binary.AppendUvarint(b, uint64(a.Ordinal))
		b = appendStr(b, a.Name)
		v := a.Value
		if i == skip {
			v = nil
		}
		var ok bool
		if b, ok = AppendValue(b, v); !ok || len(b) > MaxBytes {
			return b, false
		}
	}
	return b, true
}

// Size is a good first capacity for a key: most keys then take one
// allocation.
func Size(part Partition, normalized string, args []driver.NamedValue) int {
	n := 8 + 1 + 10 + len(part.Scope) + 10 + len(normalized) + 10
	for _, a := range args {
		n += 24 + len(a.Name)
		switch v := a.Value.(type) {
		case string:
			n += len(v)
		case []byte:
			n += len(v)
		}
	}
	return n
}

func appendStr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// Tags of encoded values.
const (
	tagNil = iota + 1
	tagInt64
	tagFloat64
	tagBool
	tagString
	tagBytes
	tagNilBytes
	tagTime
	tagReflect
)

// AppendValue appends the canonical encoding of one argument value (its
// type and value), or reports false when it has none.
func AppendValue(b []byte, v any) ([]byte, bool) {
	switch v := v.(type) {
	case nil:
		return append(b, tagNil), true
	case int64:
		return binary.BigEndian.AppendUint64(append(b, tagInt64), uint64(v)), true
	case float64:
		return binary.BigEndian.AppendUint64(append(b, tagFloat64), math.Float64bits(v)), true
	case bool:
		if v {
			return append(b, tagBool, 1), true
		}
		return append(b, tagBool, 0), true
	case string:
		return appendStr(append(b, tagString), v), true
	case []byte:
		if v == nil {
			return append(b, tagNilBytes), true
		}
		b = binary.AppendUvarint(append(b, tagBytes), uint64(len(v)))
		return append(b, v...), true
	case time.Time:
		return appendTime(append(b, tagTime), v), true
	}
	rv := reflect.ValueOf(v)
	b = appendStr(append(b, tagReflect), TypeName(rv.Type()))
	return appendReflect(b, rv, 0)
}

// appendTime encodes the instant and the zone offset (which decides how a
// driver formats the value), not the monotonic reading.
func appendTime(b []byte, t time.Time) []byte {
	_, off := t.Zone()
	b = binary.BigEndian.AppendUint64(b, uint64(t.Unix()))
	b = binary.BigEndian.AppendUint32(b, uint32(t.Nanosecond()))
	return binary.BigEndian.AppendUint32(b, uint32(int32(off)))
}

var timeType = reflect.TypeFor[time.Time]()

// appendReflect encodes v by its structure: every field, element and map
// entry (maps in sorted order), following pointers to a bounded depth.
func appendReflect(b []byte, v reflect.Value, depth int) ([]byte, bool) {
	if depth > 16 || len(b) > MaxBytes {
		return b, false
	}
	switch v.Kind() {
	case reflect.Bool:
		if v.Bool() {
			return append(b, 1), true
		}
		return append(b, 0), true
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return binary.AppendVarint(b, v.Int()), true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return binary.AppendUvarint(b, v.Uint()), true
	case reflect.Float32, reflect.Float64:
		return binary.BigEndian.AppendUint64(b, math.Float64bits(v.Float())), true
	case reflect.Complex64, reflect.Complex128:
		c := v.Complex()
		b = binary.BigEndian.AppendUint64(b, math.Float64bits(real(c)))
		return binary.BigEndian.AppendUint64(b, math.Float64bits(imag(c))), true
	case reflect.String:
		return appendStr(b, v.String()), true
	case reflect.Slice:
		if v.IsNil() {
			return append(b, 0), true
		}
		b = append(b, 1)
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return appendStr(b, string(v.Bytes())), true
		}
		fallthrough
	case reflect.Array:
		b = binary.AppendUvarint(b, uint64(v.Len()))
		for i := range v.Len() {
			var ok bool
			if b, ok = appendReflect(b, v.Index(i), depth+1); !ok {
				return b, false
			}
		}
		return b, true
	case reflect.Pointer:
		if v.IsNil() {
			return append(b, 0), true
		}
		return appendReflect(append(b, 1), v.Elem(), depth+1)
	case reflect.Interface:
		if v.IsNil() {
			return append(b, 0), true
		}
		e := v.Elem()
		b = appendStr(append(b, 1), TypeName(e.Type()))
		return appendReflect(b, e, depth+1)
	case reflect.Map:
		if v.IsNil() {
			return append(b, 0), true
		}
		type kv struct{ k, v []byte }
		entries := make([]kv, 0, v.Len())
		for it := v.MapRange(); it.Next(); {
			k, ok := appendReflect(nil, it.Key(), depth+1)
			if !ok {
				return b, false
			}
			val, ok := appendReflect(nil, it.Value(), depth+1)
			if !ok {
				return b, false
			}
			entries = append(entries, kv{k, val})
		}
		slices.SortFunc(entries, func(x, y kv) int { return bytes.Compare(x.k, y.k) })
		b = binary.AppendUvarint(append(b, 1), uint64(len(entries)))
		for _, e := range entries {
			b = appendStr(b, string(e.k))
			b = appendStr(b, string(e.v))
		}
		return b, true
	case reflect.Struct:
		if v.Type() == timeType {
			if !v.CanInterface() {
				return b, false
			}
			return appendTime(b, v.Interface().(time.Time)), true
		}
		for i := range v.NumField() {
			var ok bool
			if b, ok = appendReflect(b, v.Field(i), depth+1); !ok {
				return b, false
			}
		}
		return b, true
	}
	// Func, Chan, UnsafePointer: no canonical value.
	return b, false
}

var typeNames sync.Map // reflect.Type → string

// typeName names t unambiguously: package paths included, recursively.
func TypeName(t reflect.Type) string {
	if n, ok := typeNames.Load(t); ok {
		return n.(string)
	}
	var n string
	switch {
	case t.Name() != "":
		n = t.PkgPath() + "." + t.Name()
	case t.Kind() == reflect.Pointer:
		n = "*" + TypeName(t.Elem())
	case t.Kind() == reflect.Slice:
		n = "[]" + TypeName(t.Elem())
	case t.Kind() == reflect.Array:
		n = "[" + strconv.Itoa(t.Len()) + "]" + TypeName(t.Elem())
	case t.Kind() == reflect.Map:
		n = "map[" + TypeName(t.Key()) + "]" + TypeName(t.Elem())
	case t.Kind() == reflect.Struct:
		n = "struct{"
		for i := range t.NumField() {
			f := t.Field(i)
			n += f.PkgPath + "." + f.Name + " " + TypeName(f.Type) + ";"
		}
		n += "}"
	default:
		n = t.String()
	}
	typeNames.Store(t, n)
	return n
}

// Fingerprint names a normalized statement in logs and stats: 16 hex
// digits of its FNV-1a hash (a name, not a key: texts may collide).
func Fingerprint(normalized string) string {
	h := fnv.New64a()
	h.Write([]byte(normalized))
	return fmt.Sprintf("%016x", h.Sum64())
}

// Detach returns a deep copy of args that shares no mutable memory with
// the caller, for an origin query that may outlive its caller (a leader that
// left, a background refresh): a caller that reuses its []byte after leaving
// must not change what the origin sends, nor what its result is keyed by.
// It reports false if some argument cannot be copied (unexported pointers,
// functions): such a statement must not share.
func Detach(args []driver.NamedValue) ([]driver.NamedValue, bool) {
	out := make([]driver.NamedValue, len(args))
	for i, a := range args {
		out[i] = a
		switch v := a.Value.(type) {
		case nil, int64, float64, bool, string, time.Time:
			continue
		case []byte:
			if v != nil {
				out[i].Value = append(make([]byte, 0, len(v)), v...)
			}
			continue
		}
		if c, ok := detachValue(reflect.ValueOf(a.Value), 0); ok {
			out[i].Value = c.Interface()
			continue
		}
		// A Valuer that cannot be copied (big.Int inside, say) goes to the
		// origin as the driver.Value it stands for, as database/sql's own
		// conversion would send it.
		vr, ok := a.Value.(driver.Valuer)
		if !ok {
			return nil, false
		}
		v, err := vr.Value()
		if err != nil || !driver.IsValue(v) {
			return nil, false
		}
		if b, isBytes := v.([]byte); isBytes && b != nil {
			v = append([]byte(nil), b...)
		}
		out[i].Value = v
	}
	return out, true
}

// detachValue deep-copies v. Values without references (numbers, strings,
// structs of them, time.Time) are copied by assignment; slices, maps and
// pointers are copied element by element.
func detachValue(v reflect.Value, depth int) (reflect.Value, bool) {
	if depth > 16 {
		return v, false
	}
	t := v.Type()
	if !hasReferences(t) {
		c := reflect.New(t).Elem()
		c.Set(v)
		return c, true
	}
	switch v.Kind() {
	case reflect.Slice, reflect.Array:
		var c reflect.Value
		switch {
		case v.Kind() == reflect.Array:
			c = reflect.New(t).Elem()
		case v.IsNil():
			return reflect.Zero(t), true
		default:
			c = reflect.MakeSlice(t, v.Len(), v.Len())
		}
		for i := range v.Len() {
			e, ok := detachValue(v.Index(i), depth+1)
			if !ok {
				return v, false
			}
			c.Index(i).Set(e)
		}
		return c, true
	case reflect.Map:
		if v.IsNil() {
			return reflect.Zero(t), true
		}
		c := reflect.MakeMapWithSize(t, v.Len())
		for it := v.MapRange(); it.Next(); {
			k, ok := detachValue(it.Key(), depth+1)
			if !ok {
				return v, false
			}
			e, ok := detachValue(it.Value(), depth+1)
			if !ok {
				return v, false
			}
			c.SetMapIndex(k, e)
		}
		return c, true
	case reflect.Pointer:
		if v.IsNil() {
			return reflect.Zero(t), true
		}
		e, ok := detachValue(v.Elem(), depth+1)
		if !ok {
			return v, false
		}
		c := reflect.New(t.Elem())
		c.Elem().Set(e)
		return c, true
	case reflect.Interface:
		if v.IsNil() {
			return reflect.Zero(t), true
		}
		e, ok := detachValue(v.Elem(), depth+1)
		if !ok {
			return v, false
		}
		c := reflect.New(t).Elem()
		c.Set(e)
		return c, true
	case reflect.Struct:
		c := reflect.New(t).Elem()
		for i := range v.NumField() {
			if !t.Field(i).IsExported() {
				return v, false // cannot copy what it points to
			}
			e, ok := detachValue(v.Field(i), depth+1)
			if !ok {
				return v, false
			}
			c.Field(i).Set(e)
		}
		return c, true
	}
	return v, false
}

var referenceFree sync.Map // reflect.Type → bool

// hasReferences reports whether a value of type t may point to memory that
// a copy by assignment would share (time.Time's *Location is immutable).
func hasReferences(t reflect.Type) bool {
	if r, ok := referenceFree.Load(t); ok {
		return !r.(bool)
	}
	var refs bool
	switch t.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128, reflect.String:
	case reflect.Array:
		refs = hasReferences(t.Elem())
	case reflect.Struct:
		if t == timeType {
			break
		}
		for i := range t.NumField() {
			if hasReferences(t.Field(i).Type) {
				refs = true
				break
			}
		}
	default:
		refs = true
	}
	referenceFree.Store(t, !refs)
	return refs
}
