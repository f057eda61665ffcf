// Package benchdrain measures what a middleware or an observer costs per
// job: b.N due jobs, a no-op handler, 16 workers, on the server at
// REDIS_ADDR, with the CPU time per job of the client and of the server
// beside the time. The integrations' benchmarks use it (contrib/otel,
// contrib/prometheus, examples/observability), and a service can measure
// its own middleware the same way. It uses only redeq's public API.
package benchdrain
