//go:build unix

// Package cputime tells benchmarks the CPU time the process has used.
package cputime

import (
	"syscall"
	"time"
)

// Process is the CPU time (user + system) the process has used so far, and
// whether the system tells it.
func Process() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
