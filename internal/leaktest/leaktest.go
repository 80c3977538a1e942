// Package leaktest fails a test binary that leaves goroutines running.
//
// VerifyTestMain(m) runs the tests and then waits, for a few seconds at
// most, until every goroutine the tests started has ended. Goroutines of
// the runtime and the testing package are not counted. If some remain, it
// prints their stacks and exits with status 1, whatever the tests said.
package leaktest

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// wait bounds how long VerifyTestMain waits for goroutines to end.
const wait = 5 * time.Second

// ignored are functions that, found in a goroutine's stack, mark it as
// the runtime's or the test harness's.
var ignored = []string{
	"testing.(*M).",
	"testing.tRunner",
	"testing.runTests",
	"runtime.goexit0",
	"os/signal.signal_recv",
	"os/signal.loop",
	"runtime.ensureSigM",
	"runtime/trace.Start",
}

// VerifyTestMain runs m and exits: with m's status, or 1 when goroutines
// leaked.
func VerifyTestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if left := Leaked(wait); len(left) > 0 {
			fmt.Fprintf(os.Stderr, "leaktest: %d goroutine(s) still running after the tests:\n\n%s\n", len(left), strings.Join(left, "\n\n"))
			code = 1
		}
	}
	os.Exit(code)
}

// Leaked returns the stacks of the goroutines other than the caller's that
// are still running after waiting at most d for them to end.
func Leaked(d time.Duration) []string {
	deadline := time.Now().Add(d)
	for pause := time.Millisecond; ; pause = min(2*pause, 100*time.Millisecond) {
		left := others()
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(pause)
	}
}

// others returns the stacks of the other goroutines, but those the
// runtime and the testing package run.
func others() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	stacks := strings.Split(string(buf), "\n\n")
	var out []string
	for _, s := range stacks[1:] { // the first is the caller's
		if s = strings.TrimSpace(s); s != "" && !harness(s) {
			out = append(out, s)
		}
	}
	return out
}

// harness reports whether stack is a goroutine of the runtime or of the
// testing package.
func harness(stack string) bool {
	for _, f := range ignored {
		if strings.Contains(stack, f) {
			return true
		}
	}
	return false
}
