package redeq

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"syscall"

	"github.com/redeq-go/redeq/pool"
)

// Run starts the client, waits until ctx is done or the process receives
// SIGINT or SIGTERM, then shuts the client down, giving running handlers
// ShutdownTimeout to finish. It returns nil after a clean stop, the error
// of Start, or the error of Shutdown (which wraps
// context.DeadlineExceeded when handlers had to be abandoned); the client
// is closed when it returns.
func (c *Client) Run(ctx context.Context) error {
	if ctx == nil {
		return pool.ErrNilContext
	}
	if err := c.Start(ctx); err != nil {
		_ = c.Shutdown(context.WithoutCancel(ctx))
		return err
	}
	sig, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-sig.Done()
	err := c.Shutdown(context.WithoutCancel(ctx))
	if errors.Is(err, ErrClientClosed) {
		return nil // shut down by someone else meanwhile
	}
	return err
}
