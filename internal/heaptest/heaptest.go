// Package heaptest measures heap memory for tests: what a piece of code
// allocates, and what the values it makes keep. It stops the world to read
// the heap (runtime.ReadMemStats after runtime.GC), so it is for tests, not
// for benchmarks or production code. Other goroutines of the process that
// allocate or free meanwhile disturb the numbers.
package heaptest

import "runtime"

// Allocated returns the bytes the heap allocated while f ran.
func Allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// Least is the least Allocated of runs calls of f: what other goroutines
// allocate meanwhile only adds to a measure, so the least is the closest to
// f's own. f must do the same work every time.
func Least(runs int, f func()) uint64 {
	least := Allocated(f)
	for range runs - 1 {
		least = min(least, Allocated(f))
	}
	return least
}

// Retained returns the heap memory that each of copies values made by build
// keeps alive, on average.
func Retained(copies int, build func() any) float64 {
	keep := make([]any, copies)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range keep {
		keep[i] = build()
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(keep)
	return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(copies)
}
