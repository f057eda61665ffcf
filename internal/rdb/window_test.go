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
