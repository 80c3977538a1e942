package sqlflight

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight/internal/livepage"
	"github.com/sqlflight/sqlflight/internal/stats"
)

// hostileSQL is a statement whose text tries to leave every context the
// page puts it in: script, element, attribute (its literal is cast, so that
// its shape, which the page shows, keeps it).
const hostileSQL = `SELECT n FROM items WHERE id = $1 AND note <> '</script><img src=x onerror=alert(1)>"''` + "`" + `'::text`

// livePageDB opens a fake parent with a cached statement, a coalesced one
// and the hostile one, and reads each a few times.
func livePageDB(t *testing.T) (*sql.DB, *Shield, *fakeClock) {
	t.Helper()
	clock := newFakeClock()
	d := &fakeDriver{onQuery: func(_ context.Context, _ string, args []driver.NamedValue) (driver.Rows, error) {
		return oneRow(args[0].Value), nil
	}}
	db, s := openFake(t, d, Options{Clock: clock})
	t.Cleanup(func() { _ = s.Close() })
	for _, q := range []struct {
		sql string
		n   int
	}{{ttlQuery, 10}, {"SELECT n FROM orders WHERE id = $1", 4}, {hostileSQL, 2}} {
		for range q.n {
			readN(t, db, q.sql, 7)
		}
	}
	return db, s, clock
}

func getLive(t *testing.T, h http.Handler, target string) *httptest.ResponseRecorder {
	t.Helper()
	w := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodGet, target, nil)
	r.Host = "127.0.0.1:6060" // the live page answers loopback hosts
	h.ServeHTTP(w, r)
	if w.Code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", target, w.Code, w.Body)
	}
	return w
}

// The JSON lists the statements by database time with their split, the
// Shield's stats, the load between samples, and the advice.
func TestLivePageJSON(t *testing.T) {
	_, s, clock := livePageDB(t)
	// The texts as they are, hostile literal and all.
	h := HandlerWith(s, LivePageOptions{ShowArguments: true})
	getLive(t, h, "/json") // the first sample
	clock.Add(2 * time.Second)

	w := getLive(t, h, "/json?top=2")
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("content type %q", ct)
	}
	var page struct {
		Stats      map[string]any
		Statements []map[string]any
		Counted    int `json:"statements_counted"`
		Load       struct {
			Points []stats.LoadPoint
		}
		Advice []map[string]any
	}
	if err := json.Unmarshal(w.Body.Bytes(), &page); err != nil {
		t.Fatal(err)
	}
	if len(page.Statements) != 2 || page.Counted != 3 {
		t.Fatalf("%d statements of %d, want 2 of 3", len(page.Statements), page.Counted)
	}
	for i := 1; i < len(page.Statements); i++ {
		if page.Statements[i]["database_seconds"].(float64) > page.Statements[i-1]["database_seconds"].(float64) {
			t.Errorf("statements not by database time: %v", page.Statements)
		}
	}
	if page.Stats["Queries"].(float64) != 16 || page.Advice == nil {
		t.Errorf("stats %v, advice %v", page.Stats["Queries"], page.Advice)
	}
	if p := page.Load.Points; len(p) != 1 || p[0].Seconds != 2 || p[0].Queries != 0 {
		t.Errorf("load points %+v, want one of 2s without a query (both samples came after every query)", p)
	}

	all := getLive(t, h, "/json")
	var full struct{ Statements []livepage.Line }
	if err := json.Unmarshal(all.Body.Bytes(), &full); err != nil {
		t.Fatal(err)
	}
	var cached, hostile *livepage.Line
	for i, st := range full.Statements {
		switch st.SQL {
		case s.Explain(context.Background(), ttlQuery).Shape:
			cached = &full.Statements[i]
		case s.Explain(context.Background(), hostileSQL).Shape:
			hostile = &full.Statements[i]
		}
	}
	if cached == nil || hostile == nil {
		t.Fatalf("statements %+v", full.Statements)
	}
	if cached.Calls != 10 || cached.Miss != 1 || cached.Fresh != 9 || cached.OriginExecutions != 1 ||
		cached.Policy == "" || len(cached.HotKeys) != 1 || cached.P50 <= 0 {
		t.Errorf("cached statement %+v", *cached)
	}
	if strings.Contains(all.Body.String(), "<img") || !strings.Contains(all.Body.String(), `\u003c/script\u003e\u003cimg`) {
		t.Errorf("the JSON does not escape the hostile SQL: %s", all.Body)
	}
}

// The handler samples the Shield's counters on each request (by its
// Clock) and once a second from the first request until Close.
func TestLivePageLoad(t *testing.T) {
	db, s, clock := livePageDB(t)
	h := Handler(s)
	getLive(t, h, "/json")
	if !s.load.Ticking() {
		t.Fatal("the first request did not start the sampling")
	}
	clock.Add(2 * time.Second)
	for range 6 {
		readN(t, db, ttlQuery, 7) // fresh hits
	}
	clock.Add(time.Second) // a tick may take this sample: the counters are the same
	w := getLive(t, h, "/json")
	var page struct{ Load livepage.Load }
	if err := json.Unmarshal(w.Body.Bytes(), &page); err != nil {
		t.Fatal(err)
	}
	pts := page.Load.Points
	if len(pts) == 0 {
		t.Fatal("no load points")
	}
	var hits, queries float64
	for _, p := range pts {
		hits += p.Hits * p.Seconds
		queries += p.Queries * p.Seconds
	}
	if hits != 6 || queries != 6 || page.Load.EverySeconds != 1 || page.Load.WindowSeconds != 300 {
		t.Errorf("load %+v: %v hits, %v queries, want 6", page.Load, hits, queries)
	}
	_ = s.Close()
	if s.load.Ticking() {
		t.Error("Close did not stop the sampling")
	}
	getLive(t, h, "/json") // after Close the page still answers, without a ticker
	if s.load.Ticking() {
		t.Error("a request after Close started the sampling")
	}
}

// TestLivePageFigures: the HTML's cards and breakers show the Shield's
// Stats, each figure from its own counter, and the JSON's stats are
// Shield.Stats as a whole.
func TestLivePageFigures(t *testing.T) {
	_, s, _ := livePageDB(t)
	h := Handler(s)
	html := getLive(t, h, "/").Body.String()
	var page struct{ Stats Stats }
	if err := json.Unmarshal(getLive(t, h, "/json").Body.Bytes(), &page); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	hits := st.FreshHits + st.StaleHits + st.NegativeHits
	if st.Queries == 0 || hits == 0 || st.Misses == 0 || st.Flights == 0 || len(st.Breakers) == 0 {
		t.Fatalf("stats %+v: the test needs queries, hits, misses, flights and a breaker", st)
	}
	want := []string{
		fmt.Sprintf(`<b id="s-queries">%d</b>`, st.Queries),
		fmt.Sprintf(`<b id="s-hitratio">%.1f %%</b>`, 100*float64(hits)/float64(hits+st.Misses)),
		fmt.Sprintf(`<b id="s-origin">%d</b>`, st.OriginExecutions),
		fmt.Sprintf(`<b id="s-flights">%d / %d</b>`, st.Flights, st.Followers),
		fmt.Sprintf(`<b id="s-bypassed">%d</b>`, st.Bypassed),
		fmt.Sprintf(`<b id="s-cache">%d</b>`, st.CacheEntries),
		fmt.Sprintf(`<b id="s-breaker">%s</b>`, st.BreakerState),
		`<b id="s-shared">none</b>`, `<b id="s-feed">none</b>`,
	}
	for name, b := range st.Breakers {
		want = append(want, fmt.Sprintf(`<tr><td class="l">%s</td><td class="l">%s</td><td>%d</td><td>%d</td></tr>`,
			name, b.State, b.Rejected, b.Transitions))
	}
	for _, w := range want {
		if !strings.Contains(html, w) {
			t.Errorf("the page has no %s", w)
		}
	}
	if page.Stats.Queries != st.Queries || page.Stats.Fills != st.Fills || page.Stats.OriginDuration.Count != st.OriginDuration.Count ||
		len(page.Stats.Breakers) != len(st.Breakers) || page.Stats.BypassReasons["exec"] != st.BypassReasons["exec"] {
		t.Errorf("the JSON's stats %+v, want Shield.Stats %+v", page.Stats, st)
	}
}
