package integration

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/redis/go-redis/v9"

	"github.com/sqlflight/sqlflight"
	"github.com/sqlflight/sqlflight/redistier"
)

// TestLivePageBrowserHidesValues loads the default live page
// (sqlflight.Handler, no options) of a Shield whose Redis tier is trusted
// without a secret in headless Chromium, after reads on PostgreSQL with a
// session token as argument and an e-mail address as literal. Once the
// page's script has drawn it, neither value is anywhere on the page (their
// keyed hashes are), and the warning about the trusted tier is visible.
func TestLivePageBrowserHidesValues(t *testing.T) {
	dsn := postgresDSN(t)
	addr := redisAddr(t)
	browser := chromium(t)
	ctx := testContext(t, testTimeout)
	admin := openRaw(t, dsn)
	table, _, _ := countedLookup(t, admin, "liveargs", "(1, 'one'), (2, 'two')")
	id := uniqueID(t)
	token, email := "tok-"+id+"-dave", "erin-"+id+"@example.com"

	prefix := "sqlflight-liveargs:" + id + ":"
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: 1})
	sh := sqlflight.New(sqlflight.Options{InsecureTrustSharedTier: true, KeyPrefix: prefix,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, sqlflight.Shared(redistier.New(rdb)))
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(sh.SharedConnector(stdlib.GetConnector(*cfg), "liveargs-"+id))
	t.Cleanup(func() {
		_ = db.Close()
		_ = sh.Close()
		_ = rdb.Close()
		flushRedisPrefix(t, addr, prefix)
	})
	// Cast, the literal stays in the statement's shape, which the page shows.
	q := fmt.Sprintf(`/* sqlflight: soft=10s hard=1m */ SELECT id FROM %s WHERE label <> $1 AND label <> '%s'::text`, table, email)
	for range 3 {
		rows, err := db.QueryContext(ctx, q, token)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
		}
		if err := rows.Close(); err != nil {
			t.Fatal(err)
		}
	}

	mux := http.NewServeMux()
	mux.Handle("/debug/sqlflight/", http.StripPrefix("/debug/sqlflight", sqlflight.Handler(sh)))
	srv := httptest.NewServer(mux) // loopback only
	t.Cleanup(srv.Close)
	var data struct {
		Stats struct{ SharedTrusted bool }
	}
	getJSON(t, srv.URL+"/debug/sqlflight/json", &data)
	if !data.Stats.SharedTrusted {
		t.Fatal("the JSON's stats.SharedTrusted is false for a tier trusted without a secret")
	}

	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser), chromedp.NoSandbox, chromedp.WindowSize(1280, 900))...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(allocCtx)
	defer cancelBrowser()
	wait := chromedp.WithPollingTimeout(20 * time.Second)
	if err := chromedp.Do(bctx,
		chromedp.Navigate(srv.URL+"/debug/sqlflight/"),
		chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
			_, err := chromedp.Poll[bool](`document.body.dataset.rendered > 0`, wait)(ctx, t)
			return err
		}),
	); err != nil {
		t.Fatalf("the page did not render: %v", err)
	}
	type pageState struct {
		Text, Statements, Shared, Warning string
		WarningShown                      bool
	}
	got, err := chromedp.Run(bctx, chromedp.Evaluate[pageState](`(() => {
		const w = document.getElementById("trusted");
		return {
			Text: document.documentElement.outerHTML + document.body.innerText,
			Statements: document.getElementById("statements").textContent,
			Shared: document.getElementById("s-shared").textContent,
			Warning: w.innerText,
			WarningShown: !w.hidden && getComputedStyle(w).display !== "none" && w.getBoundingClientRect().height > 0,
		};
	})()`))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{token, email, id + "-dave", "erin-" + id} {
		if strings.Contains(got.Text, v) {
			t.Errorf("the page shows %q", v)
		}
	}
	hashed := regexp.MustCompile(`WHERE label <> \$1 AND label <> '#[0-9a-f]{12}'::text`)
	if !hashed.MatchString(got.Statements) || !regexp.MustCompile(`hot keys: \(#[0-9a-f]{12}\) ×`).MatchString(got.Statements) {
		t.Errorf("the statement's literal and argument are not shown as hashes: %q", got.Statements)
	}
	if !got.WarningShown || !strings.Contains(got.Warning, "trusted without a secret") ||
		!strings.Contains(got.Shared, "trusted without a secret") {
		t.Errorf("the trusted tier's warning is not shown: shown %v, %q, shared tier %q", got.WarningShown, got.Warning, got.Shared)
	}
}
