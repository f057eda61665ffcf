package pool_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/rdb"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/pool"
)

// lateReadsConn delays each of its first n reads by late, as a network
// that delivers the replies of a fresh connection's handshake late.
type lateReadsConn struct {
	net.Conn
	late time.Duration
	n    atomic.Int32
}

func (c *lateReadsConn) Read(b []byte) (int, error) {
	if c.n.Add(-1) >= 0 {
		time.Sleep(c.late)
	}
	return c.Conn.Read(b)
}

// TestReview10HandshakeOfSeveralRoundTrips: rdb.Slack allowed one
// ReadTimeout for the handshake of the connection a rerun dials. But
// go-redis's handshake is several round trips, each read under its own
// ReadTimeout: HELLO, CLIENT MAINT_NOTIFICATIONS, CLIENT SETINFO (and
// SELECT with DB). With ReadTimeout 14 s and go-redis's defaults: the
// first run's reply is lost (read timeout at 14 s, inside the 15 s
// window), the rerun dials a new connection whose two handshake replies
// each come 13.5 s late (each within ReadTimeout), and its EVALSHA is
// written at about 41 s, past the 39 s op key. With DB 1 and ReadTimeout
// 12 s: three replies 11.5 s late, written at about 47 s, op key 37 s.
// Add then answered ErrJobExists for the job it stored itself. The slack
// now counts every round trip of the handshake, reads and writes.
func TestReview10HandshakeOfSeveralRoundTrips(t *testing.T) {
	t.Parallel()
	addr := standaloneAddr(t)
	mark := []byte(redis.NewScript(pool.AddSource).Hash())
	prefix := testutil.Prefix(t)
	ctx := context.Background()

	for _, tc := range []struct {
		name  string
		read  time.Duration
		db    int
		trips int32
	}{
		{"defaults, ReadTimeout 14s", 14 * time.Second, 0, 2}, // HELLO, CLIENT SETINFO
		{"DB 1, ReadTimeout 12s", 12 * time.Second, 1, 3},     // HELLO, SELECT, CLIENT SETINFO
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			plain := redis.NewClient(&redis.Options{Addr: addr, DB: tc.db})
			defer plain.Close()
			var lose atomic.Int32
			lose.Store(1)
			var dials, sent atomic.Int32
			var last atomic.Int64
			c := redis.NewClient(&redis.Options{
				Addr:        addr,
				ReadTimeout: tc.read,
				DB:          tc.db,
				Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
					conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
					if err != nil {
						return nil, err
					}
					conn = &scriptWrites{Conn: conn, mark: mark, n: &sent, last: &last}
					if dials.Add(1) == 1 {
						return &lossyConn{Conn: conn, mark: mark, lose: &lose}, nil
					}
					lc := &lateReadsConn{Conn: conn, late: tc.read - 500*time.Millisecond}
					lc.n.Store(tc.trips)
					return lc, nil
				},
			})
			defer c.Close()
			ttl := pool.OpTTL(c)
			start := time.Now()
			_, err := pool.NewStore(c, prefix).Add(ctx, &pool.Job{Topic: "t", ID: tc.name, Body: []byte("b"), Delay: time.Hour}, pool.Placement{Limit: 10})
			lastAt := time.Unix(0, last.Load()).Sub(start)
			stored := plain.HExists(ctx, keys.ForBucket(prefix, "t", 0).Pool(), tc.name).Val()
			t.Logf("%s: op TTL %v; Add after %v: %v; script writes %d, last at %v; stored %v",
				tc.name, ttl, time.Since(start).Round(time.Second), err, sent.Load(), lastAt.Round(time.Millisecond), stored)
			assert.True(t, stored)
			assert.Equal(t, int32(2), sent.Load(), "the scenario: a first run and one rerun")
			// The slack counted one ReadTimeout before: the op key lived
			// window + ReadTimeout + DialTimeout + margin.
			before := rdb.RerunWindow + tc.read + 5*time.Second + rdb.RerunMargin
			assert.Greater(t, lastAt, before, "the scenario: the rerun written after the op key of a one-read slack expired")
			assert.Less(t, lastAt, ttl, "the rerun written while its op key lives")
			assert.NoError(t, err, "Add stored its job and must say so")
		})
	}
}
