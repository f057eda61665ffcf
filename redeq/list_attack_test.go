package redeq_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/redeq"
)

// TestListPagesTiedParkedJobsOnce: un_acked and dead jobs parked in the
// same millisecond (one batch of outcomes) are each listed once across
// the pages of a List, also when the page's last job leaves between the
// pages, or jobs before it do.
func TestListPagesTiedParkedJobsOnce(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		for _, st := range []redeq.State{redeq.StateUnAck, redeq.StateDead} {
			for _, leave := range []string{"last", "before", "none"} {
				t.Run(string(st)+"/"+leave, func(t *testing.T) {
					topic := "tied-" + string(st) + "-" + leave
					one := e.another(t, func(c *config.Config) { c.Concurrency = 1 })
					var batch []*redeq.Job
					for i := range 200 {
						batch = append(batch, &redeq.Job{Topic: topic, ID: fmt.Sprintf("p%03d", i)})
					}
					require.NoError(t, one.AddBatch(ctx, batch))
					worker := e.another(t, func(c *config.Config) { c.Concurrency = 1; c.Workers = 200 })
					startWith(t, worker, newListener(topic, func(_ context.Context, job *redeq.Job, _ *redeq.Channel) error {
						if st == redeq.StateDead {
							return redeq.SkipRetry(errors.New("bad"))
						}
						return nil
					}))
					waitFor(t, 20*time.Second, "parked", func() bool {
						s := stats(t, one, topic)
						return s.UnAck+s.Dead == 200
					})
					require.NoError(t, worker.Shutdown(ctx))
					stayed := map[string]bool{}
					for i := range 200 {
						stayed[fmt.Sprintf("p%03d", i)] = true
					}
					page := firstPage(t, one, topic, st, 50)
					lastAt := page.Jobs[49].RunAt
					ties := 0
					for _, j := range listFrom(t, one, topic, st, 1000, "") {
						if j.RunAt.Equal(lastAt) {
							ties++
						}
					}
					t.Logf("%d jobs share the parked time of page 1's last", ties)
					var gone []string
					switch leave {
					case "last":
						gone = []string{page.Jobs[49].ID}
					case "before":
						gone = []string{page.Jobs[49].ID, page.Jobs[10].ID, page.Jobs[48].ID}
					}
					for _, id := range gone {
						_, err := one.Delete(ctx, topic, id)
						require.NoError(t, err)
						delete(stayed, id)
					}
					rest := listFrom(t, one, topic, st, 50, page.Next)
					var ids []string
					for _, j := range rest[:min(5, len(rest))] {
						ids = append(ids, j.ID+"@"+j.RunAt.Format("15:04:05.000"))
					}
					t.Logf("page 1 ends at %s@%s; page 2 starts %s", page.Jobs[49].ID, lastAt.Format("15:04:05.000"), strings.Join(ids, " "))
					listedOnce(t, stayed, append(page.Jobs, rest...))
				})
			}
		}
	})
}

// TestListPagesInFlightOnceWhenAConsumerLeaves: across the pages of a List
// of in-flight jobs, a job that stays in flight with the same consumer is
// listed once, also when the consumer whose set the last page ended in
// shuts down, or one before it does, between the pages.
func TestListPagesInFlightOnceWhenAConsumerLeaves(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		for _, leaving := range []int{0, 1} { // before the cursor's consumer, or that one
			t.Run(fmt.Sprint("leaving", leaving), func(t *testing.T) {
				topic := fmt.Sprint("inflight-leave-", leaving)
				one := e.another(t, func(c *config.Config) { c.Concurrency = 1 })
				clients := map[string]*redeq.Client{}
				for range 3 {
					c := e.another(t, func(c *config.Config) { c.Concurrency = 1; c.ShutdownTimeout = 100 * time.Millisecond })
					l := newListener(topic, func(ctx context.Context, _ *redeq.Job, _ *redeq.Channel) error {
						<-ctx.Done()
						return ctx.Err()
					})
					l.workers = 20
					startWith(t, c, l)
					clients[c.ConsumerID()] = c
				}
				var batch []*redeq.Job
				for i := range 60 {
					batch = append(batch, &redeq.Job{Topic: topic, ID: fmt.Sprintf("f%03d", i)})
				}
				require.NoError(t, one.AddBatch(ctx, batch))
				waitFor(t, 20*time.Second, "60 in flight", func() bool { return stats(t, one, topic).InFlight == 60 })
				holdersAt := func() map[string]string {
					out := map[string]string{}
					for _, j := range listFrom(t, one, topic, redeq.StateInFlight, 1000, "") {
						out[j.ID] = j.Consumer
					}
					return out
				}
				before := holdersAt()
				page := firstPage(t, one, topic, redeq.StateInFlight, 30)
				var order []string
				for _, j := range page.Jobs {
					if len(order) == 0 || order[len(order)-1] != j.Consumer {
						order = append(order, j.Consumer)
					}
				}
				require.Len(t, order, 2, "page 1 ends in the second consumer's set")
				gone := order[leaving]
				sctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
				_ = clients[gone].Shutdown(sctx)
				cancel()
				rest := listFrom(t, one, topic, redeq.StateInFlight, 30, page.Next)
				after := holdersAt()
				stayed := map[string]bool{}
				for id, holder := range before {
					if holder != gone && after[id] == holder {
						stayed[id] = true
					}
				}
				require.NotEmpty(t, stayed)
				t.Logf("%d jobs stayed; consumer %d of the page left", len(stayed), leaving)
				listedOnce(t, stayed, append(page.Jobs, rest...))
			})
		}
	})
}
