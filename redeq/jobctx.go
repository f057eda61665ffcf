package redeq

import "context"

// jobKey is the context key of the job a handler runs.
type jobKey struct{}

// JobFromContext returns the job whose handler ctx was given to: its ID,
// Attempt, Headers, LastError and the rest, inside a listener's OnJob
// (ListenerFunc, Typed, TypedWithChannel, a listener of its own type) and
// its FinalRetry, and whatever they call with ctx. ok is false outside
// a handler. The job is the one the handler receives: read it, do not
// change it.
func JobFromContext(ctx context.Context) (job *Job, ok bool) {
	if ctx == nil {
		return nil, false
	}
	job, ok = ctx.Value(jobKey{}).(*Job)
	return job, ok && job != nil
}

// ContextWithJob returns ctx carrying job, as redeq gives it to a
// handler: JobFromContext(ctx) returns job. redeq sets it itself; this is
// for calling a handler function directly, in its own tests (package
// redeqtest runs whole listeners).
func ContextWithJob(ctx context.Context, job *Job) context.Context {
	return context.WithValue(ctx, jobKey{}, job)
}
