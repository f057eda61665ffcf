package redeq

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redeq-go/redeq/bucket"
	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/pool"
)

// ErrFormatRefused is returned by UpgradeFormat while a client that cannot
// read the current format of the job state is running; the error names
// those clients.
var ErrFormatRefused = errors.New("redeq: clients of an older version are running")

// UpgradeFormat switches the namespace (the prefix) to the current format
// of the job state, in which a ready job keeps its due time in its one
// state field: fewer commands per job (docs/operations.md, "Rolling
// upgrades"). Until then clients of this version read both formats and
// write the older one, which clients of the version before read, so that
// a fleet of both loses nothing while it rolls.
//
// It refuses, with ErrFormatRefused naming them and writing nothing,
// while any live client records no such format: every client of the
// older version must be stopped first. The clients pick the switch up at
// their next announcement (ScanInterval). After it, never start a client
// of the older version again: it would drop the jobs it met in the
// current format. A rerun after a lost reply finds the format in force
// and returns nil. A fresh namespace (no topic and no other client at a
// client's Start) is switched at that Start, with no call needed.
func (c *Client) UpgradeFormat(ctx context.Context) error {
	if ctx == nil {
		return pool.ErrNilContext
	}
	// The consumers' own records first: the names a person knows them by.
	cons, err := c.Consumers(ctx)
	if err != nil {
		return fmt.Errorf("upgrade format: %w", err)
	}
	names := map[string]string{}
	var old []string
	for _, ci := range cons {
		names[ci.ID] = ci.Name
		if !ci.Silent && ci.Format < keys.FormatCurrent {
			old = append(old, ci.ID)
		}
	}
	if len(old) == 0 {
		// Atomic with the switch: every started client announces itself
		// and the format it reads in one set.
		f := bucket.NewFleet(c.rdb, c.cfg.Prefix, c.group.ID(), c.cfg.ScanInterval)
		if old, err = f.UpgradeFormat(ctx); err != nil {
			return fmt.Errorf("upgrade format: %w", err)
		}
	}
	if len(old) == 0 {
		return nil
	}
	named := make([]string, len(old))
	for i, id := range old {
		named[i] = id
		if n := names[id]; n != "" {
			named[i] = fmt.Sprintf("%s (%s)", id, n)
		}
	}
	return fmt.Errorf("%w: %s; stop them, then upgrade", ErrFormatRefused, strings.Join(named, ", "))
}

// readFormat reads, at Start, the format the namespace writes, after
// switching a fresh one (no topic yet) to the current format. A failure
// holds up nothing: the client writes the older format, which every
// client reads, until an announcement reads the namespace's. Start waits
// StepTimeout for it at most, so that a hung master of the topic set or
// of the format flag does not hold up Start; the read goes on under bg,
// bounded as long again, and the format it reads is in force once it
// does.
func (c *Client) readFormat(ctx context.Context, f *bucket.Fleet, bg *sync.WaitGroup) {
	step := bucket.MoverConfig{ScanInterval: c.cfg.ScanInterval}.StepTimeout()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*step)
	done := make(chan struct{})
	bg.Go(func() {
		defer close(done)
		defer cancel()
		c.readFormatNow(rctx, f)
	})
	timer := time.NewTimer(step)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		c.env.Logger.Warn("redeq: start: no answer about the job state format; it is read at the next announcement", "within", step)
	case <-ctx.Done():
	}
}

func (c *Client) readFormatNow(ctx context.Context, f *bucket.Fleet) {
	fresh := false
	if !c.older {
		n, err := c.rdb.SCard(ctx, keys.Topics(c.cfg.Prefix)).Result()
		if err != nil {
			c.env.Logger.Warn("redeq: start: cannot read the topics; the job state format is read at the next announcement", "err", err)
			return
		}
		fresh = n == 0
	}
	if err := f.ReadFormat(ctx, fresh); err != nil {
		c.env.Logger.Warn("redeq: start: cannot read the job state format; it is read at the next announcement", "err", err)
	}
}
