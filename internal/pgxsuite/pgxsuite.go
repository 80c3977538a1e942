// Package pgxsuite runs pgx's own database/sql test suite (the stdlib
// package's tests, read from the Go module cache) through sqlflight.
// .ci/pgx-stdlib copies those tests into a temporary module, rewrites the few
// lines that choose their driver so that they call the functions below, and
// runs them once per Mode. Nothing of pgx's test code lives in this
// repository.
//
// The mode comes from SQLFLIGHT_PGXSUITE_MODE: "coalesce" wraps every
// database in a Shield with the zero Options (shareable reads coalesce,
// nothing is cached); "ttl" gives every statement a default policy of
// Soft: time.Minute, so shareable reads are also cached.
package pgxsuite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"flag"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlflight/sqlflight"
)

// EnvMode names the environment variable that selects the mode.
const EnvMode = "SQLFLIGHT_PGXSUITE_MODE"

// driverSuffix turns a pgx driver name into the name of its sqlflight-wrapped
// registration.
const driverSuffix = "+sqlflight"

var (
	once   sync.Once
	shield *sqlflight.Shield
	mode   string
)

// Shield returns the Shield every database of the suite goes through,
// configured by the mode. It panics on an unknown mode.
func Shield() *sqlflight.Shield {
	once.Do(func() {
		mode = os.Getenv(EnvMode)
		var o sqlflight.Options
		switch mode {
		case "coalesce":
		case "ttl":
			o.Default = sqlflight.Policy{Soft: time.Minute}
		default:
			panic(fmt.Sprintf("pgxsuite: %s=%q: want coalesce or ttl", EnvMode, mode))
		}
		shield = sqlflight.New(o)
		for _, name := range []string{"pgx", "pgx/v5"} {
			shield.Register(name+driverSuffix, stdlib.GetDefaultDriver())
		}
	})
	return shield
}

// OpenDB stands for stdlib.OpenDB: pgx's connector for config, wrapped.
func OpenDB(config pgx.ConnConfig, opts ...stdlib.OptionOpenDB) *sql.DB {
	return Shield().OpenDB(stdlib.GetConnector(config, opts...))
}

// OpenDBFromPool stands for stdlib.OpenDBFromPool.
func OpenDBFromPool(pool *pgxpool.Pool, opts ...stdlib.OptionOpenDB) *sql.DB {
	return Shield().OpenDB(stdlib.GetPoolConnector(pool, opts...))
}

// Open stands for sql.Open with one of pgx's driver names: it opens the same
// DSN through the wrapped registration of that driver.
func Open(driverName, dsn string) (*sql.DB, error) {
	Shield()
	switch driverName {
	case "pgx", "pgx/v5":
		return sql.Open(driverName+driverSuffix, dsn)
	}
	return nil, fmt.Errorf("pgxsuite: no sqlflight registration for driver %q", driverName)
}

// StdlibConn stands for the type assertion driverConn.(*stdlib.Conn) in a
// (*sql.Conn).Raw callback. database/sql hands Raw sqlflight's virtual
// connection; a sqlflight user reaches pgx's connection through its Unwrap
// method, which opens the real connection if needed and stops sharing on
// that connection from then on.
func StdlibConn(driverConn any) *stdlib.Conn {
	u, ok := driverConn.(interface{ Unwrap() driver.Conn })
	if !ok {
		panic(fmt.Sprintf("pgxsuite: Raw gave %T, not a sqlflight connection", driverConn))
	}
	return u.Unwrap().(*stdlib.Conn)
}

// server is what the suite's skip helpers ask about the server, learned once
// on a connection of its own.
var server struct {
	once    sync.Once
	crdb    bool
	version int64 // major version; 0 if not PostgreSQL
	err     error
}

func learnServer() {
	server.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, os.Getenv("PGX_TEST_DATABASE"))
		if err != nil {
			server.err = err
			return
		}
		defer conn.Close(ctx)
		server.crdb = conn.PgConn().ParameterStatus("crdb_version") != ""
		major := regexp.MustCompile(`^[0-9]+`).FindString(conn.PgConn().ParameterStatus("server_version"))
		if major != "" {
			server.version, server.err = strconv.ParseInt(major, 10, 64)
		}
	})
}

// SkipCockroachDB stands for the suite's skipCockroachDB. pgx's helper reads
// the server's parameters through Raw on one of db's connections, which would
// make that connection bypass sharing for the rest of the test; this one asks
// a connection of its own to the same server.
func SkipCockroachDB(t testing.TB, _ *sql.DB, msg string) {
	t.Helper()
	learnServer()
	if server.err != nil {
		t.Fatalf("pgxsuite: asking the server: %v", server.err)
	}
	if server.crdb {
		t.Skip(msg)
	}
}

// SkipPostgreSQLVersionLessThan stands for the suite's helper of that name,
// for the same reason as SkipCockroachDB.
func SkipPostgreSQLVersionLessThan(t testing.TB, _ *sql.DB, minVersion int64) {
	t.Helper()
	learnServer()
	if server.err != nil {
		t.Fatalf("pgxsuite: asking the server: %v", server.err)
	}
	if server.version != 0 && server.version < minVersion {
		t.Skipf("Test requires PostgreSQL v%d+", minVersion)
	}
}

// Main runs the tests, then prints the Shield's counters. When the whole
// suite ran (no -run filter) it fails if sqlflight's sharing path was never
// taken (no flight; in ttl mode, no cache fill): the suite would then have
// tested pgx alone.
func Main(m *testing.M) {
	s := Shield()
	code := m.Run()
	os.Exit(report(mode, mode, s.Stats(), code))
}

// report prints st, the suite's counters (label names the run), and
// returns the suite's exit code: code, or 1 when a whole run (no -run
// filter) never took sqlflight's sharing path (no flight; in ttl mode, no
// cache fill), and so would have tested pgx alone.
func report(mode, label string, st sqlflight.Stats, code int) int {
	reasons := make([]string, 0, len(st.BypassReasons))
	for r, n := range st.BypassReasons {
		reasons = append(reasons, fmt.Sprintf("%s=%d", r, n))
	}
	sort.Strings(reasons)
	fmt.Printf("sqlflight (%s): statements=%d bypassed=%d flights=%d followers=%d origin=%d fills=%d fresh=%d stale=%d misses=%d invalidations=%d bypass[%s]\n",
		label, st.Queries, st.Bypassed, st.Flights, st.Followers, st.OriginExecutions,
		st.Fills, st.FreshHits, st.StaleHits, st.Misses, st.Invalidations, strings.Join(reasons, " "))
	if f := flag.Lookup("test.run"); code == 0 && f != nil && f.Value.String() == "" {
		switch {
		case st.Flights == 0:
			fmt.Println("FAIL: no statement took sqlflight's sharing path")
			code = 1
		case mode == "ttl" && st.Fills == 0:
			fmt.Println("FAIL: the default TTL policy never filled the cache")
			code = 1
		}
	}
	return code
}
