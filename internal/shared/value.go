package shared

import (
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/sqlflight/sqlflight/internal/key"
	"github.com/sqlflight/sqlflight/internal/resultset"
	"github.com/sqlflight/sqlflight/internal/seal"
	"github.com/sqlflight/sqlflight/internal/wire"
)

// Values in the tier: sealed (internal/seal: a MAC, or AES-GCM, under a
// key derived from the fleet secret, bound to the namespace, the key and
// the version), around a body of a header of their own and the wire
// encoding of the result.
//
//	body   = header | wire
//	header = format (1 byte, = 2) | sv(filled, Unix ns) | uv(soft) | uv(hard) | uv(last) | uv(delta)
//
// soft, hard and last are durations after filled, in ns; hard ≥ soft and
// last ≥ hard. (Format 1, with a CRC where the MAC now is, is no longer
// read: such values are misses.)
const format = 2

// Entry is what a value in the tier carries of a cached entry: its result
// and the deadlines of the policy of the read that filled it.
type Entry struct {
	Res    *resultset.Result
	Filled time.Time
	Soft   time.Time // fresh until here
	Hard   time.Time // served stale until here
	Last   time.Time // served when the origin fails until here
	Delta  time.Duration
}

// ErrFormat is the error of a body that is not of the format this package
// writes (an empty one, or of an older format): a miss.
var ErrFormat = errors.New("sqlflight: unknown shared value")

// ErrUnknownScanType is the error of a body naming a scan type this process
// does not know (see Encode): a miss.
var ErrUnknownScanType = errors.New("sqlflight: unknown scan type in a shared value")

// Encode returns the body of e's value, with seal.Prefix bytes of room in
// front for seal.Ring.SealValue. It registers the scan types of e's
// columns, so that this process can decode what it encoded. A deadline
// before Filled, or out of order, makes a body that Decode refuses.
func Encode(e Entry) ([]byte, error) {
	w := ToWire(e.Res)
	b := make([]byte, seal.Prefix, seal.Prefix+48+e.Res.Bytes)
	b = append(b, format)
	b = binary.AppendVarint(b, e.Filled.UnixNano())
	b = binary.AppendUvarint(b, uint64(e.Soft.Sub(e.Filled)))
	b = binary.AppendUvarint(b, uint64(e.Hard.Sub(e.Filled)))
	b = binary.AppendUvarint(b, uint64(e.Last.Sub(e.Filled)))
	b = binary.AppendUvarint(b, uint64(e.Delta))
	return wire.Encode(b, w)
}

// DecodeSlack is room Limits leaves over a policy's byte limit for what
// the origin counts by estimate (columns' metadata, result sets).
const DecodeSlack = 16 << 10

// Limits are the bounds of a value read from the tier for a reader whose
// policy shares at most maxRows rows and maxBytes bytes (zero or less:
// defRows and defBytes, the Shield's): what that reader would share from
// its own origin, plus an eighth and DecodeSlack for what the origin
// counts by estimate (it counts values as the decoder charges them,
// wire.Size), so that a result the origin shared is never refused where it
// is read. A value over them is not read at all (a miss).
func Limits(maxRows int, maxBytes int64, defRows int, defBytes int64) wire.Limits {
	lim := wire.Limits{MaxRows: maxRows, MaxBytes: maxBytes}
	if lim.MaxRows <= 0 {
		lim.MaxRows = defRows
	}
	if lim.MaxBytes <= 0 {
		lim.MaxBytes = defBytes
	}
	lim.MaxBytes += lim.MaxBytes/8 + DecodeSlack
	return lim
}

// Framing bounds what a value holds besides its wire payload: the seal (at
// most 33 bytes), the header (at most 51) and the wire framing (9).
const Framing = 128

// Open checks data, a value read under key in namespace ns with version,
// and decodes it within lim. A value longer than any lim accepts
// (lim.MaxBytes plus Framing) is refused with wire.ErrLimit before its
// seal is checked; one whose seal fails, with the ring's error
// (seal.ErrForged, seal.ErrFormat); nothing of it is decoded before its
// seal is checked.
func Open(ring *seal.Ring, ns, key string, data []byte, version uint64, lim wire.Limits) (Entry, error) {
	if max := lim.MaxBytes; max > 0 && int64(len(data)) > max+Framing {
		return Entry{}, fmt.Errorf("%w: %d bytes of value", wire.ErrLimit, len(data))
	}
	body, err := ring.OpenValue(data, ns, key, version)
	if err != nil {
		return Entry{}, err
	}
	return Decode(body, lim)
}

// Decode decodes the body of a value (after its seal is checked) within
// lim (see wire.Limits): a value that is or would decode to more is
// rejected before it costs more than lim.MaxBytes or lim.MaxZoneLoads time
// zone lookups. A body of another format is ErrFormat; one whose deadlines
// are out of order (soft after hard, hard after last) or not encoded
// right, wire.ErrCorrupt; one naming an unknown scan type,
// ErrUnknownScanType.
func Decode(b []byte, lim wire.Limits) (Entry, error) {
	if len(b) == 0 || b[0] != format {
		return Entry{}, ErrFormat
	}
	b = b[1:]
	filled, n := binary.Varint(b)
	if n <= 0 {
		return Entry{}, wire.ErrCorrupt
	}
	b = b[n:]
	var d [4]uint64
	for i := range d {
		v, n := binary.Uvarint(b)
		if n <= 0 || v > 1<<62 {
			return Entry{}, wire.ErrCorrupt
		}
		d[i], b = v, b[n:]
	}
	if d[0] > d[1] || d[1] > d[2] {
		return Entry{}, wire.ErrCorrupt
	}
	w, err := wire.Decode(b, lim)
	if err != nil {
		return Entry{}, err
	}
	res, err := FromWire(w)
	if err != nil {
		return Entry{}, err
	}
	at := time.Unix(0, filled)
	return Entry{Res: res, Filled: at, Delta: time.Duration(d[3]),
		Soft: at.Add(time.Duration(d[0])), Hard: at.Add(time.Duration(d[1])), Last: at.Add(time.Duration(d[2]))}, nil
}

// Scan types travel by name (key.TypeName); a decoding process knows the
// driver.Value types, the database/sql Null types, and every type it has
// encoded itself. A name it does not know makes the value a miss.
var scanTypes sync.Map // string → reflect.Type

func init() {
	for _, t := range []reflect.Type{
		reflect.TypeFor[int64](), reflect.TypeFor[int32](), reflect.TypeFor[int16](), reflect.TypeFor[int8](),
		reflect.TypeFor[int](), reflect.TypeFor[uint64](), reflect.TypeFor[uint32](), reflect.TypeFor[uint16](),
		reflect.TypeFor[uint8](), reflect.TypeFor[uint](), reflect.TypeFor[float64](), reflect.TypeFor[float32](),
		reflect.TypeFor[bool](), reflect.TypeFor[string](), reflect.TypeFor[[]byte](), reflect.TypeFor[time.Time](),
		reflect.TypeFor[any](), reflect.TypeFor[sql.RawBytes](),
		reflect.TypeFor[sql.NullInt64](), reflect.TypeFor[sql.NullInt32](), reflect.TypeFor[sql.NullInt16](),
		reflect.TypeFor[sql.NullByte](), reflect.TypeFor[sql.NullFloat64](), reflect.TypeFor[sql.NullBool](),
		reflect.TypeFor[sql.NullString](), reflect.TypeFor[sql.NullTime](),
	} {
		scanTypes.Store(key.TypeName(t), t)
	}
}

// ToWire returns res as the wire encodes it, sharing its values and
// column strings, and registers its columns' scan types (see Decode).
func ToWire(res *resultset.Result) *wire.Result {
	w := &wire.Result{Mask: res.Mask, Sets: make([]wire.Set, len(res.Sets))}
	for i := range res.Sets {
		rs := &res.Sets[i]
		ws := &w.Sets[i]
		ws.Rows, ws.Values = rs.N, rs.Vals
		ws.Columns = make([]wire.Column, len(rs.Names))
		for j, name := range rs.Names {
			c := &rs.Cols[j]
			wc := &ws.Columns[j]
			wc.Name, wc.DatabaseType = name, c.DBType
			if c.ScanType != nil {
				wc.ScanType = key.TypeName(c.ScanType)
				if _, ok := scanTypes.Load(wc.ScanType); !ok {
					scanTypes.Store(wc.ScanType, c.ScanType)
				}
			}
			wc.Length, wc.HasLength = c.Length, c.LengthOK
			wc.Nullable, wc.HasNullable = c.Nullable, c.NullOK
			wc.Precision, wc.Scale, wc.HasPrecisionScale = c.Precision, c.Scale, c.PrecisionScaleOK
		}
	}
	return w
}

// Sizes of what FromWire keeps and what it leaves of a decoded result.
var (
	setBytes    = int64(reflect.TypeFor[resultset.Set]().Size())
	columnBytes = int64(reflect.TypeFor[resultset.Column]().Size() + reflect.TypeFor[string]().Size()) // cols and names
)

// FromWire makes a result of w, sharing its values and column strings, or
// returns ErrUnknownScanType. Its size is w's (wire.Result.Bytes: values,
// strings, locations made for them) less the wire's sets, columns and scan
// type names, which are dropped, plus its own sets and columns.
func FromWire(w *wire.Result) (*resultset.Result, error) {
	res := &resultset.Result{Mask: w.Mask, Sets: make([]resultset.Set, len(w.Sets)), Bytes: w.Bytes}
	for i := range w.Sets {
		ws := &w.Sets[i]
		rs := &res.Sets[i]
		rs.N, rs.Vals = ws.Rows, ws.Values
		rs.Names = make([]string, len(ws.Columns))
		rs.Cols = make([]resultset.Column, len(ws.Columns))
		res.Bytes += setBytes - wire.SetBytes + int64(len(ws.Columns))*(columnBytes-wire.ColumnBytes)
		for j := range ws.Columns {
			wc := &ws.Columns[j]
			c := &rs.Cols[j]
			rs.Names[j], c.DBType = wc.Name, wc.DatabaseType
			if wc.ScanType != "" {
				t, ok := scanTypes.Load(wc.ScanType)
				if !ok {
					return nil, ErrUnknownScanType
				}
				c.ScanType = t.(reflect.Type)
				res.Bytes -= wire.ContentBytes(len(wc.ScanType))
			}
			c.Length, c.LengthOK = wc.Length, wc.HasLength
			c.Nullable, c.NullOK = wc.Nullable, wc.HasNullable
			c.Precision, c.Scale, c.PrecisionScaleOK = wc.Precision, wc.Scale, wc.HasPrecisionScale
		}
	}
	return res, nil
}
