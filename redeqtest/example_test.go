package redeqtest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redeq-go/redeq/redeq"
	"github.com/redeq-go/redeq/redeqtest"
)

// A test moves the clock of an Env: the job due in 30 minutes runs when
// the clock gets there, at once, and not before.
func ExampleEnv_Advance() {
	t := &testing.T{} // in a test, the test's own t
	env := redeqtest.New(t)
	defer env.Close() // in a test, t.Cleanup does it
	env.Start(redeq.Typed("order.close", func(ctx context.Context, id string) error {
		fmt.Println("closing order", id)
		return nil
	}))
	ctx := context.Background()
	if _, err := redeq.AddTyped(ctx, env.Client(), "order.close", "42", "42", 30*time.Minute); err != nil {
		panic(err)
	}
	env.Advance(29 * time.Minute)
	env.WaitIdle("order.close")
	fmt.Println("after 29m:", env.RequireAdded("order.close", "42").State)
	env.Advance(time.Minute)
	env.WaitIdle("order.close")
	env.RequireNotAdded("order.close", "42")
	fmt.Println("after 30m: gone")
	// Output:
	// after 29m: scheduled
	// closing order 42
	// after 30m: gone
}

// Work runs one job through a listener and tells what a client would do
// with it: here the last retry of a failing partner call goes dead, and
// the typed final-retry callback is told.
func ExampleWork() {
	l := redeq.Typed("partner.call", func(ctx context.Context, url string) error {
		return errors.New("503 from partner")
	}, redeq.WithRetry(5, time.Minute, 5*time.Minute, 10*time.Minute, 30*time.Minute, time.Hour),
		redeq.WithTypedFinalRetry(func(ctx context.Context, url string, lastErr error) {
			job, _ := redeq.JobFromContext(ctx)
			fmt.Printf("alert: %s failed %d times: %v\n", url, job.Attempt, lastErr)
		}))

	ctx := context.Background()
	res, err := redeqtest.Work(ctx, l, &redeq.Job{Body: []byte(`"https://partner.example/hook"`), Attempt: 2})
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Outcome, res.RetryIn, res.Err)
	res, _ = redeqtest.Work(ctx, l, &redeq.Job{Body: []byte(`"https://partner.example/hook"`), Attempt: 5})
	fmt.Println(res.Outcome, res.FinalRetried)
	// Output:
	// retry 10m0s 503 from partner
	// alert: https://partner.example/hook failed 6 times: 503 from partner
	// dead true
}
