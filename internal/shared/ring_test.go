package shared_test

import (
	"errors"
	"testing"

	"github.com/sqlflight/sqlflight/internal/seal"
	"github.com/sqlflight/sqlflight/internal/shared"
)

// TestRingRotation: a ring opens what its previous secret sealed, and
// seals under its current one; a ring whose previous secret is its current
// one, or none, opens nothing of another secret; the insecure ring shares
// no key with any secret's.
func TestRingRotation(t *testing.T) {
	const a, b = "the first fleet secret, 32 bytes", "the second fleet secret, 32 byte"
	old := shared.NewRing(a, "", false)
	sealed := old.SealValue(make([]byte, seal.Prefix, seal.Prefix+1), "ns:", "k", 1)
	rotated := shared.NewRing(b, a, true)
	if !rotated.Encrypt || rotated.Previous == nil {
		t.Fatal("the rotated ring lost its previous secret or its encryption")
	}
	if _, err := rotated.OpenValue(sealed, "ns:", "k", 1); err != nil {
		t.Fatalf("a value of the previous secret: %v", err)
	}
	for _, r := range []*seal.Ring{shared.NewRing(b, "", false), shared.NewRing(b, b, false), shared.InsecureRing()} {
		if r.Previous != nil {
			t.Fatal("a ring without another previous secret has previous keys")
		}
		if _, err := r.OpenValue(sealed, "ns:", "k", 1); !errors.Is(err, seal.ErrForged) {
			t.Fatalf("a value of another secret: %v", err)
		}
	}
	if mine := shared.InsecureRing().SealValue(make([]byte, seal.Prefix), "ns:", "k", 1); !errors.Is(func() error {
		_, err := old.OpenValue(mine, "ns:", "k", 1)
		return err
	}(), seal.ErrForged) {
		t.Fatal("a secret's ring opens what the insecure ring sealed")
	}
}
