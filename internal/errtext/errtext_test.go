package errtext_test

import (
	"errors"
	"testing"

	"github.com/sqlflight/sqlflight/internal/errtext"
)

// TestWrapfSaysSqlflightOnce: a wrapped error's prefix is dropped unless it
// leads the message, and the wrapped errors are still found.
func TestWrapfSaysSqlflightOnce(t *testing.T) {
	inner := errors.New("sqlflight: inner")
	err := errtext.Wrapf("sqlflight: outer: %w", inner)
	if err.Error() != "sqlflight: outer: inner" || !errors.Is(err, inner) {
		t.Fatalf("%q, Is %v", err, errors.Is(err, inner))
	}
	if err := errtext.Wrapf("%w: more", inner); err.Error() != "sqlflight: inner: more" || !errors.Is(err, inner) {
		t.Fatalf("leading: %q", err)
	}
	plain := errors.New("plain")
	if err := errtext.Wrapf("sqlflight: x: %w", plain); err.Error() != "sqlflight: x: plain" || !errors.Is(err, plain) {
		t.Fatalf("plain: %q", err)
	}
	if err := errtext.Wrapf("sqlflight: a: %w: b: %v", inner, errors.New("sqlflight: other")); err.Error() != "sqlflight: a: inner: b: other" {
		t.Fatalf("two: %q", err)
	}
}
