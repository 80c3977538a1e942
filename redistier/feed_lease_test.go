package redistier

import (
	"testing"
	"time"
)

// TestRenew: the holder's Renew extends its lease; a lease that another
// instance took after it expired, or that was released, is not renewed.
func TestRenew(t *testing.T) {
	tier, c, ns := setup(t)
	ctx := ctxT(t)

	l1, err := tier.Acquire(ctx, ns, "feed", 200*time.Millisecond)
	if err != nil || !l1.Held {
		t.Fatalf("acquire: %+v %v", l1, err)
	}
	ok, err := tier.Renew(ctx, ns, "feed", l1, time.Minute)
	if err != nil || !ok {
		t.Fatalf("renew by the holder: %v %v", ok, err)
	}
	if ttl := c.PTTL(ctx, leaseKey(ns, "feed")).Val(); ttl < 30*time.Second {
		t.Fatalf("lease TTL after renewal %v, want about a minute", ttl)
	}
	// Another instance's lease, after the first was lost.
	if err := c.Del(ctx, leaseKey(ns, "feed")).Err(); err != nil {
		t.Fatal(err)
	}
	l2, err := tier.Acquire(ctx, ns, "feed", time.Minute)
	if err != nil || !l2.Held {
		t.Fatalf("acquire by another: %+v %v", l2, err)
	}
	if ok, err := tier.Renew(ctx, ns, "feed", l1, time.Hour); err != nil || ok {
		t.Fatalf("renew of a lost lease: %v %v, want false", ok, err)
	}
	if ttl := c.PTTL(ctx, leaseKey(ns, "feed")).Val(); ttl > time.Minute {
		t.Fatalf("the lost lease's Renew extended the new holder's lease to %v", ttl)
	}
	if err := tier.Release(ctx, ns, "feed", l2); err != nil {
		t.Fatal(err)
	}
	if ok, err := tier.Renew(ctx, ns, "feed", l2, time.Minute); err != nil || ok {
		t.Fatalf("renew of a released lease: %v %v, want false", ok, err)
	}
	l2.Held = false
	if ok, _ := tier.Renew(ctx, ns, "feed", l2, time.Minute); ok {
		t.Fatal("renew of a lease never held")
	}
}
