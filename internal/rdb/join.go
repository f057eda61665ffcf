package rdb

import (
	"context"
	"fmt"
	"slices"

	"github.com/redis/go-redis/v9"
)

// MaxJoin bounds the calls one run of a Committer's joining script
// carries, so that a run stays short next to the other clients' commands.
const MaxJoin = 64

// NewJoiningCommitter returns a Committer of a script that takes many
// calls in one run: the calls a pipeline would carry that have the same
// Keys and the same first shared Args go as one run of script (at most
// MaxJoin of them), with the shared Args once, then the rest of each
// call's Args in turn. The script replies with an array of one element
// per call, and each caller gets its own element; a lone call is a run of
// one. One run costs the server one EVALSHA, one argument parse and one
// set of per-run reads instead of one each per call.
//
// runKey, when not nil, gives each run a key and a number (see RunKey):
// the key is appended to the run's Keys and the number follows the shared
// Args, so that the script can keep its reply there for a rerun of the
// same run.
func NewJoiningCommitter(c redis.UniversalClient, script *redis.Script, shared int, runKey RunKey) *Committer {
	cm := NewCommitter(c, script)
	cm.join, cm.shared, cm.runKey = true, shared, runKey
	return cm
}

// RunKey takes, for one run of a joining script on keys, the key the run
// keeps its reply in for a rerun and the run's number, an argument that
// follows the shared Args; release gives the key back once every attempt
// go-redis makes of the run has ended. A key serves one run at a time, and
// the numbers of the runs on a key grow: a copy of a run that arrives
// after a later run on its key is known to be stale.
type RunKey func(keys []string) (key string, seq any, release func())

// RunJoined runs calls of a joining script (see NewJoiningCommitter), at
// most most to a run, in a single pipeline (waiting for d's replicas when
// d is on) and returns each call's own reply element or error, in call
// order, and the error of the pipeline as a whole when no reply came (see
// NoReply).
//
// Calls on the same Keys keep their order only while they share one run:
// when the server lost the script (a restart, a failover) and another
// client loads it while this pipeline is being read, the runs before that
// moment fail with NOSCRIPT and run again after the pipeline, after the
// runs that followed them. A caller that needs the order of calls on the
// same Keys sends at most most calls of the same Keys in one pipeline.
func RunJoined(ctx context.Context, c redis.UniversalClient, s *redis.Script, calls []Call, shared, most int, runKey RunKey, d Durability) (vals []any, errs []error, whole error) {
	joined, members, releases := join(calls, shared, most, runKey)
	defer func() {
		for _, r := range releases {
			r()
		}
	}()
	cmds := runCalls(ctx, c, d, s, joined)
	vals, errs = make([]any, len(calls)), make([]error, len(calls))
	for g, cmd := range cmds {
		split(cmd, members[g], vals, errs)
	}
	return vals, errs, NoReply(cmds)
}

// join groups calls with the same Keys and shared first Args, at most
// most to a group, in the order of their first call; members[g] lists
// the calls of joined[g], in order; releases give back the run keys
// taken (runKey). Calls on the same Keys run in call order: a call joins
// only the latest group of its Keys.
func join(calls []Call, shared, most int, runKey RunKey) (joined []Call, members [][]int, releases []func()) {
	for i, call := range calls {
		// The latest group of the call's keys is the one that may have
		// room; a call whose shared Args differ from that group's starts a
		// new one rather than join an earlier group, which would run it
		// before the calls of that group and break the order of the calls
		// on the same keys (the first of two adds of an id must win).
		g := len(joined) - 1
		for g >= 0 && !sameKeys(joined[g], call) {
			g--
		}
		if g >= 0 && (len(members[g]) >= most || !sameTarget(joined[g], call, shared)) {
			g = -1
		}
		if g < 0 {
			args := make([]any, shared, shared+1+(len(call.Args)-shared)*min(len(calls)-i, most))
			copy(args, call.Args[:shared])
			keys := call.Keys
			if runKey != nil {
				key, seq, release := runKey(keys)
				keys = append(slices.Clip(keys), key)
				args = append(args, seq)
				releases = append(releases, release)
			}
			joined = append(joined, Call{Keys: keys, Args: args})
			members = append(members, nil)
			g = len(joined) - 1
		}
		joined[g].Args = append(joined[g].Args, call.Args[shared:]...)
		members[g] = append(members[g], i)
	}
	return joined, members, releases
}

// sameKeys tells whether call has the Keys of the run j (which may end
// with its run key).
func sameKeys(j, call Call) bool {
	return len(j.Keys) >= len(call.Keys) && slices.Equal(j.Keys[:len(call.Keys)], call.Keys)
}

// sameTarget tells whether call can join the run j: the same Keys and the
// same shared Args (strings or integers; anything else never matches).
func sameTarget(j, call Call, shared int) bool {
	if !sameKeys(j, call) {
		return false
	}
	for k := range shared {
		if !sameArg(j.Args[k], call.Args[k]) {
			return false
		}
	}
	return true
}

func sameArg(a, b any) bool {
	switch a := a.(type) {
	case string:
		b, ok := b.(string)
		return ok && a == b
	case int:
		b, ok := b.(int)
		return ok && a == b
	case int64:
		b, ok := b.(int64)
		return ok && a == b
	}
	return false
}

// split hands the calls at idx their elements of one run's reply cmd, or
// its error.
func split(cmd *redis.Cmd, idx []int, vals []any, errs []error) {
	v, err := cmd.Result()
	if err == nil {
		r, ok := v.([]any)
		if !ok || len(r) != len(idx) {
			err = fmt.Errorf("redeq: script reply %T of %d elements, want %d", v, len(r), len(idx))
		} else {
			for k, i := range idx {
				vals[i] = r[k]
			}
		}
	}
	if err != nil {
		for _, i := range idx {
			errs[i] = err
		}
	}
}
