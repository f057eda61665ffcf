package bucket

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/pool"
)

var (
	//go:embed meta.lua
	metaSource string
	metaScript = redis.NewScript(metaSource)
)

// Registry records topics and their bucket counts, and caches what it has
// seen: a topic's count never changes once recorded.
type Registry struct {
	rdb    redis.UniversalClient
	prefix string

	mu    sync.Mutex
	known map[string]int // topic -> recorded bucket count
}

// NewRegistry returns a Registry over c.
func NewRegistry(c redis.UniversalClient, prefix string) *Registry {
	return &Registry{rdb: c, prefix: prefix, known: map[string]int{}}
}

// Ensure records topic with n buckets on its first use and adds it to the
// topic set; fresh reports that this call was the first for topic in this
// process. It returns a *pool.MismatchError (matching
// pool.ErrBucketMismatch) when the topic was recorded with another count.
func (r *Registry) Ensure(ctx context.Context, topic string, n int) (fresh bool, err error) {
	r.mu.Lock()
	stored, ok := r.known[topic]
	r.mu.Unlock()
	if !ok {
		got, err := metaScript.Run(ctx, r.rdb, []string{keys.ForTopic(r.prefix, topic).Meta()}, n).Int()
		if err != nil {
			return false, fmt.Errorf("record topic %q: %w", topic, err)
		}
		if got == n {
			// Only a count that matches ours is worth registering.
			if err := r.rdb.SAdd(ctx, keys.Topics(r.prefix), topic).Err(); err != nil {
				return false, fmt.Errorf("record topic %q: %w", topic, err)
			}
		}
		stored, fresh = got, true
		r.remember(topic, stored)
	}
	if stored != n {
		return false, &pool.MismatchError{Topic: topic, Configured: n, Stored: stored}
	}
	return fresh, nil
}

func (r *Registry) remember(topic string, n int) {
	r.mu.Lock()
	r.known[topic] = n
	r.mu.Unlock()
}

// Count returns the recorded bucket count of topic, or fallback when the
// topic has none recorded yet.
func (r *Registry) Count(ctx context.Context, topic string, fallback int) (int, error) {
	r.mu.Lock()
	n, ok := r.known[topic]
	r.mu.Unlock()
	if ok {
		return n, nil
	}
	s, err := r.rdb.HGet(ctx, keys.ForTopic(r.prefix, topic).Meta(), "buckets").Result()
	if errors.Is(err, redis.Nil) {
		return fallback, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read topic %q: %w", topic, err)
	}
	n, err = strconv.Atoi(s)
	if err != nil || n < 1 || n&(n-1) != 0 {
		return 0, fmt.Errorf("read topic %q: bad bucket count %q", topic, s)
	}
	r.remember(topic, n)
	return n, nil
}

// Topics returns every recorded topic with its bucket count. When the
// counts of some topics cannot be read (on a cluster, their node may be
// down), it returns the others along with an error naming those.
func (r *Registry) Topics(ctx context.Context) (map[string]int, error) {
	names, err := r.rdb.SMembers(ctx, keys.Topics(r.prefix)).Result()
	if err != nil {
		return nil, fmt.Errorf("list topics: %w", err)
	}
	out := make(map[string]int, len(names))
	var errs []error
	for _, t := range names {
		if pool.CheckTopic(t) != nil {
			continue // not ours to move
		}
		n, err := r.Count(ctx, t, 0)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if n > 0 {
			out[t] = n
		}
	}
	return out, errors.Join(errs...)
}
