package integration

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlflight/sqlflight"
	"github.com/sqlflight/sqlflight/integration/sqlcstore"
	"github.com/sqlflight/sqlflight/pgxflight"
)

// The sqlc tests run sqlc's generated code (package sqlcstore) through the
// pgx face and on the bare pool, in a schema of their own that the pools'
// search_path names, and compare what the two return.

// sqlcEnv is one schema with sqlc's tables, a bare pool whose search_path
// names it and the face over a pool of the same configuration.
type sqlcEnv struct {
	ctx    context.Context
	schema string
	bare   *pgxpool.Pool
	face   *pgxflight.DB
	sh     *sqlflight.Shield
	bq, fq *sqlcstore.Queries // on the bare pool, through the face
	seed   *sqlcstore.Queries // on a pool of the bare one's configuration in pgx's default exec mode
}

// sqlcShield is a Shield that caches every read it may share for a minute.
func sqlcShield() *sqlflight.Shield {
	return sqlflight.New(sqlflight.Options{Default: sqlflight.Policy{Soft: time.Minute}})
}

// newSqlcEnv creates a schema with sqlc's tables and opens the bare pool
// and the face (through sh) on it, for dsn; all of it goes when the test
// ends.
func newSqlcEnv(t *testing.T, dsn string, sh *sqlflight.Shield) *sqlcEnv {
	t.Helper()
	ctx := testContext(t, testTimeout)
	admin := openRaw(t, dsn)
	schema := "sqlc_" + uniqueID(t)
	mustExec(t, admin, "CREATE SCHEMA "+schema)
	cleanupExec(t, admin, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")

	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("parse DSN: %v", err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	bare, err := pgxpool.NewWithConfig(ctx, cfg.Copy())
	if err != nil {
		t.Fatalf("pgxpool: %v", err)
	}
	t.Cleanup(bare.Close)
	// The seed's pool is in pgx's default exec mode whatever the test's:
	// the simple protocol sends a []byte as bytea, which jsonb refuses.
	seedCfg := cfg.Copy()
	seedCfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheStatement
	seed, err := pgxpool.NewWithConfig(ctx, seedCfg)
	if err != nil {
		t.Fatalf("pgxpool: %v", err)
	}
	t.Cleanup(seed.Close)
	// The schema's statements in one text go as one simple query.
	if _, err := seed.Exec(ctx, sqlcstore.Schema, pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatalf("create sqlc's tables: %v", err)
	}
	face, _ := openFaceConfig(t, cfg, sh)
	return &sqlcEnv{ctx: ctx, schema: schema, bare: bare, face: face, sh: sh,
		bq: sqlcstore.New(bare), fq: sqlcstore.New(face), seed: sqlcstore.New(seed)}
}

// sqlcNumeric parses a numeric literal as pgtype.Numeric (its Scan).
func sqlcNumeric(t testing.TB, s string) pgtype.Numeric {
	t.Helper()
	var n pgtype.Numeric
	if err := n.Scan(s); err != nil {
		t.Fatalf("numeric %q: %v", s, err)
	}
	return n
}

// sqlcSeed fills env's tables through the seed's pool, with NULLs, empty and
// quoted arrays, infinities, NaN and a duplicate name among the values;
// it returns the authors' ids.
func sqlcSeed(t *testing.T, env *sqlcEnv) []int64 {
	t.Helper()
	ctx := env.ctx
	born := time.Date(1969, 7, 20, 20, 17, 40, 123456000, time.UTC)
	authors := []sqlcstore.CreateAuthorParams{
		{
			Name: "Ada", Bio: pgtype.Text{String: "first programmer, \"quoted\"\nsecond line", Valid: true},
			Tags: []string{"go", "a b", "c,d", `"q"`, `back\slash`, "ünï", "NULL", ""}, Nicknames: []string{},
			Born:     pgtype.Timestamptz{Time: born, Valid: true},
			Birthday: pgtype.Date{Time: time.Date(2000, 2, 29, 0, 0, 0, 0, time.UTC), Valid: true},
			Balance:  sqlcNumeric(t, "12.50"), Rating: pgtype.Float8{Float64: 0.1, Valid: true}, Active: true, Visits: 3,
			Ident: pgtype.UUID{Bytes: [16]byte{0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 1, 2, 3, 4, 5, 6, 7, 8}, Valid: true},
			Meta:  []byte(`{"k": [1, 2.50, {"x": null}], "s": "ü\"q"}`),
		},
		{
			Name: "Brian", Tags: []string{}, // every nullable column NULL
			Active: true,
		},
		{
			Name: "Claude", Bio: pgtype.Text{String: "", Valid: true}, Tags: []string{"go", "rust"}, Nicknames: []string{"c", "cl"},
			Born:     pgtype.Timestamptz{InfinityModifier: pgtype.Infinity, Valid: true},
			Birthday: pgtype.Date{InfinityModifier: pgtype.NegativeInfinity, Valid: true},
			Balance:  sqlcNumeric(t, "-9999999999.99"), Rating: pgtype.Float8{Float64: -1e-300, Valid: true}, Visits: 1 << 30,
			Meta: []byte(`{}`),
		},
		{
			Name: "Dennis", Tags: []string{"c"},
			Born:    pgtype.Timestamptz{Time: time.Date(2011, 10, 12, 23, 59, 59, 999999000, time.FixedZone("", -5*3600)), Valid: true},
			Balance: pgtype.Numeric{NaN: true, Valid: true}, Active: true,
		},
		{
			Name: "Dennis", Tags: []string{"go"}, Balance: sqlcNumeric(t, "0.01"), Active: true, // a second Dennis
		},
	}
	ids := make([]int64, len(authors))
	for i, a := range authors {
		got, err := env.seed.CreateAuthor(ctx, a)
		if err != nil {
			t.Fatalf("seed author %q: %v", a.Name, err)
		}
		ids[i] = got.ID
	}
	books := []sqlcstore.CreateBookParams{
		{AuthorID: ids[0], Title: "Notes", Price: sqlcNumeric(t, "19.99"), Published: pgtype.Date{Time: time.Date(1843, 9, 1, 0, 0, 0, 0, time.UTC), Valid: true}},
		{AuthorID: ids[0], Title: "Sketch", Price: sqlcNumeric(t, "0.001")},
		{AuthorID: ids[2], Title: "Untitled"},
		{AuthorID: ids[3], Title: "The C Programming Language", Price: sqlcNumeric(t, "45"), Published: pgtype.Date{Time: time.Date(1978, 2, 22, 0, 0, 0, 0, time.UTC), Valid: true}},
	}
	for _, b := range books {
		if _, err := env.seed.CreateBook(ctx, b); err != nil {
			t.Fatalf("seed book %q: %v", b.Title, err)
		}
	}
	return ids
}

// sqlcRead is one of sqlc's reads, run on a Queries.
type sqlcRead struct {
	name string
	run  func(ctx context.Context, q *sqlcstore.Queries) (any, error)
}

// sqlcReads are the reads the tests compare: sqlc's :one and :many
// queries and the package's hand-written CollectRows queries, with a
// missing row and a name that two authors share among them.
func sqlcReads(ids []int64) []sqlcRead {
	return []sqlcRead{
		{"GetAuthor(Ada)", func(ctx context.Context, q *sqlcstore.Queries) (any, error) { return q.GetAuthor(ctx, ids[0]) }},
		{"GetAuthor(Brian)", func(ctx context.Context, q *sqlcstore.Queries) (any, error) { return q.GetAuthor(ctx, ids[1]) }},
		{"GetAuthor(Claude)", func(ctx context.Context, q *sqlcstore.Queries) (any, error) { return q.GetAuthor(ctx, ids[2]) }},
		{"GetAuthor(missing)", func(ctx context.Context, q *sqlcstore.Queries) (any, error) { return q.GetAuthor(ctx, -1) }},
		{"ListAuthors", func(ctx context.Context, q *sqlcstore.Queries) (any, error) { return q.ListAuthors(ctx) }},
		{"ListAuthorsByTag(go)", func(ctx context.Context, q *sqlcstore.Queries) (any, error) { return q.ListAuthorsByTag(ctx, "go") }},
		{"ListAuthorsByTag(none)", func(ctx context.Context, q *sqlcstore.Queries) (any, error) { return q.ListAuthorsByTag(ctx, "none") }},
		{"CountAuthors", func(ctx context.Context, q *sqlcstore.Queries) (any, error) { return q.CountAuthors(ctx) }},
		{"ListBooksByAuthor(Ada)", func(ctx context.Context, q *sqlcstore.Queries) (any, error) { return q.ListBooksByAuthor(ctx, ids[0]) }},
		{"AuthorBookCounts", func(ctx context.Context, q *sqlcstore.Queries) (any, error) { return q.AuthorBookCounts(ctx) }},
		{"AuthorSummaries(active)", func(ctx context.Context, q *sqlcstore.Queries) (any, error) { return q.AuthorSummaries(ctx, true) }},
		{"AuthorSummaries(inactive)", func(ctx context.Context, q *sqlcstore.Queries) (any, error) { return q.AuthorSummaries(ctx, false) }},
		{"CollectAuthors", func(ctx context.Context, q *sqlcstore.Queries) (any, error) { return q.CollectAuthors(ctx) }},
		{"AuthorByName(Ada)", func(ctx context.Context, q *sqlcstore.Queries) (any, error) { return q.AuthorByName(ctx, "Ada") }},
		{"AuthorByName(Dennis)", func(ctx context.Context, q *sqlcstore.Queries) (any, error) { return q.AuthorByName(ctx, "Dennis") }},
		{"AuthorByName(nobody)", func(ctx context.Context, q *sqlcstore.Queries) (any, error) { return q.AuthorByName(ctx, "nobody") }},
	}
}

// sqlcSameError reports whether a read's errors through the face and on
// the bare pool are the same: none, the same sentinel of pgx's, or the
// same text.
func sqlcSameError(face, bare error) bool {
	switch {
	case face == nil || bare == nil:
		return face == nil && bare == nil
	case errors.Is(bare, pgx.ErrNoRows):
		return errors.Is(face, pgx.ErrNoRows)
	case errors.Is(bare, pgx.ErrTooManyRows):
		return errors.Is(face, pgx.ErrTooManyRows)
	}
	return face.Error() == bare.Error()
}

// sqlcHits is the Shield's count of reads answered from its cache.
func sqlcHits(st sqlflight.Stats) uint64 { return st.FreshHits + st.StaleHits + st.NegativeHits }

// compare runs every read through the face and on the bare pool and fails
// the test, naming when, for each whose results or errors differ. It
// returns the face's results by read.
func (env *sqlcEnv) compare(t *testing.T, when string, reads []sqlcRead) map[string]any {
	t.Helper()
	out := make(map[string]any, len(reads))
	for _, r := range reads {
		got, ferr := r.run(env.ctx, env.fq)
		want, berr := r.run(env.ctx, env.bq)
		if !sqlcSameError(ferr, berr) {
			t.Errorf("%s: %s: the face's error %v, the bare pool's %v", when, r.name, ferr, berr)
			continue
		}
		if berr != nil && !errors.Is(berr, pgx.ErrNoRows) && !errors.Is(berr, pgx.ErrTooManyRows) {
			t.Errorf("%s: %s: %v", when, r.name, berr)
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %s through the face:\n\t%#v\non the bare pool:\n\t%#v", when, r.name, got, want)
		}
		out[r.name] = got
	}
	return out
}

// faceRound runs every read through the face once and returns the
// results by read.
func (env *sqlcEnv) faceRound(t *testing.T, reads []sqlcRead) map[string]any {
	t.Helper()
	out := make(map[string]any, len(reads))
	for _, r := range reads {
		v, err := r.run(env.ctx, env.fq)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) && !errors.Is(err, pgx.ErrTooManyRows) {
			t.Fatalf("%s through the face: %v", r.name, err)
		}
		out[r.name] = v
	}
	return out
}

// allHits checks that one more round of the reads through the face is
// answered from the cache alone, with what the last round returned.
func (env *sqlcEnv) allHits(t *testing.T, when string, reads []sqlcRead, last map[string]any) {
	t.Helper()
	before := env.sh.Stats()
	got := env.faceRound(t, reads)
	st := env.sh.Stats()
	if n := sqlcHits(st) - sqlcHits(before); n != uint64(len(reads)) || st.OriginExecutions != before.OriginExecutions || st.Misses != before.Misses {
		t.Errorf("%s: %d reads again through the face: %d hits, origin executions %d → %d, misses %d → %d, want %d hits and no origin: %s",
			when, len(reads), n, before.OriginExecutions, st.OriginExecutions, before.Misses, st.Misses, len(reads), statsString(st))
	}
	for _, r := range reads {
		if !reflect.DeepEqual(got[r.name], last[r.name]) {
			t.Errorf("%s: %s from the cache:\n\t%#v\nfrom the read that filled it:\n\t%#v", when, r.name, got[r.name], last[r.name])
		}
	}
}

// noneAcquired stops the test unless every one of the face's pool's
// connections is back within a few seconds of when: an origin gives its
// connection back just after its flight's callers have their result. (A
// connection that never comes back leaves the pool fewer for the reads
// that follow, until they time out waiting.)
func (env *sqlcEnv) noneAcquired(t *testing.T, when string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for env.face.Pool().Stat().AcquiredConns() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %d of the face's pool's connections still acquired: %s",
				when, env.face.Pool().Stat().AcquiredConns(), statsString(env.sh.Stats()))
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestSqlcFace: sqlc's generated code through the pgx face returns what it
// returns on the bare pool (NULLs, text[], timestamptz, date, numeric,
// jsonb, uuid, pgx.ErrNoRows), repeated reads are hits, every kind of
// sqlc write through the face (:exec, :execrows, :execresult, :one with
// RETURNING, :copyfrom, :batchexec, WithTx over the face's transactions)
// is seen by the reads that follow it, and pgx.CollectRows with
// pgx.RowToStructByName works on shared rows.
func TestSqlcFace(t *testing.T) {
	forEachExecMode(t, postgresDSN(t), func(t *testing.T, dsn string) {
		env := newSqlcEnv(t, dsn, sqlcShield())
		ctx := env.ctx
		ids := sqlcSeed(t, env)
		reads := sqlcReads(ids)

		// Cold: every read misses (or hits what an earlier one of the same
		// statement and arguments filled) and returns the bare pool's result.
		before := env.sh.Stats()
		last := env.compare(t, "cold", reads)
		if st := env.sh.Stats(); st.OriginExecutions == before.OriginExecutions || st.Fills == before.Fills {
			t.Fatalf("the cold reads reached no origin or filled nothing: %s", statsString(st))
		}
		if a, ok := last["GetAuthor(Ada)"].(sqlcstore.Author); !ok || a.Name != "Ada" || len(a.Tags) != 8 || !a.Born.Valid {
			t.Fatalf("GetAuthor(Ada) through the face: %#v", last["GetAuthor(Ada)"])
		}
		env.noneAcquired(t, "the cold reads")
		env.allHits(t, "warm", reads, last)
		env.noneAcquired(t, "the warm reads")

		// The shared rows scan concurrently, as many callers of one entry do.
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		for g := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 20 {
					r := reads[(g+i)%len(reads)]
					got, err := r.run(ctx, env.fq)
					if err != nil && !errors.Is(err, pgx.ErrNoRows) && !errors.Is(err, pgx.ErrTooManyRows) {
						errs <- fmt.Errorf("%s: %v", r.name, err)
						return
					}
					if !reflect.DeepEqual(got, last[r.name]) {
						errs <- fmt.Errorf("%s read concurrently: %#v, want %#v", r.name, got, last[r.name])
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		env.noneAcquired(t, "the concurrent reads")

		// Every write through the face, then the reads: the face's results
		// are the bare pool's again, and the probe's result changed.
		var active int64
		if err := env.bare.QueryRow(ctx, `SELECT count(*) FROM authors WHERE active AND balance IS NOT NULL`).Scan(&active); err != nil {
			t.Fatal(err)
		}
		steps := []struct {
			name  string
			probe string // a read the write changes
			write func(t *testing.T)
		}{
			{":exec UpdateAuthorBio", "GetAuthor(Brian)", func(t *testing.T) {
				if err := env.fq.UpdateAuthorBio(ctx, sqlcstore.UpdateAuthorBioParams{ID: ids[1], Bio: pgtype.Text{String: "now with a bio", Valid: true}}); err != nil {
					t.Fatal(err)
				}
			}},
			{":exec UpdateAuthorBio to NULL", "GetAuthor(Ada)", func(t *testing.T) {
				if err := env.fq.UpdateAuthorBio(ctx, sqlcstore.UpdateAuthorBioParams{ID: ids[0]}); err != nil {
					t.Fatal(err)
				}
			}},
			{":exec AddTag", "ListAuthorsByTag(go)", func(t *testing.T) {
				if err := env.fq.AddTag(ctx, sqlcstore.AddTagParams{Tag: "go", ID: ids[1]}); err != nil {
					t.Fatal(err)
				}
			}},
			{":execrows AdjustBalances", "ListAuthors", func(t *testing.T) {
				n, err := env.fq.AdjustBalances(ctx, sqlcNumeric(t, "1.25"))
				if err != nil {
					t.Fatal(err)
				}
				if n != active {
					t.Errorf(":execrows AdjustBalances affected %d rows, want %d", n, active)
				}
			}},
			{":one CreateAuthor (INSERT … RETURNING)", "ListAuthors", func(t *testing.T) {
				a, err := env.fq.CreateAuthor(ctx, sqlcstore.CreateAuthorParams{Name: "Edsger", Tags: []string{"go", "goto"}, Active: true,
					Balance: sqlcNumeric(t, "100")})
				if err != nil {
					t.Fatal(err)
				}
				want, err := env.bq.GetAuthor(ctx, a.ID)
				if err != nil || !reflect.DeepEqual(a, want) {
					t.Errorf("CreateAuthor through the face returned %#v; the bare pool reads %#v (%v)", a, want, err)
				}
			}},
			{":one CreateBook", "ListBooksByAuthor(Ada)", func(t *testing.T) {
				if _, err := env.fq.CreateBook(ctx, sqlcstore.CreateBookParams{AuthorID: ids[0], Title: "Third", Price: sqlcNumeric(t, "7.5")}); err != nil {
					t.Fatal(err)
				}
			}},
			{":copyfrom CreateAuthors", "CountAuthors", func(t *testing.T) {
				n, err := env.fq.CreateAuthors(ctx, []sqlcstore.CreateAuthorsParams{
					{Name: "Grace", Tags: []string{"cobol", "go"}, Balance: sqlcNumeric(t, "3.14")},
					{Name: "Ken", Bio: pgtype.Text{String: "copied", Valid: true}, Tags: []string{},
						Born: pgtype.Timestamptz{Time: time.Date(1943, 2, 4, 0, 0, 0, 0, time.UTC), Valid: true}},
				})
				if err != nil || n != 2 {
					t.Fatalf(":copyfrom CreateAuthors: %d, %v, want 2 rows", n, err)
				}
			}},
			{":batchexec SetVisits", "GetAuthor(Claude)", func(t *testing.T) {
				var errs []error
				env.fq.SetVisits(ctx, []sqlcstore.SetVisitsParams{{ID: ids[2], Visits: 7}, {ID: ids[3], Visits: 8}}).Exec(func(_ int, err error) {
					errs = append(errs, err)
				})
				if err := errors.Join(errs...); err != nil || len(errs) != 2 {
					t.Fatalf(":batchexec SetVisits: %d results, %v", len(errs), err)
				}
			}},
			{":execresult DeleteAuthor", "AuthorByName(Dennis)", func(t *testing.T) {
				tag, err := env.fq.DeleteAuthor(ctx, ids[4]) // the second Dennis: the first is the only one left
				if err != nil {
					t.Fatal(err)
				}
				if !tag.Delete() || tag.RowsAffected() != 1 || tag.String() != "DELETE 1" {
					t.Errorf(":execresult DeleteAuthor: command tag %q, want DELETE 1", tag)
				}
			}},
			{"WithTx over the face's Begin, committed", "AuthorSummaries(inactive)", func(t *testing.T) {
				tx, err := env.face.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer func() { _ = tx.Rollback(ctx) }()
				qtx := env.fq.WithTx(tx)
				if err := qtx.UpdateAuthorBio(ctx, sqlcstore.UpdateAuthorBioParams{ID: ids[2], Bio: pgtype.Text{String: "in a transaction", Valid: true}}); err != nil {
					t.Fatal(err)
				}
				if _, err := qtx.CreateBook(ctx, sqlcstore.CreateBookParams{AuthorID: ids[2], Title: "Transacted", Price: sqlcNumeric(t, "1")}); err != nil {
					t.Fatal(err)
				}
				if _, err := qtx.CreateAuthors(ctx, []sqlcstore.CreateAuthorsParams{{Name: "Niklaus", Tags: []string{"pascal"}}}); err != nil {
					t.Fatal(err)
				}
				// Inside: the transaction reads its own writes; outside, the
				// face still reads what was committed.
				in, err := qtx.GetAuthor(ctx, ids[2])
				if err != nil || in.Bio.String != "in a transaction" {
					t.Errorf("GetAuthor inside the transaction: %#v, %v, want its own bio", in.Bio, err)
				}
				summaries, err := qtx.AuthorSummaries(ctx, false) // Claude is the inactive one
				if err != nil || len(summaries) != 1 || summaries[0].ID != ids[2] || summaries[0].Books != 2 {
					t.Errorf("AuthorSummaries(inactive) inside the transaction: %#v, %v, want Claude's with the transaction's book", summaries, err)
				}
				out, err := env.fq.GetAuthor(ctx, ids[2])
				if err != nil || out.Bio.String == "in a transaction" {
					t.Errorf("GetAuthor outside the transaction before its commit: %#v, %v", out.Bio, err)
				}
				if err := tx.Commit(ctx); err != nil {
					t.Fatal(err)
				}
				after, err := env.fq.GetAuthor(ctx, ids[2])
				if err != nil || after.Bio.String != "in a transaction" {
					t.Errorf("GetAuthor through the face after the commit: %#v, %v, want the transaction's bio", after.Bio, err)
				}
			}},
			{"WithTx in pgx.BeginFunc over the face, rolled back", "", func(t *testing.T) {
				rollback := errors.New("roll back")
				err := pgx.BeginFunc(ctx, env.face, func(tx pgx.Tx) error {
					qtx := env.fq.WithTx(tx)
					if err := qtx.UpdateAuthorBio(ctx, sqlcstore.UpdateAuthorBioParams{ID: ids[0], Bio: pgtype.Text{String: "never", Valid: true}}); err != nil {
						return err
					}
					if _, err := qtx.DeleteAuthor(ctx, ids[1]); err != nil {
						return err
					}
					if n, err := qtx.CountAuthors(ctx); err != nil {
						return err
					} else if a, err := env.fq.CountAuthors(ctx); err != nil || a != n+1 {
						return fmt.Errorf("CountAuthors outside the transaction %d (%v), inside %d, want one more outside", a, err, n)
					}
					return rollback
				})
				if !errors.Is(err, rollback) {
					t.Fatalf("pgx.BeginFunc: %v", err)
				}
			}},
		}
		for _, step := range steps {
			prev := env.faceRound(t, reads) // the probe's entry is cached
			env.noneAcquired(t, "the reads before "+step.name)
			step.write(t)
			env.noneAcquired(t, step.name)
			got := env.compare(t, "after "+step.name, reads)
			if step.probe != "" && reflect.DeepEqual(got[step.probe], prev[step.probe]) {
				t.Errorf("after %s: %s through the face is unchanged: %#v", step.name, step.probe, got[step.probe])
			}
			if step.probe == "" && !reflect.DeepEqual(got, prev) {
				t.Errorf("after %s: the reads through the face changed", step.name)
			}
			env.noneAcquired(t, "the reads after "+step.name)
			last = got
		}
		env.allHits(t, "after the writes", reads, last)
		env.noneAcquired(t, "the last reads")
	})
}

// TestSqlcSchemasApart: one Shield, two pools whose search_path names two
// schemas: sqlc's same statements read each pool's own tables, from the
// cache too, and a write in one schema leaves the other's entries.
func TestSqlcSchemasApart(t *testing.T) {
	dsn := postgresDSN(t)
	sh := sqlcShield()
	a := newSqlcEnv(t, dsn, sh)
	b := newSqlcEnv(t, dsn, sh)
	ctx := a.ctx
	for _, e := range []struct {
		env  *sqlcEnv
		name string
	}{{a, "in A"}, {b, "in B"}} {
		if _, err := e.env.bq.CreateAuthor(ctx, sqlcstore.CreateAuthorParams{Name: e.name, Tags: []string{e.env.schema}}); err != nil {
			t.Fatal(err)
		}
	}
	list := func(env *sqlcEnv) []sqlcstore.Author {
		t.Helper()
		as, err := env.fq.ListAuthors(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return as
	}
	for round := range 2 { // misses, then hits
		before := sh.Stats()
		la, lb := list(a), list(b)
		if len(la) != 1 || la[0].Name != "in A" || len(lb) != 1 || lb[0].Name != "in B" {
			t.Fatalf("round %d: ListAuthors through A's face %#v, B's %#v, want each its own schema's author", round, la, lb)
		}
		if st := sh.Stats(); round == 1 && (sqlcHits(st)-sqlcHits(before) != 2 || st.OriginExecutions != before.OriginExecutions) {
			t.Errorf("the second round's reads: %d hits, origin executions %d → %d, want 2 hits: %s",
				sqlcHits(st)-sqlcHits(before), before.OriginExecutions, st.OriginExecutions, statsString(st))
		}
	}
	if err := a.fq.UpdateAuthorBio(ctx, sqlcstore.UpdateAuthorBioParams{ID: list(a)[0].ID, Bio: pgtype.Text{String: "A's", Valid: true}}); err != nil {
		t.Fatal(err)
	}
	if la := list(a); la[0].Bio.String != "A's" {
		t.Errorf("A's author after the write through A's face: %#v", la[0])
	}
	if lb := list(b); lb[0].Bio.Valid {
		t.Errorf("B's author after a write in A: %#v", lb[0])
	}
	a.noneAcquired(t, "A's reads")
	b.noneAcquired(t, "B's reads")
}

// TestSqlcColdReads: many cold reads of sqlc's :one in a row (each its own
// flight, whose origin borrows one of the pool's connections) give every
// connection back, and the pool never runs dry; read again, every one is a
// hit.
func TestSqlcColdReads(t *testing.T) {
	env := newSqlcEnv(t, postgresDSN(t), sqlcShield())
	ctx := env.ctx
	const n = 200
	rows := make([]sqlcstore.CreateAuthorsParams, n)
	for i := range rows {
		rows[i] = sqlcstore.CreateAuthorsParams{Name: fmt.Sprintf("author %d", i), Tags: []string{fmt.Sprint(i)}}
	}
	if got, err := env.seed.CreateAuthors(ctx, rows); err != nil || got != n {
		t.Fatalf("seed %d authors: %d, %v", n, got, err)
	}
	all, err := env.bq.ListAuthors(ctx)
	if err != nil || len(all) != n {
		t.Fatalf("ListAuthors on the bare pool: %d, %v", len(all), err)
	}
	for round := range 2 {
		before := env.sh.Stats()
		for _, want := range all {
			got, err := env.fq.GetAuthor(ctx, want.ID)
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Fatalf("round %d: GetAuthor(%d) through the face: %#v, %v, want %#v", round, want.ID, got, err, want)
			}
			env.noneAcquired(t, fmt.Sprintf("round %d, GetAuthor(%d)", round, want.ID))
		}
		st := env.sh.Stats()
		if round == 1 && (sqlcHits(st)-sqlcHits(before) != n || st.OriginExecutions != before.OriginExecutions) {
			t.Errorf("the second round: %d hits, origin executions %d → %d, want %d hits: %s",
				sqlcHits(st)-sqlcHits(before), before.OriginExecutions, st.OriginExecutions, n, statsString(st))
		}
	}
}
