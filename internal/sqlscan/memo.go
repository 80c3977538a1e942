package sqlscan

import (
	"strings"

	"github.com/sqlflight/sqlflight/internal/memo"
)

// Memo bounds. A generation rotates when it holds memoEntries results or memoBytes bytes of
// SQL and normalized text; texts longer than memoMaxSQL are parsed on every call.
const (
	memoEntries = 4096
	memoBytes   = 4 << 20
	memoMaxSQL  = 16 << 10
)

// scanMemo maps SQL texts to their Results with bounded memory: a memo.Gen of two generations,
// each rotated when it holds memoEntries results or memoBytes bytes of SQL and normalized
// text; a hit in the previous generation is promoted. Lookups take no lock.
type scanMemo struct {
	g     *memo.Gen[string, *Result]
	parse func(string) *Result
}

func newMemo(entries, bytes int64) *scanMemo {
	return newMemoOf(entries, bytes, Parse)
}

func newMemoOf(entries, bytes int64, parse func(string) *Result) *scanMemo {
	return &scanMemo{g: memo.NewGen(entries, bytes, resultSize), parse: parse}
}

// resultSize is the bytes a memo entry counts: an upper bound, since Normalized often aliases
// sql; ShapeKey (Shape is a part of it) counts when it is not Normalized.
func resultSize(sql string, r *Result) int64 {
	n := len(sql) + len(r.Normalized)
	if r.ShapeKey != r.Normalized {
		n += len(r.ShapeKey)
	}
	return int64(n)
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

func (m *scanMemo) scan(sql string) *Result {
	if len(sql) > memoMaxSQL {
		return m.parse(sql)
	}
	if r, ok := m.g.Load(sql); ok {
		return r
	}
	sql = strings.Clone(sql) // do not pin a caller's larger buffer; Normalized may alias it
	// Store returns the Result another goroutine stored first, so that callers of one text
	// share one Result.
	return m.g.Store(sql, m.parse(sql))
}
