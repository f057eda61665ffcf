// Observability: a service that traces its jobs with OpenTelemetry (spans
// printed to stdout) and serves Prometheus metrics on /metrics, both from
// one client.
//
//	cd examples/observability && go run .            # serves until Ctrl-C
//	curl -s localhost:2112/metrics | grep redeq_
//	go run . -for 5s                                 # or REDEQ_EXAMPLE_FOR=5s: stop by itself
//
// It is a module of its own, so that the core module needs no OpenTelemetry
// or Prometheus package. Without REDIS_ADDR it runs on an embedded
// miniredis.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/redeq-go/redeq/config"
	redeqotel "github.com/redeq-go/redeq/contrib/otel"
	redeqprom "github.com/redeq-go/redeq/contrib/prometheus"
	"github.com/redeq-go/redeq/examples/internal/demo"
	"github.com/redeq-go/redeq/redeq"
)

func main() {
	addr := flag.String("addr", "localhost:2112", "where /metrics is served")
	runFor := flag.Duration("for", 0, "stop after this long (0: until SIGINT/SIGTERM); env REDEQ_EXAMPLE_FOR")
	flag.Parse()
	if v := os.Getenv("REDEQ_EXAMPLE_FOR"); v != "" && *runFor == 0 {
		d, err := time.ParseDuration(v)
		demo.Check(err)
		*runFor = d
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *runFor > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *runFor)
		defer cancel()
	}
	ln, err := net.Listen("tcp", *addr)
	demo.Check(err)
	fmt.Printf("metrics on http://%s/metrics\n", ln.Addr())
	rdb, closeRedis := demo.Redis()
	defer closeRedis()
	demo.Check(run(ctx, rdb, ln, os.Stdout))
}

// run serves jobs and /metrics on ln until ctx is done, printing each
// finished span to spans.
func run(ctx context.Context, rdb redis.UniversalClient, ln net.Listener, spans io.Writer) error {
	exp, err := stdouttrace.New(stdouttrace.WithWriter(spans))
	if err != nil {
		return err
	}
	// A real service batches its spans (sdktrace.WithBatcher) to an OTLP
	// collector; here each is printed as it ends.
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()

	cfg := config.Default()
	cfg.Prefix = "observability"
	c, err := redeq.New(rdb, cfg)
	if err != nil {
		return err
	}
	// One Observer per client: the OpenTelemetry and Prometheus ones are
	// combined; the middleware starts the consumer spans.
	in, err := redeqotel.New(redeqotel.Options{TracerProvider: tp})
	if err != nil {
		return err
	}
	col := redeqprom.New(c, redeqprom.Options{CacheFor: time.Second})
	reg := prometheus.NewRegistry()
	if err := reg.Register(col); err != nil {
		return err
	}
	if err := c.Use(in.Middleware()); err != nil {
		return err
	}
	if err := c.Observe(redeq.Observers(in, col)); err != nil {
		return err
	}
	// Every third order fails once, then succeeds on its retry.
	if err := c.Register(redeq.ListenerFunc("order.close", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
		var order int
		if _, err := fmt.Sscanf(string(job.Body), `{"order":%d}`, &order); err != nil {
			return err
		}
		if order%3 == 0 && job.Attempt == 0 {
			return errors.New("payment service unavailable")
		}
		ch.Ack()
		return nil
	}, redeq.WithRetry(3, 200*time.Millisecond))); err != nil {
		return err
	}

	srv := &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer func() {
		_ = srv.Shutdown(context.Background())
		<-served
	}()

	if err := c.Start(ctx); err != nil {
		return err
	}
	// A producer: an order every 100ms, to be closed 50ms later, each Add
	// in a producer span whose trace the delivery continues.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return c.Shutdown(context.Background())
		case <-tick.C:
		}
		job := &redeq.Job{Topic: "order.close", ID: fmt.Sprintf("order-%d-%d", time.Now().UnixNano(), i),
			Body: []byte(fmt.Sprintf(`{"order":%d}`, i)), Delay: 50 * time.Millisecond}
		if err := in.Add(ctx, c, job); err != nil && ctx.Err() == nil {
			return err
		}
	}
}
