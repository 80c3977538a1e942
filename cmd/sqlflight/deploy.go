package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"

	"github.com/sqlflight/sqlflight"
)

// The deploy scenario: an instance that served every product under a TTL
// saves its hot set and is replaced. The new instance starts cold under
// the same paced load — every wave asks for every product — once as is,
// and once after pre-warming from the hot set it was handed, a few origin
// queries at a time, before it takes traffic.

// Indexes of the deploy scenario's ways.
const (
	deployCold = iota
	deployWarm
)

// playDeploy plays the deploy scenario: the old instance, then the two
// restarts.
func playDeploy(ctx context.Context, w io.Writer, cfg demoConfig) (_ []herdResult, err error) {
	be, err := openBackend(ctx, w, cfg)
	if err != nil {
		return nil, err
	}
	defer closeBackend(ctx, be, &err)

	ttl := demoWays(cfg.soft, cfg.hard)[wayTTL]
	q := ttl.annotation + " " + be.query()
	keys := len(products)
	fmt.Fprintf(w, "workload: %d waves of %d callers over %d products, one wave every %s for %s; slow_price takes %s\n  query: %s\n",
		cfg.waves(), cfg.callers, keys, cfg.interval, cfg.duration, cfg.latency, q)
	snap, err := oldInstance(ctx, be, cfg, q, keys)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(w, "the old instance saved its hot set (%d bytes) and stopped\n", len(snap))
	ways := []way{
		{name: "cold restart", annotation: ttl.annotation, protected: true, keys: keys},
		{name: "restart + pre-warm", annotation: ttl.annotation, protected: true, keys: keys, prewarm: snap},
	}
	results := make([]herdResult, 0, len(ways))
	for i, h := range ways {
		fmt.Fprintf(w, "way %d/%d: %s\n", i+1, len(ways), h.name)
		r, err := playWay(ctx, w, be, cfg, wayTTL, h, q)
		if err != nil {
			if cerr := ctx.Err(); cerr != nil {
				return nil, cerr
			}
			return nil, fmt.Errorf("way %q: %w", h.name, err)
		}
		fmt.Fprintf(w, "  done in %s: %d origin queries in the first wave, %d in all, %d errors\n",
			fmtDur(r.wall), r.firstWave, r.origin, r.errors)
		results = append(results, r)
	}
	return results, nil
}

// oldInstance reads every product a few times through a Shield and
// returns the hot set it saves.
func oldInstance(ctx context.Context, be backend, cfg demoConfig, q string, keys int) ([]byte, error) {
	s := sqlflight.New(sqlflight.Options{MaxInflight: cfg.conns})
	defer s.Close()
	db := sql.OpenDB(be.connector(wayTTL, s))
	defer db.Close()
	for id := 1; id <= keys; id++ {
		for range 3 {
			var name string
			var price int64
			if err := db.QueryRowContext(ctx, q, id).Scan(&name, &price); err != nil {
				return nil, fmt.Errorf("the old instance: %w", err)
			}
		}
	}
	var buf bytes.Buffer
	err := s.SaveHotSet(&buf)
	return buf.Bytes(), err
}

// prewarmWay warms shield from the hot set snap before the way's first
// wave, and returns the origin queries it ran and the most at once.
func prewarmWay(ctx context.Context, w io.Writer, be backend, cfg demoConfig, shield *sqlflight.Shield, db *sql.DB, snap []byte) (origin, peak int64, err error) {
	before, err := be.count(ctx)
	if err != nil {
		return 0, 0, err
	}
	be.peak(ctx) // reset
	// The demo's own hot set: its pure= entries may vouch for slow_price.
	rep, err := shield.Prewarm(ctx, sqlflight.PrewarmOptions{DB: db, From: bytes.NewReader(snap), TrustFile: true,
		Concurrency: cfg.warmConc, TrustAnnotations: true})
	if err != nil {
		return 0, 0, fmt.Errorf("pre-warming: %w", err)
	}
	after, err := be.count(ctx)
	if err != nil {
		return 0, 0, err
	}
	peak = be.peak(ctx)
	fmt.Fprintf(w, "  pre-warmed %d keys (%d skipped, %d failed) with %d origin queries, at most %d at once\n",
		rep.Replayed, rep.Skipped, rep.Failed, after-before, peak)
	return after - before, peak, nil
}

// writeDeployComparison prints the deploy scenario's table.
func writeDeployComparison(w io.Writer, rs []herdResult) {
	header, row := comparison(rs)
	rows := [][]string{
		row("pre-warming: origin queries (at most at once)", func(r herdResult) string {
			if r.warmOrigin == 0 {
				return "–"
			}
			return fmt.Sprintf("%d (%d)", r.warmOrigin, r.warmPeak)
		}),
		row("**origin queries in the first wave**", func(r herdResult) string { return fmt.Sprintf("**%d**", r.firstWave) }),
		row("origin queries under load, in all", func(r herdResult) string { return fmt.Sprint(r.origin) }),
		row("callers (waves × callers per wave)", func(r herdResult) string {
			return fmt.Sprintf("%d (%d × %d)", r.callers, r.waves, r.callers/max(r.waves, 1))
		}),
		row("errors", func(r herdResult) string { return fmt.Sprint(r.errors) }),
		row("caller latency p50", func(r herdResult) string { return fmtDur(r.p50) }),
		row("caller latency p99", func(r herdResult) string { return fmtDur(r.p99) }),
		row("caller latency max", func(r herdResult) string { return fmtDur(r.max) }),
	}
	if len(rs) > 0 && rs[0].peak >= 0 {
		rows = append(rows, row("origin queries under load at once (peak)", func(r herdResult) string { return fmt.Sprint(r.peak) }))
	}
	writeTable(w, header, rows)
}

// deployVerdict prints the conclusion and fails if a caller failed, or if
// pre-warming did not cut the first wave's origin queries.
func deployVerdict(w io.Writer, rs []herdResult) error {
	cold, warm := rs[deployCold], rs[deployWarm]
	for _, r := range rs {
		if r.errors > 0 {
			return fmt.Errorf("%s: %d of %d callers failed, e.g.: %w", r.name, r.errors, r.callers, r.firstErr)
		}
	}
	if warm.firstWave > 0 && warm.firstWave >= cold.firstWave {
		return fmt.Errorf("after pre-warming, the first wave still sent %d origin queries (%d cold)", warm.firstWave, cold.firstWave)
	}
	fmt.Fprintf(w, "a cold restart sent %d origin queries to the database in its first wave; after pre-warming "+
		"(%d origin queries, at most %d at once, before taking traffic), %d.\n",
		cold.firstWave, warm.warmOrigin, warm.warmPeak, warm.firstWave)
	return nil
}
