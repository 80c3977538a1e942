package sqlflight_test

import (
	"net/http"
	"time"

	"github.com/sqlflight/sqlflight"
)

// Mount the live page on the application's debug listener, next to
// net/http/pprof: the page at /debug/sqlflight/, its JSON at
// /debug/sqlflight/json. It shows SQL texts, with arguments and literals
// as keyed hashes (LivePageOptions.ShowArguments shows their values):
// keep the listener private. (Compiled, not run.)
func ExampleHandler() {
	shield := sqlflight.New()
	defer shield.Close()
	mux := http.NewServeMux()
	mux.Handle("/debug/sqlflight/", http.StripPrefix("/debug/sqlflight", sqlflight.Handler(shield)))
	srv := &http.Server{Addr: "127.0.0.1:6060", Handler: mux, // loopback: a private listener
		ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second}
	go srv.ListenAndServe()
}
