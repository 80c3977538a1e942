package sqlflight

import (
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqlflight/sqlflight/internal/dsnparam"
)

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
			_ = e.s.shield.Close()
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

// Passwords that make a URL unparsable ('/', a bad escape) or ambiguous
// ('@', ':') never appear in an error's text.
var awkwardPasswords = []string{"pa/ss-w0rd", "pa%zzss-w0rd", "p@ss-w0rd", "pa:ss-w0rd", "p@s/s:%zz-w0rd", "se cret-w0rd"}

// TestBadSharedURLHidesPassword: a sqlflight.shared URL with an awkward
// password fails the open without showing the password.
func TestBadSharedURLHidesPassword(t *testing.T) {
	d := New().Wrap(&fakeDriver{})
	for _, pw := range awkwardPasswords {
		for _, dsn := range []string{
			"db=1 sqlflight.shared=redis://user:" + pw + "@cache:6379/0",
			"postgres://app@db/app?sqlflight.shared=" + url.QueryEscape("redis://user:"+pw+"@cache:6379/0"),
			"db=1 sqlflight.shared=memtest://user:" + pw + "@cache:6379/0 sqlflight.max_inflight=zero",
		} {
			_, err := d.Open(dsn)
			if !errors.Is(err, ErrBadDSN) {
				t.Fatalf("%q: %v", dsn, err)
			}
			if strings.Contains(err.Error(), "w0rd") {
				t.Errorf("the error shows the password: %v", err)
			}
		}
	}
}

// TestSecretParameterValuesAreNotShown: a malformed parameter whose name
// speaks of a secret or a password is named, its value never shown.
func TestSecretParameterValuesAreNotShown(t *testing.T) {
	for _, k := range []string{"shared_secret", "shared_secret_previous", "redis_password", "Shared_Secret"} {
		err := dsnparam.Malformed(k, "hunter2-value", errors.New(`invalid byte "hunter2-value"`))
		if !errors.Is(err, ErrBadDSN) || strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), k) {
			t.Errorf("%s: %v", k, err)
		}
	}
	if err := dsnparam.Malformed("max_bytes", "lots", errors.New("not a size")); !strings.Contains(err.Error(), "max_bytes=lots") {
		t.Errorf("an ordinary parameter's value is not shown: %v", err)
	}
	var o Options
	if err := applyDSN(&o, map[string]string{"shared_secretx": "hunter2-value"}); !errors.Is(err, ErrBadDSN) || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("%v", err)
	}
}

// TestApplyDSN: parameters set their Options fields; unknown or malformed
// ones are ErrBadDSN.
func TestApplyDSN(t *testing.T) {
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
