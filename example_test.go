package sqlflight_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/sqlflight/sqlflight"
	"modernc.org/sqlite"
)

// The examples with an Output run everywhere: they wrap an embedded SQLite
// database (modernc.org/sqlite, pure Go), as `sqlflight demo` does. Those that
// need PostgreSQL (or Redis) read its address from DATABASE_URL (REDIS_ADDR)
// and are run by TestExamplesOnPostgres when SQLFLIGHT_POSTGRES_DSN is set.

// exampleDB creates a temporary SQLite database holding a products table and
// returns its DSN and a function that removes it.
func exampleDB() (dsn string, remove func()) {
	dir, err := os.MkdirTemp("", "sqlflight-example-")
	if err != nil {
		log.Fatal(err)
	}
	dsn = filepath.Join(dir, "shop.db")
	db, err := sql.Open("sqlite", dsn) // the plain driver: no sqlflight
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	_, err = db.Exec(`CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT, price REAL);
		INSERT INTO products VALUES (42, 'teapot', 19.5), (43, 'kettle', 24)`)
	if err != nil {
		log.Fatal(err)
	}
	return dsn, func() { os.RemoveAll(dir) }
}

// setPrice changes a price behind sqlflight's back, as another program would.
func setPrice(dsn string, id int, price float64) {
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`UPDATE products SET price = ? WHERE id = ?`, price, id); err != nil {
		log.Fatal(err)
	}
}

// sql.Open("sqlflight", dsn) wraps pgx v5 under the package's default Shield.
// A read that may be shared runs once for every identical in-flight caller;
// an annotation also caches it.
func Example() {
	ctx := context.Background()
	db, err := sql.Open("sqlflight", os.Getenv("DATABASE_URL")) // postgres://app@localhost/app
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			var n int
			err := db.QueryRowContext(ctx,
				`/* sqlflight: soft=30s hard=5m */ SELECT count(*) FROM generate_series(1, $1::int)`, 1000).Scan(&n)
			if err != nil {
				log.Fatal(err)
			}
		})
	}
	wg.Wait()

	var n int
	if err := db.QueryRowContext(ctx,
		`/* sqlflight: soft=30s hard=5m */ SELECT count(*) FROM generate_series(1, $1::int)`, 1000).Scan(&n); err != nil {
		log.Fatal(err)
	}
	fmt.Println(n)
	// 1000
}

// Register wraps any database/sql driver under a name of its own.
func ExampleRegister() {
	dsn, remove := exampleDB()
	defer remove()

	shield := sqlflight.Register("sqlflight-sqlite", &sqlite.Driver{})
	defer shield.Close()
	db, err := sql.Open("sqlflight-sqlite", dsn)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	var name string
	for range 2 {
		err := db.QueryRow(`/* sqlflight: soft=1m */ SELECT name FROM products WHERE id = ?`, 42).Scan(&name)
		if err != nil {
			log.Fatal(err)
		}
	}
	st := shield.Stats()
	fmt.Println(name, st.OriginExecutions, st.FreshHits)
	// Output: teapot 1 1
}

// OpenDB wraps a driver.Connector: a configured pgx connector, or any other.
// Options configure the Shield behind it; ShieldOf reaches it later.
func ExampleOpenDB() {
	dsn, remove := exampleDB()
	defer remove()

	connector, err := sqlite.NewConnector(dsn)
	if err != nil {
		log.Fatal(err)
	}
	// Every read that may be shared is cached 1 min unless an annotation says otherwise.
	db := sqlflight.OpenDB(connector, sqlflight.Options{Default: sqlflight.Policy{Soft: time.Minute}})
	defer db.Close()
	shield := sqlflight.ShieldOf(db)
	defer shield.Close()

	for range 3 {
		var price float64
		if err := db.QueryRow(`SELECT price FROM products WHERE id = ?`, 42).Scan(&price); err != nil {
			log.Fatal(err)
		}
		fmt.Println(price)
	}
	fmt.Println("origin queries:", shield.Stats().OriginExecutions)
	// Output:
	// 19.5
	// 19.5
	// 19.5
	// origin queries: 1
}

// OpenDB with pgx: a pgx.ConnConfig (tracers, TLS, …) through pgx's stdlib
// connector.
func ExampleOpenDB_pgx() {
	cfg, err := pgx.ParseConfig(os.Getenv("DATABASE_URL")) // postgres://app@localhost/app
	if err != nil {
		log.Fatal(err)
	}
	db := sqlflight.OpenDB(stdlib.GetConnector(*cfg), sqlflight.Options{Strict: true})
	defer db.Close()
	defer sqlflight.ShieldOf(db).Close()

	var answer int
	err = db.QueryRowContext(context.Background(),
		`/* sqlflight: soft=30s hard=5m */ SELECT $1::int + 1`, 41).Scan(&answer)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(answer)
	// 42
}

// WithTTL caches the statements run with a context, without touching their
// SQL; an annotation in the statement still wins.
func ExampleWithTTL() {
	dsn, remove := exampleDB()
	defer remove()
	connector, err := sqlite.NewConnector(dsn)
	if err != nil {
		log.Fatal(err)
	}
	db := sqlflight.OpenDB(connector)
	defer db.Close()
	shield := sqlflight.ShieldOf(db)
	defer shield.Close()

	// Fresh for 30 s, then served stale (and refreshed once, in the background) up to 5 min.
	ctx := sqlflight.WithTTL(context.Background(), 30*time.Second, 5*time.Minute)
	for range 2 {
		var name string
		if err := db.QueryRowContext(ctx, `SELECT name FROM products WHERE id = ?`, 43).Scan(&name); err != nil {
			log.Fatal(err)
		}
		fmt.Println(name)
	}
	st := shield.Stats()
	fmt.Println("misses:", st.Misses, "fresh hits:", st.FreshHits)
	// Output:
	// kettle
	// kettle
	// misses: 1 fresh hits: 1
}

// Stats is a snapshot of a Shield's counters: what reached the database,
// what was shared, what was served from the cache, and the guard's state.
func ExampleShield_Stats() {
	dsn, remove := exampleDB()
	defer remove()
	connector, err := sqlite.NewConnector(dsn)
	if err != nil {
		log.Fatal(err)
	}
	shield := sqlflight.New(sqlflight.Options{MaxInflight: 8})
	defer shield.Close()
	db := shield.OpenDB(connector)
	defer db.Close()

	ctx := context.Background()
	for range 3 {
		rows, err := db.QueryContext(ctx, `/* sqlflight: soft=1m name=catalog */ SELECT id, name FROM products ORDER BY id`)
		if err != nil {
			log.Fatal(err)
		}
		rows.Close()
	}
	if _, err := db.ExecContext(ctx, `UPDATE products SET price = price + 1 WHERE id = ?`, 42); err != nil {
		log.Fatal(err)
	}

	st := shield.Stats()
	fmt.Println("statements:", st.Queries)
	fmt.Println("origin queries:", st.OriginExecutions)
	fmt.Println("fresh hits:", st.FreshHits)
	fmt.Println("bypassed (exec):", st.BypassReasons["exec"])
	fmt.Println("catalog fresh hits:", st.Names["catalog"].FreshHits)
	fmt.Println("breaker:", st.BreakerState)
	// Output:
	// statements: 4
	// origin queries: 1
	// fresh hits: 2
	// bypassed (exec): 1
	// catalog fresh hits: 2
	// breaker: closed
}

// A write through the Shield invalidates what it read from the tables it
// writes. A change it cannot see (another program, a migration) needs
// Invalidate, or a change feed (Options.Feed).
func ExampleShield_Invalidate() {
	dsn, remove := exampleDB()
	defer remove()
	connector, err := sqlite.NewConnector(dsn)
	if err != nil {
		log.Fatal(err)
	}
	shield := sqlflight.New()
	defer shield.Close()
	db := shield.OpenDB(connector)
	defer db.Close()

	price := func() float64 {
		var p float64
		err := db.QueryRow(`/* sqlflight: soft=1h */ SELECT price FROM products WHERE id = ?`, 42).Scan(&p)
		if err != nil {
			log.Fatal(err)
		}
		return p
	}
	fmt.Println(price())
	setPrice(dsn, 42, 21) // not through sqlflight
	fmt.Println(price())  // still the cached price
	shield.Invalidate("products")
	fmt.Println(price())
	// Output:
	// 19.5
	// 19.5
	// 21
}
