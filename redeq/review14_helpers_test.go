package redeq_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/redeq"
)

// Review 14 children: the test binary run again with REDEQ_R14_CHILD set.
// Dispatched from init (like review 13's), so TestMain is left alone.
const r14ChildEnv = "REDEQ_R14_CHILD"

func init() {
	kind := os.Getenv(r14ChildEnv)
	if kind == "" {
		return
	}
	switch kind {
	case "twoclients":
		r14TwoClientsChild()
	default:
		fmt.Println("error unknown kind", kind)
		os.Exit(2)
	}
	os.Exit(0)
}

// r14TwoClientsChild is one service process that embeds two redeq
// clients over the same Redis (say, two modules of one binary, each with
// its own settings, as promise 1 allows): client X listens to "a", client
// Y to "b". The job "poison" of "a" kills the process 300ms after it
// starts; every other job runs R13_HOLD_MS and is acked.
func r14TwoClientsChild() {
	hold := r13EnvDur("R13_HOLD_MS", 3*time.Second)
	var clients []*redeq.Client
	for _, topic := range []string{"a", "b"} {
		c := childClient(r13ChildConfig)
		l := newListener(topic, func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			fmt.Println("start", job.Topic, job.ID, job.Recoveries)
			if job.ID == "poison" {
				time.Sleep(300 * time.Millisecond)
				os.Exit(3)
			}
			time.Sleep(hold)
			fmt.Println("finished", job.Topic, job.ID)
			ch.Ack()
			return nil
		})
		l.workers = 4
		if err := c.Register(l); err != nil {
			fmt.Println("error", err)
			os.Exit(2)
		}
		clients = append(clients, c)
	}
	for _, c := range clients {
		if err := c.Start(context.Background()); err != nil {
			fmt.Println("error", err)
			os.Exit(2)
		}
	}
	select {}
}

// r14Bucket is the bucket of id in a topic of b buckets (fnv32a & (b-1)).
func r14Bucket(id string, b int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return int(h.Sum32() & uint32(b-1))
}

// r14SetRecoveries rewrites the recovery count in a stored envelope, as
// if the job's consumers had died that many times while it ran.
var r14SetRecoveries = redis.NewScript(`
local e = redis.call('HGET', KEYS[1], ARGV[1])
if not e then return redis.error_reply('no such job') end
local h, rest = string.match(e, '^(1|%d+|%d+|)%d+(.*)$')
redis.call('HSET', KEYS[1], ARGV[1], h .. ARGV[2] .. rest)
return 1`)

func r14Quarantine(t *testing.T, rdb redis.UniversalClient, cfg config.Config, topic, id string, recoveries int) {
	t.Helper()
	k := keys.ForBucket(cfg.Prefix, topic, r14Bucket(id, cfg.Concurrency))
	require.NoError(t, r14SetRecoveries.Run(context.Background(), rdb, []string{k.Pool()}, id, recoveries).Err())
}

// r14Counter counts handler runs per topic.
type r14Counter struct {
	mu sync.Mutex
	n  map[string]*atomic.Int64
}

func (c *r14Counter) of(topic string) *atomic.Int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]*atomic.Int64{}
	}
	if c.n[topic] == nil {
		c.n[topic] = &atomic.Int64{}
	}
	return c.n[topic]
}
