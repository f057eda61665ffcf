package redeq_test

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// replOffsets returns the master's replication offset and the offset its
// first replica last acknowledged, as the master sees them.
func replOffsets(t *testing.T, master *redis.Client) (own, acked int64) {
	t.Helper()
	info, err := master.Info(context.Background(), "replication").Result()
	require.NoError(t, err)
	acked = -1
	for line := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "master_repl_offset:"); ok {
			own, _ = strconv.ParseInt(v, 10, 64)
		}
		if v, ok := strings.CutPrefix(line, "slave0:"); ok {
			for f := range strings.SplitSeq(v, ",") {
				if n, ok := strings.CutPrefix(f, "offset="); ok {
					acked, _ = strconv.ParseInt(n, 10, 64)
				}
			}
		}
	}
	return own, acked
}

// asleep starts DEBUG SLEEP on srv and returns once srv stopped answering.
func asleep(t *testing.T, srv *testutil.Server, d time.Duration) <-chan error {
	t.Helper()
	slept := make(chan error, 1)
	go func() {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: d + 5*time.Second})
		defer c.Close()
		slept <- c.Do(context.Background(), "DEBUG", "SLEEP", d.Seconds()).Err()
	}()
	probe := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: 20 * time.Millisecond, MaxRetries: -1})
	defer probe.Close()
	testutil.Eventually(t, 5*time.Second, "replica asleep", func() bool { return probe.Ping(context.Background()).Err() != nil })
	return slept
}

// TestDurableAddOnPair: with WaitReplicas 1 on a master and its replica,
// Add returns only once the replica holds the job, even when the replica
// is busy; with the replica down, Add returns ErrNotReplicated once
// WaitTimeout has passed, and the job is stored on the master.
func TestDurableAddOnPair(t *testing.T) {
	t.Parallel()
	pair := testutil.StartPair(t, "--enable-debug-command", "yes")
	ctx := context.Background()
	master := pair.Master.Client(&redis.Options{ReadTimeout: 10 * time.Second})
	cfg := testutil.Config(t)
	cfg.WaitReplicas, cfg.WaitTimeout = 1, 5*time.Second
	c, err := redeq.New(master, cfg)
	require.NoError(t, err)
	require.NoError(t, c.Add(ctx, &redeq.Job{Topic: "orders", ID: "warm"})) // the topic is recorded

	before, _ := replOffsets(t, master)
	slept := asleep(t, pair.Replica, 500*time.Millisecond)
	require.NoError(t, c.Add(ctx, &redeq.Job{Topic: "orders", ID: "1", Body: []byte("b")}))
	// The asleep replica acknowledges nothing until it wakes; Add's WAIT
	// waits for its acknowledgement of an offset past the write.
	_, acked := replOffsets(t, master)
	require.Greater(t, acked, before, "Add returned before the replica acknowledged its write")
	require.NoError(t, <-slept)
	replica := pair.Replica.Client(nil)
	pool := keys.ForBucket(cfg.Prefix, "orders", 0).Pool()
	require.True(t, replica.HExists(ctx, pool, "1").Val(), "the replica holds the job")

	// The replica is down: nothing acknowledges.
	pair.Replica.Kill()
	cfg.WaitTimeout = 200 * time.Millisecond
	short, err := redeq.New(master, cfg)
	require.NoError(t, err)
	err = short.Add(ctx, &redeq.Job{Topic: "orders", ID: "2"})
	require.ErrorIs(t, err, redeq.ErrNotReplicated)
	require.ErrorContains(t, err, "0 of 1 replicas")
	j, err := short.Get(ctx, "orders", "2")
	require.NoError(t, err, "the master stored the job all the same")
	require.Equal(t, "2", j.ID)

	err = short.AddBatch(ctx, []*redeq.Job{{Topic: "orders", ID: "3"}, {Topic: "orders", ID: "4"}})
	var be *redeq.BatchError
	require.ErrorAs(t, err, &be)
	for _, e := range be.Errs {
		require.ErrorIs(t, e, redeq.ErrNotReplicated)
	}
	require.ErrorIs(t, short.Put(ctx, &redeq.Job{Topic: "orders", ID: "5"}), redeq.ErrNotReplicated)
	require.ErrorIs(t, short.Update(ctx, "orders", "5", func(j *redeq.Job) error { j.Body = []byte("x"); return nil }), redeq.ErrNotReplicated)

	off := testutil.Config(t)
	plain, err := redeq.New(master, off)
	require.NoError(t, err)
	require.NoError(t, plain.Add(ctx, &redeq.Job{Topic: "orders", ID: "6"}), "without the option nothing waits")
}

// TestDurableRerunWaitsForReplica: go-redis sends a pipeline again when
// its reply is lost, on a new connection when the first one broke. The
// rerun of an Add answers from the first run's op key and writes nothing;
// the Add must still return nil only once the replica acknowledged the
// job. Here the replica sleeps through both runs, so the answer is
// ErrNotReplicated. (The server's WAIT on the new connection waits for
// the master's whole replication offset, the first run's write included,
// though that connection wrote nothing: this test keeps it so.)
func TestDurableRerunWaitsForReplica(t *testing.T) {
	t.Parallel()
	pair := testutil.StartPair(t, "--enable-debug-command", "yes")
	ctx := context.Background()
	const name = "durable-rerun"
	master := pair.Master.Client(&redis.Options{ClientName: name, ReadTimeout: 10 * time.Second})
	admin := pair.Master.Client(nil)
	h := newScriptHook(t, "pool/add.lua")
	master.AddHook(h)
	cfg := testutil.Config(t)
	cfg.WaitReplicas, cfg.WaitTimeout = 1, 300*time.Millisecond
	c, err := redeq.New(master, cfg)
	require.NoError(t, err)
	require.NoError(t, c.Add(ctx, &redeq.Job{Topic: "orders", ID: "warm"}))

	var killed int64
	h.set(func(ctx context.Context, _ redis.Cmder, next func() error) error {
		if err := next(); err != nil {
			return err
		}
		// The reply is lost with the connection; go-redis sends the
		// pipeline again on a new one.
		list, err := admin.ClientList(ctx).Result()
		if err != nil {
			return err
		}
		for line := range strings.SplitSeq(list, "\n") {
			if strings.Contains(line, " name="+name+" ") {
				id, _ := strings.CutPrefix(strings.Fields(line)[0], "id=")
				n, err := admin.Do(ctx, "CLIENT", "KILL", "ID", id).Int64()
				if err != nil {
					return err
				}
				killed += n
			}
		}
		return next()
	})
	slept := asleep(t, pair.Replica, 3*time.Second)
	err = c.Add(ctx, &redeq.Job{Topic: "orders", ID: "1"})
	h.set(nil)
	require.Positive(t, killed, "no connection of the client was found to break")
	require.ErrorIs(t, err, redeq.ErrNotReplicated, "the rerun's WAIT confirmed a write the sleeping replica never acknowledged")
	require.NoError(t, <-slept)
	j, err := c.Get(ctx, "orders", "1")
	require.NoError(t, err, "the master stored the job")
	require.Equal(t, "1", j.ID)
}

// TestDurableSettleWaitsForReplica: an ack the replica does not
// acknowledge is not taken as applied: the consumer settles it again, with
// backoff, until the replica is back and has it; Shutdown then has nothing
// left unsettled.
func TestDurableSettleWaitsForReplica(t *testing.T) {
	t.Parallel()
	pair := testutil.StartPair(t)
	ctx := context.Background()
	logs := &syncBuffer{}
	cfg := testutil.Config(t)
	cfg.WaitReplicas, cfg.WaitTimeout = 1, 100*time.Millisecond
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c, err := redeq.New(pair.Master.Client(nil), cfg)
	require.NoError(t, err)
	fetched, release := make(chan struct{}, 1), make(chan struct{})
	startWith(t, c, newListener("orders", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
		fetched <- struct{}{}
		<-release
		ch.Ack()
		return nil
	}))
	t.Cleanup(func() { _ = c.Shutdown(context.Background()) })
	require.NoError(t, c.Add(ctx, &redeq.Job{Topic: "orders", ID: "1"}))
	<-fetched

	pair.Replica.Kill()
	close(release)
	testutil.Eventually(t, 10*time.Second, "the ack settled again", func() bool {
		out := logs.String()
		return strings.Contains(out, "settle failed") && strings.Contains(out, "not acknowledged by enough replicas")
	})
	pair.Replica.Start() // empty: it syncs in full, the ack included
	require.NoError(t, c.Shutdown(ctx))
	require.NotContains(t, logs.String(), "not applied before shutdown")
	st := stats(t, c, "orders")
	require.Zero(t, st.Pool+st.InFlight)
}

// TestDurableConfigChecksReadTimeout: a WaitTimeout the client's read
// timeout would cut short is refused, naming the field.
func TestDurableConfigChecksReadTimeout(t *testing.T) {
	t.Parallel()
	cfg := config.Default()
	cfg.WaitReplicas, cfg.WaitTimeout = 1, 5*time.Second
	rc := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ReadTimeout: time.Second})
	defer rc.Close()
	_, err := redeq.New(rc, cfg)
	var fe *config.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "WaitTimeout", fe.Field)
	require.ErrorContains(t, err, "shorter than the Redis client's ReadTimeout 1s")
	require.False(t, errors.Is(err, redeq.ErrNotReplicated))
}
