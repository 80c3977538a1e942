package shared

import (
	"strings"
	"sync"

	"github.com/sqlflight/sqlflight/internal/epoch"
)

// Floor keeps the highest fleet epochs this instance knows of (its own
// writes, authenticated messages, epochs a Fetch reported), which the tier
// cannot take back: an epoch.Epochs (tables, sets of pinned columns, tags)
// stamped with fleet sequence numbers, in the same bounded memory — past
// its bounds it raises coarser epochs (a table's, "all"), which refuses
// more values than needed, never fewer. Besides, it keeps the epochs of
// pin-set names ("the last write pinned on no column of C") a Fetch
// reported, which name no set of their own, up to maxLearnedSets of them.
// The zero Floor knows of no write and admits every version above 0. A
// Floor is safe for concurrent use; it must not be copied after first use.
type Floor struct {
	e       epoch.Epochs
	mu      sync.Mutex
	learned map[string]uint64
}

// maxLearnedSets bounds the pin-set names whose epochs the floor keeps;
// past it, it raises the table's coarse epoch instead.
const maxLearnedSets = 1024

// Raise records a write of fleet sequence seq to tables (every table when
// all).
func (f *Floor) Raise(tables []string, all bool, seq uint64) {
	f.RaiseRows(tables, all, nil, seq)
}

// RaiseRows records a write of fleet sequence seq to tables (every table
// when all) and to the rows that rows pin. An epoch already higher stays.
func (f *Floor) RaiseRows(tables []string, all bool, rows []epoch.RowWrite, seq uint64) {
	f.e.Stamp(seq, tables, !all, rows)
}

// Learn raises the floors of names (epoch names, see EpochNames) to the
// epochs a Fetch reported for them (epochs[len(names)]: every table's),
// when they are within the fleet sequence seq (0: not known). An epoch of
// 0, or above seq, is ignored; an epoch lower than the floor's lowers
// nothing; a name of no form EpochNames makes is ignored.
func (f *Floor) Learn(names []string, epochs []uint64, seq uint64) {
	for i, ep := range epochs {
		if ep == 0 || (seq > 0 && ep > seq) {
			continue
		}
		if i >= len(names) {
			f.e.RaiseAll(ep)
			continue
		}
		name := names[i]
		table, rest, rows := strings.Cut(name, "\x00")
		switch {
		case !rows:
			f.e.RaiseTable(table, false, ep)
		case rest == "c":
			f.e.RaiseTable(table, true, ep)
		case strings.HasPrefix(rest, "t"):
			f.e.RaiseTagAbove(table+"\x00"+rest[1:], ep)
		case strings.HasPrefix(rest, "p"):
			f.mu.Lock()
			old, ok := f.learned[name]
			switch {
			case ok || len(f.learned) < maxLearnedSets:
				if f.learned == nil {
					f.learned = make(map[string]uint64)
				}
				f.learned[name] = max(old, ep)
				f.mu.Unlock()
			default:
				f.mu.Unlock()
				f.e.RaiseTable(table, true, ep)
			}
		}
	}
}

// Admits reports whether a value of version may be newer than every write
// to tables this instance knows of. Version 0 (no version) is never
// admitted.
func (f *Floor) Admits(version uint64, tables []string) bool {
	return f.AdmitsRows(version, tables, nil)
}

// AdmitsRows reports whether a value of version, of a read of tables that
// depends on the rows of its table that rows names (nil: on every row),
// may be newer than every write to them this instance knows of: the
// tables', and for rows, its table's coarse epoch, its pin set's (learned
// or not) and its tags'. Version 0 is never admitted.
func (f *Floor) AdmitsRows(version uint64, tables []string, rows *epoch.RowDeps) bool {
	if version == 0 || !f.e.UnchangedFor(version-1, tables, true, rows) {
		return false
	}
	if rows == nil {
		return true
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.learned[PinSetName(rows)] < version
}
