package dashboard_test

import (
	"context"
	"html"
	"net/http"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/dashboard"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// TestConsumersPageShowsWhoRunsWhat: the consumers page lists each
// consumer with its name, host, pid, topics and the jobs it holds with
// their running time, each job linked to its page; the topic's in-flight
// list names the consumer (linked to its row) and the running time; a
// name a producer chose is escaped; with no consumer the page says so.
func TestConsumersPageShowsWhoRunsWhat(t *testing.T) {
	for _, b := range testutil.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			e := setup(t, b, dashboard.Options{})
			code, body := e.get(t, "/consumers")
			require.Equal(t, http.StatusOK, code)
			require.Contains(t, body, `id="none"`)

			cfg := e.c.Config()
			cfg.ClientName = `<b>web</b>-1`
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
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "orders", ID: "o-1"}))
			select {
			case <-held:
			case <-time.After(10 * time.Second):
				t.Fatal("the job did not start")
			}
			host, _ := os.Hostname()
			cid := worker.ConsumerID()

			code, body = e.get(t, "/consumers")
			require.Equal(t, http.StatusOK, code)
			row := regexp.MustCompile(`(?s)<tr id="c-` + cid + `".*?</tr>`).FindString(body)
			require.NotEmpty(t, row, body)
			require.Contains(t, row, `&lt;b&gt;web&lt;/b&gt;-1`, "escaped")
			require.NotContains(t, row, `<b>web</b>`)
			require.Contains(t, row, html.EscapeString(host))
			require.Regexp(t, `class="n pid">\d+<`, row)
			require.Contains(t, row, `href="/topic?t=orders&amp;state=inflight">orders</a>`)
			require.Contains(t, row, `class="n inflight">1<`)
			require.Regexp(t, `<li data-job="o-1"><a href="/job\?t=orders&amp;id=o-1">orders / o-1</a> <span class="for">[0-9.]+(µs|ms|s|m[0-9.]*s)</span></li>`, row)
			require.NotContains(t, row, `data-flag="silent"`)

			code, body = e.get(t, "/topic?t=orders&state=inflight")
			require.Equal(t, http.StatusOK, code)
			require.Contains(t, body, "<th>Consumer</th><th>Running for</th>")
			require.Contains(t, body, `<td class="consumer"><a href="/consumers#c-`+cid+`">`+cid+`</a></td>`)
			require.Regexp(t, `<td class="n running">[0-9.]+(µs|ms|s|m[0-9.]*s)</td>`, body)
		})
	}
}

// TestRedisPageShowsTheServers: the Redis page shows each server (each
// master of a cluster) with its version and memory, and the keys under
// the prefix, exact on a small deployment.
func TestRedisPageShowsTheServers(t *testing.T) {
	for _, b := range testutil.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			e := setup(t, b, dashboard.Options{})
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "orders", ID: "1", Delay: time.Hour}))
			info, err := e.c.RedisInfo(ctx)
			require.NoError(t, err)
			code, body := e.get(t, "/redis")
			require.Equal(t, http.StatusOK, code)
			require.Regexp(t, `Keys under prefix <code>`+e.c.Config().Prefix+`</code>: <strong>\d+</strong> \(exact\)`, body)
			require.Len(t, regexp.MustCompile(`<tr data-addr=`).FindAllString(body, -1), len(info.Servers))
			if b.Real() {
				require.Regexp(t, `<td class="version">\d+\.\d+`, body)
			}
			require.Contains(t, body, `id="nav-redis"`)
		})
	}
}
