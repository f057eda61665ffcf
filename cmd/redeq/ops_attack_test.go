package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// TestCLIPurgeSparesJobsThatDiedAfterItsQuestion: purge removes the dead
// jobs its question named, not a job of the same id that died after it:
// one deleted and added again, or one requeued, that died again while the
// question waited stays dead.
func TestCLIPurgeSparesJobsThatDiedAfterItsQuestion(t *testing.T) {
	for _, b := range testutil.Backends(t) {
		for _, how := range []string{"readded", "requeued"} {
			t.Run(b.Name+"/"+how, func(t *testing.T) {
				e := newEnv(t, b)
				ctx := context.Background()
				park(t, e, "d1", "d2")
				old := e.job(t, "orders", "d1")
				stdin := &answerAfter{before: func() {
					if how == "readded" {
						_, err := e.c.Delete(ctx, "orders", "d1")
						require.NoError(t, err)
						time.Sleep(5 * time.Millisecond) // a CreatedAt of its own
						park(t, e, "d1")
					} else {
						w, err := redeq.New(e.b.New(t), e.c.Config())
						require.NoError(t, err)
						require.NoError(t, w.Register(redeq.ListenerFunc("orders", func(context.Context, *redeq.Job, *redeq.Channel) error {
							return redeq.SkipRetry(errors.New("boom again"))
						})))
						require.NoError(t, w.Start(ctx))
						require.NoError(t, e.c.RequeueDead(ctx, "orders", "d1", 0))
						waitFor(t, func() bool {
							j, err := e.c.Get(ctx, "orders", "d1")
							return err == nil && j.State == redeq.StateDead && j.Reason != old.Reason
						})
						require.NoError(t, w.Shutdown(ctx))
					}
				}, r: strings.NewReader("y\n")}
				var out, errb strings.Builder
				code := run(ctx, []string{"--redis", e.url, "--prefix", e.prefix, "purge", "dead", "orders"}, stdin, &out, &errb)
				require.Equal(t, 0, code, errb.String())
				require.Contains(t, errb.String(), "Remove the 2 dead jobs of orders, for good? [y/N]")
				_, err := e.c.Get(ctx, "orders", "d2")
				require.ErrorIs(t, err, redeq.ErrJobNotFound, "d2 was named")
				j, err := e.c.Get(ctx, "orders", "d1")
				require.NoError(t, err, "d1 died again after the question (%s): it stays", how)
				require.Equal(t, redeq.StateDead, j.State)
				if how == "readded" {
					require.NotEqual(t, old.CreatedAt, j.CreatedAt)
				}
			})
		}
	}
}
