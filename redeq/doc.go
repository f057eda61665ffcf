// Package redeq runs delayed jobs on Redis. A service adds jobs by id with a
// delay, registers one listener per topic, and redeq delivers each job to
// one listener instance at its due time, never before, at least once.
//
// Import it as github.com/redeq-go/redeq/redeq, with
// github.com/redeq-go/redeq/config for the settings; the other packages of
// the module are its building blocks and need not be imported.
//
//	c, _ := redeq.New(rdb, config.Default())     // or redeq.Open(ctx, "redeq.yaml")
//	c.Use(logging)                               // middleware: func(Handler) Handler
//	c.Register(redeq.Typed("order.close", func(ctx context.Context, o Order) error {
//		return closeIfUnpaid(ctx, o) // nil acks; an error retries
//	}))
//	redeq.AddTyped(ctx, c, "order.close", "42", Order{ID: 42}, 30*time.Minute)
//	c.Run(ctx)                                   // Start; Shutdown on ctx done or SIGTERM
//
// Every type a service touches is declared here, with its fields and
// methods: Job and its State; Listener (Topic, OnJob) with the optional
// FinalRetryListener and WorkerCounter, BroadcastListener, and the
// Channel a handler answers through (Ack, Rejoin); Handler and
// Middleware; Observer and ReturnObserver, told the Outcome of each
// delivery; Stats, TopicInfo, Page, Minute. The errors are in one place:
// sentinels for errors.Is, *BatchError and *MismatchError for errors.As.
//
// Producers: Add, AddBatch, Put (upsert), the typed AddTyped, PutTyped,
// AddFor and PutFor (a Payload names its topic), Get, Delete, Reschedule,
// Update. Consumers: Register (a Listener, ListenerFunc, Typed, TypedFor,
// TypedWithChannel), RegisterBroadcast, Use, Observe, Start, Run,
// Shutdown; every handler finds its job with JobFromContext. Tests of a
// service: package github.com/redeq-go/redeq/redeqtest.
// Operators: Stats, Topics, List, UnAcked, ProcessUnAck, RequeueUnAck,
// DeadJobs, RequeueDead, Pause, Resume.
package redeq
