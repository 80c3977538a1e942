package annotation_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight/internal/annotation"
)

func TestParseAnnotation(t *testing.T) {
	a, err := annotation.Parse("soft=30s hard=5m neg=5s jitter=10% beta=2 maxrows=50 maxbytes=512KiB wait=200ms timeout=2s tables=products,prices name=product_page coalesce")
	if err != nil {
		t.Fatal(err)
	}
	want := annotation.Fields{
		Soft: 30 * time.Second, Hard: 5 * time.Minute, Neg: 5 * time.Second, Jitter: 0.10, Beta: 2,
		MaxRows: 50, MaxBytes: 512 << 10, Wait: 200 * time.Millisecond, Timeout: 2 * time.Second,
		Name: "product_page", Coalesce: true,
	}
	got := a.Fields
	if len(got.Tables) != 2 || got.Tables[0] != "products" || got.Tables[1] != "prices" {
		t.Fatalf("tables %q", got.Tables)
	}
	got.Tables = nil
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}

	for text, check := range map[string]func(annotation.Fields) bool{
		"ttl=1m":              func(p annotation.Fields) bool { return p.Soft == time.Minute && p.Hard == time.Minute },
		"jitter=0%":           func(p annotation.Fields) bool { return p.Jitter < 0 },
		"beta=0":              func(p annotation.Fields) bool { return p.Beta < 0 },
		"maxbytes=8MiB":       func(p annotation.Fields) bool { return p.MaxBytes == 8<<20 },
		"maxbytes=1000":       func(p annotation.Fields) bool { return p.MaxBytes == 1000 },
		"off":                 func(p annotation.Fields) bool { return p.Off },
		"nocache":             func(p annotation.Fields) bool { return p.NoCache },
		"nocoalesce":          func(p annotation.Fields) bool { return p.NoCoalesce },
		"nobatch":             func(p annotation.Fields) bool { return p.NoBatch },
		"  soft=1s\thard=2s ": func(p annotation.Fields) bool { return p.Soft == time.Second && p.Hard == 2*time.Second },
	} {
		a, err := annotation.Parse(text)
		if err != nil || !check(a.Fields) {
			t.Errorf("%q: %+v %v", text, a.Fields, err)
		}
	}
}

func TestParseAnnotationRejects(t *testing.T) {
	for _, text := range []string{
		"sfot=30s", "soft=30", "soft=-1s", "soft=", "hard=1s soft=2s", "jitter=10", "jitter=150%",
		"beta=-1", "beta=x", "maxrows=0", "maxrows=ten", "maxbytes=8MB", "maxbytes=-1KiB",
		"tables=a,,b", "coalesce nocoalesce", "cache", "wait=forever",
	} {
		if _, err := annotation.Parse(text); !errors.Is(err, annotation.ErrBad) {
			t.Errorf("%q: err = %v, want annotation.ErrBad", text, err)
		}
	}
}

// TestCheckName: 1 to MaxNameLen bytes of letters, digits and _ - . : /.
func TestCheckName(t *testing.T) {
	for _, ok := range []string{"a", strings.Repeat("a", annotation.MaxNameLen), "shop/product_page:v2.1-b"} {
		if err := annotation.CheckName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", strings.Repeat("a", annotation.MaxNameLen+1), "product<page>", "prod\"uct", "caf\u00e9", "a{b}", "a b"} {
		if err := annotation.CheckName(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestMergeOverridesFieldByField: only the fields set replace the base's;
// an annotation asking for sharing outranks the base's nocache/off.
func TestMergeOverridesFieldByField(t *testing.T) {
	base := annotation.Fields{Soft: time.Minute, Hard: time.Hour, Name: "base", NoCache: true, Off: true}
	a, err := annotation.Parse("soft=2m name=mine")
	if err != nil {
		t.Fatal(err)
	}
	got := a.Merge(base)
	if got.Soft != 2*time.Minute || got.Hard != time.Hour || got.Name != "mine" || got.NoCache || got.Off {
		t.Fatalf("merged %+v", got)
	}
	a, _ = annotation.Parse("soft=2h")
	if got := a.Merge(base); got.Hard != 2*time.Hour {
		t.Fatalf("hard below the merged soft: %+v", got)
	}
	for _, bad := range []annotation.Fields{{Soft: -1}, {Soft: time.Minute, Hard: time.Second}, {Coalesce: true, NoCoalesce: true}, {Jitter: 1}, {MaxRows: -1}} {
		if annotation.Validate(bad) == nil {
			t.Errorf("Validate accepted %+v", bad)
		}
	}
	if err := annotation.Validate(base); err != nil {
		t.Errorf("Validate refused %+v: %v", base, err)
	}
}
