package integration

import (
	"database/sql"
	"errors"
	"testing"

	"github.com/sqlflight/sqlflight"
)

// TestDSNParameters: sqlflight.* parameters in a pgx DSN configure a Shield
// of that DSN's own, never reach pgx, and an unknown one fails sql.Open.
func TestDSNParameters(t *testing.T) {
	// A DSN of this run's own: the registered driver keeps one Shield per DSN.
	dsn := withDSNParams(t, postgresDSN(t), "sqlflight.default", "soft=1m,hard=2m", "sqlflight.max_inflight", "7",
		"application_name", "sqlflight_dsn_"+uniqueID(t))
	db, err := sql.Open("sqlflight", dsn)
	if err != nil {
		t.Fatal(err)
	}
	sh := sqlflight.ShieldOf(db)
	t.Cleanup(func() {
		_ = db.Close()
		_ = sh.Close()
	})
	if sh == nil || sh == sqlflight.Default() {
		t.Fatal("the DSN's parameters did not make a Shield of its own")
	}
	ctx := testContext(t, testTimeout)
	for range 3 {
		var n int
		if err := db.QueryRowContext(ctx, "SELECT 41 + 1").Scan(&n); err != nil || n != 42 {
			t.Fatalf("%v %d", err, n)
		}
	}
	if st := sh.Stats(); st.FreshHits != 2 || st.OriginExecutions != 1 {
		t.Fatalf("the DSN's default policy did not cache: %s", statsString(st))
	}
	if _, err := sql.Open("sqlflight", withDSNParams(t, postgresDSN(t), "sqlflight.max_byts", "1")); !errors.Is(err, sqlflight.ErrBadDSN) {
		t.Fatalf("an unknown parameter opened: %v", err)
	}
}
