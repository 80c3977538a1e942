// Package livepage is a Shield's live page: its statistics, statements,
// load and advice, as JSON and as an HTML page that redraws itself from the
// JSON, served by an http.Handler over a Source.
//
// A GET or HEAD of a path whose last element is "json" returns the JSON
// document (Page); any other path returns the HTML page (the embedded
// livepage.html), which draws the same from the JSON every two seconds
// without any external resource. The query parameter top=N (1 to
// stats.StatementCapacity, default 20) sets how many statements are
// listed, by database time. The JSON's shape is a contract: the page's
// script and cmd/sqlflight's top read it. Both answers are sent
// Cache-Control: no-store and nosniff; the HTML runs only its own script
// and style (a fresh nonce per request, in its Content-Security-Policy)
// and talks only to its own origin, so that SQL text that escaped the
// escaping would still not run.
//
// What it shows: the normalized texts of the statements and their three
// hottest keys, and the Shield's counters as they are. What it hides by
// default: every argument of a hot key and the key's hash, every literal
// of a statement's or an advice's text (strings, numbers, comments), and
// the fingerprint of a text that holds literals (an unkeyed hash of the
// text, it would let a literal be guessed) show as keyed hashes
// (internal/redact) under Source.ValueKey: one value, one hash, for as
// long as the Shield runs. Options.ShowArguments shows them as they are.
//
// Which hosts it answers: a Host header that is an IP literal or
// localhost (with or without a port), or one of Options.AllowedHosts
// (compared without regard to case). Any other host, or none, gets 421
// Misdirected Request, so that a web page in an operator's browser cannot
// read the live page through DNS rebinding. The host is checked first,
// before the Source is read; then a method other than GET and HEAD gets
// 405 (Allow: GET, HEAD), and a top out of range 400.
//
// It reads the Shield and never changes it: the one effect of a request
// is Source.Sample, which starts the load's sampling and adds a sample to
// the load series. The handler is safe for concurrent use; each request
// reads the Source on its own, so two requests may see two snapshots. It
// does not authenticate anyone: mount it only where those who run the
// service may look.
package livepage

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

// Options configure the page (the root's LivePageOptions, field for
// field).
type Options struct {
	// AllowedHosts are the host names (without port, compared without
	// regard to case) the page answers besides localhost and IP literals.
	AllowedHosts []string

	// ShowArguments shows the application's values as they are instead
	// of keyed hashes.
	ShowArguments bool
}

// New returns the page of src with options o. It reads nothing before its
// first request.
func New(src Source, o Options) http.Handler { return &handler{src: src, opts: o} }

type handler struct {
	src  Source
	opts Options
}

const (
	// DefaultTop is how many statements the page lists without top=.
	DefaultTop = 20
	// HotKeys is how many of a statement's hottest keys the page lists.
	HotKeys = 3
)

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !h.opts.hostAllowed(r.Host) {
		http.Error(w, "sqlflight: the live page answers only loopback or IP-literal hosts, or LivePageOptions.AllowedHosts", http.StatusMisdirectedRequest)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	top := DefaultTop
	if v := r.URL.Query().Get("top"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > stats.StatementCapacity {
			http.Error(w, "top must be a number from 1 to 256", http.StatusBadRequest)
			return
		}
		top = n
	}
	now := h.src.Sample()
	page := gather(h.src, now, top, h.opts.ShowArguments)

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
	if err := pageTemplate.Execute(&b, pageHTML{Page: page, Nonce: nonce}); err != nil {
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

// newNonce returns 16 random bytes in unpadded base64url, for the CSP.
func newNonce() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// Page is the page's data, and its JSON document.
type Page struct {
	Time          time.Time `json:"time"`
	Started       time.Time `json:"started"`
	UptimeSeconds float64   `json:"uptime_seconds"`
	// Stats is the Shield's snapshot (Stats.Doc), with its Go field names:
	// breakers per scope in Breakers, the shared tier in SharedState and
	// the Shared* counters.
	Stats Stats `json:"stats"`
	// Statements are the top statements by database time; Counted is how
	// many statements the Shield counts.
	Statements []Line         `json:"statements"`
	Counted    int            `json:"statements_counted"`
	Load       Load           `json:"load"`
	Advice     []stats.Advice `json:"advice"` // never null
	// ShowArguments tells that the arguments, literals and fingerprints
	// are shown as they are (Options.ShowArguments), not hashed.
	ShowArguments bool `json:"show_arguments"`
}

// Load is the Shield's recent load, in events per second.
type Load struct {
	EverySeconds  float64           `json:"every_seconds"`
	WindowSeconds float64           `json:"window_seconds"`
	Points        []stats.LoadPoint `json:"points"`
}

// Line is one statement's line on the page.
type Line struct {
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
	P50 OptSeconds `json:"p50"`
	P99 OptSeconds `json:"p99"`

	HotKeys []stats.HotKey `json:"hot_keys,omitempty"`
}

// OptSeconds is a duration in seconds that may be unknown (NaN) or
// unbounded (+Inf): JSON null for both.
type OptSeconds float64

// MarshalJSON is the number, or null for NaN and ±Inf.
func (v OptSeconds) MarshalJSON() ([]byte, error) {
	f := float64(v)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, f, 'g', -1, 64), nil
}

// gather reads the page's data from src at now; unless show, with the
// values of the application hashed (see hideValues).
func gather(src Source, now time.Time, top int, show bool) Page {
	started := src.Started()
	p := Page{
		Time: now, Started: started, UptimeSeconds: now.Sub(started).Seconds(),
		Stats: src.Stats(),
		Load: Load{
			EverySeconds: stats.LoadEvery.Seconds(), WindowSeconds: stats.LoadWindow.Seconds(), Points: src.Load(),
		},
		Advice:        src.Advice(),
		ShowArguments: show,
	}
	if p.Advice == nil {
		p.Advice = []stats.Advice{}
	}
	sts := src.Statements()
	p.Counted = len(sts)
	p.Statements = make([]Line, 0, len(sts))
	for _, st := range sts {
		p.Statements = append(p.Statements, line(st))
	}
	slices.SortStableFunc(p.Statements, func(a, b Line) int {
		return cmp.Or(cmp.Compare(b.DatabaseSeconds, a.DatabaseSeconds), cmp.Compare(b.Calls, a.Calls),
			strings.Compare(a.Fingerprint, b.Fingerprint))
	})
	if len(p.Statements) > top {
		p.Statements = p.Statements[:top]
	}
	if !show {
		p.hideValues(redact.NewHasher(src.ValueKey()))
	}
	return p
}

// hideValues replaces, in the statements and the advice, what the
// application's values show through by keyed hashes: each hot key's
// arguments and hash, each literal of a text, and the fingerprint of a
// text that holds literals (an unkeyed FNV hash of the text, it would let
// one guess a literal by hashing candidates).
func (p *Page) hideValues(vh *redact.Hasher) {
	for i := range p.Statements {
		l := &p.Statements[i]
		l.SQL, l.Fingerprint = vh.Text(l.SQL, l.Fingerprint)
		keys := make([]stats.HotKey, len(l.HotKeys))
		for j, k := range l.HotKeys {
			keys[j] = stats.HotKey{Hash: vh.Sum(redact.DomainKey, k.Hash), Calls: k.Calls, Error: k.Error}
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

// line returns st's line on the page.
func line(st Statement) Line {
	x := st.Stats
	l := Line{
		Fingerprint: x.Fingerprint, SQL: x.SQL, Name: x.Name, Verdict: x.Verdict, Shared: x.Shared,
		Reason: x.Reason, Policy: x.Policy, Calls: x.Calls, Errors: x.Errors,
		Fresh: x.Fresh, Stale: x.Stale, Negative: x.Negative, Follower: x.Follower, Miss: x.Miss,
		BypassReasons:    x.Bypass,
		OriginExecutions: x.OriginExecutions, OriginSeconds: x.OriginSeconds, MeanOriginSeconds: x.MeanOriginSeconds,
		P50: OptSeconds(math.NaN()), P99: OptSeconds(math.NaN()),
		HotKeys: x.HotKeys[:min(len(x.HotKeys), HotKeys)],
	}
	for _, n := range x.Bypass {
		l.Bypass += n
	}
	l.DatabaseSeconds = l.OriginSeconds + float64(l.Bypass)*x.Latency["bypass"].Mean
	all := stats.Histogram{Bounds: stats.Bounds, Counts: make([]uint64, len(stats.Bounds)+1)}
	for _, h := range st.Latencies {
		for j, c := range h.Counts {
			all.Counts[j] += c
		}
		all.Count += h.Count
	}
	if all.Count > 0 {
		l.P50, l.P99 = OptSeconds(all.Quantile(0.5)), OptSeconds(all.Quantile(0.99))
	}
	return l
}

// pageHTML is what the page's template renders.
type pageHTML struct {
	Page
	Nonce string
}

// HitRatio is the cache's hits over the cacheable reads that looked, as
// the HTML prints it: "–" before any.
func (p Page) HitRatio() string {
	st := &p.Stats
	hits := st.FreshHits + st.StaleHits + st.NegativeHits
	if hits+st.Misses == 0 {
		return "–"
	}
	return strconv.FormatFloat(100*float64(hits)/float64(hits+st.Misses), 'f', 1, 64) + " %"
}

//go:embed livepage.html
var pageSource string

var pageTemplate = template.Must(template.New("live").Funcs(template.FuncMap{
	"secs": formatSeconds,
	"opt":  func(v OptSeconds) string { return formatSeconds(float64(v)) },
}).Parse(pageSource))

// formatSeconds prints a duration in seconds for the page (the page's
// script prints alike): "–" for NaN, "> 10 s" for +Inf, "0", then µs, ms
// or s.
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
