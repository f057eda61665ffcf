package testutil_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/testutil"
)

// TestProxy: a Proxy forwards what no fault touches, and each of its
// faults does what it says to the connections and requests it applies
// to.
func TestProxy(t *testing.T) {
	ctx := context.Background()
	setup := func(t *testing.T, opts *redis.Options) (*testutil.Proxy, *redis.Client, *redis.Client) {
		be := testutil.Backends(t)[0]
		p := testutil.StartProxy(t, be.Addrs[0])
		plain := redis.NewClient(&redis.Options{Addr: be.Addrs[0]})
		t.Cleanup(func() { plain.Close() })
		if opts == nil {
			opts = &redis.Options{}
		}
		opts.Addr = p.Addr()
		c := redis.NewClient(opts)
		t.Cleanup(func() { c.Close() })
		return p, c, plain
	}
	marked := func(b []byte) bool { return bytes.Contains(b, []byte("marked")) }

	t.Run("ForwardsUntouched", func(t *testing.T) {
		p, c, plain := setup(t, nil)
		require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
		require.Equal(t, "v", plain.Get(ctx, "k").Val())
		require.Equal(t, "v", c.Get(ctx, "k").Val())
		require.EqualValues(t, 1, p.Open())
	})
	t.Run("CutClosesEveryConnection", func(t *testing.T) {
		p, c, _ := setup(t, nil)
		require.NoError(t, c.Ping(ctx).Err())
		p.Cut()
		testutil.Eventually(t, 5*time.Second, "no connection open", func() bool { return p.Open() == 0 })
		require.NoError(t, c.Ping(ctx).Err(), "a new connection goes through")
	})
	t.Run("HoldNewNeverAnswers", func(t *testing.T) {
		p, c, _ := setup(t, &redis.Options{ReadTimeout: 100 * time.Millisecond, MaxRetries: -1})
		p.HoldNew.Store(true)
		require.Error(t, c.Ping(ctx).Err())
		require.Zero(t, p.Open(), "held connections are not proxied")
	})
	t.Run("StallHoldsRepliesUntilCleared", func(t *testing.T) {
		p, c, plain := setup(t, nil)
		require.NoError(t, c.Ping(ctx).Err())
		p.Stall.Store(true)
		done := make(chan error, 1)
		go func() { done <- c.Set(ctx, "stalled", "v", 0).Err() }()
		testutil.Eventually(t, 5*time.Second, "the command reached the server", func() bool { return plain.Exists(ctx, "stalled").Val() == 1 })
		select {
		case err := <-done:
			t.Fatalf("a reply went through a stall: %v", err)
		default:
		}
		p.Stall.Store(false)
		require.NoError(t, <-done)
	})
	t.Run("CutReplyDropsTheReplyOfAMatchedRequest", func(t *testing.T) {
		p, c, plain := setup(t, &redis.Options{MaxRetries: -1})
		p.Match(marked)
		p.CutReply.Store(1)
		require.NoError(t, c.Set(ctx, "other", "v", 0).Err(), "an unmatched request")
		require.Error(t, c.Set(ctx, "marked", "v", 0).Err())
		require.Equal(t, "v", plain.Get(ctx, "marked").Val(), "the request ran")
		require.NoError(t, c.Set(ctx, "marked", "w", 0).Err(), "one cut only")
		require.EqualValues(t, 2, p.Matched())
		require.EqualValues(t, 1, p.Faults())
	})
	t.Run("DelayReplyAnswersLate", func(t *testing.T) {
		p, c, _ := setup(t, nil)
		p.Match(marked)
		p.FaultDelay.Store(int64(100 * time.Millisecond))
		p.DelayReply.Store(1)
		start := time.Now()
		require.NoError(t, c.Set(ctx, "marked", "v", 0).Err())
		require.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond)
	})
	t.Run("DelayRequestReachesTheServerAfterTheClientGaveUp", func(t *testing.T) {
		p, c, plain := setup(t, &redis.Options{ReadTimeout: 50 * time.Millisecond, MaxRetries: -1})
		require.NoError(t, c.Ping(ctx).Err())
		p.Match(marked)
		p.FaultDelay.Store(int64(200 * time.Millisecond))
		p.DelayRequest.Store(1)
		require.Error(t, c.Set(ctx, "marked", "late", 0).Err())
		require.Zero(t, plain.Exists(ctx, "marked").Val(), "held")
		testutil.Eventually(t, 5*time.Second, "the held request written", func() bool { return p.LateWritten() == 1 })
		require.Zero(t, p.Held(), "nothing held once written")
		testutil.Eventually(t, 5*time.Second, "the held request ran", func() bool { return plain.Get(ctx, "marked").Val() == "late" })
	})
	subscribe := func(t *testing.T, c *redis.Client) *redis.PubSub {
		ps := c.Subscribe(ctx, "ch")
		t.Cleanup(func() { ps.Close() })
		_, err := ps.Receive(ctx)
		require.NoError(t, err)
		return ps
	}
	// silent reports whether no message reaches ps while one is published.
	silent := func(t *testing.T, ps *redis.PubSub, plain *redis.Client) bool {
		require.NoError(t, plain.Publish(ctx, "ch", "m").Err())
		for {
			m, err := ps.ReceiveTimeout(ctx, 200*time.Millisecond)
			if err != nil {
				return true
			}
			if _, ok := m.(*redis.Message); ok {
				return false
			}
		}
	}
	// hears publishes until ps receives (a subscription cut by a timed-out
	// receive resubscribes first).
	hears := func(t *testing.T, ps *redis.PubSub, plain *redis.Client) {
		testutil.Eventually(t, 5*time.Second, "a message received", func() bool { return !silent(t, ps, plain) })
	}
	t.Run("ForwardsMessagesUntouched", func(t *testing.T) {
		p, c, plain := setup(t, nil)
		ps := subscribe(t, c)
		require.EqualValues(t, 1, p.Subscriptions())
		require.EqualValues(t, 1, p.SubscriptionsOpen())
		require.False(t, silent(t, ps, plain))
	})
	t.Run("DeafDropsEverythingToASubscriber", func(t *testing.T) {
		p, c, plain := setup(t, nil)
		ps := subscribe(t, c)
		p.Deaf.Store(true)
		require.True(t, silent(t, ps, plain))
		require.Positive(t, p.Dropped())
	})
	t.Run("DropMessagesKeepsTheRest", func(t *testing.T) {
		p, c, plain := setup(t, nil)
		ps := subscribe(t, c)
		p.DropMessages.Store(true)
		require.True(t, silent(t, ps, plain))
		require.EqualValues(t, 1, p.Dropped())
		p.DropMessages.Store(false)
		p.SetDropRate(1)
		require.True(t, silent(t, ps, plain), "a drop rate of 1 drops every message")
		p.SetDropRate(0)
		hears(t, ps, plain)
	})
	t.Run("SubDelayDelaysMessages", func(t *testing.T) {
		p, c, plain := setup(t, nil)
		ps := subscribe(t, c)
		p.SubDelay.Store(int64(100 * time.Millisecond))
		start := time.Now()
		require.NoError(t, plain.Publish(ctx, "ch", "m").Err())
		_, err := ps.ReceiveMessage(ctx)
		require.NoError(t, err)
		require.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond)
	})
}
