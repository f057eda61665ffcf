package redeq_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// fastYAML is testutil.Fast as a config file, under a fresh prefix.
func fastYAML(t *testing.T) string {
	return fmt.Sprintf(`prefix: %s
scan_interval: 100ms
poll_timeout: 200ms
heartbeat_interval: 100ms
consumer_timeout: 600ms
lock_expiry: 2s
shutdown_timeout: 5s
retry_intervals: [50ms]
`, testutil.Prefix(t))
}

func writeConfig(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "redeq.yaml")
	require.NoError(t, os.WriteFile(p, []byte(text), 0o600))
	return p
}

// openFile opens the client a file describes, shut down at the end of the test.
func openFile(t *testing.T, path string) *redeq.Client {
	t.Helper()
	c, err := redeq.Open(context.Background(), path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Shutdown(context.Background()) })
	return c
}

// redisSection points a config file at a backend: a URL for one server,
// the seed addresses for a cluster.
func redisSection(be testutil.Backend) string {
	if be.Name == "cluster" {
		return "redis:\n  addrs: [" + strings.Join(be.Addrs, ", ") + "]\n"
	}
	return "redis:\n  url: redis://" + be.Addrs[0] + "\n"
}

// TestOpen: one file starts a working client on every deployment, and
// Shutdown closes the connection Open made.
func TestOpen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			c := openFile(t, writeConfig(t, fastYAML(t)+redisSection(be)))
			roundTrip(t, c)

			require.NoError(t, c.Shutdown(ctx))
			_, err := c.Get(ctx, "secure", "a")
			require.ErrorIs(t, err, redis.ErrClosed, "Shutdown closed the connection Open made")
		})
	}
}

// TestOpenFromEnv: no file, the environment only.
func TestOpenFromEnv(t *testing.T) {
	be := testutil.Backends(t)[0]
	t.Setenv("REDEQ_REDIS_URL", "redis://"+be.Addrs[0])
	t.Setenv("REDEQ_PREFIX", testutil.Prefix(t))
	c := openFile(t, "")
	require.NoError(t, c.Add(context.Background(), &redeq.Job{Topic: "env", ID: "a", Delay: time.Hour}))
}

// TestOpenUnreachable: a closed port is a prompt error naming the address,
// not a hang and not a client that fails later.
func TestOpenUnreachable(t *testing.T) {
	// It runs for seconds: the fault tier.
	testutil.FaultTier(t)
	t.Parallel() // it waits on dial retries, not on anything shared
	addr := closedAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	p := writeConfig(t, fastYAML(t)+"redis:\n  url: redis://"+addr+"/0\n")
	_, err := redeq.Open(ctx, p)
	require.ErrorContains(t, err, "redeq: redis at redis://"+addr+"/0 (from "+p+") does not answer: ")
	require.ErrorContains(t, err, "connection refused")
	require.NoError(t, ctx.Err(), "it gave up on its own")

	p = writeConfig(t, fastYAML(t)+"redis:\n  addrs: ["+addr+", "+closedAddr(t)+"]\n")
	_, err = redeq.Open(ctx, p)
	require.ErrorContains(t, err, "redeq: redis at "+addr+",")
	require.NoError(t, ctx.Err())
}

func TestOpenRejects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := writeConfig(t, fastYAML(t))
	_, err := redeq.Open(ctx, p)
	require.EqualError(t, err, "redeq: "+p+" names no Redis: set redis.url or redis.addrs (or REDEQ_REDIS_URL)")

	p = writeConfig(t, "scan_interval: -1s\nredis: {url: redis://127.0.0.1:1}\n")
	_, err = redeq.Open(ctx, p)
	require.EqualError(t, err, p+": scan_interval: -1s must be positive")

	//nolint:staticcheck // a nil context is what is tested
	_, err = redeq.Open(nil, p)
	require.Error(t, err)
}

// TestOpenPassword: the password comes from the variable password_env
// names; a missing variable or a wrong password is a clear error.
func TestOpenPassword(t *testing.T) {
	srv := testutil.StartServer(t, "--requirepass", "open-secret")
	p := writeConfig(t, fastYAML(t)+"redis:\n  url: redis://"+srv.Addr+"\n  password_env: REDEQ_TEST_OPEN_PASSWORD\n")
	ctx := context.Background()

	_, err := redeq.Open(ctx, p)
	require.EqualError(t, err, "redeq: "+p+": config: redis.password_env: the variable REDEQ_TEST_OPEN_PASSWORD is not set")

	t.Setenv("REDEQ_TEST_OPEN_PASSWORD", "wrong")
	_, err = redeq.Open(ctx, p)
	require.ErrorContains(t, err, "redeq: redis at redis://"+srv.Addr+" (from "+p+") does not answer: WRONGPASS")

	t.Setenv("REDEQ_TEST_OPEN_PASSWORD", "open-secret")
	c := openFile(t, p)
	require.NoError(t, c.Add(ctx, &redeq.Job{Topic: "pw", ID: "a", Delay: time.Hour}))
}

// TestOpenTLS: rediss:// with the CA from a file reaches a TLS-only server.
func TestOpenTLS(t *testing.T) {
	dir := t.TempDir()
	caPEM, certFile, keyFile := makeCerts(t, dir)
	caFile := filepath.Join(dir, "ca.pem")
	require.NoError(t, os.WriteFile(caFile, caPEM, 0o600))
	tlsPort := testutil.FreePort(t)
	testutil.StartServer(t, "--tls-port", strconv.Itoa(tlsPort), "--tls-cert-file", certFile,
		"--tls-key-file", keyFile, "--tls-ca-cert-file", caFile, "--tls-auth-clients", "no")
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(tlsPort))

	c := openFile(t, writeConfig(t, fastYAML(t)+"redis:\n  url: rediss://"+addr+"\n  tls: {ca_file: "+caFile+", server_name: localhost}\n"))
	roundTrip(t, c)

	// Without the CA the server's certificate is not trusted.
	_, err := redeq.Open(context.Background(), writeConfig(t, fastYAML(t)+"redis:\n  url: rediss://"+addr+"\n"))
	require.ErrorContains(t, err, "certificate")
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// TestOpenPutsTheFilesSchedules: Open and OpenSection put the schedules of
// the file, every field kept; instances opening the same file change
// nothing; a schedule config cannot check (a bad topic, a header of
// redeq's own) is ErrInvalidSchedule named by file and key, before
// anything is written.
func TestOpenPutsTheFilesSchedules(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const scheds = `schedules:
  - name: digest
    topic: mail
    spec: "0 8 * * *"
    time_zone: Europe/Paris
    catch_up: all
    catch_up_window: 6h
    body: daily
    headers: {team: growth}
    max_retries: 2
    retry_intervals: [1m]
  - name: sweep
    topic: orders
    spec: "@every 5m"
`
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			p := writeConfig(t, fastYAML(t)+redisSection(be)+scheds)
			c := openFile(t, p)
			infos, err := c.Schedules(ctx)
			require.NoError(t, err)
			require.Len(t, infos, 2)
			require.Equal(t, redeq.Schedule{Name: "digest", Topic: "mail", Spec: "0 8 * * *", TimeZone: "Europe/Paris",
				CatchUp: redeq.CatchUpAll, CatchUpWindow: 6 * time.Hour, Body: []byte("daily"), Headers: map[string]string{"team": "growth"},
				MaxRetries: 2, RetryIntervals: []time.Duration{time.Minute}}, infos[0].Schedule)
			require.Equal(t, redeq.Schedule{Name: "sweep", Topic: "orders", Spec: "@every 5m"}, infos[1].Schedule)
			before := testutil.Dump(t, be.New(t), c.Config().Prefix)
			openFile(t, p)
			require.Equal(t, before, testutil.Dump(t, be.New(t), c.Config().Prefix), "a second instance changes nothing")

			nested := "jobs:\n  redeq:\n" + indent(fastYAML(t)+redisSection(be)+scheds, 4)
			s, err := redeq.OpenSection(ctx, writeConfig(t, nested), "jobs.redeq")
			require.NoError(t, err)
			defer func() { require.NoError(t, s.Shutdown(ctx)) }()
			infos, err = s.Schedules(ctx)
			require.NoError(t, err)
			require.Len(t, infos, 2)
		})
	}
	t.Run("BadScheduleNamed", func(t *testing.T) {
		be := testutil.Backends(t)[0]
		prefix := testutil.Prefix(t)
		base := "prefix: " + prefix + "\n" + redisSection(be)
		for _, tc := range []struct{ file, want string }{
			{"schedules:\n  - {name: ok, topic: t, spec: '@daily'}\n  - {name: bad, topic: 'a b', spec: '@daily'}\n", "schedules[1]: redeq: invalid schedule: schedule \"bad\": topic"},
			{"schedules:\n  - {name: h, topic: t, spec: '@daily', headers: {redeq-tick: '1'}}\n", "schedules[0]: redeq: invalid schedule: schedule \"h\": header \"redeq-tick\" is redeq's own"},
		} {
			p := writeConfig(t, base+tc.file)
			_, err := redeq.Open(ctx, p)
			require.ErrorIs(t, err, redeq.ErrInvalidSchedule)
			require.ErrorContains(t, err, p+": "+tc.want)
			nested := writeConfig(t, "redeq:\n"+indent(base+tc.file, 2))
			_, err = redeq.OpenSection(ctx, nested, "redeq")
			require.ErrorIs(t, err, redeq.ErrInvalidSchedule)
			require.ErrorContains(t, err, nested+": redeq."+tc.want)
		}
		_, err := redeq.Open(ctx, writeConfig(t, base+"schedules:\n  - {name: x, topic: t, spec: '99 * * * *'}\n"))
		require.ErrorContains(t, err, "schedules[0].spec: ")
		require.Empty(t, testutil.Keys(t, be.New(t), prefix), "nothing was written")
	})
}
