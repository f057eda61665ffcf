package pool_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/pool"
)

// splitConn sends a pipeline of two or more EVALSHAs in two parts, once:
// the first command, then (after between ran) the rest, as the server
// reads a large pipeline in parts and serves other clients between them.
type splitConn struct {
	net.Conn
	armed   *atomic.Bool
	between func()
}

func (c *splitConn) Write(b []byte) (int, error) {
	cmd := []byte("\r\n$7\r\nevalsha\r\n")
	first := bytes.Index(b, cmd)
	if first < 0 || !c.armed.Load() {
		return c.Conn.Write(b)
	}
	second := bytes.Index(b[first+len(cmd):], cmd)
	if second < 0 {
		return c.Conn.Write(b)
	}
	second += first + len(cmd)
	cut := bytes.LastIndex(b[:second], []byte("\r\n*")) + 2
	c.armed.Store(false)
	n, err := c.Conn.Write(b[:cut])
	if err != nil {
		return n, err
	}
	time.Sleep(100 * time.Millisecond) // the server runs the first command
	c.between()
	m, err := c.Conn.Write(b[cut:])
	return n + m, err
}

// TestReview8NoScriptKeepsOrder: after a restart or a failover the
// server has no scripts, and each producer's first EVALSHA fails with
// NOSCRIPT until one of them loads add.lua again (go-redis's Script.Run
// does, with EVAL). RunPipelined runs the calls that failed with NOSCRIPT
// again after the pipeline: when add.lua is loaded by another producer
// while the server reads a pipeline, the runs after that moment go
// through and those before it run after them. AddMany of 65 jobs of one
// bucket went as two runs (64 jobs, then 1): with the first and last
// jobs sharing an id, it stored the last copy and answered ErrJobExists
// for the first, where one by one the first is added and the last exists.
// Now the jobs of a bucket in a chunk go as one run; the pipeline here
// carries a run for another bucket too, so that it is still cut between
// two EVALSHAs.
func TestReview8NoScriptKeepsOrder(t *testing.T) {
	srv := testutil.StartServer(t)
	side := srv.Client(nil)
	ctx := context.Background()
	var armed atomic.Bool
	c := srv.Client(&redis.Options{
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &splitConn{Conn: conn, armed: &armed, between: func() {
				// Another producer meets NOSCRIPT and loads the script.
				require.NoError(t, side.ScriptLoad(context.Background(), pool.AddSource).Err())
			}}, nil
		},
	})
	require.NoError(t, c.Ping(ctx).Err())
	s := pool.NewStore(c, "p")
	jobs := []*pool.Job{{Topic: "t", ID: "x", Body: []byte("first"), Delay: time.Hour}}
	for i := range 63 {
		jobs = append(jobs, &pool.Job{Topic: "t", ID: fmt.Sprint("j", i), Body: []byte("j"), Delay: time.Hour})
	}
	at := make([]pool.Placement, len(jobs), 75)
	for i := range 10 {
		jobs = append(jobs, &pool.Job{Topic: "t", ID: fmt.Sprint("other", i), Body: []byte("o"), Delay: time.Hour})
		at = append(at, pool.Placement{Bucket: 1})
	}
	jobs = append(jobs, &pool.Job{Topic: "t", ID: "x", Body: []byte("second"), Delay: time.Hour})
	at = append(at, pool.Placement{})
	for i := range at {
		at[i].Limit = 1000
	}
	// The server restarted: no script cached.
	require.NoError(t, side.ScriptFlush(ctx).Err())
	armed.Store(true)
	errs, err := s.AddMany(ctx, jobs, at)
	require.NoError(t, err)
	require.False(t, armed.Load(), "the pipeline was sent in two parts")
	assert.NoError(t, errs[0], "the first x")
	assert.ErrorIs(t, errs[len(jobs)-1], pool.ErrJobExists, "the last x")
	for i, err := range errs[1 : len(jobs)-1] {
		assert.NoError(t, err, "job %d", i+1)
	}
	got, err := s.Get(ctx, "t", "x", 0)
	require.NoError(t, err)
	assert.Equal(t, "first", string(got.Body), "the copy stored")
}
