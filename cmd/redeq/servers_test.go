package main

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// TestCLIServers: servers lists each running consumer with its client
// name, host, pid, topics and the jobs it holds and for how long, as a
// table and as JSON; a name with a character a terminal acts on is shown
// escaped; with no consumer it says so; a topic's in-flight list names
// the consumer running each job and how long it has run.
func TestCLIServers(t *testing.T) {
	for _, b := range testutil.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			e := newEnv(t, b)
			require.Contains(t, e.ok(t, "servers"), "no consumer heartbeats under this prefix")

			cfg := testutil.Config(t)
			cfg.Prefix = e.prefix
			cfg.ClientName = "billing\u202e-7" // a right-to-left override: shown escaped
			worker, err := redeq.New(b.New(t), cfg)
			require.NoError(t, err)
			held := make(chan struct{})
			release := make(chan struct{})
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

			out := e.ok(t, "servers", "--jobs")
			lines := strings.Split(strings.TrimSpace(out), "\n")
			require.Len(t, lines, 3, out)
			require.Regexp(t, `^NAME\s+HOST\s+PID\s+UP\s+HEARTBEAT\s+TOPICS\s+IN FLIGHT\s+LONGEST\s+ID`, lines[0])
			require.NotContains(t, out, "\u202e", "the override does not reach the terminal raw")
			require.Contains(t, lines[1], `billing\u202e-7`)
			require.Contains(t, lines[1], host)
			require.Contains(t, lines[1], worker.ConsumerID())
			require.Regexp(t, `\sorders\s+1\s+\d`, lines[1], "topics, one in flight, the longest's time")
			require.Regexp(t, `^\s+orders o-1\s+\d`, lines[2])

			// The topic's in-flight list names the consumer running each job
			// and for how long.
			out = e.ok(t, "list", "orders", "inflight")
			lines = strings.Split(strings.TrimSpace(out), "\n")
			require.Len(t, lines, 2, out)
			require.Regexp(t, `^ID\s+ATTEMPT\s+CONSUMER\s+FETCHED\s+RUNNING\s+LAST ERROR`, lines[0])
			require.Regexp(t, `^o-1\s+0\s+`+worker.ConsumerID()+`\s+\S+\s+\d+(\.\d+)?(ms|s)\b`, lines[1])

			var rows []serverRow
			require.NoError(t, json.Unmarshal([]byte(e.ok(t, "-o", "json", "servers")), &rows))
			require.Len(t, rows, 1)
			r := rows[0]
			require.Equal(t, "billing\u202e-7", r.Name, "JSON keeps the name as it is")
			require.Equal(t, host, r.Host)
			require.Equal(t, os.Getpid(), r.PID)
			require.Equal(t, []string{"orders"}, r.Topics)
			require.EqualValues(t, 1, r.InFlight)
			require.False(t, r.Silent)
			require.NotNil(t, r.Started)
			require.Len(t, r.Running, 1)
			require.Equal(t, "o-1", r.Running[0].ID)
			require.GreaterOrEqual(t, r.Running[0].ForSeconds, 0.0)

			code, _, errs := e.run(t, "", "servers", "extra")
			require.Equal(t, exitUsage, code, errs)
		})
	}
}

// TestCLIRedis: redis shows each server with its version and memory and
// counts the prefix's keys exactly on a small deployment; -o json gives
// the same figures.
func TestCLIRedis(t *testing.T) {
	for _, b := range testutil.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			e := newEnv(t, b)
			e.ok(t, "add", "--create", "orders", "o1", "--delay", "1h")
			e.ok(t, "add", "--create", "orders", "o2", "--delay", "1h")
			want := len(testutil.Keys(t, b.New(t), e.prefix+":"))

			out := e.ok(t, "redis")
			require.Regexp(t, `^SERVER\s+VERSION\s+MODE\s+USED`, out)
			require.Contains(t, out, `prefix "`+e.prefix+`": `)
			require.Contains(t, out, "(exact)")

			var info redisInfoJSON
			require.NoError(t, json.Unmarshal([]byte(e.ok(t, "-o", "json", "info")), &info))
			require.True(t, info.Exact)
			require.EqualValues(t, want, info.PrefixKeys)
			require.NotEmpty(t, info.Servers)
			if b.Real() {
				require.NotEmpty(t, info.Servers[0].Version)
				require.Positive(t, info.UsedMemory)
			}
		})
	}
}
