package verdict_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
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

// probingServer is a Host whose spare sessions answer a probe as a server
// would for a statement reading the table t, and count what they run.
type probingServer struct {
	mu      sync.Mutex
	creates []string // the probe functions declared
	rows    []string // the texts Rows was asked about
}

func (*probingServer) Postgres() bool    { return true }
func (*probingServer) SchemaGen() uint64 { return 1 }
func (h *probingServer) Spare(_ context.Context, f func(verdict.Session) error) error {
	return f(&probeSession{h: h})
}
func (h *probingServer) Rows(_ context.Context, _ verdict.Session, r *sqlscan.Result, _ *verdict.Verdict[string]) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.rows = append(h.rows, r.Normalized)
	return r.Normalized
}
func (*probingServer) Probed(*sqlscan.Result, time.Duration, error, bool) {}
func (*probingServer) Busy()                                              {}

func (h *probingServer) probes() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.creates)
}

// probeSession answers the probe's statements: the dependency query names
// the table t, nothing else holds rows.
type probeSession struct{ h *probingServer }

func (s *probeSession) Exec(_ context.Context, q string) error {
	if strings.HasPrefix(q, "CREATE FUNCTION") {
		s.h.mu.Lock()
		s.h.creates = append(s.h.creates, q)
		s.h.mu.Unlock()
	}
	return nil
}

func (s *probeSession) Query(_ context.Context, q string, _ ...string) ([][]*string, error) {
	if !strings.Contains(q, "pg_depend") {
		return nil, nil
	}
	str := func(v string) *string { return &v }
	return [][]*string{{str("r"), str("t"), str("r"), str("f"), str("public"), nil, str("f")}}, nil
}

func (*probeSession) ParamTypes(_ context.Context, q string) ([]uint32, []string, error) {
	if strings.Contains(q, "$1") {
		return []uint32{23}, []string{"integer"}, nil
	}
	return nil, nil, nil
}

func (*probeSession) Clean() bool { return true }

// TestOneProbePerShape: the texts of one statement shape (its constants'
// values aside) share one verdict, learned by one probe of the first text
// seen; its row filter is that text's. Another type of constant, or a
// parameter in its place, is another shape.
func TestOneProbePerShape(t *testing.T) {
	h := &probingServer{}
	b := verdict.NewBook[string](h)
	ctx := context.Background()
	text := func(n int) *sqlscan.Result {
		return sqlscan.Scan(fmt.Sprintf(`SELECT id, v FROM t WHERE (id = %d)`, n))
	}
	first := b.Of(text(0))
	if !first.Await(ctx) || first.Err != nil {
		t.Fatalf("verdict: known %v, error %v", first.Known(), first.Err)
	}
	for n := 1; n < 200; n++ {
		v := b.Of(text(n))
		if v != first {
			t.Fatalf("id = %d: another verdict", n)
		}
	}
	probes := h.probes()
	if len(probes) != 1 || !strings.Contains(probes[0], "(id = 0)") {
		t.Fatalf("%d probes for 200 values of one shape: %q", len(probes), probes)
	}
	if first.Rows != text(0).Normalized || len(h.rows) != 1 {
		t.Fatalf("the row filter is of %q (asked %d times), want the text probed", first.Rows, len(h.rows))
	}
	if !slices.Equal(first.Tables, []string{"t"}) || !first.Server.TablesKnown {
		t.Fatalf("tables %v known %v", first.Tables, first.Server.TablesKnown)
	}
	// Other shapes: a string, an int8, a parameter, another table.
	for _, sql := range []string{
		`SELECT id, v FROM t WHERE (id = '4')`,
		`SELECT id, v FROM t WHERE (id = 3000000000)`,
		`SELECT id, v FROM t WHERE (id = $1)`,
		`SELECT id, v FROM u WHERE (id = 4)`,
	} {
		v := b.Of(sqlscan.Scan(sql))
		if v == first || !v.Await(ctx) || v.Err != nil {
			t.Errorf("%s: the verdict of another shape (%v)", sql, v.Err)
		}
	}
	if n := len(h.probes()); n != 5 {
		t.Fatalf("%d probes for five shapes", n)
	}
	if keys := b.MemoKeys(); len(keys) != 5 {
		t.Fatalf("%d verdicts kept for five shapes: %q", len(keys), keys)
	}
}
