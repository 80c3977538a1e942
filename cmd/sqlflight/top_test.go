package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"modernc.org/sqlite"

	"github.com/sqlflight/sqlflight"
)

// TestTopOnce: sqlflight top -once prints the live page of a real Shield
// (on SQLite) served by sqlflight.Handler: the top statement, the split of
// its calls, the advisor, and text from the application without its
// terminal escapes.
func TestTopOnce(t *testing.T) {
	ctx := context.Background()
	db := sqlflight.OpenDB(dsnConnector{drv: &sqlite.Driver{}, dsn: filepath.Join(t.TempDir(), "top.db")})
	sh := sqlflight.ShieldOf(db)
	t.Cleanup(func() {
		db.Close()
		sh.Close()
	})
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := db.ExecContext(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	read := func(q string, args ...any) {
		t.Helper()
		rows, err := db.QueryContext(ctx, q, args...)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		for rows.Next() {
		}
		if err := rows.Close(); err != nil {
			t.Fatal(err)
		}
	}
	exec(`CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT NOT NULL)`)
	exec(`INSERT INTO products VALUES (1, 'grinder'), (2, 'kettle')`)
	cached := `/* sqlflight: ttl=1m name=product_page */ SELECT id, name FROM products WHERE id = ?`
	plain := `SELECT name FROM products WHERE id = ? ORDER BY name`
	// Cast, its literal stays in the statement's shape, which top shows.
	hostile := "SELECT id FROM products WHERE name <> CAST('\x1b]0;pwned\x07\x1b[2J' AS TEXT) AND id = ?"
	for i := range 30 {
		read(cached, 1+i%2)
	}
	for range 5 {
		read(plain, 1)
		read(hostile, 1)
	}

	mux := http.NewServeMux()
	// The texts as they are: the hostile literal must reach top, and be defused there.
	live := sqlflight.HandlerWith(sh, sqlflight.LivePageOptions{ShowArguments: true})
	mux.Handle("/debug/sqlflight/", http.StripPrefix("/debug/sqlflight", live))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	var out, errOut bytes.Buffer
	code := run(ctx, []string{"top", "-once", "-n", "5", "-url", srv.URL + "/debug/sqlflight/"}, &out, &errOut)
	text := out.String()
	if code != exitOK {
		t.Fatalf("exit %d: %s%s", code, text, errOut.String())
	}
	fp := sh.Explain(ctx, cached).Fingerprint
	for _, want := range []string{"queries 42", "Top statements by database time (5 of 5)", fp + " product_page [soft=1m hard=1m]",
		"SELECT id, name FROM products WHERE id = ?", "Advisor", "/* sqlflight: soft=", "breaker closed"} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	if strings.ContainsAny(text, "\x1b\x07") || !strings.Contains(text, "\uFFFD]0;pwned\uFFFD\uFFFD[2J") {
		t.Errorf("terminal escapes from the SQL reach the terminal:\n%q", text)
	}
}

// TestTopUsage: bad flags are usage errors; a server that does not answer
// fails -once.
func TestTopUsage(t *testing.T) {
	notFound := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(notFound.Close)
	for _, c := range []struct {
		args     []string
		code     int
		contains string
	}{
		{[]string{"top"}, exitUsage, "-url is required"},
		{[]string{"top", "-url", "ftp://x"}, exitUsage, "http:// or https://"},
		{[]string{"top", "-url", "http://x", "-interval", "0"}, exitUsage, "-interval must be positive"},
		{[]string{"top", "-url", "http://x", "-n", "0"}, exitUsage, "-n must be from 1 to 256"},
		{[]string{"top", "-h"}, exitOK, "-once"},
		{[]string{"top", "-once", "-url", notFound.URL}, exitFailure, "404"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), c.args, &stdout, &stderr)
		if out := stdout.String() + stderr.String(); code != c.code || !strings.Contains(out, c.contains) {
			t.Errorf("sqlflight %q: exit %d, want %d; output %q should contain %q", c.args, code, c.code, out, c.contains)
		}
	}
}

// TestTopRefreshes: without -once, top clears the screen and prints again
// every -interval until its context ends, and then exits 0.
func TestTopRefreshes(t *testing.T) {
	sh := sqlflight.New()
	t.Cleanup(func() { sh.Close() })
	var requests atomic.Int64
	h := sqlflight.Handler(sh)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut bytes.Buffer
	done := make(chan int)
	go func() { done <- run(ctx, []string{"top", "-interval", "1ms", "-url", srv.URL}, &out, &errOut) }()
	for requests.Load() < 3 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if code := <-done; code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if n := strings.Count(out.String(), "\x1b[H\x1b[2J"); n < 3 || !strings.Contains(out.String(), "no suggestion") {
		t.Errorf("%d screens:\n%q", n, out.String())
	}
}
