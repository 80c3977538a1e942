package feed

import (
	"os"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight/internal/leaktest"
)

func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }

// postgresDSN returns SQLFLIGHT_POSTGRES_DSN, or skips the test without it
// (fails it when SQLFLIGHT_REQUIRE_INTEGRATION=1).
func postgresDSN(t *testing.T) string {
	t.Helper()
	dsn := os.Getenv("SQLFLIGHT_POSTGRES_DSN")
	if dsn == "" {
		if os.Getenv("SQLFLIGHT_REQUIRE_INTEGRATION") == "1" {
			t.Fatal("SQLFLIGHT_POSTGRES_DSN not set")
		}
		t.Skip("SQLFLIGHT_POSTGRES_DSN not set")
	}
	return dsn
}

// waitFor polls cond until it holds; a test that never gets there fails on
// its deadline instead of hanging.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
