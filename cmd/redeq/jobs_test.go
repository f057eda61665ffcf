package main

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
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

// TestCLIListJSONGivesGetsFieldsInFlight: for a job in flight, list -o json
// gives the fields get -o json gives it, with the same values, and no field
// get leaves out.
func TestCLIListJSONGivesGetsFieldsInFlight(t *testing.T) {
	for _, b := range testutil.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			e := newEnv(t, b)
			ctx := context.Background()
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "orders", ID: "o1", Body: []byte("hello")}))
			release := make(chan struct{})
			w, err := redeq.New(e.b.New(t), e.c.Config())
			require.NoError(t, err)
			require.NoError(t, w.Register(redeq.ListenerFunc("orders", func(_ context.Context, _ *redeq.Job, ch *redeq.Channel) error {
				<-release
				ch.Ack()
				return nil
			})))
			require.NoError(t, w.Start(ctx))
			t.Cleanup(func() { _ = w.Shutdown(context.Background()) })
			defer close(release)
			waitState(t, e.c, "o1", redeq.StateInFlight)

			var g map[string]any
			require.NoError(t, json.Unmarshal([]byte(e.ok(t, "-o", "json", "get", "orders", "o1")), &g))
			var l struct{ Jobs []map[string]any }
			require.NoError(t, json.Unmarshal([]byte(e.ok(t, "-o", "json", "list", "orders", "inflight")), &l))
			require.Len(t, l.Jobs, 1)
			for k, v := range g {
				require.Contains(t, l.Jobs[0], k, "list -o json lacks get's %q", k)
				require.Equal(t, v, l.Jobs[0][k], k)
			}
			for k, v := range l.Jobs[0] {
				require.Contains(t, g, k, "list -o json gives %q (%v), get -o json does not", k, v)
			}
		})
	}
}
