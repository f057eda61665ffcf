package rdb_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/rdb"
)

// TestTimeoutsSet: only a client whose every read and write go-redis ends
// by a timeout lets a call run on its caller's goroutine. go-redis keeps
// the options it was given in its own form (-1, none, becomes 0; -2, no
// deadline, becomes -1; 0, its default, a positive duration), which a
// check of the values as given gets wrong.
func TestTimeoutsSet(t *testing.T) {
	for _, tc := range []struct {
		read, write time.Duration
		want        bool
	}{
		{0, 0, true},
		{time.Second, 0, true},
		{time.Second, 2 * time.Second, true},
		{-1, 0, false},
		{-2, 0, false},
		{time.Second, -1, false},
		{time.Second, -2, false},
	} {
		c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ReadTimeout: tc.read, WriteTimeout: tc.write})
		require.Equal(t, tc.want, rdb.TimeoutsSet(c), "client, ReadTimeout %v, WriteTimeout %v", tc.read, tc.write)
		require.NoError(t, c.Close())
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, ReadTimeout: tc.read, WriteTimeout: tc.write})
		require.Equal(t, tc.want, rdb.TimeoutsSet(cc), "cluster client, ReadTimeout %v, WriteTimeout %v", tc.read, tc.write)
		require.NoError(t, cc.Close())
	}
	// Its nodes' options are NewClient's to set.
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"},
		NewClient: func(o *redis.Options) *redis.Client { return redis.NewClient(o) }})
	require.False(t, rdb.TimeoutsSet(cc))
	require.NoError(t, cc.Close())
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	require.False(t, rdb.TimeoutsSet(ring))
	require.NoError(t, ring.Close())
}

// TestCutsAtDeadline: only a client whose every read and write go-redis
// ends at the ctx's deadline (ContextTimeoutEnabled, and timeouts that set
// a deadline: a -2 sets none) lets a call with a deadline run on its
// caller's goroutine.
func TestCutsAtDeadline(t *testing.T) {
	for _, tc := range []struct {
		ctxTimeout  bool
		read, write time.Duration
		want        bool
	}{
		{false, 0, 0, false},
		{true, 0, 0, true},
		{true, -1, -1, true}, // no timeout: the ctx's deadline alone
		{true, time.Second, 2 * time.Second, true},
		{true, -2, 0, false},
		{true, 0, -2, false},
	} {
		c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: tc.ctxTimeout, ReadTimeout: tc.read, WriteTimeout: tc.write})
		require.Equal(t, tc.want, rdb.CutsAtDeadline(c), "client, %+v", tc)
		require.NoError(t, c.Close())
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, ContextTimeoutEnabled: tc.ctxTimeout, ReadTimeout: tc.read, WriteTimeout: tc.write})
		require.Equal(t, tc.want, rdb.CutsAtDeadline(cc), "cluster client, %+v", tc)
		require.NoError(t, cc.Close())
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, ContextTimeoutEnabled: true,
		NewClient: func(o *redis.Options) *redis.Client { return redis.NewClient(o) }})
	require.False(t, rdb.CutsAtDeadline(cc), "a cluster whose nodes NewClient makes")
	require.NoError(t, cc.Close())
}
