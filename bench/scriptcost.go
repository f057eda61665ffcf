package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/redeq-go/redeq/ack"
	"github.com/redeq-go/redeq/bucket"
	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/ready"
	"github.com/redeq-go/redeq/redeq"
	"github.com/redis/go-redis/v9"
)

// scriptCost measures what the server spends per job in each script of a
// job's hot path after its add, with nothing else running and fixed batch
// sizes, so that a change to a script shows in its own figure: 100,000 jobs
// due now in one bucket are moved to the ready list (move.lua, 1,000 a
// call), then fetched 16 a call by one consumer (fetch.lua), then acked 16
// a call (settle.lua), each phase alone; then again 64 a call; in Rounds
// rounds, medians of the rounds. The figures are the server's time in EVALSHA per job
// (commandstats), and its CPU per job (used_cpu_user + used_cpu_sys, the
// network's share included). Each round then runs the floor (floorRound)
// and a drain's shape (cycleRound).
func (b *bench) scriptCost() {
	for _, batch := range []int{16, 64} {
		b.scriptCostOf(batch)
	}
}

// scriptCostOf is scriptCost with batch jobs fetched and acked a call.
func (b *bench) scriptCostOf(batch int) {
	n := 5 * b.sz.Drain
	rounds := b.sz.Rounds
	fmt.Printf("each hot-path script alone: %d jobs in one bucket, moved 1,000 a call, fetched and acked %d a call, %d rounds\n", n, batch, rounds)
	phases := []string{"move", "fetch", "settle"}
	script, cpu := map[string][]float64{}, map[string][]float64{}
	for r := range rounds {
		b.flush()
		cfg := config.Default()
		cfg.Concurrency = 1
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		c, err := redeq.New(b.admin, cfg)
		if err != nil {
			fail("redeq.New: %v", err)
		}
		ctx := context.Background()
		b.addAll(c, n)
		time.Sleep(2 * time.Millisecond) // every job due
		phase := func(name string, f func()) {
			before := b.costs()
			f()
			d := b.costs().since(before)
			script[name] = append(script[name], d.scriptUS/float64(n))
			cpu[name] = append(cpu[name], d.serverS*1e6/float64(n))
		}
		phase("move", func() {
			for moved := 0; moved < n; {
				res, err := bucket.Move(ctx, b.admin, cfg.Prefix, topic, 0, 1000)
				if err != nil {
					fail("move: %v", err)
				}
				if res.Moved == 0 {
					fail("move: %d of %d jobs moved, then none", moved, n)
				}
				moved += res.Moved
			}
		})
		var items []ready.Item
		phase("fetch", func() {
			for len(items) < n {
				got, err := ready.FetchBatch(ctx, b.admin, cfg.Prefix, topic, 0, "c1", batch, false)
				if err != nil {
					fail("fetch: %v", err)
				}
				if len(got.Items) == 0 {
					fail("fetch: %d of %d jobs fetched, then none", len(items), n)
				}
				items = append(items, got.Items...)
			}
		})
		s := ack.NewSettler(b.admin, cfg.Prefix, "c1", cfg.DeadRetention)
		phase("settle", func() {
			for i := 0; i < n; i += batch {
				outs := make([]ack.Outcome, 0, batch)
				for _, it := range items[i:min(i+batch, n)] {
					outs = append(outs, ack.Outcome{ID: it.ID, Token: it.Token, Op: ack.OpAck, Late: it.Late})
				}
				applied, err := s.Settle(ctx, topic, 0, outs)
				if err != nil {
					fail("settle: %v", err)
				}
				for k, ok := range applied {
					if !ok {
						fail("settle: the ack of %s was dropped", outs[k].ID)
					}
				}
			}
		})
		fmt.Printf("  round %d: script µs per job move/fetch/settle %.2f/%.2f/%.2f, Redis CPU µs per job %.2f/%.2f/%.2f\n", r+1,
			script["move"][r], script["fetch"][r], script["settle"][r], cpu["move"][r], cpu["fetch"][r], cpu["settle"][r])
		b.floorRound(n, batch, phase)
		fmt.Printf("  round %d, the floor: Redis CPU µs per job move/fetch/settle %.2f/%.2f/%.2f\n", r+1,
			cpu["floor move"][r], cpu["floor fetch"][r], cpu["floor settle"][r])
		b.cycleRound(n, batch, phase)
		fmt.Printf("  round %d, drain-shaped fetch + settle: Redis CPU µs per job redeq/floor with in-flight set/floor %.2f/%.2f/%.2f\n", r+1,
			cpu["cycle"][r], cpu["cycle floor in-flight"][r], cpu["cycle floor"][r])
	}
	for _, c := range []struct{ key, name, note string }{
		{"cycle", "drain-shaped: fetch + settle, %d a call, Redis CPU per job", ""},
		{"cycle floor in-flight", "drain-shaped: the floor with the in-flight set, %d a call, Redis CPU per job", "bare scripts and an in-flight ZSET; "},
		{"cycle floor", "drain-shaped: the floor, %d a call, Redis CPU per job", "bare scripts, no promise kept; "},
	} {
		b.res.Rows = append(b.res.Rows, row{Name: fmt.Sprintf(c.name, batch), Unit: "µs", Redeq: median(cpu[c.key]), Better: "lower", Solo: true, Comment: c.note + "median of the rounds: " + list2(cpu[c.key])})
	}
	sum := func(prefix string) []float64 {
		var out []float64
		for r := range rounds {
			out = append(out, cpu[prefix+"move"][r]+cpu[prefix+"fetch"][r]+cpu[prefix+"settle"][r])
		}
		return out
	}
	b.res.Rows = append(b.res.Rows,
		row{Name: fmt.Sprintf("script alone: move + fetch + settle, %d a call, Redis CPU per job", batch), Unit: "µs", Redeq: median(sum("")), Better: "lower", Solo: true, Comment: "median of the rounds: " + list2(sum(""))},
		row{Name: fmt.Sprintf("the floor: move + fetch + settle, %d a call, Redis CPU per job", batch), Unit: "µs", Redeq: median(sum("floor ")), Better: "lower", Solo: true, Comment: "bare scripts, no promise kept; median of the rounds: " + list2(sum("floor "))})
	for _, p := range phases {
		b.res.Rows = append(b.res.Rows,
			row{Name: fmt.Sprintf("script alone: %s, %d a call, Redis time in the script per job", p, batch), Unit: "µs", Redeq: median(script[p]), Better: "lower", Solo: true, Comment: "median of the rounds: " + list2(script[p])},
			row{Name: fmt.Sprintf("script alone: %s, %d a call, Redis CPU per job", p, batch), Unit: "µs", Redeq: median(cpu[p]), Better: "lower", Solo: true, Comment: "median of the rounds: " + list2(cpu[p])})
	}
	for _, r := range b.res.Rows[len(b.res.Rows)-2*len(phases)-5:] {
		fmt.Printf("  %-60s %8.2f %s\n", r.Name, r.Redeq, r.Unit)
	}
}

func list2(v []float64) string {
	var s []string
	for _, x := range v {
		s = append(s, fmt.Sprintf("%.2f", x))
	}
	return strings.Join(s, ", ")
}

// The floor: what the server spends per job to carry it from the bucket
// to a handler and out of the pool in a design with a delivery state per
// job, measured by bare scripts that do that data movement and nothing
// else. The move takes due ids from the bucket to the ready list and
// marks them ready; the fetch reads the window, the states and the
// envelopes, marks each id taken by a token and trims the list; the
// settle reads the states and removes each job whose state names its
// delivery, with its state. No fence against the reaper or a rerun (no
// in-flight set), no limits, no history, no due time kept, no check of
// an argument: each is a promise redeq keeps that the floor does not, so
// the gap between the two rows is what those promises cost. With ARGV
// "1" after the others, the fetch and the settle also keep an in-flight
// ZSET as redeq does (a member "<token>:<id>" per delivery, scored with
// the fetch time; the settle reads and removes the members), left in the
// encoding Redis gives it (a listpack while small): the floor with the
// in-flight set, which the drain-shaped rows set apart.
const (
	floorMove = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local got = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[1]))
if #got == 0 then return 0 end
local ids, st = {}, {}
for i = 1, #got, 2 do
  ids[#ids + 1] = got[i]
  st[#st + 1] = got[i]
  st[#st + 1] = 'r' .. got[i + 1]
end
redis.call('RPUSH', KEYS[2], unpack(ids))
redis.call('HSET', KEYS[3], unpack(st))
redis.call('ZREM', KEYS[1], unpack(ids))
return #ids`
	// KEYS: ready, state, pool, in-flight; ARGV: most, token base,
	// consumer, "1" to keep the in-flight set.
	floorFetch = `
local ids = redis.call('LRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
if #ids == 0 then return {} end
local states = redis.call('HMGET', KEYS[2], unpack(ids))
local envs = redis.call('HMGET', KEYS[3], unpack(ids))
local base = tonumber(ARGV[2])
local inflight = ARGV[4] == '1'
local now
if inflight then
  local t = redis.call('TIME')
  now = string.format('%d', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
end
local st, fl, out = {}, {}, {}
for i, id in ipairs(ids) do
  if states[i] and envs[i] then
    local tok = string.format('%d', base + i)
    st[#st + 1] = id
    st[#st + 1] = tok .. '@' .. ARGV[3]
    if inflight then
      fl[#fl + 1] = now
      fl[#fl + 1] = tok .. ':' .. id
    end
    out[#out + 1] = id
    out[#out + 1] = tok
    out[#out + 1] = envs[i]
  end
end
if #st > 0 then redis.call('HSET', KEYS[2], unpack(st)) end
if #fl > 0 then redis.call('ZADD', KEYS[4], unpack(fl)) end
redis.call('LTRIM', KEYS[1], #ids, -1)
return out`
	// KEYS: state, pool, in-flight; ARGV: consumer, "1" to keep the
	// in-flight set, then id and token per ack.
	floorSettle = `
local n = (#ARGV - 2) / 2
local inflight = ARGV[2] == '1'
local ids, want, mem = {}, {}, {}
for i = 1, n do
  ids[i] = ARGV[2 * i + 1]
  want[i] = ARGV[2 * i + 2] .. '@' .. ARGV[1]
  if inflight then mem[i] = ARGV[2 * i + 2] .. ':' .. ids[i] end
end
local states = redis.call('HMGET', KEYS[1], unpack(ids))
local scores = {}
if inflight then scores = redis.call('ZMSCORE', KEYS[3], unpack(mem)) end
local out, del = {}, {}
for i = 1, n do
  out[i] = 0
  if states[i] == want[i] then
    if not inflight or scores[i] then
      out[i] = 1
      del[#del + 1] = ids[i]
    end
  end
end
if inflight then redis.call('ZREM', KEYS[3], unpack(mem)) end
if #del > 0 then
  redis.call('HDEL', KEYS[1], unpack(del))
  redis.call('HDEL', KEYS[2], unpack(del))
end
return out`
)

// floorKit is the floor's scripts and keys, with n jobs of a 100-byte body
// due in its bucket.
type floorKit struct {
	b                                *bench
	n                                int
	move, fetch, settle              *redis.Script
	bucket, ready, state, pool, held string
}

// floorJobs flushes the database and puts n jobs due a second ago in the
// floor's bucket.
func (b *bench) floorJobs(n int) floorKit {
	b.flush()
	k := floorKit{b: b, n: n, move: redis.NewScript(floorMove), fetch: redis.NewScript(floorFetch), settle: redis.NewScript(floorSettle),
		bucket: "{floor}:bucket", ready: "{floor}:ready", state: "{floor}:state", pool: "{floor}:pool", held: "{floor}:held"}
	for _, sc := range []*redis.Script{k.move, k.fetch, k.settle} {
		if err := sc.Load(b.ctx, b.admin).Err(); err != nil {
			fail("the floor's scripts: %v", err)
		}
	}
	due := float64(time.Now().Add(-time.Second).UnixMilli())
	list := ids("f", n)
	for i := 0; i < n; i += 1000 {
		pipe := b.admin.Pipeline()
		for _, id := range list[i:min(i+1000, n)] {
			pipe.HSet(b.ctx, k.pool, id, "1|1764950000000|0|0|\n"+string(body100))
			pipe.ZAdd(b.ctx, k.bucket, redis.Z{Score: due, Member: id})
		}
		if _, err := pipe.Exec(b.ctx); err != nil {
			fail("the floor's jobs: %v", err)
		}
	}
	return k
}

// moveAll moves every job to the ready list, 1,000 a call.
func (k floorKit) moveAll() {
	for moved := 0; moved < k.n; {
		got, err := k.move.EvalSha(k.b.ctx, k.b.admin, []string{k.bucket, k.ready, k.state}, 1000).Int()
		if err != nil || got == 0 {
			fail("the floor's move: %d of %d moved: %v", moved, k.n, err)
		}
		moved += got
	}
}

// take fetches at most batch jobs with tokens from base on: an id and a
// token per job taken.
func (k floorKit) take(batch, base int, inflight bool) []any {
	got, err := k.fetch.EvalSha(k.b.ctx, k.b.admin, []string{k.ready, k.state, k.pool, k.held}, batch, base, "c1", onOff(inflight)).Slice()
	if err != nil || len(got) == 0 {
		fail("the floor's fetch: none taken: %v", err)
	}
	var taken []any
	for i := 0; i < len(got); i += 3 {
		taken = append(taken, got[i], got[i+1])
	}
	return taken
}

// ack settles the jobs of taken (an id and a token each).
func (k floorKit) ack(taken []any, inflight bool) {
	args := append([]any{"c1", onOff(inflight)}, taken...)
	got, err := k.settle.EvalSha(k.b.ctx, k.b.admin, []string{k.state, k.pool, k.held}, args...).Int64Slice()
	if err != nil {
		fail("the floor's settle: %v", err)
	}
	for _, ok := range got {
		if ok != 1 {
			fail("the floor's settle dropped an ack")
		}
	}
}

func onOff(on bool) string {
	if on {
		return "1"
	}
	return "0"
}

// floorRound runs the floor's three phases on n jobs, batch a fetch and a
// settle, through phase (which records each one's costs under its name).
func (b *bench) floorRound(n, batch int, phase func(string, func())) {
	k := b.floorJobs(n)
	phase("floor move", k.moveAll)
	var taken []any
	phase("floor fetch", func() {
		for len(taken) < 2*n {
			taken = append(taken, k.take(batch, len(taken), false)...)
		}
	})
	phase("floor settle", func() {
		for i := 0; i < 2*n; i += 2 * batch {
			k.ack(taken[i:min(i+2*batch, 2*n)], false)
		}
	})
}

// cycleRound drains n ready jobs in a drain's shape: each fetch of batch
// jobs is acked lag fetches later, so that the in-flight set holds some 48
// deliveries, as a drain's consumer of 16 workers holds its running jobs
// and the acks waiting for the next settle (at 16 a call the acks of a
// fetch go two fetches later; at 64, at once). It runs with redeq's
// scripts, with the floor's and an in-flight set, and with the floor's
// alone. phase records each one's costs: the moves before are not counted.
func (b *bench) cycleRound(n, batch int, phase func(string, func())) {
	lag := max(48/batch-1, 0)
	cfg := config.Default()
	b.flush()
	c, err := redeq.New(b.admin, cfg)
	if err != nil {
		fail("redeq.New: %v", err)
	}
	b.addAll(c, n)
	time.Sleep(2 * time.Millisecond)
	for moved := 0; moved < n; {
		res, err := bucket.Move(b.ctx, b.admin, cfg.Prefix, topic, 0, 1000)
		if err != nil || res.Moved == 0 {
			fail("move: %d of %d moved: %v", moved, n, err)
		}
		moved += res.Moved
	}
	s := ack.NewSettler(b.admin, cfg.Prefix, "c1", cfg.DeadRetention)
	settle := func(outs []ack.Outcome) {
		applied, err := s.Settle(b.ctx, topic, 0, outs)
		if err != nil {
			fail("settle: %v", err)
		}
		for i, ok := range applied {
			if !ok {
				fail("settle: the ack of %s was dropped", outs[i].ID)
			}
		}
	}
	phase("cycle", func() {
		var queue [][]ack.Outcome
		for done := 0; done < n; {
			got, err := ready.FetchBatch(b.ctx, b.admin, cfg.Prefix, topic, 0, "c1", batch, false)
			if err != nil || len(got.Items) == 0 {
				fail("fetch: %d of %d drained, then none: %v", done, n, err)
			}
			outs := make([]ack.Outcome, 0, len(got.Items))
			for _, it := range got.Items {
				outs = append(outs, ack.Outcome{ID: it.ID, Token: it.Token, Op: ack.OpAck, Late: it.Late})
			}
			queue = append(queue, outs)
			if len(queue) > lag {
				settle(queue[0])
				queue = queue[1:]
			}
			done += len(outs)
		}
		for _, outs := range queue {
			settle(outs)
		}
	})
	for _, inflight := range []bool{true, false} {
		k := b.floorJobs(n)
		k.moveAll()
		name := "cycle floor"
		if inflight {
			name = "cycle floor in-flight"
		}
		phase(name, func() {
			var queue [][]any
			for done, base := 0, 0; done < n; base += batch {
				taken := k.take(batch, base, inflight)
				queue = append(queue, taken)
				if len(queue) > lag {
					k.ack(queue[0], inflight)
					queue = queue[1:]
				}
				done += len(taken) / 2
			}
			for _, taken := range queue {
				k.ack(taken, inflight)
			}
		})
	}
}

// addAll adds n jobs of a 100-byte body, due now, to topic, 256 a call.
func (b *bench) addAll(c *redeq.Client, n int) {
	list := ids("s", n)
	for i := 0; i < n; i += 256 {
		jobs := make([]*redeq.Job, 0, 256)
		for _, id := range list[i:min(i+256, n)] {
			jobs = append(jobs, &redeq.Job{Topic: topic, ID: id, Body: body100})
		}
		if err := c.AddBatch(b.ctx, jobs); err != nil {
			fail("add: %v", err)
		}
	}
}
