// Package exampletest runs the Examples that need a server (and therefore
// carry no Output comment) against the test services, when they are
// configured, and checks what they print.
package exampletest

import (
	"bytes"
	"io"
	"os"
	"testing"
)

// Need returns the value of the environment variable name, or stops t: a
// skip naming the variable, or a failure when SQLFLIGHT_REQUIRE_INTEGRATION=1.
func Need(t *testing.T, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		if os.Getenv("SQLFLIGHT_REQUIRE_INTEGRATION") == "1" {
			t.Fatalf("%s is not set (SQLFLIGHT_REQUIRE_INTEGRATION=1)", name)
		}
		t.Skipf("%s is not set: the example needs a server", name)
	}
	return v
}

// Stdout runs f and returns what it wrote to os.Stdout. Tests that call it
// must not run in parallel.
func Stdout(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stdout
	os.Stdout = w
	done := make(chan []byte)
	go func() {
		var b bytes.Buffer
		io.Copy(&b, r)
		r.Close()
		done <- b.Bytes()
	}()
	defer func() {
		os.Stdout = saved
	}()
	f()
	os.Stdout = saved
	w.Close()
	return string(<-done)
}
