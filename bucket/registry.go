package bucket

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redeq-go/redeq/internal/env"
	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/rdb"
	"github.com/redeq-go/redeq/internal/script"
	"github.com/redeq-go/redeq/pool"
)

var (
	//go:embed meta.lua
	metaSource string
	metaScript = script.New(metaSource)
)

// RecordEveryDefault is how long Ensure trusts that a topic it recorded is
// still in the topic set.
const RecordEveryDefault = 2 * time.Minute

// Registry records topics and their bucket counts, and caches what it has
// seen: a topic's count never changes once recorded.
type Registry struct {
	rdb    redis.UniversalClient
	prefix string
	clock  env.Clock

	// RecordEvery is how long Ensure trusts its cache: after it, Ensure
	// records the topic again, so a topic retired (or lost in a failover)
	// while this process still added to it returns to the topic set.
	// Set it before use. Defaults to RecordEveryDefault.
	RecordEvery time.Duration

	mu       sync.Mutex
	known    map[string]int       // topic -> recorded bucket count
	recorded map[string]time.Time // topic -> when Ensure last recorded it
}

// NewRegistry returns a Registry over c.
func NewRegistry(c redis.UniversalClient, prefix string) *Registry {
	return &Registry{rdb: c, prefix: prefix, clock: env.System, RecordEvery: RecordEveryDefault,
		known: map[string]int{}, recorded: map[string]time.Time{}}
}

// Ensure records topic with n buckets on its first use and adds it to the
// topic set, again every RecordEvery; fresh reports that this call was the
// first for topic in this process. It returns a *pool.MismatchError
// (matching pool.ErrBucketMismatch) when the topic was recorded with
// another count.
func (r *Registry) Ensure(ctx context.Context, topic string, n int) (fresh bool, err error) {
	now := r.clock.Now()
	r.mu.Lock()
	stored := r.known[topic]
	at, recorded := r.recorded[topic]
	r.mu.Unlock()
	if !recorded || now.Sub(at) >= r.RecordEvery {
		meta := keys.ForTopic(r.prefix, topic).Meta()
		got, err := metaScript.Run(ctx, r.rdb, []string{meta}, n).Int()
		if err != nil {
			return false, fmt.Errorf("record topic %q in %s: %w", topic, r.where(ctx, meta), err)
		}
		if got == n {
			// Checked: known before the listing, so that a topic set
			// whose node hangs holds up no fetch of the topic.
			r.remember(topic, got)
			// Only a count that matches ours is worth registering; a
			// topic registered already costs a read only (see meta.lua).
			set := keys.Topics(r.prefix)
			in, err := r.rdb.SIsMember(ctx, set, topic).Result()
			if err == nil && !in {
				err = r.rdb.SAdd(ctx, set, topic).Err()
			}
			if err != nil {
				// The count is known and checked: only the listing
				// failed, and the next call tries it again.
				r.remember(topic, got)
				return false, fmt.Errorf("record topic %q in %s: %w", topic, r.where(ctx, set), err)
			}
		}
		stored, fresh = got, !recorded
		r.remember(topic, stored)
		r.mu.Lock()
		r.recorded[topic] = now
		r.mu.Unlock()
	}
	if stored != n {
		return false, &pool.MismatchError{Topic: topic, Configured: n, Stored: stored}
	}
	return fresh, nil
}

// Record records topic with n buckets and adds it to the topic set now,
// whatever the cache says; a topic recorded with another count is a
// *pool.MismatchError.
func (r *Registry) Record(ctx context.Context, topic string, n int) error {
	r.mu.Lock()
	delete(r.recorded, topic)
	r.mu.Unlock()
	_, err := r.Ensure(ctx, topic, n)
	return err
}

// Recorded reports whether Ensure of topic with n buckets would answer
// without calling Redis: the topic was recorded less than RecordEvery ago,
// with n buckets.
func (r *Registry) Recorded(topic string, n int) bool {
	now := r.clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	at, recorded := r.recorded[topic]
	return recorded && now.Sub(at) < r.RecordEvery && r.known[topic] == n
}

// Checked returns the topics whose recorded bucket count this process
// has read, with their counts.
func (r *Registry) Checked() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.known)
}

// Matches reports whether topic's recorded bucket count was read and is
// n, even if Ensure could not list it in the topic set yet: its jobs may
// be fetched with n buckets.
func (r *Registry) Matches(topic string, n int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	got, ok := r.known[topic]
	return ok && got == n
}

// where names key, and on a cluster the master that holds it.
func (r *Registry) where(ctx context.Context, key string) string {
	if node := rdb.NodeOf(ctx, r.rdb, key); node != "" {
		return key + " on " + node
	}
	return key
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

// Restore puts topic back in the topic set when it has a recorded bucket
// count (a producer added to it after it was retired or lost), and takes
// it out of the retired set. It returns the count, 0 when none is
// recorded (nothing is written then).
func (r *Registry) Restore(ctx context.Context, topic string) (int, error) {
	if pool.CheckTopic(topic) != nil {
		return 0, nil
	}
	s, err := r.rdb.HGet(ctx, keys.ForTopic(r.prefix, topic).Meta(), "buckets").Result()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("restore topic %q: %w", topic, err)
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n&(n-1) != 0 {
		return 0, fmt.Errorf("restore topic %q: bad bucket count %q", topic, s)
	}
	if err := r.rdb.SAdd(ctx, keys.Topics(r.prefix), topic).Err(); err != nil {
		return 0, fmt.Errorf("restore topic %q: %w", topic, err)
	}
	if err := r.rdb.ZRem(ctx, keys.Retired(r.prefix), topic).Err(); err != nil {
		return 0, fmt.Errorf("restore topic %q: %w", topic, err)
	}
	r.remember(topic, n)
	return n, nil
}

// Topics returns every recorded topic with its bucket count. When the
// counts of some topics cannot be read (on a cluster, their node may be
// down), it returns the others along with an error naming those.
func (r *Registry) Topics(ctx context.Context) (map[string]int, error) {
	out, _, err := r.TopicsAndLost(ctx)
	return out, err
}

// TopicsAndLost is Topics, and the topics of the set whose bucket count is
// not recorded (a failover lost it, or a producer is recording it now).
func (r *Registry) TopicsAndLost(ctx context.Context) (map[string]int, []string, error) {
	names, err := r.rdb.SMembers(ctx, keys.Topics(r.prefix)).Result()
	if err != nil {
		return nil, nil, fmt.Errorf("list topics: %w", err)
	}
	out := make(map[string]int, len(names))
	var lost []string
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
		} else {
			lost = append(lost, t)
		}
	}
	return out, lost, errors.Join(errs...)
}

// Missing returns those of topics whose bucket count is no longer
// recorded, read from Redis whatever the cache says: one pipeline.
func (r *Registry) Missing(ctx context.Context, topics []string) ([]string, error) {
	if len(topics) == 0 {
		return nil, nil
	}
	pipe := r.rdb.Pipeline()
	cmds := make([]*redis.BoolCmd, len(topics))
	for i, t := range topics {
		cmds[i] = pipe.HExists(ctx, keys.ForTopic(r.prefix, t).Meta(), "buckets")
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	var missing []string
	var errs []error
	for i, cmd := range cmds {
		switch in, err := cmd.Result(); {
		case err != nil:
			errs = append(errs, fmt.Errorf("read topic %q: %w", topics[i], err))
		case !in:
			missing = append(missing, topics[i])
		}
	}
	return missing, errors.Join(errs...)
}

// Listened returns the bucket counts the live and recently dead consumers
// listen to topics with, as their heartbeats record them: where a topic's
// own count was lost, these are what its jobs were routed by.
func (r *Registry) Listened(ctx context.Context) (map[string]int, error) {
	vals, err := r.rdb.HVals(ctx, keys.AliveTopics(r.prefix)).Result()
	if err != nil {
		return nil, fmt.Errorf("read listened topics: %w", err)
	}
	out := map[string]int{}
	for _, v := range vals {
		for _, line := range strings.Split(v, "\n") {
			if t, n, ok := keys.ParseAddress(line); ok && n > 0 && n&(n-1) == 0 {
				out[t] = n
			}
		}
	}
	return out, nil
}
