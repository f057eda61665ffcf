package redeq

import (
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/internal/rdb"
)

func durability(cfg config.Config) rdb.Durability {
	return rdb.Durability{Replicas: cfg.WaitReplicas, Timeout: cfg.WaitTimeout}
}

// checkDurability refuses a client whose ReadTimeout would cut WAIT
// short: go-redis reads a pipeline's replies, WAIT's included, under it.
func checkDurability(c redis.UniversalClient, cfg config.Config) error {
	if cfg.WaitReplicas == 0 {
		return nil
	}
	if rt, ok := rdb.ReadTimeout(c); ok && rt > 0 && rt <= cfg.WaitTimeout {
		return &config.FieldError{Field: "WaitTimeout", Key: "wait_timeout",
			Reason: fmt.Sprintf("%v must be shorter than the Redis client's ReadTimeout %v", cfg.WaitTimeout, rt)}
	}
	return nil
}
