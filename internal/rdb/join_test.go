package rdb_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/rdb"
	"github.com/redeq-go/redeq/internal/testutil"
)

// tagAll takes any number of calls in one run: ARGV[1] is shared, then one
// value per call. It counts its runs and calls in the hash KEYS[1] and
// replies "<tag>:<value>" for each call.
var tagAll = redis.NewScript(`
redis.call('HINCRBY', KEYS[1], 'runs', 1)
local out = {}
for i = 2, #ARGV do
  redis.call('HINCRBY', KEYS[1], 'calls', 1)
  out[#out + 1] = ARGV[1] .. ':' .. ARGV[i]
end
return out`)

// TestRunJoined: consecutive calls to the same keys with the same shared
// arguments run together, at most 64 to a run, and each call gets its own
// reply.
func TestRunJoined(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			c := be.New(t)
			ctx := context.Background()
			p := testutil.Prefix(t)
			a, b := p+":{a}", p+":{b}"
			var calls []rdb.Call
			want := map[string]int{} // key -> calls
			for i := range 150 {
				// Keys interleaved, tags in blocks: a call never joins a run
				// of its keys older than the latest one (that would run it
				// before calls on the same keys sent ahead of it).
				key, tag := []string{a, b}[i%2], []any{"x", "y", 7}[i/50]
				calls = append(calls, rdb.Call{Keys: []string{key}, Args: []any{tag, i}})
				want[key]++
			}
			vals, errs, err := rdb.RunJoined(ctx, c, tagAll, calls, 1, rdb.MaxJoin, nil, rdb.Durability{})
			require.NoError(t, err)
			for i, call := range calls {
				require.NoError(t, errs[i], i)
				require.Equal(t, fmt.Sprintf("%v:%d", call.Args[0], i), vals[i], i)
			}
			// 150 calls on 2 keys x 3 tags: 6 targets of 25 calls each.
			for _, key := range []string{a, b} {
				h, err := c.HGetAll(ctx, key).Result()
				require.NoError(t, err)
				require.Equal(t, map[string]string{"runs": "3", "calls": fmt.Sprint(want[key])}, h, key)
			}
			// A target of more than 64 calls takes more than one run.
			calls = calls[:0]
			for i := range 130 {
				calls = append(calls, rdb.Call{Keys: []string{a}, Args: []any{"z", i}})
			}
			vals, errs, err = rdb.RunJoined(ctx, c, tagAll, calls, 1, rdb.MaxJoin, nil, rdb.Durability{})
			require.NoError(t, err)
			for i := range calls {
				require.NoError(t, errs[i], i)
				require.Equal(t, fmt.Sprintf("z:%d", i), vals[i], i)
			}
			runs, err := c.HGet(ctx, a, "runs").Int()
			require.NoError(t, err)
			require.Equal(t, 3+3, runs)
			c.Del(ctx, a, b)
		})
	}
}

// TestJoiningCommitter: concurrent callers of a joining Committer each get
// their own element of the run that carried them, and each call runs once.
func TestJoiningCommitter(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			c := be.New(t)
			ctx := context.Background()
			key := testutil.Prefix(t) + ":{n}"
			cm := rdb.NewJoiningCommitter(c, tagAll, 1, nil)
			var wg sync.WaitGroup
			const callers, each = 32, 50
			for g := range callers {
				wg.Go(func() {
					tag := fmt.Sprint("g", g%3)
					for i := range each {
						v, err := cm.Do(ctx, rdb.Call{Keys: []string{key}, Args: []any{tag, g*1000 + i}})
						require.NoError(t, err)
						require.Equal(t, fmt.Sprintf("%s:%d", tag, g*1000+i), v)
					}
				})
			}
			wg.Wait()
			n, err := c.HGet(ctx, key, "calls").Int()
			require.NoError(t, err)
			require.Equal(t, callers*each, n)
			c.Del(ctx, key)
		})
	}
}

// TestJoiningCommitterDeadline: a caller of a joining Committer returns
// its ctx's error by its deadline while Redis does not answer.
func TestJoiningCommitterDeadline(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			c := be.New(t)
			g := holdRoundTrips(c, testutil.Prefix(t)+":{hold}")
			cm := rdb.NewJoiningCommitter(c, tagAll, 1, nil)
			var wg sync.WaitGroup
			for i := range 16 {
				wg.Go(func() {
					ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
					defer cancel()
					_, err := cm.Do(ctx, rdb.Call{Keys: []string{g.key}, Args: []any{"t", i}})
					require.ErrorIs(t, err, context.DeadlineExceeded)
					require.False(t, g.late.Load(), "returned only once Redis answered")
				})
			}
			wg.Wait()
			close(g.open)
			ctx := context.Background()
			require.NoError(t, cm.Wait(ctx))
			v, err := cm.Do(ctx, rdb.Call{Keys: []string{g.key}, Args: []any{"t", 99}})
			require.NoError(t, err)
			require.Equal(t, "t:99", v)
			c.Del(ctx, g.key)
		})
	}
}
