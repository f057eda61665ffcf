package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

// syncBuffer is a bytes.Buffer the exporter writes while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// The example runs on miniredis for a short while and stops by itself; its
// /metrics shows the lateness histogram of the jobs it ran, and it printed
// their spans, producer and consumer.
func TestExampleServesMetricsAndPrintsSpans(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer func() { _ = rdb.Close() }()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var spans syncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second) // what -for does
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run(ctx, rdb, ln, &spans) }()

	url := "http://" + ln.Addr().String() + "/metrics"
	var metrics string
	deadline := time.Now().Add(10 * time.Second)
	// The counters exist at zero from the start; a lateness sample shows
	// that a job started, a processed count that its outcome was applied
	// (a job starts before its outcome lands, so the test waits for both).
	processed := regexp.MustCompile(`redeq_jobs_processed_total\{outcome="[a-z]+",prefix="observability",topic="order.close"\} [1-9]`)
	for !(strings.Contains(metrics, `redeq_job_lateness_seconds_count{first_attempt="true",prefix="observability",topic="order.close"}`) &&
		processed.MatchString(metrics)) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		resp, err := http.Get(url)
		if err != nil {
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		metrics = string(b)
	}
	require.Contains(t, metrics, `redeq_job_lateness_seconds_bucket{first_attempt="true",prefix="observability",topic="order.close",le="0.001"}`)
	require.Regexp(t, `redeq_jobs_processed_total\{outcome="[a-z]+",prefix="observability",topic="order.close"\} [1-9]`, metrics)
	require.Contains(t, metrics, `redeq_oldest_overdue_seconds{prefix="observability",topic="order.close"}`)

	select {
	case err := <-done:
		require.NoError(t, err, "run stops by itself when its ctx ends")
	case <-time.After(15 * time.Second):
		t.Fatal("run did not stop")
	}
	out := spans.String()
	for _, want := range []string{`"Name":"send order.close"`, `"Name":"process order.close"`, `"Key":"redeq.outcome"`} {
		require.True(t, strings.Contains(out, want), "the spans printed contain %s", want)
	}
}
