package integration

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sqlflight/sqlflight"
	"github.com/sqlflight/sqlflight/redistier"
)

// TestRedisRefusedTakesTheTierDownAtOnce: with sqlflight.shared pointing
// at a port where nothing listens and the default RedisTimeout, the first
// read takes the tier down (a refused connection is certain, and comes at
// once), rather than three reads paying a timeout each.
func TestRedisRefusedTakesTheTierDownAtOnce(t *testing.T) {
	pg := postgresDSN(t)
	id := uniqueID(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	dsn := withDSNParams(t, pg, "sqlflight.shared", redisTarget(addr),
		"sqlflight.key_prefix", "sqlflight:refused:"+id+":", "sqlflight.shared_secret", fleetSecret,
		"application_name", "sqlflight_refused_"+id)
	db, sh := openDSN(t, dsn)
	ctx := testContext(t, testTimeout)
	var got int
	if err := db.QueryRowContext(ctx, `/* sqlflight: soft=30s */ SELECT $1::int`, 7).Scan(&got); err != nil || got != 7 {
		t.Fatalf("read with Redis refusing: %v, %d", err, got)
	}
	if st := sh.Stats(); st.SharedState != "down" || st.SharedErrors != 1 || st.OriginErrors != 0 {
		t.Fatalf("after one read with Redis refusing connections: tier %s, %d tier errors; %s", st.SharedState, st.SharedErrors, statsString(st))
	}
}

// redisCluster is a Redis Cluster of three primaries (no replicas) that a
// test started on loopback ports.
type redisCluster struct {
	t     *testing.T
	dir   string
	ports []int
	mu    sync.Mutex
	procs map[int]*exec.Cmd
}

// startRedisCluster starts three `redis-server --cluster-enabled yes` and
// makes a cluster of them with redis-cli; they are killed when the test
// ends. Without redis-server or redis-cli the test is skipped (failed under
// SQLFLIGHT_REQUIRE_INTEGRATION=1).
func startRedisCluster(t *testing.T) *redisCluster {
	t.Helper()
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			if requireIntegration() {
				t.Fatalf("Redis Cluster is required (%s=1) but %s is not installed", envRequire, bin)
			}
			t.Skipf("Redis Cluster not available: %s is not installed", bin)
		}
	}
	rc := &redisCluster{t: t, dir: t.TempDir(), procs: map[int]*exec.Cmd{}}
	t.Cleanup(rc.stop)
	for range 3 {
		p := freeClusterPort(t, rc.ports)
		rc.ports = append(rc.ports, p)
		rc.start(p)
	}
	ctx := testContext(t, time.Minute)
	for _, p := range rc.ports {
		c := redis.NewClient(&redis.Options{Addr: rc.addr(p)})
		waitUntil(t, 20*time.Second, func() string { return "redis-server on " + rc.addr(p) + " answers" },
			func() bool { return c.Ping(ctx).Err() == nil })
		_ = c.Close()
	}
	args := []string{"--cluster", "create"}
	for _, p := range rc.ports {
		args = append(args, rc.addr(p))
	}
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	rc.waitOK(ctx)
	return rc
}

// freeClusterPort returns a free loopback port p whose cluster bus port
// (p+10000) is free too.
func freeClusterPort(t *testing.T, taken []int) int {
	t.Helper()
	for range 200 {
		p := 20000 + rand.IntN(25000)
		if strings.Contains(fmt.Sprint(taken), strconv.Itoa(p)) {
			continue
		}
		ok := true
		for _, q := range []int{p, p + 10000} {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(q))
			if err != nil {
				ok = false
				break
			}
			_ = l.Close()
		}
		if ok {
			return p
		}
	}
	t.Fatal("no free pair of loopback ports for a cluster node")
	return 0
}

func (rc *redisCluster) addr(p int) string { return "127.0.0.1:" + strconv.Itoa(p) }

// start starts (or starts again, with its node file) the node on port p.
func (rc *redisCluster) start(p int) {
	rc.t.Helper()
	ps := strconv.Itoa(p)
	cmd := exec.Command("redis-server", "--port", ps, "--bind", "127.0.0.1",
		"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(rc.dir, "nodes-"+ps+".conf"),
		"--cluster-node-timeout", "1000", "--dir", rc.dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no")
	log, err := os.Create(filepath.Join(rc.dir, "redis-"+ps+".log"))
	if err != nil {
		rc.t.Fatal(err)
	}
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		rc.t.Fatalf("start redis-server on %d: %v", p, err)
	}
	rc.mu.Lock()
	rc.procs[p] = cmd
	rc.mu.Unlock()
}

// kill kills the node on port p and waits for it to exit.
func (rc *redisCluster) kill(p int) {
	rc.mu.Lock()
	cmd := rc.procs[p]
	delete(rc.procs, p)
	rc.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
}

func (rc *redisCluster) stop() {
	for _, p := range rc.ports {
		rc.kill(p)
	}
}

// waitOK waits until every node says the cluster is ok.
func (rc *redisCluster) waitOK(ctx context.Context) {
	rc.t.Helper()
	for _, p := range rc.ports {
		c := redis.NewClient(&redis.Options{Addr: rc.addr(p)})
		waitUntil(rc.t, 30*time.Second, func() string { return "cluster_state:ok on " + rc.addr(p) }, func() bool {
			info, err := c.ClusterInfo(ctx).Result()
			return err == nil && strings.Contains(info, "cluster_state:ok")
		})
		_ = c.Close()
	}
}

// target is the sqlflight.shared URL of the cluster.
func (rc *redisCluster) target() string {
	u := "redis+cluster://" + rc.addr(rc.ports[0]) + "?"
	for i, p := range rc.ports[1:] {
		if i > 0 {
			u += "&"
		}
		u += "addr=" + rc.addr(p)
	}
	return u
}

// TestRedisCluster runs the shared tier on a real Redis Cluster of three
// primaries, its namespace under the hash tag {sqlflight}: every script
// of the tier (leases, Store, NextSeq, Publish with row epochs and tags)
// on the slot's node; a read shared by two Shields; a write through one
// reaching the other; and the primary holding the namespace killed while
// both read: no caller error, no wrong row, the tier down and back once
// the node is started again.
func TestRedisCluster(t *testing.T) {
	pg := postgresDSN(t)
	rc := startRedisCluster(t)
	id := uniqueID(t)
	prefix := "{sqlflight}:cluster_" + id + ":"
	ctx := testContext(t, testTimeout)

	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{rc.addr(rc.ports[0])},
		ContextTimeoutEnabled: true, MaxRetries: 1, DialerRetries: 1})
	t.Cleanup(func() { _ = cc.Close() })

	t.Run("scripts", func(t *testing.T) {
		tier := redistier.New(cc)
		defer tier.Close()
		ns := prefix + "scripts:"
		got := make(chan sqlflight.Invalidation, 10)
		stop, err := tier.Subscribe(ns, func(inv sqlflight.Invalidation) {
			if !inv.Resync {
				got <- inv
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		l, err := tier.Acquire(ctx, ns, "k", time.Minute)
		if err != nil || !l.Held || l.Version == 0 {
			t.Fatalf("Acquire = %+v, %v", l, err)
		}
		if ok, err := tier.Renew(ctx, ns, "k", l, time.Minute); err != nil || !ok {
			t.Fatalf("Renew = %v, %v", ok, err)
		}
		if ok, err := tier.Store(ctx, ns, "k", []byte("value"), l.Version, time.Minute); err != nil || !ok {
			t.Fatalf("Store = %v, %v", ok, err)
		}
		if err := tier.Release(ctx, ns, "k", l); err != nil {
			t.Fatal(err)
		}
		names := []string{"public.t", "public.t\x00c", "public.t\x00pid", "public.t\x00tid\x001"}
		sv, err := tier.Fetch(ctx, ns, "k", names)
		if err != nil || string(sv.Data) != "value" || sv.Version != l.Version {
			t.Fatalf("Fetch = %+v, %v", sv, err)
		}
		seq, err := tier.NextSeq(ctx, ns)
		if err != nil || seq <= l.Version {
			t.Fatalf("NextSeq = %d, %v", seq, err)
		}
		inv := sqlflight.Invalidation{Tables: []string{"public.u"}, Seq: seq, Source: "test", Tag: []byte{1},
			Rows: []sqlflight.RowPins{{Table: "public.t", Columns: []string{"id"}, Values: [][]string{{"1"}}}}}
		if err := tier.Publish(ctx, ns, inv); err != nil {
			t.Fatalf("Publish with row epochs: %v", err)
		}
		select {
		case m := <-got:
			if m.Seq != seq || len(m.Rows) != 1 {
				t.Fatalf("heard %+v", m)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the invalidation was not heard")
		}
		sv, err = tier.Fetch(ctx, ns, "k", names)
		if err != nil || sv.Epochs[0] != seq || sv.Epochs[3] != seq || sv.Epochs[1] != 0 {
			t.Fatalf("epochs after the write of row id=1: %v, %v", sv.Epochs, err)
		}
		// Every key of the namespace on one slot.
		slot := -1
		for _, k := range []string{ns + "epochs", ns + "v:k", ns + "tags:public.t"} {
			s, err := cc.ClusterKeySlot(ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			if slot >= 0 && int(s) != slot {
				t.Fatalf("%q on slot %d, not %d", k, s, slot)
			}
			slot = int(s)
		}
	})

	admin := openRaw(t, pg)
	table := "public.sqlflight_cluster_" + id
	mustExec(t, admin,
		fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, n int NOT NULL)`, table),
		fmt.Sprintf(`INSERT INTO %s SELECT g, g * 10 FROM generate_series(1, 20) g`, table))
	cleanupExec(t, admin, fmt.Sprintf(`DROP TABLE IF EXISTS %s`, table))

	app := "sqlflight_cluster_" + id
	params := []string{"sqlflight.shared", rc.target(), "sqlflight.key_prefix", prefix,
		"sqlflight.shared_secret", fleetSecret, "sqlflight.redis_timeout", "200ms", "application_name", app}
	dbA, shA := openDSN(t, withDSNParams(t, pg, params...))
	dbB, shB := openDSN(t, withDSNParams(t, pg, append(params, "sqlflight.lease_ttl", "2000ms")...))

	query := fmt.Sprintf(`/* sqlflight: soft=30s */ SELECT n FROM %s WHERE id = $1`, table)
	read := func(db *sql.DB, id int) (int, error) {
		var n int
		err := db.QueryRowContext(ctx, query, id).Scan(&n)
		return n, err
	}

	// Shared reads.
	if n, err := read(dbA, 1); err != nil || n != 10 {
		t.Fatalf("A read %d, %v", n, err)
	}
	waitUntil(t, 10*time.Second, func() string { return "A wrote the tier: " + statsString(shA.Stats()) },
		func() bool { return shA.Stats().SharedWrites == 1 })
	if n, err := read(dbB, 1); err != nil || n != 10 {
		t.Fatalf("B read %d, %v", n, err)
	}
	if st := shB.Stats(); st.SharedHits != 1 || st.OriginExecutions != 0 || st.SharedErrors != 0 {
		t.Fatalf("B did not read A's result from the cluster: %s", statsString(st))
	}

	// Invalidation: a write through B reaches A's L1.
	if _, err := dbB.ExecContext(ctx, fmt.Sprintf(`UPDATE %s SET n = 11 WHERE id = 1`, table)); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, func() string { return "A reads the write made through B" }, func() bool {
		n, err := read(dbA, 1)
		return err == nil && n == 11
	})
	if n, err := read(dbB, 1); err != nil || n != 11 {
		t.Fatalf("B read %d, %v after its own write", n, err)
	}
	want := func(id int) int {
		if id == 1 {
			return 11
		}
		return id * 10
	}

	// The primary holding the namespace's slot killed while both read.
	owner, err := cc.MasterForKey(ctx, prefix+"epochs")
	if err != nil {
		t.Fatal(err)
	}
	ownerPort, _ := strconv.Atoi(strings.TrimPrefix(owner.Options().Addr, "127.0.0.1:"))
	// Each read its own key (a nonce argument), so that every one asks the
	// tier instead of L1.
	nonceQuery := fmt.Sprintf(`/* sqlflight: soft=30s */ SELECT n FROM %s WHERE id = $1 AND $2::bigint >= 0`, table)
	var nonce atomic.Int64
	readNew := func(db *sql.DB, id int) (int, error) {
		var n int
		err := db.QueryRowContext(ctx, nonceQuery, id, nonce.Add(1)).Scan(&n)
		return n, err
	}
	var reads, failures atomic.Int64
	var stopRead atomic.Bool
	var wg sync.WaitGroup
	var errMu sync.Mutex
	var firstErr error
	for _, db := range []*sql.DB{dbA, dbB} {
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; !stopRead.Load(); i++ {
					id := 1 + (g*7+i)%20
					n, err := readNew(db, id)
					reads.Add(1)
					if err != nil || n != want(id) {
						failures.Add(1)
						errMu.Lock()
						if firstErr == nil {
							firstErr = fmt.Errorf("read of id %d: %d, %v", id, n, err)
						}
						errMu.Unlock()
					}
				}
			}()
		}
	}
	defer func() { stopRead.Store(true); wg.Wait() }()
	waitUntil(t, 10*time.Second, func() string { return "reads before the kill" },
		func() bool { return reads.Load() > 200 })
	rc.kill(ownerPort)
	waitUntil(t, 30*time.Second,
		func() string {
			return "both tiers down: A " + shA.Stats().SharedState + ", B " + shB.Stats().SharedState
		},
		func() bool { return shA.Stats().SharedState == "down" && shB.Stats().SharedState == "down" })
	atKill := reads.Load()
	waitUntil(t, 10*time.Second, func() string { return "reads with the node down" },
		func() bool { return reads.Load() > atKill+200 })
	rc.start(ownerPort)
	rc.waitOK(ctx)
	waitUntil(t, 60*time.Second,
		func() string {
			return "both tiers back: A " + shA.Stats().SharedState + ", B " + shB.Stats().SharedState
		},
		func() bool { return shA.Stats().SharedState == "up" && shB.Stats().SharedState == "up" })
	stopRead.Store(true)
	wg.Wait()
	if f := failures.Load(); f != 0 {
		t.Fatalf("%d of %d reads failed or were wrong; first: %v", f, reads.Load(), firstErr)
	}
	stA, stB := shA.Stats(), shB.Stats()
	if stA.OriginErrors != 0 || stB.OriginErrors != 0 {
		t.Fatalf("origin errors: A %s; B %s", statsString(stA), statsString(stB))
	}
	t.Logf("%d reads, 0 errors; A: %d tier errors, %d transitions; B: %d tier errors, %d transitions",
		reads.Load(), stA.SharedErrors, stA.SharedTransitions, stB.SharedErrors, stB.SharedTransitions)

	// After the node is back the tier serves again: a new key read by A is
	// a hit for B.
	if n, err := read(dbA, 1); err != nil || n != 11 {
		t.Fatalf("A read %d, %v", n, err)
	}
}
