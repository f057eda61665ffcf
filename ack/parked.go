package ack

import (
	"cmp"
	"context"
	_ "embed"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/rdb"
	"github.com/redeq-go/redeq/internal/script"
	"github.com/redeq-go/redeq/pool"
)

var (
	//go:embed requeue.lua
	requeueSource string
	requeueScript = script.New(requeueSource)
	//go:embed take.lua
	takeSource string
	takeScript = script.New(takeSource)
)

// Parking names where a parked job waits: un_ack or dead.
type Parking int

// The parkings.
const (
	UnAck Parking = iota
	Dead
)

func (p Parking) key(k keys.Bucket) string {
	if p == Dead {
		return k.Dead()
	}
	return k.UnAck()
}

func (p Parking) state() pool.State {
	if p == Dead {
		return pool.StateDead
	}
	return pool.StateUnAck
}

// maxList bounds one listing of parked jobs.
const maxList = 10_000

// List returns at most limit parked jobs of topic (buckets of them), oldest
// first, each with RunAt set to when it was parked.
func List(ctx context.Context, c redis.UniversalClient, prefix, topic string, buckets int, p Parking, limit int) ([]*pool.Job, error) {
	if limit <= 0 || limit > maxList {
		return nil, fmt.Errorf("%w: list %s of %q: limit %d is out of range 1..%d", pool.ErrInvalidArgument, p.state(), topic, limit, maxList)
	}
	var out []*pool.Job
	for b := range buckets {
		k := keys.ForBucket(prefix, topic, b)
		zs, err := c.ZRangeWithScores(ctx, p.key(k), 0, int64(limit-1)).Result()
		if err != nil {
			return nil, fmt.Errorf("list %s of %s: %w", p.state(), topic, err)
		}
		if len(zs) == 0 {
			continue
		}
		ids := make([]string, len(zs))
		for i, z := range zs {
			ids[i], _ = z.Member.(string)
		}
		envs, err := c.HMGet(ctx, k.Pool(), ids...).Result()
		if err != nil {
			return nil, fmt.Errorf("list %s of %s: %w", p.state(), topic, err)
		}
		lastErrs, err := c.HMGet(ctx, k.Errors(), ids...).Result()
		if err != nil {
			return nil, fmt.Errorf("list %s of %s: %w", p.state(), topic, err)
		}
		var reasons []any
		if p == Dead {
			if reasons, err = c.HMGet(ctx, k.Reasons(), ids...).Result(); err != nil {
				return nil, fmt.Errorf("list %s of %s: %w", p.state(), topic, err)
			}
		}
		for i, e := range envs {
			s, ok := e.(string)
			if !ok {
				continue // deleted meanwhile
			}
			job, err := pool.JobOf(topic, ids[i], []byte(s))
			if err != nil {
				job = &pool.Job{Topic: topic, ID: ids[i]} // corrupt: still listed, so it can be removed
			}
			job.State = p.state()
			job.RunAt = time.UnixMilli(int64(zs[i].Score))
			if reasons != nil {
				job.Reason, _ = reasons[i].(string)
			}
			if v, ok := lastErrs[i].(string); ok {
				job.SetTrace(v)
			}
			out = append(out, job)
		}
	}
	slices.SortStableFunc(out, func(a, b *pool.Job) int { return cmp.Compare(a.RunAt.UnixMilli(), b.RunAt.UnixMilli()) })
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// Mark names one stay of a parked job: its created time and when it was
// parked, both in unix ms, as "<created>:<parked>". A job of the same id
// deleted and added again, or requeued and parked again, has another mark
// (unless it was parked again within the same millisecond).
func Mark(created, parked time.Time) string {
	return fmt.Sprintf("%d:%d", created.UnixMilli(), parked.UnixMilli())
}

// CheckMark reports why mark is no mark Mark makes ("" is none).
func CheckMark(mark string) error {
	if mark == "" {
		return nil
	}
	c, p, ok := strings.Cut(mark, ":")
	if !ok || !digits(c) || !digits(p) {
		return fmt.Errorf("%w: mark %q is not <created ms>:<parked ms>", pool.ErrInvalidArgument, mark)
	}
	return nil
}

func digits(s string) bool {
	if s == "" || len(s) > 15 {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// Take removes a parked job from where it is parked and from its pool, and
// returns it. A mark other than "" takes the job only while it is the stay
// the mark names (ErrJobChanged else). A rerun after a lost reply returns
// the same job.
func Take(ctx context.Context, c redis.UniversalClient, prefix, topic, id string, bucket int, p Parking, mark string) (*pool.Job, error) {
	if err := CheckMark(mark); err != nil {
		return nil, fmt.Errorf("take %s job %q of topic %q: %w", p.state(), id, topic, err)
	}
	k := keys.ForBucket(prefix, topic, bucket)
	ctx, cancel := pool.OpContext(ctx)
	defer cancel()
	v, err := takeScript.Run(ctx, c, []string{k.Pool(), p.key(k), k.Reasons(), k.Op(uuid.NewString()), k.Errors()},
		id, pool.OpTTL(c).Milliseconds(), mark).Slice()
	if err != nil {
		return nil, fmt.Errorf("take %s job %q of topic %q: %w", p.state(), id, topic, err)
	}
	if len(v) == 0 {
		return nil, fmt.Errorf("take %s job %q of topic %q: bad reply %v", p.state(), id, topic, v)
	}
	if err := parkedCode(v[0], topic, id, p); err != nil {
		return nil, err
	}
	s, _ := rdb.Str(v[1])
	job, err := pool.JobOf(topic, id, []byte(s))
	if err != nil {
		return &pool.Job{Topic: topic, ID: id}, nil
	}
	return job, nil
}

// Requeue moves a parked job back to its bucket, due after delay. reset
// gives it a fresh count of attempts and recoveries. A rerun after a lost
// reply reports success again. mark as Take's.
func Requeue(ctx context.Context, c redis.UniversalClient, prefix, topic, id string, bucket int, p Parking, delay time.Duration, reset bool, mark string) error {
	if err := CheckMark(mark); err != nil {
		return fmt.Errorf("requeue %s job %q of topic %q: %w", p.state(), id, topic, err)
	}
	k := keys.ForBucket(prefix, topic, bucket)
	r := ""
	if reset {
		r = "1"
	}
	ctx, cancel := pool.OpContext(ctx)
	defer cancel()
	v, err := requeueScript.Run(ctx, c, []string{k.Pool(), p.key(k), k.Scheduled(), k.Reasons(), k.Op(uuid.NewString())},
		id, pool.DurationMs(delay), r, keys.WakeChannel(prefix), keys.Address(topic, bucket), pool.OpTTL(c).Milliseconds(), mark).Result()
	if err != nil {
		return fmt.Errorf("requeue %s job %q of topic %q: %w", p.state(), id, topic, err)
	}
	return parkedCode(v, topic, id, p)
}

func parkedCode(v any, topic, id string, p Parking) error {
	switch v {
	case int64(0):
		return nil
	case int64(1):
		return fmt.Errorf("job %q of topic %q: %w", id, topic, pool.ErrJobNotFound)
	case int64(2):
		return fmt.Errorf("job %q of topic %q is not %s: %w", id, topic, p.state(), pool.ErrJobNotWaiting)
	case int64(3):
		return fmt.Errorf("job %q of topic %q was added or parked again since it was marked: %w", id, topic, pool.ErrJobChanged)
	}
	return fmt.Errorf("job %q of topic %q: unexpected reply %v", id, topic, v)
}
