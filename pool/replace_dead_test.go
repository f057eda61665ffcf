package pool_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/pool"
)

// TestAddReplacingDead: an Add that replaces dead jobs replaces a dead
// job of its id (its reason, its dead entry and its envelope gone, the
// new one scheduled), adds when the id is absent, and refuses with
// ErrJobExists, writing nothing, a job of the id that is scheduled,
// ready, in flight or parked; run twice (a rerun after a lost reply) it
// gives the first run's answer and stores the job once.
func TestAddReplacingDead(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			ctx := context.Background()
			admin := be.New(t)
			c := be.New(t)
			h := testutil.HookScript(testutil.LoadScript(t, "put.lua"))
			c.AddHook(h)
			at := pool.Placement{Bucket: 0, Limit: 10}
			due := time.Now().Add(time.Hour).Truncate(time.Millisecond)
			job := func(id string) *pool.Job {
				return &pool.Job{Topic: "t", ID: id, Body: []byte("new"), RunAt: due}
			}
			for _, tc := range []struct {
				name string
				seed func(k keys.Bucket) []testutil.Entry
			}{
				{"Scheduled", func(k keys.Bucket) []testutil.Entry {
					return []testutil.Entry{testutil.Hash(k.Pool(), "j=E"), testutil.ZSet(k.Scheduled(), "j=5")}
				}},
				{"Ready", func(k keys.Bucket) []testutil.Entry {
					return []testutil.Entry{testutil.Hash(k.Pool(), "j=E"), testutil.Hash(k.State(), "j=r"), testutil.List(k.Ready(), "j")}
				}},
				{"InFlight", func(k keys.Bucket) []testutil.Entry {
					return []testutil.Entry{testutil.Hash(k.Pool(), "j=E"), testutil.Hash(k.State(), "j=tok@c")}
				}},
				{"UnAck", func(k keys.Bucket) []testutil.Entry {
					return []testutil.Entry{testutil.Hash(k.Pool(), "j=E"), testutil.ZSet(k.UnAck(), "j=5")}
				}},
			} {
				t.Run("Refuses"+tc.name, func(t *testing.T) {
					prefix := testutil.Prefix(t)
					testutil.Seed(t, admin, tc.seed(keys.ForBucket(prefix, "t", 0))...)
					before := testutil.DumpUnder(t, admin, prefix)
					_, err := pool.NewStore(c, prefix).AddReplacingDead(ctx, job("j"), at)
					require.ErrorIs(t, err, pool.ErrJobExists)
					require.Equal(t, before, testutil.DumpUnder(t, admin, prefix), "a refused Add wrote something")
				})
			}
			t.Run("ReplacesDead", func(t *testing.T) {
				prefix := testutil.Prefix(t)
				k := keys.ForBucket(prefix, "t", 0)
				testutil.Seed(t, admin, testutil.Hash(k.Pool(), "j=E", "k=F"), testutil.ZSet(k.Dead(), "j=5", "k=6"),
					testutil.Hash(k.Reasons(), "j=r", "k=s"))
				h.RunTwice(1)
				replaced, err := pool.NewStore(c, prefix).AddReplacingDead(ctx, job("j"), at)
				require.NoError(t, err)
				require.True(t, replaced)
				got, err := pool.NewStore(admin, prefix).Get(ctx, "t", "j", 0)
				require.NoError(t, err)
				require.Equal(t, pool.StateScheduled, got.State)
				require.Equal(t, "new", string(got.Body))
				require.True(t, due.Equal(got.RunAt))
				require.Equal(t, []string{"k"}, admin.ZRange(ctx, k.Dead(), 0, -1).Val(), "only the other dead job stays dead")
				require.Equal(t, map[string]string{"k": "s"}, admin.HGetAll(ctx, k.Reasons()).Val())
			})
			t.Run("AddsWhenAbsent", func(t *testing.T) {
				prefix := testutil.Prefix(t)
				h.RunTwice(1)
				replaced, err := pool.NewStore(c, prefix).AddReplacingDead(ctx, job("j"), at)
				require.NoError(t, err)
				require.False(t, replaced, "a rerun does not call its own job replaced")
				require.EqualValues(t, 1, admin.HLen(ctx, keys.ForBucket(prefix, "t", 0).Pool()).Val())
			})
		})
	}
}
