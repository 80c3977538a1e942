package redistier_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/redis/go-redis/v9"
	"github.com/sqlflight/sqlflight"
	"github.com/sqlflight/sqlflight/redistier"
)

// A fleet shares one origin query per miss through Redis: every instance
// opens its database through a Shield with the same shared tier, KeyPrefix
// and SharedSecret. (With sql.Open, name the tier in the DSN instead:
// sqlflight.shared=redis://cache:6379/0, importing this package for its
// side effect.)
func ExampleNew() {
	client := redis.NewClient(&redis.Options{
		Addr:                  os.Getenv("REDIS_ADDR"), // cache:6379
		ContextTimeoutEnabled: true,                    // the Shield's RedisTimeout bounds socket reads
		MaxRetries:            1,                       // the Shield's breaker decides what a failure means
	})
	defer client.Close()
	tier := redistier.New(client)
	defer tier.Close()

	shield := sqlflight.New(sqlflight.Options{
		KeyPrefix:    "sqlflight-example:",
		SharedSecret: os.Getenv("FLEET_SECRET"), // 32 random bytes, the same on every instance
	}, sqlflight.Shared(tier))
	defer shield.Close()

	cfg, err := pgx.ParseConfig(os.Getenv("DATABASE_URL")) // postgres://app@db/app
	if err != nil {
		log.Fatal(err)
	}
	db := shield.OpenDB(stdlib.GetConnector(*cfg))
	defer db.Close()

	var answer int
	err = db.QueryRowContext(context.Background(),
		`/* sqlflight: soft=30s hard=5m */ SELECT $1::int + 1`, 41).Scan(&answer)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(answer)
	fmt.Println("shared tier:", shield.Stats().SharedState)
	// 42
	// shared tier: up
}
