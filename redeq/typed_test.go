package redeq_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/redeq"
)

// invoice is a payload bound to its topic.
type invoice struct {
	Number string `json:"number"`
}

func (invoice) Topic() string { return "invoice.send" }

// upperCodec is JSON with a marker, so a test tells which codec encoded a
// body.
type upperCodec struct{}

func (upperCodec) Marshal(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	return append([]byte("U:"), b...), err
}

func (upperCodec) Unmarshal(data []byte, v any) error {
	s, ok := strings.CutPrefix(string(data), "U:")
	if !ok {
		return json.Unmarshal(data, v) // refused below: no marker
	}
	return json.Unmarshal([]byte(s), v)
}

// TestAddTyped: AddTyped returns the id it used, the UUID it assigned for
// "" included, so the job can be read, moved and deleted; its options set
// the due time, the headers and the retry schedule.
func TestAddTyped(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		id, err := redeq.AddTyped(ctx, e.c, "typed.add", "", order{ID: 1}, time.Hour)
		require.NoError(t, err)
		require.NotEmpty(t, id, "the assigned id is returned")
		job, err := e.c.Get(ctx, "typed.add", id)
		require.NoError(t, err)
		require.JSONEq(t, `{"id":1,"email":""}`, string(job.Body))

		at := time.Now().Add(2 * time.Hour).Truncate(time.Millisecond)
		id, err = redeq.AddTyped(ctx, e.c, "typed.add", "with-opts", order{ID: 2}, time.Minute,
			redeq.RunAt(at), redeq.WithHeader("tenant", "acme"), redeq.WithHeaders(map[string]string{"trace": "t1"}),
			redeq.WithJobRetry(3, time.Second, 2*time.Second))
		require.NoError(t, err)
		require.Equal(t, "with-opts", id)
		job, err = e.c.Get(ctx, "typed.add", id)
		require.NoError(t, err)
		require.True(t, at.Equal(job.RunAt), "RunAt wins over the delay: %v", job.RunAt)
		require.Equal(t, map[string]string{"tenant": "acme", "trace": "t1"}, job.Headers)
		require.Equal(t, 3, job.MaxRetries)
		require.Equal(t, []time.Duration{time.Second, 2 * time.Second}, job.RetryIntervals)

		_, err = redeq.AddTyped(ctx, e.c, "typed.add", "with-opts", order{ID: 3}, 0)
		require.ErrorIs(t, err, redeq.ErrJobExists)
		_, err = redeq.AddTyped(ctx, e.c, "typed.add", "nil-opt", order{ID: 3}, 0, nil)
		require.ErrorIs(t, err, redeq.ErrInvalidArgument)
		_, err = redeq.AddTyped(ctx, e.c, "typed.add", "bad", make(chan int), 0)
		require.ErrorIs(t, err, redeq.ErrInvalidJob, "a value that cannot encode")
		for _, id := range []string{"nil-opt", "bad"} {
			_, err = e.c.Get(ctx, "typed.add", id)
			require.ErrorIs(t, err, redeq.ErrJobNotFound, "a refused call writes nothing")
		}
	})
}

// TestPutTyped: PutTyped replaces a waiting job of its id with the new
// value and due time, and adds one when there is none, returning the id.
func TestPutTyped(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		id, err := redeq.PutTyped(ctx, e.c, "typed.put", "", order{ID: 1}, time.Hour)
		require.NoError(t, err)
		require.NotEmpty(t, id)
		_, err = redeq.PutTyped(ctx, e.c, "typed.put", id, order{ID: 2}, 2*time.Hour, redeq.WithHeader("v", "2"))
		require.NoError(t, err)
		job, err := e.c.Get(ctx, "typed.put", id)
		require.NoError(t, err)
		require.JSONEq(t, `{"id":2,"email":""}`, string(job.Body))
		require.Equal(t, "2", job.Headers["v"])
		st := stats(t, e.c, "typed.put")
		require.Equal(t, int64(1), st.Pool, "replaced, not added beside")
	})
}

// TestTypedProducersUseTheListenersCodec: a typed producer encodes with
// the codec of the topic's typed listener registered with its client
// (WithCodec), so the listener decodes what it adds; WithJobCodec wins.
func TestTypedProducersUseTheListenersCodec(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		got := make(chan order, 2)
		l := redeq.Typed("typed.codec", func(ctx context.Context, o order) error {
			got <- o
			return nil
		}, redeq.WithCodec(upperCodec{}))
		startWith(t, e.c, l)
		_, err := redeq.AddTyped(ctx, e.c, "typed.codec", "1", order{ID: 1}, time.Hour)
		require.NoError(t, err)
		job, err := e.c.Get(ctx, "typed.codec", "1")
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(string(job.Body), "U:"), "encoded with the listener's codec: %s", job.Body)
		_, err = redeq.AddTyped(ctx, e.c, "typed.codec", "2", order{ID: 2}, 0)
		require.NoError(t, err)
		select {
		case o := <-got:
			require.Equal(t, order{ID: 2}, o)
		case <-time.After(10 * time.Second):
			t.Fatal("the listener did not decode what AddTyped added")
		}
		_, err = redeq.AddTyped(ctx, e.c, "typed.codec", "3", order{ID: 3}, time.Hour, redeq.WithJobCodec(redeq.JSON))
		require.NoError(t, err)
		job, err = e.c.Get(ctx, "typed.codec", "3")
		require.NoError(t, err)
		require.JSONEq(t, `{"id":3,"email":""}`, string(job.Body), "WithJobCodec wins")
	})
}

// TestPayloadBoundToItsTopic: a payload type with a Topic method is added
// to its topic by AddFor and PutFor and heard by TypedFor; AddTyped,
// PutTyped and Typed refuse it for another topic, writing nothing.
func TestPayloadBoundToItsTopic(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		got := make(chan invoice, 1)
		require.NoError(t, e.c.Register(redeq.TypedFor(func(ctx context.Context, v invoice) error {
			got <- v
			return nil
		})))
		err := e.c.Register(redeq.Typed("order.close", func(ctx context.Context, v invoice) error { return nil }))
		require.ErrorIs(t, err, redeq.ErrInvalidArgument)
		require.ErrorContains(t, err, `bound to topic "invoice.send", not "order.close"`)
		err = e.c.Register(redeq.Typed("order.close", func(ctx context.Context, v *invoice) error { return nil }))
		require.ErrorContains(t, err, `bound to topic "invoice.send"`, "a pointer to a payload is bound too")

		_, err = redeq.AddTyped(ctx, e.c, "order.close", "wrong", invoice{Number: "1"}, 0)
		require.ErrorIs(t, err, redeq.ErrInvalidJob)
		require.ErrorContains(t, err, `bound to topic "invoice.send"`)
		_, err = redeq.PutTyped(ctx, e.c, "order.close", "wrong", invoice{Number: "1"}, 0)
		require.ErrorIs(t, err, redeq.ErrInvalidJob)
		_, err = e.c.Get(ctx, "order.close", "wrong")
		require.ErrorIs(t, err, redeq.ErrJobNotFound, "nothing written")

		startWith(t, e.c)
		id, err := redeq.PutFor(ctx, e.c, "", invoice{Number: "9"}, time.Hour)
		require.NoError(t, err)
		_, err = e.c.Get(ctx, "invoice.send", id)
		require.NoError(t, err, "PutFor stores in the payload's topic")
		_, err = redeq.AddFor(ctx, e.c, "inv-1", invoice{Number: "1"}, 0)
		require.NoError(t, err)
		select {
		case v := <-got:
			require.Equal(t, invoice{Number: "1"}, v)
		case <-time.After(10 * time.Second):
			t.Fatal("TypedFor did not hear its payload")
		}
	})
}
