package sqlflight

import (
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

func TestSplitDSN(t *testing.T) {
	for _, tc := range []struct{ in, out string }{
		{"postgres://u@h/db?sslmode=disable&sqlflight.max_bytes=128MiB&sqlflight.max_inflight=32", "postgres://u@h/db?sslmode=disable"},
		{"host=h dbname=db sqlflight.max_inflight=32 sslmode=disable", "host=h dbname=db sslmode=disable"},
		{"postgres://u@h/db", "postgres://u@h/db"},
	} {
		out, params, err := splitDSN(tc.in)
		if err != nil || out != tc.out {
			t.Errorf("%s → %q %v", tc.in, out, err)
		}
		if tc.in != tc.out && params["max_inflight"] != "32" {
			t.Errorf("%s: params %v", tc.in, params)
		}
	}
	var o Options
	err := applyDSN(&o, map[string]string{"max_bytes": "128MiB", "max_inflight": "32", "default": "soft=30s,hard=5m", "queue_timeout": "250ms"})
	if err != nil || o.MaxBytes != 128<<20 || o.MaxInflight != 32 || o.Default.Soft != 30*time.Second || o.Default.Hard != 5*time.Minute || o.QueueTimeout != 250*time.Millisecond {
		t.Fatalf("%+v %v", o, err)
	}
	for _, bad := range []map[string]string{{"max_byts": "1"}, {"max_bytes": "lots"}, {"max_inflight": "0"}, {"default": "sfot=1s"}} {
		if err := applyDSN(&o, bad); !errors.Is(err, ErrBadDSN) {
			t.Errorf("%v: %v", bad, err)
		}
	}
}

// dsnDriver records the DSNs its Open receives.
type dsnDriver struct {
	fakeDriver
	mu   sync.Mutex
	dsns []string
}

func (d *dsnDriver) Open(dsn string) (driver.Conn, error) {
	d.mu.Lock()
	d.dsns = append(d.dsns, dsn)
	d.mu.Unlock()
	return d.fakeDriver.Open(dsn)
}

func TestDSNParametersConfigureAndAreStripped(t *testing.T) {
	d := &dsnDriver{}
	name := fmt.Sprintf("sqlflight-dsn-test-%d", fakeSeq.Add(1)) // sql.Register panics on a repeat
	Register(name, d)
	db, err := sql.Open(name, "fake sqlflight.default=ttl=1m")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	defer func() { // the DSN's own Shield lives as long as the driver: close its cache
		w := db.Driver().(*wrappedDriver)
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, e := range w.scopes {
			_ = e.s.Close()
		}
	}()
	for range 3 {
		if err := db.QueryRow(pointQuery, 1).Scan(new(int64)); err != nil {
			t.Fatal(err)
		}
	}
	if q := d.queries.Load(); q != 1 {
		t.Errorf("the DSN's default policy did not cache: %d queries", q)
	}
	d.mu.Lock()
	for _, dsn := range d.dsns {
		if dsn != "fake" {
			t.Errorf("the parent saw %q", dsn)
		}
	}
	d.mu.Unlock()
	bad, err := sql.Open(name, "fake sqlflight.nonsense=1")
	if err != nil {
		t.Fatal(err) // without DriverContext, database/sql opens lazily
	}
	defer bad.Close()
	if err := bad.Ping(); !errors.Is(err, ErrBadDSN) {
		t.Fatalf("unknown parameter: %v", err)
	}
}
