package integration

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight"
)

// TestVerdictReadOnlyServerFallsBackToText: a server that refuses the probe
// (here a read-only default, as on a hot standby) makes the scope fall back
// to the scanner's verdicts: plain reads are still shared and cached, and
// none of them counts as a write to every table.
func TestVerdictReadOnlyServerFallsBackToText(t *testing.T) {
	base := postgresDSN(t)
	admin := openRaw(t, base)
	table := "vro_" + uniqueID(t)
	mustExec(t, admin,
		fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, v int NOT NULL)`, table),
		fmt.Sprintf(`INSERT INTO %s VALUES (1, 10)`, table))
	cleanupExec(t, admin, "DROP TABLE IF EXISTS "+table)

	dsn := withDSNParams(t, base, "default_transaction_read_only", "on")
	ctx := testContext(t, testTimeout)
	var logs lockedBuffer
	db, sh := openFlight(t, dsn, sqlflight.Options{Default: sqlflight.Policy{Soft: time.Minute},
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	q := fmt.Sprintf(`SELECT v FROM %s WHERE id = $1`, table)
	for i := 0; i < 4; i++ {
		var v int
		if err := db.QueryRowContext(ctx, q, 1).Scan(&v); err != nil || v != 10 {
			t.Fatalf("read %d: %v %d", i, err, v)
		}
	}
	st := sh.Stats()
	if st.Invalidations != 0 {
		t.Errorf("reads on a read-only server counted as writes: %s", statsString(st))
	}
	if st.FreshHits < 2 {
		t.Errorf("plain reads were not cached after the fallback: fresh hits %d; %s", st.FreshHits, statsString(st))
	}
	x, err := sqlflight.ExplainDB(ctx, db, q)
	if err != nil {
		t.Fatal(err)
	}
	if x.Verified || !strings.Contains(x.Provisional, "refuses the probe") || !x.Shared || !x.Cached {
		t.Errorf("explain on a server that refuses the probe: %+v", x)
	}
	// The warning names the server's refusal by its SQLSTATE
	// (read_only_sql_transaction).
	if out := logs.String(); !strings.Contains(out, "refuses the probe") || !strings.Contains(out, "SQLSTATE 25006") {
		t.Errorf("the refused probe's warning does not say why:\n%s", out)
	}
}

// lockedBuffer is a bytes.Buffer for a logger's concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
