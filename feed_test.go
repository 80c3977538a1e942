package sqlflight

import (
	"context"
	"time"
)

// Renew makes memTier a Leaser: compare-and-extend.
func (m *memTier) Renew(ctx context.Context, ns, key string, l Lease, ttl time.Duration) (bool, error) {
	if err := m.check(ctx); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.leases[ns+key]
	if !ok || e.token != l.Token || !l.Held || !m.clock.Now().Before(e.until) {
		return false, nil
	}
	e.until = m.clock.Now().Add(ttl)
	m.leases[ns+key] = e
	return true, nil
}
