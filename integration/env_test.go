// Package integration runs sqlflight against real services: PostgreSQL (and,
// later, Redis). The services come from the environment
// (SQLFLIGHT_POSTGRES_DSN, SQLFLIGHT_REDIS_ADDR, as .ci/run sets them), or
// from containers started with testcontainers-go when a Docker engine is
// reachable. Without either the tests skip, unless
// SQLFLIGHT_REQUIRE_INTEGRATION=1, which turns every skip into a failure.
package integration

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
	"github.com/testcontainers/testcontainers-go/wait"
	"go.uber.org/goleak"
)

const (
	envPostgresDSN = "SQLFLIGHT_POSTGRES_DSN"
	envRedisAddr   = "SQLFLIGHT_REDIS_ADDR"
	envRequire     = "SQLFLIGHT_REQUIRE_INTEGRATION"

	postgresImage = "postgres:15-alpine"
	redisImage    = "redis:7-alpine"

	// serviceStartTimeout bounds starting a container (image pull included).
	serviceStartTimeout = 5 * time.Minute
	// serviceCheckTimeout bounds the reachability check of a configured service.
	serviceCheckTimeout = 15 * time.Second
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(mainRun{m}, leakOptions()...)
}

// mainRun terminates the containers this package started after the tests
// ran and before goleak looks for leaked goroutines.
type mainRun struct{ m *testing.M }

func (r mainRun) Run() int {
	code := r.m.Run()
	removeFleetBinary()
	if err := terminateServices(); err != nil {
		fmt.Fprintf(os.Stderr, "integration: terminating containers: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// leakOptions lists the goroutines that outlive the tests on purpose. Only
// the testcontainers path starts any: its Docker client keeps HTTP
// keep-alive connections to the engine, and its reaper ("ryuk") session
// keeps a connection open until the process exits, which is what reaps the
// containers if the process dies. Nothing else in this package speaks HTTP.
// (The options are fixed before the tests run, so they cannot depend on
// whether a container was started.)
func leakOptions() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreAnyFunction("github.com/testcontainers/testcontainers-go.(*Reaper).connect.func1"),
	}
}

// requireIntegration reports whether missing services are failures.
func requireIntegration() bool { return os.Getenv(envRequire) == "1" }

// unavailable skips tb, or fails it when integration services are required.
func unavailable(tb testing.TB, service, reason string) {
	tb.Helper()
	if requireIntegration() {
		tb.Fatalf("%s is required (%s=1) but not available: %s", service, envRequire, reason)
	}
	tb.Skipf("%s not available: %s (set %s, or make a Docker engine reachable)", service, reason, service2env(service))
}

func service2env(service string) string {
	if service == "Redis" {
		return envRedisAddr
	}
	return envPostgresDSN
}

// service is one external service, resolved at most once per package run.
type service struct {
	once sync.Once
	addr string // DSN or host:port; empty when unavailable
	why  string // why it is unavailable
	// fatal is set when the environment named the service but it did not
	// answer: that is a broken setup, never a reason to skip.
	fatal bool
	stop  func(context.Context) error // terminates a container we started
}

var (
	postgresService service
	redisService    service

	startedMu sync.Mutex
	started   []*service
)

func terminateServices() error {
	startedMu.Lock()
	defer startedMu.Unlock()
	var errs []error
	for _, s := range started {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		errs = append(errs, s.stop(ctx))
		cancel()
	}
	started = nil
	return errors.Join(errs...)
}

// postgresDSN returns the DSN of a PostgreSQL 15 server for tests:
// SQLFLIGHT_POSTGRES_DSN, or a container started once per package run.
func postgresDSN(tb testing.TB) string {
	tb.Helper()
	s := &postgresService
	s.once.Do(func() {
		if dsn := os.Getenv(envPostgresDSN); dsn != "" {
			s.addr = dsn
			if err := checkPostgres(dsn); err != nil {
				s.addr, s.why, s.fatal = "", fmt.Sprintf("%s=%q does not answer: %v", envPostgresDSN, redactDSN(dsn), err), true
			}
			return
		}
		startContainer(s, func(ctx context.Context) (string, func(context.Context) error, error) {
			c, err := tcpostgres.Run(ctx, postgresImage,
				tcpostgres.WithDatabase("test"),
				tcpostgres.WithUsername("postgres"),
				tcpostgres.WithPassword("postgres"),
				tcpostgres.BasicWaitStrategies(),
			)
			stop := func(ctx context.Context) error {
				if c == nil {
					return nil
				}
				return c.Terminate(ctx)
			}
			if err != nil {
				return "", stop, err
			}
			dsn, err := c.ConnectionString(ctx, "sslmode=disable")
			if err == nil {
				err = checkPostgres(dsn)
			}
			return dsn, stop, err
		})
	})
	if s.addr == "" {
		if s.fatal {
			tb.Fatal(s.why)
		}
		unavailable(tb, "PostgreSQL", s.why)
	}
	return s.addr
}

// redisAddr returns host:port of a Redis 7 server for tests:
// SQLFLIGHT_REDIS_ADDR, or a container started once per package run.
func redisAddr(tb testing.TB) string {
	tb.Helper()
	s := &redisService
	s.once.Do(func() {
		if addr := os.Getenv(envRedisAddr); addr != "" {
			s.addr = addr
			if err := checkTCP(addr); err != nil {
				s.addr, s.why, s.fatal = "", fmt.Sprintf("%s=%q does not answer: %v", envRedisAddr, addr, err), true
			}
			return
		}
		startContainer(s, func(ctx context.Context) (string, func(context.Context) error, error) {
			c, err := testcontainers.Run(ctx, redisImage,
				testcontainers.WithExposedPorts("6379/tcp"),
				testcontainers.WithWaitStrategy(wait.ForListeningPort("6379/tcp")),
			)
			stop := func(ctx context.Context) error {
				if c == nil {
					return nil
				}
				return c.Terminate(ctx)
			}
			if err != nil {
				return "", stop, err
			}
			addr, err := c.PortEndpoint(ctx, "6379/tcp", "")
			return addr, stop, err
		})
	})
	if s.addr == "" {
		if s.fatal {
			tb.Fatal(s.why)
		}
		unavailable(tb, "Redis", s.why)
	}
	return s.addr
}

// startContainer fills s from run when a Docker engine is reachable. A
// container that was created is remembered for termination even when it
// failed to become ready.
func startContainer(s *service, run func(context.Context) (string, func(context.Context) error, error)) {
	if why := dockerUnreachable(); why != "" {
		s.why = why
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), serviceStartTimeout)
	defer cancel()
	var (
		addr string
		stop func(context.Context) error
		err  error
	)
	func() {
		// testcontainers panics when it cannot work out a Docker host.
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("testcontainers panicked: %v", r)
			}
		}()
		addr, stop, err = run(ctx)
	}()
	if stop != nil {
		s.stop = stop
		startedMu.Lock()
		started = append(started, s)
		startedMu.Unlock()
	}
	if err != nil {
		s.why = fmt.Sprintf("starting a container: %v", err)
		return
	}
	s.addr = addr
}

// dockerUnreachable returns why no Docker engine can be used, or "" when one
// answers. It only dials: it starts nothing, so a machine without Docker
// pays nothing and leaks nothing.
func dockerUnreachable() string {
	var candidates []string
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		candidates = append(candidates, h)
	} else {
		candidates = append(candidates, "unix:///var/run/docker.sock")
		if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
			candidates = append(candidates, "unix://"+filepath.Join(d, "docker.sock"))
		}
		if home, err := os.UserHomeDir(); err == nil {
			candidates = append(candidates,
				"unix://"+filepath.Join(home, ".docker", "run", "docker.sock"),
				"unix://"+filepath.Join(home, ".docker", "desktop", "docker.sock"))
		}
	}
	var tried []string
	for _, c := range candidates {
		u, err := url.Parse(c)
		if err != nil {
			tried = append(tried, fmt.Sprintf("%s: %v", c, err))
			continue
		}
		var network, addr string
		switch u.Scheme {
		case "unix":
			network, addr = "unix", u.Path
		case "tcp", "http", "https":
			network, addr = "tcp", u.Host
		default:
			// An engine reached another way (ssh, npipe): let
			// testcontainers try it.
			return ""
		}
		conn, err := net.DialTimeout(network, addr, 2*time.Second)
		if err != nil {
			tried = append(tried, fmt.Sprintf("%s: %v", c, err))
			continue
		}
		_ = conn.Close()
		return ""
	}
	return fmt.Sprintf("%s is not set and no Docker engine answers (%s)", envPostgresDSN, strings.Join(tried, "; "))
}

func checkPostgres(dsn string) error {
	ctx, cancel := context.WithTimeout(context.Background(), serviceCheckTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var v int
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&v); err != nil {
		return err
	}
	return nil
}

func checkTCP(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, serviceCheckTimeout)
	if err != nil {
		return err
	}
	return conn.Close()
}

// redactDSN hides a password in a URL DSN for messages.
func redactDSN(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.Scheme != "" {
		return u.Redacted()
	}
	return "(keyword/value DSN)"
}

// withDSNParams returns dsn with the given parameters set (pairs of key,
// value), in URL or keyword/value form as dsn is.
func withDSNParams(tb testing.TB, dsn string, kv ...string) string {
	tb.Helper()
	if len(kv)%2 != 0 {
		tb.Fatalf("withDSNParams: odd number of arguments %q", kv)
	}
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			tb.Fatalf("parse DSN: %v", err)
		}
		q := u.Query()
		for i := 0; i < len(kv); i += 2 {
			q.Set(kv[i], kv[i+1])
		}
		u.RawQuery = q.Encode()
		return u.String()
	}
	var b strings.Builder
	b.WriteString(dsn)
	for i := 0; i < len(kv); i += 2 {
		v := strings.ReplaceAll(strings.ReplaceAll(kv[i+1], `\`, `\\`), `'`, `\'`)
		fmt.Fprintf(&b, " %s='%s'", kv[i], v)
	}
	return b.String()
}

// execMode is a pgx query exec mode, chosen with a DSN parameter.
type execMode struct {
	name  string
	value string // default_query_exec_mode; "" leaves pgx's default
}

var execModes = []execMode{
	{name: "default"},
	{name: "simple_protocol", value: "simple_protocol"},
}

// forEachExecMode runs f as a subtest for pgx's default query exec mode (the
// extended protocol with a statement cache) and for the simple protocol,
// which sends arguments and receives results as text.
func forEachExecMode(t *testing.T, dsn string, f func(t *testing.T, dsn string)) {
	t.Helper()
	for _, m := range execModes {
		t.Run(m.name, func(t *testing.T) {
			d := dsn
			if m.value != "" {
				d = withDSNParams(t, dsn, "default_query_exec_mode", m.value)
			}
			f(t, d)
		})
	}
}
