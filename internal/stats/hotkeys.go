package stats

import (
	"database/sql/driver"
	"fmt"
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// HotKey is one of a statement's hottest keys: its calls that reached the
// sharing path (a Space-Saving count, over by at most Error), a hash of the
// key (stable within the process), and its arguments in print, each cut at
// 64 bytes and 256 in all. The arguments are kept in memory for this API
// (and Shield.SaveHotSet) only: they never go to a log or a metric, and the
// live page shows keyed hashes of them unless LivePageOptions.ShowArguments
// is set. Shield.Statements, seen only by the application, keeps them.
type HotKey struct {
	Hash  string   `json:"hash"`
	Calls uint64   `json:"calls"`
	Error uint64   `json:"error"`
	Args  []string `json:"args,omitempty"`

	// raw are its arguments as sent, for pre-warming, when warm.
	raw  []driver.Value
	warm bool
	// text is the text the key was first sent with, when its statement is
	// a shape whose texts differ (NoteKeyText); textOK says it was kept.
	text   string
	textOK bool
}

// WarmArgs returns copies of k's arguments as sent, for pre-warming, and
// whether they were kept: only for positional plain driver values within
// MaxWarmArgs, and only once the key's arguments were seen (from its
// second call on).
func WarmArgs(k HotKey) ([]driver.Value, bool) { return k.raw, k.warm }

// KeyText returns the text k was first sent with, for pre-warming, when its
// statement is a shape whose texts differ in their constants (WHERE id = 4,
// WHERE id = 5: one statement, a key per text), and whether it is known:
// "" and true for a key of a statement whose texts do not differ (its
// statement's WarmText is its text), "" and false when it was not kept
// (not yet told, or longer than MaxWarmText).
func KeyText(k HotKey) (string, bool) { return k.text, k.textOK }

// SawKey counts key (with args) among the statement's hot keys and returns
// its hash (see KeyHash); 0 on a nil *Statement.
func (st *Statement) SawKey(key string, args []driver.NamedValue) uint64 {
	if st == nil {
		return 0
	}
	h := max(maphash.String(keySeed, key), 1)
	st.keys.see(h, args)
	return h
}

// HotKeys returns the statement's keys counted, hottest first.
func (st *Statement) HotKeys() []HotKey { return st.keys.snapshot(st.shaped, st.texts.Load()) }

// NoteKeyText tells the text (as sent) of a call whose key hashed to h
// (SawKey's), for a Shaped statement: the first text of each hot key is
// kept for pre-warming (KeyText), within MaxWarmText. It does nothing on a
// nil *Statement, one that is not Shaped, or when h is not a hot key.
func (st *Statement) NoteKeyText(h uint64, text string) {
	if st == nil || !st.shaped || h == 0 {
		return
	}
	for i := range st.keys.slots {
		if st.keys.slots[i].hash.Load() != h {
			continue
		}
		texts := st.texts.Load()
		if texts == nil {
			st.texts.CompareAndSwap(nil, new(keyTexts))
			texts = st.texts.Load()
		}
		if kt := texts[i].Load(); kt == nil || kt.hash != h {
			kt := &keyText{hash: h}
			if len(text) <= MaxWarmText {
				kt.text, kt.ok = strings.Clone(text), true
			}
			texts[i].Store(kt)
		}
		return
	}
}

// hotKeys is a small Space-Saving of a statement's keys. A key already
// counted is found and counted with atomics; a new one takes the place of
// the smallest count under a lock, or, when another caller holds it, is
// not counted (a sample: heavy keys are still found). Its arguments are
// kept in print from its second call on.
type hotKeys struct {
	mu    sync.Mutex
	slots [HotKeyCapacity]hotSlot
}

type hotSlot struct {
	hash  atomic.Uint64
	count atomic.Uint64
	err   atomic.Uint64
	args  atomic.Pointer[keyArgs]
}

// keyTexts are the texts of a shaped statement's hot keys, by slot: made
// on its first NoteKeyText, so that other statements pay one pointer.
type keyTexts [HotKeyCapacity]atomic.Pointer[keyText]

// keyText is the text a key of a shaped statement was first sent with.
type keyText struct {
	hash uint64
	text string
	ok   bool // kept: at most MaxWarmText
}

// keyArgs are a key's arguments in print and, when they are plain driver
// values within MaxWarmArgs (warm), copies of them for pre-warming.
type keyArgs struct {
	hash uint64
	args []string
	raw  []driver.Value
	warm bool
}

func (hk *hotKeys) see(h uint64, args []driver.NamedValue) {
	for i := range hk.slots {
		sl := &hk.slots[i]
		if sl.hash.Load() == h {
			sl.count.Add(1)
			if a := sl.args.Load(); a == nil || a.hash != h {
				raw, warm := rawArgs(args)
				sl.args.Store(&keyArgs{hash: h, args: printArgs(args), raw: raw, warm: warm})
			}
			return
		}
	}
	if !hk.mu.TryLock() {
		return
	}
	defer hk.mu.Unlock()
	low := &hk.slots[0]
	for i := range hk.slots {
		sl := &hk.slots[i]
		if sl.hash.Load() == h { // taken meanwhile
			sl.count.Add(1)
			return
		}
		if sl.count.Load() < low.count.Load() {
			low = sl
		}
	}
	c := low.count.Load()
	low.hash.Store(h)
	low.err.Store(c)
	low.count.Store(c + 1)
}

// snapshot returns the keys counted, hottest first; shaped: their
// statement's texts may differ, and each key's text is told in texts.
func (hk *hotKeys) snapshot(shaped bool, texts *keyTexts) []HotKey {
	var out []HotKey
	for i := range hk.slots {
		sl := &hk.slots[i]
		h := sl.hash.Load()
		if h == 0 {
			continue
		}
		k := HotKey{Hash: fmt.Sprintf("%016x", h), Calls: sl.count.Load(), Error: sl.err.Load()}
		if a := sl.args.Load(); a != nil && a.hash == h {
			k.Args, k.raw, k.warm = a.args, a.raw, a.warm
		}
		k.textOK = !shaped
		if shaped && texts != nil {
			if kt := texts[i].Load(); kt != nil && kt.hash == h {
				k.text, k.textOK = kt.text, kt.ok
			}
		}
		out = append(out, k)
	}
	slices.SortStableFunc(out, func(a, b HotKey) int {
		switch {
		case a.Calls > b.Calls:
			return -1
		case a.Calls < b.Calls:
			return 1
		}
		return strings.Compare(a.Hash, b.Hash)
	})
	return out
}

// printArgs prints args within MaxArgText each and MaxArgsText in all; when
// the rest does not fit, its last element is "… N more" (N the arguments
// left out).
func printArgs(args []driver.NamedValue) []string {
	out := make([]string, 0, len(args))
	total := 0
	for i, a := range args {
		var p string
		switch v := a.Value.(type) {
		case string:
			p = fmt.Sprintf("%q", cut(v, MaxArgText))
		case []byte:
			p = fmt.Sprintf("%q", cut(string(v), MaxArgText))
		case time.Time:
			p = v.Format(time.RFC3339Nano)
		default:
			p = fmt.Sprint(v)
		}
		p, _ = Bounded(p, MaxArgText)
		if total+len(p) > MaxArgsText {
			out = append(out, fmt.Sprintf("… %d more", len(args)-i))
			break
		}
		total += len(p)
		out = append(out, p)
	}
	return out
}

// rawArgs copies args for pre-warming and reports whether it could: only
// positional plain driver values (int64, float64, bool, []byte, string,
// time.Time, nil) and Go's other integer and float types, within
// MaxWarmArgs in all.
func rawArgs(args []driver.NamedValue) ([]driver.Value, bool) {
	out := make([]driver.Value, len(args))
	size := 0
	for i, a := range args {
		if a.Name != "" || a.Ordinal != i+1 {
			return nil, false
		}
		switch v := a.Value.(type) {
		case nil, int64, float64, bool, time.Time, int, int8, int16, int32, uint, uint16, uint32, uint64, float32:
			out[i] = v // some drivers (pgx) take Go's integers as they are
			size += 8
		case string:
			out[i] = strings.Clone(v)
			size += len(v)
		case []byte:
			if v != nil {
				out[i] = append(make([]byte, 0, len(v)), v...)
			} else {
				out[i] = []byte(nil)
			}
			size += len(v)
		default:
			return nil, false
		}
		if size > MaxWarmArgs {
			return nil, false
		}
	}
	return out, true
}

func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
