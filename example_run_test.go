package sqlflight_test

import (
	"testing"

	"github.com/sqlflight/sqlflight"
	"github.com/sqlflight/sqlflight/internal/exampletest"
)

// TestExamplesOnPostgres runs the Examples that need PostgreSQL against the
// test database and checks what they print. Example runs under the default
// Shield, which a program keeps for its life; the test closes it (queries
// through it keep working, uncached) so that its cache's goroutines end.
func TestExamplesOnPostgres(t *testing.T) {
	defer sqlflight.Default().Close()
	t.Setenv("DATABASE_URL", exampletest.Need(t, "SQLFLIGHT_POSTGRES_DSN"))
	for _, ex := range []struct {
		name string
		run  func()
		want string
	}{
		{"Example", Example, "1000\n"},
		{"ExampleOpenDB_pgx", ExampleOpenDB_pgx, "42\n"},
	} {
		t.Run(ex.name, func(t *testing.T) {
			if got := exampletest.Stdout(t, ex.run); got != ex.want {
				t.Errorf("%s printed %q, want %q", ex.name, got, ex.want)
			}
		})
	}
}
