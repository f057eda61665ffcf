package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/testutil"
)

// TestCLIListJSONGivesGetsFields: list -o json gives each job the fields
// get -o json gives it, with the same values (its body among them).
func TestCLIListJSONGivesGetsFields(t *testing.T) {
	for _, b := range testutil.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			e := newEnv(t, b)
			e.ok(t, "add", "--create", "orders", "o1", "--delay", "1h", "--body", "hello", "--header", "a=b", "--max-retries", "3")
			var g map[string]any
			require.NoError(t, json.Unmarshal([]byte(e.ok(t, "-o", "json", "get", "orders", "o1")), &g))
			var l struct{ Jobs []map[string]any }
			require.NoError(t, json.Unmarshal([]byte(e.ok(t, "-o", "json", "list", "orders", "scheduled")), &l))
			require.Len(t, l.Jobs, 1)
			for k, v := range g {
				require.Contains(t, l.Jobs[0], k, "list -o json lacks get's %q", k)
				require.Equal(t, v, l.Jobs[0][k], k)
			}
		})
	}
}

// TestCLIJSONGivesRetrySettings: get and list -o json show a job's retry
// settings, which Get and List return, as they show its other fields.
func TestCLIJSONGivesRetrySettings(t *testing.T) {
	for _, b := range testutil.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			e := newEnv(t, b)
			e.ok(t, "add", "--create", "orders", "o1", "--delay", "1h", "--max-retries", "3")
			require.Equal(t, 3, e.job(t, "orders", "o1").MaxRetries)
			var g map[string]any
			require.NoError(t, json.Unmarshal([]byte(e.ok(t, "-o", "json", "get", "orders", "o1")), &g))
			require.EqualValues(t, 3, g["max_retries"], "get -o json: %v", g)
			var l struct{ Jobs []map[string]any }
			require.NoError(t, json.Unmarshal([]byte(e.ok(t, "-o", "json", "list", "orders", "scheduled")), &l))
			require.Len(t, l.Jobs, 1)
			require.EqualValues(t, 3, l.Jobs[0]["max_retries"], "list -o json: %v", l.Jobs[0])
		})
	}
}

// TestCLIDelaysCountOnTheServersClock: add --delay D and requeue --in D
// make a job due D from now by the Redis server's clock, whether the
// server's clock is ahead of this machine's or behind it (on miniredis).
func TestCLIDelaysCountOnTheServersClock(t *testing.T) {
	for _, b := range testutil.Backends(t) {
		if b.Mini == nil {
			continue
		}
		for _, skew := range []time.Duration{10 * time.Minute, -10 * time.Minute} {
			t.Run(b.Name+"/"+skew.String(), func(t *testing.T) {
				e := newEnv(t, b)
				park(t, e, "u1")
				server := time.Now().Add(skew).Truncate(time.Millisecond)
				b.Mini.SetTime(server) // the embedded clock stands still from here
				want := server.Add(5 * time.Minute)
				e.ok(t, "add", "--create", "orders", "o1", "--delay", "5m")
				require.WithinDuration(t, want, e.job(t, "orders", "o1").RunAt, time.Second, "add --delay 5m")
				e.ok(t, "requeue", "unack", "orders", "u1", "--in", "5m")
				require.WithinDuration(t, want, e.job(t, "orders", "u1").RunAt, time.Second, "requeue --in 5m")
			})
		}
	}
}
