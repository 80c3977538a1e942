package feed

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// TestUnavailable: Unavailable's error says ErrUnavailable's text and its
// reason, wraps both ErrUnavailable and its cause, and Reason finds the
// reason through other wrappers (and nothing in other errors).
func TestUnavailable(t *testing.T) {
	cause := &pgconn.PgError{Code: "42501"}
	err := fmt.Errorf("outer: %w", Unavailable(cause, "the role lacks %s", "REPLICATION"))
	if got := err.Error(); got != "outer: sqlflight: change feed unavailable: the role lacks REPLICATION" {
		t.Errorf("text %q", got)
	}
	var pe *pgconn.PgError
	if !errors.Is(err, ErrUnavailable) || !errors.As(err, &pe) || pe != cause {
		t.Errorf("%v wraps neither ErrUnavailable nor its cause", err)
	}
	if r, ok := Reason(err); !ok || r != "the role lacks REPLICATION" {
		t.Errorf("Reason = %q, %v", r, ok)
	}
	if r, ok := Reason(errors.New("sqlflight: change feed unavailable: no")); ok || r != "" {
		t.Errorf("Reason of another error = %q, %v", r, ok)
	}
	if err := Unavailable(nil, "plain"); !errors.Is(err, ErrUnavailable) {
		t.Errorf("%v without a cause does not wrap ErrUnavailable", err)
	}
}

// TestWrapfSaysSqlflightOnce: an argument's own "sqlflight: " is dropped
// from the text, not from the chain.
func TestWrapfSaysSqlflightOnce(t *testing.T) {
	inner := errors.New("sqlflight: inner")
	err := wrapf("sqlflight: outer: %w", inner)
	if err.Error() != "sqlflight: outer: inner" || !errors.Is(err, inner) {
		t.Fatalf("wrapf: %q", err)
	}
}

func TestValidPublication(t *testing.T) {
	for name, want := range map[string]bool{
		"sqlflight": true, "App_Pub$1": true, strings.Repeat("p", 63): true,
		"": false, strings.Repeat("p", 64): false, "a'b": false, "a b": false, `a"b`: false, "é": false,
	} {
		if got := ValidPublication(name); got != want {
			t.Errorf("ValidPublication(%q) = %v, want %v", name, got, want)
		}
	}
}

// countingSink counts what a source reports.
type countingSink struct{ ready, applied, reapplied, caughtUp, resyncs, warnings int }

func (k *countingSink) Ready()                    { k.ready++ }
func (k *countingSink) Apply([]Change, time.Time) { k.applied++ }
func (k *countingSink) Reapply([]Change)          { k.reapplied++ }
func (k *countingSink) CaughtUp()                 { k.caughtUp++ }
func (k *countingSink) Resync()                   { k.resyncs++ }
func (k *countingSink) Warn(string, error)        { k.warnings++ }

// TestSourcesUnreachable: a source whose server cannot be reached returns
// an ErrUnavailable whose reason is Classify's description of the error,
// and reports nothing.
func TestSourcesUnreachable(t *testing.T) {
	cfg, err := pgx.ParseConfig("postgres://nobody@127.0.0.1:1/none?sslmode=disable&connect_timeout=5")
	if err != nil {
		t.Fatal(err)
	}
	for name, run := range map[string]func(context.Context, Source, Sink) error{"Notify": Notify, "Replicate": Replicate} {
		classified := 0
		src := Source{Conn: cfg, Publication: "sqlflight", Classify: func(error) string { classified++; return "refused here" }}
		var sink countingSink
		err := run(context.Background(), src, &sink)
		if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "(refused here)") || classified != 1 {
			t.Errorf("%s: %v (classified %d times)", name, err, classified)
		}
		if sink != (countingSink{}) {
			t.Errorf("%s reported %+v", name, sink)
		}
	}
}

// TestSourcesCheckTheServer: a source runs SameServer on its new
// connection (the replication source on its replication connection), and
// its error ends the stream before Ready.
func TestSourcesCheckTheServer(t *testing.T) {
	cfg, err := pgx.ParseConfig(postgresDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	refused := Unavailable(nil, "another database")
	checked := 0
	src := Source{Conn: cfg, SameServer: func(ctx context.Context, pc *pgconn.PgConn) error {
		checked++
		if pc == nil || pc.IsClosed() {
			t.Error("SameServer got no open connection")
		}
		return refused
	}}
	for name, run := range map[string]func(context.Context, Source, Sink) error{"Notify": Notify, "Replicate": Replicate} {
		checked = 0
		var sink countingSink
		if err := run(context.Background(), src, &sink); err != refused || checked != 1 || sink.ready != 0 {
			t.Errorf("%s: %v, SameServer called %d times, ready %d", name, err, checked, sink.ready)
		}
	}
}
