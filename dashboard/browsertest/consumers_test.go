package browsertest

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/dashboard"
	"github.com/redeq-go/redeq/redeq"
)

// TestConsumersPage: from the overview, the header's Consumers link shows
// the consumer that runs a job, by its client name and host, with the job
// it holds; the job's link opens it in flight, and the topic's in-flight
// list links back to the consumer's row.
func TestConsumersPage(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			c, base := serve(t, b, dashboard.Options{})
			cfg := c.Config()
			cfg.ClientName = "billing-7"
			worker, err := redeq.New(b.New(t), cfg)
			require.NoError(t, err)
			held, release := make(chan struct{}), make(chan struct{})
			require.NoError(t, worker.Register(redeq.ListenerFunc("orders", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
				close(held)
				<-release
				ch.Ack()
				return nil
			})))
			require.NoError(t, worker.Start(ctx))
			t.Cleanup(func() { _ = worker.Shutdown(context.Background()) })
			defer close(release)
			add(t, c, "o-1", "x", 0)
			select {
			case <-held:
			case <-time.After(10 * time.Second):
				t.Fatal("the job did not start")
			}
			host, _ := os.Hostname()
			row := `tr[data-consumer="` + worker.ConsumerID() + `"]`

			tab := browser(t)
			require.NoError(t, chromedp.Do(tab,
				chromedp.Navigate(base+"/"),
				chromedp.Click(chromedp.CSS(`#nav-consumers`)),
				chromedp.WaitVisible(chromedp.CSS(row)),
			))
			require.Equal(t, "billing-7", strings.TrimSpace(text(t, tab, row+` td.name`)))
			require.Equal(t, host, strings.TrimSpace(text(t, tab, row+` td.host`)))
			require.Equal(t, "orders", strings.TrimSpace(text(t, tab, row+` td.topics`)))
			require.Equal(t, "1", strings.TrimSpace(text(t, tab, row+` td.inflight`)))
			require.Contains(t, text(t, tab, row+` td.running li[data-job="o-1"]`), "orders / o-1")

			require.NoError(t, chromedp.Do(tab,
				chromedp.Click(chromedp.CSS(row+` td.running li[data-job="o-1"] a`)),
				chromedp.WaitVisible(chromedp.CSS(`#state`)),
			))
			require.Equal(t, "inflight", strings.TrimSpace(text(t, tab, `#state`)))

			require.NoError(t, chromedp.Do(tab,
				chromedp.Navigate(base+"/topic?t=orders&state=inflight"),
				chromedp.WaitVisible(chromedp.CSS(`tr[data-id="o-1"] td.consumer a`)),
			))
			require.Equal(t, worker.ConsumerID(), strings.TrimSpace(text(t, tab, `tr[data-id="o-1"] td.consumer`)))
			require.NotEmpty(t, strings.TrimSpace(text(t, tab, `tr[data-id="o-1"] td.running`)))
			require.NoError(t, chromedp.Do(tab,
				chromedp.Click(chromedp.CSS(`tr[data-id="o-1"] td.consumer a`)),
				chromedp.WaitVisible(chromedp.CSS(row)),
			))
			loc, err := chromedp.Run(tab, chromedp.Location())
			require.NoError(t, err)
			require.True(t, strings.HasSuffix(loc, "/consumers#c-"+worker.ConsumerID()), loc)
		})
	}
}

// TestRedisPage: the header's Redis link shows the server and the keys of
// the prefix.
func TestRedisPage(t *testing.T) {
	b := backends(t)[0]
	c, base := serve(t, b, dashboard.Options{})
	add(t, c, "o-1", "x", time.Hour)
	tab := browser(t)
	require.NoError(t, chromedp.Do(tab,
		chromedp.Navigate(base+"/"),
		chromedp.Click(chromedp.CSS(`#nav-redis`)),
		chromedp.WaitVisible(chromedp.CSS(`#servers`)),
	))
	require.Contains(t, text(t, tab, `#prefix-keys`), "(exact)")
}
