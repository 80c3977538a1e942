// Package wire is a versioned binary codec for a materialized query result,
// the form in which results are stored in a shared (L2) cache tier.
//
// It mirrors the root package's in-memory result (rows.go) with its own
// exported types, so that it does not import the root package.
//
// # Format, version 1
//
// All integers are Go encoding/binary varints: "uv" is an unsigned varint
// (binary.AppendUvarint), "sv" a signed zig-zag varint (binary.AppendVarint).
// A string or byte field is uv(length) followed by that many bytes.
//
//	payload  = magic "SQFW" (4 bytes) | version (1 byte, = 1) | body | crc (4 bytes)
//	crc      = CRC-32C (Castagnoli) of magic, version and body, little endian
//	body     = uv(mask) uv(nsets) set*nsets
//	set      = uv(ncols) column*ncols uv(rows) value*(rows*ncols)   (row-major)
//	column   = str(name) str(scanType) str(databaseType) flags(1 byte)
//	           sv(length) sv(precision) sv(scale)
//	flags    = bit0 HasLength, bit1 Nullable, bit2 HasNullable,
//	           bit3 HasPrecisionScale; other bits must be 0
//	value    = tag(1 byte) payload:
//	  0 nil
//	  1 int64      sv(v)
//	  2 float64    8 bytes, math.Float64bits little endian (NaN payloads, -0 kept)
//	  3 false      (no payload)
//	  4 true       (no payload)
//	  5 []byte(nil)(no payload)
//	  6 []byte     bytes(v) (a zero length decodes as a non-nil empty slice)
//	  7 string     bytes(v)
//	  8 time.Time  sv(unix seconds) uv(nanoseconds, < 1e9) zone
//	zone     = kind(1 byte) ...:
//	  0 UTC
//	  1 Local                       decoded as the decoding process's time.Local
//	  2 fixed  str(name) sv(offset seconds)
//	  3 named  str(location name) str(zone abbreviation) sv(offset seconds)
//
// The body must end exactly where the checksum begins. Decode checks magic,
// then version (ErrVersion), then length and checksum, then parses; any
// malformation is ErrCorrupt. The version is checked before the checksum so
// that a later version may change everything after it, including the
// checksum; hence an altered version byte yields ErrVersion rather than
// ErrCorrupt (still an error, never a row). Callers should treat both as a
// cache miss.
//
// Decoding does not tell a nil slice from an empty one for Sets, Columns and
// Values (it returns nil); for []byte values it does.
//
// # Time zones
//
// The instant is kept to the nanosecond; the monotonic clock reading is
// dropped. time.UTC and time.Local are encoded as such (a Local time decodes
// in the decoder's Local, which is what that process's driver would return).
// A location whose name equals its zone abbreviation and whose offset is the
// same half a year before and after is a fixed zone (time.FixedZone always
// makes such a location) and round-trips exactly as name+offset; a tz
// database location that looks so at that instant (e.g. "EST", or "CET"
// where it had no DST) decodes as such a fixed zone, with the same wall
// clock, name and offset. Any other location is "named": at decode time it
// is loaded with time.LoadLocation (see Limits.MaxZoneLoads; the outcome,
// success or failure, is remembered by the process for up to 1,024 names,
// and a name longer than 64 bytes is never looked up); if it cannot be
// loaded, or its name, abbreviation or offset at that instant differ from
// what was encoded (different tzdata), it falls back to
// time.FixedZone(abbreviation, offset), so the wall clock and printed zone
// are always what the encoder saw (only the location's name and future
// transitions may then differ). Values of one Decode share the fixed zones
// it makes.
//
// # Limits
//
// Decode reads input it does not trust (a shared tier anyone with access
// can write to) under Limits: the payload's length, the decoded result's
// memory, its rows, its sets and the time zones it may load. Every count
// and length is checked against the remaining input and against what is
// left of the limits before anything is allocated, so a payload over the
// limits is rejected (ErrLimit) having allocated little more than a small
// constant, whatever it claims. Result.Bytes is the decoded result's
// memory as Decode counts it: the Set and Column structs, column strings,
// one interface word pair per value, each value's boxed payload
// (string and slice headers, 8 bytes of a number, the 24 bytes of a
// time.Time), string and []byte contents, and each time.Location made for
// the result. A location loaded from tzdata is shared by the process and
// not counted.
package wire

import (
	"database/sql/driver"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"reflect"
	"sync"
	"sync/atomic"
	"time"
)

// Version is the format version Encode writes and Decode reads.
const Version = 1

// MaxRows is the largest row count of one set that Encode writes and Decode
// accepts.
const MaxRows = math.MaxInt32

const (
	magic      = "SQFW"
	headerLen  = len(magic) + 1
	trailerLen = 4
)

var (
	// ErrCorrupt is returned by Decode for a payload that is not a valid
	// encoding: truncated, altered, or malformed.
	ErrCorrupt = errors.New("wire: corrupt payload")
	// ErrVersion is returned by Decode for a payload of a format version it
	// does not know.
	ErrVersion = errors.New("wire: unknown format version")
	// ErrLimit is returned (wrapped, naming the limit) by Decode for a
	// payload that is or decodes to more than its Limits allow.
	ErrLimit = errors.New("wire: payload over the decoder's limits")
)

// Limits bound what Decode may read and build from one payload. A zero or
// negative field takes its default.
type Limits struct {
	// MaxBytes bounds the payload's length (its format header and
	// checksum aside), checked before anything else, and the decoded
	// result's memory (Result.Bytes), checked before each allocation.
	// Default DefaultMaxBytes.
	MaxBytes int64
	// MaxRows bounds the rows of all sets together (rows of no column
	// included). Default DefaultMaxRows.
	MaxRows int
	// MaxSets bounds the number of sets. Default DefaultMaxSets.
	MaxSets int
	// MaxZoneLoads bounds the time zones one Decode may look up in the tz
	// database (time.LoadLocation) that the process has not looked up
	// before, successfully or not: a payload needing more is rejected.
	// Default DefaultMaxZoneLoads.
	MaxZoneLoads int
}

// Defaults of Limits.
const (
	DefaultMaxBytes     = 64 << 20
	DefaultMaxRows      = 1 << 20
	DefaultMaxSets      = 1024
	DefaultMaxZoneLoads = 16
)

func (l Limits) withDefaults() Limits {
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultMaxBytes
	}
	if l.MaxRows <= 0 {
		l.MaxRows = DefaultMaxRows
	}
	if l.MaxSets <= 0 {
		l.MaxSets = DefaultMaxSets
	}
	if l.MaxZoneLoads <= 0 {
		l.MaxZoneLoads = DefaultMaxZoneLoads
	}
	return l
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Column is what the parent rows said of one column.
type Column struct {
	Name              string
	ScanType          string // reflect type name as text; "" if none
	DatabaseType      string
	Length            int64
	HasLength         bool
	Nullable          bool
	HasNullable       bool
	Precision, Scale  int64
	HasPrecisionScale bool
}

// Set is one result set: Values is row-major, len(Values) == Rows*len(Columns).
// Decode leaves Columns and Values nil when they are empty.
type Set struct {
	Columns []Column
	Rows    int
	Values  []driver.Value
}

// Result is a whole materialized result. Decode leaves Sets nil when empty.
type Result struct {
	Sets []Set
	Mask uint16 // optional Rows interfaces of the parent
	// Bytes is set by Decode: the memory the result holds, as counted
	// under Limits.MaxBytes (see the package doc). Encode ignores it.
	Bytes int64
}

// Sizes Decode counts (Result.Bytes).
var (
	// SetBytes and ColumnBytes are the sizes of a Set and a Column struct.
	SetBytes    = int64(reflect.TypeFor[Set]().Size())
	ColumnBytes = int64(reflect.TypeFor[Column]().Size())
)

const (
	valueBytes = 16 // an interface in Values
	wordBytes  = 8  // a boxed int64 or float64
	stringBox  = 16 // a boxed string header
	sliceBox   = 24 // a boxed []byte header
	timeBox    = 24 // a boxed time.Time
	// locationBytes is a time.FixedZone location: the Location, its one
	// zone and its one transition (measured: 160 bytes), name aside.
	locationBytes = 160
)

const (
	tagNil = iota
	tagInt64
	tagFloat64
	tagFalse
	tagTrue
	tagBytesNil
	tagBytes
	tagString
	tagTime
)

const (
	zoneUTC = iota
	zoneLocal
	zoneFixed
	zoneNamed
)

const (
	flagHasLength = 1 << iota
	flagNullable
	flagHasNullable
	flagHasPrecisionScale
	flagAll = 1<<iota - 1
)

// Encode appends the encoding of r to dst and returns the extended slice.
// It fails for a set whose shape is inconsistent or a value whose type is
// not one of driver.Value's.
func Encode(dst []byte, r *Result) ([]byte, error) {
	if r == nil {
		return dst, errors.New("wire: nil result")
	}
	start := len(dst)
	dst = append(dst, magic...)
	dst = append(dst, Version)
	dst = binary.AppendUvarint(dst, uint64(r.Mask))
	dst = binary.AppendUvarint(dst, uint64(len(r.Sets)))
	for si := range r.Sets {
		s := &r.Sets[si]
		if s.Rows < 0 || s.Rows > MaxRows {
			return dst[:start], fmt.Errorf("wire: set %d: row count %d out of range", si, s.Rows)
		}
		if uint64(len(s.Values)) != uint64(s.Rows)*uint64(len(s.Columns)) {
			return dst[:start], fmt.Errorf("wire: set %d: %d values for %d rows of %d columns", si, len(s.Values), s.Rows, len(s.Columns))
		}
		dst = binary.AppendUvarint(dst, uint64(len(s.Columns)))
		for i := range s.Columns {
			dst = appendColumn(dst, &s.Columns[i])
		}
		dst = binary.AppendUvarint(dst, uint64(s.Rows))
		for i, v := range s.Values {
			var err error
			if dst, err = appendValue(dst, v); err != nil {
				return dst[:start], fmt.Errorf("wire: set %d value %d: %w", si, i, err)
			}
		}
	}
	return binary.LittleEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli)), nil
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

func appendColumn(dst []byte, c *Column) []byte {
	dst = appendString(dst, c.Name)
	dst = appendString(dst, c.ScanType)
	dst = appendString(dst, c.DatabaseType)
	var f byte
	if c.HasLength {
		f |= flagHasLength
	}
	if c.Nullable {
		f |= flagNullable
	}
	if c.HasNullable {
		f |= flagHasNullable
	}
	if c.HasPrecisionScale {
		f |= flagHasPrecisionScale
	}
	dst = append(dst, f)
	dst = binary.AppendVarint(dst, c.Length)
	dst = binary.AppendVarint(dst, c.Precision)
	return binary.AppendVarint(dst, c.Scale)
}

func appendValue(dst []byte, v driver.Value) ([]byte, error) {
	switch v := v.(type) {
	case nil:
		return append(dst, tagNil), nil
	case int64:
		return binary.AppendVarint(append(dst, tagInt64), v), nil
	case float64:
		return binary.LittleEndian.AppendUint64(append(dst, tagFloat64), math.Float64bits(v)), nil
	case bool:
		if v {
			return append(dst, tagTrue), nil
		}
		return append(dst, tagFalse), nil
	case []byte:
		if v == nil {
			return append(dst, tagBytesNil), nil
		}
		dst = binary.AppendUvarint(append(dst, tagBytes), uint64(len(v)))
		return append(dst, v...), nil
	case string:
		return appendString(append(dst, tagString), v), nil
	case time.Time:
		return appendTime(append(dst, tagTime), v), nil
	}
	return dst, fmt.Errorf("unsupported value type %T", v)
}

func appendTime(dst []byte, t time.Time) []byte {
	dst = binary.AppendVarint(dst, t.Unix())
	dst = binary.AppendUvarint(dst, uint64(t.Nanosecond()))
	loc := t.Location()
	switch loc {
	case time.UTC:
		return append(dst, zoneUTC)
	case time.Local:
		return append(dst, zoneLocal)
	}
	abbr, off := t.Zone()
	name := loc.String()
	if name == abbr && isFixed(t, off) {
		dst = appendString(append(dst, zoneFixed), abbr)
		return binary.AppendVarint(dst, int64(off))
	}
	dst = appendString(append(dst, zoneNamed), name)
	dst = appendString(dst, abbr)
	return binary.AppendVarint(dst, int64(off))
}

// Decode decodes a payload written by Encode, within lim. It returns
// ErrVersion for a payload of another format version, an error wrapping
// ErrLimit for one over lim, and ErrCorrupt for any other invalid input.
// The result shares no memory with b.
func Decode(b []byte, lim Limits) (*Result, error) {
	if len(b) < headerLen || string(b[:len(magic)]) != magic {
		return nil, ErrCorrupt
	}
	if b[len(magic)] != Version {
		return nil, ErrVersion
	}
	if len(b) < headerLen+trailerLen {
		return nil, ErrCorrupt
	}
	lim = lim.withDefaults()
	if int64(len(b)-headerLen-trailerLen) > lim.MaxBytes {
		return nil, fmt.Errorf("%w: %d bytes of payload", ErrLimit, len(b))
	}
	body := b[:len(b)-trailerLen]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(b[len(body):]) {
		return nil, ErrCorrupt
	}
	d := decoder{b: body[headerLen:], lim: lim}
	r, ok := d.result()
	if d.err != nil {
		return nil, d.err
	}
	if !ok || len(d.b) != 0 {
		return nil, ErrCorrupt
	}
	r.Bytes = d.used
	return r, nil
}

type decoder struct {
	b   []byte
	lim Limits
	err error // a limit exceeded

	used  int64 // memory allocated for the result so far
	rows  int   // rows of all sets so far
	loads int   // zone loads so far
	zones []zoneKey
}

// zoneKey is a fixed zone this decode made, to share among its values.
type zoneKey struct {
	name string
	off  int
	loc  *time.Location
}

// maxZonesKept bounds the fixed zones one decoder remembers.
const maxZonesKept = 8

// over records that limit what was exceeded and returns false.
func (d *decoder) over(what string) bool {
	d.err = fmt.Errorf("%w: %s", ErrLimit, what)
	return false
}

// charge counts n more bytes of memory, reporting false (and recording the
// error) if that would exceed MaxBytes. Call it before allocating.
func (d *decoder) charge(n int64) bool {
	if n > d.lim.MaxBytes-d.used {
		return d.over("memory")
	}
	d.used += n
	return true
}

func (d *decoder) uvarint() (uint64, bool) {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		return 0, false
	}
	d.b = d.b[n:]
	return v, true
}

func (d *decoder) varint() (int64, bool) {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		return 0, false
	}
	d.b = d.b[n:]
	return v, true
}

func (d *decoder) byte() (byte, bool) {
	if len(d.b) == 0 {
		return 0, false
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c, true
}

// count reads a count of items of at least min bytes each, checked against
// the remaining input.
func (d *decoder) count(min int) (int, bool) {
	n, ok := d.uvarint()
	if !ok || n > uint64(len(d.b)/min) {
		return 0, false
	}
	return int(n), true
}

func (d *decoder) raw() ([]byte, bool) {
	n, ok := d.uvarint()
	if !ok || n > uint64(len(d.b)) {
		return nil, false
	}
	p := d.b[:n]
	d.b = d.b[n:]
	return p, true
}

// ContentBytes is the memory Decode counts for n bytes of string or []byte
// contents: the allocator's smallest unit is 8 bytes.
func ContentBytes(n int) int64 { return int64(n+7) &^ 7 }

// Size is the memory a decoded value holds in Set.Values (its interface
// and what it boxes), as Decode charges it: what a producer of results
// counts too, so that a result within a limit where it was made is within
// the same limit where it is read.
func Size(v driver.Value) int64 {
	switch v := v.(type) {
	case int64, float64:
		return valueBytes + wordBytes
	case []byte:
		if v == nil {
			return valueBytes
		}
		return valueBytes + sliceBox + ContentBytes(len(v))
	case string:
		return valueBytes + stringBox + ContentBytes(len(v))
	case time.Time:
		return valueBytes + timeBox
	}
	return valueBytes // nil, bool
}

// string reads a string, counting its bytes.
func (d *decoder) string() (string, bool) {
	p, ok := d.raw()
	if !ok || !d.charge(ContentBytes(len(p))) {
		return "", false
	}
	return string(p), true
}

const (
	minSetLen    = 2 // uv(ncols) uv(rows)
	minColumnLen = 7 // 3 empty strings, flags, 3 varints
)

func (d *decoder) result() (*Result, bool) {
	mask, ok := d.uvarint()
	if !ok || mask > math.MaxUint16 {
		return nil, false
	}
	r := &Result{Mask: uint16(mask)}
	nsets, ok := d.count(minSetLen)
	if !ok {
		return nil, false
	}
	if nsets > d.lim.MaxSets {
		return nil, d.over("sets")
	}
	if !d.charge(int64(nsets) * SetBytes) {
		return nil, false
	}
	if nsets > 0 {
		r.Sets = make([]Set, nsets)
	}
	for i := range r.Sets {
		if !d.set(&r.Sets[i]) {
			return nil, false
		}
	}
	return r, true
}

func (d *decoder) set(s *Set) bool {
	ncols, ok := d.count(minColumnLen)
	if !ok || !d.charge(int64(ncols)*ColumnBytes) {
		return false
	}
	if ncols > 0 {
		s.Columns = make([]Column, ncols)
	}
	for i := range s.Columns {
		if !d.column(&s.Columns[i]) {
			return false
		}
	}
	rows, ok := d.uvarint()
	if !ok || rows > MaxRows {
		return false
	}
	// Every value takes at least its tag byte.
	if ncols > 0 && rows > uint64(len(d.b))/uint64(ncols) {
		return false
	}
	if rows > uint64(d.lim.MaxRows-d.rows) {
		return d.over("rows")
	}
	d.rows += int(rows)
	s.Rows = int(rows)
	n := int(rows) * ncols
	if n == 0 {
		return true
	}
	if !d.charge(int64(n) * valueBytes) {
		return false
	}
	s.Values = make([]driver.Value, n)
	for i := range s.Values {
		if s.Values[i], ok = d.value(); !ok {
			return false
		}
	}
	return true
}

func (d *decoder) column(c *Column) bool {
	var ok bool
	if c.Name, ok = d.string(); !ok {
		return false
	}
	if c.ScanType, ok = d.string(); !ok {
		return false
	}
	if c.DatabaseType, ok = d.string(); !ok {
		return false
	}
	f, ok := d.byte()
	if !ok || f&^flagAll != 0 {
		return false
	}
	c.HasLength = f&flagHasLength != 0
	c.Nullable = f&flagNullable != 0
	c.HasNullable = f&flagHasNullable != 0
	c.HasPrecisionScale = f&flagHasPrecisionScale != 0
	if c.Length, ok = d.varint(); !ok {
		return false
	}
	if c.Precision, ok = d.varint(); !ok {
		return false
	}
	c.Scale, ok = d.varint()
	return ok
}

func (d *decoder) value() (driver.Value, bool) {
	tag, ok := d.byte()
	if !ok {
		return nil, false
	}
	switch tag {
	case tagNil:
		return nil, true
	case tagInt64:
		v, ok := d.varint()
		return v, ok && d.charge(wordBytes)
	case tagFloat64:
		if len(d.b) < 8 || !d.charge(wordBytes) {
			return nil, false
		}
		v := math.Float64frombits(binary.LittleEndian.Uint64(d.b))
		d.b = d.b[8:]
		return v, true
	case tagFalse:
		return false, true
	case tagTrue:
		return true, true
	case tagBytesNil:
		return []byte(nil), true
	case tagBytes:
		p, ok := d.raw()
		if !ok || !d.charge(sliceBox+ContentBytes(len(p))) {
			return nil, false
		}
		return append(make([]byte, 0, len(p)), p...), true
	case tagString:
		if !d.charge(stringBox) {
			return nil, false
		}
		s, ok := d.string()
		return s, ok
	case tagTime:
		if !d.charge(timeBox) {
			return nil, false
		}
		t, ok := d.time()
		return t, ok
	}
	return nil, false
}

func (d *decoder) time() (time.Time, bool) {
	sec, ok := d.varint()
	if !ok {
		return time.Time{}, false
	}
	nsec, ok := d.uvarint()
	if !ok || nsec >= 1e9 {
		return time.Time{}, false
	}
	t := time.Unix(sec, int64(nsec))
	kind, ok := d.byte()
	if !ok {
		return time.Time{}, false
	}
	switch kind {
	case zoneUTC:
		return t.UTC(), true
	case zoneLocal:
		return t.Local(), true
	case zoneFixed:
		name, ok := d.raw()
		if !ok {
			return time.Time{}, false
		}
		off, ok := d.offset()
		if !ok {
			return time.Time{}, false
		}
		loc, ok := d.fixedZone(name, off)
		return t.In(loc), ok
	case zoneNamed:
		name, ok := d.raw()
		if !ok {
			return time.Time{}, false
		}
		abbr, ok := d.raw()
		if !ok {
			return time.Time{}, false
		}
		off, ok := d.offset()
		if !ok {
			return time.Time{}, false
		}
		loc, ok := d.location(name)
		if !ok {
			return time.Time{}, false
		}
		if loc != nil {
			lt := t.In(loc)
			if a, o := lt.Zone(); a == string(abbr) && o == off {
				return lt, true
			}
		}
		loc, ok = d.fixedZone(abbr, off)
		return t.In(loc), ok
	}
	return time.Time{}, false
}

// fixedZone returns time.FixedZone(name, off), made once per decode for
// the last few zones (values of one result mostly share a zone), counting
// each one it makes.
func (d *decoder) fixedZone(name []byte, off int) (*time.Location, bool) {
	for i := range d.zones {
		if z := &d.zones[i]; z.off == off && z.name == string(name) {
			return z.loc, true
		}
	}
	if !d.charge(locationBytes + ContentBytes(len(name))) {
		return nil, false
	}
	z := zoneKey{name: string(name), off: off}
	z.loc = time.FixedZone(z.name, off)
	if len(d.zones) == maxZonesKept {
		copy(d.zones, d.zones[1:])
		d.zones = d.zones[:maxZonesKept-1]
	}
	d.zones = append(d.zones, z)
	return z.loc, true
}

// location returns the tz database location of that name, or nil if there
// is none, charging the decode's budget of zone loads for a name the
// process has not looked up before (it reports false past the budget).
func (d *decoder) location(name []byte) (*time.Location, bool) {
	if loc, ok := zones.lookup(name); ok {
		return loc, true
	}
	if d.loads >= d.lim.MaxZoneLoads {
		return nil, d.over("time zone loads")
	}
	d.loads++
	return zones.load(string(name)), true
}

// isFixed reports whether t's location looks like a fixed zone: the same
// offset half a year before and after t. A zone of a tz database location
// whose abbreviation equals its name ("CET" in winter) is not fixed.
func isFixed(t time.Time, off int) bool {
	const halfYear = 183 * 24 * time.Hour
	_, before := t.Add(-halfYear).Zone()
	_, after := t.Add(halfYear).Zone()
	return before == off && after == off
}

func (d *decoder) offset() (int, bool) {
	v, ok := d.varint()
	if !ok || int64(int(v)) != v {
		return 0, false
	}
	return int(v), true
}

// maxZoneName is the longest location name looked up. tz database names
// are at most about 30 bytes; a longer one is never loaded.
const maxZoneName = 64

// maxZonesMemo bounds the names zoneMemo remembers.
const maxZonesMemo = 1024

// zoneMemo remembers the outcome of time.LoadLocation by name, successes
// and failures alike (a failed lookup costs tens of microseconds of file
// system work). It holds at most maxZonesMemo names: past that, a random
// one is forgotten for each new one.
type zoneMemo struct {
	mu    sync.Mutex
	known map[string]*time.Location // nil: the name does not load
	loads atomic.Int64              // calls of time.LoadLocation
}

var zones = zoneMemo{known: make(map[string]*time.Location)}

// ZoneLookups returns how many times this process looked a time zone up in
// the tz database while decoding (time.LoadLocation calls).
func ZoneLookups() int64 { return zones.loads.Load() }

// lookup returns what the memo knows of name: its location (nil if it does
// not load) and true, or false if name must be loaded. Names that can never
// be a location's are known not to load.
func (m *zoneMemo) lookup(name []byte) (*time.Location, bool) {
	if len(name) == 0 || len(name) > maxZoneName || string(name) == "Local" {
		// LoadLocation maps "" to UTC and "Local" to time.Local: neither
		// is a location of that name.
		return nil, true
	}
	m.mu.Lock()
	loc, ok := m.known[string(name)]
	m.mu.Unlock()
	return loc, ok
}

// load looks name up in the tz database and remembers the outcome. It
// returns nil if it cannot be loaded or is not a location of exactly that
// name.
func (m *zoneMemo) load(name string) *time.Location {
	m.loads.Add(1)
	loc, err := time.LoadLocation(name)
	if err != nil || loc.String() != name {
		loc = nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.known[name]; !ok && len(m.known) >= maxZonesMemo {
		for k := range m.known {
			delete(m.known, k)
			break
		}
	}
	m.known[name] = loc
	return loc
}
