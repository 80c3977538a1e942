package sqlscan

import (
	"strings"
	"sync"
	"sync/atomic"
)

// Memo bounds. A generation rotates when it holds memoEntries results or memoBytes bytes of
// SQL and normalized text; texts longer than memoMaxSQL are parsed on every call.
const (
	memoEntries = 4096
	memoBytes   = 4 << 20
	memoMaxSQL  = 16 << 10
)

// generation is one map of the two-generation memo.
type generation struct {
	m     sync.Map // string → *Result
	n     atomic.Int64
	bytes atomic.Int64
}

// memo maps SQL texts to their Results with bounded memory: new entries go to the current
// generation; when it is full it becomes the previous one (the older previous one is dropped)
// and a new current one starts. A hit in the previous generation is promoted. Lookups take
// no lock: sync.Map reads are lock-free and the generations are swapped atomically.
type memo struct {
	cur, prev atomic.Pointer[generation]
	mu        sync.Mutex // serializes rotations
	entries   int64      // rotate when a generation holds this many results …
	bytes     int64      // … or this many bytes of text
	parse     func(string) *Result
}

func newMemo(entries, bytes int64) *memo {
	return newMemoOf(entries, bytes, Parse)
}

func newMemoOf(entries, bytes int64, parse func(string) *Result) *memo {
	m := &memo{entries: entries, bytes: bytes, parse: parse}
	m.cur.Store(new(generation))
	m.prev.Store(new(generation))
	return m
}

// One memo per lexing mode: a text scans differently when standard_conforming_strings is off.
var (
	defaultMemo     = newMemo(memoEntries, memoBytes)
	nonStandardMemo = newMemoOf(memoEntries, memoBytes, ParseNonStandard)
)

// Scan returns the Result of Parse(sql), memoized per exact SQL text (up to 16 KiB; longer
// texts are parsed each time). It is safe for concurrent use and cheap on a hit.
//
// The returned Result is shared with every other caller that scans the same text: it and
// its slices must be treated as read-only.
func Scan(sql string) *Result {
	return defaultMemo.scan(sql)
}

// ScanNonStandard is Scan for a server whose standard_conforming_strings is off: it returns
// ParseNonStandard(sql), memoized like Scan (same bounds) but apart from it, since one text can
// mean two different statements: under that setting the backslash in 'a\' , ' escapes the
// second quote, so SELECT 'a\' , ', nextval($$s$$) -- ' calls nextval. The driver uses it
// for a server that reports standard_conforming_strings = off.
func ScanNonStandard(sql string) *Result {
	return nonStandardMemo.scan(sql)
}

func (m *memo) scan(sql string) *Result {
	if len(sql) > memoMaxSQL {
		return m.parse(sql)
	}
	cur := m.cur.Load()
	if v, ok := cur.m.Load(sql); ok {
		return v.(*Result)
	}
	if v, ok := m.prev.Load().m.Load(sql); ok {
		r := v.(*Result)
		m.store(sql, r)
		return r
	}
	sql = strings.Clone(sql) // do not pin a caller's larger buffer; Normalized may alias it
	return m.store(sql, m.parse(sql))
}

// store adds r to the current generation (or returns the Result another goroutine stored
// first, so that callers of one text share one Result) and rotates a full generation.
func (m *memo) store(sql string, r *Result) *Result {
	cur := m.cur.Load()
	if v, loaded := cur.m.LoadOrStore(sql, r); loaded {
		return v.(*Result)
	}
	size := int64(len(sql) + len(r.Normalized)) // an upper bound: Normalized often aliases sql
	if cur.n.Add(1) >= m.entries || cur.bytes.Add(size) >= m.bytes {
		m.rotate(cur)
	}
	return r
}

// rotate makes the full generation the previous one and starts a new current one, unless another
// goroutine already did.
func (m *memo) rotate(full *generation) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cur.Load() != full {
		return
	}
	m.prev.Store(full)
	m.cur.Store(new(generation))
}
