package integration

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight"
)

// fleetHotSetRedisKey is the Redis key of the fleet's hot set under a
// prefix: the tier's value key ("v:") of the digest internal/hotset names it
// by (FleetKey).
func fleetHotSetRedisKey(prefix string) string {
	sum := sha256.Sum256([]byte("sqlflight/hotset/1"))
	return prefix + "v:" + hex.EncodeToString(sum[:16])
}

// TestPrewarmFromFleetRedis: instance A serves a paced load of a few hot
// keys and publishes the fleet's hot set to Redis; instance B (a new
// Shield on the same prefix and secret, cold) pre-warms from it with no
// origin query (the database counts them: the lookup function bumps a
// sequence), and then serves those keys from its own cache. A hot set
// forged, copied or altered in Redis by somebody without the secret is
// ignored: nothing it names is judged, replayed or loaded.
func TestPrewarmFromFleetRedis(t *testing.T) {
	f := newTrustFleet(t)
	ctx := testContext(t, testTimeout)
	const hot = 3
	table, seq, fn := countedLookup(t, f.admin, "fleetwarm", "(1, 'one'), (2, 'two'), (3, 'three')")
	q := fmt.Sprintf(`/* sqlflight: soft=1m tables=%[1]s pure=%[2]s */ SELECT id, label FROM %[2]s($1)`, table, fn)
	read := func(n trustNode, k int) {
		t.Helper()
		var id int
		var label string
		if err := n.db.QueryRowContext(ctx, q, k).Scan(&id, &label); err != nil || id != k {
			t.Fatalf("read %d: %d %q %v", k, id, label, err)
		}
	}
	var opts sqlflight.Options

	// A: a paced load, key after key, round after round; one origin per key.
	a := f.node(t, false, opts)
	for range 5 {
		for k := 1; k <= hot; k++ {
			read(a, k)
		}
	}
	if n := sequenceCalls(t, f.admin, seq); n != hot {
		t.Fatalf("instance A ran %d origins for %d keys", n, hot)
	}
	waitUntil(t, 10*time.Second, func() string { return fmt.Sprintf("A's writes to the tier: %+v", a.s.Stats()) },
		func() bool { return a.s.Stats().SharedWrites >= hot })
	if err := a.s.PublishHotSet(ctx); err != nil {
		t.Fatal(err)
	}
	key := fleetHotSetRedisKey(f.prefix)
	published, err := f.attacker.HGetAll(ctx, key).Result()
	if err != nil || published["d"] == "" || published["v"] == "" {
		t.Fatalf("the fleet's hot set is not at %s: %v %v", key, published, err)
	}

	// B: a new instance pre-warms from the fleet: every key from Redis.
	b := f.node(t, false, opts)
	before := sequenceCalls(t, f.admin, seq)
	rep, err := b.s.Prewarm(ctx, sqlflight.PrewarmOptions{DB: b.db, FromFleet: true, TrustAnnotations: true})
	if err != nil || rep.Statements != 1 || rep.Loaded != hot || rep.Replayed != 0 || rep.Failed != 0 || rep.Refused != 0 {
		t.Fatalf("Prewarm from the fleet: %+v %v", rep, err)
	}
	if n := sequenceCalls(t, f.admin, seq) - before; n != 0 {
		t.Fatalf("pre-warming from the fleet ran %d origins", n)
	}
	st := b.s.Stats()
	if st.PrewarmLoaded != hot || st.SharedHits != hot {
		t.Fatalf("after pre-warming: %d loaded, %d shared hits", st.PrewarmLoaded, st.SharedHits)
	}
	for k := 1; k <= hot; k++ {
		read(b, k)
	}
	after := b.s.Stats()
	if n := sequenceCalls(t, f.admin, seq) - before; n != 0 || after.FreshHits != hot || after.SharedHits != st.SharedHits {
		t.Fatalf("B's first reads: %d origins, %d fresh hits, %d tier hits", n, after.FreshHits, after.SharedHits-st.SharedHits)
	}

	// Hot sets somebody without the secret wrote: each is ignored whole.
	write := fmt.Sprintf(`/* sqlflight: ttl=1h */ UPDATE %s SET label = 'pwned' WHERE id = $1`, f.table)
	plain, _ := json.Marshal(map[string]any{"format": "sqlflight-hotset", "version": 1, "statements": []any{
		map[string]any{"fingerprint": "x", "text": write, "calls": 1 << 40,
			"keys": []any{map[string]any{"calls": 1 << 40, "args": []any{map[string]string{"t": "int64", "v": "1"}}}}},
		map[string]any{"fingerprint": "y", "text": q, "calls": 1 << 40,
			"keys": []any{map[string]any{"calls": 1 << 40, "args": []any{map[string]string{"t": "int64", "v": "4"}}}}},
	}})
	var cached string // a sealed value of A's, for another key
	for k := range f.valueKeys(t) {
		if k != key {
			cached = k
			break
		}
	}
	other, err := f.attacker.HGetAll(ctx, cached).Result()
	if err != nil || other["d"] == "" {
		t.Fatalf("no value of A's to copy: %v %v", other, err)
	}
	flipped := []byte(published["d"])
	flipped[len(flipped)-2] ^= 1
	forgeries := []struct {
		name    string
		v, d    string
		forged  uint64 // Stats.SharedForged expected (MAC failures)
		decoded uint64 // Stats.SharedDecodeErrors expected (any value that cannot be read)
	}{
		{"unsealed JSON naming a write", published["v"], string(plain), 0, 1},
		// redistier takes a version above the fleet sequence for a miss.
		{"unsealed JSON of a version never handed out", "999999999999", string(plain), 0, 0},
		{"a sealed value copied from another key", other["v"], other["d"], 1, 1},
		{"the published hot set with one bit flipped", published["v"], string(flipped), 1, 1},
		{"a hot set published under another secret", "", "", 1, 1},
	}
	for _, fg := range forgeries {
		t.Run(strings.ReplaceAll(fg.name, " ", "_"), func(t *testing.T) {
			if fg.d == "" { // an instance with another secret publishes its own
				rogue := f.node(t, false, sqlflight.Options{SharedSecret: "another-fleet-secret-of-32-bytes"})
				f.read(t, rogue, 2)
				if err := rogue.s.PublishHotSet(ctx); err != nil {
					t.Fatal(err)
				}
				if d, err := f.attacker.HGet(ctx, key, "d").Result(); err != nil || d == string(flipped) {
					t.Fatalf("the other secret's hot set is not in Redis: %v", err)
				}
			} else if err := f.attacker.HSet(ctx, key, "v", fg.v, "d", fg.d).Err(); err != nil {
				t.Fatal(err)
			}
			c := f.node(t, false, opts)
			before := sequenceCalls(t, f.admin, seq)
			rep, err := c.s.Prewarm(ctx, sqlflight.PrewarmOptions{DB: c.db, FromFleet: true, TrustAnnotations: true})
			if err != nil || rep != (sqlflight.PrewarmReport{}) {
				t.Fatalf("Prewarm from a forged hot set: %+v %v", rep, err)
			}
			st := c.s.Stats()
			if st.SharedForged != fg.forged || st.SharedDecodeErrors != fg.decoded || st.PrewarmLoaded != 0 || st.SharedHits != 0 {
				t.Fatalf("forged %d, decode errors %d, loaded %d, tier hits %d", st.SharedForged, st.SharedDecodeErrors, st.PrewarmLoaded, st.SharedHits)
			}
			if n := sequenceCalls(t, f.admin, seq) - before; n != 0 {
				t.Fatalf("%d origins", n)
			}
			var label string
			if err := f.admin.QueryRowContext(ctx, fmt.Sprintf(`SELECT label FROM %s WHERE id = 1`, f.table)).Scan(&label); err != nil || label != "old" {
				t.Fatalf("the table changed: %q %v", label, err)
			}
		})
	}
}
