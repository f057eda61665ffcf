package pool_test

import (
	"bytes"
	"context"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/pool"
)

// lossyConn loses the reply of the commands it was told to: after such a
// command is written, every read of the connection waits for the read
// deadline and times out, as when the network drops what the server sends
// back (go-redis then drops the connection). The command itself reaches
// the server and runs.
type lossyConn struct {
	net.Conn
	mark     []byte        // a write holding it loses its reply
	lose     *atomic.Int32 // replies left to lose
	mu       sync.Mutex
	armed    bool
	deadline time.Time
}

func (c *lossyConn) Write(b []byte) (int, error) {
	if bytes.Contains(b, c.mark) && c.lose.Add(-1) >= 0 {
		c.mu.Lock()
		c.armed = true
		c.mu.Unlock()
	}
	return c.Conn.Write(b)
}

func (c *lossyConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	return c.Conn.SetReadDeadline(t)
}

func (c *lossyConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	return c.Conn.SetDeadline(t)
}

func (c *lossyConn) Read(b []byte) (int, error) {
	c.mu.Lock()
	armed, deadline := c.armed, c.deadline
	c.mu.Unlock()
	if armed {
		time.Sleep(time.Until(deadline))
		return 0, &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	}
	return c.Conn.Read(b)
}

// TestReview8LoneAddRerunAfterOpTTL: go-redis resends a command after a
// read timeout, up to MaxRetries (3 by default) times, each after
// ReadTimeout. add.lua keeps a run's reply for OpTTL (30 s) and nothing
// bounds ReadTimeout x retries below it: with ReadTimeout 16s (a client
// built by the caller, or a URL with ?read_timeout=16s) and the replies
// of the first two attempts lost, the third attempt runs 32 s after the
// first stored the job, finds no op record, and Add reports
// ErrJobExists for the job it stored itself. Takes about 33 s.
func TestReview8LoneAddRerunAfterOpTTL(t *testing.T) {
	var addr string
	for _, be := range testutil.RealBackends(t) {
		if be.Name == "redis" {
			addr = be.Addrs[0]
		}
	}
	if addr == "" {
		t.Skip("no standalone server")
	}
	var lose atomic.Int32
	lose.Store(2)
	mark := []byte(redis.NewScript(pool.AddSource).Hash())
	c := redis.NewClient(&redis.Options{
		Addr:        addr,
		ReadTimeout: 16 * time.Second,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &lossyConn{Conn: conn, mark: mark, lose: &lose}, nil
		},
	})
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	require.NoError(t, c.Ping(ctx).Err())
	prefix := testutil.Prefix(t)
	s := pool.NewStore(c, prefix)
	start := time.Now()
	_, err := s.Add(ctx, &pool.Job{Topic: "t", ID: "mine", Body: []byte("b"), Delay: time.Hour}, pool.Placement{Limit: 10})
	t.Logf("Add returned after %v: %v", time.Since(start).Round(time.Second), err)
	require.Equal(t, int32(-1), lose.Load(), "both replies lost, then the third attempt")
	got, gerr := s.Get(ctx, "t", "mine", 0)
	require.NoError(t, gerr, "the job is stored")
	require.Equal(t, "b", string(got.Body))
	require.NoError(t, err, "Add stored its job once and must say so, not that it exists")
}
