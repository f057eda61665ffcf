package testutil

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// Entry is one key of a keyspace a script test seeds or expects: Type
// "hash" (Vals "field=value"), "zset" ("member=score"), "list" (values,
// head first) or "string" (one value).
type Entry struct {
	Key, Type string
	Vals      []string
}

// Hash, ZSet, List and String are the Entry of key with vals.
func Hash(key string, vals ...string) Entry { return Entry{key, "hash", vals} }
func ZSet(key string, vals ...string) Entry { return Entry{key, "zset", vals} }
func List(key string, vals ...string) Entry { return Entry{key, "list", vals} }
func String(key string, val string) Entry   { return Entry{key, "string", []string{val}} }

// Seed writes the entries.
func Seed(t testing.TB, c redis.UniversalClient, es ...Entry) {
	t.Helper()
	ctx := context.Background()
	for _, e := range es {
		for _, v := range e.Vals {
			a, b, _ := strings.Cut(v, "=")
			var err error
			switch e.Type {
			case "hash":
				err = c.HSet(ctx, e.Key, a, b).Err()
			case "zset":
				err = c.Do(ctx, "ZADD", e.Key, b, a).Err()
			case "list":
				err = c.RPush(ctx, e.Key, v).Err()
			case "string":
				err = c.Set(ctx, e.Key, v, 0).Err()
			default:
				t.Fatalf("seed %s: no type %q", e.Key, e.Type)
			}
			require.NoError(t, err, "seed %s", e.Key)
		}
	}
}

// DumpUnder is Dump with each key named without prefix, so that the
// keyspace a script left under one prefix compares with the one seeded as
// expected under another.
func DumpUnder(t testing.TB, c redis.UniversalClient, prefix string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for k, v := range Dump(t, c, prefix) {
		out[strings.TrimPrefix(k, prefix)] = v
	}
	return out
}
