package integration

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The fleet tests start real OS processes (integration/fleetnode), each an
// instance of an application with its own Shield, on one PostgreSQL and one
// Redis, and count what reaches PostgreSQL.

// fleetOutcome is a node's answer (see fleetnode).
type fleetOutcome struct {
	OK      bool           `json:"ok"`
	Error   string         `json:"error"`
	Calls   int            `json:"calls"`
	Errors  map[string]int `json:"errors"`
	Results map[string]int `json:"results"`
	P50     time.Duration  `json:"p50"`
	P99     time.Duration  `json:"p99"`
	Stats   *struct {
		OriginExecutions, Flights, Followers, FreshHits, StaleHits, Refreshes   uint64
		SharedState                                                             string
		SharedHits, SharedMisses, SharedWrites, SharedErrors, SharedTransitions uint64
		LeasesAcquired, LeaseWaits, LeaseWaitExpired                            uint64
		InvalidationsSent, InvalidationsHeard, InvalidationResyncs              uint64
		FeedState                                                               string
		FeedTransactions, FeedResyncs                                           uint64
	} `json:"stats"`
}

type fleetNode struct {
	i      int
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    chan fleetOutcome
	errMu  sync.Mutex
	log    strings.Builder // its standard error
	killed bool            // by the test: its exit is no error
}

// fleetDir holds the fleetnode binary; TestMain removes it.
var fleetDir string

func removeFleetBinary() {
	if fleetDir != "" {
		_ = os.RemoveAll(fleetDir)
	}
}

// fleetBinary builds fleetnode once per test run.
var fleetBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "sqlflight-fleet-")
	if err != nil {
		return "", err
	}
	fleetDir = dir
	bin := filepath.Join(dir, "fleetnode")
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	out, err := exec.Command(goTool, "build", "-o", bin, "./fleetnode").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build ./fleetnode: %v\n%s", err, out)
	}
	return bin, nil
})

// startFleet starts n nodes on dsn and waits until each is ready.
func startFleet(t *testing.T, n int, dsn string) []*fleetNode {
	t.Helper()
	bin, err := fleetBinary()
	if err != nil {
		t.Fatal(err)
	}
	nodes := make([]*fleetNode, n)
	for i := range nodes {
		nd := &fleetNode{i: i, out: make(chan fleetOutcome, 4)}
		nd.cmd = exec.Command(bin, "-dsn", dsn)
		nd.cmd.Stderr = writerFunc(func(p []byte) (int, error) {
			nd.errMu.Lock()
			defer nd.errMu.Unlock()
			return nd.log.Write(p)
		})
		if nd.in, err = nd.cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
		stdout, err := nd.cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := nd.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() {
			defer close(nd.out)
			sc := bufio.NewScanner(stdout)
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			for sc.Scan() {
				var o fleetOutcome
				if err := json.Unmarshal(sc.Bytes(), &o); err != nil {
					o.Error = "bad answer: " + sc.Text()
				}
				nd.out <- o
			}
		}()
		nodes[i] = nd
		t.Cleanup(func() { nd.stop(t) })
	}
	for _, nd := range nodes {
		if o := nd.await(t); !o.OK {
			t.Fatalf("node %d did not start: %s %s", nd.i, o.Error, nd.stderr())
		}
	}
	return nodes
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func (nd *fleetNode) stderr() string {
	nd.errMu.Lock()
	defer nd.errMu.Unlock()
	return nd.log.String()
}

func (nd *fleetNode) send(t *testing.T, cmd map[string]any) {
	t.Helper()
	b, _ := json.Marshal(cmd)
	if _, err := nd.in.Write(append(b, '\n')); err != nil {
		t.Fatalf("node %d: %v %s", nd.i, err, nd.stderr())
	}
}

func (nd *fleetNode) await(t *testing.T) fleetOutcome {
	t.Helper()
	select {
	case o, ok := <-nd.out:
		if !ok {
			t.Fatalf("node %d exited: %s", nd.i, nd.stderr())
		}
		return o
	case <-time.After(2 * time.Minute):
		t.Fatalf("node %d did not answer: %s", nd.i, nd.stderr())
	}
	return fleetOutcome{}
}

// do sends cmd to the node and returns its answer, failing t if the command
// itself failed.
func (nd *fleetNode) do(t *testing.T, cmd map[string]any) fleetOutcome {
	t.Helper()
	nd.send(t, cmd)
	o := nd.await(t)
	if !o.OK {
		t.Fatalf("node %d: %v: %s", nd.i, cmd, o.Error)
	}
	return o
}

// kill ends the node's process at once, as a crash would: nothing it
// holds is given back.
func (nd *fleetNode) kill(t *testing.T) {
	t.Helper()
	if err := nd.cmd.Process.Kill(); err != nil {
		t.Fatalf("node %d: kill: %v", nd.i, err)
	}
	nd.killed = true
}

func (nd *fleetNode) stop(t *testing.T) {
	if nd.killed {
		_ = nd.cmd.Wait()
		return
	}
	_ = json.NewEncoder(nd.in).Encode(map[string]any{"op": "quit"})
	_ = nd.in.Close()
	done := make(chan error, 1)
	go func() { done <- nd.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("node %d: %v: %s", nd.i, err, nd.stderr())
		}
	case <-time.After(30 * time.Second):
		_ = nd.cmd.Process.Kill()
		<-done
		t.Errorf("node %d did not quit", nd.i)
	}
}

// all runs cmd on every node at once and returns their answers.
func all(t *testing.T, nodes []*fleetNode, cmd map[string]any) []fleetOutcome {
	t.Helper()
	for _, nd := range nodes {
		nd.send(t, cmd)
	}
	out := make([]fleetOutcome, len(nodes))
	for i, nd := range nodes {
		if out[i] = nd.await(t); !out[i].OK {
			t.Fatalf("node %d: %v: %s", i, cmd, out[i].Error)
		}
	}
	return out
}

// fleetResults sums the callers' errors and results over the nodes.
func fleetResults(out []fleetOutcome) (calls int, errs, results map[string]int) {
	errs, results = map[string]int{}, map[string]int{}
	for _, o := range out {
		calls += o.Calls
		for k, v := range o.Errors {
			errs[k] += v
		}
		for k, v := range o.Results {
			results[k] += v
		}
	}
	return calls, errs, results
}

// fleetSetup is one fleet test's database objects and nodes.
type fleetSetup struct {
	fn, seq, table string
	admin          *sql.DB
	proxy          *faultProxy
	nodes          []*fleetNode
}

// newFleet starts n nodes whose calls to Redis time out after redisTimeout
// (generous in tests that count executions: a loaded CI machine must not
// turn a slow reply into a second query).
func newFleet(t *testing.T, n int, redisTimeout time.Duration) *fleetSetup {
	t.Helper()
	dsn := postgresDSN(t)
	raddr := redisAddr(t)
	admin := openRaw(t, dsn)
	id := uniqueID(t)
	f := &fleetSetup{fn: "public.fleet_" + id, seq: "public.fleet_seq_" + id, table: "public.fleet_items_" + id, admin: admin}
	// The slow query: counts its executions in a sequence, then takes 50 ms.
	mustExec(t, admin,
		fmt.Sprintf(`CREATE SEQUENCE %s`, f.seq),
		fmt.Sprintf(`CREATE FUNCTION %s(k int) RETURNS TABLE(answer int, label text) LANGUAGE plpgsql VOLATILE AS $fn$
BEGIN
	PERFORM nextval('%s');
	PERFORM pg_sleep(0.05);
	RETURN QUERY SELECT 42 + 0 * k, 'herd'::text;
END
$fn$`, f.fn, f.seq),
		fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, label text NOT NULL)`, f.table),
		fmt.Sprintf(`INSERT INTO %s VALUES (1, 'old'), (2, 'other')`, f.table))
	cleanupExec(t, admin,
		fmt.Sprintf(`DROP FUNCTION IF EXISTS %s(int)`, f.fn),
		fmt.Sprintf(`DROP SEQUENCE IF EXISTS %s`, f.seq),
		fmt.Sprintf(`DROP TABLE IF EXISTS %s`, f.table))
	f.proxy = newTCPProxy(t, "tcp", raddr) // Redis, behind a proxy the test can cut
	prefix := "sqlflight-test:" + id + ":"
	t.Cleanup(func() { flushRedisPrefix(t, raddr, prefix) })
	ndsn := withDSNParams(t, dsn,
		"sqlflight.shared", "redis://"+f.proxy.addr+"/0",
		"sqlflight.key_prefix", prefix,
		"sqlflight.shared_secret", fleetSecret,
		"sqlflight.redis_timeout", redisTimeout.String(),
		"application_name", "sqlflight_fleet")
	f.nodes = startFleet(t, n, ndsn)
	// A running fleet is warm: each node's connection to Redis is open and
	// its scripts are loaded before the herds arrive.
	f.awaitTierUp(t)
	return f
}

// readLabel reads row 1's label through nd, cached for a minute.
func (f *fleetSetup) readLabel(t *testing.T, nd *fleetNode) string {
	t.Helper()
	q := fmt.Sprintf(`/* sqlflight: soft=1m hard=5m */ SELECT label FROM %s WHERE id = $1`, f.table)
	o := nd.do(t, map[string]any{"op": "read", "query": q, "args": []any{1}})
	if len(o.Errors) > 0 {
		t.Fatalf("node %d: %v", nd.i, o.Errors)
	}
	for k := range o.Results {
		return k
	}
	return ""
}

// slowQuery is the 50 ms counted query under an annotation.
func (f *fleetSetup) slowQuery(annotation string) string {
	return fmt.Sprintf(`/* sqlflight: %[1]s tables=%[2]s pure=%[3]s */ SELECT answer, label FROM %[3]s($1)`, annotation, f.table, f.fn)
}

func (f *fleetSetup) executions(t *testing.T) int64 {
	t.Helper()
	return sequenceCalls(t, f.admin, f.seq)
}

// herd arms goroutines on every node, releases them together, and returns
// the answers.
func (f *fleetSetup) herd(t *testing.T, perNode int, query string, args ...any) []fleetOutcome {
	t.Helper()
	all(t, f.nodes, map[string]any{"op": "arm", "n": perNode, "query": query, "args": args})
	return all(t, f.nodes, map[string]any{"op": "go"})
}

// awaitTierUp reads through every node until each has its shared tier up.
func (f *fleetSetup) awaitTierUp(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, nd := range f.nodes {
		for {
			o := nd.do(t, map[string]any{"op": "read", "query": fmt.Sprintf(`/* sqlflight: ttl=1ms */ SELECT label FROM %s WHERE id = $1`, f.table), "args": []any{2}})
			if o.Stats != nil && o.Stats.SharedState == "up" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %d: shared tier still %q", nd.i, o.Stats.SharedState)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

func TestFleetColdHerdOneExecution(t *testing.T) {
	f := newFleet(t, 8, time.Second)
	q := f.slowQuery("soft=30s hard=1m")
	before := all(t, f.nodes, map[string]any{"op": "stats"})
	out := f.herd(t, 125, q, 1)
	calls, errs, results := fleetResults(out)
	if len(errs) > 0 {
		t.Fatalf("caller errors: %v", errs)
	}
	if calls != 1000 || results["42|herd;"] != 1000 {
		t.Fatalf("%d calls, results %v", calls, results)
	}
	n := f.executions(t)
	var waits, hits, leases uint64
	for i, o := range out {
		st, b := o.Stats, before[i].Stats
		waits += st.LeaseWaits - b.LeaseWaits
		hits += st.SharedHits - b.SharedHits
		leases += st.LeasesAcquired - b.LeasesAcquired
		t.Logf("  node %d: p50 %v p99 %v, origin %d, lease %d, lease waits %d, L2 hits %d, tier errors %d", i, o.P50, o.P99,
			st.OriginExecutions-b.OriginExecutions, st.LeasesAcquired-b.LeasesAcquired, st.LeaseWaits-b.LeaseWaits,
			st.SharedHits-b.SharedHits, st.SharedErrors-b.SharedErrors)
	}
	t.Logf("fleet cold herd: 1000 callers in 8 processes, %d executions; leases %d, lease waits %d, L2 hits %d", n, leases, waits, hits)
	if n != 1 {
		t.Fatalf("PostgreSQL executed the query %d times for 8 processes × 125 callers, want 1", n)
	}
	if leases == 0 {
		t.Error("no lease taken") // (a second one may be taken and given back at once: its holder found the value)
	}
}

func TestFleetExpiryHerd(t *testing.T) {
	f := newFleet(t, 8, time.Second)
	const soft = 300 * time.Millisecond
	const run = 3 * time.Second
	q := f.slowQuery("soft=300ms hard=1m jitter=0% beta=0")
	if o := f.herd(t, 10, q, 2); len(o) == 0 {
		t.Fatal("no answer")
	}
	if n := f.executions(t); n != 1 {
		t.Fatalf("cold start: %d executions", n)
	}
	out := all(t, f.nodes, map[string]any{"op": "paced", "n": 20, "every": "5ms", "for": run.String(), "query": q, "args": []any{2}})
	calls, errs, results := fleetResults(out)
	if len(errs) > 0 {
		t.Fatalf("caller errors: %v", errs)
	}
	if results["42|herd;"] != calls {
		t.Fatalf("results %v", results)
	}
	n := f.executions(t) - 1
	// The entry goes stale once per soft period; each time one instance of
	// the fleet refreshes it.
	limit := int64(run/soft) + 1
	t.Logf("fleet expiry herd: %d reads in 8 processes over %v, soft %v: %d refresh executions (limit %d)", calls, run, soft, n, limit)
	if n > limit {
		t.Fatalf("%d executions in %v with soft=%v across the fleet, want ≤ %d (one per refresh period)", n, run, soft, limit)
	}
	if n < 2 {
		t.Fatalf("only %d refreshes: the entry was not refreshed", n)
	}
	for i, o := range out {
		if o.P99 > 0 {
			t.Logf("  node %d: %d reads, p50 %v p99 %v, stale hits %d, refreshes %d, L2 hits %d", i, o.Calls, o.P50, o.P99, o.Stats.StaleHits, o.Stats.Refreshes, o.Stats.SharedHits)
		}
	}
}

func TestFleetRedisCutDegradesAndRecovers(t *testing.T) {
	f := newFleet(t, 8, 250*time.Millisecond)
	const soft = 200 * time.Millisecond
	q := f.slowQuery("soft=200ms hard=1m jitter=0% beta=0")
	f.herd(t, 10, q, 3)
	base := f.executions(t)
	if base != 1 {
		t.Fatalf("cold start: %d executions", base)
	}
	// Readers on every node for 4 s; Redis is cut after 1 s and back after 2.5 s.
	go func() {
		time.Sleep(time.Second)
		f.proxy.Cut()
		time.Sleep(1500 * time.Millisecond)
		f.proxy.Restore(t)
	}()
	out := all(t, f.nodes, map[string]any{"op": "paced", "n": 20, "every": "5ms", "for": "4s", "query": q, "args": []any{3}})
	calls, errs, results := fleetResults(out)
	if len(errs) > 0 {
		t.Fatalf("callers saw errors while Redis was cut: %v", errs)
	}
	if results["42|herd;"] != calls {
		t.Fatalf("results %v", results)
	}
	during := f.executions(t) - base
	// At worst every process refreshes on its own (per-process coalescing):
	// one execution per process per soft period.
	limit := int64(8 * (4*time.Second/soft + 1))
	var downs uint64
	for _, o := range out {
		if o.Stats.SharedTransitions > 0 {
			downs++
		}
	}
	t.Logf("Redis cut for 1.5 s of 4 s: %d reads, 0 errors, %d executions (per-process bound %d); %d of 8 nodes went down and came back", calls, during, limit, downs)
	if during > limit {
		t.Fatalf("%d executions: more than per-process coalescing allows (%d)", during, limit)
	}
	if downs == 0 {
		t.Fatal("no node noticed that Redis was cut")
	}
	// Back to one execution for the whole fleet.
	f.awaitTierUp(t)
	before := f.executions(t)
	out = f.herd(t, 125, f.slowQuery("soft=30s hard=1m"), 4)
	if _, errs, _ := fleetResults(out); len(errs) > 0 {
		t.Fatalf("caller errors: %v", errs)
	}
	if n := f.executions(t) - before; n != 1 {
		t.Fatalf("after Redis came back a cold herd of 8 × 125 executed %d times, want 1", n)
	}
}

func TestFleetSlowRedisIsNotTheCallersProblem(t *testing.T) {
	f := newFleet(t, 2, 100*time.Millisecond)
	q := f.slowQuery("soft=200ms hard=1m jitter=0% beta=0")
	f.herd(t, 10, q, 5)
	f.proxy.SetLatency(400 * time.Millisecond) // past the 100 ms RedisTimeout
	out := all(t, f.nodes, map[string]any{"op": "paced", "n": 20, "every": "5ms", "for": "2s", "query": q, "args": []any{5}})
	f.proxy.SetLatency(0)
	calls, errs, _ := fleetResults(out)
	if len(errs) > 0 {
		t.Fatalf("callers saw errors while Redis was slow: %v", errs)
	}
	for i, o := range out {
		if o.Stats.SharedState != "down" && o.Stats.SharedTransitions == 0 {
			t.Errorf("node %d did not leave the slow tier: %+v", i, *o.Stats)
		}
		t.Logf("node %d: %d reads p50 %v p99 %v, tier errors %d, state %s", i, o.Calls, o.P50, o.P99, o.Stats.SharedErrors, o.Stats.SharedState)
	}
	t.Logf("%d reads, 0 errors while every Redis reply took 400 ms", calls)
	f.awaitTierUp(t)
}

func TestFleetInvalidationAcrossProcesses(t *testing.T) {
	f := newFleet(t, 2, time.Second)
	a, b := f.nodes[0], f.nodes[1]
	read := func(nd *fleetNode) string { return f.readLabel(t, nd) }
	if got := read(b); got != "old;" {
		t.Fatal(got)
	}
	if got := read(a); got != "old;" { // from L2
		t.Fatal(got)
	}
	o := a.do(t, map[string]any{"op": "exec", "query": fmt.Sprintf(`UPDATE %s SET label = 'new' WHERE id = 1`, f.table)})
	if o.Stats.InvalidationsSent == 0 {
		t.Fatalf("the write was not published: %+v", *o.Stats)
	}
	// Read-your-writes on the writer, at once.
	if got := read(a); got != "new;" {
		t.Fatalf("writer read %q after its own write", got)
	}
	// The other process, once the invalidation reached it (pub/sub: the
	// documented window).
	begin := time.Now()
	for {
		got := read(b)
		if got == "new;" {
			break
		}
		if time.Since(begin) > 10*time.Second {
			t.Fatalf("node 1 still reads %q 10 s after the write", got)
		}
		time.Sleep(time.Millisecond)
	}
	t.Logf("the other process read the new row %v after the write returned", time.Since(begin))
	if st := b.do(t, map[string]any{"op": "stats"}).Stats; st.InvalidationsHeard == 0 {
		t.Fatalf("node 1 heard no invalidation: %+v", *st)
	}
}

// redisNamespace is a client of the tests' Redis and a fresh key prefix
// named after kind; what is left under the prefix, and the client, go
// when the test ends.
func redisNamespace(tb testing.TB, kind string) (*redis.Client, string) {
	tb.Helper()
	addr := redisAddr(tb)
	prefix := kind + ":" + uniqueID(tb) + ":"
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	tb.Cleanup(func() {
		flushRedisPrefix(tb, addr, prefix)
		_ = rdb.Close()
	})
	return rdb, prefix
}

// flushRedisPrefix deletes what a test left in Redis under prefix.
func flushRedisPrefix(t testing.TB, addr, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	iter := rdb.Scan(ctx, 0, prefix+"*", 500).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Errorf("redis scan: %v", err)
		return
	}
	if len(keys) > 0 {
		if err := rdb.Del(ctx, keys...).Err(); err != nil {
			t.Errorf("redis del: %v", err)
		}
	}
}

func TestFleetWriteDuringRedisCutReachesOthers(t *testing.T) {
	f := newFleet(t, 2, time.Second)
	a, b := f.nodes[0], f.nodes[1]
	read := func(nd *fleetNode) string { return f.readLabel(t, nd) }
	if read(a) != "old;" || read(b) != "old;" {
		t.Fatal("setup")
	}
	f.proxy.Cut()
	o := a.do(t, map[string]any{"op": "exec", "query": fmt.Sprintf(`UPDATE %s SET label = 'new' WHERE id = 1`, f.table)})
	if len(o.Errors) > 0 {
		t.Fatalf("the write failed while Redis was cut: %v", o.Errors)
	}
	if got := read(a); got != "new;" {
		t.Fatalf("writer read %q after its own write while Redis was cut", got)
	}
	f.proxy.Restore(t)
	begin := time.Now()
	for {
		_ = read(a) // the writer's reads probe the tier, which then publishes the write
		if read(b) == "new;" {
			break
		}
		if time.Since(begin) > 15*time.Second {
			t.Fatalf("node 1 still reads the old row 15 s after Redis came back: %+v", *b.do(t, map[string]any{"op": "stats"}).Stats)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("a write made while Redis was cut reached the other process %v after Redis came back", time.Since(begin))
}
