package integration

import (
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestExecModesAndPgxArgs: pgx-specific arguments reach pgx unchanged through
// sqlflight (slices, named args, a QueryExecMode as first argument), give
// the same rows as pgx itself, and never make two different argument lists
// share a result.
func TestExecModesAndPgxArgs(t *testing.T) {
	base := postgresDSN(t)
	admin := openRaw(t, base)
	table := "px_" + uniqueID(t)
	mustExec(t, admin,
		fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, v text NOT NULL)`, table),
		fmt.Sprintf(`INSERT INTO %s VALUES (1, 'one'), (2, 'two'), (3, 'three'), (4, 'four'), (5, 'five')`, table))
	cleanupExec(t, admin, "DROP TABLE IF EXISTS "+table)

	type tc struct {
		name  string
		query string
		args  []any
		want  string
	}
	cases := []tc{
		{"[]int32", `SELECT string_agg(v, ',' ORDER BY id) FROM %s WHERE id = ANY($1)`, []any{[]int32{1, 3, 5}}, "one,three,five"},
		{"[]int64", `SELECT string_agg(v, ',' ORDER BY id) FROM %s WHERE id = ANY($1)`, []any{[]int64{2, 4}}, "two,four"},
		{"[]int16", `SELECT array_length($1::int2[], 1)::text FROM %s WHERE id = 1`, []any{[]int16{1, 2, 3}}, "3"},
		{"[]string", `SELECT string_agg(v, ',' ORDER BY id) FROM %s WHERE v = ANY($1)`, []any{[]string{"two", "three", "nope", `q"u'o,te`}}, "two,three"},
		{"[]string with NULL-looking and empty", `SELECT array_to_string($1::text[], '|', '<null>') FROM %s WHERE id = 1`, []any{[]string{"NULL", "", "a,b", `"`}}, `NULL||a,b|"`},
		{"NamedArgs", `SELECT v FROM %s WHERE id = @id`, []any{pgx.NamedArgs{"id": 2}}, "two"},
		{"NamedArgs two names", `SELECT string_agg(v, ',' ORDER BY id) FROM %s WHERE id BETWEEN @lo AND @hi`, []any{pgx.NamedArgs{"lo": 2, "hi": 4}}, "two,three,four"},
		{"QueryExecModeSimpleProtocol", `SELECT v FROM %s WHERE id = $1`, []any{pgx.QueryExecModeSimpleProtocol, 4}, "four"},
		{"QueryExecModeExec", `SELECT v FROM %s WHERE id = $1`, []any{pgx.QueryExecModeExec, 5}, "five"},
		{"QueryExecModeDescribeExec", `SELECT v FROM %s WHERE id = $1`, []any{pgx.QueryExecModeDescribeExec, 3}, "three"},
		{"QueryExecModeSimpleProtocol with NamedArgs", `SELECT v FROM %s WHERE id = @id`, []any{pgx.QueryExecModeSimpleProtocol, pgx.NamedArgs{"id": 1}}, "one"},
	}

	forEachExecMode(t, base, func(t *testing.T, dsn string) {
		ctx := testContext(t, testTimeout)
		raw := openRaw(t, dsn)
		db, sh := openFlight(t, dsn)

		read := func(db *sql.DB, query string, args []any) (string, error) {
			var s sql.NullString
			err := db.QueryRowContext(ctx, query, args...).Scan(&s)
			return s.String, err
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				query := fmt.Sprintf(c.query, table)
				want, err := read(raw, query, c.args)
				if err != nil {
					t.Fatalf("raw pgx: %v", err)
				}
				if want != c.want {
					t.Fatalf("raw pgx returned %q, the test expects %q", want, c.want)
				}
				got, err := read(db, query, c.args)
				if err != nil {
					t.Fatalf("through sqlflight: %v", err)
				}
				if got != want {
					t.Errorf("through sqlflight: %q, raw pgx: %q", got, want)
				}
				// Exec with the same arguments reaches pgx too.
				if _, err := db.ExecContext(ctx, query, c.args...); err != nil {
					t.Errorf("exec through sqlflight: %v", err)
				}
			})
		}

		// Concurrent callers with different pgx-specific arguments get
		// their own rows, never another caller's.
		t.Run("no crossing", func(t *testing.T) {
			names := []string{"", "one", "two", "three", "four", "five"}
			named := fmt.Sprintf(`SELECT v FROM %s WHERE id = @id`, table)
			anyOf := fmt.Sprintf(`SELECT string_agg(v, ',' ORDER BY id) FROM %s WHERE id = ANY($1)`, table)
			modeArg := fmt.Sprintf(`SELECT v FROM %s WHERE id = $1`, table)
			const rounds, perID = 20, 2
			errs := newErrBudget(t, 5)
			for r := range rounds {
				var wg sync.WaitGroup
				start := make(chan struct{})
				for id := 1; id <= 5; id++ {
					for range perID {
						wg.Add(1)
						go func() {
							defer wg.Done()
							<-start
							var (
								query string
								args  []any
								want  string
							)
							switch (id + r) % 3 { // the perID callers of an id send the same statement
							case 0:
								query, args, want = named, []any{pgx.NamedArgs{"id": id}}, names[id]
							case 1:
								ids := []int32{int32(id), int32(id%5 + 1)}
								lo, hi := min(ids[0], ids[1]), max(ids[0], ids[1])
								query, args, want = anyOf, []any{ids}, names[lo]+","+names[hi]
							default:
								query, args, want = modeArg, []any{pgx.QueryExecModeSimpleProtocol, id}, names[id]
							}
							got, err := read(db, query, args)
							if err != nil {
								errs.Errorf("round %d, id %d: %v", r, id, err)
							} else if got != want {
								errs.Errorf("round %d, id %d: got %q, want %q (%s %v)", r, id, got, want, strings.Fields(query)[0], args)
							}
						}()
					}
				}
				close(start)
				wg.Wait()
				if t.Failed() {
					break
				}
			}
			t.Logf("%s", statsString(sh.Stats()))
		})
	})
}
