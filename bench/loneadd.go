package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"time"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/redeq"
	"github.com/redis/go-redis/v9"
)

// The floor of a lone add: bare scripts that write one job as redeq's
// add.lua does and as asynq's enqueue does, with none of the checks, so
// that the server's time in redeq's script can be set beside what its
// commands cost alone. loneSix runs add.lua's six commands for one job
// (the server's time, the pool's size, the lane's rerun record, the job,
// the wake check, the bucket entry); loneThree runs the three of asynq's
// enqueue (the job's existence, its HASH, the schedule entry).
const (
	// KEYS: pool, bucket, lane record; ARGV: run number, id, envelope,
	// due time.
	loneSix = `
local t = redis.call('TIME')
if redis.call('HLEN', KEYS[1]) >= 10000000 then return -2 end
redis.call('SET', KEYS[3], ARGV[1] .. '|' .. ARGV[4], 'PX', 30000, 'GET')
if redis.call('HSETNX', KEYS[1], ARGV[2], t[1] .. ARGV[3]) == 0 then return -1 end
redis.call('ZCOUNT', KEYS[2], '-inf', ARGV[4])
redis.call('ZADD', KEYS[2], ARGV[4], ARGV[2])
return tonumber(ARGV[4])`
	// KEYS: job key prefix, schedule; ARGV: as loneSix's.
	loneThree = `
local key = KEYS[1] .. ARGV[2]
if redis.call('EXISTS', key) == 1 then return -1 end
redis.call('HSET', key, 'msg', ARGV[3], 'state', 'scheduled', 'pending_since', ARGV[4])
redis.call('ZADD', KEYS[2], ARGV[4], ARGV[2])
return 1`
)

// loneAdd measures the server's side of a lone Add, one job a call from
// one goroutine: redeq's Add (on the caller's goroutine: its ctx cannot
// end) and the two bare scripts, in Rounds rounds of Enqueue/4 jobs each,
// every job due an hour on, the three taking turns within a round and
// rotating which goes first. Each first adds as many jobs again unmeasured,
// so that no figure is of a set small enough for Redis's compact
// encodings.
func (b *bench) loneAdd() {
	n := b.sz.Enqueue / 4
	fmt.Printf("a lone add: %d jobs a round from one goroutine, one a call, %d rounds\n", n, b.sz.Rounds)
	script := map[string][]float64{}
	ctx := context.Background()
	due := strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)
	redeqAdds := func(from int) {
		cfg := config.Default()
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		c, err := redeq.New(b.admin, cfg)
		if err != nil {
			fail("redeq.New: %v", err)
		}
		defer func() {
			if err := c.Shutdown(ctx); err != nil {
				fail("shutdown: %v", err)
			}
		}()
		for i := from; i < from+n; i++ {
			if err := c.Add(ctx, &redeq.Job{Topic: topic, ID: "l" + strconv.Itoa(i), Body: body100, Delay: time.Hour}); err != nil {
				fail("add: %v", err)
			}
		}
	}
	bareAdds := func(name, src string, keys []string) func(int) {
		s := redis.NewScript(src)
		return func(from int) {
			if err := s.Load(ctx, b.admin).Err(); err != nil {
				fail("the lone add's floor: %v", err)
			}
			for i := from; i < from+n; i++ {
				if err := s.EvalSha(ctx, b.admin, keys, i+1, name+strconv.Itoa(i), "1|0|0|\n"+string(body100), due).Err(); err != nil {
					fail("the lone add's floor: %v", err)
				}
			}
		}
	}
	kinds := []struct {
		name string
		add  func(from int)
	}{
		{"add.lua", redeqAdds},
		{"six", bareAdds("six", loneSix, []string{"{lone}:pool", "{lone}:bucket", "{lone}:op"})},
		{"three", bareAdds("three", loneThree, []string{"{lone}:t:", "{lone}:scheduled"})},
	}
	for r := range b.sz.Rounds {
		b.flush()
		for k := range kinds {
			kind := kinds[(r+k)%len(kinds)]
			kind.add(0) // the fill
			before := b.costs()
			kind.add(n)
			script[kind.name] = append(script[kind.name], b.costs().since(before).scriptUS/float64(n))
		}
		fmt.Printf("  round %d: Redis time in the script per job add.lua/six bare commands/three bare commands %.2f/%.2f/%.2f µs\n", r+1,
			script["add.lua"][r], script["six"][r], script["three"][r])
	}
	for _, c := range []struct{ key, name, note string }{
		{"add.lua", "lone add: add.lua, Redis time in the script per job", ""},
		{"six", "lone add: its six commands alone, Redis time in the script per job", "TIME, HLEN, SET ... GET, HSETNX, ZCOUNT, ZADD in a bare script; "},
		{"three", "lone add: asynq's three commands alone, Redis time in the script per job", "EXISTS, HSET, ZADD in a bare script; "},
	} {
		vals := script[c.key]
		b.res.Rows = append(b.res.Rows, row{Name: c.name, Unit: "µs", Redeq: median(vals), Better: "lower", Solo: true, Comment: c.note + "median of the rounds: " + list2(vals)})
		fmt.Printf("  %-60s %8.2f µs\n", c.name, median(vals))
	}
}
