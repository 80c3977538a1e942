package sqlflight

import (
	"bytes"
	"cmp"
	"crypto/rand"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"html/template"
	"math"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sqlflight/sqlflight/internal/redact"
	"github.com/sqlflight/sqlflight/internal/stats"
)

// The live page: a Shield's statistics, statements, load and advice, as
// JSON and as an HTML page that redraws itself from the JSON.

// Handler returns the live page of s, an http.Handler to mount on a debug
// or admin listener, as net/http/pprof and expvar are:
//
//	mux.Handle("/debug/sqlflight/", http.StripPrefix("/debug/sqlflight", sqlflight.Handler(shield)))
//
// A GET of a path whose last element is "json" (/debug/sqlflight/json)
// returns the page's data as JSON (see docs/operations.md, "Live page"); any other
// path returns the HTML page, which draws the same from the JSON every two
// seconds, without any external resource. The query parameter top=N (1 to
// 256, default 20) sets how many statements are listed.
//
// The page shows the normalized text of the statements and their hottest
// keys (HotKey), but not the application's values: every argument of a hot
// key, and every literal of a statement's text (strings, numbers,
// comments), shows as a keyed hash, as does the fingerprint of a text that
// holds literals (an unkeyed hash of the text, it would let a literal be
// guessed). HandlerWith and LivePageOptions.ShowArguments show them as they
// are. Even so it shows the shapes of the application's statements and the
// Shield's state: mount it only where those who run the service may look,
// never on a public listener.
//
// The first request starts sampling s's load once a second (the chart of
// the last five minutes); Shield.Close stops it.
func Handler(s *Shield) http.Handler { return &liveHandler{s: s} }

type liveHandler struct {
	s    *Shield
	opts LivePageOptions
}

const (
	defaultLiveTop = 20
	liveHotKeys    = 3
)

func (h *liveHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !h.opts.hostAllowed(r.Host) {
		http.Error(w, "sqlflight: the live page answers only loopback or IP-literal hosts, or LivePageOptions.AllowedHosts", http.StatusMisdirectedRequest)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	top := defaultLiveTop
	if v := r.URL.Query().Get("top"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > statementCapacity {
			http.Error(w, "top must be a number from 1 to 256", http.StatusBadRequest)
			return
		}
		top = n
	}
	s := h.s
	s.startLoad()
	now := s.opts.Clock.Now()
	s.sampleLoad(now)
	page := s.livePage(now, top, h.opts.ShowArguments)

	hd := w.Header()
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Content-Type-Options", "nosniff")
	if path.Base(r.URL.Path) == "json" {
		body, err := json.Marshal(page)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		hd.Set("Content-Type", "application/json")
		_, _ = w.Write(body)
		return
	}
	nonce, err := newNonce()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	var b bytes.Buffer
	if err := livePageTemplate.Execute(&b, liveHTML{livePage: page, Nonce: nonce}); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	// The page runs only its own script (by nonce) and talks only to its
	// own origin: SQL text that escaped the escaping would still not run.
	hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'nonce-"+nonce+"'; style-src 'nonce-"+nonce+
		"'; connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	hd.Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(b.Bytes())
}

func newNonce() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// livePage is the page's data, and its JSON.
type livePage struct {
	Time          time.Time `json:"time"`
	Started       time.Time `json:"started"`
	UptimeSeconds float64   `json:"uptime_seconds"`
	// Stats is Shield.Stats, with its Go field names: breakers per scope
	// in Breakers, the shared tier in SharedState and the Shared* counters.
	Stats Stats `json:"stats"`
	// Statements are the top statements by database time; Counted is how
	// many statements the Shield counts.
	Statements []liveStatement `json:"statements"`
	Counted    int             `json:"statements_counted"`
	Load       liveLoad        `json:"load"`
	Advice     []Advice        `json:"advice"`
	// ShowArguments tells that the arguments, literals and fingerprints
	// are shown as they are (LivePageOptions.ShowArguments), not hashed.
	ShowArguments bool `json:"show_arguments"`
}

// liveLoad is the Shield's recent load, in events per second.
type liveLoad struct {
	EverySeconds  float64     `json:"every_seconds"`
	WindowSeconds float64     `json:"window_seconds"`
	Points        []loadPoint `json:"points"`
}

// liveStatement is one statement's line on the page.
type liveStatement struct {
	Fingerprint string `json:"fingerprint"`
	SQL         string `json:"sql"`
	Name        string `json:"name,omitempty"`
	Verdict     string `json:"verdict"`
	Shared      bool   `json:"shared"`
	Reason      string `json:"reason,omitempty"`
	Policy      string `json:"policy,omitempty"`

	Calls         uint64            `json:"calls"`
	Errors        uint64            `json:"errors"`
	Fresh         uint64            `json:"fresh"`
	Stale         uint64            `json:"stale"`
	Negative      uint64            `json:"negative"`
	Follower      uint64            `json:"follower"`
	Miss          uint64            `json:"miss"`
	Bypass        uint64            `json:"bypass"`
	BypassReasons map[string]uint64 `json:"bypass_reasons,omitempty"`

	OriginExecutions  uint64  `json:"origin_executions"`
	OriginSeconds     float64 `json:"origin_seconds"`
	MeanOriginSeconds float64 `json:"mean_origin_seconds"`
	// DatabaseSeconds estimates the database time the statement took: its
	// origin executions' time, plus its bypassed calls times their mean
	// sampled latency.
	DatabaseSeconds float64 `json:"database_seconds"`
	// P50 and P99 are of every sampled call, whatever its path: upper
	// bounds of histogram buckets; null above the last (10 s) or before
	// any call was timed.
	P50 optSeconds `json:"p50"`
	P99 optSeconds `json:"p99"`

	HotKeys []HotKey `json:"hot_keys,omitempty"`
}

// optSeconds is a duration in seconds that may be unknown (NaN) or
// unbounded (+Inf): JSON null for both.
type optSeconds float64

func (v optSeconds) MarshalJSON() ([]byte, error) {
	f := float64(v)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, f, 'g', -1, 64), nil
}

// livePage gathers the page's data at now; unless show, with the values
// of the application hashed (see hideValues).
func (s *Shield) livePage(now time.Time, top int, show bool) livePage {
	p := livePage{
		Time: now, Started: s.started, UptimeSeconds: now.Sub(s.started).Seconds(),
		Stats: s.Stats(),
		Load: liveLoad{
			EverySeconds: loadEvery.Seconds(), WindowSeconds: loadWindow.Seconds(), Points: s.load.points(),
		},
		Advice:        s.Advice(),
		ShowArguments: show,
	}
	if p.Advice == nil {
		p.Advice = []Advice{}
	}
	sts := s.statements.Snapshot()
	p.Counted = len(sts)
	p.Statements = make([]liveStatement, 0, len(sts))
	for _, st := range sts {
		p.Statements = append(p.Statements, live(st))
	}
	slices.SortStableFunc(p.Statements, func(a, b liveStatement) int {
		return cmp.Or(cmp.Compare(b.DatabaseSeconds, a.DatabaseSeconds), cmp.Compare(b.Calls, a.Calls),
			strings.Compare(a.Fingerprint, b.Fingerprint))
	})
	if len(p.Statements) > top {
		p.Statements = p.Statements[:top]
	}
	if !show {
		p.hideValues(redact.NewHasher(s.statements.ValueKey()))
	}
	return p
}

// hideValues replaces, in the statements and the advice, what the
// application's values show through by keyed hashes: each hot key's
// arguments and hash, each literal of a text, and the fingerprint of a
// text that holds literals (an unkeyed FNV hash of the text, it would let
// one guess a literal by hashing candidates).
func (p *livePage) hideValues(vh *redact.Hasher) {
	for i := range p.Statements {
		l := &p.Statements[i]
		l.SQL, l.Fingerprint = vh.Text(l.SQL, l.Fingerprint)
		keys := make([]HotKey, len(l.HotKeys))
		for j, k := range l.HotKeys {
			keys[j] = HotKey{Hash: vh.Sum(redact.DomainKey, k.Hash), Calls: k.Calls, Error: k.Error}
			if k.Args != nil {
				keys[j].Args = make([]string, len(k.Args))
				for n, a := range k.Args {
					if n == len(k.Args)-1 && isMoreArgs(a) {
						keys[j].Args[n] = a // printArgs' count of the arguments it left out
						continue
					}
					keys[j].Args[n] = vh.Sum(redact.DomainArg, a)
				}
			}
		}
		l.HotKeys = keys
	}
	for i := range p.Advice {
		a := &p.Advice[i]
		a.SQL, a.Fingerprint = vh.Text(a.SQL, a.Fingerprint)
	}
}

// isMoreArgs reports whether a is printArgs' "… N more".
func isMoreArgs(a string) bool {
	n, ok := strings.CutPrefix(a, "… ")
	if !ok {
		return false
	}
	n, ok = strings.CutSuffix(n, " more")
	if !ok || n == "" {
		return false
	}
	for i := 0; i < len(n); i++ {
		if n[i] < '0' || n[i] > '9' {
			return false
		}
	}
	return true
}

// live returns st's line on the page.
func live(st *stmtStats) liveStatement {
	x := st.Export()
	l := liveStatement{
		Fingerprint: x.Fingerprint, SQL: x.SQL, Name: x.Name, Verdict: x.Verdict, Shared: x.Shared,
		Reason: x.Reason, Policy: x.Policy, Calls: x.Calls, Errors: x.Errors,
		Fresh: x.Fresh, Stale: x.Stale, Negative: x.Negative, Follower: x.Follower, Miss: x.Miss,
		BypassReasons:    x.Bypass,
		OriginExecutions: x.OriginExecutions, OriginSeconds: x.OriginSeconds, MeanOriginSeconds: x.MeanOriginSeconds,
		P50: optSeconds(math.NaN()), P99: optSeconds(math.NaN()),
		HotKeys: x.HotKeys[:min(len(x.HotKeys), liveHotKeys)],
	}
	for _, n := range x.Bypass {
		l.Bypass += n
	}
	l.DatabaseSeconds = l.OriginSeconds + float64(l.Bypass)*x.Latency["bypass"].Mean
	all := Histogram{Bounds: histogramBounds, Counts: make([]uint64, len(histogramBounds)+1)}
	for i := range stats.PathNames {
		h := st.Latency(i)
		for j, c := range h.Counts {
			all.Counts[j] += c
		}
		all.Count += h.Count
	}
	if all.Count > 0 {
		l.P50, l.P99 = optSeconds(all.Quantile(0.5)), optSeconds(all.Quantile(0.99))
	}
	return l
}

// liveHTML is what the page's template renders.
type liveHTML struct {
	livePage
	Nonce string
}

// HitRatio is the cache's hits over the cacheable reads that looked.
func (p livePage) HitRatio() string {
	st := &p.Stats
	hits := st.FreshHits + st.StaleHits + st.NegativeHits
	if hits+st.Misses == 0 {
		return "–"
	}
	return strconv.FormatFloat(100*float64(hits)/float64(hits+st.Misses), 'f', 1, 64) + " %"
}

//go:embed livepage.html
var livePageHTML string

var livePageTemplate = template.Must(template.New("live").Funcs(template.FuncMap{
	"secs": formatSeconds,
	"opt":  func(v optSeconds) string { return formatSeconds(float64(v)) },
}).Parse(livePageHTML))

// formatSeconds prints a duration in seconds for the page (the page's
// script prints alike).
func formatSeconds(v float64) string {
	switch {
	case math.IsNaN(v):
		return "–"
	case math.IsInf(v, 1):
		return "> 10 s"
	case v == 0:
		return "0"
	case v < 1e-3:
		return strconv.FormatFloat(v*1e6, 'f', 0, 64) + " µs"
	case v < 1:
		return strconv.FormatFloat(v*1e3, 'f', 1, 64) + " ms"
	}
	return strconv.FormatFloat(v, 'f', 2, 64) + " s"
}
