// Package testutil gives tests the Redis deployments they run against:
// always an embedded miniredis, plus a real redis-server when REDIS_ADDR is
// set and a real Redis Cluster when REDIS_CLUSTER_ADDRS (comma-separated
// seed addresses) is set. Each test works under a prefix of its own, so
// suites share a server without seeing each other's keys.
package testutil
