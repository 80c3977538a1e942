//go:build !unix

// Package cputime tells benchmarks the CPU time the process has used.
package cputime

import "time"

// Process is not measured on this system: benchmarks report wall time only.
func Process() (time.Duration, bool) { return 0, false }
