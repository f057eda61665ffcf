package bucket_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/bucket"
	"github.com/redeq-go/redeq/internal/testutil"
)

// TestFleetDropsSilentClientAfterClockStepsBack: a client that stopped
// announcing leaves the live set LiveFor after its last announcement,
// also when the Redis server's clock stepped back meanwhile: the step
// does not keep it "alive" for its size.
func TestFleetDropsSilentClientAfterClockStepsBack(t *testing.T) {
	var be testutil.Backend
	for _, b := range testutil.Backends(t) {
		if !b.Real() {
			be = b // the embedded server, whose clock the test sets
		}
	}
	require.NotNil(t, be.Mini)
	ctx := context.Background()
	rdb := be.New(t)
	prefix := testutil.Prefix(t)
	const interval = 100 * time.Millisecond
	a := bucket.NewFleet(rdb, prefix, "a", interval)
	gone := bucket.NewFleet(rdb, prefix, "gone", interval)

	t0 := time.Now()
	be.Mini.SetTime(t0)
	for _, f := range []*bucket.Fleet{gone, a} {
		_, err := f.Announce(ctx)
		require.NoError(t, err)
	}
	require.Equal(t, 2, a.Size())

	// The server's clock steps back 10 s; a goes on announcing, gone is
	// silent from now on.
	back := t0.Add(-10 * time.Second)
	for at := back; at.Before(back.Add(a.LiveFor() + 3*interval)); at = at.Add(interval) {
		be.Mini.SetTime(at)
		_, err := a.Announce(ctx)
		require.NoError(t, err)
	}
	require.Equal(t, 1, a.Size(), "the silent client still counts as alive %v after its last announcement", a.LiveFor()+3*interval)
}

// TestFleetPassesUnreachableBucketsToOthers: the buckets a client
// announces it cannot move pass to the live client of highest weight
// among the others, for every client's view, and come back to it when it
// can move them again; a bucket that every live client announced stays
// with its usual owner.
func TestFleetPassesUnreachableBucketsToOthers(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			ctx := context.Background()
			rdb := be.New(t)
			prefix := testutil.Prefix(t)
			a := bucket.NewFleet(rdb, prefix, "a", time.Minute)
			b := bucket.NewFleet(rdb, prefix, "b", time.Minute)
			c := bucket.NewFleet(rdb, prefix, "c", time.Minute)
			fleets := []*bucket.Fleet{a, b, c}
			announce := func() {
				t.Helper()
				for range 2 { // the first round's replies miss the later announcements
					for _, f := range fleets {
						_, err := f.Announce(ctx)
						require.NoError(t, err)
					}
				}
			}
			owners := func(addr string) []int {
				var out []int
				for i, f := range fleets {
					if f.Owns(addr) {
						out = append(out, i)
					}
				}
				return out
			}
			announce()
			var mine []string
			for n := range 64 {
				addr := fmt.Sprintf("t#%d", n)
				require.Len(t, owners(addr), 1, "bucket %s", addr)
				if a.Owns(addr) {
					mine = append(mine, addr)
				}
			}
			require.NotEmpty(t, mine)

			a.SetUnreachable(mine)
			announce()
			for _, addr := range mine {
				got := owners(addr)
				require.Len(t, got, 1, "bucket %s", addr)
				require.NotEqual(t, 0, got[0], "bucket %s stayed with the client that cannot move it", addr)
			}

			b.SetUnreachable(mine)
			c.SetUnreachable(mine)
			announce()
			for _, addr := range mine {
				require.Equal(t, []int{0}, owners(addr), "bucket %s that no client can move", addr)
			}

			for _, f := range fleets {
				f.SetUnreachable(nil)
			}
			announce()
			for _, addr := range mine {
				require.Equal(t, []int{0}, owners(addr), "bucket %s came back", addr)
			}
		})
	}
}
