package annotation

import (
	"strings"
	"testing"
)

// The annotation memo keeps no long texts: 4,096 of them would pin
// gigabytes for good.
func TestAnnotationMemoKeepsNoLongTexts(t *testing.T) {
	short := "name=short_annotation soft=1s"
	if _, err := Cached(short); err != nil {
		t.Fatal(err)
	}
	if _, ok := annotations.Load(short); !ok {
		t.Error("a short annotation text was not memoized")
	}
	long := "name=long_annotation" + strings.Repeat(" ", 64<<10) + "soft=1s"
	if _, err := Cached(long); err != nil {
		t.Fatal(err)
	}
	if _, ok := annotations.Load(long); ok {
		t.Error("a 64 KiB annotation text was memoized")
	}
}
