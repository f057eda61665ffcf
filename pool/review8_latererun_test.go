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

// standaloneAddr is the address of the standalone server among the real
// backends; a test that waits out client timeouts needs one server only.
func standaloneAddr(t *testing.T) string {
	for _, be := range testutil.RealBackends(t) {
		if be.Name == "redis" {
			return be.Addrs[0]
		}
	}
	t.Skip("no standalone server")
	return ""
}

// TestReview8LoneAddRerunAfterOpTTL: go-redis resends a command after a
// read timeout, up to MaxRetries (3 by default) times, each after
// ReadTimeout. add.lua kept a run's reply for a fixed 30 s, and nothing
// bounded ReadTimeout x retries below it: with ReadTimeout 16s (a client
// built by the caller, a URL with ?read_timeout=16s, or one that
// WaitTimeout 16s requires) and the replies of the first two attempts
// lost, the third attempt ran 32 s after the first stored the job and
// found no op record. Add then reported ErrJobExists for the job it
// stored itself; or, when the job was delivered and deleted meanwhile,
// stored it a second time. Now the call runs under a deadline of
// rdb.RerunWindow (15 s) and its reply outlives the window by the client's
// slack. Here, with ReadTimeout 10 s and every reply lost, the second
// attempt (10 s) is a rerun after the job was deleted (5 s) and answers
// from the op key; no third attempt (20 s) starts. Add reports the
// deadline (the job may or may not be stored: Get tells), never "exists"
// for its own job, and never stores it twice. (go-redis does not cut a
// read short at the ctx deadline unless ContextTimeoutEnabled: Add returns
// when the second attempt's read times out, at 20 s.)
func TestReview8LoneAddRerunAfterOpTTL(t *testing.T) {
	t.Parallel() // waits out timeouts: run beside the others
	addr := standaloneAddr(t)
	mark := []byte(redis.NewScript(pool.AddSource).Hash())
	prefix := testutil.Prefix(t)
	plain := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { plain.Close() })
	ctx := context.Background()
	type outcome struct {
		err    error
		lost   int32
		sent   int32 // attempts of the script written
		stored bool
	}
	try := func(id string, deleteMeanwhile bool) outcome {
		var lose atomic.Int32
		lose.Store(3)
		c := redis.NewClient(&redis.Options{
			Addr:        addr,
			ReadTimeout: 10 * time.Second,
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
			// first attempt (0 s) and the second (10 s).
			time.AfterFunc(5*time.Second, func() {
				_, err := pool.NewStore(plain, prefix).Delete(ctx, "t", id, 0)
				if err != nil {
					t.Errorf("delete %s: %v", id, err)
				}
			})
		}
		_, err := pool.NewStore(c, prefix).Add(ctx, &pool.Job{Topic: "t", ID: id, Body: []byte("b"), Delay: time.Hour}, pool.Placement{Limit: 10})
		stored := plain.HExists(ctx, keys.ForBucket(prefix, "t", 0).Pool(), id).Val()
		return outcome{err: err, lost: 3 - max(lose.Load(), 0), sent: 3 - lose.Load(), stored: stored}
	}
	var wg sync.WaitGroup
	var kept, deleted outcome
	start := time.Now()
	wg.Go(func() { kept = try("kept", false) })
	wg.Go(func() { deleted = try("deleted", true) })
	wg.Wait()
	t.Logf("after %v: job left alone: %+v (%v); job deleted meanwhile: %+v (%v)", time.Since(start).Round(time.Second), kept, kept.err, deleted, deleted.err)
	require.Equal(t, kept.sent, kept.lost, "every reply lost")
	require.Equal(t, deleted.sent, deleted.lost, "every reply lost")
	require.True(t, kept.stored)
	for _, o := range []outcome{kept, deleted} {
		if o.err != nil {
			assert.NotErrorIs(t, o.err, pool.ErrJobExists, "Add stored its job and must not say it exists")
			assert.ErrorIs(t, o.err, context.DeadlineExceeded, "Add gave up at the rerun window")
		}
	}
	assert.False(t, deleted.stored, "the rerun of an Add whose job was deleted meanwhile added it again: it runs twice")
	// A third attempt would have started at 20 s, past the window.
	assert.LessOrEqual(t, kept.sent, int32(2), "attempts sent")
	assert.Equal(t, int32(2), deleted.sent, "attempts sent: a rerun after the delete, none after the window")
}
