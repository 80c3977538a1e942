package prom_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sqlflight/sqlflight"
	"github.com/sqlflight/sqlflight/prom"
	"modernc.org/sqlite"
)

// The collector reads a Shield's Stats at every scrape. Register it with the
// registry your /metrics handler serves (promhttp.HandlerFor); here the
// registry is gathered directly. The Shield wraps an embedded SQLite
// database (modernc.org/sqlite, pure Go) so that the example runs anywhere.
func ExampleNewCollector() {
	dir, err := os.MkdirTemp("", "sqlflight-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	connector, err := sqlite.NewConnector(filepath.Join(dir, "app.db"))
	if err != nil {
		log.Fatal(err)
	}
	shield := sqlflight.New()
	defer shield.Close()
	db := shield.OpenDB(connector)
	defer db.Close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(prom.NewCollector(shield, prom.WithShieldName("app")))

	for range 3 {
		var n int
		if err := db.QueryRow(`/* sqlflight: soft=1m */ SELECT 1 + 1`).Scan(&n); err != nil {
			log.Fatal(err)
		}
	}

	families, err := reg.Gather()
	if err != nil {
		log.Fatal(err)
	}
	for _, f := range families {
		switch f.GetName() {
		case "sqlflight_queries_total", "sqlflight_origin_executions_total", "sqlflight_cache_hits_total":
			for _, m := range f.GetMetric() {
				var labels []string
				for _, l := range m.GetLabel() {
					labels = append(labels, l.GetName()+"="+l.GetValue())
				}
				fmt.Printf("%s{%s} %v\n", f.GetName(), strings.Join(labels, ","), m.GetCounter().GetValue())
			}
		}
	}
	// Output:
	// sqlflight_cache_hits_total{shield=app,state=fresh} 2
	// sqlflight_cache_hits_total{shield=app,state=negative} 0
	// sqlflight_cache_hits_total{shield=app,state=stale} 0
	// sqlflight_origin_executions_total{shield=app} 1
	// sqlflight_queries_total{shield=app} 3
}
