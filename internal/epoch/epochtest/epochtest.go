// Package epochtest holds test helpers for the epochs of internal/epoch.
package epochtest

import (
	"sync"
	"testing"

	"github.com/sqlflight/sqlflight/internal/epoch"
)

// Watch watches the epochs of tables and of "all" from a goroutine of
// its own until stop is closed, failing t if one ever goes down; wait on
// the WaitGroup after closing stop.
func Watch(t testing.TB, e *epoch.Epochs, tables ...string) (chan struct{}, *sync.WaitGroup) {
	stop := make(chan struct{})
	watch := new(sync.WaitGroup)
	watch.Go(func() {
		last := make([]uint64, len(tables)+1)
		cur := make([]uint64, len(tables)+1)
		for {
			select {
			case <-stop:
				return
			default:
			}
			for i, tb := range tables {
				cur[i] = e.TableEpoch(tb)
			}
			cur[len(tables)] = e.AllEpoch()
			for i := range cur {
				if cur[i] < last[i] {
					t.Errorf("epoch %d went back from %d to %d", i, last[i], cur[i])
					return
				}
			}
			copy(last, cur)
		}
	})
	return stop, watch
}
