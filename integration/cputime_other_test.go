//go:build !unix

package integration

import "time"

// processCPU is not measured on this system: benchmarks report wall time
// only.
func processCPU() (time.Duration, bool) { return 0, false }
