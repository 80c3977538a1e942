package prom_test

import (
	"context"
	"time"

	"github.com/sqlflight/sqlflight"
)

// Renew makes memTier a sqlflight.Leaser: it extends nothing (its leases
// never expire) and reports whether the lease is still held.
func (m *memTier) Renew(_ context.Context, ns, key string, l sqlflight.Lease, _ time.Duration) (bool, error) {
	if m.failing.Load() {
		return false, errTierFailing
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return l.Held && m.leases[ns+key] == l.Token, nil
}
