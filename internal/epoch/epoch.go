// Package epoch orders writes and the reads that may be reused across them:
// it says what a write ends.
//
// Every write takes the next number of one sequence ([Epochs.Bump],
// [Epochs.BumpRows]; a write another instance numbered is recorded with
// [Epochs.Stamp]) and stamps what it wrote with that number: the epochs of
// the tables it wrote as a whole, or, when it proves which rows it touched
// ([RowWrite]), only the epochs of those rows' tags (table, column, value:
// [TagKey]) and of its pin set (the set of columns it pinned). A write whose
// tables are not known stamps "all": every table. A cached entry or a
// flight remembers the sequence number ([Epochs.Now]) when it started, and
// asks one question: unchanged since that number for its tables
// ([Epochs.UnchangedSince]), and, when it depends only on the rows of one
// table that its tags select ([RowDeps]), for those rows
// ([Epochs.UnchangedFor])?
//
// # What the answer means
//
// A read's tables are "known" when the caller can name every table it
// depends on; a read whose tables are not known is unchanged only if no
// write at all took a number since (any table may have changed). A read
// tagged on columns C of a table is ended by a write to that table as a
// whole, by a write to its rows whose pins are not known, by a write whose
// pin set shares no column with C (it may have touched any row the read
// selects), and by a write that moved one of its tags. Anything else
// leaves it: a write pinned on id = 6 does not end a read of id = 5.
//
// Table names are compared by [TableKey]: without schema, quotes and case.
// Two tables that differ only there share their epochs, which can only end
// more reads, never fewer.
//
// # Bounds
//
// The epochs keep at most [MaxTables] tables one by one; a write that
// would keep more forgets them all and raises "all" past every epoch it
// forgot, so every table then shares one floor. A table keeps at most
// [MaxPinSets] pin sets; a write with another set counts as a write to the
// table's rows whose pins are not known. At most [MaxTags] tags are kept;
// past it they are forgotten and one tag floor rises past every epoch
// forgotten. Every bound ends more reads than needed, never fewer.
//
// # Order and concurrency
//
// Epochs only move forward: two writes to one table may stamp it in either
// order, and the table keeps the larger number. The caller takes a write's
// number after the write returned, so a read whose sequence is s started
// after every write numbered s or less. A write whose number was taken but whose
// epochs are not stamped yet is not seen: it has not returned to its
// caller yet, so a read may still be ordered before it; once Bump (or
// BumpRows, Stamp, a Raise method) returns, every question asked after it
// sees the write.
//
// An Epochs is safe for concurrent use; its zero value is ready and it
// must not be copied after first use. Taking a number is one atomic add;
// stamping a write's tables, rows and pin sets happens under one lock, so
// a reader sees all of a write's known-table epochs or none of them. A
// reader may see a number taken (Now) before its write's epochs are
// stamped, never the other way round. "All" moves by compare-and-swap
// outside the lock, and is checked again under it, so that a write that
// forgets the tables is never missed.
//
// What the package does not do: it does not know which tables or rows a
// statement writes or reads (its callers do), keeps no time, and forgets
// nothing but by its bounds.
package epoch

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

const (
	// MaxTables bounds the tables whose epochs are kept one by one, so
	// that writes to ever new names (or invalidations naming them) cannot
	// grow memory without bound; past it every table shares "all".
	MaxTables = 4096
	// MaxPinSets bounds the sets of pinned columns remembered per table;
	// a write with another set past it counts as a write to the whole
	// table (its rows not known).
	MaxPinSets = 16
	// MaxTags bounds the tags whose epochs are kept one by one; past it
	// they are forgotten under one floor.
	MaxTags = 1 << 16
)

// Epochs orders writes and flights: every write through the Shield (and
// every write another instance publishes) takes the next sequence number
// and stamps the tables it wrote (or "all" when its tables are unknown); a
// flight remembers the sequence when it started. A flight may be joined
// only if none of its tables was written since. The zero value is ready.
type Epochs struct {
	seq atomic.Uint64
	all atomic.Uint64 // sequence of the last write with unknown tables

	mu     sync.RWMutex
	tables map[string]*tableEpochs
	// tags are the epochs of (table, column, value) tags (TagKey): the last
	// write that touched a row with that value in that column, before or
	// after. tagFloor stands for every tag no longer in the map.
	tags     map[string]uint64
	tagFloor uint64
}

// tableEpochs are one table's epochs. A read that is not tagged is judged
// by any: the last write to the table. A read tagged on columns C of the
// table (RowDeps) is judged by coarse, the last write whose rows are not
// known, by the epochs of the sets of columns that writes pinned, when a
// set shares no column with C (such a write may have touched any row of
// the read), and by its tags' epochs.
type tableEpochs struct {
	any    uint64
	coarse uint64
	sets   []pinSet
}

// pinSet is the last write to a table that pinned exactly columns cols.
type pinSet struct {
	cols  []string // sorted
	epoch uint64
}

// RowDeps are the rows of one table a read depends on: those whose column
// Cols[i] has one of the values its tags name.
type RowDeps struct {
	Table string   // TableKey
	Cols  []string // the tagged columns, sorted
	Keys  []string // TagKey of each (column, value)
}

// RowWrite is a write to one table whose touched rows are known to have,
// before and after the write, column c equal to one of Pins[c] (or NULL).
// Columns not in Pins are not known; a RowWrite without pins is a write to
// the whole table.
type RowWrite struct {
	Table string // TableKey
	Pins  map[string][]string
}

// TagKey is the key of the tag (table, col, val): table a TableKey, val
// in its column's canonical text form.
func TagKey(table, col, val string) string { return table + "\x00" + col + "\x00" + val }

// TableKey is the name under which a table's epoch is kept: without its
// schema (the scanner drops it; annotations and Invalidate may not) and
// without regard to case. Two tables that differ only there share an epoch:
// a write to one also ends the other's reuse, which is only ever safe.
func TableKey(name string) string {
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		name = name[i+1:]
	}
	return strings.ToLower(strings.Trim(name, `"`))
}

// Now returns the number of the last write that took one (0 before the
// first): a read that remembers it is ordered after every write that
// returned before Now was called.
func (e *Epochs) Now() uint64 { return e.seq.Load() }

// Bump records a write to tables (every table, when not known) and returns
// the sequence number it took. When it returns, the epoch of each table
// (or "all") is at least that number.
func (e *Epochs) Bump(tables []string, known bool) uint64 {
	return e.BumpRows(tables, known, nil)
}

// BumpRows records one write: to tables as a whole (every table, when not
// known, rows then ignored), and to the rows of other tables that rows pin.
// It returns the sequence number it took.
func (e *Epochs) BumpRows(tables []string, known bool, rows []RowWrite) uint64 {
	n := e.seq.Add(1)
	e.Stamp(n, tables, known, rows)
	return n
}

// Stamp records a write numbered n (tables as a whole, every table when not
// known, and the rows of other tables that rows pin) without taking a
// number: the fleet floor stamps the fleet's numbers. A stamp lower than
// the epochs it meets leaves them as they are.
func (e *Epochs) Stamp(n uint64, tables []string, known bool, rows []RowWrite) {
	if !known {
		e.RaiseAll(n)
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.tables == nil {
		e.tables = make(map[string]*tableEpochs)
	}
	if len(e.tables)+len(tables)+len(rows) > MaxTables {
		// Too many tables to remember one by one: from now on they share
		// the epoch of "all", which this write raises past every epoch it
		// forgets (every epoch moves forward; reads check "all" under the
		// lock too).
		e.forgetTables(n)
		return
	}
	for _, t := range tables {
		te := e.table(TableKey(t))
		te.any, te.coarse = max(te.any, n), max(te.coarse, n)
	}
	for _, rw := range rows {
		te := e.table(rw.Table)
		te.any = max(te.any, n)
		if len(rw.Pins) == 0 {
			te.coarse = max(te.coarse, n)
			continue
		}
		cols := make([]string, 0, len(rw.Pins))
		for c := range rw.Pins {
			cols = append(cols, c)
		}
		slices.Sort(cols)
		i := slices.IndexFunc(te.sets, func(ps pinSet) bool { return slices.Equal(ps.cols, cols) })
		switch {
		case i >= 0:
			te.sets[i].epoch = max(te.sets[i].epoch, n)
		case len(te.sets) < MaxPinSets:
			te.sets = append(te.sets, pinSet{cols: cols, epoch: n})
		default:
			te.coarse = max(te.coarse, n)
			continue
		}
		for _, c := range cols {
			for _, v := range rw.Pins[c] {
				e.raiseTag(TagKey(rw.Table, c, v), n)
			}
		}
	}
}

// forgetTables forgets every table's epochs, raising "all" past each of
// them and n. The caller holds e.mu.
func (e *Epochs) forgetTables(n uint64) {
	top := n
	for _, te := range e.tables {
		top = max(top, te.any)
	}
	e.RaiseAll(top)
	clear(e.tables)
}

// table returns the epochs of table k (a TableKey), made if need be. The
// caller holds e.mu for writing.
func (e *Epochs) table(k string) *tableEpochs {
	te := e.tables[k]
	if te == nil {
		te = &tableEpochs{}
		e.tables[k] = te
	}
	return te
}

// raiseTag raises a tag's epoch to n; past MaxTags the tags are forgotten
// and the floor rises past every epoch forgotten. The caller holds e.mu
// for writing.
func (e *Epochs) raiseTag(k string, n uint64) {
	if e.tags == nil {
		e.tags = make(map[string]uint64)
	}
	if _, ok := e.tags[k]; !ok && len(e.tags) >= MaxTags {
		for _, ep := range e.tags {
			e.tagFloor = max(e.tagFloor, ep)
		}
		e.tagFloor = max(e.tagFloor, n)
		clear(e.tags)
		return
	}
	e.tags[k] = max(e.tags[k], n)
}

// RaiseAll raises the epoch of "all" (every table's) to n, unless it is
// already there: every read with a sequence below n is ended.
func (e *Epochs) RaiseAll(n uint64) {
	for {
		old := e.all.Load()
		if old >= n || e.all.CompareAndSwap(old, n) {
			return
		}
	}
}

// RaiseTable raises the epoch of table k (a TableKey) to n, and its coarse
// epoch with it when coarse (which ends its tagged reads too), within
// MaxTables: a new table past it forgets the tables as Stamp does. It takes
// no sequence number and does nothing when the epochs are already there.
func (e *Epochs) RaiseTable(k string, coarse bool, n uint64) {
	e.mu.RLock()
	te := e.tables[k]
	done := te != nil && te.any >= n && (!coarse || te.coarse >= n)
	e.mu.RUnlock()
	if done || e.all.Load() >= n {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.tables == nil {
		e.tables = make(map[string]*tableEpochs)
	}
	if _, ok := e.tables[k]; !ok && len(e.tables) >= MaxTables {
		e.forgetTables(n)
		return
	}
	te = e.table(k)
	te.any = max(te.any, n)
	if coarse {
		te.coarse = max(te.coarse, n)
	}
}

// RaiseTagAbove raises the epoch of tag k (a TagKey) to n unless it is
// already there, within MaxTags; it takes no sequence number and leaves
// the tag's table and pin sets alone.
func (e *Epochs) RaiseTagAbove(k string, n uint64) {
	e.mu.RLock()
	done := e.tags[k] >= n || e.tagFloor >= n
	e.mu.RUnlock()
	if done {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.raiseTag(k, n)
}

// UnchangedSince reports whether no write to tables (any write, when the
// tables are unknown) happened after sequence seq. A write whose number was
// taken but whose tables are not yet stamped is not seen: it has not
// returned to its caller yet, so a read may still be ordered before it.
func (e *Epochs) UnchangedSince(seq uint64, tables []string, known bool) bool {
	return e.UnchangedFor(seq, tables, known, nil)
}

// UnchangedFor is UnchangedSince for a read that depends, in the table
// rows names, only on the rows its tags select (rows nil: on every row).
// That table is judged by its rows only if it is among tables; the tags
// are checked either way.
func (e *Epochs) UnchangedFor(seq uint64, tables []string, known bool, rows *RowDeps) bool {
	if !known {
		return e.seq.Load() == seq
	}
	if e.all.Load() > seq {
		return false
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	for _, t := range tables {
		k := TableKey(t)
		te := e.tables[k]
		switch {
		case te == nil:
		case rows != nil && k == rows.Table:
			if te.coarse > seq {
				return false
			}
			for _, ps := range te.sets {
				if ps.epoch > seq && Disjoint(ps.cols, rows.Cols) {
					return false // it may have touched any row this read selects
				}
			}
		case te.any > seq:
			return false
		}
	}
	if rows != nil {
		if e.tagFloor > seq {
			return false
		}
		for _, k := range rows.Keys {
			if e.tags[k] > seq {
				return false
			}
		}
	}
	// Again under the lock: a bump past MaxTables moves its tables'
	// epochs into "all" before it clears them.
	return e.all.Load() <= seq
}

// TableEpoch returns the epoch of table name as a whole (by TableKey): the
// last write to it kept one by one, 0 if none is (never written, or
// forgotten past MaxTables into AllEpoch).
func (e *Epochs) TableEpoch(name string) uint64 {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if te := e.tables[TableKey(name)]; te != nil {
		return te.any
	}
	return 0
}

// AllEpoch returns the epoch of "all": the last write whose tables were
// not known, or the floor of the tables forgotten past MaxTables.
func (e *Epochs) AllEpoch() uint64 { return e.all.Load() }

// Len returns how many tables' epochs are kept one by one (at most
// MaxTables).
func (e *Epochs) Len() int {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return len(e.tables)
}

// Disjoint reports whether the sorted sets a and b share no element (two
// pin sets, or a pin set and a read's tagged columns).
func Disjoint(a, b []string) bool {
	for i, j := 0, 0; i < len(a) && j < len(b); {
		switch c := strings.Compare(a[i], b[j]); {
		case c == 0:
			return false
		case c < 0:
			i++
		default:
			j++
		}
	}
	return true
}
