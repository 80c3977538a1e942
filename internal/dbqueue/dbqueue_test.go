package dbqueue_test

import (
	"testing"

	"github.com/sqlflight/sqlflight/internal/dbqueue"
)

// TestQueueCalibration: this database/sql hands a connection to a queued
// caller on a branch of its own, which FromQueue recognizes (if not, a
// capped pool would break a herd into several flights again).
func TestQueueCalibration(t *testing.T) {
	if !dbqueue.Calibrated() {
		t.Fatal("database/sql resets a queued caller's connection where it resets a free one: fromQueue cannot tell them apart")
	}
}
