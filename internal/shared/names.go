package shared

import (
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"slices"
	"strings"

	"github.com/sqlflight/sqlflight/internal/epoch"
)

// FleetRows returns the row writes of rws as an invalidation carries them
// (nil for none): columns sorted, each with its values. A row write
// without pins becomes one of no column, which BoundRows counts as a write
// to its table.
func FleetRows[P Pins](rws []epoch.RowWrite) []P {
	if len(rws) == 0 {
		return nil
	}
	out := make([]P, 0, len(rws))
	for _, rw := range rws {
		rp := row{Table: rw.Table, Columns: slices.Sorted(maps.Keys(rw.Pins))}
		rp.Values = make([][]string, len(rp.Columns))
		for i, c := range rp.Columns {
			rp.Values[i] = rw.Pins[c]
		}
		out = append(out, P(rp))
	}
	return out
}

// LocalRows returns the row writes of rows (well formed: see BoundRows)
// for the epochs, their tables by epoch.TableKey (nil for none). The
// values are shared with rows, capped so that an append copies them.
func LocalRows[P Pins](rows []P) []epoch.RowWrite {
	if len(rows) == 0 {
		return nil
	}
	out := make([]epoch.RowWrite, 0, len(rows))
	for _, p := range rows {
		rp := row(p)
		rw := epoch.RowWrite{Table: epoch.TableKey(rp.Table), Pins: make(map[string][]string, len(rp.Columns))}
		for i, c := range rp.Columns {
			rw.Pins[c] = slices.Clip(rp.Values[i])
		}
		out = append(out, rw)
	}
	return out
}

// PinSetName is the epoch name (see EpochNames) of the last write to
// rows' table pinned on no column of the read's.
func PinSetName(rows *epoch.RowDeps) string {
	return rows.Table + "\x00p" + strings.Join(rows.Cols, "\x00")
}

// EpochNames returns the epoch names a read of tables checks in the tier:
// the tables' (see EpochKeys), and in place of the table whose rows it
// depends on (rows, may be nil; ignored if its table is not among tables),
// that table's coarse epoch (table NUL "c"), its pin-set epoch
// (PinSetName) and its tags' epochs (table NUL "t" column NUL value).
// Table names hold no NUL (see BoundedTables), so the forms are apart.
func EpochNames(tables []string, rows *epoch.RowDeps) []string {
	keys := EpochKeys(tables, true)
	if rows == nil || !slices.Contains(keys, rows.Table) {
		return keys
	}
	out := make([]string, 0, len(keys)+2+len(rows.Keys))
	for _, k := range keys {
		if k != rows.Table {
			out = append(out, k)
			continue
		}
		out = append(out, k+"\x00c", PinSetName(rows))
		for _, tk := range rows.Keys {
			out = append(out, k+"\x00t"+tk[len(k)+1:])
		}
	}
	return out
}

// EpochKeys returns the distinct epoch names (epoch.TableKey) of tables,
// in their order, or nil when they are not known (every table).
func EpochKeys(tables []string, known bool) []string {
	if !known {
		return nil
	}
	keys := make([]string, 0, len(tables))
	for _, t := range tables {
		if k := epoch.TableKey(t); !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	return keys
}

// Key is the key in the tier of a read: a digest (128 bits, in hex) of
// fleet, the fleet-wide name of the read's scope, and key, the read's key
// without what is the process's own (its scope's number). Reads under
// different fleet names never share a key; the empty name is a name like
// any other (the caller does not use the tier for a scope without one).
func Key(fleet, key string) string {
	h := sha256.New()
	h.Write([]byte("sqlflight/l2/1\x00"))
	h.Write([]byte(fleet))
	h.Write([]byte{0})
	h.Write([]byte(key))
	var sum [sha256.Size]byte
	return hex.EncodeToString(h.Sum(sum[:0])[:16])
}
