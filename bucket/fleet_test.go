package bucket_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/bucket"
	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
)

// TestFleetDropsSilentClients: a client that stopped announcing leaves
// every other client's live set once LiveFor has passed, at the next
// announcement, whether or not that one prunes; its entry itself is
// removed within a few announcements, so the ZSET does not grow with the
// clients that ever lived.
func TestFleetDropsSilentClients(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			ctx := context.Background()
			rdb := be.New(t)
			prefix := testutil.Prefix(t)
			const interval = 100 * time.Millisecond
			a := bucket.NewFleet(rdb, prefix, "a", interval)
			b := bucket.NewFleet(rdb, prefix, "b", interval)
			gone := bucket.NewFleet(rdb, prefix, "gone", interval)

			for _, f := range []*bucket.Fleet{gone, b, a} {
				_, err := f.Announce(ctx)
				require.NoError(t, err)
			}
			require.Equal(t, 3, a.Size(), "a sees the clients that just announced")
			time.Sleep(a.LiveFor() + 50*time.Millisecond)

			// b announces again; gone stays silent. Every announcement of
			// a from now on sees b and not gone.
			_, err := b.Announce(ctx)
			require.NoError(t, err)
			score := func() error { return rdb.ZScore(ctx, keys.Movers(prefix), "gone").Err() }
			pruned := -1
			for i := range 12 {
				changed, err := a.Announce(ctx)
				require.NoError(t, err)
				require.Equal(t, i == 0, changed, "announcement %d", i)
				require.Equal(t, 2, a.Size(), "announcement %d: a, b live; gone is not", i)
				if pruned < 0 && score() == redis.Nil {
					pruned = i
				}
			}
			require.GreaterOrEqual(t, pruned, 0, "the silent client's entry outlived 12 announcements")
		})
	}
}

// TestFleetSwitchesFormatOnlyWhenEveryClientReadsIt: UpgradeFormat
// refuses, naming it and writing nothing, while a live client announces
// no format it reads (a client of the older version); once it left, the
// switch is made, every client reads it at its next announcement, and a
// rerun after a lost reply finds it made. A client of the older version
// announcing after the switch is reported as outdated. The switch of a
// fresh namespace at Start is made only while no other client is live.
func TestFleetSwitchesFormatOnlyWhenEveryClientReadsIt(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			ctx := context.Background()
			rdb := be.New(t)
			prefix := testutil.Prefix(t)
			const interval = 100 * time.Millisecond
			cur := bucket.NewFleet(rdb, prefix, "cur", interval)
			old := bucket.NewFleet(rdb, prefix, "old", interval)
			old.SetOlderFormat()
			for _, f := range []*bucket.Fleet{cur, old} {
				_, err := f.Announce(ctx)
				require.NoError(t, err)
			}
			require.False(t, cur.WritesCurrentFormat())
			require.Empty(t, cur.Outdated(), "nothing is outdated while the older format is in force")

			require.NoError(t, cur.ReadFormat(ctx, true))
			require.False(t, cur.WritesCurrentFormat(), "not fresh: another client is live")
			formats := rdb.HGetAll(ctx, keys.MoversFormats(prefix)).Val()
			require.Equal(t, map[string]string{"cur": keys.FormatCurrent}, formats, "the older client records none")
			out, err := cur.UpgradeFormat(ctx)
			require.NoError(t, err)
			require.Equal(t, []string{"old"}, out)
			require.Zero(t, rdb.Exists(ctx, keys.MoversFormat(prefix)).Val(), "a refusal writes nothing")
			require.Equal(t, formats, rdb.HGetAll(ctx, keys.MoversFormats(prefix)).Val())
			require.False(t, cur.WritesCurrentFormat())

			require.NoError(t, old.Leave(ctx))
			out, err = cur.UpgradeFormat(ctx)
			require.NoError(t, err)
			require.Empty(t, out)
			require.True(t, cur.WritesCurrentFormat())
			require.Equal(t, keys.FormatCurrent, rdb.Get(ctx, keys.MoversFormat(prefix)).Val())
			out, err = cur.UpgradeFormat(ctx)
			require.NoError(t, err)
			require.Empty(t, out, "a rerun finds the switch made")

			other := bucket.NewFleet(rdb, prefix, "other", interval)
			require.False(t, other.WritesCurrentFormat())
			_, err = other.Announce(ctx)
			require.NoError(t, err)
			require.True(t, other.WritesCurrentFormat(), "read at the announcement")

			_, err = old.Announce(ctx) // started after the switch
			require.NoError(t, err)
			require.False(t, old.WritesCurrentFormat(), "an older client writes the older format")
			_, err = cur.Announce(ctx)
			require.NoError(t, err)
			require.Equal(t, []string{"old"}, cur.Outdated())

			// A fresh namespace: switched at the first client's Start.
			p2 := testutil.Prefix(t)
			alone := bucket.NewFleet(rdb, p2, "alone", interval)
			require.NoError(t, alone.ReadFormat(ctx, true))
			require.True(t, alone.WritesCurrentFormat())
		})
	}
}

// TestFleetSwitchesToTheStartLogOnlyWithoutAClientOfTheVersionBefore: a
// namespace the version before switched to its format (ready entries
// carry their due time, keys.FormatDueInState) is read as such, but its
// rates' starts still go to the previous version's ZSET too
// (WritesStartLog false) while a client announcing that format lives: the
// switch to keys.FormatStartLog refuses, naming it and writing nothing;
// once it left, the switch is made, and both layouts' formats are in
// force. A fresh namespace starts at the start log.
func TestFleetSwitchesToTheStartLogOnlyWithoutAClientOfTheVersionBefore(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			ctx := context.Background()
			rdb := be.New(t)
			prefix := testutil.Prefix(t)
			const interval = 100 * time.Millisecond
			require.NoError(t, rdb.Set(ctx, keys.MoversFormat(prefix), keys.FormatDueInState, 0).Err())
			cur := bucket.NewFleet(rdb, prefix, "cur", interval)
			prev := bucket.NewFleet(rdb, prefix, "prev", interval)
			for _, f := range []*bucket.Fleet{cur, prev} {
				_, err := f.Announce(ctx)
				require.NoError(t, err)
			}
			// As the version before announces: the format it reads, "2".
			require.NoError(t, rdb.HSet(ctx, keys.MoversFormats(prefix), "prev", keys.FormatDueInState).Err())
			_, err := cur.Announce(ctx)
			require.NoError(t, err)
			require.True(t, cur.WritesCurrentFormat(), "ready entries carry their due time")
			require.False(t, cur.WritesStartLog(), "starts go to the ZSET too")
			require.Empty(t, cur.Outdated(), "the version before reads format 2")

			out, err := cur.UpgradeFormat(ctx)
			require.NoError(t, err)
			require.Equal(t, []string{"prev"}, out)
			require.Equal(t, keys.FormatDueInState, rdb.Get(ctx, keys.MoversFormat(prefix)).Val(), "a refusal writes nothing")
			require.False(t, cur.WritesStartLog())

			require.NoError(t, prev.Leave(ctx))
			out, err = cur.UpgradeFormat(ctx)
			require.NoError(t, err)
			require.Empty(t, out)
			require.Equal(t, keys.FormatStartLog, rdb.Get(ctx, keys.MoversFormat(prefix)).Val())
			require.True(t, cur.WritesStartLog())
			require.True(t, cur.WritesCurrentFormat())

			p2 := testutil.Prefix(t)
			alone := bucket.NewFleet(rdb, p2, "alone", interval)
			require.NoError(t, alone.ReadFormat(ctx, true))
			require.True(t, alone.WritesStartLog())
			require.True(t, alone.WritesCurrentFormat())
		})
	}
}
