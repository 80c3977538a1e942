package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight"
)

// An origin that outlives its leader keeps the leader's real connection;
// database/sql meanwhile hands the (virtual) connection to others and may
// close its statements. Under -race these catch any second user of that
// real connection.
func TestOriginKeepsItsConnectionToItself(t *testing.T) {
	dsn := postgresDSN(t)
	admin := openRaw(t, dsn)
	table := "oc_" + uniqueID(t)
	mustExec(t, admin, fmt.Sprintf(`CREATE TABLE %s (n int)`, table))
	cleanupExec(t, admin, "DROP TABLE IF EXISTS "+table)

	t.Run("orphaned oversize result", func(t *testing.T) {
		db, sh := openFlight(t, dsn, sqlflightOptions(10))
		db.SetMaxOpenConns(1)
		ctx := testContext(t, testTimeout)
		lctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		_, err := db.QueryContext(lctx, "/* sqlflight: ttl=1m */ SELECT g FROM generate_series(1, 500000) g")
		cancel()
		t.Logf("leader: %v", err)
		// The same (only) virtual connection, while its origin may run.
		if _, err := db.ExecContext(ctx, fmt.Sprintf(`INSERT INTO %s VALUES (1)`, table)); err != nil {
			t.Fatalf("a write after the leader left: %v", err)
		}
		waitUntil(t, time.Minute, func() string { return statsString(sh.Stats()) },
			func() bool { return sh.Stats().InFlight == 0 })
	})

	t.Run("statement closed while the origin runs", func(t *testing.T) {
		db, sh := openFlight(t, dsn)
		db.SetMaxOpenConns(1)
		ctx := testContext(t, testTimeout)
		st, err := db.PrepareContext(ctx, fmt.Sprintf(`INSERT INTO %s VALUES ($1)`, table))
		if err != nil {
			t.Fatal(err)
		}
		lctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		_, err = db.QueryContext(lctx, "/* sqlflight: ttl=1m */ SELECT count(*) FROM generate_series(1, 2000000)")
		cancel()
		t.Logf("leader: %v", err)
		if err := st.Close(); err != nil {
			t.Fatalf("closing the statement: %v", err)
		}
		waitUntil(t, time.Minute, func() string { return statsString(sh.Stats()) },
			func() bool { return sh.Stats().InFlight == 0 })
		var n int
		if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&n); err != nil || n != 1 {
			t.Fatalf("the connection after: %v", err)
		}
	})
}

func sqlflightOptions(maxRows int) sqlflight.Options {
	return sqlflight.Options{MaxResultRows: maxRows}
}
