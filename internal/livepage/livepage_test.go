package livepage_test

import (
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight/internal/livepage"
	"github.com/sqlflight/sqlflight/internal/redact"
	"github.com/sqlflight/sqlflight/internal/stats"
)

// fakeSource is a Source of fixed values that counts its Samples.
type fakeSource struct {
	now, started time.Time
	stats        livepage.Stats
	load         []stats.LoadPoint
	advice       []stats.Advice
	statements   []livepage.Statement
	key          []byte
	samples      atomic.Int64
}

func (f *fakeSource) Sample() time.Time                { f.samples.Add(1); return f.now }
func (f *fakeSource) Started() time.Time               { return f.started }
func (f *fakeSource) Stats() livepage.Stats            { return f.stats }
func (f *fakeSource) Load() []stats.LoadPoint          { return f.load }
func (f *fakeSource) Advice() []stats.Advice           { return slices.Clone(f.advice) }
func (f *fakeSource) Statements() []livepage.Statement { return f.statements }
func (f *fakeSource) ValueKey() []byte                 { return f.key }

// hostileSQL is a statement text that tries to leave every context the
// page puts it in: script, element, attribute.
const hostileSQL = `SELECT n FROM items WHERE id = $1 AND note <> '</script><img src=x onerror=alert(1)>"''` + "`" + `'`

// Values of other users that the page must not show by default.
const (
	secretArg = `"sess-7f3a9c-alice@example.com"`
	secretLit = "lit-secret-bob@example.com"
	litSQL    = "SELECT n FROM accounts WHERE email = $1 AND note <> '" + secretLit + "' AND id <> 987654321"
)

var pageHash = regexp.MustCompile(`^#[0-9a-f]{12}$`)

// nonceAttr is the page's script and style nonce.
var nonceAttr = regexp.MustCompile(`nonce="[^"]*"`)

// timed returns histograms, one per path, with n calls at bound i on the
// fresh path.
func timed(n uint64, i int) []stats.Histogram {
	hs := make([]stats.Histogram, len(stats.PathNames))
	for p := range hs {
		hs[p] = stats.Histogram{Bounds: stats.Bounds, Counts: make([]uint64, len(stats.Bounds)+1)}
	}
	hs[0].Counts[i], hs[0].Count = n, n
	return hs
}

// source returns a fakeSource with three statements (one slow through
// its origin, one slow through its bypasses, one hostile), stats, load and
// advice.
func source() *fakeSource {
	t0 := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	return &fakeSource{
		now: t0.Add(90 * time.Second), started: t0,
		stats: livepage.Stats{
			Doc:     map[string]any{"Queries": 42, "Fills": 7, "Note": "<b>"},
			Queries: 42, Bypassed: 5, Flights: 3, Followers: 11, OriginExecutions: 4,
			FreshHits: 6, StaleHits: 1, NegativeHits: 1, Misses: 2, CacheEntries: 9,
			BreakerState: "half-open", SharedState: "up", FeedState: "lagging",
			Breakers: map[string]livepage.Breaker{"app@db:5432": {State: "half-open", Rejected: 13, Transitions: 2}},
		},
		load: []stats.LoadPoint{{At: t0.Add(time.Second), Seconds: 1, Queries: 4, Hits: 3}},
		statements: []livepage.Statement{
			{Stats: stats.StatementStats{Fingerprint: "f-origin", SQL: "SELECT a FROM t WHERE id = $1", Verdict: "shareable",
				Shared: true, Policy: "soft=10s hard=1m", Calls: 20, Fresh: 18, Miss: 2, OriginExecutions: 2, OriginSeconds: 3,
				HotKeys: []stats.HotKey{{Hash: "k1", Args: []string{secretArg}, Calls: 9}, {Hash: "k2", Calls: 5},
					{Hash: "k3", Calls: 4}, {Hash: "k4", Calls: 2}}},
				Latencies: timed(10, 3)},
			{Stats: stats.StatementStats{Fingerprint: "f-bypass", SQL: litSQL, Verdict: "shareable", Reason: "exec", Calls: 50,
				Bypass: map[string]uint64{"exec": 30, "write": 10}, Latency: map[string]stats.Latency{"bypass": {Count: 4, Mean: 0.5}},
				HotKeys: []stats.HotKey{{Hash: "k5", Args: []string{secretArg, "… 2 more"}, Calls: 3}}}},
			{Stats: stats.StatementStats{Fingerprint: "f-hostile", SQL: hostileSQL, Verdict: "shareable", Shared: true, Calls: 2,
				OriginExecutions: 1, OriginSeconds: 0.001}},
		},
		advice: []stats.Advice{{Fingerprint: "f-bypass", SQL: litSQL, Annotation: "/* sqlflight: soft=30s */", Policy: "off"}},
		key:    []byte("a key of the page, 32 bytes long"),
	}
}

// get serves target from h for a loopback host and returns the answer.
func get(t *testing.T, h http.Handler, method, target string) *httptest.ResponseRecorder {
	t.Helper()
	w := httptest.NewRecorder()
	r := httptest.NewRequest(method, target, nil)
	r.Host = "127.0.0.1:6060"
	h.ServeHTTP(w, r)
	return w
}

// getPage serves the JSON and decodes it.
func getPage(t *testing.T, h http.Handler, target string) (livepage.Page, string) {
	t.Helper()
	w := get(t, h, http.MethodGet, target)
	if w.Code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", target, w.Code, w.Body)
	}
	var p struct {
		livepage.Page
		Stats map[string]any `json:"stats"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatal(err)
	}
	p.Page.Stats.Doc = p.Stats
	return p.Page, w.Body.String()
}

// TestJSON: the JSON lists the statements by database time (origin time
// plus bypasses times their mean), cut at top, with the count of all,
// their latency quantiles over every path (null without a timed call),
// at most three hot keys each; the stats are the Source's Doc as it is;
// the load, the times and the advice (an empty list, never null) are the
// Source's. Each request samples once.
func TestJSON(t *testing.T) {
	src := source()
	h := livepage.New(src, livepage.Options{ShowArguments: true})
	p, body := getPage(t, h, "/json")
	if src.samples.Load() != 1 {
		t.Errorf("%d samples for one request", src.samples.Load())
	}
	if p.Counted != 3 || len(p.Statements) != 3 {
		t.Fatalf("%d statements of %d, want 3 of 3", len(p.Statements), p.Counted)
	}
	var fps []string
	for _, l := range p.Statements {
		fps = append(fps, l.Fingerprint)
	}
	if strings.Join(fps, " ") != "f-bypass f-origin f-hostile" {
		t.Errorf("order %v, want by database time", fps)
	}
	byp, org, hos := p.Statements[0], p.Statements[1], p.Statements[2]
	if byp.Bypass != 40 || byp.DatabaseSeconds != 20 || byp.BypassReasons["write"] != 10 || byp.P50 != 0 {
		t.Errorf("bypassed statement %+v", byp)
	}
	if org.DatabaseSeconds != 3 || org.P50 != livepage.OptSeconds(stats.Bounds[3]) || org.P99 != org.P50 ||
		len(org.HotKeys) != livepage.HotKeys || org.HotKeys[0].Args[0] != secretArg {
		t.Errorf("origin statement %+v", org)
	}
	if !strings.Contains(body, `"p50":null,"p99":null}`) {
		t.Errorf("a statement never timed has no null quantiles: %s", body)
	}
	if hos.SQL != hostileSQL || strings.Contains(body, "<img") || !strings.Contains(body, `\u003c/script\u003e\u003cimg`) ||
		!strings.Contains(body, `"Note":"\u003cb\u003e"`) {
		t.Errorf("the JSON does not escape the hostile texts: %s", body)
	}
	if p.Stats.Doc.(map[string]any)["Fills"] != 7.0 || len(p.Stats.Doc.(map[string]any)) != 3 {
		t.Errorf("stats %v, want the Doc as it is", p.Stats.Doc)
	}
	if !p.Time.Equal(src.now) || !p.Started.Equal(src.started) || p.UptimeSeconds != 90 || !p.ShowArguments ||
		len(p.Load.Points) != 1 || p.Load.Points[0].Queries != 4 || p.Load.EverySeconds != 1 || p.Load.WindowSeconds != 300 {
		t.Errorf("page %+v", p)
	}

	p, _ = getPage(t, h, "/debug/sqlflight/json?top=1")
	if len(p.Statements) != 1 || p.Counted != 3 || p.Statements[0].Fingerprint != "f-bypass" {
		t.Errorf("top=1: %+v of %d", p.Statements, p.Counted)
	}
	src.advice, src.statements = nil, nil
	if _, body := getPage(t, h, "/json"); !strings.Contains(body, `"advice":[]`) || !strings.Contains(body, `"statements":[]`) {
		t.Errorf("no advice, no statements: %s", body)
	}
	if w := get(t, h, http.MethodGet, "/json"); w.Header().Get("Content-Type") != "application/json" ||
		w.Header().Get("Cache-Control") != "no-store" || w.Header().Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("headers %v", w.Header())
	}
}

// TestHTML: the HTML page renders every text escaped, runs only its own
// script under a fresh nonce, prints the Source's figures, and answers GET
// and HEAD alone, with top from 1 to 256.
func TestHTML(t *testing.T) {
	h := livepage.New(source(), livepage.Options{ShowArguments: true}) // the texts as they are, hostile literal and all
	nonces := map[string]bool{}
	for _, target := range []string{"/", "", "/anything"} {
		w := get(t, h, http.MethodGet, "/"+strings.TrimPrefix(target, "/"))
		body := w.Body.String()
		if w.Code != http.StatusOK || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/html") {
			t.Errorf("%s: %d, content type %q", target, w.Code, w.Header().Get("Content-Type"))
		}
		if strings.Contains(body, "<img") || !strings.Contains(body, "&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;") {
			t.Errorf("%s: the hostile SQL is not escaped", target)
		}
		if strings.Count(body, "<script") != 1 || strings.Count(body, "</script>") != 1 {
			t.Errorf("%s: %d scripts open, %d close", target, strings.Count(body, "<script"), strings.Count(body, "</script>"))
		}
		csp := w.Header().Get("Content-Security-Policy")
		m := regexp.MustCompile(`script-src 'nonce-([A-Za-z0-9_-]{22})'`).FindStringSubmatch(csp)
		if m == nil || !strings.Contains(body, `<script nonce="`+m[1]+`">`) || !strings.Contains(body, `<style nonce="`+m[1]+`">`) ||
			!strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "connect-src 'self'") {
			t.Errorf("%s: CSP %q", target, csp)
		} else {
			nonces[m[1]] = true
		}
		for _, want := range []string{"Top statements by database time", "Circuit breakers", "Advisor", `id="chart"`,
			`<b id="s-queries">42</b>`, `<b id="s-hitratio">80.0 %</b>`, `<b id="s-origin">4</b>`, `<b id="s-flights">3 / 11</b>`,
			`<b id="s-bypassed">5</b>`, `<b id="s-cache">9</b>`, `<b id="s-breaker">half-open</b>`, `<b id="s-shared">up</b>`,
			`<b id="s-feed">lagging</b>`, `<tr><td class="l">app@db:5432</td><td class="l">half-open</td><td>13</td><td>2</td></tr>`,
			`up <span id="uptime">90.00 s</span>`, `<td>20.00 s</td><td>–</td><td>–</td>`, `<td>3.00 s</td><td>5.0 ms</td><td>5.0 ms</td>`,
			`<td>1.0 ms</td>`, `(3 of 3)`, "Arguments and literals are shown as they are"} {
			if !strings.Contains(body, want) {
				t.Errorf("%s: no %q", target, want)
			}
		}
	}
	if len(nonces) != 3 {
		t.Errorf("nonces %v: one per request", nonces)
	}
	if w := get(t, h, http.MethodHead, "/json"); w.Code != http.StatusOK {
		t.Errorf("HEAD: %d", w.Code)
	}
	for _, bad := range []struct {
		method, target string
		code           int
	}{{http.MethodPost, "/json", http.StatusMethodNotAllowed}, {http.MethodGet, "/json?top=0", http.StatusBadRequest},
		{http.MethodGet, "/json?top=x", http.StatusBadRequest}, {http.MethodGet, "/?top=257", http.StatusBadRequest}} {
		if w := get(t, h, bad.method, bad.target); w.Code != bad.code {
			t.Errorf("%s %s: %d, want %d", bad.method, bad.target, w.Code, bad.code)
		}
	}
	if w := get(t, h, http.MethodGet, "/json?top=256"); w.Code != http.StatusOK {
		t.Errorf("top=256: %d", w.Code)
	}
	if w := get(t, h, http.MethodPut, "/"); w.Header().Get("Allow") != "GET, HEAD" {
		t.Errorf("PUT: Allow %q", w.Header().Get("Allow"))
	}
}

// TestEmptyHTML: a Source with nothing to show renders the empty rows
// and no hit ratio.
func TestEmptyHTML(t *testing.T) {
	h := livepage.New(&fakeSource{}, livepage.Options{})
	body := get(t, h, http.MethodGet, "/").Body.String()
	for _, want := range []string{"no statements yet", "no scope has connected yet", "no suggestion",
		`<b id="s-hitratio">–</b>`, `<b id="s-shared">none</b>`, `<b id="s-feed">none</b>`, `(0 of 0)`} {
		if !strings.Contains(body, want) {
			t.Errorf("no %q", want)
		}
	}
	if _, js := getPage(t, h, "/json"); !strings.Contains(js, `"stats":null`) {
		t.Errorf("a nil Doc: %s", js)
	}
}

// TestTrusted: Stats.SharedTrusted shows as a warning on the page and in
// the shared tier's card; without it the warning is hidden.
func TestTrusted(t *testing.T) {
	const warning = `<div class="alert" id="trusted" role="alert">The shared tier is trusted without a secret`
	for _, trusted := range []bool{true, false} {
		src := source()
		src.stats.SharedTrusted = trusted
		html := get(t, livepage.New(src, livepage.Options{}), http.MethodGet, "/").Body.String()
		if strings.Contains(html, warning) != trusted || strings.Contains(html, "up, trusted without a secret</b>") != trusted ||
			strings.Contains(html, `id="trusted" role="alert" hidden>`) == trusted {
			t.Errorf("trusted %v: page:\n%s", trusted, html[:min(len(html), 4000)])
		}
	}
}

// TestHidesValues: by default neither the JSON nor the HTML holds an
// argument of a hot key or a literal of a text; each shows as a keyed
// hash under the Source's ValueKey, one value as one hash across
// statements and requests, as do the hot keys' hashes and the
// fingerprints of texts with literals (statements and advice alike); a
// text without literals keeps its fingerprint.
func TestHidesValues(t *testing.T) {
	src := source()
	h := livepage.New(src, livepage.Options{})
	p, js := getPage(t, h, "/json")
	html := get(t, h, http.MethodGet, "/").Body.String()
	// The request's nonce is random base64: it may hold any short string.
	html = nonceAttr.ReplaceAllString(html, `nonce=""`)
	for _, secret := range []string{"alice@", "bob@", "987654321", "k1", "onerror"} {
		if strings.Contains(js, secret) || strings.Contains(html, secret) {
			t.Errorf("the page shows %q:\n%s", secret, js)
		}
	}
	if p.ShowArguments || !strings.Contains(html, "shown as keyed hashes") {
		t.Error("the page says it shows the values")
	}
	vh := redact.NewHasher(src.key)
	byp, org := p.Statements[0], p.Statements[1]
	wantSQL, wantFP := vh.Text(litSQL, "f-bypass")
	if byp.SQL != wantSQL || byp.Fingerprint != wantFP || !pageHash.MatchString(byp.Fingerprint) {
		t.Errorf("text with literals: %q %q, want %q %q", byp.SQL, byp.Fingerprint, wantSQL, wantFP)
	}
	if org.Fingerprint != "f-origin" || org.SQL != "SELECT a FROM t WHERE id = $1" {
		t.Errorf("text without literals: %q %q", org.SQL, org.Fingerprint)
	}
	argHash := vh.Sum(redact.DomainArg, secretArg)
	if org.HotKeys[0].Args[0] != argHash || byp.HotKeys[0].Args[0] != argHash || org.HotKeys[0].Hash != vh.Sum(redact.DomainKey, "k1") ||
		org.HotKeys[1].Args != nil || org.HotKeys[0].Calls != 9 || !strings.Contains(html, argHash) {
		t.Errorf("hot keys %+v and %+v, want the argument as %s", org.HotKeys, byp.HotKeys, argHash)
	}
	if a := p.Advice[0]; a.SQL != wantSQL || a.Fingerprint != wantFP {
		t.Errorf("advice %+v, want hashed as its statement", a)
	}
	if unkeyed := redact.NewHasher(nil).Sum(redact.DomainArg, secretArg); argHash == unkeyed {
		t.Errorf("the hash %s is the unkeyed one", unkeyed)
	}
	if src.statements[0].Stats.HotKeys[0].Args[0] != secretArg || src.statements[1].Stats.SQL != litSQL {
		t.Error("hiding changed the Source's statements")
	}
	if p2, _ := getPage(t, h, "/json"); p2.Statements[1].HotKeys[0].Args[0] != argHash {
		t.Errorf("the hash changed between requests: %+v", p2.Statements[1].HotKeys)
	}
	other := source()
	other.key = []byte("another key of another Shield..")
	if po, _ := getPage(t, livepage.New(other, livepage.Options{}), "/json"); po.Statements[1].HotKeys[0].Args[0] == argHash {
		t.Errorf("two keys show %s as one hash %s", secretArg, argHash)
	}
}

// TestHideValuesKeepsTheCount: printArgs' "… N more", last of a key's
// arguments, is a count, not a value, and stays; anything else is hashed,
// "… N more" or not.
func TestHideValuesKeepsTheCount(t *testing.T) {
	src := &fakeSource{key: make([]byte, 32), statements: []livepage.Statement{{Stats: stats.StatementStats{SQL: "SELECT $1", Fingerprint: "f",
		HotKeys: []stats.HotKey{{Hash: "h", Args: []string{`"… 2 more"`, "… 3 more", "… x more", "… 4 more"}}}}}}}
	p, _ := getPage(t, livepage.New(src, livepage.Options{}), "/json")
	l := p.Statements[0]
	args := l.HotKeys[0].Args
	if !pageHash.MatchString(args[0]) || !pageHash.MatchString(args[1]) || !pageHash.MatchString(args[2]) || args[3] != "… 4 more" ||
		l.SQL != "SELECT $1" || l.Fingerprint != "f" || !pageHash.MatchString(l.HotKeys[0].Hash) {
		t.Errorf("hidden: %+v", l)
	}
}

// TestShowArguments: with Options.ShowArguments the page shows the
// arguments, the texts, the hot keys' hashes and the fingerprints as they
// are, and says so.
func TestShowArguments(t *testing.T) {
	h := livepage.New(source(), livepage.Options{ShowArguments: true})
	p, js := getPage(t, h, "/json")
	html := get(t, h, http.MethodGet, "/").Body.String()
	for _, v := range []string{"sess-7f3a9c-alice@example.com", secretLit, "987654321"} {
		if !strings.Contains(js, v) || !strings.Contains(html, v) {
			t.Errorf("ShowArguments: %q not shown", v)
		}
	}
	if l := p.Statements[0]; !p.ShowArguments || l.Fingerprint != "f-bypass" || l.SQL != litSQL ||
		l.HotKeys[0].Hash != "k5" || p.Advice[0].Fingerprint != "f-bypass" {
		t.Errorf("ShowArguments: %+v", p)
	}
}

// TestHost: the page refuses with 421 a Host it was not told of (DNS
// rebinding), before it reads the Source, and answers loopback, IP
// literals, localhost and the named hosts without regard to case.
func TestHost(t *testing.T) {
	named := livepage.Options{AllowedHosts: []string{"admin.internal"}}
	for _, c := range []struct {
		o    livepage.Options
		host string
		want int
	}{
		{livepage.Options{}, "evil.example", http.StatusMisdirectedRequest},
		{livepage.Options{}, "evil.example:8080", http.StatusMisdirectedRequest},
		{livepage.Options{}, "", http.StatusMisdirectedRequest},
		{livepage.Options{}, "[]:6060", http.StatusMisdirectedRequest},
		{livepage.Options{}, "localhost.evil.example", http.StatusMisdirectedRequest},
		{livepage.Options{}, "127.0.0.1:6060", http.StatusOK},
		{livepage.Options{}, "10.1.2.3", http.StatusOK},
		{livepage.Options{}, "[::1]:6060", http.StatusOK},
		{livepage.Options{}, "::1", http.StatusOK},
		{livepage.Options{}, "localhost:6060", http.StatusOK},
		{livepage.Options{}, "LocalHost", http.StatusOK},
		{named, "Admin.Internal:6060", http.StatusOK},
		{named, "admin.internal", http.StatusOK},
		{named, "evil.example", http.StatusMisdirectedRequest},
		{named, "admin.internal.evil.example", http.StatusMisdirectedRequest},
	} {
		src := source()
		r := httptest.NewRequest(http.MethodGet, "/json", nil)
		r.Host = c.host
		w := httptest.NewRecorder()
		livepage.New(src, c.o).ServeHTTP(w, r)
		if w.Code != c.want {
			t.Errorf("Host %q: %d, want %d", c.host, w.Code, c.want)
		}
		if c.want != http.StatusOK && src.samples.Load() != 0 {
			t.Errorf("Host %q: refused, yet it sampled the Source", c.host)
		}
	}
}

// TestOptSeconds: a known duration marshals as its number, an unknown
// (NaN) or unbounded one (±Inf) as null.
func TestOptSeconds(t *testing.T) {
	for _, c := range []struct {
		v    float64
		want string
	}{{0.0025, "0.0025"}, {0, "0"}, {10, "10"}, {math.NaN(), "null"}, {math.Inf(1), "null"}, {math.Inf(-1), "null"}} {
		if b, err := json.Marshal(livepage.OptSeconds(c.v)); err != nil || string(b) != c.want {
			t.Errorf("%v: %s %v, want %s", c.v, b, err, c.want)
		}
	}
}
