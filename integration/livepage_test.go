package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"image/png"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/sqlflight/sqlflight"
)

// screenshot makes TestLivePageBrowser write its screenshot to the
// guides' docs/live-page.png (go test ./integration -run LivePageBrowser
// -screenshot); without it the screenshot goes to the test's temporary
// directory, so that a test run leaves the checkout as it was.
var screenshot = flag.Bool("screenshot", false, "write the live page's screenshot to docs/live-page.png")

// hostileLabel is a literal that tries to leave every context the page
// puts SQL text in: script, element, attribute, template literal.
const hostileLabel = `</script><img src=x onerror=alert(1)>"` + "`"

// chromium returns the path of a headless-capable Chromium, or skips (or,
// when integration is required, fails) the test without one.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	unavailable(t, "Chromium", "no chromium on PATH (Debian: apt-get install chromium)")
	return ""
}

// TestLivePageBrowser loads sqlflight.Handler's page, mounted as docs/operations.md
// says, in headless Chromium, after a minute of load on PostgreSQL (by a
// clock the test moves, so the chart has a minute of history at once). The
// page's script must draw the chart and the tables from the JSON, list the
// top statement, show SQL and arguments that try to break out of the page
// as plain text (no dialog, no element of theirs, no script error), and
// the browser makes the screenshot of docs/operations.md.
func TestLivePageBrowser(t *testing.T) {
	dsn := postgresDSN(t)
	browser := chromium(t)
	ctx := testContext(t, testTimeout)
	admin := openRaw(t, dsn)
	table, _, _ := countedLookup(t, admin, "live", "(1, 'one'), (2, 'two'), (3, 'three')")
	clock := &stepClock{t: time.Now().Truncate(time.Second)}
	db, sh := openFlight(t, dsn, sqlflight.Options{Clock: clock})

	mux := http.NewServeMux()
	// The texts and arguments as they are: the hostile ones must show as text.
	live := sqlflight.HandlerWith(sh, sqlflight.LivePageOptions{ShowArguments: true})
	mux.Handle("/debug/sqlflight/", http.StripPrefix("/debug/sqlflight", live))
	srv := httptest.NewServer(mux) // loopback only
	t.Cleanup(srv.Close)
	pageURL := srv.URL + "/debug/sqlflight/"

	cached := fmt.Sprintf(`/* sqlflight: soft=10s hard=1m name=product_page */ SELECT id, label FROM %s WHERE id = $1`, table)
	plain := fmt.Sprintf(`SELECT label FROM %s WHERE id = $1 ORDER BY label`, table)
	// Cast, the literal stays in the statement's shape, which the page shows.
	hostile := fmt.Sprintf(`SELECT id FROM %s WHERE label <> '%s'::text AND label <> $1`, table, strings.ReplaceAll(hostileLabel, "'", "''"))
	write := fmt.Sprintf(`UPDATE %s SET label = label WHERE id = $1`, table)
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
	getJSON(t, pageURL+"json", nil) // the first sample
	for sec := range 60 {
		for i := range 20 + int(10*math.Sin(float64(sec)/6)) {
			read(cached, 1+i%3)
		}
		for i := range 4 {
			read(plain, 1+i%2)
		}
		if sec%15 == 7 { // a write: the cached statement misses again
			if _, err := db.ExecContext(ctx, write, 2); err != nil {
				t.Fatal(err)
			}
		}
		read(hostile, hostileLabel)
		read(hostile, hostileLabel)
		clock.add(time.Second)
		getJSON(t, pageURL+"json", nil) // a sample a second
	}
	var data struct {
		Statements []struct{ Fingerprint, SQL string }
	}
	getJSON(t, pageURL+"json", &data)
	if len(data.Statements) < 4 {
		t.Fatalf("statements %+v", data.Statements)
	}
	top := data.Statements[0].Fingerprint

	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser), chromedp.NoSandbox, chromedp.WindowSize(1280, 1200))...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(allocCtx)
	defer cancelBrowser()
	var dialogs, exceptions atomic.Int64
	var firstException atomic.Value
	var listeners sync.WaitGroup
	dialogEvents := chromedp.Events(bctx, page.JavascriptDialogOpening)
	exceptionEvents := chromedp.Events(bctx, runtime.ExceptionThrown)
	listeners.Go(func() {
		for _, err := range dialogEvents {
			if err != nil {
				return
			}
			dialogs.Add(1)
			_, _ = chromedp.Call(bctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{})
		}
	})
	listeners.Go(func() {
		for ev, err := range exceptionEvents {
			if err != nil {
				return
			}
			exceptions.Add(1)
			firstException.CompareAndSwap(nil, ev.ExceptionDetails.Text)
		}
	})
	defer listeners.Wait() // after cancelBrowser, which ends them
	defer cancelBrowser()

	wait := chromedp.WithPollingTimeout(20 * time.Second)
	if err := chromedp.Do(bctx,
		chromedp.Navigate(pageURL),
		chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
			_, err := chromedp.Poll[bool](`document.body.dataset.rendered > 0 && document.querySelectorAll("#chart polyline").length == 4`, wait)(ctx, t)
			return err
		}),
	); err != nil {
		t.Fatalf("the page did not render: %v", err)
	}
	type pageState struct {
		Statements, Advice, Breakers string
		Points, Imgs, Scripts        int
		Status                       string
	}
	got, err := chromedp.Run(bctx, chromedp.Evaluate[pageState](`({
		Statements: document.getElementById("statements").textContent,
		Advice: document.getElementById("advice").textContent,
		Breakers: document.getElementById("breakers").textContent,
		Points: Number(document.getElementById("chart").dataset.points),
		Imgs: document.querySelectorAll("img").length,
		Scripts: document.scripts.length,
		Status: document.getElementById("status").textContent,
	})`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got.Statements, top) || !strings.Contains(got.Statements, "product_page") {
		t.Errorf("the top statement %s is not listed: %q", top, got.Statements)
	}
	if !strings.Contains(got.Statements, hostileLabel) {
		t.Errorf("the hostile SQL is not shown as text: %q", got.Statements)
	}
	if got.Imgs != 0 || got.Scripts != 1 || dialogs.Load() != 0 {
		t.Errorf("the hostile SQL ran: %d img elements, %d scripts, %d dialogs", got.Imgs, got.Scripts, dialogs.Load())
	}
	if n := exceptions.Load(); n > 0 {
		t.Errorf("%d script errors on the page, the first: %v", n, firstException.Load())
	}
	if got.Points < 55 || got.Status != "live, every 2 s" {
		t.Errorf("chart of %d points, status %q", got.Points, got.Status)
	}
	if !strings.Contains(got.Advice, "sqlflight: soft=") || !strings.Contains(got.Breakers, "closed") {
		t.Errorf("advice %q, breakers %q", got.Advice, got.Breakers)
	}

	shot, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil || img.Bounds().Dx() < 1000 {
		t.Fatalf("screenshot: %v, %v", err, img)
	}
	out := filepath.Join(t.TempDir(), "live-page.png")
	if *screenshot {
		out = filepath.Join("..", "docs", "live-page.png")
	}
	if err := os.WriteFile(out, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s: %dx%d", out, img.Bounds().Dx(), img.Bounds().Dy())
}

// getJSON GETs url and decodes its JSON into v (if not nil).
func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	if v == nil {
		return
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}
