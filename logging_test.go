package sqlflight

import (
	"bytes"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// logBuffer is a log sink safe for the background goroutines that write it.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

const secretValue = "alice@example.com"

// badInput is the error PostgreSQL returns for a malformed argument: its
// message carries the argument's value.
func badInput() error {
	return fmt.Errorf("query failed: %w", &pgconn.PgError{Severity: "ERROR", Code: "22P02",
		Message: `invalid input syntax for type integer: "` + secretValue + `"`})
}

// A failed refresh and a stale-if-error serve are logged with the
// SQLSTATE and its class, never with the database's message and the
// argument value it holds.
func TestWarningsCarryNoErrorMessages(t *testing.T) {
	logs := &logBuffer{}
	clk := newFakeClock()
	var fail atomic.Bool
	d := &fakeDriver{onQuery: func(context.Context, string, []driver.NamedValue) (driver.Rows, error) {
		if fail.Load() {
			return nil, badInput()
		}
		return oneRow(int64(1)), nil
	}}
	db, s := openFake(t, d, Options{Clock: clk, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	t.Cleanup(func() { _ = s.Close() })

	readN(t, db, ttlQuery, 1)
	clk.Add(11 * time.Second) // stale: served, refreshed in the background
	fail.Store(true)
	readN(t, db, ttlQuery, 1)
	settle(t, s)
	if s.Stats().RefreshFailures != 1 {
		t.Fatalf("refresh failures = %d, want 1", s.Stats().RefreshFailures)
	}
	clk.Add(61 * time.Second) // expired: the failing query makes a stale-if-error serve
	readN(t, db, ttlQuery, 1)
	if s.Stats().StaleIfError != 1 {
		t.Fatalf("stale-if-error serves = %d, want 1", s.Stats().StaleIfError)
	}

	out := logs.String()
	for _, want := range []string{"background refresh failed", "serving a stale result", "error.sqlstate=22P02",
		`error.class="data exception"`} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, secretValue) || strings.Contains(out, "invalid input syntax") {
		t.Errorf("log carries the database's message:\n%s", out)
	}
}

// A panic in the origin path is logged by its type, not by a text that may
// be built from data.
func TestPanicLogCarriesNoData(t *testing.T) {
	logs := &logBuffer{}
	d := &fakeDriver{onQuery: func(context.Context, string, []driver.NamedValue) (driver.Rows, error) {
		panic("bad row: " + secretValue)
	}}
	db, _ := openFake(t, d, Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	var n int64
	if err := db.QueryRow("SELECT n FROM panic_log_t WHERE id = $1", 1).Scan(&n); !errors.Is(err, ErrOriginPanicked) {
		t.Fatalf("err = %v, want ErrOriginPanicked", err)
	}
	out := logs.String()
	if !strings.Contains(out, "origin query panicked") || !strings.Contains(out, `panic="value of type string"`) {
		t.Errorf("log lacks the panic's type:\n%s", out)
	}
	if strings.Contains(out, secretValue) {
		t.Errorf("log carries the panic's text:\n%s", out)
	}
}

func TestErrAttr(t *testing.T) {
	logs := &logBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	type netErr struct{ error }
	for _, c := range []struct {
		err  error
		want string
	}{
		{badInput(), `error.sqlstate=22P02 error.class="data exception"`},
		{&pgconn.PgError{Code: "P0001", Message: secretValue}, `error.sqlstate=P0001 error.class="PL/pgSQL error"`},
		{&pgconn.PgError{Code: "bad!", Message: secretValue}, `error.sqlstate=????? error.class="class ??"`},
		{fmt.Errorf("Error 1366: Incorrect integer value: '%s'", secretValue), "error.type=*errors.errorString"},
		{fmt.Errorf("wrapped: %w", errors.Join(context.DeadlineExceeded, errors.New(secretValue))),
			`error.type=context.deadlineExceededError error.what="timed out"`},
		{fmt.Errorf("%w: %v", ErrOriginPanicked, secretValue), `error.what="sqlflight: origin query panicked"`},
		{driver.ErrBadConn, `error.what="bad connection"`},
	} {
		log.Info("x", errText.Attr(c.err))
		if got := errText.Class(c.err); strings.Contains(got, secretValue) {
			t.Errorf("errText.Class(%v) = %q", c.err, got)
		}
		out := logs.String()
		logs.mu.Lock()
		logs.buf.Reset()
		logs.mu.Unlock()
		if !strings.Contains(out, c.want) || strings.Contains(out, secretValue) {
			t.Errorf("errText.Attr(%v) logged %q, want %q and no data", c.err, out, c.want)
		}
	}
	log.Info("x", errText.Attr(nil))
	if strings.Contains(logs.String(), "error") {
		t.Errorf("a nil error was logged: %q", logs.String())
	}
	if got := errText.Class(badInput()); got != "SQLSTATE 22P02 (data exception)" {
		t.Errorf("errText.Class = %q", got)
	}
}

// setDefaultLogger makes a text logger on a fresh buffer the process's
// slog.Default() for the test, as an application's main does, and puts the
// previous one back after it.
func setDefaultLogger(t *testing.T) *logBuffer {
	t.Helper()
	prev := slog.Default()
	t.Cleanup(func() { slog.SetDefault(prev) })
	logs := &logBuffer{}
	slog.SetDefault(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	return logs
}

func readAll(t *testing.T, db interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}, query string, args ...any) {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), query, args...)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
	}
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}
}

// A Shield without Options.Logger logs through slog.Default() as it is when
// it logs: a default set by the application after the Shield was made gets
// the bad-annotation warning, at WARN level (not at INFO with "WARN" in the
// message, as the log package's bridge would print it).
func TestLoggerResolvedAtLoggingTime(t *testing.T) {
	db, _ := openFake(t, &fakeDriver{})
	logs := setDefaultLogger(t)
	readAll(t, db, "/* sqlflight: bogus */ SELECT n FROM logger_default_t")
	out := logs.String()
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, `msg="sqlflight: malformed annotation`) {
		t.Fatalf("the application's default logger did not get the warning at WARN level:\n%s", out)
	}
	if strings.Contains(out, "level=INFO") {
		t.Errorf("a warning came out at INFO:\n%s", out)
	}
}

// The Shield of sql.Open("sqlflight", …), made at package initialisation,
// follows slog.SetDefault too, and SetLogger gives it a logger of its own
// (nil goes back to slog.Default()).
func TestDefaultShieldLogger(t *testing.T) {
	logs := setDefaultLogger(t)
	Default().log.Warn("sqlflight: test line one")
	if out := logs.String(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, "test line one") {
		t.Fatalf("the default Shield did not log through slog.Default():\n%s", out)
	}
	own := &logBuffer{}
	Default().SetLogger(slog.New(slog.NewJSONHandler(own, nil)))
	t.Cleanup(func() { Default().SetLogger(nil) })
	Default().log.With("scope", "s1").WithGroup("g").Warn("sqlflight: test line two", "k", "v")
	if got := own.String(); !strings.Contains(got, `"level":"WARN"`) ||
		!strings.Contains(got, `"scope":"s1","g":{"k":"v"}`) {
		t.Fatalf("SetLogger's logger did not get the line with its attributes and group:\n%s", got)
	}
	if strings.Contains(logs.String(), "test line two") {
		t.Errorf("slog.Default() got a line meant for SetLogger's logger")
	}
	Default().SetLogger(nil)
	Default().log.Warn("sqlflight: test line three")
	if !strings.Contains(logs.String(), "test line three") {
		t.Errorf("SetLogger(nil) did not go back to slog.Default()")
	}
}

// SetLogger replaces Options.Logger while the Shield runs, from any
// goroutine (run with -race).
func TestSetLoggerConcurrent(t *testing.T) {
	first, second := &logBuffer{}, &logBuffer{}
	db, s := openFake(t, &fakeDriver{}, Options{Logger: slog.New(slog.NewTextHandler(first, nil))})
	readAll(t, db, "/* sqlflight: bogus1 */ SELECT n FROM logger_set_t")
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i == 0 {
				s.SetLogger(slog.New(slog.NewTextHandler(second, nil)))
			}
			s.log.Info("sqlflight: concurrent line")
		}()
	}
	wg.Wait()
	readAll(t, db, "/* sqlflight: bogus2 */ SELECT n FROM logger_set_t2")
	if !strings.Contains(first.String(), "malformed annotation") {
		t.Errorf("Options.Logger did not get the first warning:\n%s", first.String())
	}
	if !strings.Contains(second.String(), "malformed annotation") || strings.Count(first.String(), "malformed annotation") != 1 {
		t.Errorf("SetLogger's logger did not get the second warning:\nfirst:\n%s\nsecond:\n%s", first.String(), second.String())
	}
}
