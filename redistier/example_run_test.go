package redistier_test

import (
	"context"
	"crypto/rand"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/sqlflight/sqlflight/internal/exampletest"
)

// TestExamplesOnServers runs ExampleNew against the test PostgreSQL and
// Redis, checks what it prints, and removes the keys it wrote.
func TestExamplesOnServers(t *testing.T) {
	dsn := exampletest.Need(t, "SQLFLIGHT_POSTGRES_DSN")
	addr := exampletest.Need(t, "SQLFLIGHT_REDIS_ADDR")
	t.Setenv("DATABASE_URL", dsn)
	t.Setenv("REDIS_ADDR", addr)
	t.Setenv("FLEET_SECRET", rand.Text())

	client := redis.NewClient(&redis.Options{Addr: addr})
	defer client.Close()
	clean := func() {
		ctx := context.Background()
		iter := client.Scan(ctx, 0, "sqlflight-example:*", 100).Iterator()
		for iter.Next(ctx) {
			client.Del(ctx, iter.Val())
		}
		if err := iter.Err(); err != nil {
			t.Errorf("cleaning the example's keys: %v", err)
		}
	}
	clean()
	defer clean()

	const want = "42\nshared tier: up\n"
	if got := exampletest.Stdout(t, ExampleNew); got != want {
		t.Errorf("ExampleNew printed %q, want %q", got, want)
	}
}
