package pool_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
)

// TestReview8OpTTLKeptOnEveryBackend: add.lua takes an op TTL of 1 ms to
// a day, and a rerun of a run that added its jobs must find its record on
// every backend; a longer TTL (on miniredis one past 9223372036854 ms
// wrapped, and the record was gone at once) is refused before anything
// is written.
func TestReview8OpTTLKeptOnEveryBackend(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			c := be.New(t)
			ctx := context.Background()
			prefix := testutil.Prefix(t)
			k := keys.ForBucket(prefix, "t", 0)
			for i, ttl := range []string{"1000", "86400000", "86400001", "9223372036855", "10000000000000", "9007199254740991"} {
				for _, n := range []int{1, 2} {
					op := fmt.Sprint("ttl", i, "-", n)
					var jobs [][3]any
					for j := range n {
						jobs = append(jobs, [3]any{fmt.Sprint(op, "-", j), "1000", ""})
					}
					if i >= 2 { // past a day
						before := testutil.Dump(t, c, prefix)
						_, err := addDirect(ctx, c, k, op, ttl, jobs...)
						require.ErrorContains(t, err, "op TTL", "ttl %s", ttl)
						require.Equal(t, before, testutil.Dump(t, c, prefix), "ttl %s: refused after writing", ttl)
						continue
					}
					v, err := addDirect(ctx, c, k, op, ttl, jobs...)
					require.NoError(t, err, "ttl %s", ttl)
					again, err := addDirect(ctx, c, k, op, ttl, jobs...)
					require.NoError(t, err)
					assert.Equal(t, v, again, "ttl %s, %d jobs: the rerun of an added run", ttl, n)
				}
			}
		})
	}
}
