package integration

import (
	"fmt"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight"
)

// TestFleetWriteReturningPublishedOnce: a write through QueryContext
// (UPDATE … RETURNING, as ORMs send them) is one write for the fleet: one
// message, as through ExecContext: its epochs move when the statement
// returns and again when its rows close (no flight started while it ran is
// joined after it), but it is published once, when it is complete.
func TestFleetWriteReturningPublishedOnce(t *testing.T) {
	f := newFleetRows(t)
	A := f.node(t, false, sqlflight.Options{})
	f.read(t, A, "id = $1", 1) // A learns the table's columns
	ctx := testContext(t, 30*time.Second)
	for _, c := range []struct {
		how  string
		exec bool
	}{{"ExecContext", true}, {"QueryRowContext … RETURNING", false}} {
		before := A.s.Stats().InvalidationsSent
		var err error
		if c.exec {
			_, err = A.db.ExecContext(ctx, fmt.Sprintf(`UPDATE %s SET name = 'x' WHERE id = $1`, f.rows), 5)
		} else {
			var id int
			err = A.db.QueryRowContext(ctx, fmt.Sprintf(`UPDATE %s SET name = 'y' WHERE id = $1 RETURNING id`, f.rows), 5).Scan(&id)
		}
		if err != nil {
			t.Fatal(err)
		}
		if n := A.s.Stats().InvalidationsSent - before; n != 1 {
			t.Errorf("a write through %s published %d messages, want 1", c.how, n)
		}
	}
}
