package rdb

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNotReplicated is a write that the master applied but that fewer
// replicas than asked acknowledged within the wait timeout (Redis WAIT).
// The write may still reach the replicas, or be lost if the master fails
// before they have it.
var ErrNotReplicated = errors.New("redeq: write not acknowledged by enough replicas")

// Durability makes writes wait for replicas: after a pipeline of script
// runs, WAIT Replicas Timeout on the same connection. The zero value is
// off and costs nothing.
type Durability struct {
	Replicas int
	Timeout  time.Duration
}

// On reports whether writes wait for replicas.
func (d Durability) On() bool { return d.Replicas > 0 }

// ReadTimeout returns the read timeout of a go-redis client, under which
// a pipeline reads its replies, WAIT's included; ok is false when the
// client's kind does not tell.
func ReadTimeout(c redis.UniversalClient) (d time.Duration, ok bool) {
	t, ok := timeoutsOf(c)
	return t.read, ok
}

// Run runs one script call, and, when d is on, waits for d's replicas
// as RunDurable does.
func Run(ctx context.Context, c redis.UniversalClient, d Durability, s *redis.Script, keys []string, args ...any) *redis.Cmd {
	if !d.On() {
		return s.Run(ctx, c, keys, args...)
	}
	return RunDurable(ctx, c, d, s, []Call{{Keys: keys, Args: args}})[0]
}

// RunDurable is RunPipelined followed by WAIT on the connection that ran
// the calls: WAIT counts only the writes of its own connection, and a
// script cannot call it. On a cluster the calls are grouped by the master
// of their first key, and each group runs with its WAIT on that master's
// client. A call whose reply arrived but whose writes fewer than
// d.Replicas replicas acknowledged in d.Timeout keeps its reply and gets
// an error wrapping ErrNotReplicated (and nothing else). So does every
// call of a group that met MOVED, ASK, a failover or a connection error:
// the group is run again through the cluster client, which follows the
// slot to its new master, and its replication is then unknown.
func RunDurable(ctx context.Context, c redis.UniversalClient, d Durability, s *redis.Script, calls []Call) []*redis.Cmd {
	cc, ok := c.(*redis.ClusterClient)
	if !ok {
		cmds, _ := waitPipelined(ctx, c, d, s, calls)
		return cmds
	}
	groups := map[*redis.Client][]int{}
	var lost []int // no master known for the slot
	for i, call := range calls {
		node, err := cc.MasterForKey(ctx, call.Keys[0])
		if err != nil {
			lost = append(lost, i)
			continue
		}
		groups[node] = append(groups[node], i)
	}
	out := make([]*redis.Cmd, len(calls))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for node, idx := range groups {
		wg.Go(func() {
			part := make([]Call, len(idx))
			for k, i := range idx {
				part[k] = calls[i]
			}
			cmds, moved := waitPipelined(ctx, node, d, s, part)
			mu.Lock()
			defer mu.Unlock()
			for k, i := range idx {
				out[i] = cmds[k]
			}
			if moved {
				lost = append(lost, idx...)
			}
		})
	}
	wg.Wait()
	if len(lost) > 0 {
		again := make([]Call, len(lost))
		for k, i := range lost {
			again[k] = calls[i]
		}
		cmds := RunPipelined(ctx, cc, s, again)
		for k, i := range lost {
			out[i] = notReplicated(cmds[k], "the slot moved or its master failed")
		}
	}
	return out
}

// waitPipelined runs calls and WAIT in one pipeline on c (one connection
// for a single-node client). moved reports a call that met an error after
// which the group should run again through the cluster client.
func waitPipelined(ctx context.Context, c redis.UniversalClient, d Durability, s *redis.Script, calls []Call) (cmds []*redis.Cmd, moved bool) {
	run := func(calls []Call) ([]*redis.Cmd, *redis.Cmd) {
		cmds := make([]*redis.Cmd, len(calls))
		pipe := c.Pipeline()
		for i, call := range calls {
			cmds[i] = s.EvalSha(ctx, pipe, call.Keys, call.Args...)
		}
		wait := pipe.Do(ctx, "WAIT", d.Replicas, d.Timeout.Milliseconds())
		if _, err := pipe.Exec(ctx); err != nil {
			for _, cmd := range cmds {
				if cmd.Err() == nil && cmd.Val() == nil {
					cmd.SetErr(err)
				}
			}
		}
		return cmds, wait
	}
	cmds, wait := run(calls)
	var missing []int
	for i, cmd := range cmds {
		if isNoScript(cmd.Err()) {
			missing = append(missing, i)
		}
	}
	if len(missing) > 0 {
		// A restarted or promoted server: load the script there and run
		// the calls it refused, with a WAIT of their own.
		if err := s.Load(ctx, c).Err(); err != nil {
			for _, i := range missing {
				cmds[i].SetErr(err)
			}
		} else {
			part := make([]Call, len(missing))
			for k, i := range missing {
				part[k] = calls[i]
			}
			again, wait2 := run(part)
			settle(again, wait2, d)
			for k, i := range missing {
				cmds[i] = again[k]
			}
		}
	}
	settle(cmds, wait, d)
	for _, cmd := range cmds {
		if elsewhere(cmd.Err()) {
			return cmds, true
		}
	}
	return cmds, false
}

// settle marks the calls that got a reply as not replicated when wait
// counted fewer replicas than asked or failed.
func settle(cmds []*redis.Cmd, wait *redis.Cmd, d Durability) {
	n, err := wait.Int64()
	if err == nil && n >= int64(d.Replicas) {
		return
	}
	why := fmt.Sprintf("%d of %d replicas acknowledged in %v", n, d.Replicas, d.Timeout)
	if err != nil {
		why = "WAIT failed: " + err.Error()
	}
	for _, cmd := range cmds {
		notReplicated(cmd, why)
	}
}

// notReplicated sets ErrNotReplicated on a command that got a reply; an
// error already there stays.
func notReplicated(cmd *redis.Cmd, why string) *redis.Cmd {
	if cmd.Err() == nil {
		cmd.SetErr(fmt.Errorf("%w: %s", ErrNotReplicated, why))
	}
	return cmd
}

// elsewhere reports an error after which a call must go through the
// cluster client: the slot moved, the node is no master any more or is
// down, or no reply came.
func elsewhere(err error) bool {
	if err == nil || err == redis.Nil || errors.Is(err, ErrNotReplicated) {
		return false
	}
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return true // the connection failed
	}
	for _, p := range []string{"MOVED ", "ASK ", "TRYAGAIN", "CLUSTERDOWN", "READONLY", "LOADING", "MASTERDOWN"} {
		if strings.HasPrefix(err.Error(), p) {
			return true
		}
	}
	return false
}

// SetDurability makes the Committer's calls wait for replicas. Call it
// before the first Do.
func (c *Committer) SetDurability(d Durability) { c.durable = d }

// runMany runs calls in one pipeline, waiting for replicas when asked.
func (c *Committer) runMany(ctx context.Context, calls []Call) []*redis.Cmd {
	return runCalls(ctx, c.rdb, c.durable, c.script, calls)
}

// runCalls is RunPipelined, or RunDurable when d is on.
func runCalls(ctx context.Context, c redis.UniversalClient, d Durability, s *redis.Script, calls []Call) []*redis.Cmd {
	if d.On() {
		return RunDurable(ctx, c, d, s, calls)
	}
	return RunPipelined(ctx, c, s, calls)
}
