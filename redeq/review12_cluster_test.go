package redeq_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

type r12Log struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *r12Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *r12Log) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Split(strings.TrimSpace(l.buf.String()), "\n")
}

type r12Bcast struct {
	topics []string
	mu     sync.Mutex
	n      int
}

func (b *r12Bcast) Topics() []string { return b.topics }
func (b *r12Bcast) OnBroadcast(ctx context.Context, job *redeq.Job) {
	b.mu.Lock()
	b.n++
	b.mu.Unlock()
}

// TestReview12ClusterBackgroundLoopsQuiet attacks promise 5 ("on Redis
// Cluster no CROSSSLOT or other errors in any background loop"): three
// clients with listeners on several topics (4 buckets each), a broadcast
// listener, RetireAfter of 1 s (topics retire and come back), pause and
// resume, jobs that fail and retry, a client that leaves and one that
// joins. Every warning or error any client logs fails the test.
func TestReview12ClusterBackgroundLoopsQuiet(t *testing.T) {
	be := testutil.Cluster(t)
	ctx := context.Background()
	logs := &r12Log{}
	cfg := testutil.Config(t)
	cfg.Concurrency = 4
	cfg.RetireAfter = time.Second
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	topics := []string{"a.x", "b.y", "c.z", "d.w", "e.v"}
	var clients []*redeq.Client
	var ls []*listener
	newClient := func() *redeq.Client {
		c, err := redeq.New(be.New(t), cfg)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Shutdown(context.Background()) })
		for _, tp := range topics {
			l := newListener(tp, func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
				if strings.HasPrefix(job.ID, "fail") && job.Attempt == 0 {
					return fmt.Errorf("first attempt fails")
				}
				ch.Ack()
				return nil
			})
			ls = append(ls, l)
			require.NoError(t, c.Register(l))
		}
		require.NoError(t, c.RegisterBroadcast(&r12Bcast{topics: topics[:2]}))
		require.NoError(t, c.Start(ctx))
		return c
	}
	for range 3 {
		clients = append(clients, newClient())
	}
	p := clients[0]
	for round := range 6 {
		for i, tp := range topics {
			for j := range 8 {
				id := fmt.Sprintf("r%d-%d", round, j)
				if j == 0 {
					id = "fail" + id
				}
				require.NoError(t, p.Add(ctx, &redeq.Job{Topic: tp, ID: id, Delay: time.Duration(j*50) * time.Millisecond}))
			}
			require.NoError(t, p.Add(ctx, &redeq.Job{Topic: tp, ID: fmt.Sprintf("bc%d-%d", round, i), Broadcast: true}))
		}
		if round == 2 {
			require.NoError(t, p.Pause(ctx, topics[0]))
			time.Sleep(300 * time.Millisecond)
			require.NoError(t, p.Resume(ctx, topics[0]))
			require.NoError(t, clients[2].Shutdown(ctx))
			clients = append(clients, newClient())
		}
		time.Sleep(1500 * time.Millisecond) // idle long enough to retire
	}
	time.Sleep(2 * time.Second)
	var bad []string
	for _, line := range logs.lines() {
		if line != "" {
			bad = append(bad, line)
		}
	}
	if len(bad) > 20 {
		bad = append(bad[:20], fmt.Sprintf("... %d more", len(bad)-20))
	}
	require.Emptyf(t, bad, "background loops logged warnings/errors on Redis Cluster")
}
