// Command fleetnode is one instance of an application fleet, for the fleet
// tests of the shared tier: it opens a database through sqlflight (its DSN
// names the shared tier) and runs what its standard input asks, one JSON
// command per line, answering one JSON line each on standard output.
//
//	{"op":"arm","n":125,"query":"…","args":[1]}  n goroutines wait for "go"
//	{"op":"go"}                                   releases them; answers when all are done
//	{"op":"paced","n":20,"every":"5ms","for":"2s","query":"…","args":[1]}
//	{"op":"exec","query":"…","args":[…]}
//	{"op":"read","query":"…","args":[…]}
//	{"op":"stats"}
//	{"op":"quit"}
//
// The test that starts it counts origin executions in PostgreSQL; the node
// reports what its callers saw: every error, and how many times each
// distinct result came back.
package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sqlflight/sqlflight"
	_ "github.com/sqlflight/sqlflight/redistier"
)

type command struct {
	Op    string `json:"op"`
	N     int    `json:"n"`
	Query string `json:"query"`
	Args  []any  `json:"args"`
	Every string `json:"every"`
	For   string `json:"for"`
}

// outcome is what the callers of one command saw.
type outcome struct {
	OK      bool           `json:"ok"`
	Error   string         `json:"error,omitempty"` // the command itself failed
	Calls   int            `json:"calls"`
	Errors  map[string]int `json:"errors,omitempty"`
	Results map[string]int `json:"results,omitempty"`
	P50     time.Duration  `json:"p50"`
	P99     time.Duration  `json:"p99"`
	Stats   *stats         `json:"stats,omitempty"`
}

// stats is the part of sqlflight.Stats the tests read.
type stats struct {
	OriginExecutions, Flights, Followers, FreshHits, StaleHits, Refreshes   uint64
	SharedState                                                             string
	SharedHits, SharedMisses, SharedWrites, SharedErrors, SharedTransitions uint64
	LeasesAcquired, LeaseWaits, LeaseWaitExpired                            uint64
	InvalidationsSent, InvalidationsHeard, InvalidationResyncs              uint64
	FeedState                                                               string
	FeedTransactions, FeedResyncs                                           uint64
}

type node struct {
	db  *sql.DB
	out *json.Encoder

	mu    sync.Mutex
	armed *herd
}

type herd struct {
	start chan struct{}
	wg    sync.WaitGroup
	rec   recorder
}

func main() {
	dsn := flag.String("dsn", "", "DSN opened with sql.Open(\"sqlflight\", …)")
	flag.Parse()
	db, err := sql.Open("sqlflight", *dsn)
	if err != nil {
		fatal(err)
	}
	db.SetMaxOpenConns(200)
	db.SetMaxIdleConns(200)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	err = db.PingContext(ctx)
	cancel()
	if err != nil {
		fatal(err)
	}
	n := &node{db: db, out: json.NewEncoder(os.Stdout)}
	_ = n.out.Encode(outcome{OK: true}) // ready
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	for in.Scan() {
		var c command
		if err := json.Unmarshal(in.Bytes(), &c); err != nil {
			_ = n.out.Encode(outcome{Error: err.Error()})
			continue
		}
		if c.Op == "quit" {
			break
		}
		for i, a := range c.Args {
			if f, ok := a.(float64); ok && f == float64(int64(f)) {
				c.Args[i] = int64(f) // JSON numbers that are integers
			}
		}
		_ = n.out.Encode(n.do(c))
	}
	_ = db.Close()
	if s := sqlflight.ShieldOf(db); s != nil {
		_ = s.Close()
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "fleetnode:", err)
	os.Exit(1)
}

func (n *node) do(c command) outcome {
	switch c.Op {
	case "arm":
		h := &herd{start: make(chan struct{})}
		for range c.N {
			h.wg.Go(func() {
				<-h.start
				h.rec.call(n.db, c.Query, c.Args)
			})
		}
		n.mu.Lock()
		n.armed = h
		n.mu.Unlock()
		return outcome{OK: true}
	case "go":
		n.mu.Lock()
		h := n.armed
		n.armed = nil
		n.mu.Unlock()
		if h == nil {
			return outcome{Error: "not armed"}
		}
		close(h.start)
		h.wg.Wait()
		return h.rec.outcome(n.stats())
	case "paced":
		every, err1 := time.ParseDuration(c.Every)
		total, err2 := time.ParseDuration(c.For)
		if err1 != nil || err2 != nil {
			return outcome{Error: "bad every/for"}
		}
		var rec recorder
		var wg sync.WaitGroup
		end := time.Now().Add(total)
		for i := range c.N {
			wg.Go(func() {
				// Spread the readers over the period.
				time.Sleep(every * time.Duration(i) / time.Duration(max(c.N, 1)))
				for time.Now().Before(end) {
					rec.call(n.db, c.Query, c.Args)
					time.Sleep(every)
				}
			})
		}
		wg.Wait()
		return rec.outcome(n.stats())
	case "read":
		var rec recorder
		rec.call(n.db, c.Query, c.Args)
		return rec.outcome(n.stats())
	case "exec":
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := n.db.ExecContext(ctx, c.Query, c.Args...); err != nil {
			return outcome{Error: err.Error()}
		}
		return outcome{OK: true, Stats: n.stats()}
	case "stats":
		return outcome{OK: true, Stats: n.stats()}
	}
	return outcome{Error: "unknown op " + c.Op}
}

func (n *node) stats() *stats {
	s := sqlflight.ShieldOf(n.db)
	if s == nil {
		return nil
	}
	st := s.Stats()
	return &stats{
		OriginExecutions: st.OriginExecutions, Flights: st.Flights, Followers: st.Followers,
		FreshHits: st.FreshHits, StaleHits: st.StaleHits, Refreshes: st.Refreshes,
		SharedState: st.SharedState, SharedHits: st.SharedHits, SharedMisses: st.SharedMisses,
		SharedWrites: st.SharedWrites, SharedErrors: st.SharedErrors, SharedTransitions: st.SharedTransitions,
		LeasesAcquired: st.LeasesAcquired, LeaseWaits: st.LeaseWaits, LeaseWaitExpired: st.LeaseWaitExpired,
		InvalidationsSent: st.InvalidationsSent, InvalidationsHeard: st.InvalidationsHeard,
		InvalidationResyncs: st.InvalidationResyncs,
		FeedState:           st.FeedState, FeedTransactions: st.FeedTransactions, FeedResyncs: st.FeedResyncs,
	}
}

// recorder collects what callers saw.
type recorder struct {
	mu      sync.Mutex
	calls   int
	errors  map[string]int
	results map[string]int
	lats    []time.Duration
}

// call runs query once and records its rows (as text) or its error.
func (r *recorder) call(db *sql.DB, query string, args []any) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	begin := time.Now()
	res, err := readAll(ctx, db, query, args)
	lat := time.Since(begin)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	r.lats = append(r.lats, lat)
	if err != nil {
		if r.errors == nil {
			r.errors = map[string]int{}
		}
		r.errors[err.Error()]++
		return
	}
	if r.results == nil {
		r.results = map[string]int{}
	}
	r.results[res]++
}

func (r *recorder) outcome(st *stats) outcome {
	r.mu.Lock()
	defer r.mu.Unlock()
	o := outcome{OK: true, Calls: r.calls, Errors: r.errors, Results: r.results, Stats: st}
	if len(r.lats) > 0 {
		slices.Sort(r.lats)
		o.P50 = r.lats[len(r.lats)/2]
		o.P99 = r.lats[len(r.lats)*99/100]
	}
	return o
}

func readAll(ctx context.Context, db *sql.DB, query string, args []any) (string, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return "", err
	}
	var b strings.Builder
	vals := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return "", err
		}
		for i, v := range vals {
			if i > 0 {
				b.WriteByte('|')
			}
			if bs, ok := v.([]byte); ok {
				v = string(bs)
			}
			fmt.Fprint(&b, v)
		}
		b.WriteByte(';')
	}
	return b.String(), rows.Err()
}
