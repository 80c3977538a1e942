package integration

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/sqlflight/sqlflight"
)

// TestPrewarmRefusesUnsealedHotSet: an application whose Shields share a
// fleet secret pre-warms from a file, trusting the annotations of its own
// (sealed) hot sets. A file an attacker wrote — unsealed, sealed under
// another secret, or the application's own with its statement rewritten or
// its seal removed — is refused with ErrHotSetUnsealed, and its statements
// never run: the counting function's sequence, which the database keeps,
// does not move, and the Shield ran no origin query at all (the attacker's
// `SELECT rolname, rolpassword FROM pg_authid` included). The
// application's own sealed file is replayed, and the same counting
// statement then runs once per key.
func TestPrewarmRefusesUnsealedHotSet(t *testing.T) {
	dsn := postgresDSN(t)
	admin := openRaw(t, dsn)
	ctx := testContext(t, testTimeout)
	secret := "fleet-" + uniqueID(t) + "-0123456789abcdef"
	table, seq, fn := countedLookup(t, admin, "sealed", "(1, 'one'), (2, 'two')")
	q := fmt.Sprintf(`/* sqlflight: ttl=5m tables=%[1]s pure=%[2]s */ SELECT id, label FROM %[2]s($1)`, table, fn)

	// The application's own hot set, sealed under the fleet secret.
	old, a := openFlight(t, dsn, sqlflight.Options{SharedSecret: secret})
	for k := 1; k <= 2; k++ {
		for range 2 {
			var id int
			var label string
			if err := old.QueryRowContext(ctx, q, k).Scan(&id, &label); err != nil {
				t.Fatal(err)
			}
		}
	}
	var sealed bytes.Buffer
	if err := a.SaveHotSet(&sealed); err != nil {
		t.Fatal(err)
	}
	var env struct {
		MAC    string          `json:"mac"`
		HotSet json.RawMessage `json:"hotset"`
	}
	if err := json.Unmarshal(sealed.Bytes(), &env); err != nil || env.MAC == "" {
		t.Fatalf("not sealed: %v\n%s", err, sealed.Bytes())
	}

	// The attacker's statements: the counting one, and the password hashes.
	key := []any{map[string]any{"calls": 1000, "args": []any{map[string]string{"t": "int64", "v": "1"}}}}
	hostile, _ := json.Marshal(map[string]any{"format": "sqlflight-hotset", "version": 1, "statements": []any{
		map[string]any{"fingerprint": "x", "text": "/* sqlflight: ttl=1h */ SELECT rolname, rolpassword FROM pg_authid WHERE $1 > 0", "calls": 1000, "keys": key},
		map[string]any{"fingerprint": "y", "text": fmt.Sprintf(`/* sqlflight: ttl=1h pure=%[1]s */ SELECT id, label FROM %[1]s($1)`, fn), "calls": 1000, "keys": key},
	}})
	forged, _ := json.Marshal(map[string]any{"format": "sqlflight-hotset-sealed", "version": 1,
		"mac": env.MAC, "hotset": json.RawMessage(hostile)})
	rewritten := bytes.Replace(sealed.Bytes(), []byte(fmt.Sprintf("SELECT id, label FROM %s($1)", fn)),
		[]byte("SELECT rolname, rolpassword FROM pg_authid WHERE $1 > 0"), 1)
	stripped := bytes.Replace(sealed.Bytes(), []byte(fmt.Sprintf(`"mac": %q,`, env.MAC)), nil, 1)
	if bytes.Equal(rewritten, sealed.Bytes()) || bytes.Equal(stripped, sealed.Bytes()) {
		t.Fatal("the sealed hot set does not hold what the test rewrites")
	}

	db, b := openFlight(t, dsn, sqlflight.Options{SharedSecret: secret})
	before := sequenceCalls(t, admin, seq)
	for _, c := range []struct {
		what string
		data []byte
	}{
		{"the attacker's unsealed file", hostile},
		{"the attacker's file under another hot set's seal", forged},
		{"the application's file, its statement rewritten", rewritten},
		{"the application's file, its seal removed", stripped},
		{"the application's inner hot set alone", env.HotSet},
	} {
		rep, err := b.Prewarm(ctx, sqlflight.PrewarmOptions{DB: db, From: bytes.NewReader(c.data), TrustAnnotations: true})
		if !errors.Is(err, sqlflight.ErrHotSetUnsealed) || rep != (sqlflight.PrewarmReport{}) {
			t.Errorf("%s: %+v %v, want ErrHotSetUnsealed", c.what, rep, err)
		}
	}
	if n := sequenceCalls(t, admin, seq) - before; n != 0 {
		t.Fatalf("a refused hot set ran the counting function %d times", n)
	}
	if st := b.Stats(); st.OriginExecutions != 0 {
		t.Fatalf("refused hot sets ran %d origin queries", st.OriginExecutions)
	}

	// The application's own sealed file is replayed: the same statement
	// runs, once per key.
	rep, err := b.Prewarm(ctx, sqlflight.PrewarmOptions{DB: db, From: bytes.NewReader(sealed.Bytes()), TrustAnnotations: true})
	if err != nil || rep.Replayed != 2 || rep.Failed != 0 {
		t.Fatalf("the sealed hot set: %+v %v", rep, err)
	}
	if n := sequenceCalls(t, admin, seq) - before; n != 2 {
		t.Fatalf("the sealed hot set ran the counting function %d times, want 2", n)
	}
	t.Logf("5 tampered or foreign hot sets refused with 0 executions of their statements; the sealed one replayed %d keys", rep.Replayed)
}
