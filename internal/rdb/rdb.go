package rdb

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Call is one run of a script.
type Call struct {
	Keys []string
	Args []any
}

// RunPipelined runs script once per call in a single pipeline (split per
// node on a cluster) and returns the commands in call order, each with its
// own reply or error: on a cluster one node can fail while the others
// answer, and a reply that arrived is never replaced by another command's
// error. A command that got no reply carries the pipeline's error. Calls
// that failed with NOSCRIPT (a restarted or failed-over server) are loaded
// and run again one by one.
func RunPipelined(ctx context.Context, c redis.UniversalClient, s *redis.Script, calls []Call) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(calls))
	pipe := c.Pipeline()
	for i, call := range calls {
		cmds[i] = s.EvalSha(ctx, pipe, call.Keys, call.Args...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		for _, cmd := range cmds {
			// A hook may end a pipeline without touching its commands.
			if cmd.Err() == nil && cmd.Val() == nil {
				cmd.SetErr(err)
			}
		}
	}
	for i, cmd := range cmds {
		if isNoScript(cmd.Err()) {
			cmds[i] = s.Run(ctx, c, calls[i].Keys, calls[i].Args...)
		}
	}
	return cmds
}

// NoReply returns the error of a pipeline that failed as a whole: every
// command failed and none with a Redis error reply, so the connection (or
// every node's) failed. It returns nil when any reply arrived.
func NoReply(cmds []*redis.Cmd) error {
	var first error
	for _, cmd := range cmds {
		err := cmd.Err()
		if err == nil || err == redis.Nil || errors.Is(err, ErrNotReplicated) {
			return nil
		}
		var rerr redis.Error
		if errors.As(err, &rerr) {
			return nil
		}
		if first == nil {
			first = err
		}
	}
	return first
}

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// Slice reads a script's array reply.
func Slice(v any) ([]any, error) {
	s, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("redeq: unexpected script reply %T", v)
	}
	return s, nil
}

// Int reads an integer element of a script reply.
func Int(v any) (int64, error) {
	n, ok := v.(int64)
	if !ok {
		return 0, fmt.Errorf("redeq: unexpected script reply element %T", v)
	}
	return n, nil
}

// Str reads a string element of a script reply; false (a Lua nil) is "".
func Str(v any) (string, bool) {
	s, ok := v.(string)
	return s, ok
}

// NodeOf names the Redis Cluster master that holds key, from the client's
// view of the cluster (no call when it has one), for logs and errors that
// must say where a key lives; "" when c is not a cluster client or does
// not know.
func NodeOf(ctx context.Context, c redis.UniversalClient, key string) string {
	cc, ok := c.(*redis.ClusterClient)
	if !ok {
		return ""
	}
	n, err := cc.MasterForKey(ctx, key)
	if err != nil {
		return ""
	}
	return n.Options().Addr
}

// On is the client that holds key: on a Redis Cluster its master (so a
// keyless command such as TIME, sent with commands of key's slot, reaches
// that node and no other), else c itself.
func On(ctx context.Context, c redis.UniversalClient, key string) (redis.Cmdable, error) {
	cc, ok := c.(*redis.ClusterClient)
	if !ok {
		return c, nil
	}
	n, err := cc.MasterForKey(ctx, key)
	if err != nil {
		return nil, err
	}
	return n, nil
}
