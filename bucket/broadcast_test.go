package bucket_test

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/bucket"
	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/pool"
)

// TestMoveAnnouncesBroadcastsAndKeepsThem: a move publishes a small notice
// per due broadcast job, whatever its body, and keeps the envelope under a
// field no later publication reuses (not even of a job re-added under the
// same id), for a bounded time; expired envelopes are trimmed.
func TestMoveAnnouncesBroadcastsAndKeepsThem(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			ctx, rdb, prefix, s := setup(t, be)
			k := keys.ForBucket(prefix, "t", 0)
			// An envelope published long ago, to be trimmed by the next move.
			stale := keys.SentField("old", "0")
			require.NoError(t, rdb.HSet(ctx, k.Sent(), stale, "1|1|0|0|||b\n").Err())
			require.NoError(t, rdb.ZAdd(ctx, k.SentAt(), redis.Z{Score: 0, Member: stale}).Err())

			ps := rdb.Subscribe(ctx, keys.BroadcastChannel(prefix))
			defer ps.Close()
			_, err := ps.Receive(ctx)
			require.NoError(t, err)

			body := bytes.Repeat([]byte{'x'}, 1<<20)
			add := func(id string) {
				_, err := s.Add(ctx, &pool.Job{Topic: "t", ID: id, Body: body, Broadcast: true}, pool.Placement{Limit: 10})
				require.NoError(t, err)
			}
			// receive returns the next notice's id and Sent field after
			// checking the envelope it names is the job announced.
			receive := func() (id, field string) {
				msg, err := ps.ReceiveMessage(ctx)
				require.NoError(t, err)
				require.Less(t, len(msg.Payload), 100, "a notice carries no body")
				parts := strings.Split(msg.Payload, "\n")
				require.Len(t, parts, 4)
				require.Equal(t, keys.Address("t", 0), parts[0])
				field = keys.SentField(parts[1], parts[2])
				env, err := rdb.HGet(ctx, k.Sent(), field).Bytes()
				require.NoError(t, err)
				job, err := pool.JobOf("t", parts[1], env)
				require.NoError(t, err)
				require.Equal(t, parts[3], strconv.FormatInt(job.CreatedAt.UnixMilli(), 10))
				require.True(t, bytes.Equal(body, job.Body))
				return parts[1], field
			}

			for i := range 3 {
				add(fmt.Sprint("b", i))
			}
			time.Sleep(2 * time.Millisecond)
			res, err := bucket.Move(ctx, rdb, prefix, "t", 0, 100)
			require.NoError(t, err)
			require.Equal(t, 3, res.Moved)
			fields := map[string]bool{}
			for i := range 3 {
				id, field := receive()
				require.Equal(t, fmt.Sprint("b", i), id)
				fields[field] = true
			}
			require.Zero(t, rdb.HLen(ctx, k.Pool()).Val(), "published jobs leave the pool")
			require.False(t, rdb.HExists(ctx, k.Sent(), stale).Val(), "expired envelope trimmed")
			require.ErrorIs(t, rdb.ZScore(ctx, k.SentAt(), stale).Err(), redis.Nil)
			ttl := rdb.PTTL(ctx, k.Sent()).Val()
			require.True(t, ttl > 0 && ttl <= bucket.BroadcastRetention, "sent expires, ttl %v", ttl)

			// The same id again: a new field; the first envelope stays.
			add("b0")
			time.Sleep(2 * time.Millisecond)
			res, err = bucket.Move(ctx, rdb, prefix, "t", 0, 100)
			require.NoError(t, err)
			require.Equal(t, 1, res.Moved)
			id, field := receive()
			require.Equal(t, "b0", id)
			require.False(t, fields[field], "a field was reused")
			require.EqualValues(t, 4, rdb.HLen(ctx, k.Sent()).Val())
			require.EqualValues(t, 4, rdb.ZCard(ctx, k.SentAt()).Val())
		})
	}
}
