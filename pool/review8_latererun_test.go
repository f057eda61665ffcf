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
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/keys"
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
// built by the caller, a URL with ?read_timeout=16s, or one that
// WaitTimeout 16s requires) and the replies of the first two attempts
// lost, the third attempt runs 32 s after the first stored the job and
// finds no op record. Add then reports ErrJobExists for the job it stored
// itself; or, when the job was delivered and deleted meanwhile, stores it
// a second time. Both cases run at once; the test takes about 33 s.
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
	mark := []byte(redis.NewScript(pool.AddSource).Hash())
	prefix := testutil.Prefix(t)
	plain := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { plain.Close() })
	ctx := context.Background()
	type outcome struct {
		err    error
		lost   int32
		stored bool
	}
	try := func(id string, deleteMeanwhile bool) outcome {
		var lose atomic.Int32
		lose.Store(2)
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
		defer c.Close()
		if deleteMeanwhile {
			// The job is delivered and acked (deleted) between the
			// second attempt (16 s) and the third (32 s).
			time.AfterFunc(24*time.Second, func() {
				_, err := pool.NewStore(plain, prefix).Delete(ctx, "t", id, 0)
				if err != nil {
					t.Errorf("delete %s: %v", id, err)
				}
			})
		}
		_, err := pool.NewStore(c, prefix).Add(ctx, &pool.Job{Topic: "t", ID: id, Body: []byte("b"), Delay: time.Hour}, pool.Placement{Limit: 10})
		stored := plain.HExists(ctx, keys.ForBucket(prefix, "t", 0).Pool(), id).Val()
		return outcome{err: err, lost: 2 - max(lose.Load(), 0), stored: stored}
	}
	var wg sync.WaitGroup
	var kept, deleted outcome
	start := time.Now()
	wg.Go(func() { kept = try("kept", false) })
	wg.Go(func() { deleted = try("deleted", true) })
	wg.Wait()
	t.Logf("after %v: job left alone: %+v; job deleted meanwhile: %+v", time.Since(start).Round(time.Second), kept, deleted)
	require.Equal(t, int32(2), kept.lost, "two replies lost")
	require.Equal(t, int32(2), deleted.lost, "two replies lost")
	require.True(t, kept.stored)
	assert.NoError(t, kept.err, "Add stored its job once and must say so, not that it exists")
	assert.NoError(t, deleted.err)
	assert.False(t, deleted.stored, "the rerun of an Add whose job was deleted meanwhile added it again: it runs twice")
}
