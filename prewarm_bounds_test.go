package sqlflight

import (
	"bytes"
	"context"
	"database/sql/driver"
	"strings"
	"testing"

	"github.com/sqlflight/sqlflight/internal/hotset"
)

// TestPrewarmClampsHotSetLimits: a hot set whose text raises maxrows= and
// maxbytes= above the Options does not lift them: a result over
// Options.MaxResultRows is not cached by Prewarm, and the next read goes
// to the database again.
func TestPrewarmClampsHotSetLimits(t *testing.T) {
	d := &fakeDriver{onQuery: func(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
		return &fakeRows{cols: []string{"n"}, rows: [][]driver.Value{{int64(1)}, {int64(2)}, {int64(3)}}}, nil
	}}
	db, s := openWarm(t, d, Options{MaxResultRows: 2})
	hs := `{"format": "sqlflight-hotset", "version": 1, "statements": [
	 {"fingerprint": "x", "text": "/* sqlflight: ttl=1m maxrows=1000000 maxbytes=400MiB timeout=1h */ SELECT n FROM products WHERE a = $1",
	  "calls": 9, "keys": [{"calls": 9, "args": [{"t": "int64", "v": "7"}]}]}]}`
	rep, err := s.Prewarm(context.Background(), PrewarmOptions{DB: db, From: strings.NewReader(hs), TrustFile: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Replayed != 0 || rep.Statements != 1 {
		t.Fatalf("a result over Options.MaxResultRows was cached by Prewarm: %+v", rep)
	}
	before := d.queries.Load()
	rows, err := db.Query("/* sqlflight: ttl=1m */ SELECT n FROM products WHERE a = $1", int64(7))
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
	}
	rows.Close()
	if d.queries.Load() == before {
		t.Fatal("the key was served from a cache entry over Options.MaxResultRows")
	}
}

// TestPublishHotSetEncrypts: the fleet's hot set in the tier is encrypted
// even without SharedEncrypt: no argument value is in clear.
func TestPublishHotSetEncrypts(t *testing.T) {
	tier := newMemTier(newFakeClock())
	f := fleetOf(t, 1, tier, Options{})
	const token = "tok-9f8e7d6c5b4a"
	readShared(t, f[0], ttlQuery, 3)
	if _, err := f[0].db.Query("/* sqlflight: ttl=1m */ SELECT n FROM sessions WHERE token = $1", token); err != nil {
		t.Fatal(err)
	}
	if err := f[0].s.PublishHotSet(context.Background()); err != nil {
		t.Fatal(err)
	}
	found := false
	tier.mu.Lock()
	for k, v := range tier.vals {
		if strings.HasSuffix(k, hotset.FleetKey) {
			found = true
			if bytes.Contains(v.data, []byte(token)) || bytes.Contains(v.data, []byte("sqlflight-hotset")) {
				t.Errorf("the fleet's hot set is in clear in the tier")
			}
		}
	}
	tier.mu.Unlock()
	if !found {
		t.Fatal("no hot set published")
	}
}
