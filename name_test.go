package sqlflight

import (
	"errors"
	"strings"
	"testing"

	"github.com/sqlflight/sqlflight/internal/annotation"
)

// TestBadNameIsABadAnnotation: name= of more than MaxNameLen bytes, or
// with a character outside the allowed set, is a malformed annotation:
// the statement runs unshared and counted, or fails under Strict.
func TestBadNameIsABadAnnotation(t *testing.T) {
	if _, err := annotation.Parse("name=" + strings.Repeat("a", MaxNameLen)); err != nil {
		t.Fatalf("a name of %d bytes: %v", MaxNameLen, err)
	}
	if _, err := annotation.Parse("name=shop/product_page:v2.1-b"); err != nil {
		t.Fatalf("allowed characters: %v", err)
	}
	for i, bad := range []string{strings.Repeat("a", MaxNameLen+1), "product<page>", "prod\"uct", "caf\u00e9", "a{b}"} {
		q := "/* sqlflight: ttl=1m name=" + bad + " */ " + pointQuery
		d := &fakeDriver{}
		db, s := openFake(t, d)
		var n int64
		for range 2 {
			if err := db.QueryRow(q, 1).Scan(&n); err != nil {
				t.Fatalf("%d: %v", i, err)
			}
		}
		if st := s.Stats(); st.BadAnnotations != 2 || st.Flights != 0 || st.CacheEntries != 0 {
			t.Errorf("%d (%.20q): BadAnnotations %d, Flights %d, CacheEntries %d", i, bad, st.BadAnnotations, st.Flights, st.CacheEntries)
		}
		strict, _ := openFake(t, &fakeDriver{}, Options{Strict: true})
		if err := strict.QueryRow(q, 1).Scan(&n); !errors.Is(err, ErrBadAnnotation) {
			t.Errorf("%d strict: %v", i, err)
		}
	}
}

// TestExportedConstantsAreTheMechanisms: the root spells its exported
// constants out (go doc shows their values), and they are the values the
// mechanisms use.
func TestExportedConstantsAreTheMechanisms(t *testing.T) {
	if MaxNameLen != annotation.MaxNameLen {
		t.Errorf("MaxNameLen %d, the annotation grammar's %d", MaxNameLen, annotation.MaxNameLen)
	}
}
