package sqlflight

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sqlflight/sqlflight/internal/sqlscan"
)

// TestVerdictMemoKeepsDigestsOfLongTexts: the verdict memo keeps a long
// statement's digest, not its text, and finds its verdict again by it; the
// keys' bytes are bounded.
func TestVerdictMemoKeepsDigestsOfLongTexts(t *testing.T) {
	s := New()
	sc := s.newScope()
	sc.postgres = true
	sc.spare.SetOpen(func(context.Context) (driver.Conn, error) { return nil, errors.New("no server here") })
	long := func(i int) *sqlscan.Result {
		return sqlscan.Scan(fmt.Sprintf("SELECT n FROM items_%d WHERE note = '%s'", i, strings.Repeat("x", 100<<10)))
	}
	first := sc.verdictOf(s, long(0))
	if again := sc.verdictOf(s, long(0)); again != first {
		t.Fatal("the same long statement got another verdict")
	}
	for i := 1; i < 200; i++ {
		sc.verdictOf(s, long(i))
	}
	memo := sc.verdicts.Load()
	var keys, bytes int
	memo.m.Range(func(k string, _ *verdict) bool {
		keys++
		bytes += len(k)
		if len(k) > maxVerdictKey {
			t.Errorf("a key of %d bytes kept", len(k))
			return false
		}
		return true
	})
	if keys != 200 || bytes > 200*64 {
		t.Fatalf("%d keys of %d bytes for 200 statements of 100 KiB", keys, bytes)
	}
	short := sqlscan.Scan("SELECT n FROM items WHERE id = $1")
	if memoKey(short.Normalized) != short.Normalized {
		t.Fatal("a short text is not its own key")
	}
}
