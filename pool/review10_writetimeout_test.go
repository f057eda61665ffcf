package pool_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/pool"
)

// lateFirstWriteConn stalls its first write (the handshake's) by late, as
// a full send buffer does; go-redis bounds it by WriteTimeout.
type lateFirstWriteConn struct {
	net.Conn
	late time.Duration
	once sync.Once
}

func (c *lateFirstWriteConn) Write(b []byte) (int, error) {
	c.once.Do(func() { time.Sleep(c.late) })
	return c.Conn.Write(b)
}

// eofAfterReplyConn loses the connection right after the first reply to
// a command holding mark: the script ran, its caller sees EOF.
type eofAfterReplyConn struct {
	net.Conn
	mark  []byte
	armed atomic.Bool
	used  atomic.Bool
}

func (c *eofAfterReplyConn) Write(b []byte) (int, error) {
	if bytes.Contains(b, c.mark) && !c.used.Swap(true) {
		c.armed.Store(true)
	}
	return c.Conn.Write(b)
}

func (c *eofAfterReplyConn) Read(b []byte) (int, error) {
	if c.armed.Load() {
		c.Conn.Read(b) // the reply: the script ran
		c.Conn.Close()
		return 0, io.EOF
	}
	return c.Conn.Read(b)
}

// TestReview10WriteTimeoutNotInSlack: rdb.Slack counted the client's
// ReadTimeout and DialTimeout, not its WriteTimeout, which go-redis lets
// a caller set apart (here 60 s, ReadTimeout left at its default): the op key
// lives 30 s. The first run's reply is lost with its connection (EOF);
// the rerun, started at once inside the window, dials a new connection
// whose first write (HELLO) stalls 33 s, within WriteTimeout. Its
// EVALSHA is written at 33 s, after the op key expired, and Add answers
// ErrJobExists for the job it stored itself. The slack now counts
// WriteTimeout for each round trip of the handshake.
func TestReview10WriteTimeoutNotInSlack(t *testing.T) {
	t.Parallel()
	addr := standaloneAddr(t)
	mark := []byte(redis.NewScript(pool.AddSource).Hash())
	prefix := testutil.Prefix(t)
	plain := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { plain.Close() })
	ctx := context.Background()

	var dials, sent atomic.Int32
	var last atomic.Int64
	c := redis.NewClient(&redis.Options{
		Addr:         addr,
		WriteTimeout: 60 * time.Second,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			conn = &scriptWrites{Conn: conn, mark: mark, n: &sent, last: &last}
			if dials.Add(1) == 1 {
				return &eofAfterReplyConn{Conn: conn, mark: mark}, nil
			}
			return &lateFirstWriteConn{Conn: conn, late: 33 * time.Second}, nil
		},
	})
	t.Cleanup(func() { c.Close() })
	ttl := pool.OpTTL(c)
	start := time.Now()
	_, err := pool.NewStore(c, prefix).Add(ctx, &pool.Job{Topic: "t", ID: "j", Body: []byte("b"), Delay: time.Hour}, pool.Placement{Limit: 10})
	lastAt := time.Unix(0, last.Load()).Sub(start)
	stored := plain.HExists(ctx, keys.ForBucket(prefix, "t", 0).Pool(), "j").Val()
	t.Logf("op TTL %v; Add after %v: %v; script writes %d, last at %v; stored %v",
		ttl, time.Since(start).Round(time.Second), err, sent.Load(), lastAt.Round(time.Millisecond), stored)
	assert.True(t, stored)
	assert.Equal(t, int32(2), sent.Load(), "the scenario: a first run and one rerun")
	// Without WriteTimeout in the slack the op key lived 30 s.
	assert.Greater(t, lastAt, 30*time.Second, "the scenario: the rerun written after a 30 s op key expired")
	assert.Less(t, lastAt, ttl, "the rerun written while its op key lives")
	assert.NoError(t, err, "Add stored its job and must say so")
}
