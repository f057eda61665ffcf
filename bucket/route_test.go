package bucket_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/bucket"
)

func TestOf(t *testing.T) {
	require.Equal(t, 0, bucket.Of("anything", 1))
	counts := make([]int, 8)
	for i := range 8000 {
		b := bucket.Of(fmt.Sprint("order-", i), 8)
		require.True(t, b >= 0 && b < 8)
		counts[b]++
	}
	for b, n := range counts {
		require.InDelta(t, 1000, n, 150, "bucket %d", b)
	}
	require.Equal(t, bucket.Of("x", 16), bucket.Of("x", 16))
}
