package prom_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/sqlflight/sqlflight"
	"github.com/sqlflight/sqlflight/prom"
)

// scrape serves reg over HTTP and fetches it once.
func scrape(t *testing.T, reg *prometheus.Registry) (int, string) {
	t.Helper()
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// A policy name that is not valid UTF-8 never breaks a scrape: a name=
// annotation holding one is malformed (a warning, or ErrBadAnnotation under
// Strict), and a name given in code reaches Prometheus made valid, its
// counts merged with any name it then equals.
func TestScrapeAfterInvalidUTF8Name(t *testing.T) {
	s := newShield(t)
	db := s.OpenDB(testDriver{})
	defer db.Close()
	ctx := context.Background()
	read := func(ctx context.Context, q string) {
		t.Helper()
		var n int
		if err := db.QueryRowContext(ctx, q).Scan(&n); err != nil {
			t.Fatal(err)
		}
	}
	read(ctx, "/* sqlflight: soft=1m name=bad\xff\xfename */ SELECT n FROM utf8_t WHERE id = 1")
	if st := s.Stats(); st.BadAnnotations != 1 {
		t.Errorf("BadAnnotations = %d, want 1: a name= that is not UTF-8 is malformed", st.BadAnnotations)
	}
	read(sqlflight.WithPolicy(ctx, sqlflight.Policy{Soft: 60e9, Name: "code\xffname"}), "SELECT n FROM utf8_t WHERE id = 2")
	read(sqlflight.WithPolicy(ctx, sqlflight.Policy{Soft: 60e9, Name: "code\xfename"}), "SELECT n FROM utf8_t WHERE id = 3")
	read(sqlflight.WithPolicy(ctx, sqlflight.Policy{Soft: 60e9, Name: "code\uFFFDname"}), "SELECT n FROM utf8_t WHERE id = 4")

	reg := prometheus.NewRegistry()
	reg.MustRegister(prom.NewCollector(s, prom.WithShieldName("shield\xff")))
	for range 2 { // every later scrape too
		code, body := scrape(t, reg)
		if code != http.StatusOK {
			t.Fatalf("scrape: HTTP %d: %s", code, body)
		}
		if !strings.Contains(body, "sqlflight_policy_queries_total{name=\"code\uFFFDname\",shield=\"shield\uFFFD\"} 3") {
			t.Errorf("the three names made valid do not count as one:\n%s", grep(body, "policy_queries"))
		}
	}

	strict := sqlflight.New(sqlflight.Options{Strict: true})
	t.Cleanup(func() { strict.Close() })
	sdb := strict.OpenDB(testDriver{})
	defer sdb.Close()
	var n int
	err := sdb.QueryRowContext(ctx, "/* sqlflight: name=bad\xffname */ SELECT n FROM utf8_t").Scan(&n)
	if !errors.Is(err, sqlflight.ErrBadAnnotation) {
		t.Errorf("Strict: err = %v, want ErrBadAnnotation", err)
	}
}

func grep(body, word string) string {
	var out []string
	for l := range strings.SplitSeq(body, "\n") {
		if strings.Contains(l, word) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
