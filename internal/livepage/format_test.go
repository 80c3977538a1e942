package livepage

import (
	"math"
	"testing"
)

// TestFormatSeconds: the page prints durations as its script does.
func TestFormatSeconds(t *testing.T) {
	for _, c := range []struct {
		v    float64
		want string
	}{{math.NaN(), "–"}, {math.Inf(1), "> 10 s"}, {0, "0"}, {0.00025, "250 µs"}, {0.0025, "2.5 ms"},
		{0.5, "500.0 ms"}, {1, "1.00 s"}, {12.345, "12.35 s"}} {
		if got := formatSeconds(c.v); got != c.want {
			t.Errorf("formatSeconds(%v) = %q, want %q", c.v, got, c.want)
		}
	}
}
