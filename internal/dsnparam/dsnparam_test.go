package dsnparam_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/sqlflight/sqlflight/internal/dsnparam"
)

func TestSplitDSN(t *testing.T) {
	for _, tc := range []struct{ in, out string }{
		{"postgres://u@h/db?sslmode=disable&sqlflight.max_bytes=128MiB&sqlflight.max_inflight=32", "postgres://u@h/db?sslmode=disable"},
		{"host=h dbname=db sqlflight.max_inflight=32 sslmode=disable", "host=h dbname=db sslmode=disable"},
		{"postgres://u@h/db", "postgres://u@h/db"},
		// URLs url.Parse refuses, which pgx accepts: several hosts, a '/' in
		// the password. Nothing of sqlflight's reaches the parent; the rest
		// is kept byte for byte.
		{"postgres://u@h1:5432,h2:5433/db?sqlflight.max_inflight=32&target_session_attrs=read-write", "postgres://u@h1:5432,h2:5433/db?target_session_attrs=read-write"},
		{"postgresql://u:pa/ss@h/db?sqlflight.shared_secret=s3cr%2Ft&sqlflight.max_inflight=32", "postgresql://u:pa/ss@h/db"},
		{"postgres://u@h/db?a=%7A&sqlflight.max_inflight=32&b#frag", "postgres://u@h/db?a=%7A&b#frag"},
	} {
		out, params, err := dsnparam.Split(tc.in)
		if err != nil || out != tc.out {
			t.Errorf("%s → %q %v", tc.in, out, err)
		}
		if tc.in != tc.out && params["max_inflight"] != "32" {
			t.Errorf("%s: params %v", tc.in, params)
		}
	}
	// Keyword/value settings as libpq reads them: a quoted value may hold
	// spaces and escaped quotes; none of it reaches the parent.
	for _, tc := range []struct{ in, out, secret string }{
		{`host=h sqlflight.shared_secret='top secret half' dbname=db`, "host=h dbname=db", "top secret half"},
		{`host=h sqlflight.shared_secret = 'it\'s a \\secret'  password='p w'`, "host=h password='p w'", `it's a \secret`},
		{`sqlflight.shared_secret=bare\ escaped host=h`, "host=h", "bare escaped"},
	} {
		out, params, err := dsnparam.Split(tc.in)
		if err != nil || out != tc.out || params["shared_secret"] != tc.secret {
			t.Errorf("%s → %q %q %v", tc.in, out, params["shared_secret"], err)
		}
	}
	for _, bad := range []string{`host=h sqlflight.shared_secret='unterminated hidden`, `host=h sqlflight.shared_secret = 'hidden`} {
		if _, _, err := dsnparam.Split(bad); !errors.Is(err, dsnparam.ErrBad) || strings.Contains(err.Error(), "hidden") {
			t.Errorf("%s: %v", bad, err)
		}
	}
	if _, params, _ := dsnparam.Split("postgresql://u:pa/ss@h/db?sqlflight.shared_secret=s3cr%2Ft"); params["shared_secret"] != "s3cr/t" {
		t.Errorf("the secret was not unescaped: %q", params["shared_secret"])
	}
	if _, _, err := dsnparam.Split("postgres://u@h/db?sqlflight.shared_secret=%zzhidden"); !errors.Is(err, dsnparam.ErrBad) || strings.Contains(err.Error(), "hidden") {
		t.Errorf("a malformed escape: %v", err)
	}
}

// testSecretDSN is a fleet secret as a DSN may carry it.
const testSecretDSN = "a-test-fleet-secret-of-32-bytes."

// awkwardPasswords are passwords that break a naive URL parse or
// redaction.
var awkwardPasswords = []string{"pa/ss-w0rd", "pa%zzss-w0rd", "p@ss-w0rd", "pa:ss-w0rd", "p@s/s:%zz-w0rd", "se cret-w0rd"}

func TestRedactURL(t *testing.T) {
	for _, pw := range awkwardPasswords {
		for _, u := range []string{
			"redis://user:" + pw + "@cache:6379/0",
			"rediss://:" + pw + "@cache:6379/0",
			"redis://user:" + pw + "@cache:6379/0?dial_timeout=1s",
			"redis:user:" + pw + "@cache:6379",
			"user:" + pw + "@cache:6379",
		} {
			got := dsnparam.RedactURL(u)
			if strings.Contains(got, pw) || strings.Contains(got, "w0rd") {
				t.Errorf("dsnparam.RedactURL(%q) = %q", u, got)
			}
			if msg := dsnparam.RedactIn("cannot open "+u+": bad password "+pw, u); strings.Contains(msg, "w0rd") {
				t.Errorf("redactIn: %q", msg)
			}
		}
	}
	for _, plain := range []string{"redis://cache:6379/0", "redis://user@cache:6379/0", "nope://x"} {
		if got := dsnparam.RedactURL(plain); got != plain {
			t.Errorf("dsnparam.RedactURL(%q) = %q: nothing to hide", plain, got)
		}
	}
	if got := dsnparam.RedactURL("redis://u:secret@h:1/0"); got != "redis://u:xxxxx@h:1/0" {
		t.Errorf("%q", got)
	}
}

// TestRepeatedDSNKeysAreRefused: which of two values was meant is never
// guessed.
func TestRepeatedDSNKeysAreRefused(t *testing.T) {
	for _, dsn := range []string{
		"db=1 sqlflight.max_bytes=1MiB sqlflight.max_bytes=2MiB",
		"db=1 sqlflight.shared_secret=" + testSecretDSN + " sqlflight.shared_secret=",
		"postgres://h/db?sqlflight.strict=true&sqlflight.strict=false",
		"postgres://h/db?sqlflight.shared_secret=a&sqlflight%2Eshared_secret=b",
	} {
		_, _, err := dsnparam.Split(dsn)
		if !errors.Is(err, dsnparam.ErrBad) || !strings.Contains(err.Error(), "more than once") {
			t.Errorf("%s: %v; want dsnparam.ErrBad", dsn, err)
		}
	}
}
