// Package demo connects the examples to Redis: the server at REDIS_ADDR
// when set, otherwise an embedded miniredis, so that every example runs
// with a bare `go run`.
package demo

import (
	"fmt"
	"os"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// Redis returns a client and a function that closes it (and stops the
// embedded server, if one was started).
func Redis() (redis.UniversalClient, func()) {
	if addr := os.Getenv("REDIS_ADDR"); addr != "" {
		fmt.Printf("using redis at %s\n", addr)
		c := redis.NewClient(&redis.Options{Addr: addr})
		return c, func() { c.Close() }
	}
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "start embedded redis:", err)
		os.Exit(1)
	}
	fmt.Println("using an embedded miniredis (set REDIS_ADDR to use a real server)")
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	return c, func() { c.Close(); m.Close() }
}

// Check exits the example on an error.
func Check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
