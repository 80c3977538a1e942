package integration

// WithScope (issue 15, item 1): a tenant put into the key for row-level
// security applications. Sessions that choose their tenant under its scope
// share with each other — coalesced and cached, in one process and through
// the shared tier — and never with another tenant's.

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight"
)

// TestTenantScopeSharesWithinTenant: sessions of two tenants under
// WithScope read the same statement in rounds: every read gets its own
// tenant's rows, and the reads of a tenant are answered from its cache.
func TestTenantScopeSharesWithinTenant(t *testing.T) {
	e := newRLSEnv(t, postgresDSN(t), "sql")
	forEachExecMode(t, e.dsn, func(t *testing.T, dsn string) {
		db, sh := openFlight(t, dsn)
		ctx := testContext(t, testTimeout)
		const perTenant = 3
		sessions := map[string][]*sql.Conn{}
		// Every session chooses its tenant first: a helper's call counts
		// as a write to every table, which would end cached reads.
		for i := range 2 * perTenant {
			tenant := []string{"a", "b"}[i%2]
			c := sqlConn(t, db)
			e.choose(t, sqlflight.WithScope(ctx, tenant), c, tenant, i)
			sessions[tenant] = append(sessions[tenant], c)
		}
		for round := range 3 {
			for _, tenant := range []string{"a", "b"} {
				tctx := sqlflight.WithScope(ctx, tenant)
				for _, c := range sessions[tenant] {
					if got := scalar[string](t, tctx, c, e.read()); got != e.want[tenant] {
						t.Errorf("round %d: tenant %s was served %q", round, tenant, got)
					}
				}
			}
		}
		st := sh.Stats()
		// Each tenant's first read fills its entry; its other 8 are hits.
		if st.OriginExecutions != 2 || st.FreshHits != 2*(3*perTenant-1) || st.BypassReasons["session"] != 0 {
			t.Errorf("the tenants' reads did not share within their tenant: %s fresh=%d", statsString(st), st.FreshHits)
		}
		// A session of tenant a reading under b's scope, or under none,
		// goes to the database and gets a's rows.
		c := sessions["a"][0]
		for _, rctx := range []context.Context{sqlflight.WithScope(ctx, "b"), ctx} {
			if got := scalar[string](t, rctx, c, e.read()); got != e.want["a"] {
				t.Errorf("a session of a read %q outside its scope", got)
			}
		}
		if got := sh.Stats().BypassReasons["session"]; got != 2 {
			t.Errorf("reads outside the session's scope: %d bypassed, want 2", got)
		}
	})
}

// TestTenantScopeCoalesces: a herd of each tenant's sessions reaches the
// database once per tenant (counted by the database), and each caller gets
// its own tenant's rows.
func TestTenantScopeCoalesces(t *testing.T) {
	base := postgresDSN(t)
	e := newRLSEnv(t, base, "plpgsql")
	g := newStableGate(t, e, base)
	db, sh := openFlight(t, e.dsn)
	ctx := testContext(t, testTimeout)
	read := fmt.Sprintf(`SELECT %s() AS g, coalesce(string_agg(item, ',' ORDER BY id), '') FROM %s`, g.fn, e.table)
	const perTenant = 6
	type caller struct {
		tenant string
		ctx    context.Context
		c      *sql.Conn
	}
	var callers []caller
	for _, tenant := range []string{"a", "b"} {
		tctx := sqlflight.WithScope(ctx, tenant)
		for range perTenant {
			c := sqlConn(t, db)
			e.choose(t, tctx, c, tenant, 1)
			callers = append(callers, caller{tenant, tctx, c})
		}
	}
	before := sh.Stats()
	g.close(t)
	var wg sync.WaitGroup
	got := make([]string, len(callers))
	for i, cl := range callers {
		wg.Go(func() {
			var one int
			if err := cl.c.QueryRowContext(cl.ctx, read).Scan(&one, &got[i]); err != nil {
				t.Errorf("tenant %s: %v", cl.tenant, err)
			}
		})
	}
	waitUntil(t, 30*time.Second, func() string { return "every caller in its tenant's flight: " + statsString(sh.Stats()) }, func() bool {
		st := sh.Stats()
		return st.Followers-before.Followers == 2*(perTenant-1) && gateWaiters(t, e.admin, g) == 2
	})
	g.open(t)
	wg.Wait()
	for i, cl := range callers {
		if got[i] != e.want[cl.tenant] {
			t.Errorf("a caller of tenant %s was served %q", cl.tenant, got[i])
		}
	}
	if n := g.calls(t, e.admin); n != 2 {
		t.Errorf("the database ran the read %d times for two tenants' herds, want 2", n)
	}
}

// newStableGate is a gate (see gate) whose function is STABLE, so that a
// read calling it is coalesced; the tenant role may call it.
func newStableGate(t *testing.T, e *rlsEnv, dsn string) *gate {
	t.Helper()
	g := &gate{fn: e.schema + ".gate", seq: e.schema + ".gate_seq", dsn: dsn}
	g.key = advisoryKey(g.fn)
	mustExec(t, e.admin,
		fmt.Sprintf(`CREATE SEQUENCE %s`, g.seq),
		fmt.Sprintf(`CREATE FUNCTION %s() RETURNS int LANGUAGE plpgsql STABLE SECURITY DEFINER AS $fn$
BEGIN
	PERFORM nextval('%s');
	PERFORM pg_advisory_xact_lock_shared(%d);
	RETURN 1;
END
$fn$`, g.fn, g.seq, g.key))
	t.Cleanup(func() { g.open(t) })
	return g
}

// gateWaiters counts the backends waiting at g.
func gateWaiters(t *testing.T, admin *sql.DB, g *gate) int {
	t.Helper()
	var n int
	if err := admin.QueryRow(`SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
		AND ((classid::bigint << 32) | objid::bigint) = $1`, g.key).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestTenantScopeAcrossTheTier: a tenant's result filled by one instance
// answers the same tenant's sessions on another; the other tenant's
// sessions there still get their own rows.
func TestTenantScopeAcrossTheTier(t *testing.T) {
	e := newRLSEnv(t, postgresDSN(t), "sql")
	a, as, b, bs := openTierPair(t, e.dsn)
	ctx := testContext(t, testTimeout)
	inA, inB := sqlflight.WithScope(ctx, "a"), sqlflight.WithScope(ctx, "b")
	onA, onBa, onBb := sqlConn(t, a), sqlConn(t, b), sqlConn(t, b)
	e.choose(t, inA, onA, "a", 0)
	e.choose(t, inA, onBa, "a", 1)
	e.choose(t, inB, onBb, "b", 0)
	if got := scalar[string](t, inA, onA, e.read()); got != e.want["a"] {
		t.Fatalf("instance A, tenant a: %q", got)
	}
	waitUntil(t, 30*time.Second, func() string { return "a shared hit on B: " + statsString(bs.Stats()) }, func() bool {
		if got := scalar[string](t, inA, onBa, e.read()); got != e.want["a"] {
			t.Fatalf("instance B, tenant a: %q", got)
		}
		return bs.Stats().SharedHits > 0
	})
	for range 3 {
		if got := scalar[string](t, inB, onBb, e.read()); got != e.want["b"] {
			t.Errorf("instance B, tenant b was served %q; A: %s; B: %s", got, statsString(as.Stats()), statsString(bs.Stats()))
		}
	}
}
