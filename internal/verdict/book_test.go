package verdict_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight/internal/sqlscan"
	"github.com/sqlflight/sqlflight/internal/verdict"
)

// noServer is a Host of a PostgreSQL scope whose spare sessions never
// open.
type noServer struct{}

func (noServer) Postgres() bool    { return true }
func (noServer) SchemaGen() uint64 { return 1 }
func (noServer) Spare(context.Context, func(verdict.Session) error) error {
	return errors.New("no server here")
}
func (noServer) Rows(context.Context, verdict.Session, *sqlscan.Result, *verdict.Verdict[int]) int {
	return 0
}
func (noServer) Probed(*sqlscan.Result, time.Duration, error, bool) {}
func (noServer) Busy()                                              {}

// TestVerdictMemoKeepsDigestsOfLongTexts: the verdict memo keeps a long
// statement's digest, not its text, and finds its verdict again by it; the
// keys' bytes are bounded.
func TestVerdictMemoKeepsDigestsOfLongTexts(t *testing.T) {
	b := verdict.NewBook[int](noServer{})
	long := func(i int) *sqlscan.Result {
		return sqlscan.Scan(fmt.Sprintf("SELECT n FROM items_%d WHERE note = '%s'", i, strings.Repeat("x", 100<<10)))
	}
	first := b.Of(long(0))
	if again := b.Of(long(0)); again != first {
		t.Fatal("the same long statement got another verdict")
	}
	for i := 1; i < 200; i++ {
		b.Of(long(i))
	}
	var keys, bytes int
	for _, k := range b.MemoKeys() {
		keys++
		bytes += len(k)
		if len(k) > verdict.MaxVerdictKey {
			t.Fatalf("a key of %d bytes kept", len(k))
		}
	}
	if keys != 200 || bytes > 200*64 {
		t.Fatalf("%d keys of %d bytes for 200 statements of 100 KiB", keys, bytes)
	}
	short := sqlscan.Scan("SELECT n FROM items WHERE id = $1")
	if verdict.MemoKey(short.Normalized) != short.Normalized {
		t.Fatal("a short text is not its own key")
	}
}
