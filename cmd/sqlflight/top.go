package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/sqlflight/sqlflight"
)

// runTop is the top subcommand: it prints the live page of a running
// application (sqlflight.Handler) in the terminal.
func runTop(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("top", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("url", "", "where the application mounts sqlflight.Handler, e.g. http://localhost:6060/debug/sqlflight")
	interval := fs.Duration("interval", 2*time.Second, "time between refreshes")
	once := fs.Bool("once", false, "print once and exit")
	n := fs.Int("n", 15, "statements to list (1 to 256)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: sqlflight top -url http://host:port/debug/sqlflight [-interval 2s] [-n 15] [-once]

Shows an application's live page (sqlflight.Handler) in the terminal: the
Shield's counters, the load of the last ten seconds, the top statements by
database time with how their calls were served, and the advisor's
suggestions. It refreshes every -interval until interrupted, or prints once
with -once.

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return err
		}
		return errUsage
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	case *addr == "":
		return fmt.Errorf("%w: -url is required", errUsage)
	case *interval <= 0:
		return fmt.Errorf("%w: -interval must be positive", errUsage)
	case *n < 1 || *n > 256:
		return fmt.Errorf("%w: -n must be from 1 to 256", errUsage)
	}
	u, err := url.Parse(*addr)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%w: -url must be an http:// or https:// URL", errUsage)
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/json"
	u.RawQuery = url.Values{"top": {strconv.Itoa(*n)}}.Encode()
	client := &http.Client{Timeout: 10 * time.Second}
	for {
		page, err := fetchLive(ctx, client, u.String())
		if *once {
			if err != nil {
				return err
			}
			printTop(stdout, *addr, page)
			return nil
		}
		fmt.Fprint(stdout, "\x1b[H\x1b[2J") // home, clear
		if err != nil {
			fmt.Fprintf(stdout, "sqlflight top: %v (retrying every %v)\n", err, *interval)
		} else {
			printTop(stdout, *addr, page)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(*interval):
		}
	}
}

// livePage is the JSON of sqlflight.Handler, as far as top prints it.
type livePage struct {
	Time          time.Time       `json:"time"`
	UptimeSeconds float64         `json:"uptime_seconds"`
	Stats         sqlflight.Stats `json:"stats"`
	Statements    []struct {
		Fingerprint      string   `json:"fingerprint"`
		SQL              string   `json:"sql"`
		Name             string   `json:"name"`
		Shared           bool     `json:"shared"`
		Reason           string   `json:"reason"`
		Policy           string   `json:"policy"`
		Calls            uint64   `json:"calls"`
		Fresh            uint64   `json:"fresh"`
		Stale            uint64   `json:"stale"`
		Negative         uint64   `json:"negative"`
		Follower         uint64   `json:"follower"`
		Miss             uint64   `json:"miss"`
		Bypass           uint64   `json:"bypass"`
		OriginExecutions uint64   `json:"origin_executions"`
		DatabaseSeconds  float64  `json:"database_seconds"`
		P50              *float64 `json:"p50"`
		P99              *float64 `json:"p99"`
	} `json:"statements"`
	Counted int `json:"statements_counted"`
	Load    struct {
		Points []struct {
			Seconds   float64 `json:"seconds"`
			Queries   float64 `json:"queries"`
			Hits      float64 `json:"hits"`
			Followers float64 `json:"followers"`
			Origins   float64 `json:"origin_executions"`
			Bypassed  float64 `json:"bypassed"`
		} `json:"points"`
	} `json:"load"`
	Advice []sqlflight.Advice `json:"advice"`
}

func fetchLive(ctx context.Context, client *http.Client, u string) (*livePage, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	var p livePage
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&p); err != nil {
		return nil, fmt.Errorf("GET %s: not the JSON of sqlflight.Handler: %w", u, err)
	}
	return &p, nil
}

// topSQLWidth is how much of a statement's text a line shows.
const topSQLWidth = 80

// printTop prints p as a terminal page. Every text from the application
// (SQL, names, scopes) goes through printable: it is data, never a
// terminal escape.
func printTop(w io.Writer, addr string, p *livePage) {
	st := &p.Stats
	fmt.Fprintf(w, "sqlflight top  %s  %s  up %s\n\n", printable(addr), p.Time.Local().Format("15:04:05"),
		(time.Duration(p.UptimeSeconds) * time.Second).String())
	hits := st.FreshHits + st.StaleHits + st.NegativeHits
	ratio := "–"
	if hits+st.Misses > 0 {
		ratio = fmt.Sprintf("%.1f%%", 100*float64(hits)/float64(hits+st.Misses))
	}
	fmt.Fprintf(w, "queries %d  hit ratio %s  origin executions %d  flights/followers %d/%d  bypassed %d  cache entries %d\n",
		st.Queries, ratio, st.OriginExecutions, st.Flights, st.Followers, st.Bypassed, st.CacheEntries)
	fmt.Fprintf(w, "breaker %s  shared tier %s  change feed %s\n", printable(st.BreakerState),
		orNone(st.SharedState), orNone(st.FeedState))

	// The load of the last ten seconds of samples.
	var span, queries, hitsN, origins, bypassed float64
	for i := len(p.Load.Points) - 1; i >= 0 && span < 10; i-- {
		pt := p.Load.Points[i]
		span += pt.Seconds
		queries += pt.Queries * pt.Seconds
		hitsN += pt.Hits * pt.Seconds
		origins += pt.Origins * pt.Seconds
		bypassed += pt.Bypassed * pt.Seconds
	}
	if span > 0 {
		fmt.Fprintf(w, "last %.0fs per second: queries %.1f  hits %.1f  origin executions %.1f  bypassed %.1f\n",
			span, queries/span, hitsN/span, origins/span, bypassed/span)
	}

	fmt.Fprintf(w, "\nTop statements by database time (%d of %d)\n", len(p.Statements), p.Counted)
	const row = "%9s %9s %9s %7s %6s %8s %7s %7s %8s %8s %8s  %s\n"
	fmt.Fprintf(w, row, "db time", "calls", "fresh", "stale", "neg", "follower", "miss", "bypass", "origin", "p50", "p99",
		"statement [policy]")
	for _, s := range p.Statements {
		label := s.Fingerprint
		if s.Name != "" {
			label += " " + s.Name
		}
		policy := s.Policy
		if !s.Shared {
			policy = "bypass: " + s.Reason
		}
		fmt.Fprintf(w, row, seconds(&s.DatabaseSeconds), count(s.Calls), count(s.Fresh), count(s.Stale), count(s.Negative),
			count(s.Follower), count(s.Miss), count(s.Bypass), count(s.OriginExecutions), seconds(s.P50), seconds(s.P99),
			printable(label)+" ["+printable(policy)+"]")
		fmt.Fprintf(w, "%12s%s\n", "", oneLine(s.SQL))
	}

	fmt.Fprintf(w, "\nAdvisor\n")
	if len(p.Advice) == 0 {
		fmt.Fprintln(w, "no suggestion: nothing that runs uncached repeats its keys")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "saves\trepeats/executions\tannotation\tstatement")
	for _, a := range p.Advice {
		fmt.Fprintf(tw, "%s\t%d/%d\t%s\t%s  %s\n", seconds(&a.SavedSeconds), a.Repeats, a.Executions,
			printable(a.Annotation), printable(a.Fingerprint), oneLine(a.SQL))
	}
	tw.Flush()
}

func count(n uint64) string { return strconv.FormatUint(n, 10) }

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return printable(s)
}

// seconds prints a duration in seconds, "–" when unknown or unbounded.
func seconds(v *float64) string {
	if v == nil {
		return "–"
	}
	d := time.Duration(*v * float64(time.Second))
	switch {
	case d == 0:
		return "0"
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(100 * time.Microsecond).String()
	}
	return d.Round(10 * time.Millisecond).String()
}

// oneLine returns sql on one line, at most topSQLWidth runes, printable.
func oneLine(sql string) string {
	s := []rune(strings.Join(strings.Fields(printable(sql)), " "))
	if len(s) > topSQLWidth {
		return string(s[:topSQLWidth-1]) + "…"
	}
	return string(s)
}

// printable replaces control characters (terminal escapes among them)
// with U+FFFD, so that text from the application cannot drive the
// terminal; tabs and newlines become spaces.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r == '\t' || r == '\n' || r == '\r':
			return ' '
		case unicode.IsControl(r) || r == unicode.ReplacementChar:
			return unicode.ReplacementChar
		}
		return r
	}, s)
}
