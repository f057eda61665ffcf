package redeqotel

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/redeq-go/redeq/redeq"
)

// No delivery leaves its record behind, whatever became of it (acked,
// failed, panicked), with or without the middleware, and when the same
// job is delivered twice before either ends: a long-running client does
// not grow the records with the jobs it ran.
func TestNoRecordOutlivesItsDelivery(t *testing.T) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.TraceIDRatioBased(0.5)))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	in, err := New(Options{TracerProvider: tp, MeterProvider: metricnoop.NewMeterProvider()})
	require.NoError(t, err)
	mw := in.Middleware()
	var wg sync.WaitGroup
	for w := range 100 {
		wg.Go(func() {
			for i := range 50 {
				job := &redeq.Job{Topic: fmt.Sprint("t", (w*50+i)%1500), ID: fmt.Sprint(w, "-", i)}
				in.JobDelivered(job, time.Duration(i-5)*time.Millisecond)
				var err error
				if i%3 != 0 { // the third without the middleware
					func() {
						defer func() {
							if p := recover(); p != nil {
								err = fmt.Errorf("panicked: %v", p)
							}
						}()
						err = mw(func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
							switch i % 3 {
							case 1:
								return errors.New("failed")
							}
							panic("boom")
						})(context.Background(), job, nil)
					}()
				}
				in.JobDone(job, redeq.OutcomeRetry, time.Millisecond, err)
			}
		})
	}
	wg.Wait()
	twice := &redeq.Job{Topic: "t", ID: "twice"}
	in.JobDelivered(twice, 0)
	in.JobDelivered(twice, 0)
	in.JobDone(twice, redeq.OutcomeAck, 0, nil)
	in.JobDone(twice, redeq.OutcomeAck, 0, nil)
	for i := range in.live {
		require.Empty(t, in.live[i].ds, "shard %d", i)
	}
}
