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
	"github.com/redeq-go/redeq/internal/rdb"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/pool"
)

// scriptWrites counts the writes of a connection that carry mark, and
// records when the last one went.
type scriptWrites struct {
	net.Conn
	mark []byte
	n    *atomic.Int32
	last *atomic.Int64
}

func (c *scriptWrites) Write(b []byte) (int, error) {
	if bytes.Contains(b, c.mark) {
		c.n.Add(1)
		c.last.Store(time.Now().UnixNano())
	}
	return c.Conn.Write(b)
}

// TestReview9RerunWrittenAfterWindowByHandshake: the rerun window bounds
// when go-redis *starts* an attempt (it checks ctx before it takes a
// connection), not when it writes the command. An attempt that needs a
// fresh connection (the one that lost the reply was dropped) first runs
// the connection's handshake (HELLO, CLIENT SETINFO), whose reads go-redis
// bounds by ReadTimeout, not by ctx (unless ContextTimeoutEnabled). The
// review found a rerun written at 32 s, past a fixed 30 s op key. The op
// key now outlives the window by the client's ReadTimeout and DialTimeout
// (rdb.Slack). Here: ReadTimeout 12 s; the first run's reply is lost, the
// attempt at 12 s (inside the 15 s window) dials a new connection whose
// HELLO reply arrives 11 s late, and the EVALSHA is written at 23 s, past
// window and margin (20 s): the rerun must still find its op record,
// answer added, and not store again a job deleted at 17 s.
func TestReview9RerunWrittenAfterWindowByHandshake(t *testing.T) {
	t.Parallel() // waits out timeouts: run beside the others
	addr := standaloneAddr(t)
	mark := []byte(redis.NewScript(pool.AddSource).Hash())
	prefix := testutil.Prefix(t)
	plain := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { plain.Close() })
	ctx := context.Background()

	type outcome struct {
		err    error
		sent   int32
		lastAt time.Duration
		stored bool
	}
	try := func(id string, deleteMeanwhile bool) outcome {
		var lose atomic.Int32
		lose.Store(1)
		var dials, sent atomic.Int32
		var last atomic.Int64
		c := redis.NewClient(&redis.Options{
			Addr:        addr,
			ReadTimeout: 12 * time.Second,
			Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
				conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
				if err != nil {
					return nil, err
				}
				conn = &scriptWrites{Conn: conn, mark: mark, n: &sent, last: &last}
				if dials.Add(1) == 1 {
					return &lossyConn{Conn: conn, mark: mark, lose: &lose}, nil
				}
				lc := &lateReadsConn{Conn: conn, late: 11 * time.Second}
				lc.n.Store(1) // the handshake's first reply
				return lc, nil
			},
		})
		defer c.Close()
		if deleteMeanwhile {
			// The job is delivered and acked (deleted) at 17 s.
			time.AfterFunc(17*time.Second, func() {
				if _, err := pool.NewStore(plain, prefix).Delete(ctx, "t", id, 0); err != nil {
					t.Errorf("delete %s: %v", id, err)
				}
			})
		}
		start := time.Now()
		_, err := pool.NewStore(c, prefix).Add(ctx, &pool.Job{Topic: "t", ID: id, Body: []byte("b"), Delay: time.Hour}, pool.Placement{Limit: 10})
		o := outcome{err: err, sent: sent.Load()}
		if l := last.Load(); l > 0 {
			o.lastAt = time.Unix(0, l).Sub(start)
		}
		o.stored = plain.HExists(ctx, keys.ForBucket(prefix, "t", 0).Pool(), id).Val()
		return o
	}
	var wg sync.WaitGroup
	var kept, deleted outcome
	wg.Go(func() { kept = try("kept", false) })
	wg.Go(func() { deleted = try("deleted", true) })
	wg.Wait()
	t.Logf("job left alone: %+v (%v); job deleted meanwhile: %+v (%v)", kept, kept.err, deleted, deleted.err)
	require.True(t, kept.stored)
	for _, o := range []outcome{kept, deleted} {
		assert.NoError(t, o.err, "Add stored its job and must say so")
		assert.Greater(t, o.lastAt, rdb.RerunWindow+rdb.RerunMargin, "the scenario: a rerun written past window and margin")
	}
	assert.False(t, deleted.stored, "the rerun of an Add whose job was deleted meanwhile added it again: it runs twice")
}

// TestReview9DeleteRerunWrittenAfterWindowByHandshake: the same for
// Delete, another call that keeps its reply under an op key: its rerun,
// written at 23 s, must find the op record and answer the job it deleted,
// not ErrJobNotFound.
func TestReview9DeleteRerunWrittenAfterWindowByHandshake(t *testing.T) {
	t.Parallel() // waits out timeouts: run beside the others
	addr := standaloneAddr(t)
	src, err := os.ReadFile("delete.lua")
	require.NoError(t, err)
	mark := []byte(redis.NewScript(string(src)).Hash())
	prefix := testutil.Prefix(t)
	plain := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { plain.Close() })
	ctx := context.Background()
	_, err = pool.NewStore(plain, prefix).Add(ctx, &pool.Job{Topic: "t", ID: "d", Body: []byte("b"), Delay: time.Hour}, pool.Placement{Limit: 10})
	require.NoError(t, err)

	var lose atomic.Int32
	lose.Store(1)
	var dials, sent atomic.Int32
	var last atomic.Int64
	c := redis.NewClient(&redis.Options{
		Addr:        addr,
		ReadTimeout: 12 * time.Second,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			conn = &scriptWrites{Conn: conn, mark: mark, n: &sent, last: &last}
			if dials.Add(1) == 1 {
				return &lossyConn{Conn: conn, mark: mark, lose: &lose}, nil
			}
			lc := &lateReadsConn{Conn: conn, late: 11 * time.Second}
			lc.n.Store(1) // the handshake's first reply
			return lc, nil
		},
	})
	defer c.Close()
	require.NoError(t, c.Ping(ctx).Err()) // the first connection, handshake done
	start := time.Now()
	_, err = pool.NewStore(c, prefix).Delete(ctx, "t", "d", 0)
	lastAt := time.Unix(0, last.Load()).Sub(start)
	stored := plain.HExists(ctx, keys.ForBucket(prefix, "t", 0).Pool(), "d").Val()
	t.Logf("after %v: %v; script writes %d, last at %v; stored %v", time.Since(start).Round(time.Second), err, sent.Load(), lastAt.Round(time.Millisecond), stored)
	require.False(t, stored, "the first run deleted the job")
	assert.NoError(t, err, "Delete deleted the job and must say so")
	assert.Greater(t, lastAt, rdb.RerunWindow+rdb.RerunMargin, "the scenario: a rerun written past window and margin")
}
