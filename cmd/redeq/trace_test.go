package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// TestCLIShowsSilentConsumersJobs: a job in flight whose consumer missed
// its heartbeats past its timeout, not yet recovered, is shown as held by
// a silent consumer, with its last heartbeat, in list inflight, get and
// their JSON; a job of a consumer that heartbeats shows how long it has
// run.
func TestCLIShowsSilentConsumersJobs(t *testing.T) {
	for _, b := range testutil.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			e := newEnv(t, b)
			rdb := b.New(t)
			cfg := e.c.Config()
			tm, err := rdb.Time(ctx).Result()
			require.NoError(t, err)
			now := tm.UnixMilli()
			old := now - time.Hour.Milliseconds()
			beats := map[string]int64{"ghost": old, "live": now}
			for id, cid := range map[string]string{"g-1": "ghost", "l-1": "live"} {
				require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "orders", ID: id, Delay: time.Hour}))
				var k keys.Bucket
				for n := range cfg.Concurrency {
					if kb := keys.ForBucket(cfg.Prefix, "orders", n); rdb.ZScore(ctx, kb.Scheduled(), id).Err() == nil {
						k = kb
					}
				}
				// What a fetch by cid leaves behind.
				require.NoError(t, rdb.ZRem(ctx, k.Scheduled(), id).Err())
				require.NoError(t, rdb.ZAdd(ctx, k.InFlight(cid), redis.Z{Score: float64(now), Member: "7:" + id}).Err())
				require.NoError(t, rdb.HSet(ctx, k.State(), id, "7@"+cid).Err())
				z := redis.Z{Score: float64(beats[cid]), Member: cid}
				require.NoError(t, rdb.ZAdd(ctx, keys.ForTopic(cfg.Prefix, "orders").Consumers(), z).Err())
				require.NoError(t, rdb.ZAdd(ctx, keys.Alive(cfg.Prefix), z).Err())
				require.NoError(t, rdb.HSet(ctx, keys.AliveTopics(cfg.Prefix), cid, keys.Address("orders", cfg.Concurrency), keys.AliveTimeout(cid), 15000).Err())
			}
			since := time.UnixMilli(old).UTC().Format(time.RFC3339Nano)

			out := e.ok(t, "list", "orders", "inflight")
			require.Regexp(t, `(?m)^g-1\s+0\s+ghost\s+\S+\s+consumer silent since `+since, out)
			require.Regexp(t, `(?m)^l-1\s+0\s+live\s+\S+\s+\d+(\.\d+)?(ms|s)\b`, out)

			out = e.ok(t, "get", "orders", "g-1")
			require.Regexp(t, `(?m)^consumer silent since:\s+`+since, out)
			require.Regexp(t, `(?m)^next attempt:\s+consumer ghost silent since `+since, out)
			require.NotContains(t, e.ok(t, "get", "orders", "l-1"), "silent")

			var j struct {
				SilentSince *time.Time `json:"consumer_silent_since"`
			}
			require.NoError(t, json.Unmarshal([]byte(e.ok(t, "get", "orders", "g-1", "-o", "json")), &j))
			require.NotNil(t, j.SilentSince)
			require.True(t, j.SilentSince.Equal(time.UnixMilli(old)))
		})
	}
}

// TestCLIShowsDoneJobsAndTheirFailures: on a topic with retention, list
// done lists the acked jobs with when they finished, and get shows a done
// job's state, when and on which consumer it finished, and each failed
// delivery before the ack with its time; a retrying job shows when its
// last delivery failed.
func TestCLIShowsDoneJobsAndTheirFailures(t *testing.T) {
	for _, b := range testutil.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			e := newEnv(t, b)
			w, err := redeq.New(b.New(t), e.c.Config())
			require.NoError(t, err)
			var calls atomic.Int32
			require.NoError(t, w.Register(redeq.ListenerFunc("orders", func(_ context.Context, j *redeq.Job, ch *redeq.Channel) error {
				if j.ID == "flaky" && calls.Add(1) <= 2 {
					return fmt.Errorf("partner down %d", calls.Load())
				}
				if j.ID == "stuck" {
					return errors.New("always")
				}
				ch.Ack()
				return nil
			}, redeq.WithRetry(3, 10*time.Millisecond, 10*time.Millisecond, time.Hour), redeq.WithRetention(time.Hour))))
			require.NoError(t, w.Start(ctx))
			t.Cleanup(func() { _ = w.Shutdown(context.Background()) })
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "orders", ID: "flaky"}))
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "orders", ID: "stuck"}))
			waitFor(t, func() bool {
				j, err := e.c.Get(ctx, "orders", "flaky")
				return err == nil && j.State == redeq.StateDone
			})
			waitFor(t, func() bool {
				j, err := e.c.Get(ctx, "orders", "stuck")
				return err == nil && j.State == redeq.StateScheduled && j.Attempt == 3
			})

			out := e.ok(t, "list", "orders", "done")
			require.Regexp(t, `(?m)^ID\s+STATE\s+ATTEMPT\s+CREATED\s+DUE/SINCE\s+FAILED AT\s+REASON`, out)
			require.Regexp(t, `(?m)^flaky\s+done\s+2\s+20\d\d-\S+\s+20\d\d-\S+\s+20\d\d-\S+\s+partner down 2$`, out)

			out = e.ok(t, "get", "orders", "flaky")
			require.Regexp(t, `(?m)^state:\s+done$`, out)
			require.Regexp(t, `(?m)^finished:\s+20\d\d-`, out)
			require.Regexp(t, `(?m)^consumer:\s+`+w.ConsumerID()+`$`, out)
			require.Regexp(t, `(?m)^failed at:\s+20\d\d-`, out)
			require.Regexp(t, `(?m)^failure 1:\s+20\d\d-\S+\s+on [0-9a-f-]{36}\s+partner down 2$`, out)
			require.Regexp(t, `(?m)^failure 2:\s+20\d\d-\S+\s+on [0-9a-f-]{36}\s+partner down 1$`, out)
			require.Regexp(t, `(?m)^next attempt:\s+none: done, acked at 20\d\d-`, out)

			var j struct {
				State      string     `json:"state"`
				FinishedAt *time.Time `json:"finished_at"`
				FailedAt   *time.Time `json:"failed_at"`
				Failures   []struct {
					At    *time.Time `json:"at"`
					Error string     `json:"error"`
				} `json:"failures"`
			}
			require.NoError(t, json.Unmarshal([]byte(e.ok(t, "get", "orders", "flaky", "-o", "json")), &j))
			require.Equal(t, "done", j.State)
			require.NotNil(t, j.FinishedAt)
			require.Len(t, j.Failures, 2)
			require.Equal(t, "partner down 2", j.Failures[0].Error)
			require.True(t, j.FailedAt.Equal(*j.Failures[0].At))
			require.False(t, j.Failures[0].At.After(*j.FinishedAt))

			out = e.ok(t, "get", "orders", "stuck")
			require.Regexp(t, `(?m)^failed at:\s+20\d\d-`, out)
			require.Regexp(t, `(?m)^last failure:\s+20\d\d-`, out)
			require.False(t, strings.Contains(out, "about"), "recorded, not estimated")
		})
	}
}
