// Package redeqtest is what a service's own tests need of redeq, with no
// Redis installed: a client on an embedded Redis whose clock the test
// moves, a way to run one job through a listener and see its outcome,
// and checks of what a piece of code added.
//
// An Env is the client and its Redis; time stands still in it until the
// test calls Advance, so a job added with a 30-minute delay runs when
// the test advances 30 minutes, at once, and not before:
//
//	env := redeqtest.New(t)                 // closed by t.Cleanup
//	svc := NewOrderService(env.Client())    // the service adds jobs through it
//	env.Start(svc.Listeners()...)           // register and start, as main does
//	svc.PlaceOrder(ctx, "42")               // adds "order.close" 42, due in 30m
//	env.RequireAdded("order.close", "42")
//	env.Advance(30 * time.Minute)
//	env.WaitIdle("order.close")             // the handler ran, its outcome is applied
//	env.RequireNotAdded("order.close", "42")
//
// Work runs one job through any Listener (Typed, TypedWithChannel,
// ListenerFunc, a type of one's own with FinalRetry) synchronously, with
// no Redis, and returns what a client would do with it: OutcomeAck,
// OutcomeRejoin with its delay, OutcomeUnAck, OutcomeRetry with the error
// and the wait, OutcomeDead after the last retry (FinalRetry ran). A
// panic is a retry, as in a client.
//
//	res, err := redeqtest.Work(ctx, svc.CloseListener(), &redeq.Job{Body: body, Attempt: 3})
//	// 3 failures so far, the config's 3 retries spent: this one is the last,
//	// res.Outcome == redeq.OutcomeDead, res.FinalRetried, res.Err
//
// Jobs lists a topic's jobs in every state, Drain runs a topic's waiting
// jobs now whatever their due time, and NewClient adds another instance
// on the same Redis and clock.
package redeqtest
