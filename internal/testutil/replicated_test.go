package testutil_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/testutil"
)

// TestStartClusterStartsAgainWhenANodeIsLostBeforeCreate: a node that is no
// longer the process started on its port when the cluster is created (its
// process died, or another test binary's server holds the port) makes
// StartCluster start the cluster again on other ports; the cluster it
// returns is made of its own nodes only, each cluster-enabled and the
// cluster ok.
func TestStartClusterStartsAgainWhenANodeIsLostBeforeCreate(t *testing.T) {
	var lostAddr string
	attempts := 0
	testutil.BeforeCreate(t, func(c *testutil.ReplCluster) {
		attempts++
		if attempts == 1 {
			lostAddr = c.Nodes[0].Addr
			c.Nodes[0].Kill()
		}
	})
	cl := testutil.StartCluster(t, 3, 5*time.Second)
	require.Equal(t, 2, attempts)
	require.NotContains(t, cl.Addrs, lostAddr)
	for _, addr := range cl.Addrs {
		c := redis.NewClient(&redis.Options{Addr: addr})
		info, err := c.ClusterInfo(context.Background()).Result()
		c.Close()
		require.NoError(t, err)
		require.True(t, strings.Contains(info, "cluster_state:ok"), "%s: %s", addr, info)
	}
}
