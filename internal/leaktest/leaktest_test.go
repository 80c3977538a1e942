package leaktest

import (
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) { VerifyTestMain(m) }

// TestLeakedSeesARunningGoroutine: a goroutine left running is reported
// with its stack, and no longer once it ended.
func TestLeakedSeesARunningGoroutine(t *testing.T) {
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		parkForLeaktest(stop)
	}()
	left := Leaked(20 * time.Millisecond)
	found := false
	for _, s := range left {
		found = found || strings.Contains(s, "parkForLeaktest")
	}
	if !found {
		t.Fatalf("a running goroutine is not reported: %q", left)
	}
	close(stop)
	<-done
	for _, s := range Leaked(5 * time.Second) {
		if strings.Contains(s, "parkForLeaktest") {
			t.Fatalf("an ended goroutine is still reported: %s", s)
		}
	}
}

//go:noinline
func parkForLeaktest(stop chan struct{}) { <-stop }
